/* Rescue: the purge thread gives back the memory of full pages whose blocks
 * other threads freed while the page's owner thread was idle.
 *
 * Why: only the owner takes blocks back into its pages (its fast paths use no
 * atomics), so when a thread fills pages and then waits (a producer in
 * pthread_join, say) while others free its blocks, those pages would stay
 * resident until it allocates again. When a page of the full list gets its
 * first block back, the freer hands the blocks to the owner heap's `delayed`
 * list (free.c); later blocks go to the page's thread_free. So a heap whose
 * `delayed` list stayed non-empty while its slow path did not run for five
 * purge delays (_ts_idle_min_ns; looks a period apart, the purge delay or
 * 10 ms, tell) is idle with blocks waiting: the purge thread takes that list,
 * and for each page in it whose blocks are now all free (those in the list
 * plus those in thread_free make `used`), it empties thread_free, purges the
 * page's memory and marks it rescued. The page stays in the owner's full
 * list (the owner's lists are its own); the owner retires it at its next
 * collection, or when it exits. Blocks of the other pages go back to
 * `delayed` (big ones with their insides purged, as sweep.c does for the
 * blocks in thread_free lists), and the look is repeated after 1, 2, ... 64 periods (the purge
 * delay, at least 10 ms); after that the heap is parked until a free wakes
 * it: a hand-over to it, or a push that leaves at most one batch of a page
 * out (free.c).
 *
 * Invariants:
 * - A page is touched only while claimed: page->owner moves from
 *   heap | FULL to heap | CLAIMED by CAS, and back by CAS (release). The
 *   owner takes a page out of the full list by CAS too (page.c, unfull),
 *   waiting while it is claimed; at thread exit the pool lock keeps passes
 *   away (heap.c). The owner's frees of a claimed page go the remote way
 *   (free.c). A rescued page keeps no block anywhere: its list is empty,
 *   `used` and thread_free are 0.
 * - Blocks taken from `delayed` are put back only after their page is
 *   unclaimed (the owner would otherwise unfull a claimed page).
 * - The pass runs under the pool lock (heap.c): heaps are not freed under
 *   it, a heap being abandoned (state set under that lock) is skipped, and a
 *   fork waits for the pass.
 *
 * Lock order: pool lock, then a segment's spinlock (segment.c).
 */
#include "core/internal.h"

#define RESCUE_BACKOFF_MAX 6 /* looks 1, 2, ... 2^6 periods apart, then it parks */

/* A run of the taken list: blocks of one page, consecutive in the list. */
typedef struct run {
    ts_page_t *page;
    ts_block_t *head, *tail;
    uint32_t count;
} run_t;

/* Whether the run's page can be rescued now; if so, rescue it. The page is
 * claimed by the caller. */
static bool rescue_claimed(const run_t *r) {
    ts_page_t *page = r->page;
    ts_assert((ts_page_owner(page) & TS_OWNER_FLAGS) == TS_OWNER_CLAIMED);
    if (page->free || page->is_head || !page->in_full) return false; /* not a full page */
    uint64_t w = atomic_load_explicit(&page->thread_free, memory_order_acquire);
    if (ts_tf_state(w) != TS_TF_NORMAL || (w & TS_TF_DETACHED)) return false;
    if ((uint64_t)r->count + ts_tf_count(w) != page->used) return false; /* blocks still out */
    /* Every block is free: no legitimate free can push here any more. */
    if (!atomic_compare_exchange_strong_explicit(&page->thread_free, &w, 0, memory_order_acquire,
                                                 memory_order_relaxed))
        return false; /* a push came meanwhile (a double free): leave it */
    page->used = 0;
    if (!_ts_segment_purge_in_use(page)) {
        /* The OS said no: the blocks must stay usable. Give them back as
         * the owner would find them: thread_free again, the run to delayed. */
        page->used = r->count + ts_tf_count(w);
        atomic_store_explicit(&page->thread_free, w, memory_order_release);
        return false;
    }
    atomic_store_explicit(&page->rescued, 1, memory_order_relaxed);
    return true;
}

/* Take the heap's delayed list, rescue what can be, put back the rest (with
 * the insides of their big blocks purged: sweep.c; `stamp`, the heap's
 * slow_count). */
static uint32_t rescue_heap(ts_heap_t *heap, uint32_t stamp) {
    ts_block_t *list = atomic_exchange_explicit(&heap->delayed, NULL, memory_order_acquire);
    ts_block_t *back_head = NULL, *back_tail = NULL;
    ts_page_t *back_page = NULL; /* of back_tail (secure.h: links are encoded by page) */
    uint32_t rescued = 0;
    while (list) {
        run_t r = {NULL, list, list, 0};
        (void)_ts_locate(list, &r.page);
        /* The run: this page's blocks in a row. The link out of the run is
         * read before the page's memory may be purged. */
        ts_block_t *b = list;
        for (;;) {
            r.count++;
            r.tail = b;
#if TS_SECURE
            ts_block_t *next = _ts_secure_link_any(r.page, b, "purge");
#else
            ts_block_t *next = b->next;
#endif
            ts_page_t *np = NULL;
            if (next) (void)_ts_locate(next, &np);
            if (np != r.page) {
                list = next;
                break;
            }
            b = next;
        }
        uintptr_t full = (uintptr_t)heap | TS_OWNER_FULL;
        uintptr_t claimed = (uintptr_t)heap | TS_OWNER_CLAIMED;
        bool done = false;
        if (atomic_compare_exchange_strong_explicit(&r.page->owner, &full, claimed,
                                                    memory_order_acquire, memory_order_relaxed)) {
            done = rescue_claimed(&r);
            /* By CAS: should some owner path have stored over the claim (a
             * bug), its value stays. */
            uintptr_t c = claimed;
            atomic_compare_exchange_strong_explicit(&r.page->owner, &c,
                                                    (uintptr_t)heap | TS_OWNER_FULL,
                                                    memory_order_release, memory_order_relaxed);
        }
        if (done) {
            rescued++;
            continue;
        }
        /* Not all free: the insides of its big blocks go back all the same. */
        _ts_sweep_blocks(r.page, r.head, r.count, stamp);
        if (back_tail)
            ts_link_set(back_page, back_tail, r.head);
        else
            back_head = r.head;
        back_tail = r.tail;
        back_page = r.page;
    }
    if (back_head) { /* after every page is unclaimed: the owner may unfull them now */
        ts_block_t *old = atomic_load_explicit(&heap->delayed, memory_order_relaxed);
        do {
            ts_link_set(back_page, back_tail, old);
        } while (!atomic_compare_exchange_weak_explicit(
            &heap->delayed, &old, back_head, memory_order_release, memory_order_relaxed));
    }
    if (rescued) {
        atomic_fetch_add_explicit(&_ts_stats.rescued_pages, rescued, memory_order_relaxed);
        atomic_fetch_add_explicit(&heap->rescued, rescued, memory_order_release);
    }
    return rescued;
}

/* One heap, under the pool lock (heap.c's _ts_heaps_rescue walks them);
 * returns when to look at it again. Only a
 * heap seen idle for _ts_idle_min_ns (five purge delays): malloc_trim(), which forces the other
 * purges, does not rescue pages whose owner may be about to reuse them.
 * After RESCUE_BACKOFF_MAX looks in a row that rescued nothing the heap is
 * parked: not looked at until a free wakes it (free.c, rescue_wake), so an
 * idle process whose idle thread keeps some blocks out sleeps. */
uint64_t _ts_heap_rescue(ts_heap_t *heap, uint64_t now) {
    if (heap->state != TS_HEAP_ACTIVE ||
        !atomic_load_explicit(&heap->delayed, memory_order_relaxed)) {
        heap->rescue_armed = 0;
        heap->rescue_backoff = 0;
        atomic_store_explicit(&heap->rescue_parked, 0, memory_order_relaxed);
        return UINT64_MAX;
    }
    if (atomic_load_explicit(&heap->rescue_parked, memory_order_relaxed)) return UINT64_MAX;
    uint64_t period = _ts_look_period_ns();
    uint32_t slow = atomic_load_explicit(&heap->slow_count, memory_order_relaxed);
    if (!heap->rescue_armed || slow != heap->rescue_seen_slow) {
        /* First seen waiting, or the owner ran since: idle from now on. */
        heap->rescue_armed = 1;
        heap->rescue_seen_slow = slow;
        heap->rescue_backoff = 0;
        heap->rescue_idle_at = heap->rescue_at = now + _ts_idle_min_ns();
        /* A pass of malloc_trim's or of a slow path drops the deadline:
         * the helper's next pass learns it. (Not from the helper's own
         * pass: with a purge delay under the period that would make it
         * pass again at once, over and over while the owner is busy.) */
        if (!_ts_purge_is_helper()) _ts_purge_schedule_look();
    }
    if (now < heap->rescue_idle_at) { /* rescue_at is the same until then */
        /* A purge delay lowered since: idle as soon as the new one says (the
         * deadline was taken with the old one, 5 hours out at its maximum). */
        uint64_t idle_at = now + _ts_idle_min_ns();
        if (idle_at < heap->rescue_idle_at) heap->rescue_idle_at = heap->rescue_at = idle_at;
        /* Until the owner counts as idle, look a period apart: the helper's
         * deadline then stays within a period, so the hand-overs to a busy
         * owner's pages (free.c) do not wake it for a pass each (a pass per
         * hand-over made xthread 1.2x slower). */
        return now + period < heap->rescue_idle_at ? now + period : heap->rescue_idle_at;
    }
    if (now < heap->rescue_at) return heap->rescue_at; /* backing off */
    uint32_t rescued = rescue_heap(heap, slow);
    heap->rescue_seen_slow = slow;
    if (!rescued && heap->rescue_backoff == RESCUE_BACKOFF_MAX) {
        /* Park, then look once more: a push that came before the heap was
         * parked did not wake it (free.c's fence pairs with this one). Once
         * woken, the next look waits a period, so that wake-ups coalesce. */
        atomic_store_explicit(&heap->rescue_parked, 1, memory_order_relaxed);
        atomic_thread_fence(memory_order_seq_cst);
        rescued = rescue_heap(heap, slow);
        heap->rescue_at = now + period;
        if (!rescued) return UINT64_MAX;
        atomic_store_explicit(&heap->rescue_parked, 0, memory_order_relaxed);
    }
    if (!atomic_load_explicit(&heap->delayed, memory_order_relaxed)) {
        heap->rescue_armed = 0;
        return UINT64_MAX;
    }
    /* Blocks still out: look again, less often while nothing comes of it. */
    if (rescued)
        heap->rescue_backoff = 0;
    else
        heap->rescue_backoff++;
    heap->rescue_at = now + (period << heap->rescue_backoff);
    return heap->rescue_at;
}
