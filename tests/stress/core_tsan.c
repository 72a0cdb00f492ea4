/* The fast allocator's lock-free paths under ThreadSanitizer: the core's
 * sources and the OS layer are compiled with -fsanitize=thread into this
 * program, which drives them through the ts_* API (names TSan does not
 * intercept) from threads that allocate, hand blocks to each other through a
 * ring, free other threads' blocks, realloc, and exit while their blocks are
 * still alive (heap abandonment and adoption), while another thread prints
 * statistics (it reads every heap's counters as they change) and changes the
 * purge delay. Any report fails the test (TSAN_OPTIONS=halt_on_error=1:
 * exitcode=66 is set by ctest).
 *
 * usage: core_tsan [threads=4] [rounds=3] [ops=20000]
 */
#include "check.h"

#include <pthread.h>
#include <stdatomic.h>

#include <tsalloc.h>

enum { RING = 1024 };
static _Atomic(void *) ring[RING];
static int nthreads = 4, rounds = 3;
static long ops = 20000;

static void *worker(void *arg) {
    uint64_t rng = (uintptr_t)arg * 0x9e3779b97f4a7c15ull + 1;
    void *mine[64] = {0};
    for (long i = 0; i < ops; i++) {
        unsigned op = (unsigned)(ts_rand(&rng) % 10);
        size_t k = ts_rand(&rng) % 64;
        if (op < 4) {
            ts_free(mine[k]);
            size_t n = (ts_rand(&rng) % 50) ? ts_rand_range(&rng, 1, 1024)
                                            : ts_rand_range(&rng, 1025, 600000);
            mine[k] = ts_malloc(n);
            CHECK(mine[k]);
            memset(mine[k], (int)k, n < 256 ? n : 256);
        } else if (op < 6) {
            if (!mine[k]) continue;
            void *q = ts_realloc(mine[k], ts_rand_range(&rng, 1, 4096));
            CHECK(q);
            mine[k] = q;
        } else {
            /* Swap with the ring: the block we take was made by another thread. */
            void *theirs = atomic_exchange(&ring[ts_rand(&rng) % RING], mine[k]);
            mine[k] = NULL;
            if (theirs && (ts_rand(&rng) & 1))
                ts_free(theirs);
            else
                mine[k] = theirs;
        }
    }
    /* Leave half the blocks behind: freed later by another thread. */
    for (int k = 0; k < 64; k++) {
        if (k & 1)
            ts_free(mine[k]);
        else {
            void *old = atomic_exchange(&ring[ts_rand(&rng) % RING], mine[k]);
            ts_free(old);
        }
    }
    return NULL;
}

/* Statistics and options while the workers run: what a monitoring thread of
 * a server would do. */
static atomic_int workers_done;
static void *observer(void *arg) {
    FILE *sink = arg;
    long long delays[2] = {0, 100};
    for (unsigned n = 0; !atomic_load(&workers_done); n++) {
        ts_stats_print(sink);
        ts_stats_print_json(sink);
        CHECK(ts_option_set("purge_delay_ms", delays[n & 1]));
        CHECK(ts_option_get("purge_delay_ms") >= 0);
    }
    return NULL;
}

int main(int argc, char **argv) {
    if (argc > 1) nthreads = atoi(argv[1]);
    if (argc > 2) rounds = atoi(argv[2]);
    if (argc > 3) ops = atol(argv[3]);
    pthread_t t[64], obs;
    CHECK(nthreads <= 64);
    FILE *sink = fopen("/dev/null", "w");
    CHECK(sink);
    CHECK(pthread_create(&obs, NULL, observer, sink) == 0);
    for (int r = 0; r < rounds; r++) {
        for (long i = 0; i < nthreads; i++)
            CHECK(pthread_create(&t[i], NULL, worker, (void *)(i + 100 * r)) == 0);
        for (int i = 0; i < nthreads; i++) pthread_join(t[i], NULL);
    }
    atomic_store(&workers_done, 1);
    pthread_join(obs, NULL);
    fclose(sink);
    for (int i = 0; i < RING; i++) ts_free(atomic_exchange(&ring[i], NULL));
    printf("core_tsan: ok\n");
    return 0;
}
