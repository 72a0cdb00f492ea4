/* The contended halves of the futex mutex (futex_mutex.h): sleeping in
 * FUTEX_WAIT and waking one sleeper with FUTEX_WAKE. The futex is a
 * scheduling call, not a memory one, so it lives here and not in src/os/.
 *
 * Invariant: a thread leaves _ts_futex_lock_wait holding the lock, with the
 * word at 2 (it cannot know whether others still sleep).
 */
#include "base/futex_mutex.h"

#include <errno.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

static _Atomic uint64_t futex_waits, futex_wakes;

void _ts_futex_lock_wait(ts_futex_mutex_t *m) {
    int saved = errno; /* a refused wait must not leak EAGAIN into a successful malloc */
    /* Swapping in 2 both takes a free lock (the swap returned 0) and marks a
     * held one as awaited, so that its unlock wakes us. */
    while (atomic_exchange_explicit(&m->state, 2, memory_order_acquire) != 0) {
        atomic_fetch_add_explicit(&futex_waits, 1, memory_order_relaxed);
        /* Sleeps only if the word is still 2; EAGAIN or EINTR: try again. */
        syscall(SYS_futex, &m->state, FUTEX_WAIT_PRIVATE, 2, NULL, NULL, 0);
    }
    errno = saved;
}

void _ts_futex_wake(ts_futex_mutex_t *m) {
    int saved = errno;
    atomic_fetch_add_explicit(&futex_wakes, 1, memory_order_relaxed);
    syscall(SYS_futex, &m->state, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
    errno = saved;
}

void _ts_futex_stats(ts_futex_stats_t *out) {
    out->waits = atomic_load_explicit(&futex_waits, memory_order_relaxed);
    out->wakes = atomic_load_explicit(&futex_wakes, memory_order_relaxed);
}
