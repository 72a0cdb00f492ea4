/* collatz-ivec: seed 004's "ivec" benchmark. Threads take the start values
 * 1..count in turn (value v goes to thread v % T); for each one they follow
 * its Collatz sequence and keep the values seen in a growable array (ivec).
 * At every step the ivec is copied, the new value pushed onto the copy (grown
 * with realloc when full, doubling), and the old ivec freed: many mid-size
 * blocks of steadily growing size, plus realloc.
 *
 * Verification: at the end of each sequence the ivec must hold exactly the
 * sequence, recomputed without the allocator. check = sum over sequences of
 * (length + sum of values), a function of the arguments only.
 */
#include <pthread.h>

#include "tsb.h"

static long opt_threads = 4, opt_count = 50000, opt_first = 1;

typedef struct {
    long *data;
    size_t len, cap;
} ivec_t;

static ivec_t *ivec_new(size_t cap) {
    ivec_t *v = malloc(sizeof *v);
    if (!v) tsb_fail("malloc(ivec) returned NULL");
    v->data = malloc(cap * sizeof(long));
    if (!v->data) tsb_fail("malloc(%zu) returned NULL", cap * sizeof(long));
    v->len = 0;
    v->cap = cap;
    return v;
}

static ivec_t *ivec_copy(const ivec_t *src) {
    ivec_t *v = ivec_new(src->cap);
    memcpy(v->data, src->data, src->len * sizeof(long));
    v->len = src->len;
    return v;
}

static void ivec_push(ivec_t *v, long x) {
    if (v->len == v->cap) {
        size_t cap = v->cap * 2;
        long *grown = realloc(v->data, cap * sizeof(long));
        if (!grown) tsb_fail("realloc(%zu) returned NULL", cap * sizeof(long));
        v->data = grown;
        v->cap = cap;
    }
    v->data[v->len++] = x;
}

static void ivec_free(ivec_t *v) {
    free(v->data);
    free(v);
}

static long collatz_next(long x) {
    return (x % 2) ? 3 * x + 1 : x / 2;
}

typedef struct {
    long id;
    uint64_t check, expect;
    long bad;
} worker_t;

static void *worker(void *arg) {
    worker_t *w = arg;
    for (long v = opt_first + w->id; v < opt_first + opt_count; v += opt_threads) {
        ivec_t *seq = ivec_new(2);
        for (long x = v;; x = collatz_next(x)) {
            ivec_t *next = ivec_copy(seq);
            ivec_push(next, x);
            ivec_free(seq);
            seq = next;
            if (x == 1) break;
        }
        /* The ivec must hold the sequence exactly. */
        long x = v;
        size_t i = 0;
        for (;; x = collatz_next(x), i++) {
            w->expect += (uint64_t)x + 1;
            if (i >= seq->len || ((volatile long *)seq->data)[i] != x) w->bad++;
            if (x == 1) break;
        }
        if (seq->len != i + 1) w->bad++;
        for (size_t k = 0; k < seq->len; k++) w->check += (uint64_t)seq->data[k] + 1;
        ivec_free(seq);
    }
    return NULL;
}

int main(int argc, char **argv) {
    static const tsb_opt_t opts[] = {{"threads", &opt_threads, NULL, "worker threads"},
                                     {"count", &opt_count, NULL, "how many start values"},
                                     {"first", &opt_first, NULL, "first start value"},
                                     {0}};
    tsb_start("collatz-ivec");
    tsb_parse(argc, argv, opts);
    tsb_require(opt_threads >= 1 && opt_threads <= 4096, "1 <= threads <= 4096");
    tsb_require(opt_count >= 1 && opt_first >= 1 && opt_first < (1L << 40), "count, first >= 1");

    worker_t *w = tsb_pages(sizeof(worker_t) * (size_t)opt_threads);
    for (long t = 0; t < opt_threads; t++) w[t].id = t;
    double t0 = tsb_now();
    tsb_run_threads(opt_threads, worker, w, sizeof *w, NULL);
    double elapsed = tsb_now() - t0;

    uint64_t check = 0, expect = 0;
    for (long t = 0; t < opt_threads; t++) {
        if (w[t].bad) tsb_fail("thread %ld: %ld sequences came back wrong", t, w[t].bad);
        check += w[t].check;
        expect += w[t].expect;
    }
    if (check != expect) tsb_fail("check %" PRIu64 " != expected %" PRIu64, check, expect);
    tsb_kv("count", "%ld", opt_count);
    return tsb_ok(elapsed, opt_threads, check);
}
