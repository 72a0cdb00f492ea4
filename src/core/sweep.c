/* Sweep: the purge thread gives back the insides of big free blocks that
 * other threads freed to the pages of an idle thread.
 *
 * Why: only the owner takes blocks back into its pages (its fast paths use no
 * atomics), so the blocks other threads free wait in the page's thread_free
 * list until the owner's slow path takes them. An owner that stops
 * allocating (a producer in pthread_join, a thread pool worker waiting for
 * work) would keep them resident for as long as it waits: hundreds of MiB in
 * a producer/consumer program (docs/core/memory-to-os.md, "The sweep").
 * rescue.c gives back full pages whose blocks all came back; this gives back
 * the rest, block by block.
 *
 * How: a heap is idle when its slow path did not run for its idle wait
 * (ts_heap_idle_ns: one to eight purge delays, at least 10 ms; passes a
 * period apart, the purge delay or 10 ms, tell). For each page of an idle
 * heap with blocks of at least TS_SWEEP_MIN_BLOCK bytes waiting in
 * thread_free, the pass takes the whole list with one CAS (the page cannot
 * be retired while the blocks are out of it: `used` counts them), purges
 * each block's memory except the first OS page (which holds its link, its
 * free mark, so a double free is still caught, and its swept tag, so that it
 * is not purged again; of an 8 KiB block the second half goes), and pushes
 * the list back as a remote freer would. The owner then finds the blocks as
 * before; they read as zeros beyond their first 4 KiB, which costs a page
 * fault at their next use. The full pages' blocks handed over to `delayed`
 * get the same from rescue.c (_ts_sweep_blocks).
 *
 * Invariants:
 * - The blocks taken are out of every list while the pass holds them, as a
 *   remote freer's are before its push: the page cannot be retired (`used`
 *   counts them), so its segment stays mapped and registered. The owner's
 *   paths that take thread_free cope with finding it empty (page.c:
 *   page_refill, page_to_full) or take it by CAS on the word whose count
 *   they compared (ts_page_take_all_back: _ts_pages_collect,
 *   _ts_page_detach, _ts_heap_adopt).
 * - Lists are taken only from pages whose owner was in the pass's idle set
 *   (ACTIVE, no slow path since the last look), with thread_free NORMAL and
 *   not DETACHED, under the registry lock; they are purged without it, and
 *   pushed back as a remote freer would, whatever happened to the page
 *   meanwhile (full list, owner exited).
 * - A page's swept_tf is the word the last pass left in thread_free (written
 *   under the sweep lock); the owner clears it when it takes a list. While
 *   it equals the page's thread_free word, nothing came since the last sweep
 *   and the owner did not take the list, and the page is skipped. (Without
 *   the clearing, a list made again the same way, same head and count, after
 *   the owner had reused the swept blocks was skipped as swept, as when a
 *   new owner lays out its pages as the previous one did.)
 *
 * When: a remote push of a block of a sweepable size sets _ts_sweep_wanted
 * (and wakes the helper) when it was clear; a pass a period later sweeps
 * what is idle, and comes back a period later while pages wait whose owner
 * was busy, or while pushes go on. Otherwise the pass sleeps: an idle
 * process does no periodic work.
 *
 * Lock order: the sweep lock (one pass at a time; fork waits for it), then
 * the pool lock (to pick the idle heaps) or the registry lock (the walk),
 * then a segment spinlock (internal.h).
 */
#include "core/internal.h"

#define SWEEP_OS_PAGE ((uintptr_t)4096)

_Atomic int _ts_sweep_wanted;
/* One pass at a time: it holds lists outside any other lock while it purges
 * them, so a fork waits for it (heap.c's fork handlers take it). */
static TS_FORK_LOCK pthread_mutex_t sweep_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t sweep_at = UINT64_MAX; /* the next pass (sweep lock); MAX: none */
/* Sweep lock: the idle set (static: passes may run on a program's thread),
 * and which slice of the idle heaps the next pass takes when there are more
 * than a set holds. */
static ts_sweep_set_t sweep_set;
static unsigned sweep_window;
/* Passes in a row in which the OS refused purges (locked memory): the next
 * waits _ts_refused_retry_ns of it (sweep lock). */
static unsigned sweep_refused;

/* A push of a sweepable block (free.c): the first since the last pass asks
 * for one. */
void _ts_sweep_request(void) {
    if (!atomic_exchange_explicit(&_ts_sweep_wanted, 1, memory_order_relaxed))
        _ts_purge_schedule_look();
}

/* A swept block's third word: its free mark mixed with this constant and
 * the owner's slow_count at the sweep. A block that still carries it was
 * swept and has not been handed out since (handing it out again takes a slow
 * path of the owner first: the lists it waits in are taken there), so a later
 * pass skips it: new arrivals do not make a pass purge the whole list again.
 * A program that writes that value there by chance only keeps its block
 * resident. */
#define SWEPT_TAG ((uint64_t)0x5357455054ed5eedull)
TS_INLINE uint64_t swept_tag(const ts_page_t *page, const ts_block_t *b, uint32_t stamp) {
    return ts_mark_of(page, b) ^ SWEPT_TAG ^ ((uint64_t)stamp << 32);
}

/* Purge the first `count` blocks of a chain held by the pass beyond their
 * first OS page (which holds the link, the free mark and the swept tag);
 * returns the last of them, and in *refused how many the OS refused to
 * purge (locked memory): those stay untagged, for a later pass. */
static ts_block_t *purge_chain(const ts_page_t *page, ts_block_t *b, uint32_t count, uint32_t stamp,
                               uint32_t *refused) {
    uint32_t block_size = page->block_size;
    size_t bytes = 0, blocks = 0;
    ts_block_t *last = b;
    /* The last block's link leads out of the run: not followed (secure.h). */
    for (; b && count; b = count > 1 ? ts_link_get(page, b, "purge") : NULL, count--) {
        last = b;
        uint64_t *tag_word = (uint64_t *)b + 2;
        uint64_t tag = swept_tag(page, b, stamp);
        if (*tag_word == tag) continue;
        uintptr_t lo = ts_align_up((uintptr_t)(tag_word + 1), SWEEP_OS_PAGE);
        uintptr_t hi = ((uintptr_t)b + block_size) & ~(SWEEP_OS_PAGE - 1);
        if (hi <= lo) continue;
        if (_ts_os_purge((void *)lo, hi - lo)) {
            *tag_word = tag;
            bytes += hi - lo;
            blocks++;
        } else {
            (*refused)++;
        }
    }
    atomic_fetch_add_explicit(&_ts_stats.swept_bytes, bytes, memory_order_relaxed);
    atomic_fetch_add_explicit(&_ts_stats.swept_blocks, blocks, memory_order_relaxed);
    return last;
}

/* Blocks of a page in its owner's full list that rescue.c took from the
 * heap's `delayed` list and could not rescue (the page has blocks out): the
 * same for them before they go back. `stamp`: the owner's slow_count. */
void _ts_sweep_blocks(ts_page_t *page, ts_block_t *head, uint32_t count, uint32_t stamp) {
    if (page->block_size < TS_SWEEP_MIN_BLOCK) return;
    _ts_segment_sweep_prepare(page);
    uint32_t refused = 0; /* the rescue looks again at blocks it puts back */
    (void)purge_chain(page, head, count, stamp, &refused);
}

/* A page of a registered segment (registry lock held): if its owner is in
 * the pass's idle set and blocks wait in its thread_free that were not
 * swept yet, take the list into `h` (h->page stays NULL otherwise). Returns
 * TS_SWEEP_PENDING when blocks wait whose owner was busy. */
unsigned _ts_sweep_take(ts_page_t *page, const ts_sweep_set_t *set, ts_sweep_held_t *h) {
    h->page = NULL;
    ts_heap_t *heap = (ts_heap_t *)(ts_page_owner(page) & ~TS_OWNER_FLAGS);
    /* swept_tf after thread_free: a list made again after the owner took the
     * swept one was pushed after the owner cleared swept_tf, so it reads 0. */
    uint64_t w = atomic_load_explicit(&page->thread_free, memory_order_acquire);
    if (!heap || !ts_tf_ptr(w) || ts_tf_state(w) != TS_TF_NORMAL || (w & TS_TF_DETACHED) ||
        w == atomic_load_explicit(&page->swept_tf, memory_order_relaxed))
        return TS_SWEEP_NOTHING;
    unsigned lo = 0, hi = set->n; /* the owner in the idle set, by halves */
    while (lo < hi) {
        unsigned mid = (lo + hi) / 2;
        if (set->heap[mid] < heap)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == set->n || set->heap[lo] != heap)
        return TS_SWEEP_PENDING; /* busy (or not this time) */
    uint32_t slow = set->stamp[lo];
    if (!atomic_compare_exchange_strong_explicit(&page->thread_free, &w,
                                                 ts_tf_make(NULL, 0, TS_TF_NORMAL),
                                                 memory_order_acquire, memory_order_relaxed))
        return TS_SWEEP_PENDING; /* it changed: next time */
    /* The blocks are ours: the page stays in use, its class as it is, its
     * segment mapped and registered. Heaps are never unmapped. */
    *h = (ts_sweep_held_t){page, ts_tf_ptr(w), NULL, ts_tf_count(w), slow, 0};
    _ts_heap_note_give_back(heap, set->now);
    return TS_SWEEP_NOTHING;
}

/* Purge a list taken (no lock needed). Blocks that came to the page
 * meanwhile stay in its thread_free: their push asked for a pass of their
 * own, and the tags spare the ones purged here. */
void _ts_sweep_purge(ts_sweep_held_t *h) {
    _ts_segment_sweep_prepare(h->page);
    h->refused = 0;
    h->tail = purge_chain(h->page, h->head, h->count, h->stamp, &h->refused);
}

/* Back as a remote freer would push them: the page may have gone to the full
 * list meanwhile (a hand-over; a rescue parked on it is woken), or its owner
 * may have exited (a detached page: a reclaim pass is asked for). The word
 * this leaves, should nothing come before it, is noted first: after the
 * push the page may be retired. */
void _ts_sweep_give_back(ts_sweep_held_t *h) {
    ts_page_t *page = h->page;
    /* With blocks the OS refused to purge, no note: the next pass looks again. */
    atomic_store_explicit(&page->swept_tf,
                          h->refused ? 0 : ts_tf_make(h->head, h->count, TS_TF_NORMAL),
                          memory_order_relaxed);
    _ts_page_push_remote(page, h->head, h->tail, h->count);
}

/* The rescue was turned back on (ts_option_set): requests made while it was
 * off were dropped, so a pass looks at every heap (the rescue's walk arms
 * those with blocks waiting) and the sweep looks a period later. */
void _ts_sweep_rescue_on(void) {
    atomic_store_explicit(&_ts_sweep_wanted, 1, memory_order_relaxed);
    _ts_purge_schedule_look();
}

/* For tests: when the next pass is due (UINT64_MAX: none). */
uint64_t _ts_sweep_next(void) {
    pthread_mutex_lock(&sweep_lock);
    uint64_t at = sweep_at;
    pthread_mutex_unlock(&sweep_lock);
    return at;
}

/* One pass if one is due (sweep lock: one pass at a time, and a fork waits
 * for it); returns when the next is. */
uint64_t _ts_heaps_sweep(uint64_t now) {
    if (!_ts_option(TS_OPT_RESCUE)) return UINT64_MAX;
    uint64_t period = _ts_look_period_ns();
    pthread_mutex_lock(&sweep_lock);
    bool due = sweep_at != UINT64_MAX && now >= sweep_at;
    if (sweep_at == UINT64_MAX) {
        if (!atomic_load_explicit(&_ts_sweep_wanted, memory_order_relaxed)) {
            pthread_mutex_unlock(&sweep_lock);
            return UINT64_MAX;
        }
        sweep_at = now + period; /* the owners get a period to take the blocks themselves */
    } else if (!due) {
        uint64_t wait = sweep_refused ? _ts_refused_retry_ns(sweep_refused) : period;
        if (sweep_at > now + wait) sweep_at = now + wait; /* a purge delay lowered since */
        uint64_t at = sweep_at;
        pthread_mutex_unlock(&sweep_lock);
        return at;
    }
    /* Which heaps are idle (a look that is not due only notes where they are). */
    unsigned idle = _ts_heaps_sweep_look(&sweep_set, due ? sweep_window : 0, now);
    if (due) {
        atomic_store_explicit(&_ts_sweep_wanted, 0, memory_order_relaxed);
        /* Pages of idle heaps outside the set count as busy ones': another
         * pass comes, with the next slice, until every slice had its turn. */
        unsigned found = _ts_segments_sweep(&sweep_set);
        bool more = idle > (sweep_window + 1) * TS_SWEEP_MAX_IDLE;
        sweep_window = more ? sweep_window + 1 : 0;
        if (!(found & TS_SWEEP_REFUSED))
            sweep_refused = 0;
        else if (sweep_refused < TS_REFUSED_RETRY_MAX)
            sweep_refused++;
        bool again = (found & (TS_SWEEP_PENDING | TS_SWEEP_REFUSED)) ||
                     atomic_load_explicit(&_ts_sweep_wanted, memory_order_relaxed);
        uint64_t wait = sweep_refused ? _ts_refused_retry_ns(sweep_refused) : period;
        sweep_at = again ? now + wait : UINT64_MAX;
    }
    uint64_t at = sweep_at;
    pthread_mutex_unlock(&sweep_lock);
    return at;
}

void _ts_sweep_atfork_prepare(void) {
    pthread_mutex_lock(&sweep_lock);
}
void _ts_sweep_atfork_parent(void) {
    pthread_mutex_unlock(&sweep_lock);
}
void _ts_sweep_atfork_child(void) {
    pthread_mutex_init(&sweep_lock, NULL);
}
