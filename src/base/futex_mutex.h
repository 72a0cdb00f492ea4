/* A three-state futex mutex: the lock of the lecture, on the Linux futex.
 *
 * The word is 0 (unlocked), 1 (locked, nobody waits) or 2 (locked, and a
 * thread may sleep on it). Lock: one compare-and-swap 0 -> 1 when it is free;
 * otherwise swap in 2 and sleep in FUTEX_WAIT while the swap returned
 * non-zero (the lock was held), so that a thread that takes the lock after
 * sleeping leaves it marked 2 and its unlock wakes the next sleeper. Unlock:
 * swap in 0, and FUTEX_WAKE one sleeper only when the old value was 2, so an
 * uncontended lock/unlock pair makes no system call.
 *
 * Invariants: the word is taken with acquire and released with release; a
 * zeroed mutex is unlocked. Not recursive, not fair. Only a fork child may
 * reset a mutex held at fork (ts_futex_init). Nothing here allocates. Waits
 * and wakes are counted process-wide (relaxed counters, slow path only).
 */
#ifndef TS_BASE_FUTEX_MUTEX_H
#define TS_BASE_FUTEX_MUTEX_H

#include <stdatomic.h>
#include <stdint.h>

#include "base/base.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ts_futex_mutex {
    atomic_int state; /* 0 unlocked, 1 locked, 2 locked with (possible) waiters */
} ts_futex_mutex_t;

#define TS_FUTEX_MUTEX_INIT                                                                        \
    { 0 }

TS_INLINE void ts_futex_init(ts_futex_mutex_t *m) {
    atomic_store_explicit(&m->state, 0, memory_order_relaxed);
}

/* The contended halves (futex_mutex.c): out of line, so that an uncontended
 * lock is one compare-and-swap and an unlock one exchange. */
TS_HIDDEN void _ts_futex_lock_wait(ts_futex_mutex_t *m);
TS_HIDDEN void _ts_futex_wake(ts_futex_mutex_t *m);

TS_INLINE void ts_futex_lock(ts_futex_mutex_t *m) {
    int expected = 0;
    if (ts_likely(atomic_compare_exchange_strong_explicit(
            &m->state, &expected, 1, memory_order_acquire, memory_order_relaxed)))
        return;
    _ts_futex_lock_wait(m);
}

TS_INLINE void ts_futex_unlock(ts_futex_mutex_t *m) {
    if (ts_unlikely(atomic_exchange_explicit(&m->state, 0, memory_order_release) == 2))
        _ts_futex_wake(m);
}

/* FUTEX_WAIT calls (each a sleep or a refused one: the word had changed)
 * and FUTEX_WAKE calls made so far by every futex mutex of the process. */
typedef struct ts_futex_stats {
    uint64_t waits, wakes;
} ts_futex_stats_t;
TS_HIDDEN void _ts_futex_stats(ts_futex_stats_t *out);

#ifdef __cplusplus
}
#endif

#endif
