/* churn: thread churn, threads that allocate, leave blocks behind and exit.
 * W waves of T short-lived threads; thread i of a wave frees the blocks that
 * thread i of the wave before left behind (so its frees land in the pages of
 * a thread that has exited), mallocs B blocks, frees all but `keep` percent
 * of them and exits. An allocator pays here for setting up and tearing down
 * a thread's state, and for blocks whose owner is gone; one that cannot take
 * a dead thread's memory back grows with every wave (rss_half_kb, taken
 * after half the waves, against rss_end_kb; --max-growth-kb N fails the run
 * when the second half grew RSS by more than N KiB).
 *
 * Each slot carries its own random stream, so check (bytes freed) is a
 * function of the arguments. Every block's tag is checked before its free.
 */
#include <pthread.h>

#include "tsb.h"

static long opt_threads = 4, opt_waves = 300, opt_blocks = 1000, opt_keep = 25, opt_min = 8,
            opt_max = 1000, opt_max_growth_kb = -1;

/* A cache line each: every worker updates its slot's counters per block. */
typedef struct {
    _Alignas(64) void **ptr;
    uint32_t *size;
    uint64_t *tag;
    long left; /* blocks at the front of ptr[] left by the slot's last thread */
    uint64_t rng;
    uint64_t generation;
    uint64_t bytes_freed;
    long bad;
    long id;
} slot_t;

static slot_t *slots;

static void release(slot_t *s, long k) {
    if (!tsb_tag_ok(s->ptr[k], s->size[k], s->tag[k])) s->bad++;
    s->bytes_freed += s->size[k];
    free(s->ptr[k]);
}

static void swap_blocks(slot_t *s, long a, long b) {
    void *p = s->ptr[a];
    s->ptr[a] = s->ptr[b];
    s->ptr[b] = p;
    uint32_t n = s->size[a];
    s->size[a] = s->size[b];
    s->size[b] = n;
    uint64_t t = s->tag[a];
    s->tag[a] = s->tag[b];
    s->tag[b] = t;
}

static void *worker(void *arg) {
    slot_t *s = arg;
    for (long k = 0; k < s->left; k++) release(s, k);
    for (long k = 0; k < opt_blocks; k++) {
        size_t n = tsb_range(&s->rng, (size_t)opt_min, (size_t)opt_max);
        void *p = malloc(n);
        if (!p) tsb_fail("malloc(%zu) returned NULL", n);
        s->generation++;
        s->tag[k] = tsb_mix(s->generation ^ ((uint64_t)s->id << 40));
        tsb_tag(p, n, s->tag[k]);
        s->ptr[k] = p;
        s->size[k] = (uint32_t)n;
    }
    /* A random `keep` percent moves to the front and stays; the rest goes. */
    long keep = opt_blocks * opt_keep / 100;
    for (long k = 0; k < keep; k++)
        swap_blocks(s, k, k + (long)tsb_range(&s->rng, 0, (size_t)(opt_blocks - k - 1)));
    for (long k = keep; k < opt_blocks; k++) release(s, k);
    s->left = keep;
    return NULL;
}

int main(int argc, char **argv) {
    static const tsb_opt_t opts[] = {
        {"threads", &opt_threads, NULL, "threads alive at once (one per slot)"},
        {"waves", &opt_waves, NULL, "waves of fresh threads"},
        {"blocks", &opt_blocks, NULL, "blocks each thread mallocs"},
        {"keep", &opt_keep, NULL, "percent of them left for the next wave"},
        {"min", &opt_min, NULL, "smallest block (>= 8)"},
        {"max", &opt_max, NULL, "largest block"},
        {"max-growth-kb", &opt_max_growth_kb, NULL,
         "fail when RSS grew more than this over the second half (-1: no limit)"},
        {0}};
    tsb_start("churn");
    tsb_parse(argc, argv, opts);
    tsb_require(opt_threads >= 1 && opt_threads <= 4096, "1 <= threads <= 4096");
    tsb_require(opt_waves >= 1 && opt_blocks >= 1 && opt_blocks < (1L << 24),
                "waves >= 1, 1 <= blocks < 2^24");
    tsb_require(opt_keep >= 0 && opt_keep <= 100, "0 <= keep <= 100");
    tsb_require(opt_min >= 8 && opt_max >= opt_min && opt_max < (1L << 31), "8 <= min <= max");

    slots = tsb_pages(sizeof(slot_t) * (size_t)opt_threads);
    for (long t = 0; t < opt_threads; t++) {
        slot_t *s = &slots[t];
        s->id = t;
        s->rng = tsb_mix((uint64_t)t + 1);
        s->ptr = tsb_pages(sizeof(void *) * (size_t)opt_blocks);
        s->size = tsb_pages(sizeof(uint32_t) * (size_t)opt_blocks);
        s->tag = tsb_pages(sizeof(uint64_t) * (size_t)opt_blocks);
    }
    long rss_half_kb = 0;
    double t0 = tsb_now();
    for (long w = 0; w < opt_waves; w++) {
        tsb_run_threads(opt_threads, worker, slots, sizeof *slots, NULL);
        if (w == (opt_waves - 1) / 2) rss_half_kb = tsb_rss_kb(); /* half the waves, or one more */
    }
    long rss_end_kb = tsb_rss_kb(); /* with the last wave's blocks still out, as at half */
    uint64_t check = 0;
    for (long t = 0; t < opt_threads; t++) {
        slot_t *s = &slots[t];
        for (long k = 0; k < s->left; k++) release(s, k);
        if (s->bad) tsb_fail("slot %ld: %ld blocks corrupted", t, s->bad);
        check += s->bytes_freed;
    }
    double elapsed = tsb_now() - t0;
    if (opt_max_growth_kb >= 0 && rss_half_kb > 0 && rss_end_kb - rss_half_kb > opt_max_growth_kb)
        tsb_fail("RSS grew by %ld KiB over the second half of the waves (%ld -> %ld KiB)",
                 rss_end_kb - rss_half_kb, rss_half_kb, rss_end_kb);
    tsb_kv("threads_started", "%ld", opt_waves * opt_threads);
    tsb_kv("rss_half_kb", "%ld", rss_half_kb);
    tsb_kv("rss_end_kb", "%ld", rss_end_kb);
    return tsb_ok(elapsed, opt_threads, check);
}
