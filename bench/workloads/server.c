/* server: a larson-style server simulation. There are T arrays of S live
 * blocks (sizes uniform in [min, max]); the main thread fills them, then in
 * each round T fresh threads start, thread i takes array (i + round) % T and
 * replaces `ops` random slots (free the old block, malloc a new one), and
 * exits. So blocks are freed by threads other than the ones that allocated
 * them, and threads come and go as in a server with short-lived workers.
 *
 * Each array carries its own random stream, so what happens to an array does
 * not depend on which thread runs it: check (bytes freed + bytes left) is a
 * function of the arguments. Every block's tag is checked before its free.
 * peak_rss_kb is the process's own peak resident set (getrusage).
 */
#include <pthread.h>

#include "tsb.h"

static long opt_threads = 4, opt_slots = 2000, opt_rounds = 20, opt_ops = 40000, opt_min = 8,
            opt_max = 1000;

typedef struct {
    void **ptr;
    uint32_t *size;
    uint64_t *tag;
    uint64_t rng;
    uint64_t generation;
    uint64_t bytes_freed;
    long bad;
    long id;
} array_t;

static array_t *arrays;

static void fill_slot(array_t *a, long k) {
    size_t n = tsb_range(&a->rng, (size_t)opt_min, (size_t)opt_max);
    void *p = malloc(n);
    if (!p) tsb_fail("malloc(%zu) returned NULL", n);
    a->generation++;
    a->tag[k] = tsb_mix(a->generation ^ ((uint64_t)a->id << 40));
    tsb_tag(p, n, a->tag[k]);
    a->ptr[k] = p;
    a->size[k] = (uint32_t)n;
}

static void release_slot(array_t *a, long k) {
    void *p = a->ptr[k];
    size_t n = a->size[k];
    if (!tsb_tag_ok(p, n, a->tag[k])) a->bad++;
    a->bytes_freed += n;
    free(p);
}

static void *worker(void *arg) {
    array_t *a = arg;
    for (long i = 0; i < opt_ops; i++) {
        long k = (long)tsb_range(&a->rng, 0, (size_t)opt_slots - 1);
        release_slot(a, k);
        fill_slot(a, k);
    }
    return NULL;
}

int main(int argc, char **argv) {
    static const tsb_opt_t opts[] = {
        {"threads", &opt_threads, NULL, "threads per round (and arrays)"},
        {"slots", &opt_slots, NULL, "live blocks per array"},
        {"rounds", &opt_rounds, NULL, "rounds; each starts fresh threads"},
        {"ops", &opt_ops, NULL, "replacements per thread per round"},
        {"min", &opt_min, NULL, "smallest block (>= 8)"},
        {"max", &opt_max, NULL, "largest block"},
        {0}};
    tsb_start("server");
    tsb_parse(argc, argv, opts);
    tsb_require(opt_threads >= 1 && opt_threads <= 4096, "1 <= threads <= 4096");
    tsb_require(opt_slots >= 1 && opt_slots < (1L << 20), "1 <= slots < 2^20");
    tsb_require(opt_rounds >= 1 && opt_ops >= 0, "rounds >= 1, ops >= 0");
    tsb_require(opt_min >= 8 && opt_max >= opt_min && opt_max < (1L << 31), "8 <= min <= max");

    arrays = tsb_pages(sizeof(array_t) * (size_t)opt_threads);
    pthread_t *tid = tsb_pages(sizeof(pthread_t) * (size_t)opt_threads);
    for (long t = 0; t < opt_threads; t++) {
        array_t *a = &arrays[t];
        a->id = t;
        a->rng = tsb_mix((uint64_t)t + 1);
        a->ptr = tsb_pages(sizeof(void *) * (size_t)opt_slots);
        a->size = tsb_pages(sizeof(uint32_t) * (size_t)opt_slots);
        a->tag = tsb_pages(sizeof(uint64_t) * (size_t)opt_slots);
    }
    double t0 = tsb_now();
    for (long t = 0; t < opt_threads; t++)
        for (long k = 0; k < opt_slots; k++) fill_slot(&arrays[t], k);
    for (long r = 0; r < opt_rounds; r++) {
        for (long i = 0; i < opt_threads; i++)
            if (pthread_create(&tid[i], NULL, worker, &arrays[(i + r) % opt_threads]))
                tsb_fail("pthread_create failed");
        for (long i = 0; i < opt_threads; i++) pthread_join(tid[i], NULL);
    }
    uint64_t check = 0;
    for (long t = 0; t < opt_threads; t++) {
        array_t *a = &arrays[t];
        for (long k = 0; k < opt_slots; k++) release_slot(a, k);
        if (a->bad) tsb_fail("array %ld: %ld blocks corrupted", t, a->bad);
        check += a->bytes_freed;
    }
    double elapsed = tsb_now() - t0;
    tsb_kv("rounds", "%ld", opt_rounds);
    tsb_kv("replacements", "%ld", opt_rounds * opt_threads * opt_ops);
    tsb_kv("peak_rss_kb", "%ld", tsb_peak_rss_kb());
    return tsb_ok(elapsed, opt_threads, check);
}
