/* The futex mutex (src/base/futex_mutex.h) and the seed designs' lock type
 * (src/base/lock.h) under contention.
 *
 * - Futex mutex: more threads than CPUs increment a plain counter inside it,
 *   with a read, a pause and a write so that any two threads inside at once
 *   lose an increment; now and then a thread holds it across a sleep, so that
 *   the others reach FUTEX_WAIT. The count must come out exact, no thread may
 *   find another inside, the word must be 0 at the end, and threads must have
 *   slept in FUTEX_WAIT and been woken (the counters moved).
 * - ts_lock_t: the same hammering through ts_lock/ts_unlock for each kind
 *   (a lock initialised with that kind; TSALLOC_LOCK unset), and the kind
 *   TSALLOC_LOCK names when the test runs with it set.
 * Usage: base_futex [pthread|futex|spin] -- the kind TSALLOC_LOCK must name.
 */
#include "check.h"
#include "critical_section.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/futex_mutex.h"
#include "base/lock.h"

#define THREADS 6
#define ROUNDS  60000

static ts_futex_mutex_t mutex = TS_FUTEX_MUTEX_INIT;
static ts_lock_t lock;
static int use_lock; /* 0: the futex mutex itself, 1: lock */

static void *worker(void *arg) {
    unsigned id = (unsigned)(uintptr_t)arg;
    for (unsigned i = 0; i < ROUNDS; i++) {
        if (use_lock)
            ts_lock(&lock);
        else
            ts_futex_lock(&mutex);
        critical_section();
        if (i % 4096 == id) { /* hold it across a sleep: the others must wait in the kernel */
            struct timespec ts = {0, 200000};
            nanosleep(&ts, NULL);
        }
        if (use_lock)
            ts_unlock(&lock);
        else
            ts_futex_unlock(&mutex);
    }
    return NULL;
}

static void hammer(const char *what) {
    pthread_t t[THREADS];
    counter = 0;
    atomic_store(&overlaps, 0);
    for (unsigned i = 0; i < THREADS; i++)
        CHECK(pthread_create(&t[i], NULL, worker, (void *)(uintptr_t)i) == 0);
    for (unsigned i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
    CHECK_MSG(counter == (unsigned long)THREADS * ROUNDS, "%s: count %lu, expected %lu", what,
              counter, (unsigned long)THREADS * ROUNDS);
    CHECK_MSG(atomic_load(&overlaps) == 0, "%s: %lu overlaps", what, atomic_load(&overlaps));
}

int main(int argc, char **argv) {
    const char *want = argc > 1 ? argv[1] : NULL;
    if (!want) {
        ts_futex_stats_t before, after;
        _ts_futex_stats(&before);
        hammer("futex mutex");
        _ts_futex_stats(&after);
        CHECK(atomic_load(&mutex.state) == 0);
        CHECK_MSG(after.waits > before.waits && after.wakes > before.wakes,
                  "no contention seen: %llu waits, %llu wakes",
                  (unsigned long long)(after.waits - before.waits),
                  (unsigned long long)(after.wakes - before.wakes));
        printf("futex mutex: %llu waits, %llu wakes\n",
               (unsigned long long)(after.waits - before.waits),
               (unsigned long long)(after.wakes - before.wakes));
        /* Each kind of ts_lock_t, chosen by the lock itself (TSALLOC_LOCK unset). */
        CHECK(_ts_lock_chosen() == TS_LOCK_UNRESOLVED);
        use_lock = 1;
        for (ts_lock_kind_t k = TS_LOCK_PTHREAD; k <= TS_LOCK_SPIN; k++) {
            _ts_lock_init(&lock, k, k == TS_LOCK_PTHREAD);
            hammer(_ts_lock_kind_name(k));
            CHECK(ts_lock_kind(&lock) == k);
        }
        /* Zeroed memory is a spin lock. */
        memset(&lock, 0, sizeof lock);
        hammer("zeroed");
        CHECK(ts_lock_kind(&lock) == TS_LOCK_SPIN);
    } else {
        /* TSALLOC_LOCK=<want>: every lock takes that kind, whatever its own. */
        ts_lock_kind_t k = _ts_lock_chosen();
        CHECK_MSG(k != TS_LOCK_UNRESOLVED && !strcmp(_ts_lock_kind_name(k), want),
                  "TSALLOC_LOCK gives %s, expected %s", _ts_lock_kind_name(k), want);
        use_lock = 1;
        _ts_lock_init(&lock, k == TS_LOCK_SPIN ? TS_LOCK_PTHREAD : TS_LOCK_SPIN, false);
        hammer(want);
        CHECK(ts_lock_kind(&lock) == k);
    }
    printf("base_futex%s%s: ok\n", want ? " " : "", want ? want : "");
    return 0;
}
