/* Rescue: the purge thread gives back the memory of pages whose blocks other
 * threads freed while the page's owner thread was idle: full pages, and
 * pages waiting in the owner's queues (below, "queue pages").
 *
 * Why: only the owner takes blocks back into its pages (its fast paths use no
 * atomics), so when a thread fills pages and then waits (a producer in
 * pthread_join, say) while others free its blocks, those pages would stay
 * resident until it allocates again. When a page of the full list gets its
 * first block back, the freer hands the blocks to the owner heap's `delayed`
 * list (free.c); later blocks go to the page's thread_free. So a heap whose
 * `delayed` list stayed non-empty while its slow path did not run for its
 * idle wait (one to eight purge delays, ts_heap_idle_ns; looks a period
 * apart, the purge delay or 10 ms, tell) is idle with blocks waiting: the
 * purge thread takes that list, and for each page in it whose blocks are now
 * all free (those in the list plus those in thread_free make `used`), it
 * empties thread_free, purges the page's memory and marks it rescued. The
 * page stays in the owner's full list (the owner's lists are its own); the
 * owner retires it at its next collection, or when it exits. Blocks of the
 * other pages go back to `delayed` (big ones with their insides purged, as
 * sweep.c does for the blocks in thread_free lists), and the look is
 * repeated after 1, 2, ... 64 periods (the purge delay, at least 10 ms);
 * after that the heap is parked until a free wakes it: a hand-over to it, or
 * a push that leaves at most one batch of a page out (free.c).
 *
 * Queue pages get no hand-over: a push that leaves at most one batch of one
 * out sets the heap's rescue_queue flag, and the idle heap's look walks its
 * segments in the registry (registry.c, _ts_segments_rescue) for queue pages
 * whose thread_free holds every block handed out (_ts_rescue_queue_take).
 * Such a page is claimed, its list taken, purged, and published RESCUED in
 * thread_free, FULL in the owner word; the owner retires it without reading
 * its lists (page.c: queue_fix_head, _ts_pages_collect, _ts_page_detach).
 *
 * Invariants:
 * - A page is touched only while claimed: page->owner moves from
 *   heap | FULL to heap | CLAIMED by CAS, and back by CAS (release). The
 *   owner takes a page out of the full list by CAS too (page.c, unfull),
 *   waiting while it is claimed; at thread exit the pool lock keeps passes
 *   away (heap.c). The owner's frees of a claimed page go the remote way
 *   (free.c). A rescued full page keeps no block anywhere: its list is
 *   empty, `used` and thread_free are 0. A rescued queue page keeps its
 *   `used` and a stale list, which nobody reads; thread_free is RESCUED
 *   with `used` blocks, and a push onto it is a double free.
 * - A queue page is claimed only from the exact word heap (not the head,
 *   not full); the owner installs a head by CAS from heap and waits while it
 *   is claimed, and ts_page_take_all_back refuses a claimed page, so nothing
 *   retires it before it is published, by the pass's last access to it.
 * - No page of a heap whose owner walks its blocks (heap->walking: heap
 *   check, visit) is rescued: the flag is read after the claim, a fence on
 *   each side.
 * - Blocks taken from `delayed` are put back only after their page is
 *   unclaimed (the owner would otherwise unfull a claimed page).
 * - The pass runs under the pool lock (heap.c): heaps are not freed under
 *   it, a heap being abandoned (state set under that lock) is skipped, and a
 *   fork waits for the pass.
 *
 * Lock order: pool lock, then the registry lock (queue pages), then a
 * segment's spinlock (segment.c).
 */
#include "core/internal.h"

#define RESCUE_BACKOFF_MAX 6 /* looks 1, 2, ... 2^6 periods apart, then it parks */

/* After a claim: the owner walks its pages' blocks (page.c,
 * _ts_heap_walk_begin), so the page is let go untouched. The fence pairs
 * with the owner's. */
static bool owner_walking(const ts_heap_t *heap) {
    atomic_thread_fence(memory_order_seq_cst);
    return atomic_load_explicit(&heap->walking, memory_order_relaxed) != 0;
}

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

/* ---- queue pages ---- */

/* The owner's own fields of a queue page, read racily (the owner writes
 * them without atomics): whether n blocks out would be all of them, on a
 * fully carved queue page of a list class that is not the head. Under the
 * claim they hold still but for the one free described above. */
TS_RACY_READER static bool queue_page_all_back(const ts_page_t *page, uint32_t n,
                                               uint32_t *reserved) {
    *reserved = page->reserved;
    return page->cls < TS_CLASS_COUNT && ts_class_is_list(page->cls) && !page->is_head &&
           !page->in_full && n && n == *(const volatile uint32_t *)&page->used;
}

/* thread_free holds n > 0 blocks, with no hand-over and no detachment. */
static bool tf_plain(uint64_t w) {
    return ts_tf_count(w) && ts_tf_state(w) == TS_TF_NORMAL && !(w & TS_TF_DETACHED);
}

/* A queue page of idle `heap` (registry lock held; the pool lock keeps the
 * heap from being abandoned): taken when every block it handed out waits in
 * its thread_free list. The page is claimed first, which stops the owner from
 * making it the head (page.c, head_install) or walking it, and sends the
 * owner's frees into it to the slow path. Only a free that read the owner
 * word before the claim can still land: a local free of the page's last live
 * block, whose stores to `free` and `used` come before `used` shows the
 * count taken here, or after the rescue onto a page that is retired without
 * a look at its list; either way every block is free. Then the list is taken
 * by one CAS, which a remote double free or the owner's collection can only
 * precede. */
bool _ts_rescue_queue_take(ts_page_t *page, ts_heap_t *heap, ts_qheld_t *h) {
    uint32_t reserved;
    if (ts_page_state(page) != TS_PAGE_IN_USE) return false;
    uint64_t w = atomic_load_explicit(&page->thread_free, memory_order_relaxed);
    if (!tf_plain(w) || !queue_page_all_back(page, ts_tf_count(w), &reserved)) return false;
    uintptr_t claimed = (uintptr_t)heap | TS_OWNER_CLAIMED, own = (uintptr_t)heap;
    if (!atomic_compare_exchange_strong_explicit(&page->owner, &own, claimed, memory_order_acquire,
                                                 memory_order_relaxed))
        return false; /* the head, full, or not this heap's */
    if (owner_walking(heap)) {
        atomic_store_explicit(&heap->rescue_queue, 1, memory_order_relaxed); /* next look */
        goto unclaim;
    }
    w = atomic_load_explicit(&page->thread_free, memory_order_acquire);
    /* carved == reserved, acquired: every block was carved, and what the
     * owner wrote while carving is seen here (the purge reads `touched`). */
    if (ts_page_state(page) == TS_PAGE_IN_USE && tf_plain(w) &&
        queue_page_all_back(page, ts_tf_count(w), &reserved) &&
        atomic_load_explicit(&page->carved, memory_order_acquire) == reserved &&
        atomic_compare_exchange_strong_explicit(&page->thread_free, &w,
                                                ts_tf_make(NULL, 0, TS_TF_RESCUED),
                                                memory_order_acquire, memory_order_relaxed)) {
        *h = (ts_qheld_t){page, w, false};
        return true;
    }
unclaim:
    atomic_compare_exchange_strong_explicit(&page->owner, &claimed, (uintptr_t)heap,
                                            memory_order_release, memory_order_relaxed);
    return false;
}

/* Purge a page taken (no lock needed). */
void _ts_rescue_queue_purge(ts_qheld_t *h) {
    h->purged = _ts_segment_purge_in_use(h->page);
}

/* Leave a purged page for its owner to retire: thread_free RESCUED with the
 * count, then the owner word FULL (a free into it is a double free), by the
 * last access to the page: from then on the owner may retire it
 * (ts_page_take_all_back refuses while the page is claimed), and its segment
 * may go. A page the OS refused to purge is left as it was. Returns whether
 * it was rescued. */
bool _ts_rescue_queue_publish(const ts_qheld_t *h) {
    ts_page_t *page = h->page;
    uintptr_t claimed = ts_page_owner(page);
    uintptr_t heap = claimed & ~TS_OWNER_FLAGS;
    if (!h->purged) {
        atomic_store_explicit(&page->thread_free, h->tf, memory_order_release);
        atomic_compare_exchange_strong_explicit(&page->owner, &claimed, heap, memory_order_release,
                                                memory_order_relaxed);
        return false;
    }
    atomic_store_explicit(&page->rescued, 1, memory_order_relaxed);
    atomic_store_explicit(&page->thread_free, ts_tf_make(NULL, ts_tf_count(h->tf), TS_TF_RESCUED),
                          memory_order_release);
    atomic_fetch_add_explicit(&_ts_stats.rescued_pages, 1, memory_order_relaxed);
    atomic_compare_exchange_strong_explicit(&page->owner, &claimed, heap | TS_OWNER_FULL,
                                            memory_order_release, memory_order_relaxed);
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
            done = !owner_walking(heap) && rescue_claimed(&r);
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

/* Blocks wait for the heap: handed over for full pages, or pushed back to a
 * queue page that may now have them all. */
static bool heap_waiting(ts_heap_t *heap) {
    return atomic_load_explicit(&heap->delayed, memory_order_relaxed) ||
           atomic_load_explicit(&heap->rescue_queue, memory_order_relaxed);
}

/* Everything that can be rescued of an idle heap now; a give-back is noted
 * for the owner (_ts_heap_note_give_back): coming back soon after it makes
 * the heap's next idle wait longer. */
static uint32_t rescue_all(ts_heap_t *heap, uint32_t stamp, uint64_t now) {
    uint32_t rescued = rescue_heap(heap, stamp);
    if (atomic_load_explicit(&heap->rescue_queue, memory_order_relaxed) &&
        atomic_exchange_explicit(&heap->rescue_queue, 0, memory_order_relaxed))
        rescued += _ts_segments_rescue(heap);
    if (rescued) _ts_heap_note_give_back(heap, now);
    return rescued;
}

/* One heap, under the pool lock (heap.c's _ts_heaps_rescue walks them);
 * returns when to look at it again. Only a heap seen idle for its idle wait
 * (ts_heap_idle_ns): malloc_trim(), which forces the other purges, does not
 * rescue pages whose owner may be about to reuse them.
 * After RESCUE_BACKOFF_MAX looks in a row that rescued nothing the heap is
 * parked: not looked at until a free wakes it (free.c, rescue_wake), so an
 * idle process whose idle thread keeps some blocks out sleeps. */
uint64_t _ts_heap_rescue(ts_heap_t *heap, uint64_t now) {
    if (heap->state != TS_HEAP_ACTIVE || !heap_waiting(heap)) {
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
        heap->rescue_idle_at = heap->rescue_at = now + ts_heap_idle_ns(heap);
        /* A pass of malloc_trim's or of a slow path drops the deadline:
         * the helper's next pass learns it. (Not from the helper's own
         * pass: with a purge delay under the period that would make it
         * pass again at once, over and over while the owner is busy.) */
        if (!_ts_purge_is_helper()) _ts_purge_schedule_look();
    }
    if (now < heap->rescue_idle_at) { /* rescue_at is the same until then */
        /* A purge delay lowered since: idle as soon as the new one says (the
         * deadline was taken with the old one, 8 hours out at its maximum). */
        uint64_t idle_at = now + ts_heap_idle_ns(heap);
        if (idle_at < heap->rescue_idle_at) heap->rescue_idle_at = heap->rescue_at = idle_at;
        /* Until the owner counts as idle, look a period apart: the helper's
         * deadline then stays within a period, so the hand-overs to a busy
         * owner's pages (free.c) do not wake it for a pass each (a pass per
         * hand-over made xthread 1.2x slower). */
        return now + period < heap->rescue_idle_at ? now + period : heap->rescue_idle_at;
    }
    if (now < heap->rescue_at) return heap->rescue_at; /* backing off */
    uint32_t rescued = rescue_all(heap, slow, now);
    heap->rescue_seen_slow = slow;
    if (!rescued && heap->rescue_backoff == RESCUE_BACKOFF_MAX) {
        /* Park, then look once more: a push that came before the heap was
         * parked did not wake it (free.c's fence pairs with this one). Once
         * woken, the next look waits a period, so that wake-ups coalesce. */
        atomic_store_explicit(&heap->rescue_parked, 1, memory_order_relaxed);
        atomic_thread_fence(memory_order_seq_cst);
        rescued = rescue_all(heap, slow, now);
        heap->rescue_at = now + period;
        if (!rescued) return UINT64_MAX;
        atomic_store_explicit(&heap->rescue_parked, 0, memory_order_relaxed);
    }
    if (!heap_waiting(heap)) {
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
