/* The shared critical section of the lock tests (base_sync, base_futex): a
 * plain counter incremented by a read, a CPU relax and a write, so that two
 * threads inside at once lose an increment, and a count of threads inside,
 * so that such an overlap is also seen where it happens. Call
 * critical_section() with the lock under test held; afterwards the counter
 * must equal the number of calls and `overlaps` must be 0. */
#ifndef TS_TEST_CRITICAL_SECTION_H
#define TS_TEST_CRITICAL_SECTION_H

#include <stdatomic.h>

#include "base/spinlock.h"

static volatile unsigned long counter; /* under the lock */
static volatile int inside;            /* under the lock: threads in the section */
static atomic_ulong overlaps;

static void critical_section(void) {
    if (++inside != 1) atomic_fetch_add(&overlaps, 1);
    unsigned long v = counter;
    ts_cpu_relax();
    counter = v + 1;
    inside--;
}

#endif
