/* Delayed purging: memory freed by the program goes back to the OS
 * (MADV_DONTNEED, so RSS shows it) TSALLOC_PURGE_DELAY_MS after it became
 * free, whether or not the program calls the allocator again (below
 * TS_PURGE_THREAD_MIN_BYTES in a single-threaded process: only while it
 * allocates).
 *
 * Who purges: a helper thread, started lazily the first time something waits
 * to be purged, in a process that has a second thread or uses more than
 * TS_PURGE_THREAD_MIN_BYTES (committed bytes its pages have written: a
 * single-threaded program with a small heap
 * stays single-threaded: unshare(CLONE_NEWUSER) and setns() refuse
 * multithreaded callers; its purging runs on allocation slow paths). It is
 * created from _ts_purge_safe_point(), which the allocation slow
 * paths call after they have released every lock (pthread_create allocates
 * through malloc), and only after the library's constructor ran (libc is then
 * fully up). Never from free (glibc frees under its stack-cache lock, which
 * pthread_create takes): a request made by a free waits for the next
 * allocation slow path, and a process that from then on allocates only from
 * warm free lists keeps that memory meanwhile (docs/core/limits.md). It
 * blocks every signal, sleeps until the earliest deadline, purges what
 * expired (free pages of every segment, cached segments, cached large
 * regions), gives back pages of exited threads whose blocks were freed
 * since and the memory of idle threads' blocks that others freed (rescue.c,
 * sweep.c), and with nothing to do sleeps without a deadline until a free gives
 * it work (it stays for the life of the process, unless main calls
 * pthread_exit: see purge_main). With
 * TSALLOC_PURGE_THREAD=0, or if the thread cannot be created, the same work
 * runs on allocation slow paths instead (heap.c), about once per purge delay.
 *
 * It stays off the fast path: freeing a page only stores a deadline and, when
 * the helper sleeps with nothing to do, signals it (once per idle period).
 *
 * Lock order: the purge mutex is a leaf.
 */
#include "core/internal.h"

#include <signal.h>
#include <time.h>

enum { PT_STOPPED, PT_WANTED, PT_STARTING, PT_RUNNING, PT_FAILED };
enum { SLEEP_NONE, SLEEP_TIMED, SLEEP_IDLE };

static TS_STARTUP_DATA _Atomic int pt_state;
TS_STARTUP_DATA _Atomic int _ts_purge_wanted;  /* pt_state == PT_WANTED, for the inline check */
static TS_STARTUP_DATA _Atomic int pt_pending; /* something was freed since the last scan */
static TS_STARTUP_DATA _Atomic int pt_pending_look; /* an idle thread's memory to look at */
static TS_STARTUP_DATA _Atomic int pt_sleeping;     /* SLEEP_*: it waits on pt_cond */
static _Atomic uint64_t pt_until;                   /* the deadline of its SLEEP_TIMED wait */
static _Atomic int pt_look_at_main; /* a thread with a heap ended: has main exited? */
static TS_FORK_LOCK pthread_mutex_t pt_mutex = PTHREAD_MUTEX_INITIALIZER;
static TS_FORK_LOCK pthread_cond_t pt_cond = PTHREAD_COND_INITIALIZER;

#define MIN_SLEEP_NS ((uint64_t)2000000u)
#define PURGE_STACK  ((size_t)256 << 10)

uint64_t _ts_purge_run(uint64_t now, bool force) {
    atomic_fetch_add_explicit(&_ts_stats.purge_runs, 1, memory_order_relaxed);
    _ts_heaps_reap();
    _ts_shared_collect(false);
    uint64_t next = _ts_abandoned_reclaim(now, force);
    uint64_t rescue = _ts_heaps_rescue(now);
    next = rescue < next ? rescue : next;
    uint64_t sweep = _ts_heaps_sweep(now);
    next = sweep < next ? sweep : next;
    uint64_t segments = _ts_segments_purge(now, force);
    _ts_segment_cache_shrink();
    uint64_t large = _ts_large_purge(now, force);
    next = segments < next ? segments : next;
    uint64_t big = _ts_bigcache_purge(now, force);
    next = big < next ? big : next;
    return large < next ? large : next;
}

bool _ts_purge_thread_running(void) {
    if (!_ts_option(TS_OPT_PURGE_THREAD)) return false;
    int s = atomic_load_explicit(&pt_state, memory_order_relaxed);
    return s != PT_FAILED && s != PT_STOPPED;
}

/* Worth a thread: the process has one already, or enough memory to give back.
 * Memory in use, not committed: a big page commits 4 MiB for its first
 * block, and a short program with two or three big blocks (git, python3)
 * would start a thread that costs it more than its whole purging. */
static bool helper_wanted(void) {
    return _ts_heaps_running() > 1 || _ts_stat_used() >= TS_PURGE_THREAD_MIN_BYTES;
}

/* Asleep with nothing to do, or towards a deadline after now + due_in. One
 * it would not take up sooner woke it only to sleep again: on a busy 2-core
 * VM that switch cost the waking thread up to milliseconds (ts_heap_destroy,
 * 0.04 ms of its own, took 0.2-2.8 ms). The pending flag it reads first:
 * either this sees it asleep, or it sees the flag before it waits. */
static bool purge_thread_must_wake(uint64_t due_in) {
    int sleeping = atomic_load(&pt_sleeping);
    if (sleeping == SLEEP_NONE) return false;
    return sleeping == SLEEP_IDLE || atomic_load(&pt_until) > _ts_os_now_ns() + due_in;
}

/* New work, due a purge delay from now (`pending`: pt_pending) or a look
 * period from now (pt_pending_look). A helper asleep towards an earlier
 * deadline is not woken: it takes the work then. */
static void schedule(_Atomic int *pending, uint64_t due_in) {
    int was = atomic_exchange(pending, 1);
    int s = atomic_load(&pt_state);
    if (s == PT_STOPPED) {
        if (_ts_option(TS_OPT_PURGE_THREAD) && helper_wanted()) {
            int expect = PT_STOPPED;
            if (atomic_compare_exchange_strong(&pt_state, &expect, PT_WANTED))
                atomic_store(&_ts_purge_wanted, 1);
        }
    } else if (!was && s == PT_RUNNING && purge_thread_must_wake(due_in)) {
        pthread_mutex_lock(&pt_mutex);
        pthread_cond_signal(&pt_cond);
        pthread_mutex_unlock(&pt_mutex);
    }
}

void _ts_purge_schedule(void) {
    schedule(&pt_pending, _ts_purge_delay_ns());
}

/* For tests: the helper runs and sleeps with no deadline (nothing to do). */
bool _ts_purge_helper_idle(void) {
    return atomic_load(&pt_state) == PT_RUNNING && atomic_load(&pt_sleeping) == SLEEP_IDLE;
}

/* A look at idle threads' memory (rescue.c, sweep.c): those look a period
 * apart, so a request need not wake a helper that will look within a period.
 * (Taken as due in a purge delay, every hand-over to a busy thread's full
 * pages woke the helper for a pass: up to 2,300 passes in 0.2 s of xthread;
 * so they did with TSALLOC_RESCUE=0 until the requests were dropped then.) */
void _ts_purge_schedule_look(void) {
    if (_ts_option(TS_OPT_RESCUE)) _ts_purge_schedule_later(); /* off: no such look */
}

/* Work due a look period from now, whatever the rescue's switch: a purge the
 * OS refused, tried again then (segpurge.c). As one due at once, each refused
 * purge woke the helper for a pass with a purge delay of 0 (up to 17,838
 * passes in a second of frees). */
void _ts_purge_schedule_later(void) {
    schedule(&pt_pending_look, _ts_look_period_ns());
}

/* The purge delay changed. A helper asleep towards a deadline taken with a
 * longer delay may have left a request pending (its deadline came after the
 * one it sleeps towards), and then _ts_purge_schedule does not signal it
 * again: wake it, so that it recomputes with the new delay. */
void _ts_purge_delay_changed(void) {
    _ts_purge_schedule();
    if (atomic_load(&pt_state) == PT_RUNNING && atomic_load(&pt_sleeping) != SLEEP_NONE) {
        pthread_mutex_lock(&pt_mutex);
        pthread_cond_signal(&pt_cond);
        pthread_mutex_unlock(&pt_mutex);
    }
}

void _ts_purge_thread_ended(void) {
    if (atomic_load(&pt_state) != PT_RUNNING) return;
    atomic_store(&pt_look_at_main, 1);
    pthread_mutex_lock(&pt_mutex);
    pthread_cond_signal(&pt_cond);
    pthread_mutex_unlock(&pt_mutex);
}

/* Sleep until `until` (monotonic ns), or until new work arrives whose
 * deadline (now + delay) comes first (true), or a thread with a heap ended. */
static bool sleep_until(uint64_t until, int mode) {
    bool work = false;
    pthread_mutex_lock(&pt_mutex);
    atomic_store(&pt_until, until);
    atomic_store(&pt_sleeping, mode);
    for (;;) {
        uint64_t now = _ts_os_now_ns();
        if (now >= until || atomic_load(&pt_look_at_main)) break;
        if ((atomic_load(&pt_pending) &&
             (mode == SLEEP_IDLE || now + _ts_purge_delay_ns() < until)) ||
            (atomic_load(&pt_pending_look) &&
             (mode == SLEEP_IDLE || now + _ts_look_period_ns() < until))) {
            work = true;
            break;
        }
        if (until == UINT64_MAX) {
            pthread_cond_wait(&pt_cond, &pt_mutex);
            continue;
        }
        struct timespec ts = {(time_t)(until / 1000000000u), (long)(until % 1000000000u)};
        pthread_cond_clockwait(&pt_cond, &pt_mutex, CLOCK_MONOTONIC, &ts);
    }
    atomic_store(&pt_sleeping, SLEEP_NONE);
    pthread_mutex_unlock(&pt_mutex);
    return work;
}

/* The helper must not keep the process alive. Once main has called
 * pthread_exit, the process ends with its last thread; the helper must not be
 * that thread (it would wait forever with every signal blocked, or run the
 * exit handlers itself). So when it finds main gone it ends, and from then on
 * purging runs on allocation slow paths, as with TSALLOC_PURGE_THREAD=0. It
 * looks when a thread with a heap ends while main has none (heap_free wakes
 * it; while main's heap lives, main has not exited), and, while main has no
 * heap or no thread has one, after pauses growing from 1 ms to 1 s: a thread
 * that never allocated ends without a word to us, and so does one whose heap
 * was made after its last destructor round. */
#define MAIN_POLL_MIN_NS ((uint64_t)1000000u)
#define MAIN_POLL_MAX_NS ((uint64_t)1000000000u)

static sigset_t program_mask; /* of the thread that started the helper */
static pthread_t pt_self;     /* the helper, once pt_self_set */
static _Atomic int pt_self_set;

bool _ts_purge_is_helper(void) {
    return atomic_load_explicit(&pt_self_set, memory_order_acquire) &&
           pthread_equal(pthread_self(), pt_self);
}

static void *purge_main(void *arg) {
    (void)arg;
    pt_self = pthread_self();
    atomic_store_explicit(&pt_self_set, 1, memory_order_release);
    int expect = PT_STARTING;
    atomic_compare_exchange_strong(&pt_state, &expect, PT_RUNNING);
    uint64_t main_poll = MAIN_POLL_MIN_NS, next = 0;
    bool work = true;
    for (;;) {
        uint64_t now = _ts_os_now_ns();
        /* A pass when one is due or new work came, not when woken only to
         * look at main: a pass at every thread exit would take the abandoned
         * segments away from the next thread, which would map new ones. */
        if (work || now >= next) {
            atomic_store(&pt_pending, 0);
            atomic_store(&pt_pending_look, 0);
            next = _ts_purge_run(now, false);
            now = _ts_os_now_ns();
        }
        bool look = atomic_exchange(&pt_look_at_main, 0);
        bool poll = _ts_heaps_running() == 0 || !_ts_main_heap_live();
        if ((look || poll) && _ts_os_main_exited() == 1) {
            atomic_store(&pt_state, PT_FAILED); /* never again: slow paths purge */
            atomic_store(&pt_self_set, 0);
            _ts_verbose(2, "main thread exited: the purge thread ends");
            pthread_sigmask(SIG_SETMASK, &program_mask, NULL); /* should it be the last */
            return NULL;
        }
        if (!poll) main_poll = MAIN_POLL_MIN_NS;
        uint64_t until = next == UINT64_MAX          ? UINT64_MAX
                         : next > now + MIN_SLEEP_NS ? next
                                                     : now + MIN_SLEEP_NS;
        if (poll && until > now + main_poll) until = now + main_poll;
        /* With nothing to do it waits for the next free (an exit would free
         * in glibc's locks). */
        work = sleep_until(until, next == UINT64_MAX ? SLEEP_IDLE : SLEEP_TIMED);
        if (poll && main_poll < MAIN_POLL_MAX_NS) main_poll *= 2;
    }
    return NULL;
}

static void start_thread(void) {
    if (!_ts_process_ready()) return;
    int expect = PT_WANTED;
    if (!atomic_compare_exchange_strong(&pt_state, &expect, PT_STARTING)) return;
    atomic_store(&_ts_purge_wanted, 0);
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    program_mask = old;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    /* Its calls are shallow, with no large locals: the default 8 MiB stack
     * would only count against the commit limit (vm.overcommit_memory=2). */
    pthread_attr_setstacksize(&attr, PURGE_STACK);
    pthread_t thread;
    int rc = pthread_create(&thread, &attr, purge_main, NULL);
    pthread_attr_destroy(&attr);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        atomic_store(&pt_state, PT_FAILED);
        _ts_verbose(1, "cannot start the purge thread (error %d): purging on allocator calls", rc);
    } else {
        _ts_verbose(2, "purge thread started");
    }
}

void _ts_purge_safe_point(void) {
    if (ts_unlikely(atomic_load_explicit(&pt_state, memory_order_relaxed) == PT_WANTED))
        start_thread();
}

/* ---- fork ------------------------------------------------------------------------- */

void _ts_purge_atfork_prepare(void) {
    pthread_mutex_lock(&pt_mutex);
}

void _ts_purge_atfork_parent(void) {
    pthread_mutex_unlock(&pt_mutex);
}

void _ts_purge_atfork_child(void) {
    pthread_mutex_init(&pt_mutex, NULL);
    pthread_cond_init(&pt_cond, NULL);
    atomic_store(&pt_sleeping, SLEEP_NONE);
    int s = atomic_load(&pt_state);
    /* The helper did not survive the fork, and a request for it was the
     * parent's (made for heaps the child does not have): the child asks again
     * when it wants one itself. */
    if (s == PT_RUNNING || s == PT_STARTING || s == PT_WANTED) atomic_store(&pt_state, PT_STOPPED);
    atomic_store(&_ts_purge_wanted, 0);
    atomic_store(&pt_self_set, 0);
}
