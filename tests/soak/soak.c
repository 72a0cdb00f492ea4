/* Soak: a long randomized load on the preloaded design, checked all along,
 * with the process's memory sampled once a second.
 *
 * The load: a table of shared slots, each holding a block or nothing;
 * worker threads take a random slot's block (atomic exchange), check and
 * free it (often a block another thread allocated, maybe one that has
 * exited), and put a new block there. Workers exit after a random number
 * of operations and are replaced (thread churn); the blocks they made stay
 * live in the table. A few large slots hold blocks of 256 KiB to 4 MiB.
 * Every few seconds the process forks: the child takes, checks and replaces
 * blocks of the table and exits. The table's size bounds the live bytes,
 * so once it is full the load is stationary: its memory must stay flat.
 *
 * Checks: every block's header and tail pattern when it is freed (in the
 * parent and the fork children); each child's exit status; and the trend:
 * the mean of the last third of the samples (RSS, and the committed memory
 * of mallinfo2: arena + hblkhd) must not exceed the mean of the middle third
 * by more than TREND_TOLERANCE, plus TREND_SLACK for the large blocks.
 *
 * usage: soak <seconds> <csv file> [notrend]
 *        soak --check <csv file>   (the trend check alone, over a CSV)
 * Writes one CSV line a second: seconds, rss_kib, arena, mmapped, in_use,
 * live_bytes (the bytes the table holds), threads started, forks. */
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"

enum { SMALL_SLOTS = 8192, LARGE_SLOTS = 6, WORKERS = 4, MAX_SAMPLES = 100000 };

/* Growth of the last third over the middle third that counts as a trend:
 * 10% of the middle third's level, plus two of the largest blocks (4 MiB):
 * the few large slots alone move the level by that much between samples
 * (a worker can hold one being replaced while the table holds another),
 * while a leak of a block in every few thousand frees grows by more. */
#define TREND_TOLERANCE 0.10
#define TREND_SLACK     (8.0 * 1024 * 1024)

#define MAGIC 0x50a4b10c5eedull

typedef struct {
    uint64_t size;
    uint64_t check; /* size ^ MAGIC ^ tag */
    uint64_t tag;
    uint64_t pad;
} header_t;

static _Atomic(header_t *) small_slots[SMALL_SLOTS];
static _Atomic(header_t *) large_slots[LARGE_SLOTS];
static atomic_long live_bytes, threads_started, forks_done;
static atomic_int stop;

static header_t *make_block(uint64_t *rng, int large) {
    size_t size;
    uint64_t r = ts_rand(rng);
    if (large)
        size = ts_rand_range(rng, 256u << 10, 4u << 20);
    else if (r % 100 < 90)
        size = ts_rand_range(rng, sizeof(header_t), 1024);
    else
        size = ts_rand_range(rng, 1024, 65536);
    header_t *h = malloc(size);
    CHECK_MSG(h != NULL, "malloc(%zu) failed", size);
    h->size = size;
    h->tag = ts_rand(rng);
    h->check = size ^ MAGIC ^ h->tag;
    ((unsigned char *)h)[size - 1] = (unsigned char)h->tag;
    if (large) memset(h + 1, (int)h->tag, size - sizeof *h - 1); /* resident */
    atomic_fetch_add(&live_bytes, (long)size);
    return h;
}

static void drop_block(header_t *h) {
    if (!h) return;
    CHECK_MSG(h->check == (h->size ^ MAGIC ^ h->tag), "block %p: header overwritten", (void *)h);
    CHECK_MSG(((unsigned char *)h)[h->size - 1] == (unsigned char)h->tag,
              "block %p (%zu bytes): tail overwritten", (void *)h, (size_t)h->size);
    atomic_fetch_sub(&live_bytes, (long)h->size);
    free(h);
}

/* One operation on the table: replace a random slot's block. */
static void churn_one(uint64_t *rng) {
    uint64_t r = ts_rand(rng);
    int large = r % 512 == 0;
    _Atomic(header_t *) *slot =
        large ? &large_slots[(r >> 9) % LARGE_SLOTS] : &small_slots[(r >> 9) % SMALL_SLOTS];
    header_t *fresh = (r >> 40) % 8 == 0 ? NULL : make_block(rng, large);
    drop_block(atomic_exchange(slot, fresh));
}

static void *worker(void *arg) {
    uint64_t rng = (uint64_t)(uintptr_t)arg * 0x9e3779b97f4a7c15ull + 1;
    long ops = (long)ts_rand_range(&rng, 20000, 200000);
    for (long i = 0; i < ops && !atomic_load(&stop); i++) churn_one(&rng);
    return NULL;
}

static void *churner(void *arg) {
    (void)arg;
    pthread_t t[WORKERS];
    long next = 1;
    for (int i = 0; i < WORKERS; i++)
        CHECK(pthread_create(&t[i], NULL, worker, (void *)(uintptr_t)next++) == 0);
    while (!atomic_load(&stop)) {
        for (int i = 0; i < WORKERS; i++) {
            /* Replace a worker once it has finished its operations. */
            if (pthread_tryjoin_np(t[i], NULL) == 0) {
                CHECK(pthread_create(&t[i], NULL, worker, (void *)(uintptr_t)next++) == 0);
                atomic_fetch_add(&threads_started, 1);
            }
        }
        usleep(2000);
    }
    for (int i = 0; i < WORKERS; i++) CHECK(pthread_join(t[i], NULL) == 0);
    return NULL;
}

/* In a fork child: the table as inherited, used by the child's one thread. */
static void fork_child(uint64_t seed) {
    uint64_t rng = seed;
    for (int i = 0; i < 2000; i++) churn_one(&rng);
    _exit(0);
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static long rss_kib(void) {
    char buf[256];
    CHECK(ts_read_file("/proc/self/statm", buf, sizeof buf) > 0);
    long pages = 0, resident = 0;
    CHECK(sscanf(buf, "%ld %ld", &pages, &resident) == 2);
    return resident * (sysconf(_SC_PAGESIZE) / 1024);
}

typedef struct {
    double rss, committed;
} sample_t;
static sample_t samples[MAX_SAMPLES];

static double mean(const sample_t *s, int n, int committed) {
    double sum = 0;
    for (int i = 0; i < n; i++) sum += committed ? s[i].committed : s[i].rss;
    return n ? sum / n : 0;
}

static int trend_ok(const char *what, double middle, double last) {
    double limit = middle * (1 + TREND_TOLERANCE) + TREND_SLACK;
    printf("soak: %s: middle third %.1f MiB, last third %.1f MiB (limit %.1f MiB)\n", what,
           middle / 1048576, last / 1048576, limit / 1048576);
    if (last <= limit) return 1;
    fprintf(stderr, "soak: %s trends upward: %.1f MiB > %.1f MiB\n", what, last / 1048576,
            limit / 1048576);
    return 0;
}

/* The trend over n samples. The first third fills the table: only the
 * later two are stationary. */
static int trend_check(const sample_t *s, int n) {
    CHECK_MSG(n >= 9, "%d samples: too few for a trend (run 10 s or more)", n);
    int third = n / 3;
    const sample_t *middle = s + third, *last = s + n - third;
    int ok = trend_ok("RSS", mean(middle, third, 0), mean(last, third, 0));
    ok &= trend_ok("committed", mean(middle, third, 1), mean(last, third, 1));
    return ok;
}

/* soak --check: the trend check over a CSV that a run wrote (or a made-up
 * one: tests/soak/soak_check.sh), without running the load. */
static int check_csv(const char *path) {
    FILE *f = fopen(path, "r");
    CHECK_MSG(f != NULL, "%s: %s", path, strerror(errno));
    char line[512];
    CHECK_MSG(fgets(line, sizeof line, f) != NULL, "%s: empty", path); /* the header */
    int n = 0;
    while (n < MAX_SAMPLES && fgets(line, sizeof line, f)) {
        double t;
        long rss;
        size_t arena, mmapped;
        CHECK_MSG(sscanf(line, "%lf,%ld,%zu,%zu", &t, &rss, &arena, &mmapped) == 4,
                  "%s: line %d: %s", path, n + 2, line);
        samples[n].rss = (double)rss * 1024;
        samples[n].committed = (double)(arena + mmapped);
        n++;
    }
    fclose(f);
    printf("soak: %s: %d samples\n", path, n);
    return trend_check(samples, n);
}

int main(int argc, char **argv) {
    CHECK(argc >= 3);
    if (strcmp(argv[1], "--check") == 0) return check_csv(argv[2]) ? 0 : 1;
    ts_require_preloaded();
    double seconds = atof(argv[1]);
    int notrend = argc > 3 && strcmp(argv[3], "notrend") == 0;
    FILE *csv = fopen(argv[2], "w");
    CHECK_MSG(csv != NULL, "%s: %s", argv[2], strerror(errno));
    fprintf(csv, "seconds,rss_kib,arena,mmapped,in_use,live_bytes,threads_started,forks\n");

    pthread_t churn;
    CHECK(pthread_create(&churn, NULL, churner, NULL) == 0);
    double start = now(), next_fork = start + 2;
    int n = 0;
    uint64_t rng = 42;
    while (now() - start < seconds && n < MAX_SAMPLES) {
        usleep(1000000);
        if (now() >= next_fork) {
            pid_t pid = fork();
            CHECK(pid >= 0);
            if (pid == 0) fork_child(ts_rand(&rng));
            int status = 0;
            CHECK(waitpid(pid, &status, 0) == pid);
            CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0, "fork child: status %#x",
                      status);
            atomic_fetch_add(&forks_done, 1);
            next_fork = now() + 1 + (double)(ts_rand(&rng) % 4);
        }
        struct mallinfo2 mi = mallinfo2();
        long rss = rss_kib();
        samples[n].rss = (double)rss * 1024;
        samples[n].committed = (double)(mi.arena + mi.hblkhd);
        fprintf(csv, "%.1f,%ld,%zu,%zu,%zu,%ld,%ld,%ld\n", now() - start, rss, mi.arena, mi.hblkhd,
                mi.uordblks, atomic_load(&live_bytes), atomic_load(&threads_started),
                atomic_load(&forks_done));
        fflush(csv);
        n++;
    }
    atomic_store(&stop, 1);
    CHECK(pthread_join(churn, NULL) == 0);
    for (int i = 0; i < SMALL_SLOTS; i++) drop_block(atomic_exchange(&small_slots[i], NULL));
    for (int i = 0; i < LARGE_SLOTS; i++) drop_block(atomic_exchange(&large_slots[i], NULL));
    CHECK_EQ(atomic_load(&live_bytes), 0);
    fclose(csv);
    printf("soak: %d samples, %ld threads started, %ld forks\n", n, atomic_load(&threads_started),
           atomic_load(&forks_done));

    if (notrend) return 0;
    return trend_check(samples, n) ? 0 : 1;
}
