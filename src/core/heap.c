/* Heaps: one per thread, created on the thread's first allocation and
 * abandoned by its pthread key destructor.
 *
 * Heap structures come from a pool mapped from the OS and are never unmapped
 * (a stale pointer to a heap always points at a heap), and are reused by new
 * threads, so thread churn does not grow them.
 *
 * Abandoning a heap (thread exit): push its pending remote frees, wait out any
 * NOTIFYING hand-over to its full pages, free the blocks handed over, retire
 * every page whose blocks are all back, and leave the rest in their segments
 * without an owner. Such segments go to the abandoned list, where another
 * heap adopts them when it needs a page, or the purge thread gives their pages
 * back as the last blocks are freed. Blocks of a dead thread can be freed by
 * any thread at any time (they are remote frees).
 *
 * Once TSALLOC_SHARED_START threads have heaps, a new thread does not get
 * one at once: its first TS_SHARED_START_CALLS allocations and frees of other
 * threads' blocks (which would give it a heap of its own, to batch them) use
 * the shared heap, under shared_lock, and one CAS per remote free. A heap
 * costs a thread about 40 KiB resident (the heap, a segment header and its
 * page descriptors, and one OS page for each class it uses); a thread that
 * makes only a few allocations costs the bytes of its blocks instead, packed
 * beside other threads' blocks. With fewer threads each gets its heap on its
 * first call: no lock, and a single-threaded program maps no segment for a
 * shared heap.
 *
 * A thread that allocates after its heap's destructor ran (a later TLS
 * destructor) uses the shared heap too. A thread that
 * makes its first call after the key destructors ran (glibc frees other
 * threads' TLS blocks there) gets a heap whose destructor never runs: each
 * heap holds a robust mutex for its thread, and the purge thread abandons the
 * heaps whose mutex the kernel marked as left by a dead owner.
 *
 * Lock order: shared_lock, then pool_lock (see internal.h for the rest).
 */
#include "core/internal.h"

#include <errno.h>
#include <pthread.h>
#include <string.h>

#define EMPTY_DIRECT                                                                               \
    { [0 ... TS_DIRECT_SLOTS - 1] = &_ts_page_empty }
#define EMPTY_HEADS                                                                                \
    { [0 ... TS_CLASS_COUNT - 1] = &_ts_page_empty }
ts_heap_t _ts_heap_empty = {.direct = EMPTY_DIRECT, .head = EMPTY_HEADS, .state = TS_HEAP_UNINIT};
ts_heap_t _ts_heap_dead = {.direct = EMPTY_DIRECT, .head = EMPTY_HEADS, .state = TS_HEAP_DEAD};
__thread ts_heap_t *_ts_tls_heap __attribute__((tls_model("initial-exec"))) = &_ts_heap_empty;

static TS_FORK_LOCK pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static TS_STARTUP_DATA ts_heap_t *pool_free;
static TS_STARTUP_DATA ts_heap_t *heaps_all;
static TS_STARTUP_DATA uint32_t heap_ids;

static TS_FORK_LOCK pthread_mutex_t shared_lock = PTHREAD_MUTEX_INITIALIZER;
static ts_heap_t *shared;

/* The main thread's heap while it lives. Until main's heap is freed, main
 * has not called pthread_exit, so other threads' exits need not make the
 * purge thread look at /proc (purge.c). Written under pool_lock. */
static TS_STARTUP_DATA _Atomic(ts_heap_t *) main_heap;
/* Heaps found dead by heap_free (their thread ended holding the robust
 * mutex), for the next _ts_heaps_reap to abandon. Under pool_lock. */
static ts_heap_t *found_dead;

/* Heaps counted in heaps_live that belong to no running thread: the shared
 * heap, and in a fork child those of the parent's other threads. */
static TS_STARTUP_DATA _Atomic size_t heaps_foreign;

#define POOL_CHUNK  ((size_t)256 * 1024)
#define POOL_STRIDE ts_align_up(sizeof(ts_heap_t), 128)

/* The unused tail of the newest pool chunk: heaps are cut from it only when
 * the free list is empty, so a process with one thread touches one heap's
 * pages, not the whole chunk. */
static TS_STARTUP_DATA char *pool_bump, *pool_end;

static ts_heap_t *pool_get(void) {
    pthread_mutex_lock(&pool_lock);
    ts_heap_t *heap = pool_free;
    if (heap) {
        pool_free = heap->pool_next;
    } else {
        if (pool_end - pool_bump < (ptrdiff_t)POOL_STRIDE) {
            char *chunk = _ts_os_map(POOL_CHUNK); /* rare: under the lock keeps it simple */
            if (chunk) {
                _ts_os_name(chunk, POOL_CHUNK, "tsalloc-heaps");
                pool_bump = chunk;
                pool_end = chunk + POOL_CHUNK;
            }
        }
        if (pool_end - pool_bump >= (ptrdiff_t)POOL_STRIDE) {
            heap = (ts_heap_t *)pool_bump;
            pool_bump += POOL_STRIDE;
        }
    }
    pthread_mutex_unlock(&pool_lock);
    return heap;
}

ts_heap_t *_ts_heap_new(bool for_this_thread, uint32_t user) {
    ts_heap_t *heap = pool_get();
    if (!heap) return NULL;
#if TS_SECURE
    /* Not the quarantine's rings: 6 KiB a thread would touch for nothing. */
    _Static_assert(offsetof(ts_heap_t, fresh) ==
                       offsetof(ts_heap_t, quarantine) + sizeof(ts_quarantine_t),
                   "the quarantine is followed by `fresh`");
    size_t rings = offsetof(ts_heap_t, quarantine.slot), after = offsetof(ts_heap_t, fresh);
    memset(heap, 0, rings);
    memset((char *)heap + after, 0, sizeof *heap - after);
#else
    memset(heap, 0, sizeof *heap);
#endif
    heap->user = user; /* before heaps_all shows it to the purge thread */
    for (unsigned i = 0; i < TS_DIRECT_SLOTS; i++) heap->direct[i] = &_ts_page_empty;
    for (unsigned i = 0; i < TS_CLASS_COUNT; i++) heap->head[i] = &_ts_page_empty;
    heap->state = TS_HEAP_ACTIVE;
    heap->maint_at = _ts_os_now_ns() + _ts_purge_delay_ns();
    if (!for_this_thread) {
        atomic_fetch_add(&heaps_foreign, 1); /* the shared heap: no thread's */
    } else {
        pthread_mutexattr_t attr;
        pthread_mutexattr_init(&attr);
        pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST);
        pthread_mutex_init(&heap->alive, &attr);
        pthread_mutexattr_destroy(&attr);
        pthread_mutex_lock(&heap->alive);
        heap->watched = 1;
    }
    /* Two system calls, asked only while no heap is main's: a thread
     * started after main's heap is not main (2,000 threads: 4,000 calls). */
    bool is_main = for_this_thread && !atomic_load_explicit(&main_heap, memory_order_relaxed) &&
                   _ts_os_is_main_thread();
    pthread_mutex_lock(&pool_lock);
    if (is_main) atomic_store(&main_heap, heap);
    heap->id = ++heap_ids;
    heap->all_next = heaps_all;
    if (heaps_all) heaps_all->all_prev = heap;
    heaps_all = heap;
    pthread_mutex_unlock(&pool_lock);
    size_t live = atomic_fetch_add(&_ts_stats.heaps_live, 1) + 1;
    atomic_fetch_add(&_ts_stats.heaps_created, 1);
    /* A new thread: a chance to find heaps of dead threads (not for the
     * first heap: single-threaded programs get no helper thread for this). */
    if (for_this_thread && live > 1) _ts_purge_schedule();
    return heap;
}

/* The heap's thread is exiting (its key destructor). */
void _ts_heap_thread_exit(ts_heap_t *heap) {
    pthread_mutex_lock(&pool_lock);
    bool watched = heap->watched;
    heap->watched = 0;
    pthread_mutex_unlock(&pool_lock);
    if (watched) pthread_mutex_unlock(&heap->alive);
    _ts_heap_abandon(heap);
}

/* True when main's heap's thread is gone: it ended without the heap's
 * destructor (its heap was made in the last round of its thread-specific
 * destructors, say), so the kernel marked its robust mutex. Such a heap goes
 * to found_dead. Under pool_lock; m is main_heap, so not in the pool. */
static bool main_heap_orphaned(ts_heap_t *m) {
    if (!m->watched || pthread_mutex_trylock(&m->alive) != EOWNERDEAD) return false;
    /* EBUSY, the usual answer, costs one atomic operation; 0 means main is
     * between its destructor's unlock and its own heap_free, which wakes. */
    pthread_mutex_consistent(&m->alive);
    pthread_mutex_unlock(&m->alive);
    m->watched = 0;
    m->pool_next = found_dead;
    found_dead = m;
    return true;
}

/* Abandon the heaps whose threads died without running their destructor. */
void _ts_heaps_reap(void) {
    pthread_mutex_lock(&pool_lock);
    ts_heap_t *dead = found_dead;
    found_dead = NULL;
    for (ts_heap_t *h = heaps_all; h; h = h->all_next) {
        if (!h->watched) continue;
        int rc = pthread_mutex_trylock(&h->alive);
        if (rc == EOWNERDEAD) { /* the kernel says: its thread died holding it */
            pthread_mutex_consistent(&h->alive);
            pthread_mutex_unlock(&h->alive);
            h->watched = 0;
            h->pool_next = dead;
            dead = h;
        } else if (rc == 0) { /* not held (thread had no id yet?): stop watching, keep it */
            pthread_mutex_unlock(&h->alive);
            h->watched = 0;
        }
    }
    pthread_mutex_unlock(&pool_lock);
    while (dead) {
        ts_heap_t *h = dead;
        dead = h->pool_next;
        _ts_verbose(2, "heap %u: its thread died without exiting cleanly; abandoned", h->id);
        _ts_heap_abandon(h);
    }
}

static void heap_free(ts_heap_t *heap) {
    pthread_mutex_lock(&pool_lock);
    _ts_stats_fold_heap(heap);
    if (heap->all_prev)
        heap->all_prev->all_next = heap->all_next;
    else
        heaps_all = heap->all_next;
    if (heap->all_next) heap->all_next->all_prev = heap->all_prev;
    heap->state = TS_HEAP_UNINIT;
    if (heap->user) { /* a heap of ts_heap_new's (heapapi.c): no thread's */
        heap->user = 0;
        atomic_fetch_sub(&heaps_foreign, 1);
    }
    ts_heap_t *m = atomic_load(&main_heap);
    if (m == heap || (m && main_heap_orphaned(m))) atomic_store(&main_heap, NULL);
    heap->pool_next = pool_free; /* after main_heap lets go of it */
    pool_free = heap;
    pthread_mutex_unlock(&pool_lock);
    atomic_fetch_sub(&_ts_stats.heaps_live, 1);
    if (!atomic_load(&main_heap)) { /* the helper must not outlive main (purge.c) */
        atomic_fetch_add_explicit(&_ts_stats.main_checks, 1, memory_order_relaxed);
        _ts_purge_thread_ended();
    }
}

void _ts_heaps_visit(ts_heap_visit_fn fn, void *arg) {
    pthread_mutex_lock(&pool_lock);
    for (ts_heap_t *h = heaps_all; h; h = h->all_next) fn(h, arg);
    fn(NULL, arg);
    pthread_mutex_unlock(&pool_lock);
}

/* Full pages of idle heaps (rescue.c), under the pool lock; not the
 * calling thread's own heap. Returns when the next look is due. */
uint64_t _ts_heaps_rescue(uint64_t now) {
    if (!_ts_option(TS_OPT_RESCUE)) return UINT64_MAX;
    ts_heap_t *self = _ts_tls_heap;
    uint64_t next = UINT64_MAX;
    pthread_mutex_lock(&pool_lock);
    for (ts_heap_t *h = heaps_all; h; h = h->all_next) {
        if (h == self || h->user) continue; /* heapapi.c's heaps: see docs/heaps.md */
        uint64_t at = _ts_heap_rescue(h, now);
        if (at < next) next = at;
    }
    pthread_mutex_unlock(&pool_lock);
    return next;
}

/* For a sweep pass (sweep.c, sweep lock held): the heaps whose slow path
 * did not run for their idle wait (ts_heap_idle_ns; looks a period apart
 * tell), not the calling thread's own; with more than TS_SWEEP_MAX_IDLE of
 * them, the window-th slice of that many (in list order, which only grows
 * at its head). */
unsigned _ts_heaps_sweep_look(ts_sweep_set_t *set, unsigned window, uint64_t now) {
    const ts_heap_t *self = _ts_tls_heap;
    unsigned idle_count = 0, first = window * TS_SWEEP_MAX_IDLE;
    set->n = 0;
    set->now = now;
    pthread_mutex_lock(&pool_lock);
    for (ts_heap_t *h = heaps_all; h; h = h->all_next) {
        uint32_t slow = atomic_load_explicit(&h->slow_count, memory_order_relaxed);
        if (!h->sweep_armed || slow != h->sweep_seen_slow) { /* ran since: idle from now on */
            h->sweep_seen_slow = slow;
            h->sweep_armed = 1;
            h->sweep_idle_since = now;
            continue;
        }
        /* `now` may be older than another caller's note (it was read before
         * the sweep lock): not idle then, rather than a wrapped difference. */
        if (h == self || h->user || h->state != TS_HEAP_ACTIVE || now < h->sweep_idle_since ||
            now - h->sweep_idle_since < ts_heap_idle_ns(h))
            continue;
        if (idle_count++ < first || set->n == TS_SWEEP_MAX_IDLE) continue;
        /* Sorted by address (insertion: the walk looks owners up by halves). */
        unsigned i = set->n++;
        for (; i > 0 && set->heap[i - 1] > h; i--) {
            set->heap[i] = set->heap[i - 1];
            set->stamp[i] = set->stamp[i - 1];
        }
        set->heap[i] = h;
        set->stamp[i] = slow;
    }
    pthread_mutex_unlock(&pool_lock);
    return idle_count;
}

/* ---- periodic work on the allocation slow path ------------------------------------ */

void _ts_heap_note_give_back(ts_heap_t *heap, uint64_t now) {
    uint64_t none = 0;
    atomic_compare_exchange_strong_explicit(&heap->gave_back_at, &none, now ? now : 1,
                                            memory_order_relaxed, memory_order_relaxed);
}

/* The owner is back after the purge thread gave back some of its memory:
 * its next idle wait follows how soon (options.c, _ts_idle_shift_next). */
static void idle_adapt(ts_heap_t *heap) {
    uint64_t at = atomic_exchange_explicit(&heap->gave_back_at, 0, memory_order_relaxed);
    if (!at) return;
    unsigned shift = atomic_load_explicit(&heap->idle_shift, memory_order_relaxed);
    shift = _ts_idle_shift_next(shift, at, _ts_os_now_ns());
    atomic_store_explicit(&heap->idle_shift, (uint8_t)shift, memory_order_relaxed);
}

/* One more slow path of the heap (owner only: a load and a store, no RMW,
 * but for an exchange once after a give-back): rescue.c and sweep.c read
 * the count to tell an idle heap. */
static uint32_t count_slow_path(ts_heap_t *heap) {
    uint32_t slow = atomic_load_explicit(&heap->slow_count, memory_order_relaxed) + 1;
    atomic_store_explicit(&heap->slow_count, slow, memory_order_relaxed);
    if (ts_unlikely(atomic_load_explicit(&heap->gave_back_at, memory_order_relaxed)))
        idle_adapt(heap);
    return slow;
}

void _ts_heap_collect(ts_heap_t *heap, bool force) {
    /* Counted as a slow path: the heap is not idle, and blocks it takes here
     * may be handed out again (sweep.c's tags). */
    (void)count_slow_path(heap);
    if (atomic_load_explicit(&heap->delayed, memory_order_relaxed)) _ts_process_delayed(heap);
    if (heap->rbatch_used) _ts_heap_flush_remote(heap);
    _ts_pages_collect(heap, force);
    if (force && heap->spare) {
        _ts_segment_release(heap->spare);
        heap->spare = NULL;
    }
}

void _ts_heap_slow_tick(ts_heap_t *heap) {
    if (atomic_load_explicit(&heap->delayed, memory_order_relaxed)) _ts_process_delayed(heap);
    if (heap->rbatch_used) _ts_heap_flush_remote(heap);
    if ((count_slow_path(heap) & 31) == 0) {
        uint64_t now = _ts_os_now_ns();
        if (now >= heap->maint_at) {
            uint64_t delay = _ts_purge_delay_ns();
            heap->maint_at = now + (delay > 10000000 ? delay : 10000000);
            _ts_pages_collect(heap, false);
            if (!_ts_purge_thread_running()) _ts_purge_run(now, false);
        }
    }
}

/* ---- thread exit --------------------------------------------------------------------- */

void _ts_heap_abandon(ts_heap_t *heap) {
    _ts_heap_abandon_to(heap, NULL);
}

void _ts_heap_abandon_to(ts_heap_t *heap, ts_heap_t *to) {
#if TS_SECURE
    _ts_secure_heap_flush(heap);
#endif
    /* No spare segment from here on. Under the pool lock: a rescue pass
     * (which holds it) has finished with this heap's `delayed` list, and no
     * later one takes it. */
    pthread_mutex_lock(&pool_lock);
    heap->state = TS_HEAP_DEAD;
    pthread_mutex_unlock(&pool_lock);
    _ts_heap_flush_remote(heap);
    /* After this no other thread can be handing blocks to this heap. */
    for (unsigned cls = 0; cls < TS_CLASS_COUNT; cls++)
        for (ts_page_t *p = heap->queue[cls].first; p; p = p->next) _ts_page_settle_notify(p);
    for (ts_page_t *p = heap->full.first; p; p = p->next) _ts_page_settle_notify(p);
    _ts_process_delayed(heap);
    _ts_page_uncache(heap);
    ts_page_t *page;
    for (unsigned cls = 0; cls < TS_CLASS_COUNT; cls++)
        while ((page = heap->queue[cls].first) != NULL) _ts_page_detach(heap, page);
    while ((page = heap->full.first) != NULL) _ts_page_detach(heap, page);
    _ts_heap_release_segments(heap, to);
    if (!heap->user) atomic_fetch_add(&_ts_stats.threads_exited, 1);
    heap_free(heap);
}

/* ---- the shared heap ------------------------------------------------------------------- */

/* Calls a new thread makes on the shared heap before it gets its own. */
#define TS_SHARED_START_CALLS 32

/* Calls left to this thread on the shared heap, plus one (0: not counted
 * yet; 1: none left). */
static __thread uint32_t tls_start_left __attribute__((tls_model("initial-exec")));

bool _ts_thread_start_shared(void) {
    uint32_t left = tls_start_left;
    if (ts_unlikely(left == 0)) { /* this thread's first call */
        _ts_process_init();
        size_t from = (size_t)_ts_option(TS_OPT_SHARED_START);
        left = from && _ts_heaps_running() >= from ? TS_SHARED_START_CALLS + 1 : 1;
    }
    if (left > 1) {
        tls_start_left = left - 1;
        return true;
    }
    tls_start_left = 1;
    return false;
}

void *_ts_shared_alloc(size_t size, size_t align, bool zero) {
    pthread_mutex_lock(&shared_lock);
    if (!shared) shared = _ts_heap_new(false, 0);
    void *p = shared ? _ts_heap_alloc(shared, size, align, zero) : NULL;
    pthread_mutex_unlock(&shared_lock);
    if (!p) errno = ENOMEM;
    return p;
}

/* Retire the shared heap's pages whose blocks all came back: no thread of
 * its own does so while no new thread allocates. `wait`: take the lock
 * (malloc_trim); else only if free (a purge pass, which may run on the
 * shared heap's own slow path). */
void _ts_shared_collect(bool wait) {
    if (wait)
        pthread_mutex_lock(&shared_lock);
    else if (pthread_mutex_trylock(&shared_lock) != 0)
        return;
    if (shared) _ts_heap_collect(shared, wait);
    pthread_mutex_unlock(&shared_lock);
}

/* ---- fork -------------------------------------------------------------------------------- */

void _ts_heaps_atfork_prepare(void) {
    pthread_mutex_lock(&shared_lock);
    _ts_sweep_atfork_prepare(); /* a pass may hold blocks outside any other lock */
    pthread_mutex_lock(&pool_lock);
}

void _ts_heaps_atfork_parent(void) {
    pthread_mutex_unlock(&pool_lock);
    _ts_sweep_atfork_parent();
    pthread_mutex_unlock(&shared_lock);
}

bool _ts_main_heap_live(void) {
    return atomic_load(&main_heap) != NULL;
}

size_t _ts_heaps_running(void) {
    size_t live = atomic_load_explicit(&_ts_stats.heaps_live, memory_order_relaxed);
    size_t foreign = atomic_load_explicit(&heaps_foreign, memory_order_relaxed);
    return live > foreign ? live - foreign : 0;
}

/* In a fork child: a page whose NOTIFYING freer was another thread asks for
 * a new hand-over if it is in the full list, else is simply NORMAL. */
static void cancel_handover(ts_page_t *page) {
    uint64_t w = atomic_load_explicit(&page->thread_free, memory_order_relaxed);
    if (ts_tf_state(w) == TS_TF_NOTIFYING)
        atomic_store_explicit(&page->thread_free,
                              (w & ~(uint64_t)3) | (page->in_full ? TS_TF_NOTIFY : TS_TF_NORMAL),
                              memory_order_relaxed);
}

static void cancel_handovers(ts_heap_t *heap) {
    for (ts_page_t *p = heap->full.first; p; p = p->next) cancel_handover(p);
    for (unsigned cls = 0; cls < TS_CLASS_COUNT; cls++)
        for (ts_page_t *p = heap->queue[cls].first; p; p = p->next) cancel_handover(p);
    for (unsigned i = 0; i < TS_EMPTY_BIG_KEEP; i++)
        if (heap->empty_big[i]) cancel_handover(heap->empty_big[i]);
}

void _ts_heaps_atfork_child(void) {
    pthread_mutex_init(&pool_lock, NULL);
    _ts_sweep_atfork_child();
    pthread_mutex_init(&shared_lock, NULL);
    size_t live = atomic_load_explicit(&_ts_stats.heaps_live, memory_order_relaxed);
    size_t mine = _ts_tls_heap->state == TS_HEAP_ACTIVE ? 1 : 0;
    atomic_store_explicit(&heaps_foreign, live > mine ? live - mine : 0, memory_order_relaxed);
    /* The child's thread has a new id: it takes its heap's robust mutex anew.
     * Other threads' heaps stay as they are (their threads do not exist here). */
    ts_heap_t *self = _ts_tls_heap;
    /* The forking thread is the child's main thread. */
    atomic_store(&main_heap, self->state == TS_HEAP_ACTIVE ? self : NULL);
    if (self->state == TS_HEAP_ACTIVE && self->watched) {
        pthread_mutexattr_t attr;
        pthread_mutexattr_init(&attr);
        pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST);
        pthread_mutex_init(&self->alive, &attr);
        pthread_mutexattr_destroy(&attr);
        pthread_mutex_lock(&self->alive);
    }
    /* Other threads do not exist here: a hand-over to the pages of the heaps
     * the child uses that was in flight will never finish. */
    if (self->state == TS_HEAP_ACTIVE) cancel_handovers(self);
    if (shared) cancel_handovers(shared);
    for (ts_heap_t *h = heaps_all; h; h = h->all_next)
        if (h->user) cancel_handovers(h); /* ts_heap_new's heaps live on in the child */
}
