/* Pages: the runs of one size class a heap allocates from, their two free
 * lists, and the heap's per-class queues of pages.
 *
 * A page of a heap is in exactly one of: the queue of its class (it may have
 * room; the first page of the queue is the "head", the one heap->direct[]
 * points at), or the heap's full list (no room; page->owner carries
 * TS_OWNER_FULL and thread_free is in the NOTIFY state so the next remote free
 * tells the heap).
 *
 * Invariants:
 * - The head of a small- or medium-page queue is pinned: its `used` holds one
 *   extra count, so the free fast path never sees it reach zero. That is the
 *   hysteresis at the size-class boundary: a loop that mallocs and frees one
 *   block keeps reusing its page instead of retiring and re-initialising it on
 *   every call. Idle empty heads are retired by the heap's periodic collection.
 *   Big pages (4 MiB) are not pinned, so that an idle thread does not keep one
 *   per class resident: an empty big head is instead kept as heap->empty_big
 *   (one per heap), reused as is by the next request of its class or
 *   re-initialised for another, and retired when idle.
 * - Only the owner thread touches free, used, the queues; other
 *   threads only push onto thread_free (free.c).
 * - A page is retired (returned to its segment) only at used == 0 and never
 *   while a remote freer is between NOTIFYING and NORMAL.
 */
#include "core/internal.h"

ts_page_t _ts_page_empty; /* no free blocks: sends the fast path to the slow path */

/* Blocks carved per extension: lazy, so a page only touches what it hands
 * out: one OS page worth, at least TS_EXTEND_MIN blocks (carving writes one
 * word per block). The owner's frees go straight back to the free list, so a
 * loop that reuses few blocks never extends again. */
#define TS_EXTEND_BYTES 4096
#define TS_EXTEND_MIN   4

/* ---- queues ---------------------------------------------------------------- */

static void set_direct(ts_heap_t *heap, unsigned cls, ts_page_t *page) {
    const ts_class_info_t *ci = &_ts_classes[cls];
    for (unsigned s = ci->direct_lo; s <= ci->direct_hi; s++) heap->direct[s] = page;
    heap->head[cls] = page;
}

static void pin(ts_page_t *page) {
    if (!page->pinned) {
        page->pinned = 1;
        page->used++;
    }
}

bool _ts_page_unpin(ts_heap_t *heap, ts_page_t *page) {
    (void)heap;
    if (!page->pinned) return page->used == 0;
    page->pinned = 0;
    return --page->used == 0;
}

/* After any change of a queue: pin its first page (small and medium pages)
 * and point direct[] at it. */
static void queue_fix_head(ts_heap_t *heap, unsigned cls) {
    ts_page_t *first = heap->queue[cls].first;
    if (first && first->block_size <= TS_MEDIUM_PAGE_MAX) pin(first);
    set_direct(heap, cls, first ? first : &_ts_page_empty);
}

static void list_unlink(ts_page_queue_t *q, ts_page_t *page) {
    if (page->prev)
        page->prev->next = page->next;
    else
        q->first = page->next;
    if (page->next)
        page->next->prev = page->prev;
    else
        q->last = page->prev;
    page->next = page->prev = NULL;
}

static void list_push_back(ts_page_queue_t *q, ts_page_t *page) {
    page->next = NULL;
    page->prev = q->last;
    if (q->last)
        q->last->next = page;
    else
        q->first = page;
    q->last = page;
}

void _ts_queue_push_back(ts_heap_t *heap, ts_page_t *page) {
    ts_page_queue_t *q = &heap->queue[page->cls];
    bool was_empty = q->first == NULL;
    list_push_back(q, page);
    if (was_empty) queue_fix_head(heap, page->cls);
}

/* Only called when the queue is empty (every earlier page went to full). */
static void queue_push_front(ts_heap_t *heap, ts_page_t *page) {
    ts_page_queue_t *q = &heap->queue[page->cls];
    page->prev = NULL;
    page->next = q->first;
    if (q->first)
        q->first->prev = page;
    else
        q->last = page;
    ts_page_t *old = q->first;
    q->first = page;
    queue_fix_head(heap, page->cls);
    if (old && _ts_page_unpin(heap, old)) _ts_page_retire(heap, old);
}

/* Remove from its queue; a removed head is unpinned (the caller looks at
 * used), and the next page becomes the head. */
static void queue_remove(ts_heap_t *heap, ts_page_t *page) {
    ts_page_queue_t *q = &heap->queue[page->cls];
    bool was_first = q->first == page;
    list_unlink(q, page);
    if (was_first) {
        _ts_page_unpin(heap, page);
        queue_fix_head(heap, page->cls);
    }
}

/* ---- one page ---------------------------------------------------------------- */

static void page_init(ts_heap_t *heap, ts_page_t *page, unsigned cls) {
    const ts_class_info_t *ci = &_ts_classes[cls];
    page->block_size = ci->size;
    page->magic = ci->magic;
    page->reserved = page->area / ci->size;
    page->cls = (uint8_t)cls;
    page->capacity = 0;
    atomic_store_explicit(&page->bytes, 0, memory_order_relaxed);
    page->free = NULL;
    page->used = 0;
    page->pinned = page->in_full = 0;
    page->next = page->prev = NULL;
    atomic_store_explicit(&page->thread_free, 0, memory_order_relaxed);
    atomic_store_explicit(&page->owner, (uintptr_t)heap, memory_order_release);
}

/* Carve the next blocks into the (empty) free list. */
static bool page_extend(ts_page_t *page) {
    uint32_t left = page->reserved - page->capacity;
    if (!left) return false;
    uint32_t bs = page->block_size;
    uint32_t n = TS_EXTEND_BYTES / bs;
    if (n < TS_EXTEND_MIN) n = TS_EXTEND_MIN;
    if (n > left) n = left;
    char *first = (char *)page->start + (size_t)page->capacity * bs;
    char *b = first;
    for (uint32_t i = 1; i < n; i++, b += bs) ((ts_block_t *)b)->next = (ts_block_t *)(b + bs);
    ((ts_block_t *)b)->next = NULL;
    page->free = (ts_block_t *)first;
    page->capacity += n;
    atomic_store_explicit(&page->bytes, (size_t)page->capacity * bs, memory_order_release);
    return true;
}

/* Take the blocks other threads freed; they become the free list (which is
 * empty when this is called). No walk: the count travels in the word. */
static void page_take_remote(ts_page_t *page) {
    uint64_t w = atomic_load_explicit(&page->thread_free, memory_order_relaxed);
    while (!atomic_compare_exchange_weak_explicit(&page->thread_free, &w,
                                                  ts_tf_make(NULL, 0, ts_tf_state(w)),
                                                  memory_order_acquire, memory_order_relaxed)) {
    }
    page->free = ts_tf_ptr(w);
    page->used -= ts_tf_count(w);
    /* Touch the first blocks now: these lines were written by the freeing
     * thread, and one tight walk over them (which the hardware prefetcher
     * follows) costs less than one miss in each of the next mallocs. */
    ts_block_t *b = page->free;
    for (int i = 0; b && i < 64; i++) b = *(ts_block_t *volatile *)&b->next;
}

/* Find blocks for an empty free list: other threads' frees first, then
 * fresh blocks. (The owner's own frees go straight back to the free list.) */
static bool page_refill(ts_page_t *page) {
    if (ts_tf_ptr(atomic_load_explicit(&page->thread_free, memory_order_relaxed))) {
        page_take_remote(page);
        return true;
    }
    return page_extend(page);
}

static void wait_briefly(unsigned *spins) {
    if (++*spins < 64) {
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#endif
    } else {
        _ts_os_yield();
    }
}

/* Move an exhausted page to the full list. False when blocks arrived from
 * other threads meanwhile (they are now its free list and it stays). */
static bool page_to_full(ts_heap_t *heap, ts_page_t *page) {
    unsigned spins = 0;
    for (;;) {
        uint64_t w = atomic_load_explicit(&page->thread_free, memory_order_relaxed);
        if (ts_tf_ptr(w)) {
            page_take_remote(page);
            return false;
        }
        unsigned st = ts_tf_state(w);
        if (st == TS_TF_NOTIFY) break;
        if (st == TS_TF_NOTIFYING) { /* an earlier hand-over is finishing */
            wait_briefly(&spins);
            continue;
        }
        if (atomic_compare_exchange_weak_explicit(&page->thread_free, &w,
                                                  ts_tf_make(NULL, 0, TS_TF_NOTIFY),
                                                  memory_order_acq_rel, memory_order_relaxed))
            break;
    }
    queue_remove(heap, page);
    list_push_back(&heap->full, page);
    page->in_full = 1;
    atomic_store_explicit(&page->owner, (uintptr_t)heap | TS_OWNER_FULL, memory_order_relaxed);
    return true;
}

/* NOTIFY -> NORMAL, and wait out a NOTIFYING hand-over. */
void _ts_page_settle_notify(ts_page_t *page) {
    unsigned spins = 0;
    for (;;) {
        uint64_t w = atomic_load_explicit(&page->thread_free, memory_order_acquire);
        unsigned st = ts_tf_state(w);
        if (st == TS_TF_NORMAL) return;
        if (st == TS_TF_NOTIFYING) {
            wait_briefly(&spins);
            continue;
        }
        if (atomic_compare_exchange_weak_explicit(&page->thread_free, &w, w & ~(uint64_t)3,
                                                  memory_order_acq_rel, memory_order_relaxed))
            return;
    }
}

/* A block came back to a page in the full list: it may allocate again. */
void _ts_page_unfull(ts_heap_t *heap, ts_page_t *page) {
    list_unlink(&heap->full, page);
    page->in_full = 0;
    atomic_store_explicit(&page->owner, (uintptr_t)heap, memory_order_relaxed);
    /* Back to NORMAL so remote frees go to the page again; a NOTIFYING
     * freer resets the state itself when done. */
    for (;;) {
        uint64_t w = atomic_load_explicit(&page->thread_free, memory_order_relaxed);
        if (ts_tf_state(w) != TS_TF_NOTIFY) break;
        if (atomic_compare_exchange_weak_explicit(&page->thread_free, &w, w & ~(uint64_t)3,
                                                  memory_order_acq_rel, memory_order_relaxed))
            break;
    }
    _ts_queue_push_back(heap, page);
}

/* used == 0: hand the page back to its segment. */
void _ts_page_retire(ts_heap_t *heap, ts_page_t *page) {
    _ts_page_settle_notify(page);
    if (page->in_full) {
        list_unlink(&heap->full, page);
        page->in_full = 0;
    } else {
        queue_remove(heap, page);
    }
    page->free = NULL;
    page->used = 0;
    page->pinned = 0;
    atomic_store_explicit(&page->thread_free, 0, memory_order_relaxed);
    atomic_store_explicit(&page->owner, 0, memory_order_relaxed);
    _ts_segment_page_free(heap, page);
}

/* The heap lets go of a page (thread exit): retired when every block is back,
 * else left in its segment without an owner, for adoption or reclaim. */
void _ts_page_detach(ts_heap_t *heap, ts_page_t *page) {
    if (page->in_full) {
        list_unlink(&heap->full, page);
        page->in_full = 0;
    } else {
        queue_remove(heap, page);
    }
    _ts_page_unpin(heap, page);
    uint64_t w = atomic_load_explicit(&page->thread_free, memory_order_acquire);
    if (ts_tf_count(w) == page->used) {
        page->used = 0;
        page->free = NULL;
        atomic_store_explicit(&page->thread_free, 0, memory_order_relaxed);
        atomic_store_explicit(&page->owner, 0, memory_order_relaxed);
        _ts_segment_page_free(heap, page);
        return;
    }
    atomic_store_explicit(&page->owner, 0, memory_order_release);
}

/* The owner frees one of its blocks outside the fast path. */
void _ts_page_free_local(ts_heap_t *heap, ts_page_t *page, ts_block_t *block) {
    if (block == page->free) _ts_double_free("free", block);
    block->next = page->free;
    page->free = block;
    if (--page->used == 0) _ts_page_retire(heap, page);
}

/* ---- allocation slow path ------------------------------------------------------- */

static ts_page_t *page_fresh(ts_heap_t *heap, unsigned cls, bool may_adopt, bool *adopted) {
    ts_page_t *page = heap->empty_big;
    if (page && _ts_classes[cls].kind == TS_KIND_BIG) { /* the kept empty big page */
        heap->empty_big = NULL;
        page->cached = 0;
        if (page->cls == cls) {
            atomic_store_explicit(&page->owner, (uintptr_t)heap, memory_order_relaxed);
            if (!page->free) page_refill(page);
        } else {
            page_init(heap, page, cls);
            page_extend(page);
        }
        queue_push_front(heap, page);
        return page;
    }
    page = _ts_segment_page_alloc(heap, (enum ts_kind)_ts_classes[cls].kind, may_adopt, adopted);
    if (!page) return NULL;
    page_init(heap, page, cls);
    page_extend(page);
    queue_push_front(heap, page);
    return page;
}

/* An empty big page at the head of its queue: keep it for the next request
 * (the one kept before goes back to its segment). Its owner word carries the
 * FULL bit so that any free into it (a double free) takes the slow path. */
static void page_cache(ts_heap_t *heap, ts_page_t *page) {
    _ts_page_uncache(heap);
    queue_remove(heap, page);
    page->cached = 1;
    heap->empty_big = page;
    heap->empty_big_seen = 0;
    atomic_store_explicit(&page->owner, (uintptr_t)heap | TS_OWNER_FULL, memory_order_relaxed);
}

void _ts_page_uncache(ts_heap_t *heap) {
    ts_page_t *page = heap->empty_big;
    if (!page) return;
    heap->empty_big = NULL;
    page->cached = 0;
    _ts_page_settle_notify(page);
    page->free = NULL;
    page->used = 0;
    atomic_store_explicit(&page->thread_free, 0, memory_order_relaxed);
    atomic_store_explicit(&page->owner, 0, memory_order_relaxed);
    _ts_segment_page_free(heap, page);
}

/* used == 0 on the free fast path (a page that is not pinned). */
void _ts_page_empty_at_free(ts_heap_t *heap, ts_page_t *page) {
    if (page->block_size > TS_MEDIUM_PAGE_MAX && heap->queue[page->cls].first == page)
        page_cache(heap, page);
    else
        _ts_page_retire(heap, page);
}

void *_ts_heap_malloc_class(ts_heap_t *heap, unsigned cls) {
    ts_page_queue_t *q = &heap->queue[cls];
    ts_page_t *page = q->first;
    ts_block_t *block;
    if (page && (block = page->free) != NULL) goto pop; /* sizes above the direct table */
    _ts_heap_slow_tick(heap);
    for (unsigned round = 0;; round++) {
        page = q->first;
        while (page && !page->free && !page_refill(page)) {
            ts_page_t *next = page->next;
            if (!page_to_full(heap, page)) break;
            page = next;
        }
        if (page) break;
        bool adopted = false;
        page = page_fresh(heap, cls, round < 4, &adopted);
        if (page) break;
        if (!adopted) return NULL; /* the OS said no */
    }
    block = page->free;
pop:
    page->free = block->next;
    page->used++;
    heap->alloc_class[cls]++;
    return block;
}

/* Allocations of a class by this heap so far (fast path and slow path). */
static uint64_t class_allocs(const ts_heap_t *heap, unsigned cls) {
    const ts_class_info_t *ci = &_ts_classes[cls];
    uint64_t n = heap->alloc_class[cls];
    for (unsigned s = ci->direct_lo; s <= ci->direct_hi; s++) n += heap->alloc_slot[s];
    return n;
}

/* Idle-page collection (heap.c calls it about every purge delay): retire
 * queue pages whose blocks have all come back, and empty heads of classes
 * this heap did not allocate from since the last collection (all empty heads
 * when `force`). */
TS_HIDDEN void _ts_pages_collect(ts_heap_t *heap, bool force);
void _ts_pages_collect(ts_heap_t *heap, bool force) {
    if (heap->empty_big && (force || heap->empty_big_seen++)) _ts_page_uncache(heap);
    for (unsigned cls = 0; cls < TS_CLASS_COUNT; cls++) {
        ts_page_t *page = heap->queue[cls].first;
        if (!page) continue;
        uint64_t allocs = class_allocs(heap, cls);
        bool idle = allocs == heap->allocs_seen[cls];
        heap->allocs_seen[cls] = allocs;
        while (page) {
            ts_page_t *next = page->next;
            uint32_t pending =
                ts_tf_count(atomic_load_explicit(&page->thread_free, memory_order_relaxed));
            uint32_t live = page->used - page->pinned;
            if (live == pending && (!page->pinned || force || idle)) {
                if (pending) page_take_remote(page);
                _ts_page_unpin(heap, page);
                if (page->used == 0) _ts_page_retire(heap, page); /* `next` stays queued */
            }
            page = next;
        }
    }
}
