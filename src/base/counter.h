/* Shared statistics counters: a high-water mark raised by many threads.
 *
 * A peak is an _Atomic size_t that only grows: ts_peak_update raises it to
 * `now` unless it already holds as much. Concurrent updates never lower it
 * and never lose the largest value offered. Relaxed order: a peak is read
 * for statistics only and orders nothing else.
 */
#ifndef TS_BASE_COUNTER_H
#define TS_BASE_COUNTER_H

#include <stdatomic.h>
#include <stddef.h>

#include "base/base.h"

TS_INLINE void ts_peak_update(_Atomic size_t *peak, size_t now) {
    size_t seen = atomic_load_explicit(peak, memory_order_relaxed);
    while (now > seen && !atomic_compare_exchange_weak_explicit(
                             peak, &seen, now, memory_order_relaxed, memory_order_relaxed)) {
    }
}

#endif
