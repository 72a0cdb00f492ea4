/* collatz-list: seed 004's "list" benchmark. Like collatz-ivec, but the
 * values seen are kept in a singly linked list of 16-byte cells: at every
 * step the whole list is copied cell by cell with the new value consed on the
 * front, and the old list freed cell by cell. Almost all traffic is one small
 * size class, allocated and freed in long runs.
 *
 * Verification: each final list, read from the front, must be the sequence
 * backwards (recomputed without the allocator). check = sum over sequences of
 * (length + sum of values), a function of the arguments only.
 */
#include <pthread.h>

#include "tsb.h"

static long opt_threads = 4, opt_count = 3500, opt_first = 1;

typedef struct cell {
    long value;
    struct cell *next;
} cell_t;

static cell_t *cons(long value, cell_t *next) {
    cell_t *c = malloc(sizeof *c);
    if (!c) tsb_fail("malloc(cell) returned NULL");
    c->value = value;
    c->next = next;
    return c;
}

/* Copies the list in order (tail pointer, no recursion). */
static cell_t *list_copy(const cell_t *src) {
    cell_t *head = NULL, **tail = &head;
    for (; src; src = src->next) {
        *tail = cons(src->value, NULL);
        tail = &(*tail)->next;
    }
    return head;
}

static void list_free(cell_t *c) {
    while (c) {
        cell_t *next = c->next;
        free(c);
        c = next;
    }
}

static long collatz_next(long x) {
    return (x % 2) ? 3 * x + 1 : x / 2;
}

typedef struct {
    long id;
    uint64_t check, expect;
    long bad;
} worker_t;

/* Room for the longest sequence recomputed during verification. */
#define MAX_STEPS 4096

static void *worker(void *arg) {
    worker_t *w = arg;
    long *steps = tsb_pages(sizeof(long) * MAX_STEPS);
    for (long v = opt_first + w->id; v < opt_first + opt_count; v += opt_threads) {
        cell_t *seq = NULL;
        for (long x = v;; x = collatz_next(x)) {
            cell_t *next = cons(x, list_copy(seq));
            list_free(seq);
            seq = next;
            if (x == 1) break;
        }
        long n = 0;
        for (long x = v;; x = collatz_next(x)) {
            if (n == MAX_STEPS) tsb_fail("sequence of %ld longer than %d", v, MAX_STEPS);
            steps[n++] = x;
            w->expect += (uint64_t)x + 1;
            if (x == 1) break;
        }
        const volatile cell_t *c = seq;
        for (long i = n - 1; i >= 0; i--, c = c->next) {
            if (!c || c->value != steps[i]) {
                w->bad++;
                break;
            }
            w->check += (uint64_t)c->value + 1;
        }
        list_free(seq);
    }
    tsb_pages_free(steps, sizeof(long) * MAX_STEPS);
    return NULL;
}

int main(int argc, char **argv) {
    static const tsb_opt_t opts[] = {{"threads", &opt_threads, NULL, "worker threads"},
                                     {"count", &opt_count, NULL, "how many start values"},
                                     {"first", &opt_first, NULL, "first start value"},
                                     {0}};
    tsb_start("collatz-list");
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
        if (w[t].bad) tsb_fail("thread %ld: %ld lists came back wrong", t, w[t].bad);
        check += w[t].check;
        expect += w[t].expect;
    }
    if (check != expect) tsb_fail("check %" PRIu64 " != expected %" PRIu64, check, expect);
    tsb_kv("count", "%ld", opt_count);
    return tsb_ok(elapsed, opt_threads, check);
}
