/* The base layer's synchronisation primitives under contention: the spin lock
 * (src/base/spinlock.h) and the peak counter (src/base/counter.h).
 *
 * - Spin lock: more threads than CPUs increment a plain counter inside the
 *   lock, by ts_spin_lock and by ts_spin_trylock, with a read, a pause and a
 *   write so that any two threads inside at once lose an increment; one
 *   thread now and then holds the lock across a sleep, so that waiters reach
 *   the yield. The count must come out exact and no thread may ever find
 *   another inside.
 * - Peak: threads offer interleaved rising values while an observer checks
 *   that the peak never goes down; at the end it is exactly the largest
 *   value offered.
 */
#include "check.h"
#include "critical_section.h"

#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

#include "base/counter.h"
#include "base/spinlock.h"

#define THREADS 4
#define ROUNDS  100000

static ts_spinlock_t lock = TS_SPINLOCK_INIT;

static void *lock_worker(void *arg) {
    unsigned id = (unsigned)(uintptr_t)arg;
    for (unsigned i = 0; i < ROUNDS; i++) {
        if (i % 4 == 3) {
            while (!ts_spin_trylock(&lock)) ts_cpu_relax();
        } else {
            ts_spin_lock(&lock);
        }
        critical_section();
        if (id == 0 && i % 20000 == 0) { /* waiters spin past the limit and yield */
            struct timespec ms = {0, 1000000};
            nanosleep(&ms, NULL);
        }
        ts_spin_unlock(&lock);
    }
    return NULL;
}

static void test_spinlock(void) {
    pthread_t t[THREADS];
    for (unsigned i = 0; i < THREADS; i++)
        CHECK(pthread_create(&t[i], NULL, lock_worker, (void *)(uintptr_t)i) == 0);
    for (unsigned i = 0; i < THREADS; i++) CHECK(pthread_join(t[i], NULL) == 0);
    CHECK_EQ(atomic_load(&overlaps), 0);
    CHECK_EQ(counter, (unsigned long)THREADS * ROUNDS);
    /* Free after the last unlock; a held lock refuses a try; reset frees it. */
    CHECK(ts_spin_trylock(&lock));
    CHECK(!ts_spin_trylock(&lock));
    ts_spin_init(&lock);
    CHECK(ts_spin_trylock(&lock));
    ts_spin_unlock(&lock);
}

static _Atomic size_t peak;
static atomic_int offering;
static pthread_barrier_t start;

/* Thread t offers i * THREADS + t for i = 0, 1, ...: the threads' offers
 * interleave, so a lost race shows as a peak that goes down or ends short. */
static void *peak_worker(void *arg) {
    size_t t = (size_t)(uintptr_t)arg;
    pthread_barrier_wait(&start);
    for (size_t i = 0; i < ROUNDS; i++) ts_peak_update(&peak, i * THREADS + t);
    atomic_fetch_sub(&offering, 1);
    return NULL;
}

static void *peak_observer(void *arg) {
    (void)arg;
    size_t last = 0;
    pthread_barrier_wait(&start);
    while (atomic_load(&offering) > 0) {
        size_t now = atomic_load_explicit(&peak, memory_order_relaxed);
        CHECK_MSG(now >= last, "peak went down from %zu to %zu", last, now);
        last = now;
    }
    return NULL;
}

static void test_peak(void) {
    atomic_store(&offering, THREADS);
    CHECK(pthread_barrier_init(&start, NULL, THREADS + 1) == 0);
    pthread_t t[THREADS], observer;
    CHECK(pthread_create(&observer, NULL, peak_observer, NULL) == 0);
    for (unsigned i = 0; i < THREADS; i++)
        CHECK(pthread_create(&t[i], NULL, peak_worker, (void *)(uintptr_t)i) == 0);
    for (unsigned i = 0; i < THREADS; i++) CHECK(pthread_join(t[i], NULL) == 0);
    CHECK(pthread_join(observer, NULL) == 0);
    pthread_barrier_destroy(&start);
    CHECK_EQ(atomic_load(&peak), (size_t)ROUNDS * THREADS - 1);
    ts_peak_update(&peak, 5); /* a lower value changes nothing */
    CHECK_EQ(atomic_load(&peak), (size_t)ROUNDS * THREADS - 1);
}

int main(void) {
    test_spinlock();
    test_peak();
    printf("base_sync: ok\n");
    return 0;
}
