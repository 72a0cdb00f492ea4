/* midsize: blocks between the small sizes and the ones that get a mapping of
 * their own (16 KiB .. 256 KiB by default), as I/O buffers, image tiles or
 * per-request arenas are. T threads each keep S live blocks and replace a
 * random one `ops` times: free it, malloc a new size, tag it. Few blocks of
 * each size are alive at once, so an allocator that gives back a page or
 * region whenever its last block goes, and makes a new one at the next
 * request, pays for that on most calls.
 *
 * Each block's tag (first word, last byte) is checked before its free.
 * check = bytes freed in total, a function of the arguments (each thread has
 * its own random stream).
 */
#include <pthread.h>

#include "tsb.h"

static long opt_threads = 2, opt_slots = 32, opt_ops = 500000, opt_min = 16384, opt_max = 262144;
static pthread_barrier_t start_line;

typedef struct {
    _Alignas(64) long id; /* each thread's counters on lines of their own */
    uint64_t bytes_freed;
    long bad;
    tsb_span_t span;
    /* The thread's blocks: slot k holds ptr[k], size[k] bytes, tagged tag[k]. */
    void **ptr;
    uint32_t *size;
    uint64_t *tag;
    uint64_t rng, made;
} worker_t;

static void fill_slot(worker_t *w, long k) {
    w->size[k] = (uint32_t)tsb_range(&w->rng, (size_t)opt_min, (size_t)opt_max);
    w->ptr[k] = malloc(w->size[k]);
    if (!w->ptr[k]) tsb_fail("malloc(%u) returned NULL", w->size[k]);
    w->tag[k] = tsb_mix(++w->made ^ ((uint64_t)w->id << 40));
    tsb_tag(w->ptr[k], w->size[k], w->tag[k]);
}

static void release_slot(worker_t *w, long k) {
    w->bad += !tsb_tag_ok(w->ptr[k], w->size[k], w->tag[k]);
    w->bytes_freed += w->size[k];
    free(w->ptr[k]);
}

static void *worker(void *arg) {
    worker_t *w = arg;
    w->rng = tsb_mix(0x3a1d5u + (uint64_t)w->id);
    w->ptr = tsb_pages(sizeof(void *) * (size_t)opt_slots);
    w->size = tsb_pages(sizeof(uint32_t) * (size_t)opt_slots);
    w->tag = tsb_pages(sizeof(uint64_t) * (size_t)opt_slots);
    for (long k = 0; k < opt_slots; k++) fill_slot(w, k);
    pthread_barrier_wait(&start_line);
    w->span.start = tsb_now();
    for (long i = 0; i < opt_ops; i++) {
        long k = (long)tsb_range(&w->rng, 0, (size_t)opt_slots - 1);
        release_slot(w, k);
        fill_slot(w, k);
    }
    w->span.end = tsb_now();
    for (long k = 0; k < opt_slots; k++) release_slot(w, k);
    tsb_pages_free(w->ptr, sizeof(void *) * (size_t)opt_slots);
    tsb_pages_free(w->size, sizeof(uint32_t) * (size_t)opt_slots);
    tsb_pages_free(w->tag, sizeof(uint64_t) * (size_t)opt_slots);
    return NULL;
}

int main(int argc, char **argv) {
    static const tsb_opt_t opts[] = {
        {"threads", &opt_threads, NULL, "threads, each with its own blocks"},
        {"slots", &opt_slots, NULL, "live blocks per thread"},
        {"ops", &opt_ops, NULL, "replacements per thread"},
        {"min", &opt_min, NULL, "smallest block (>= 16)"},
        {"max", &opt_max, NULL, "largest block"},
        {0}};
    tsb_start("midsize");
    tsb_parse(argc, argv, opts);
    tsb_require(opt_threads >= 1 && opt_threads <= 1024, "1 <= threads <= 1024");
    tsb_require(opt_slots >= 1 && opt_slots < (1L << 20), "1 <= slots < 2^20");
    tsb_require(opt_ops >= 0, "ops >= 0");
    tsb_require(opt_min >= 16 && opt_max >= opt_min && opt_max < (1L << 31), "16 <= min <= max");

    worker_t *w = tsb_pages(sizeof(worker_t) * (size_t)opt_threads);
    pthread_barrier_init(&start_line, NULL, (unsigned)opt_threads + 1);
    for (long t = 0; t < opt_threads; t++) w[t].id = t;
    tsb_run_threads(opt_threads, worker, w, sizeof *w, &start_line);
    double elapsed = tsb_spans_elapsed(&w[0].span, opt_threads, sizeof *w);

    uint64_t check = 0;
    for (long t = 0; t < opt_threads; t++) {
        if (w[t].bad) tsb_fail("thread %ld found %ld corrupted blocks", t, w[t].bad);
        check += w[t].bytes_freed;
    }
    tsb_kv("replacements", "%ld", opt_ops * opt_threads);
    return tsb_ok(elapsed, opt_threads, check);
}
