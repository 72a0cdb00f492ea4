/* false-sharing: threads write small objects they allocated, many times
 * each. If an allocator hands objects of different threads out of one cache
 * line, every write bounces the line between cores and the phase takes many
 * times longer (Hoard's cache-thrash and cache-scratch tests).
 *
 * active:  each thread mallocs its own object, writes it `writes` times,
 *          frees it; `rounds` times.
 * passive: the main thread mallocs one object per thread back to back and
 *          hands them out; each thread frees the one it got first, then runs
 *          the active loop (an allocator that reuses the freed neighbours for
 *          the wrong threads shares lines).
 *
 * Writes go through a volatile pointer and are read back: each round's final
 * value must equal `writes`. check = threads * rounds * writes * 2.
 */
#include <pthread.h>

#include "tsb.h"

static long opt_threads = 2, opt_rounds = 800, opt_writes = 50000, opt_size = 8;
static pthread_barrier_t phase_line;
static void **handed; /* passive: the object main allocated for each thread */

typedef struct {
    long id;
    uint64_t sum[2];
    tsb_span_t phase[2]; /* each phase's loop */
} worker_t;

static uint64_t thrash(void) {
    uint64_t sum = 0;
    for (long r = 0; r < opt_rounds; r++) {
        volatile uint64_t *p = malloc((size_t)opt_size);
        if (!p) tsb_fail("malloc(%ld) returned NULL", opt_size);
        *p = 0;
        for (long w = 0; w < opt_writes; w++) *p = *p + 1;
        sum += *p;
        free((void *)p);
    }
    return sum;
}

static void *worker(void *arg) {
    worker_t *w = arg;
    pthread_barrier_wait(&phase_line); /* active */
    w->phase[0].start = tsb_now();
    w->sum[0] = thrash();
    w->phase[0].end = tsb_now();
    pthread_barrier_wait(&phase_line); /* active done */
    pthread_barrier_wait(&phase_line); /* passive: objects handed out */
    w->phase[1].start = tsb_now();
    free(handed[w->id]);
    w->sum[1] = thrash();
    w->phase[1].end = tsb_now();
    pthread_barrier_wait(&phase_line); /* passive done */
    return NULL;
}

int main(int argc, char **argv) {
    static const tsb_opt_t opts[] = {
        {"threads", &opt_threads, NULL, "writer threads (one per core shows it best)"},
        {"rounds", &opt_rounds, NULL, "objects each thread allocates per phase"},
        {"writes", &opt_writes, NULL, "writes to each object"},
        {"size", &opt_size, NULL, "object size in bytes (>= 8)"},
        {0}};
    tsb_start("false-sharing");
    tsb_parse(argc, argv, opts);
    tsb_require(opt_threads >= 1 && opt_threads <= 4096, "1 <= threads <= 4096");
    tsb_require(opt_rounds >= 1 && opt_writes >= 1 && opt_size >= 8,
                "rounds, writes >= 1, size >= 8");

    worker_t *w = tsb_pages(sizeof(worker_t) * (size_t)opt_threads);
    pthread_t *tid = tsb_pages(sizeof(pthread_t) * (size_t)opt_threads);
    handed = tsb_pages(sizeof(void *) * (size_t)opt_threads);
    pthread_barrier_init(&phase_line, NULL, (unsigned)opt_threads + 1);
    for (long t = 0; t < opt_threads; t++) {
        w[t].id = t;
        if (pthread_create(&tid[t], NULL, worker, &w[t])) tsb_fail("pthread_create failed");
    }
    pthread_barrier_wait(&phase_line);
    pthread_barrier_wait(&phase_line);
    for (long t = 0; t < opt_threads; t++) {
        handed[t] = malloc((size_t)opt_size);
        if (!handed[t]) tsb_fail("malloc(%ld) returned NULL", opt_size);
    }
    pthread_barrier_wait(&phase_line);
    pthread_barrier_wait(&phase_line);
    for (long t = 0; t < opt_threads; t++) pthread_join(tid[t], NULL);
    /* Each phase runs from its first thread's start to its last one's end. */
    double phase_s[2];
    for (int phase = 0; phase < 2; phase++)
        phase_s[phase] = tsb_spans_elapsed(&w[0].phase[phase], opt_threads, sizeof *w);

    uint64_t check = 0, expect = (uint64_t)opt_rounds * (uint64_t)opt_writes;
    for (long t = 0; t < opt_threads; t++) {
        for (int phase = 0; phase < 2; phase++)
            if (w[t].sum[phase] != expect)
                tsb_fail("thread %ld %s phase: counted %" PRIu64 " writes, expected %" PRIu64, t,
                         phase ? "passive" : "active", w[t].sum[phase], expect);
        check += w[t].sum[0] + w[t].sum[1];
    }
    tsb_kv("active_s", "%.6f", phase_s[0]);
    tsb_kv("passive_s", "%.6f", phase_s[1]);
    return tsb_ok(phase_s[0] + phase_s[1], opt_threads, check);
}
