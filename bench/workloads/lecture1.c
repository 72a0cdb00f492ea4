/* lecture1: the seed lecture's first program. T threads each loop
 * malloc(8 * ((i % N) + 1)) / free, the case where one heap lock is the
 * bottleneck (ptmalloc 5.1 s vs tcmalloc 1.9 s in the lecture).
 *
 * Each block gets a tag in its first word and last byte, read back before the
 * free: a block handed to two threads at once, or a corrupted one, fails.
 * With --tags 0 the blocks are not touched, as in the seed's program, so the
 * loop is the allocator's calls and little else (tsbench's lecture1-bare);
 * an empty asm keeps the compiler from removing the malloc/free pair.
 * check = total bytes allocated, which the arguments alone determine.
 */
#include <pthread.h>

#include "tsb.h"

static long opt_threads = 32, opt_iters = 400000, opt_classes = 64, opt_tags = 1;
static pthread_barrier_t start_line;

typedef struct {
    long id;
    uint64_t bytes;
    long bad;
    tsb_span_t span; /* this thread's loop */
} worker_t;

/* The seed's loop: nothing touches the block. */
static uint64_t bare_loop(void) {
    uint64_t bytes = 0;
    long k = 0;
    for (long i = 0; i < opt_iters; i++) {
        size_t n = 8 * (size_t)(k + 1);
        if (++k == opt_classes) k = 0;
        void *p = malloc(n);
        if (!p) tsb_fail("malloc(%zu) returned NULL", n);
        __asm__ volatile("" : : "r"(p) : "memory"); /* p escapes: the pair stays */
        bytes += n;
        free(p);
    }
    return bytes;
}

static void *worker(void *arg) {
    worker_t *w = arg;
    pthread_barrier_wait(&start_line);
    w->span.start = tsb_now();
    uint64_t bytes = 0;
    long bad = 0;
    long k = 0; /* i % classes, without a division per pass (the seed's N is a constant) */
    if (!opt_tags) {
        w->bytes = bare_loop();
        w->span.end = tsb_now();
        return NULL;
    }
    for (long i = 0; i < opt_iters; i++) {
        size_t n = 8 * (size_t)(k + 1);
        if (++k == opt_classes) k = 0;
        void *p = malloc(n);
        if (!p) tsb_fail("malloc(%zu) returned NULL", n);
        uint64_t tag = ((uint64_t)w->id << 40) ^ (uint64_t)i;
        tsb_tag(p, n, tag);
        bad += !tsb_tag_ok(p, n, tag);
        bytes += n;
        free(p);
    }
    w->bytes = bytes;
    w->bad = bad;
    w->span.end = tsb_now();
    return NULL;
}

int main(int argc, char **argv) {
    static const tsb_opt_t opts[] = {
        {"threads", &opt_threads, NULL, "threads, each looping malloc/free"},
        {"iters", &opt_iters, NULL, "malloc/free pairs per thread"},
        {"classes", &opt_classes, NULL, "sizes 8, 16, ... 8*classes bytes"},
        {"tags", &opt_tags, NULL, "1: tag and check every block; 0: touch none (the seed's loop)"},
        {0}};
    tsb_start("lecture1");
    tsb_parse(argc, argv, opts);
    tsb_require(opt_threads >= 1 && opt_threads <= 4096, "1 <= threads <= 4096");
    tsb_require(opt_iters >= 1 && opt_classes >= 1, "iters, classes >= 1");
    tsb_require(opt_tags == 0 || opt_tags == 1, "tags is 0 or 1");

    worker_t *w = tsb_pages(sizeof(worker_t) * (size_t)opt_threads);
    pthread_barrier_init(&start_line, NULL, (unsigned)opt_threads + 1);
    for (long t = 0; t < opt_threads; t++) w[t].id = t;
    tsb_run_threads(opt_threads, worker, w, sizeof *w, &start_line);
    double elapsed = tsb_spans_elapsed(&w[0].span, opt_threads, sizeof *w);

    /* Expected bytes, from the arguments alone. */
    uint64_t expect = 0, got = 0;
    for (long i = 0; i < opt_iters; i++) expect += 8 * (uint64_t)((i % opt_classes) + 1);
    expect *= (uint64_t)opt_threads;
    for (long t = 0; t < opt_threads; t++) {
        if (w[t].bad) tsb_fail("thread %ld found %ld corrupted blocks", t, w[t].bad);
        got += w[t].bytes;
    }
    if (got != expect) tsb_fail("check %" PRIu64 " != expected %" PRIu64, got, expect);
    tsb_kv("iters", "%ld", opt_iters);
    tsb_kv("tags", "%ld", opt_tags);
    tsb_kv("pairs", "%ld", opt_iters * opt_threads);
    return tsb_ok(elapsed, opt_threads, got);
}
