/* free(): everything beyond the owner's fast path (fastpath.h): pointer checks,
 * frees from other threads, pages that come back from the full list.
 *
 * A block freed by a thread that does not own its page goes back with one CAS
 * on the page's thread_free word. Small blocks are first gathered per page in
 * the freeing heap (heap->rbatch) so that one CAS returns up to
 * TS_RBATCH_MAX of them (at most TS_RBATCH_MAX_BYTES); a batch is pushed when
 * it is full, when another page needs its slot, and on the freeing thread's
 * next malloc slow path or exit.
 *
 * Invariants:
 * - A pointer is proven ours (_ts_segmap) before any header is read.
 * - Every block waiting anywhere to be reused carries its free mark
 *   (internal.h), so a second free of it is caught before it is linked.
 * - A remote freer touches nothing of the page after its CAS succeeds, except
 *   in the NOTIFYING hand-over, during which the owner keeps the page alive
 *   (it waits for NORMAL before retiring the page or abandoning the heap).
 */
#include "core/internal.h"
#include "core/prof.h"
#include "core/valgrind.h"

int _ts_locate(const void *p, ts_page_t **page) {
    uintptr_t u = (uintptr_t)p;
    size_t ci = u >> TS_SEGMENT_SHIFT;
    if (ci >= TS_SEGMAP_ENTRIES) return TS_PTR_FOREIGN;
    unsigned m = atomic_load_explicit(&_ts_segmap[ci], memory_order_acquire);
    if (m == TS_MAP_NONE) return TS_PTR_FOREIGN;
    if (m == TS_MAP_LARGE) return TS_PTR_LARGE;
    *page = ts_page_of(ts_segment_of(p), p, ts_map_shift(m));
    return TS_PTR_BLOCK;
}

size_t _ts_block_usable(const ts_page_t *page, const void *p, const char *func) {
    if (ts_page_state(page) != TS_PAGE_IN_USE || !ts_page_block_ok(page, (uintptr_t)p))
        _ts_invalid_pointer(func, p);
    if (ts_block_marked(page, (void *)p) ||
        atomic_load_explicit(&page->rescued, memory_order_relaxed))
        _ts_double_free(func, p); /* freed already (a rescued page's blocks all are) */
    return page->block_size;
}

size_t _ts_usable_checked(const void *p, const char *func) {
    if (ts_vg_core_routes()) return _ts_vg_core_usable(p);
    ts_page_t *page = NULL;
    switch (_ts_locate(p, &page)) {
    case TS_PTR_FOREIGN:
        _ts_invalid_pointer(func, p);
    case TS_PTR_LARGE:
        return _ts_large_usable(p, func);
    default:
        return _ts_block_usable(page, p, func);
    }
}

/* ---- handing blocks back to their page ---------------------------------------------- */

/* The purge thread stopped looking at the heap (rescue.c): ask it to look
 * again. The fence pairs with the one after it parks the heap: either this
 * sees the heap parked, or its last look sees the push that came before. */
static void rescue_wake(ts_heap_t *heap) {
    atomic_thread_fence(memory_order_seq_cst);
    if (atomic_load_explicit(&heap->rescue_parked, memory_order_relaxed) &&
        atomic_exchange_explicit(&heap->rescue_parked, 0, memory_order_relaxed))
        _ts_purge_schedule_look();
}

/* A push gave back all or nearly all the blocks of a queue page (not the
 * head) of `heap`: should the heap be idle, the purge thread may rescue the
 * page (rescue.c). Once until its next look. */
static void queue_wake(ts_heap_t *heap) {
    /* Set, the flag waits for a look; a parked heap's last look took it
     * (rescue.c), so the push that sets it again wakes the heap. */
    if (atomic_load_explicit(&heap->rescue_queue, memory_order_relaxed) ||
        atomic_exchange_explicit(&heap->rescue_queue, 1, memory_order_seq_cst))
        return;
    _ts_purge_schedule_look();
    rescue_wake(heap);
}

/* The page is in its owner's full list: give the chain to the owner heap,
 * which frees the blocks itself and so sees the page has room. */
static void notify_owner(ts_page_t *page, ts_block_t *head, ts_block_t *tail) {
    ts_heap_t *owner = (ts_heap_t *)(ts_page_owner(page) & ~TS_OWNER_FLAGS);
    ts_block_t *old = atomic_load_explicit(&owner->delayed, memory_order_relaxed);
    do {
        ts_link_set(page, tail, old);
    } while (!atomic_compare_exchange_weak_explicit(&owner->delayed, &old, head,
                                                    memory_order_release, memory_order_relaxed));
    uint64_t w = atomic_load_explicit(&page->thread_free, memory_order_relaxed);
    while (!atomic_compare_exchange_weak_explicit(&page->thread_free, &w,
                                                  (w & ~(uint64_t)3) | TS_TF_NORMAL,
                                                  memory_order_release, memory_order_relaxed)) {
    }
    /* Blocks now wait for the owner: should it stay idle, the purge thread
     * rescues its pages (rescue.c). Once per non-empty spell of the list; and
     * a heap parked in an earlier spell is woken, whichever this is (with no
     * pass between the spells it stayed parked, and a page whose blocks all
     * came back in this hand-over stayed resident). */
    if (!old) _ts_purge_schedule_look();
    rescue_wake(owner);
}

void _ts_page_push_remote(ts_page_t *page, ts_block_t *head, ts_block_t *tail, uint32_t count) {
    ts_assert(head && tail && count > 0 && count <= page->reserved);
    ts_assert(ts_page_of(ts_segment_of(head), head, ts_segment_of(head)->page_shift) == page);
    /* Read before the push: after it the page may be reclaimed. Heaps are
     * never unmapped, so a stale owner costs at most a needless wake-up. */
    uintptr_t owner_word = ts_page_owner(page);
    /* In its full list: the FULL bit, also set while the purge thread holds
     * the page claimed (FULL | HEAD): that look may miss this push. */
    ts_heap_t *full_owner =
        owner_word & TS_OWNER_FULL ? (ts_heap_t *)(owner_word & ~TS_OWNER_FLAGS) : NULL;
    /* Big enough for the purge thread to give its inside back should the
     * owner stay idle (sweep.c). */
    bool sweepable = page->block_size >= TS_SWEEP_MIN_BLOCK;
    uint32_t near_all = atomic_load_explicit(&page->carved, memory_order_relaxed);
    near_all = near_all > page->rbatch_max ? near_all - page->rbatch_max : 0;
    uint64_t w = atomic_load_explicit(&page->thread_free, memory_order_relaxed);
    for (;;) {
        unsigned st = ts_tf_state(w);
        if (st == TS_TF_NOTIFY) {
            if (atomic_compare_exchange_weak_explicit(&page->thread_free, &w,
                                                      (w & ~(uint64_t)3) | TS_TF_NOTIFYING,
                                                      memory_order_acquire, memory_order_relaxed)) {
                notify_owner(page, head, tail);
                return;
            }
            continue;
        }
        if (ts_unlikely(st == TS_TF_RESCUED))
            _ts_double_free("free", head); /* every block of the page is free */
        ts_block_t *old = ts_tf_ptr(w);
        if (ts_unlikely(old == head)) _ts_double_free("free", head);
        ts_link_set(page, tail, old);
        uint64_t next = ts_tf_make(head, ts_tf_count(w) + count, st) | (w & TS_TF_DETACHED);
        if (atomic_compare_exchange_weak_explicit(&page->thread_free, &w, next,
                                                  memory_order_release, memory_order_relaxed))
            break;
    }
    /* The page may be reclaimed from here on: only the word replaced counts. */
    if (w & TS_TF_DETACHED) _ts_abandoned_note_free();
    if (sweepable && !atomic_load_explicit(&_ts_sweep_wanted, memory_order_relaxed))
        _ts_sweep_request();
    /* A full page has all its blocks back but at most one hand-over batch:
     * with its owner idle, the purge thread may rescue it now (rescue.c). */
    if (ts_unlikely(ts_tf_count(w) + count >= near_all)) {
        if (full_owner)
            rescue_wake(full_owner);
        else if (owner_word && !(owner_word & TS_OWNER_FLAGS))
            queue_wake((ts_heap_t *)owner_word);
    }
}

void _ts_rbatch_flush(ts_heap_t *heap, ts_rbatch_t *b) {
    ts_assert(b->page && b->count > 0 && b->count <= b->page->rbatch_max);
    heap->remote_frees += b->count;
    heap->remote_pushes++;
    _ts_page_push_remote(b->page, b->head, b->tail, b->count);
    b->page = NULL;
    b->count = 0;
    heap->rbatch_used--;
}

void _ts_heap_flush_remote(ts_heap_t *heap) {
    for (unsigned i = 0; i < TS_RBATCH_SLOTS && heap->rbatch_used; i++)
        if (heap->rbatch[i].page) _ts_rbatch_flush(heap, &heap->rbatch[i]);
}

/* free_remote calls since a batch last grew. The fast path adds blocks
 * without a stamp, so a count that changed since the last look means it grew
 * meanwhile (a count only rises until the batch is pushed). */
static uint16_t batch_idle(ts_rbatch_t *b, uint16_t now) {
    if (b->count != b->seen) {
        b->seen = (uint16_t)b->count;
        b->last = now;
    }
    return (uint16_t)(now - b->last);
}

/* A page of a heap made by ts_heap_new (heapapi.c): its blocks are pushed
 * at once, never batched, so ts_heap_destroy finds none held in another
 * thread's batch. While the caller holds a live block of the page its owner
 * can change only from such a heap to a thread's (ts_heap_delete), never
 * the other way; heaps are never unmapped, so the read is safe. */
static bool page_of_user_heap(const ts_page_t *page) {
    const ts_heap_t *owner = (const ts_heap_t *)(ts_page_owner(page) & ~TS_OWNER_FLAGS);
    return owner && atomic_load_explicit(&owner->user, memory_order_relaxed);
}

static void free_remote(ts_heap_t *heap, ts_page_t *page, ts_block_t *block) {
    if (ts_unlikely(heap == &_ts_heap_empty) && !_ts_thread_start_shared()) {
        /* A thread that only frees (a consumer) gets a heap too, once past its
         * start: its frees are then batched per page instead of one CAS each. */
        ts_heap_t *h = _ts_thread_init();
        if (h) heap = h;
    }
    ts_block_mark(page, block);
    if (heap->state != TS_HEAP_ACTIVE) { /* past its heap's destructor, or out of memory */
        atomic_fetch_add_explicit(&_ts_stats.remote_frees, 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&_ts_stats.remote_pushes, 1, memory_order_relaxed);
        _ts_page_push_remote(page, block, block, 1);
        return;
    }
    bool user = page_of_user_heap(page);
    if (page->block_size > TS_RBATCH_MAX_BLOCK || user) {
        /* A big block: kept for the next thread that needs its class when
         * its page's owner exited (bigcache.c). */
        if (page->block_size > TS_MEDIUM_PAGE_MAX && _ts_bigcache_push(page, block)) return;
        heap->remote_frees++;
        heap->remote_pushes++;
        _ts_page_push_remote(page, block, block, 1);
        return;
    }
    /* Two slots per page (internal.h), so that pages the freer works through
     * side by side rarely push each other's batches early. The fast path only
     * tries the first. A batch that has not grown for TS_RBATCH_STALE calls
     * here is stale (a page the freer has finished with leaves a partial one):
     * a stale first slot is taken over, moving the page's batch back from
     * its second slot, so that it returns to the fast path. When both slots
     * hold live batches of other pages, the older is pushed; pushing always
     * the first slot's made two streams of one class take turns in it. */
    ts_rbatch_t *b = &heap->rbatch[page->rslot];
    uint16_t now = ++heap->rbatch_clock;
    if (b->page != page) {
        ts_rbatch_t *alt = &heap->rbatch[page->rslot_alt];
        uint16_t first_idle = b->page ? batch_idle(b, now) : 0;
        bool first_free = !b->page || first_idle > TS_RBATCH_STALE;
        if (alt->page == page && first_free) {
            if (b->page) _ts_rbatch_flush(heap, b);
            *b = *alt;
            alt->page = NULL;
            alt->count = 0;
        } else if (alt->page == page ||
                   (!first_free && (!alt->page || batch_idle(alt, now) > first_idle))) {
            b = alt;
        }
    }
    if (b->page == page) {
        ts_link_set(page, block, b->head);
        b->head = block;
        b->seen = (uint16_t)++b->count;
        b->last = now;
        if (b->count >= page->rbatch_max) _ts_rbatch_flush(heap, b);
        return;
    }
    if (b->page) _ts_rbatch_flush(heap, b);
    ts_link_set(page, block, NULL);
    b->page = page;
    b->head = b->tail = block;
    b->count = 1;
    b->seen = 1;
    b->last = now;
    heap->rbatch_used++;
}

/* Blocks other threads handed over for pages in our full list. */
void _ts_process_delayed(ts_heap_t *heap) {
    ts_block_t *block = atomic_exchange_explicit(&heap->delayed, NULL, memory_order_acquire);
    while (block) {
#if TS_SECURE
        ts_page_t *page = NULL;
        (void)_ts_locate(block, &page);
        ts_block_t *next = _ts_secure_link_any(page, block, "malloc");
#else
        ts_block_t *next = block->next;
        ts_page_t *page = NULL;
        (void)_ts_locate(block, &page);
#endif
        if (ts_page_owner(page) & TS_OWNER_FULL) _ts_page_unfull(heap, page);
        _ts_page_push_local(heap, page, block); /* marked by the freer, who checked it */
        block = next;
    }
}

/* ---- the slow path --------------------------------------------------------------------- */

/* A pointer into a page that is not in use: freed twice if it was a block
 * boundary of the page's last class, else never ours. */
static TS_NORETURN void bad_free(ts_page_t *page, uintptr_t u) {
    if (ts_page_state(page) != TS_PAGE_HEADER && page->block_size && u >= page->start &&
        (u - page->start) % page->block_size == 0 &&
        (u - page->start) / page->block_size < page->reserved)
        _ts_double_free("free", (void *)u);
    _ts_invalid_pointer("free", (void *)u);
}

/* A valid block boundary of a page the calling heap does not own (or owns,
 * in its full list), that did not fit an open batch (fastpath.h tries that),
 * and whose free mark the caller has checked. */
void _ts_free_other(ts_heap_t *heap, ts_page_t *page, ts_block_t *block) {
    uintptr_t u = (uintptr_t)block;
    /* Acquire: a page the purge thread rescued (rescue.c) shows it. */
    uintptr_t owner = atomic_load_explicit(&page->owner, memory_order_acquire);
    if (atomic_load_explicit(&page->rescued, memory_order_relaxed))
        _ts_double_free("free", block); /* every block of it is free */
    if (owner == ((uintptr_t)heap | TS_OWNER_FULL)) {
        if (page->cached) _ts_double_free("free", block); /* every block of it is free */
        _ts_page_unfull(heap, page);
        _ts_page_push_local(heap, page, block);
    } else {
        if (ts_page_state(page) != TS_PAGE_IN_USE) bad_free(page, u);
        free_remote(heap, page, block);
    }
}

void _ts_free_slow(void *p) {
    if (!p) return;
    if (ts_vg_active() && _ts_vg_core_free(p)) return;
    ts_page_t *page = NULL;
    switch (_ts_locate(p, &page)) {
    case TS_PTR_FOREIGN:
        _ts_invalid_pointer("free", p);
    case TS_PTR_LARGE:
        if (TS_PROF_ON() && _ts_prof_free(p)) return; /* a sampled block is a large one */
        _ts_large_free(p, "free");
        return;
    default:
        break;
    }
    if (!ts_page_block_ok(page, (uintptr_t)p)) {
        if (ts_page_state(page) != TS_PAGE_IN_USE) bad_free(page, (uintptr_t)p);
        _ts_invalid_pointer("free", p);
    }
    if (ts_block_marked(page, p)) _ts_double_free("free", p);
    if (_ts_zero_free_bytes) _ts_zero_freed(p, page->block_size); /* zerofree.c */
    ts_heap_t *heap = _ts_tls_heap;
    if ((ts_page_owner(page) & ~TS_OWNER_HEAD) == (uintptr_t)heap)
        _ts_page_push_local(heap, page, (ts_block_t *)p);
    else
        _ts_free_other(heap, page, (ts_block_t *)p);
}
