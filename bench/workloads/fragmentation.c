/* fragmentation: how much memory an allocator keeps when the live data
 * shrinks and changes shape.
 *   1. allocate `small` blocks of [min, max] bytes;
 *   2. free a random (100 - keep)% of them, in random order;
 *   3. allocate blocks of [large-min, large-max] bytes until as many bytes
 *      as were freed are live again (an allocator that cannot reuse the holes
 *      for the larger sizes grows);
 *   4. free everything.
 * Reports the RSS after each phase, the peak (getrusage), final_rss_kb (after
 * phase 3, live data = live_bytes) and released_rss_kb (after phase 4). Each
 * block's tag is checked before its free. check = bytes freed in total, a
 * function of the arguments. Single-threaded unless --threads > 1, where each
 * thread runs the same phases on its own share of the blocks.
 */
#include <pthread.h>

#include "tsb.h"

static long opt_threads = 1, opt_small = 400000, opt_min = 16, opt_max = 128, opt_keep = 10,
            opt_large_min = 256, opt_large_max = 4096;
static pthread_barrier_t phase_line;
static long rss_phase[3];
static uint64_t live_bytes_total;

typedef struct {
    long id;
    uint64_t bytes_freed, live_bytes;
    long bad;
} worker_t;

static void check_and_free(worker_t *w, void *p, size_t n, uint64_t tag) {
    if (!tsb_tag_ok(p, n, tag)) w->bad++;
    w->bytes_freed += n;
    free(p);
}

static void *worker(void *arg) {
    worker_t *w = arg;
    long count = opt_small / opt_threads;
    uint64_t rng = tsb_mix(0xf4a9u + (uint64_t)w->id);
    void **small = tsb_pages(sizeof(void *) * (size_t)count);
    uint32_t *size = tsb_pages(sizeof(uint32_t) * (size_t)count);
    long *order = tsb_pages(sizeof(long) * (size_t)count);

    for (long i = 0; i < count; i++) {
        size[i] = (uint32_t)tsb_range(&rng, (size_t)opt_min, (size_t)opt_max);
        small[i] = malloc(size[i]);
        if (!small[i]) tsb_fail("malloc(%u) returned NULL", size[i]);
        tsb_tag(small[i], size[i], (uint64_t)i ^ ((uint64_t)w->id << 48));
        order[i] = i;
    }
    pthread_barrier_wait(&phase_line);
    pthread_barrier_wait(&phase_line); /* main read the RSS */

    /* Free a random (100 - keep)% in random order: shuffle, free a prefix. */
    for (long i = count - 1; i > 0; i--) {
        long j = (long)tsb_range(&rng, 0, (size_t)i), t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
    long nfree = count - count * opt_keep / 100;
    uint64_t freed = 0;
    for (long k = 0; k < nfree; k++) {
        long i = order[k];
        check_and_free(w, small[i], size[i], (uint64_t)i ^ ((uint64_t)w->id << 48));
        freed += size[i];
        small[i] = NULL;
    }
    pthread_barrier_wait(&phase_line);
    pthread_barrier_wait(&phase_line);

    /* Larger blocks until the freed bytes are live again. */
    size_t cap = (size_t)(freed / (uint64_t)opt_large_min) + 1, nlarge = 0;
    void **large = tsb_pages(sizeof(void *) * cap);
    uint32_t *lsize = tsb_pages(sizeof(uint32_t) * cap);
    uint64_t refilled = 0;
    while (refilled < freed && nlarge < cap) {
        size_t n = tsb_range(&rng, (size_t)opt_large_min, (size_t)opt_large_max);
        void *p = malloc(n);
        if (!p) tsb_fail("malloc(%zu) returned NULL", n);
        tsb_tag(p, n, (uint64_t)nlarge ^ 0x1a26e5ull ^ ((uint64_t)w->id << 48));
        large[nlarge] = p;
        lsize[nlarge++] = (uint32_t)n;
        refilled += n;
    }
    uint64_t live = refilled;
    for (long i = 0; i < count; i++) live += small[i] ? size[i] : 0;
    w->live_bytes = live;
    pthread_barrier_wait(&phase_line);
    pthread_barrier_wait(&phase_line);

    for (long i = 0; i < count; i++)
        if (small[i]) check_and_free(w, small[i], size[i], (uint64_t)i ^ ((uint64_t)w->id << 48));
    for (size_t i = 0; i < nlarge; i++)
        check_and_free(w, large[i], lsize[i], (uint64_t)i ^ 0x1a26e5ull ^ ((uint64_t)w->id << 48));
    tsb_pages_free(small, sizeof(void *) * (size_t)count);
    tsb_pages_free(size, sizeof(uint32_t) * (size_t)count);
    tsb_pages_free(order, sizeof(long) * (size_t)count);
    tsb_pages_free(large, sizeof(void *) * cap);
    tsb_pages_free(lsize, sizeof(uint32_t) * cap);
    return NULL;
}

int main(int argc, char **argv) {
    static const tsb_opt_t opts[] = {
        {"threads", &opt_threads, NULL, "threads, each with small/threads blocks"},
        {"small", &opt_small, NULL, "small blocks allocated in phase 1"},
        {"min", &opt_min, NULL, "smallest small block"},
        {"max", &opt_max, NULL, "largest small block"},
        {"keep", &opt_keep, NULL, "percent of small blocks kept in phase 2"},
        {"large-min", &opt_large_min, NULL, "smallest phase 3 block"},
        {"large-max", &opt_large_max, NULL, "largest phase 3 block"},
        {0}};
    tsb_start("fragmentation");
    tsb_parse(argc, argv, opts);
    tsb_require(opt_threads >= 1 && opt_threads <= 1024 && opt_small >= opt_threads,
                "1 <= threads <= small");
    tsb_require(opt_min >= 1 && opt_max >= opt_min && opt_max < (1L << 31), "1 <= min <= max");
    tsb_require(opt_large_min >= 1 && opt_large_max >= opt_large_min && opt_large_max < (1L << 31),
                "1 <= large-min <= large-max");
    tsb_require(opt_keep >= 0 && opt_keep <= 100, "0 <= keep <= 100");

    worker_t *w = tsb_pages(sizeof(worker_t) * (size_t)opt_threads);
    pthread_t *tid = tsb_pages(sizeof(pthread_t) * (size_t)opt_threads);
    pthread_barrier_init(&phase_line, NULL, (unsigned)opt_threads + 1);
    long rss_start = tsb_rss_kb();
    double t0 = tsb_now();
    for (long t = 0; t < opt_threads; t++) {
        w[t].id = t;
        if (pthread_create(&tid[t], NULL, worker, &w[t])) tsb_fail("pthread_create failed");
    }
    for (int phase = 0; phase < 3; phase++) {
        pthread_barrier_wait(&phase_line); /* the threads finished the phase */
        rss_phase[phase] = tsb_rss_kb();
        pthread_barrier_wait(&phase_line);
    }
    for (long t = 0; t < opt_threads; t++) pthread_join(tid[t], NULL);
    double elapsed = tsb_now() - t0;
    long rss_end = tsb_rss_kb();

    uint64_t check = 0;
    for (long t = 0; t < opt_threads; t++) {
        if (w[t].bad) tsb_fail("thread %ld: %ld blocks corrupted", t, w[t].bad);
        check += w[t].bytes_freed;
        live_bytes_total += w[t].live_bytes;
    }
    tsb_kv("start_rss_kb", "%ld", rss_start);
    tsb_kv("small_rss_kb", "%ld", rss_phase[0]);
    tsb_kv("holes_rss_kb", "%ld", rss_phase[1]);
    tsb_kv("final_rss_kb", "%ld", rss_phase[2]);
    tsb_kv("released_rss_kb", "%ld", rss_end);
    long peak = tsb_peak_rss_kb(); /* the kernel updates it lazily: add our readings */
    for (int phase = 0; phase < 3; phase++)
        peak = rss_phase[phase] > peak ? rss_phase[phase] : peak;
    tsb_kv("peak_rss_kb", "%ld", peak);
    tsb_kv("live_bytes", "%" PRIu64, live_bytes_total);
    return tsb_ok(elapsed, opt_threads, check);
}
