/* thread-overhead: what an allocator keeps resident per thread. N threads
 * with 64 KiB stacks start and meet the main thread at a barrier without
 * having allocated (RSS now holds their stacks: rss_threads_kb over the
 * start); then each mallocs `blocks` blocks of min-max bytes, writes them
 * and meets the main thread again (rss_blocks_kb over the first reading).
 * rss_per_thread_kb = rss_blocks_kb / N: the allocator's own per-thread
 * state (caches, heaps, arenas) plus the few hundred bytes each thread
 * holds. Then every thread checks its blocks' tags, frees them and exits.
 *
 * Sizes come from each thread's own stream, so check (bytes allocated) is
 * a function of the arguments. Time covers the whole: start, both
 * barriers, frees and joins.
 */
#include <pthread.h>

#include "tsb.h"

static long opt_threads = 2000, opt_blocks = 8, opt_min = 16, opt_max = 2048, opt_stack_kb = 64;

#define MAX_BLOCKS 64

typedef struct {
    long id;
    uint64_t rng;
    uint64_t bytes;
    long bad;
    void *ptr[MAX_BLOCKS];
    uint32_t size[MAX_BLOCKS];
} worker_t;

static pthread_barrier_t started, allocate, holding, release;

static uint64_t tag_of(const worker_t *me, long k) {
    return tsb_mix((uint64_t)me->id * MAX_BLOCKS + (uint64_t)k);
}

static void *worker(void *arg) {
    worker_t *me = arg;
    pthread_barrier_wait(&started);
    pthread_barrier_wait(&allocate);
    for (long k = 0; k < opt_blocks; k++) {
        size_t n = tsb_range(&me->rng, (size_t)opt_min, (size_t)opt_max);
        void *p = malloc(n);
        if (!p) tsb_fail("malloc(%zu) returned NULL", n);
        tsb_tag(p, n, tag_of(me, k));
        me->ptr[k] = p;
        me->size[k] = (uint32_t)n;
        me->bytes += n;
    }
    pthread_barrier_wait(&holding);
    pthread_barrier_wait(&release);
    for (long k = 0; k < opt_blocks; k++) {
        if (!tsb_tag_ok(me->ptr[k], me->size[k], tag_of(me, k))) me->bad++;
        free(me->ptr[k]);
    }
    return NULL;
}

int main(int argc, char **argv) {
    static const tsb_opt_t opts[] = {
        {"threads", &opt_threads, NULL, "threads alive at once"},
        {"blocks", &opt_blocks, NULL, "blocks each thread holds (<= 64)"},
        {"min", &opt_min, NULL, "smallest block (>= 8)"},
        {"max", &opt_max, NULL, "largest block"},
        {"stack-kb", &opt_stack_kb, NULL, "stack size of each thread in KiB"},
        {0}};
    tsb_start("thread-overhead");
    tsb_parse(argc, argv, opts);
    tsb_require(opt_threads >= 1 && opt_threads <= 100000, "1 <= threads <= 100000");
    tsb_require(opt_blocks >= 0 && opt_blocks <= MAX_BLOCKS, "0 <= blocks <= 64");
    tsb_require(opt_min >= 8 && opt_max >= opt_min && opt_max < (1L << 31), "8 <= min <= max");
    tsb_require(opt_stack_kb >= 16, "stack-kb >= 16");

    worker_t *workers = tsb_pages(sizeof *workers * (size_t)opt_threads);
    pthread_t *tid = tsb_pages(sizeof *tid * (size_t)opt_threads);
    for (long t = 0; t < opt_threads; t++) {
        workers[t].id = t;
        workers[t].rng = tsb_mix((uint64_t)t + 1);
    }
    unsigned parties = (unsigned)opt_threads + 1;
    pthread_barrier_init(&started, NULL, parties);
    pthread_barrier_init(&allocate, NULL, parties);
    pthread_barrier_init(&holding, NULL, parties);
    pthread_barrier_init(&release, NULL, parties);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    if (pthread_attr_setstacksize(&attr, (size_t)opt_stack_kb << 10))
        tsb_fail("pthread_attr_setstacksize(%ld KiB) failed", opt_stack_kb);

    long rss_start = tsb_rss_kb();
    double t0 = tsb_now();
    for (long t = 0; t < opt_threads; t++)
        if (pthread_create(&tid[t], &attr, worker, &workers[t]))
            tsb_fail("pthread_create of thread %ld failed", t);
    pthread_barrier_wait(&started);
    long rss_threads = tsb_rss_kb(); /* all alive, nothing allocated */
    pthread_barrier_wait(&allocate);
    pthread_barrier_wait(&holding);
    long rss_blocks = tsb_rss_kb(); /* all alive, each holding its blocks */
    pthread_barrier_wait(&release);
    uint64_t check = 0;
    long bad = 0;
    for (long t = 0; t < opt_threads; t++) {
        pthread_join(tid[t], NULL);
        check += workers[t].bytes;
        bad += workers[t].bad;
    }
    double elapsed = tsb_now() - t0;
    if (bad) tsb_fail("%ld blocks corrupted", bad);
    tsb_kv("rss_threads_kb", "%ld", rss_threads - rss_start);
    tsb_kv("rss_blocks_kb", "%ld", rss_blocks - rss_threads);
    tsb_kv("rss_per_thread_kb", "%.2f", (double)(rss_blocks - rss_threads) / (double)opt_threads);
    return tsb_ok(elapsed, opt_threads, check);
}
