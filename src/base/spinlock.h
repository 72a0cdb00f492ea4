/* The spin lock of tsalloc, and the CPU hint for a thread that waits by
 * spinning.
 *
 * ts_spinlock_t guards short critical sections that never block: the core's
 * segment bookkeeping and pow2's partitions and central state. It is a
 * test-and-test-and-set lock: a waiter reads the word (a shared cache line)
 * until it looks free and only then tries to take it, so waiters do not pull
 * the line away from the holder. After TS_SPIN_LIMIT reads a waiter yields
 * the CPU (sched_yield), then spins again: a holder preempted on a busy
 * machine gets to run.
 *
 * Invariants: the word is 0 (free) or 1 (held); it is taken with acquire and
 * given back with release; zeroed memory is a free lock. Not recursive, not
 * fair. Only a fork child may reset a lock held at fork (ts_spin_init).
 * Nothing here allocates.
 */
#ifndef TS_BASE_SPINLOCK_H
#define TS_BASE_SPINLOCK_H

#include <stdatomic.h>
#include <stdbool.h>

#include "base/base.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Spins (each with a CPU relax) before a waiter yields the CPU. */
#define TS_SPIN_LIMIT 128

typedef struct ts_spinlock {
    atomic_int held;
} ts_spinlock_t;

#define TS_SPINLOCK_INIT                                                                           \
    { 0 }

/* The hint for one turn of a spin-wait loop: `pause` on x86-64 (saves power,
 * leaves the core to its sibling hyperthread, avoids the memory-order
 * mis-speculation on leaving the loop), `yield` on arm64, and elsewhere only
 * a compiler barrier, so that the loop reloads what it waits on. */
TS_INLINE void ts_cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ volatile("yield" ::: "memory");
#else
    __asm__ volatile("" ::: "memory");
#endif
}

TS_INLINE void ts_spin_init(ts_spinlock_t *lock) {
    atomic_store_explicit(&lock->held, 0, memory_order_relaxed);
}

/* Takes the lock if it is free. A held lock is only read, not written. */
TS_INLINE bool ts_spin_trylock(ts_spinlock_t *lock) {
    return !atomic_load_explicit(&lock->held, memory_order_relaxed) &&
           !atomic_exchange_explicit(&lock->held, 1, memory_order_acquire);
}

/* One turn of a wait that only reads what it waits for: the CPU hint, and
 * every TS_SPIN_LIMIT turns the CPU given up, so that a preempted holder
 * gets to run (spinlock.c). */
TS_HIDDEN void _ts_spin_turn(unsigned *spins);

/* Waits for the lock and takes it (spinlock.c). */
TS_HIDDEN void _ts_spin_wait(ts_spinlock_t *lock);

TS_INLINE void ts_spin_lock(ts_spinlock_t *lock) {
    if (ts_likely(!atomic_exchange_explicit(&lock->held, 1, memory_order_acquire))) return;
    _ts_spin_wait(lock);
}

TS_INLINE void ts_spin_unlock(ts_spinlock_t *lock) {
    atomic_store_explicit(&lock->held, 0, memory_order_release);
}

/* Someone holds the lock: for assertions that the caller holds it. */
TS_INLINE bool ts_spin_is_locked(ts_spinlock_t *lock) {
    return atomic_load_explicit(&lock->held, memory_order_relaxed) != 0;
}

#ifdef __cplusplus
}
#endif

#endif
