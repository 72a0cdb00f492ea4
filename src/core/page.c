/* Pages: the runs of one size class a heap allocates from, their free lists,
 * the heap's per-class queues of pages, and the allocation slow path.
 *
 * A page of a heap is in exactly one of: the queue of its class (it may have
 * room; the first page of the queue is the "head", heap->head[cls]), or the
 * heap's full list (no room; page->owner carries TS_OWNER_FULL and
 * thread_free is in the NOTIFY state so the next remote free tells the heap).
 *
 * List classes (blocks up to 64 KiB, small and medium pages): while a page is
 * the head ("installed": page->owner carries TS_OWNER_HEAD, heap->direct[]
 * and heap->head[] point at it) malloc pops its free list without counting
 * `used`, and the owner's frees push onto it and count `used` down from a
 * bias, as on any other page; `used` is made exact (capacity minus the list's
 * length) when it stops being head ("released"). A head is kept while its
 * blocks are all free: that is the hysteresis at the size-class boundary (a
 * loop that mallocs and frees one block keeps reusing its page instead of
 * retiring and re-initialising it on every call). Idle heads are retired by
 * the heap's periodic collection. Big pages (4 MiB) count `used` exactly:
 * the big page a free emptied last stays first in its queue
 * (heap->big_linger, the next malloc of its class pops from it), the one
 * before it is set aside in heap->empty_big (up to TS_EMPTY_BIG_KEEP per
 * heap, the oldest retired beyond that), reused as is by the next request of
 * its class or, with every slot taken, re-initialised for another, and all
 * are retired when idle, so that an idle thread does not keep one per class
 * resident.
 *
 * Invariants:
 * - Only the owner thread touches free, used, the queues; other threads only
 *   push onto thread_free (free.c), and the purge thread may borrow its list
 *   for a moment (sweep.c): a list seen there may be gone when taken.
 * - A page is retired only at used == 0 (never while it is installed) and
 *   never while a remote freer is between NOTIFYING and NORMAL.
 * - heap->big_linger is NULL or a page in one of the heap's queues: every
 *   page leaves a queue through queue_remove, which clears it.
 */
#include "core/internal.h"

TS_STARTUP_DATA ts_page_t _ts_page_empty; /* no free blocks: sends the fast path to the slow path */

/* Blocks carved per extension: lazy, so a page only touches what it hands
 * out. Carving writes one word at the start of each block (its free mark),
 * so an extension carves the blocks that start in the OS page where the next
 * block starts, and in the page after it when less than half of that one is
 * left (so that an extension never carves a mere tail of one or two blocks):
 * a class's first extension touches one OS page whatever the page's colour
 * offset. Blocks of 4 KiB and more come one or two at a time, so `touched`
 * bounds what the program touched (_ts_page_empty_at_free counts on it on
 * big pages). The owner's frees go straight back to the free list, so a loop
 * that reuses few blocks never extends again. */
#define TS_EXTEND_BYTES 4096

/* ---- heads ------------------------------------------------------------------ */

/* The length of a head's free list. A cycle (a block freed twice that the
 * free path could not see) would make it endless: stop and say so. */
static uint32_t chain_length(const ts_page_t *page) {
    uint32_t n = 0;
    for (const ts_block_t *b = page->free; b; b = ts_link_get(page, b, "malloc"))
        if (++n > page->capacity)
            _ts_fatal("free(): a %u-byte block was freed twice (its page's free list loops)",
                      page->block_size);
    return n;
}

static void set_direct(ts_heap_t *heap, unsigned cls, ts_page_t *page) {
    const ts_class_info_t *ci = &_ts_classes[cls];
    for (unsigned s = ci->direct_lo; s <= ci->direct_hi; s++) heap->direct[s] = page;
    heap->head[cls] = page;
}

/* Make the first page of a queue the head of its class; false when the purge
 * thread rescued it meanwhile (rescue.c: every block free, the memory
 * purged), for the caller to retire. The owner word changes by CAS: the
 * purge thread may hold the page claimed, and the head is the one queue page
 * it never claims. */
static bool head_install(ts_heap_t *heap, ts_page_t *page) {
    ts_assert(heap->queue[page->cls].first == page && !page->is_head && !page->in_full);
    if (ts_class_is_list(page->cls)) {
        unsigned spins = 0;
        for (;;) {
            uintptr_t w = (uintptr_t)heap;
            if (atomic_compare_exchange_weak_explicit(&page->owner, &w,
                                                      (uintptr_t)heap | TS_OWNER_HEAD,
                                                      memory_order_acquire, memory_order_acquire))
                break;
            if (w == ((uintptr_t)heap | TS_OWNER_CLAIMED)) {
                _ts_spin_turn(&spins);
            } else if (w == ((uintptr_t)heap | TS_OWNER_FULL) &&
                       atomic_load_explicit(&page->rescued, memory_order_relaxed)) {
                return false;
            } else if (w != (uintptr_t)heap) { /* not a word the purge thread left */
                atomic_store_explicit(&page->owner, (uintptr_t)heap | TS_OWNER_HEAD,
                                      memory_order_relaxed);
                break;
            }
        }
        page->is_head = 1;
        page->used = TS_HEAD_USED_BIAS; /* frees count down, mallocs do not count */
    }
    set_direct(heap, page->cls, page);
    return true;
}

/* The head stops being head: `used` is exact again (the blocks not on the
 * free list: out, or pending in thread_free). */
static void head_release(ts_heap_t *heap, ts_page_t *page) {
    set_direct(heap, page->cls, &_ts_page_empty);
    if (!page->is_head) return;
    page->is_head = 0;
    page->used = page->capacity - chain_length(page);
    ts_assert(page->used <= page->capacity);
    if (TS_CHECKED) (void)_ts_check_page_list(page, "page release");
    /* Release: a claim (rescue.c) then sees is_head and used as left here. */
    atomic_store_explicit(&page->owner, (uintptr_t)heap, memory_order_release);
}

/* Blocks of the page in use (the owner thread only). */
uint32_t _ts_page_live(const ts_page_t *page) {
    return page->is_head ? page->capacity - chain_length(page) : page->used;
}

/* ---- queues ---------------------------------------------------------------- */

static void page_release(ts_heap_t *heap, ts_page_t *page);
static void list_unlink(ts_page_queue_t *q, ts_page_t *page);

/* After any change of a queue: its first page is the installed head. Pages
 * the purge thread rescued that come first are retired on the way (every
 * block of theirs is free; their lists are not looked at). */
static void queue_fix_head(ts_heap_t *heap, unsigned cls) {
    ts_page_queue_t *q = &heap->queue[cls];
    ts_page_t *first = q->first, *cur = heap->head[cls];
    if (cur == (first ? first : &_ts_page_empty)) return;
    if (cur != &_ts_page_empty) head_release(heap, cur);
    while (first && !head_install(heap, first)) {
        if (heap->big_linger == first) heap->big_linger = NULL;
        list_unlink(q, first);
        page_release(heap, first);
        first = q->first;
    }
}

static void list_unlink(ts_page_queue_t *q, ts_page_t *page) {
    ts_assert(page->prev ? page->prev->next == page : q->first == page);
    ts_assert(page->next ? page->next->prev == page : q->last == page);
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
    ts_assert(q->first != page && q->last != page);
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

/* A fresh page becomes the head; normally the queue is empty (every earlier
 * page went to full), but an adoption may just have queued pages. */
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
    if (old && old->used == 0) _ts_page_retire(heap, old);
}

/* Remove from its queue; a removed head gives its blocks back first (the
 * caller looks at used), and the next page becomes the head. */
static void queue_remove(ts_heap_t *heap, ts_page_t *page) {
    if (heap->big_linger == page) heap->big_linger = NULL; /* every page leaves through here */
    if (heap->head[page->cls] == page) head_release(heap, page);
    list_unlink(&heap->queue[page->cls], page);
    queue_fix_head(heap, page->cls);
}

/* ---- one page ---------------------------------------------------------------- */

/* Where block 0 of a small class starts in its page. Each class's first
 * blocks are the ones LIFO reuse keeps hot; at the same offset of pages 64 KiB
 * apart they would all fall in one L1 (and L2) cache set, and a thread using
 * more than 8 classes would miss on every call (cachegrind, lecture1 with a
 * 32 KiB 8-way L1: 0.25 misses per malloc/free pair, 0.005 coloured). So
 * pages start their blocks at one of 16 line offsets by position, rounded to
 * the block size's power-of-two factor, which keeps every block aligned as
 * well as its size allows (_ts_class_aligned relies on that). The skipped
 * bytes (at most 1 KiB of 64) are address space only: the page's first 4 KiB
 * are touched anyway. */
static uint32_t page_colour(const ts_page_t *page, uint32_t size) {
    if (size > TS_COLOUR_MAX_BLOCK) return 0;
    uint32_t line = (page->index * 5u) & 15u; /* 16 neighbouring pages: 16 offsets */
    uint32_t pow2 = size & -size;
    return ((line * 64u) + pow2 - 1) & ~(pow2 - 1);
}

static void page_init(ts_heap_t *heap, ts_page_t *page, unsigned cls) {
    ts_assert(cls < TS_CLASS_COUNT && ts_page_state(page) == TS_PAGE_IN_USE);
    ts_assert(_ts_classes[cls].kind == ts_segment_of(page)->kind);
    const ts_class_info_t *ci = &_ts_classes[cls];
    uint32_t colour = page_colour(page, ci->size);
    page->start = page->base + colour;
    page->block_size = ci->size;
    page->inv = ci->inv;
    page->tz = ci->tz;
    page->mark_key = _ts_new_mark_key();
    page->reserved = (page->area - colour) / ci->size;
    ts_assert(page->reserved > 0);
#if TS_SECURE
    _ts_secure_page_init(page);
#endif
    if (ci->kind == TS_KIND_SMALL && ci->size >= TS_SWEEP_MIN_BLOCK) /* the sweep looks here */
        atomic_store_explicit(&ts_segment_of(page)->sweepable, 1, memory_order_relaxed);
    uint32_t per_batch = TS_RBATCH_MAX_BYTES / ci->size;
    page->rbatch_max = (uint8_t)(per_batch > TS_RBATCH_MAX ? TS_RBATCH_MAX
                                 : per_batch < 1           ? 1
                                                           : per_batch);
    page->cls = (uint8_t)cls;
    unsigned by_class = (cls + heap->id * 7u) & (TS_RBATCH_SLOTS - 1);
    unsigned by_index = ts_rbatch_slot_for(ts_segment_of(page), page->index);
    page->rslot = (uint8_t)by_class;
    page->rslot_alt = (uint8_t)(by_index != by_class ? by_index : by_index ^ (TS_RBATCH_SLOTS / 2));
    page->capacity = 0;
    atomic_store_explicit(&page->carved, 0, memory_order_relaxed);
    page->free = NULL;
    page->used = 0;
    page->is_head = page->in_full = 0;
    atomic_store_explicit(&page->rescued, 0, memory_order_relaxed);
    page->next = page->prev = NULL;
    atomic_store_explicit(&page->thread_free, 0, memory_order_relaxed);
    atomic_store_explicit(&page->swept_tf, 0, memory_order_relaxed);
    atomic_store_explicit(&page->owner, (uintptr_t)heap, memory_order_release);
}

/* Carve the next blocks into the (empty) free list (a head's used is settled
 * from capacity when it stops being head). */
static bool page_extend(ts_page_t *page) {
    uint32_t left = page->reserved - page->capacity;
    if (!left) return false;
    uint32_t bs = page->block_size;
    char *first = (char *)page->start + (size_t)page->capacity * bs;
    uint32_t room = TS_EXTEND_BYTES - (uint32_t)((uintptr_t)first & (TS_EXTEND_BYTES - 1));
    if (room < TS_EXTEND_BYTES / 2)
        room += TS_EXTEND_BYTES;       /* and the next: half a page at least */
    uint32_t n = (room + bs - 1) / bs; /* the blocks that start in these OS pages */
    if (n > left) n = left;
    /* Past `touched` the page holds nothing written since it was mapped or
     * purged: its first block is zero but for the words carving writes. */
    uintptr_t owner = ts_page_owner(page) & ~TS_OWNER_FLAGS;
    if ((uintptr_t)first - page->base >= page->touched && owner)
        ((ts_heap_t *)owner)->fresh = (ts_block_t *)first;
#if TS_SECURE
    _ts_secure_carve(page, first, n); /* in a random order */
#else
    char *b = first;
    for (uint32_t i = 1; i < n; i++, b += bs) {
        ((ts_block_t *)b)->next = (ts_block_t *)(b + bs);
        ts_block_mark(page, b);
    }
    ((ts_block_t *)b)->next = NULL;
    ts_block_mark(page, b);
    page->free = (ts_block_t *)first;
#endif
    page->capacity += n;
    uint32_t end = (uint32_t)(page->start - page->base) + page->capacity * bs;
    if (end > page->touched) {
        _ts_stat_touch(end - page->touched); /* the purge thread's rule counts it */
        page->touched = end;
    }
    ts_assert(page->capacity <= page->reserved && page->touched <= page->area);
    atomic_store_explicit(&page->carved, page->capacity, memory_order_release);
    return true;
}

/* Take the blocks other threads freed; they become the free list (which is
 * empty when this is called, or the page is about to be retired). A head's
 * used is settled from the list when it stops being head. No walk to count
 * them: the count travels in the word. */
static bool page_take_remote(ts_page_t *page) {
    uint64_t w = atomic_load_explicit(&page->thread_free, memory_order_relaxed);
    while (!atomic_compare_exchange_weak_explicit(&page->thread_free, &w,
                                                  ts_tf_make(NULL, 0, ts_tf_state(w)),
                                                  memory_order_acquire, memory_order_relaxed)) {
    }
    ts_block_t *list = ts_tf_ptr(w);
    if (list) atomic_store_explicit(&page->swept_tf, 0, memory_order_relaxed); /* see swept_tf */
    page->free = list;
    ts_assert(page->is_head || ts_tf_count(w) <= page->used);
    if (!page->is_head) page->used -= ts_tf_count(w);
    /* Touch the first blocks now: these lines were written by the freeing
     * thread, and one tight walk over them (which the hardware prefetcher
     * follows) costs less than one miss in each of the next mallocs. */
    for (int i = 0; list && i < 64; i++) list = ts_link_touch(page, list);
    return page->free != NULL;
}

/* Find blocks for an empty free list: other threads' frees first, then
 * fresh blocks. (The owner's own frees go straight back to the free list.)
 * The list seen may be gone when taken: the purge thread borrows it for a
 * moment (sweep.c). */
static bool page_refill(ts_page_t *page) {
    if (ts_tf_ptr(atomic_load_explicit(&page->thread_free, memory_order_relaxed)) &&
        page_take_remote(page))
        return true;
    return page_extend(page);
}

/* Move an exhausted page (the head of its queue) to the full list. False
 * when blocks arrived from other threads meanwhile (they are now its free
 * blocks and it stays). */
static bool page_to_full(ts_heap_t *heap, ts_page_t *page) {
    unsigned spins = 0;
    for (;;) {
        uint64_t w = atomic_load_explicit(&page->thread_free, memory_order_relaxed);
        if (ts_tf_ptr(w)) {
            if (page_take_remote(page)) return false;
            continue; /* borrowed meanwhile (sweep.c): look again */
        }
        unsigned st = ts_tf_state(w);
        if (st == TS_TF_NOTIFY) break;
        if (st == TS_TF_NOTIFYING) { /* an earlier hand-over is finishing */
            _ts_spin_turn(&spins);
            continue;
        }
        if (atomic_compare_exchange_weak_explicit(&page->thread_free, &w,
                                                  ts_tf_make(NULL, 0, TS_TF_NOTIFY),
                                                  memory_order_acq_rel, memory_order_relaxed))
            break;
    }
    ts_assert(!page->in_full && heap->queue[page->cls].first == page);
    queue_remove(heap, page);
    list_push_back(&heap->full, page);
    page->in_full = 1;
    /* Release: the purge thread may claim it from here on (rescue.c). */
    atomic_store_explicit(&page->owner, (uintptr_t)heap | TS_OWNER_FULL, memory_order_release);
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
            _ts_spin_turn(&spins);
            continue;
        }
        if (atomic_compare_exchange_weak_explicit(&page->thread_free, &w, w & ~(uint64_t)3,
                                                  memory_order_acq_rel, memory_order_relaxed))
            return;
    }
}

/* A block came back to a page in the full list: it may allocate again. */
void _ts_page_unfull(ts_heap_t *heap, ts_page_t *page) {
    /* Out of FULL by CAS: until it succeeds the purge thread may claim the
     * page (rescue.c), and a check followed by a store would let the owner
     * change the page under the claim. Wait while the page is claimed. */
    unsigned spins = 0;
    for (;;) {
        uintptr_t w = (uintptr_t)heap | TS_OWNER_FULL;
        /* Release as well: a claim of the queue page (rescue.c) then sees
         * what the owner wrote before. */
        if (atomic_compare_exchange_strong_explicit(&page->owner, &w, (uintptr_t)heap,
                                                    memory_order_acq_rel, memory_order_relaxed))
            break;
        if (w != ((uintptr_t)heap | TS_OWNER_CLAIMED)) { /* not from the full list: as before */
            atomic_store_explicit(&page->owner, (uintptr_t)heap, memory_order_release);
            break;
        }
        _ts_spin_turn(&spins);
    }
    ts_assert(page->in_full);
    list_unlink(&heap->full, page);
    page->in_full = 0;
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

/* The flag and the claims are ordered by a full fence on each side: either
 * the purge thread sees the flag after its claim (and lets the page go), or
 * the walk sees the claim (and waits for it). */
void _ts_heap_walk_begin(ts_heap_t *heap) {
    atomic_store_explicit(&heap->walking, 1, memory_order_relaxed);
    atomic_thread_fence(memory_order_seq_cst);
}

void _ts_heap_walk_end(ts_heap_t *heap) {
    atomic_store_explicit(&heap->walking, 0, memory_order_release);
}

bool _ts_page_walkable(ts_heap_t *heap, ts_page_t *page) {
    unsigned spins = 0;
    while (atomic_load_explicit(&page->owner, memory_order_acquire) ==
           ((uintptr_t)heap | TS_OWNER_CLAIMED))
        _ts_spin_turn(&spins);
    return !atomic_load_explicit(&page->rescued, memory_order_relaxed);
}

/* A page no heap list holds any more goes back to its segment, once a remote
 * freer's notification hand-over (if any) is finished. */
static void page_release(ts_heap_t *heap, ts_page_t *page) {
    ts_assert(!page->is_head && !page->in_full && !page->next && !page->prev);
    ts_assert(heap->big_linger != page && ts_page_state(page) == TS_PAGE_IN_USE);
    _ts_page_settle_notify(page);
    page->free = NULL;
    page->used = 0;
    atomic_store_explicit(&page->thread_free, 0, memory_order_relaxed);
    atomic_store_explicit(&page->owner, 0, memory_order_relaxed);
    _ts_segment_page_free(heap, page);
}

/* used == 0: hand the page back to its segment. */
void _ts_page_retire(ts_heap_t *heap, ts_page_t *page) {
    if (TS_CHECKED) _ts_check_page_retire(page);
    if (page->in_full) {
        list_unlink(&heap->full, page);
        page->in_full = 0;
    } else {
        queue_remove(heap, page);
    }
    page_release(heap, page);
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
    /* A sweep pass holding the list pushes it back to a detached page. */
    if (ts_page_take_all_back(page)) {
        page->used = 0;
        page->free = NULL;
        atomic_store_explicit(&page->thread_free, 0, memory_order_relaxed);
        atomic_store_explicit(&page->owner, 0, memory_order_relaxed);
        _ts_segment_page_free(heap, page);
        return;
    }
    /* Before the segment is abandoned (which asks for a pass): a push from
     * here on asks again (free.c), one before it is seen by that pass. */
    atomic_fetch_or_explicit(&page->thread_free, TS_TF_DETACHED, memory_order_relaxed);
    atomic_store_explicit(&page->owner, 0, memory_order_release);
}

/* A block being freed goes back on its page's list, marked (every caller has
 * checked that it was not free already). */
void _ts_page_push_local(ts_heap_t *heap, ts_page_t *page, ts_block_t *block) {
    ts_link_set(page, block, page->free);
    ts_block_mark(page, block);
    page->free = block;
    if (!page->is_head && --page->used == 0) _ts_page_retire(heap, page);
}

/* ---- allocation slow path ------------------------------------------------------- */

/* The lingering page, while it is empty. */
static ts_page_t *linger_empty(const ts_heap_t *heap) {
    ts_page_t *page = heap->big_linger;
    return page && page->used == 0 ? page : NULL;
}

static void page_cache(ts_heap_t *heap, ts_page_t *page);

/* Take kept empty big page i out of the heap's slots (order kept). */
static ts_page_t *empty_big_take(ts_heap_t *heap, unsigned i) {
    ts_page_t *page = heap->empty_big[i];
    for (; i + 1 < TS_EMPTY_BIG_KEEP; i++) {
        heap->empty_big[i] = heap->empty_big[i + 1];
        heap->empty_big_seen[i] = heap->empty_big_seen[i + 1];
    }
    heap->empty_big[TS_EMPTY_BIG_KEEP - 1] = NULL;
    page->cached = 0;
    return page;
}

/* A big page about to take another class gives back what the old one
 * touched (_ts_segment_purge_relayout); the same class reuses it as it is. */
static void relayout_purge(ts_page_t *page, unsigned cls) {
    if (page->touched && page->cls != cls && _ts_classes[cls].size > TS_RELAYOUT_PURGE_MIN)
        _ts_segment_purge_relayout(page);
}

static ts_page_t *page_fresh(ts_heap_t *heap, unsigned cls, bool may_adopt, bool *adopted) {
    enum ts_kind kind = (enum ts_kind)_ts_classes[cls].kind;
    ts_page_t *page = NULL;
    if (heap->empty_big[0] && kind == TS_KIND_BIG) {
        /* A kept page of this class as it is; else, with every slot taken,
         * the oldest re-made (so classes used in turn keep a page each). */
        unsigned pick = TS_EMPTY_BIG_KEEP;
        for (unsigned i = 0; i < TS_EMPTY_BIG_KEEP && heap->empty_big[i]; i++)
            if (heap->empty_big[i]->cls == cls) pick = i;
        if (pick == TS_EMPTY_BIG_KEEP && heap->empty_big[TS_EMPTY_BIG_KEEP - 1]) pick = 0;
        if (pick < TS_EMPTY_BIG_KEEP) page = empty_big_take(heap, pick);
    }
    if (page) {
        if (page->cls == cls) {
            atomic_store_explicit(&page->owner, (uintptr_t)heap, memory_order_release);
            if (!page->free) page_refill(page);
        } else {
            relayout_purge(page, cls);
            page_init(heap, page, cls);
            page_extend(page);
        }
        queue_push_front(heap, page);
        return page;
    }
    page = _ts_segment_page_alloc(heap, kind, cls, may_adopt, adopted);
    ts_page_t *lingering = page || *adopted ? NULL : linger_empty(heap);
    if (lingering) page_cache(heap, lingering);     /* out of memory: kept like the others */
    if (!page && !*adopted && heap->empty_big[0]) { /* out of memory (not an adoption) */
        if (kind == TS_KIND_BIG) {
            page = empty_big_take(heap, 0); /* re-make a kept page after all */
        } else { /* their segments go free: one may be laid out for this kind */
            _ts_page_uncache(heap);
            page = _ts_segment_page_alloc(heap, kind, cls, false, adopted);
        }
    }
    if (!page) return NULL;
    relayout_purge(page, cls);
    page_init(heap, page, cls);
    page_extend(page);
    queue_push_front(heap, page);
    return page;
}

/* An empty big page at the head of its queue: keep it for the next request
 * (with TS_EMPTY_BIG_KEEP kept already, the oldest goes back to its
 * segment). Its owner word carries the FULL bit so that any free into it (a
 * double free) takes the slow path. */
static void page_cache(ts_heap_t *heap, ts_page_t *page) {
    /* Its last block may have come back through a hand-over whose freer has
     * one store left (NOTIFYING -> NORMAL): let it finish now, not in a fork
     * child where that freer does not exist. */
    _ts_page_settle_notify(page);
    if (heap->empty_big[TS_EMPTY_BIG_KEEP - 1]) page_release(heap, empty_big_take(heap, 0));
    queue_remove(heap, page);
    page->cached = 1;
    unsigned i = 0;
    while (heap->empty_big[i]) i++;
    heap->empty_big[i] = page;
    heap->empty_big_seen[i] = 0;
    atomic_store_explicit(&page->owner, (uintptr_t)heap | TS_OWNER_FULL, memory_order_relaxed);
}

void _ts_page_uncache(ts_heap_t *heap) {
    while (heap->empty_big[0]) page_release(heap, empty_big_take(heap, 0));
}

/* used == 0 on the free fast path (which keeps the lingering page that
 * empties again itself: ts_page_lingers_again). Kept pages are the empty
 * lingering one and those in the slots. A page beside others kept must have
 * little of it touched since its last purge (in any class): an idle thread
 * then keeps at most one big page's worth resident plus
 * TS_EMPTY_BIG_EXTRA_BYTES for each other. */
void _ts_page_empty_at_free(ts_heap_t *heap, ts_page_t *page) {
    if (page->is_head) { /* 2^31 frees since it became head: not exact, not empty */
        page->used = TS_HEAD_USED_BIAS;
        return;
    }
    ts_page_t *lingering = linger_empty(heap);
    if (lingering == page) lingering = NULL;
    bool keep = page->block_size > TS_MEDIUM_PAGE_MAX && heap->queue[page->cls].first == page &&
                ((!heap->empty_big[0] && !lingering) || page->touched <= TS_EMPTY_BIG_EXTRA_BYTES);
    if (!keep) {
        _ts_page_retire(heap, page);
        return;
    }
    /* It stays first in its queue with its blocks on its list, so the next
     * malloc of its class pops one as from any page (a block of one big size
     * malloc'ed and freed in a loop: no page re-made per call). The page that
     * lingered before goes to a slot. */
    if (lingering) page_cache(heap, lingering);
    heap->big_linger = page;
}

/* Allocations of a class by this heap so far (fast path and slow path). */
static uint64_t class_allocs(const ts_heap_t *heap, unsigned cls) {
    const ts_class_info_t *ci = &_ts_classes[cls];
    uint64_t n = heap->alloc_class[cls];
    for (unsigned s = ci->direct_lo; s <= ci->direct_hi; s++) n += heap->alloc_slot[s];
    return n;
}

void *_ts_heap_malloc_class(ts_heap_t *heap, unsigned cls) {
    void *ready = ts_queue_pop(heap, cls); /* e.g. aligned or calloc requests */
    if (ready) return ready;
    ts_page_queue_t *q = &heap->queue[cls];
    ts_page_t *page;
    _ts_heap_slow_tick(heap);
    /* A big class: a block freed to the page of a thread that exited
     * (bigcache.c), unless blocks wait for us in our first page, before
     * carving fresh memory. Not for ts_heap_new's heaps: their blocks stay
     * their own. */
    page = q->first;
    if (_ts_classes[cls].kind == TS_KIND_BIG && !heap->user &&
        (!page || (!page->free &&
                   !ts_tf_ptr(atomic_load_explicit(&page->thread_free, memory_order_relaxed))))) {
        void *block = _ts_bigcache_pop(cls);
        if (block) {
            heap->alloc_class[cls]++;
            return block;
        }
    }
    for (unsigned round = 0;; round++) {
        page = q->first;
        while (page && !page->free && !page_refill(page)) {
            if (!page_to_full(heap, page)) break;
            page = q->first; /* the next page is the head now */
        }
        if (page) break;
        bool adopted = false;
        page = page_fresh(heap, cls, round < 4, &adopted);
        if (page) break;
        if (!adopted) return NULL; /* the OS said no */
    }
    return ts_queue_pop(heap, cls); /* `page`, first in its queue, has a block */
}

/* Idle-page collection (heap.c calls it about every purge delay): retire
 * queue pages whose blocks have all come back, and empty heads and the empty
 * lingering big page of classes this heap did not allocate from since the
 * last collection (all of them when `force`); kept big pages in the slots go
 * at the second collection that finds them there. */
void _ts_pages_collect(ts_heap_t *heap, bool force) {
    /* Full pages the purge thread rescued while this heap was idle. */
    if (atomic_load_explicit(&heap->rescued, memory_order_relaxed) &&
        atomic_exchange_explicit(&heap->rescued, 0, memory_order_acquire)) {
        for (ts_page_t *page = heap->full.first, *next; page; page = next) {
            next = page->next;
            uintptr_t owner = atomic_load_explicit(&page->owner, memory_order_acquire);
            if ((owner & TS_OWNER_FLAGS) == TS_OWNER_FULL &&
                atomic_load_explicit(&page->rescued, memory_order_relaxed))
                _ts_page_retire(heap, page);
        }
    }
    for (unsigned i = 0; i < TS_EMPTY_BIG_KEEP && heap->empty_big[i];) {
        if (force || heap->empty_big_seen[i]) {
            page_release(heap, empty_big_take(heap, i));
            continue;
        }
        heap->empty_big_seen[i++] = 1;
    }
    for (unsigned cls = 0; cls < TS_CLASS_COUNT; cls++) {
        ts_page_t *page = heap->queue[cls].first;
        if (!page) continue;
        uint64_t allocs = class_allocs(heap, cls);
        bool idle = allocs == heap->allocs_seen[cls];
        heap->allocs_seen[cls] = allocs;
        while (page) {
            ts_page_t *next = page->next;
            /* A head, and the lingering big page, stay while their class is in use. */
            if ((page->is_head || page == heap->big_linger) && !force && !idle) {
                page = next;
                continue;
            }
            if (page->is_head) head_release(heap, page); /* used is exact again; installed below */
            /* Every block handed out came back: retire it. */
            if (ts_page_take_all_back(page)) {
                /* `used` stays the count taken back (page_release zeroes it) */
                _ts_page_retire(heap, page);
                /* Its queue's new first page may have been rescued and retired
                 * with it (queue_fix_head), `next` among them: a released
                 * page's owner word is 0. Then from the first again. */
                if (next && !ts_page_owner(next)) next = heap->queue[cls].first;
            }
            page = next;
        }
        queue_fix_head(heap, cls);
    }
}
