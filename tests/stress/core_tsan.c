/* The fast allocator's lock-free paths under ThreadSanitizer: the core's
 * sources and the OS layer are compiled with -fsanitize=thread into this
 * program, which drives them through the ts_* API (names TSan does not
 * intercept) from threads that allocate, hand blocks to each other through a
 * ring, free other threads' blocks, realloc, and exit while their blocks are
 * still alive (heap abandonment and adoption), while another thread prints
 * statistics (it reads every heap's counters as they change) and changes the
 * purge delay. A second phase drives rescue passes (rescue.c) without pause
 * while owners alternate bursts of ts_malloc with idle spells and freers free
 * their blocks, so the purge thread's claims race with the owners' own use
 * of their full pages. Any report fails the test (TSAN_OPTIONS=halt_on_error=1:
 * exitcode=66 is set by ctest).
 *
 * usage: core_tsan [threads=4] [rounds=3] [ops=20000]
 */
#include "check.h"

#include <pthread.h>
#include <stdatomic.h>

#include <time.h>
#include <tsalloc.h>

#include "core/internal.h"

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

/* ---- rescue phase ---- */

enum { RESCUE_OWNERS = 2, RESCUE_SLOTS = 2048 };
static void *rescue_ring[RESCUE_OWNERS][RESCUE_SLOTS];
static _Atomic long rescue_in[RESCUE_OWNERS], rescue_out[RESCUE_OWNERS];
static atomic_int rescue_stop;

static void *rescue_owner(void *arg) {
    long id = (long)(intptr_t)arg;
    uint64_t rng = 99 + (uint64_t)id;
    unsigned char *mine[64] = {0}; /* a quarter of the blocks: freed by their owner */
    while (!atomic_load(&rescue_stop)) {
        long in = atomic_load(&rescue_in[id]);
        while (in - atomic_load(&rescue_out[id]) < RESCUE_SLOTS) {
            size_t n = (ts_rand(&rng) % 8) ? ts_rand_range(&rng, 16, 1024)
                                           : ts_rand_range(&rng, 9000, 200000);
            unsigned char *p = ts_malloc(n);
            CHECK(p);
            memset(p, (int)id + 1, n < 64 ? n : 64);
            if (ts_rand(&rng) % 4 == 0) { /* into full pages the driver may have claimed */
                size_t k = ts_rand(&rng) % 64;
                if (mine[k]) CHECK(mine[k][0] == id + 1);
                ts_free(mine[k]);
                mine[k] = p;
                continue;
            }
            rescue_ring[id][in % RESCUE_SLOTS] = p;
            atomic_store(&rescue_in[id], ++in);
        }
        struct timespec ts = {0, (long)(ts_rand(&rng) % 3) * 1000 * 1000}; /* idle spell */
        nanosleep(&ts, NULL);
    }
    for (int k = 0; k < 64; k++) ts_free(mine[k]);
    return NULL;
}

static void *rescue_freer(void *arg) {
    long id = (long)(intptr_t)arg;
    for (;;) {
        long out = atomic_load(&rescue_out[id]);
        if (out == atomic_load(&rescue_in[id])) {
            if (atomic_load(&rescue_stop)) return NULL;
            sched_yield();
            continue;
        }
        unsigned char *p = rescue_ring[id][out % RESCUE_SLOTS];
        CHECK(p[0] == id + 1);
        ts_free(p);
        atomic_store(&rescue_out[id], out + 1);
    }
}

static void *rescue_driver(void *arg) {
    (void)arg;
    /* Each look seen a long idle spell after the last: every heap whose slow
     * path did not run in between is looked at, whatever it is doing. */
    uint64_t t = _ts_os_now_ns();
    while (!atomic_load(&rescue_stop)) (void)_ts_heaps_rescue(t += (uint64_t)1 << 32);
    return NULL;
}

static void rescue_phase(void) {
    CHECK(ts_option_set("purge_delay_ms", 1));
    size_t before = atomic_load(&_ts_stats.rescued_pages);
    pthread_t owners[RESCUE_OWNERS], freers[RESCUE_OWNERS], driver;
    for (long i = 0; i < RESCUE_OWNERS; i++) {
        CHECK(pthread_create(&owners[i], NULL, rescue_owner, (void *)(intptr_t)i) == 0);
        CHECK(pthread_create(&freers[i], NULL, rescue_freer, (void *)(intptr_t)i) == 0);
    }
    CHECK(pthread_create(&driver, NULL, rescue_driver, NULL) == 0);
    struct timespec ts = {1, 500 * 1000 * 1000};
    nanosleep(&ts, NULL); /* the run's length, not a synchronisation */
    atomic_store(&rescue_stop, 1);
    for (int i = 0; i < RESCUE_OWNERS; i++) {
        pthread_join(owners[i], NULL);
        pthread_join(freers[i], NULL);
    }
    pthread_join(driver, NULL);
    CHECK(ts_option_set("purge_delay_ms", 100));
    printf("core_tsan: rescue phase, %zu pages rescued\n",
           atomic_load(&_ts_stats.rescued_pages) - before);
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
    rescue_phase();
    printf("core_tsan: ok\n");
    return 0;
}
