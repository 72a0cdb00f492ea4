/* First-class heaps (tsalloc.h, docs/heaps.md): ts_heap_new makes a heap like
 * a thread's, owned by no thread; ts_heap_malloc and the others allocate from
 * it; ts_heap_destroy frees all its blocks at once by giving its pages back
 * to their segments, ts_heap_delete hands its pages to the calling thread's
 * heap; ts_heap_visit walks its live blocks and ts_heap_stats counts them.
 *
 * Invariants (besides those of internal.h):
 * - heap->user is TS_HEAP_USER_MAGIC from ts_heap_new until heap.c's
 *   heap_free; such a heap is in heaps_all (statistics) but the purge
 *   thread's rescue and sweep skip it, and it never adopts abandoned
 *   segments (segment.c): no block of its pages is ever held by another
 *   thread's remote batch either (free.c pushes them at once), so when the
 *   caller says no free into it is running, every page and every block of
 *   it is the heap's alone, and destroy may release them without looking.
 * - A free block carries its free mark wherever it waits (internal.h), and a
 *   live one does not: ts_heap_visit tells live blocks by the mark alone,
 *   without walking free lists, so blocks waiting in another thread's batch
 *   or in the `delayed` list count as free.
 * - Large blocks from such a heap carry it in their large.c table entry
 *   (heap->large_count and large_bytes follow them); destroy frees them, delete
 *   clears the owner.
 *
 * Lock order: no lock of its own. Destroy and delete take what abandoning a
 * heap takes (heap.c), and each large-table stripe alone.
 */
#include "core/fastpath.h"
#include "core/internal.h"

#include <errno.h>
#include <string.h>

#include "tsalloc.h"

#define TS_HEAP_USER_MAGIC 0x68656170u /* "heap" */

/* ---- checks ---------------------------------------------------------------------- */

static TS_NORETURN void not_live(const char *func, const ts_heap_t *h) {
    _ts_fatal("%s(): destroyed or invalid heap %p", func, (const void *)h);
}

/* h is a live heap of ts_heap_new, or the calling thread's default heap. */
static bool heap_ok(const ts_heap_t *h) {
    return h->user == TS_HEAP_USER_MAGIC || (h == _ts_tls_heap && h->state == TS_HEAP_ACTIVE);
}

/* Entering a call on h: checked always for the rare calls, in the checked
 * build for allocations; there, a call already running on h (another
 * thread's, or one of h's from a visitor) aborts. */
static void heap_enter(ts_heap_t *h, const char *func) {
    if (!heap_ok(h)) not_live(func, h);
    if (TS_CHECKED && h->user && atomic_exchange_explicit(&h->user_busy, 1, memory_order_acquire))
        _ts_fatal("%s(): concurrent use of heap %p", func, (void *)h);
}

static void heap_leave(ts_heap_t *h) {
    if (TS_CHECKED && h->user) atomic_store_explicit(&h->user_busy, 0, memory_order_release);
}

/* ---- making heaps ------------------------------------------------------------------ */

TS_EXPORT ts_heap_t *ts_heap_new(void) {
    _ts_process_init();
    /* The calling thread's heap first: its frees of the new heap's blocks
     * go through it, and main's heap keeps the purge thread's exit check
     * quiet (heap.c). */
    if (_ts_tls_heap == &_ts_heap_empty) (void)_ts_thread_init();
    ts_heap_t *h = _ts_heap_new(false, TS_HEAP_USER_MAGIC);
    if (!h) errno = ENOMEM;
    return h;
}

TS_EXPORT ts_heap_t *ts_heap_get_default(void) {
    ts_heap_t *h = _ts_tls_heap;
    if (h->state == TS_HEAP_ACTIVE) return h;
    if (h == &_ts_heap_dead) return NULL; /* past its destructor: the shared heap's */
    h = _ts_thread_init();
    if (!h) errno = ENOMEM;
    return h;
}

/* ---- allocation ---------------------------------------------------------------------- */

/* Beyond ts_heap_malloc's fast path. Large blocks join h's. */
static void *heap_alloc(ts_heap_t *h, size_t size, size_t align, bool zero) {
    if (!h->user) return _ts_alloc_aligned(size, align, zero); /* the default heap */
    if (size > (size_t)PTRDIFF_MAX) {
        errno = ENOMEM;
        return NULL;
    }
    bool large = align <= TS_MIN_ALIGN ? size > TS_CLASS_MAX_SIZE
                                       : _ts_class_aligned(size, align) >= TS_CLASS_COUNT;
    void *p;
    if (large) {
        p = _ts_large_alloc(size, align <= TS_MIN_ALIGN ? 0 : align, zero);
        if (p) {
            h->large_allocs++;
            _ts_large_own(p, h);
            ts_heap_pages_grew(h, 0); /* the peak */
        }
    } else {
        p = _ts_heap_alloc(h, size, align, zero);
    }
    ts_purge_safe_point();
    return p;
}

TS_EXPORT void *ts_heap_malloc(ts_heap_t *h, size_t size) {
    if (TS_CHECKED) heap_enter(h, "ts_heap_malloc");
    void *p;
    size_t slot = (size + 15) >> 4;
    ts_page_t *page;
    ts_block_t *block;
    if (ts_likely(size <= TS_DIRECT_MAX) && (block = (page = h->direct[slot])->free) != NULL) {
        h->alloc_slot[slot]++;
        p = ts_pop(page, block);
    } else {
        p = heap_alloc(h, size, 0, false);
    }
    if (TS_CHECKED) heap_leave(h);
    return p;
}

TS_EXPORT void *ts_heap_calloc(ts_heap_t *h, size_t count, size_t size) {
    size_t total;
    if (__builtin_mul_overflow(count, size, &total)) {
        errno = ENOMEM;
        return NULL;
    }
    if (TS_CHECKED) heap_enter(h, "ts_heap_calloc");
    void *p = heap_alloc(h, total, 0, true);
    if (TS_CHECKED) heap_leave(h);
    return p;
}

TS_EXPORT void *ts_heap_aligned_alloc(ts_heap_t *h, size_t align, size_t size) {
    if (!ts_is_pow2(align)) {
        errno = EINVAL;
        return NULL;
    }
    if (TS_CHECKED) heap_enter(h, "ts_heap_aligned_alloc");
    void *p = heap_alloc(h, size, align, false);
    if (TS_CHECKED) heap_leave(h);
    return p;
}

/* realloc's new block, from the heap being reallocated into. */
static void *realloc_alloc(void *h, size_t size) {
    if (TS_CHECKED) heap_enter(h, "ts_heap_realloc");
    void *q = heap_alloc(h, size, 0, false);
    if (TS_CHECKED) heap_leave(h);
    return q;
}

TS_EXPORT void *ts_heap_realloc(ts_heap_t *h, void *p, size_t size) {
    if (!p) return ts_heap_malloc(h, size);
    if (size == 0) { /* as realloc (designs/family.h) */
        ts_core_free_inline(p);
        return NULL;
    }
    /* A large block stays where it is or is moved by the OS, its owner kept. */
    return _ts_realloc_with(p, size, "ts_heap_realloc", realloc_alloc, h);
}

TS_EXPORT char *ts_heap_strndup(ts_heap_t *h, const char *s, size_t n) {
    size_t len = strnlen(s, n);
    char *p = ts_heap_malloc(h, len + 1);
    if (p) {
        memcpy(p, s, len);
        p[len] = '\0';
    }
    return p;
}

TS_EXPORT char *ts_heap_strdup(ts_heap_t *h, const char *s) {
    return ts_heap_strndup(h, s, SIZE_MAX);
}

/* ---- destroy and delete --------------------------------------------------------------- */

TS_EXPORT void ts_heap_destroy(ts_heap_t *h) {
    if (!h) return;
    if (h->user != TS_HEAP_USER_MAGIC && h == _ts_tls_heap)
        _ts_fatal("ts_heap_destroy(): the default heap %p cannot be destroyed", (void *)h);
    heap_enter(h, "ts_heap_destroy");
    /* Every free into h has returned (the caller's part), so no hand-over
     * to a full page is under way; the blocks handed over are h's. Its
     * pages are those in use in its segments: back by segment, in index
     * order, not by walking its page lists. */
    (void)atomic_exchange_explicit(&h->delayed, NULL, memory_order_acquire);
    uint64_t now = _ts_os_now_ns();
    bool wake = false;
    for (ts_segment_t *seg = h->segments; seg; seg = seg->next)
        wake |= _ts_segment_drop_pages(seg, now);
    memset(h->queue, 0, sizeof h->queue);
    h->full.first = h->full.last = NULL;
    memset(h->empty_big, 0, sizeof h->empty_big);
    h->big_linger = NULL;
    h->fresh = NULL;
    for (unsigned i = 0; i < TS_DIRECT_SLOTS; i++) h->direct[i] = &_ts_page_empty;
    for (unsigned i = 0; i < TS_CLASS_COUNT; i++) h->head[i] = &_ts_page_empty;
    _ts_large_heap_end(h, true);
    heap_leave(h);
    _ts_heap_abandon_to(h, NULL);   /* nothing left but free segments, and h itself */
    if (wake) _ts_purge_schedule(); /* the pages' purge deadlines */
    ts_purge_safe_point();
}

TS_EXPORT void ts_heap_delete(ts_heap_t *h) {
    if (!h) return;
    if (h->user != TS_HEAP_USER_MAGIC && h == _ts_tls_heap)
        _ts_fatal("ts_heap_delete(): the default heap %p cannot be deleted", (void *)h);
    heap_enter(h, "ts_heap_delete");
    ts_heap_t *to = ts_heap_get_default(); /* NULL: the pages go to the abandoned list */
    _ts_large_heap_end(h, false);
    heap_leave(h);
    _ts_heap_abandon_to(h, to);
    ts_purge_safe_point();
}

/* ---- visit and stats ----------------------------------------------------------------- */

/* Every block of the page is free: kept empty, or rescued (purged: no marks). */
static bool page_all_free(const ts_page_t *page) {
    return page->cached || atomic_load_explicit(&page->rescued, memory_order_relaxed) ||
           (!page->is_head && page->used == 0);
}

/* The live blocks of each page are found while the heap is marked walking
 * (the purge thread then rescues none of its pages: it would purge a page
 * whose blocks all came back, marks and all), and visited after: a visitor
 * may allocate, and a rescue may come between pages. At most 4096 blocks a
 * page: 16-byte blocks of a small page (a medium page holds blocks over
 * 8 KiB, a big one over 64 KiB). */
#define TS_PAGE_BLOCKS_MAX (((size_t)1 << TS_SHIFT_SMALL) / 16)
_Static_assert(((size_t)1 << TS_SHIFT_MEDIUM) / TS_SMALL_PAGE_MAX <= TS_PAGE_BLOCKS_MAX &&
                   ((size_t)1 << TS_SHIFT_BIG) / TS_MEDIUM_PAGE_MAX <= TS_PAGE_BLOCKS_MAX,
               "blocks per page");
static bool visit_list(ts_heap_t *h, const ts_page_queue_t *q, ts_heap_visitor_t fn, void *arg) {
    uint64_t live[TS_PAGE_BLOCKS_MAX / 64];
    for (ts_page_t *page = q->first; page; page = page->next) {
        if (page_all_free(page)) continue;
        _ts_heap_walk_begin(h);
        uint32_t n = _ts_page_walkable(h, page) ? page->capacity : 0;
        ts_assert(n <= TS_PAGE_BLOCKS_MAX);
        memset(live, 0, (n + 63) / 64 * sizeof live[0]);
        uintptr_t b = page->start;
        for (uint32_t k = 0; k < n; k++, b += page->block_size)
            if (!ts_block_marked(page, (void *)b)) live[k / 64] |= (uint64_t)1 << (k % 64);
        _ts_heap_walk_end(h);
        uintptr_t start = page->start; /* the visitor's frees may retire the page */
        uint32_t bs = page->block_size;
        for (uint32_t k = 0; k < n; k++)
            if ((live[k / 64] >> (k % 64) & 1) && !fn(arg, (void *)(start + (uintptr_t)k * bs), bs))
                return false;
    }
    return true;
}

static bool visit_large(ts_heap_t *h, ts_heap_visitor_t fn, void *arg) {
    void *ptrs[64];
    size_t cursor = 0, n;
    while ((n = _ts_large_heap_list(h, &cursor, ptrs, 64)) != 0)
        for (size_t i = 0; i < n; i++) {
            size_t size = _ts_large_owned_size(ptrs[i], h); /* 0: freed by the visitor */
            if (size && !fn(arg, ptrs[i], size)) return false;
        }
    return true;
}

/* NULL: the calling thread's default heap, if it has one. */
static ts_heap_t *heap_or_default(ts_heap_t *h) {
    if (h) return h;
    h = _ts_tls_heap;
    return h->state == TS_HEAP_ACTIVE ? h : NULL;
}

TS_EXPORT bool ts_heap_visit(ts_heap_t *h, ts_heap_visitor_t fn, void *arg) {
    if (!(h = heap_or_default(h))) return true;
    heap_enter(h, "ts_heap_visit");
    bool go = true;
    for (unsigned cls = 0; cls < TS_CLASS_COUNT && go; cls++)
        go = visit_list(h, &h->queue[cls], fn, arg);
    if (go) go = visit_list(h, &h->full, fn, arg);
    if (go && h->user) go = visit_large(h, fn, arg);
    heap_leave(h);
    return go;
}

static void count_list(const ts_page_queue_t *q, ts_heap_stats_t *out) {
    for (const ts_page_t *page = q->first; page; page = page->next) {
        out->pages++;
        out->page_bytes += page->area;
        if (page_all_free(page)) continue;
        uint64_t tf = atomic_load_explicit(&page->thread_free, memory_order_relaxed);
        size_t live = _ts_page_live(page), back = ts_tf_count(tf);
        live = live > back ? live - back : 0;
        out->live_blocks += live;
        out->live_bytes += live * page->block_size;
    }
}

TS_EXPORT void ts_heap_stats(ts_heap_t *h, ts_heap_stats_t *out) {
    memset(out, 0, sizeof *out);
    if (!(h = heap_or_default(h))) return;
    heap_enter(h, "ts_heap_stats");
    /* Blocks handed over for full pages: freed (owner only, as this call is). */
    if (atomic_load_explicit(&h->delayed, memory_order_relaxed)) _ts_process_delayed(h);
    for (unsigned cls = 0; cls < TS_CLASS_COUNT; cls++) count_list(&h->queue[cls], out);
    count_list(&h->full, out);
    for (unsigned i = 0; i < TS_EMPTY_BIG_KEEP && h->empty_big[i]; i++) {
        out->pages++;
        out->page_bytes += h->empty_big[i]->area;
    }
    out->large_blocks = atomic_load(&h->large_count);
    out->large_bytes = atomic_load(&h->large_bytes);
    out->live_blocks += out->large_blocks;
    out->live_bytes += out->large_bytes;
    out->peak_bytes = h->footprint_peak;
    heap_leave(h);
}
