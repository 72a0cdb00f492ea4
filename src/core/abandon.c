/* Abandoned segments: those of threads that exited with blocks still live.
 * They wait on the abandoned list until a heap that needs a page adopts one
 * (its live pages join the heap's queues), or until a reclaim pass finds
 * pages whose blocks have all come back and returns them (the purge thread,
 * or malloc_trim; a segment with no page left in use goes to the cache).
 *
 * Invariants:
 * - A segment on the abandoned list has no owner (owner NULL), its pages in
 *   use have owner 0 and TS_TF_DETACHED in thread_free, and it is touched
 *   only by whoever took it off the list (a pass or an adopting heap).
 * - abandoned_count is the length of the list (changed under its lock).
 * - abandoned_due is nonzero from a request until the pass that takes it.
 *
 * Lock order: reclaim lock, then abandoned lock, a leaf (nothing else is
 * taken while it is held). A pass holds the reclaim lock while it returns
 * pages and segments (segment spinlocks, the cache and registry locks).
 */
#include "core/internal.h"

/* One reclaim pass at a time: a pass takes the whole abandoned list, so
 * malloc_trim running beside the helper's pass would find it empty and give
 * nothing back. Taken before abandoned_lock. */
static TS_FORK_LOCK pthread_mutex_t reclaim_lock = PTHREAD_MUTEX_INITIALIZER;
static TS_FORK_LOCK pthread_mutex_t abandoned_lock = PTHREAD_MUTEX_INITIALIZER;
static ts_segment_t *abandoned_list;
static TS_STARTUP_DATA _Atomic size_t abandoned_count;
/* When the next reclaim pass is due (monotonic ns; 0: none asked): the first
 * remote free into an abandoned segment after a pass sets it a purge delay
 * ahead. A pass per such free woke the helper thousands of times a second
 * while one thread freed a dead thread's blocks. */
static _Atomic uint64_t abandoned_due;

/* ---- abandoned segments ---------------------------------------------------------------- */

void _ts_segment_abandon(ts_segment_t *seg) {
    ts_assert(seg->used_pages > 0 && !seg->in_avail && !seg->cached);
    atomic_store_explicit(&seg->owner, NULL, memory_order_release);
    pthread_mutex_lock(&abandoned_lock);
    ts_seg_list_push(&abandoned_list, seg);
    atomic_fetch_add(&abandoned_count, 1);
    pthread_mutex_unlock(&abandoned_lock);
    atomic_fetch_add(&_ts_stats.segments_abandoned, 1);
    /* A free that found one of its pages detached (owner 0) before the segment
     * was on this list may have had its reclaim pass already: ask for one more. */
    _ts_abandoned_note_free();
}

/* A heap adopts a segment to get a page of the kind it needs: a segment of
 * another kind serves nothing now and would be kept from the threads that
 * need it, and so would a big page (a whole segment of one class) of
 * another class (exchange's 64 KiB - 1 MiB objects took 17 adoptions a
 * thread that way). So a heap adopts only a segment of its kind, and for a
 * big page of its class, among the ABANDONED_SCAN newest. */
#define ABANDONED_SCAN 64

ts_segment_t *_ts_abandoned_pop(enum ts_kind kind, unsigned cls) {
    if (!atomic_load_explicit(&abandoned_count, memory_order_relaxed)) return NULL;
    pthread_mutex_lock(&abandoned_lock);
    /* Listed segments change only once taken off: read under the lock. */
    ts_segment_t *seg = NULL, *s = abandoned_list;
    for (unsigned n = 0; s && n < ABANDONED_SCAN && !seg; s = s->next, n++)
        if (s->kind == kind && (kind != TS_KIND_BIG || s->pages[s->first_page].cls == cls)) seg = s;
    if (seg) {
        ts_seg_list_remove(&abandoned_list, seg);
        atomic_fetch_sub(&abandoned_count, 1);
        atomic_fetch_sub(&_ts_stats.segments_abandoned, 1);
    }
    pthread_mutex_unlock(&abandoned_lock);
    return seg;
}

void _ts_abandoned_note_free(void) {
    /* The caller's push, then this load; a pass clears the request, then
     * reads the pages: with a fence on each side, either this load sees the
     * request cleared (and asks again) or the pass sees the push. */
    atomic_thread_fence(memory_order_seq_cst);
    if (atomic_load_explicit(&abandoned_due, memory_order_relaxed)) return; /* already asked */
    uint64_t none = 0, due = _ts_os_now_ns() + _ts_purge_delay_ns();
    if (atomic_compare_exchange_strong(&abandoned_due, &none, due)) _ts_purge_schedule();
}

/* The purge delay changed: a pending request is due no later than the new
 * delay from now. */
void _ts_abandoned_delay_changed(uint64_t now) {
    uint64_t due = atomic_load(&abandoned_due), sooner = now + _ts_purge_delay_ns();
    while (due && due > sooner && !atomic_compare_exchange_weak(&abandoned_due, &due, sooner)) {
    }
}

/* Reset a page whose blocks have all come back, and return it to its segment
 * (no owner heap involved: abandoned segments only). */
static void page_reclaim(ts_segment_t *seg, ts_page_t *page) {
    ts_assert(ts_page_state(page) == TS_PAGE_IN_USE && ts_page_owner(page) == 0);
    ts_assert(ts_tf_count(atomic_load_explicit(&page->thread_free, memory_order_relaxed)) ==
              page->used);
    atomic_store_explicit(&page->thread_free, 0, memory_order_relaxed);
    page->free = NULL;
    page->used = 0;
    atomic_store_explicit(&page->owner, 0, memory_order_relaxed);
    (void)seg;
    _ts_segment_page_free(NULL, page);
    atomic_fetch_add(&_ts_stats.reclaimed_pages, 1);
}

/* Give back the pages of dead threads whose blocks were all freed since,
 * once a pass is due (or at once if forced). Returns when the next is due. */
uint64_t _ts_abandoned_reclaim(uint64_t now, bool force) {
    uint64_t due = atomic_load(&abandoned_due);
    if (!force) {
        if (!due) return UINT64_MAX;
        if (now < due || pthread_mutex_trylock(&reclaim_lock)) return due; /* or a pass runs */
        if (!atomic_compare_exchange_strong(&abandoned_due, &due, 0)) {
            pthread_mutex_unlock(&reclaim_lock);
            return due; /* a forced pass took it; this is a newer request */
        }
    } else {
        pthread_mutex_lock(&reclaim_lock); /* after a running pass, its own */
        atomic_store(&abandoned_due, 0);
    }
    atomic_thread_fence(memory_order_seq_cst); /* see _ts_abandoned_note_free */
    pthread_mutex_lock(&abandoned_lock);
    ts_segment_t *list = abandoned_list;
    abandoned_list = NULL;
    size_t n = atomic_exchange(&abandoned_count, 0);
    pthread_mutex_unlock(&abandoned_lock);
    atomic_fetch_sub(&_ts_stats.segments_abandoned, n);
    ts_segment_t *keep = NULL, *keep_tail = NULL;
    size_t kept = 0;
    while (list) {
        ts_segment_t *seg = list;
        list = seg->next;
        ts_assert(!atomic_load_explicit(&seg->owner, memory_order_relaxed) && seg->used_pages > 0);
        for (unsigned i = seg->first_page; i < seg->page_count; i++) {
            ts_page_t *page = &seg->pages[i];
            if (ts_page_state(page) != TS_PAGE_IN_USE) continue;
            uint64_t w = atomic_load_explicit(&page->thread_free, memory_order_acquire);
            if (ts_tf_count(w) == page->used) page_reclaim(seg, page);
        }
        if (seg->used_pages == 0) {
            _ts_segment_release(seg);
            continue;
        }
        seg->prev = keep_tail;
        seg->next = NULL;
        if (keep_tail)
            keep_tail->next = seg;
        else
            keep = seg;
        keep_tail = seg;
        kept++;
    }
    if (keep) {
        pthread_mutex_lock(&abandoned_lock);
        keep_tail->next = abandoned_list;
        if (abandoned_list) abandoned_list->prev = keep_tail;
        abandoned_list = keep;
        atomic_fetch_add(&abandoned_count, kept);
        pthread_mutex_unlock(&abandoned_lock);
        atomic_fetch_add(&_ts_stats.segments_abandoned, kept);
    }
    pthread_mutex_unlock(&reclaim_lock);
    uint64_t again = atomic_load(&abandoned_due); /* a free during the pass asked again */
    return again ? again : UINT64_MAX;
}

/* Take over a segment whose thread exited (the segment is ours alone: it was
 * popped from the abandoned list). Its live pages join this heap's queues. */
void _ts_heap_adopt(ts_heap_t *heap, ts_segment_t *seg) {
    ts_assert(!atomic_load_explicit(&seg->owner, memory_order_relaxed) && seg->used_pages > 0);
    _ts_heap_seg_add(heap, seg);
    uint64_t empty = 0;
    for (unsigned i = seg->first_page; i < seg->page_count; i++) {
        ts_page_t *page = &seg->pages[i];
        if (ts_page_state(page) != TS_PAGE_IN_USE) continue;
        ts_assert(ts_page_owner(page) == 0 && page->used <= page->capacity);
        ts_heap_pages_grew(heap, page->area);
        page->is_head = 0;
        page->in_full = 0;
        page->next = page->prev = NULL;
        atomic_fetch_and_explicit(&page->thread_free, ~TS_TF_DETACHED, memory_order_relaxed);
        atomic_store_explicit(&page->owner, (uintptr_t)heap, memory_order_release);
        /* From the owner store on, a sweep pass may take the list. */
        if (ts_page_take_all_back(page))
            empty |= (uint64_t)1 << i;
        else
            _ts_queue_push_back(heap, page);
    }
    if (seg->free_mask) _ts_segment_avail_add(heap, seg);
    heap->adopted++;
    atomic_fetch_add(&_ts_stats.adopted, 1);
    /* Pages whose blocks all came back: return them (the last may release the
     * whole segment, so nothing of `seg` is touched after the loop). */
    while (empty) {
        unsigned i = (unsigned)__builtin_ctzll(empty);
        empty &= empty - 1;
        ts_page_t *page = &seg->pages[i];
        page->free = NULL;
        page->used = 0;
        atomic_store_explicit(&page->owner, 0, memory_order_relaxed);
        _ts_segment_page_free(heap, page);
    }
}

/* ---- fork (see _ts_segments_atfork_prepare) ------------------------------ */

void _ts_abandoned_atfork_prepare(void) {
    pthread_mutex_lock(&reclaim_lock);
    pthread_mutex_lock(&abandoned_lock);
}

void _ts_abandoned_atfork_parent(void) {
    pthread_mutex_unlock(&abandoned_lock);
    pthread_mutex_unlock(&reclaim_lock);
}

void _ts_abandoned_atfork_child(void) {
    pthread_mutex_init(&abandoned_lock, NULL);
    pthread_mutex_init(&reclaim_lock, NULL);
}
