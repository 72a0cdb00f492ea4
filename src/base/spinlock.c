/* The waiting half of ts_spin_lock (spinlock.h): out of line, so that the
 * uncontended lock stays one exchange at each call site.
 *
 * Invariant: the lock word is written only by the exchange that takes it;
 * while it is held a waiter only reads it.
 */
#include "base/spinlock.h"

void _ts_spin_turn(unsigned *spins) {
    if (++*spins < TS_SPIN_LIMIT) {
        ts_cpu_relax();
    } else {
        _ts_os_yield();
        *spins = 0;
    }
}

void _ts_spin_wait(ts_spinlock_t *lock) {
    for (;;) {
        unsigned spins = 0;
        while (atomic_load_explicit(&lock->held, memory_order_relaxed)) _ts_spin_turn(&spins);
        if (!atomic_exchange_explicit(&lock->held, 1, memory_order_acquire)) return;
    }
}
