/* exchange: an mstress-like mix. In each of R rounds T threads start afresh;
 * each allocates N objects (mostly powers of two, 16 B - 4 KiB; 1% large,
 * 64 KiB - 1 MiB; 0.1% huge, 4-16 MiB; 5% grown to their size by realloc
 * step by step), writes them and swaps each into a random slot of a shared
 * array with an atomic exchange, freeing what it took out. Half the objects
 * go to the `keep` array, whose slots outlive the rounds (a later round's
 * thread frees them), half to the small `pass` array, emptied within a few
 * objects. So nearly every block is freed by a thread other than the one
 * that made it, most of them after that thread has exited.
 *
 * A block carries its id and size in its first two words and a pattern
 * derived from the id in the rest (every word up to 64 KiB, one word per
 * 4 KiB page above); the header, last word and a middle word are checked
 * before every free, the whole written part after every realloc step.
 * Each thread's allocations come from the stream of (round, thread), so the
 * bytes allocated and the XOR of the ids are functions of the arguments;
 * the frees must give back the same two figures (check is the bytes).
 */
#include <pthread.h>
#include <stdatomic.h>

#include "tsb.h"

static long opt_threads = 4, opt_rounds = 20, opt_objects = 2000, opt_keep = 2000, opt_pass = 64,
            opt_large_ppm = 10000, opt_huge_ppm = 1000, opt_grow_pct = 5;

#define DENSE_LIMIT 65536 /* blocks up to this size get every word written */
#define PAGE_WORDS  512   /* one word per 4 KiB page above it */

typedef struct {
    _Alignas(64) long id;
    long round;
    uint64_t rng;
    uint64_t bytes_alloc, ids_alloc, bytes_freed, ids_freed;
    long bad, reallocs;
} worker_t;

static _Atomic(uint64_t *) *keep_slots, *pass_slots;
static worker_t *workers;

static inline uint64_t word_at(uint64_t id, size_t i) {
    return id ^ ((uint64_t)i * 0x9e3779b97f4a7c15ull);
}

/* Writes the pattern into words [from, n/8) of a block of n bytes (words 0
 * and 1 are the header). */
static void write_words(uint64_t *w, size_t n, uint64_t id, size_t from) {
    volatile uint64_t *v = w;
    size_t words = n / 8;
    if (from < 2) from = 2;
    if (words <= 2) return;
    if (n > DENSE_LIMIT) {
        size_t first = (from + PAGE_WORDS - 1) / PAGE_WORDS * PAGE_WORDS;
        for (size_t i = first; i < words; i += PAGE_WORDS) v[i] = word_at(id, i);
        v[words - 1] = word_at(id, words - 1);
    } else {
        for (size_t i = from; i < words; i++) v[i] = word_at(id, i);
    }
}

static int word_ok(const uint64_t *w, uint64_t id, size_t i) {
    return ((const volatile uint64_t *)w)[i] == word_at(id, i);
}

/* Sizes: huge, large, else a power of two 16 B .. 4 KiB. */
static size_t pick_size(uint64_t *rng) {
    size_t r = tsb_range(rng, 0, 999999);
    if (r < (size_t)opt_huge_ppm) return tsb_range(rng, 4u << 20, 16u << 20) & ~(size_t)7;
    if (r < (size_t)(opt_huge_ppm + opt_large_ppm))
        return tsb_range(rng, 64u << 10, 1u << 20) & ~(size_t)7;
    return (size_t)16 << tsb_range(rng, 0, 8);
}

static uint64_t *make_block(worker_t *me, uint64_t id, size_t n) {
    uint64_t *w;
    if (n <= 4096 && tsb_range(&me->rng, 0, 99) < (size_t)opt_grow_pct) {
        /* Grown step by step: each realloc must keep what was written. */
        size_t have = 16;
        w = malloc(have);
        if (!w) tsb_fail("malloc(16) returned NULL");
        w[0] = id;
        write_words(w, have, id, 1);
        while (have < n) {
            size_t next = have + have / 2 + 8;
            next = next > n ? n : next & ~(size_t)7;
            uint64_t *g = realloc(w, next);
            if (!g) tsb_fail("realloc(%zu) returned NULL", next);
            for (size_t i = 2; i < have / 8; i++)
                if (!word_ok(g, id, i)) {
                    me->bad++;
                    break;
                }
            if (g[0] != id) me->bad++;
            write_words(g, next, id, have / 8);
            w = g;
            have = next;
            me->reallocs++;
        }
    } else {
        w = malloc(n);
        if (!w) tsb_fail("malloc(%zu) returned NULL", n);
        write_words(w, n, id, 2);
    }
    ((volatile uint64_t *)w)[0] = id;
    ((volatile uint64_t *)w)[1] = (uint64_t)n;
    return w;
}

/* 1 when the header is sane and the last and a middle word hold the pattern. */
static int block_ok(const uint64_t *w, uint64_t id, size_t n) {
    size_t words = n / 8;
    if (n < 16 || n > (16u << 20) || n % 8) return 0;
    if (words <= 2) return 1;
    size_t mid = n > DENSE_LIMIT ? words / PAGE_WORDS / 2 * PAGE_WORDS : 2 + (words - 2) / 2;
    return word_ok(w, id, words - 1) && word_ok(w, id, mid);
}

static void drop_block(worker_t *me, uint64_t *w) {
    if (!w) return;
    uint64_t id = ((volatile uint64_t *)w)[0];
    size_t n = (size_t)((volatile uint64_t *)w)[1];
    if (!block_ok(w, id, n)) {
        me->bad++;
        return; /* a damaged block is not handed to free */
    }
    me->bytes_freed += n;
    me->ids_freed ^= id;
    free(w);
}

static void *worker(void *arg) {
    worker_t *me = arg;
    for (long k = 0; k < opt_objects; k++) {
        uint64_t id = tsb_mix(((uint64_t)me->round << 40) ^ ((uint64_t)me->id << 24) ^ (uint64_t)k);
        size_t n = pick_size(&me->rng);
        uint64_t *w = make_block(me, id, n);
        me->bytes_alloc += n;
        me->ids_alloc ^= id;
        int keep = tsb_range(&me->rng, 0, 1) == 0;
        _Atomic(uint64_t *) *slots = keep ? keep_slots : pass_slots;
        size_t slot = tsb_range(&me->rng, 0, (size_t)(keep ? opt_keep : opt_pass) - 1);
        drop_block(me, atomic_exchange_explicit(&slots[slot], w, memory_order_acq_rel));
    }
    return NULL;
}

int main(int argc, char **argv) {
    static const tsb_opt_t opts[] = {
        {"threads", &opt_threads, NULL, "threads per round"},
        {"rounds", &opt_rounds, NULL, "rounds; each starts fresh threads"},
        {"objects", &opt_objects, NULL, "objects each thread allocates per round"},
        {"keep", &opt_keep, NULL, "slots of the long-lived array (kept across rounds)"},
        {"pass", &opt_pass, NULL, "slots of the short-lived array"},
        {"large-ppm", &opt_large_ppm, NULL, "objects of 64 KiB - 1 MiB, per million"},
        {"huge-ppm", &opt_huge_ppm, NULL, "objects of 4-16 MiB, per million"},
        {"grow-pct", &opt_grow_pct, NULL, "percent of small objects grown by realloc"},
        {0}};
    tsb_start("exchange");
    tsb_parse(argc, argv, opts);
    tsb_require(opt_threads >= 1 && opt_threads <= TSB_MAX_THREADS, "1 <= threads <= 4096");
    tsb_require(opt_rounds >= 1 && opt_objects >= 0, "rounds >= 1, objects >= 0");
    tsb_require(opt_keep >= 1 && opt_pass >= 1 && opt_keep < (1L << 24) && opt_pass < (1L << 24),
                "1 <= keep, pass < 2^24");
    tsb_require(opt_large_ppm >= 0 && opt_huge_ppm >= 0 && opt_large_ppm + opt_huge_ppm <= 1000000,
                "0 <= large-ppm + huge-ppm <= 1000000");
    tsb_require(opt_grow_pct >= 0 && opt_grow_pct <= 100, "0 <= grow-pct <= 100");

    keep_slots = tsb_pages(sizeof *keep_slots * (size_t)opt_keep);
    pass_slots = tsb_pages(sizeof *pass_slots * (size_t)opt_pass);
    workers = tsb_pages(sizeof *workers * (size_t)opt_threads);
    uint64_t bytes_alloc = 0, ids_alloc = 0, bytes_freed = 0, ids_freed = 0;
    long bad = 0, reallocs = 0;
    double t0 = tsb_now();
    for (long r = 0; r < opt_rounds; r++) {
        for (long t = 0; t < opt_threads; t++) {
            worker_t *w = &workers[t];
            memset(w, 0, sizeof *w);
            w->id = t;
            w->round = r;
            w->rng = tsb_mix(((uint64_t)r << 32) + (uint64_t)t + 1);
        }
        tsb_run_threads(opt_threads, worker, workers, sizeof *workers, NULL);
        for (long t = 0; t < opt_threads; t++) {
            worker_t *w = &workers[t];
            bytes_alloc += w->bytes_alloc;
            ids_alloc ^= w->ids_alloc;
            bytes_freed += w->bytes_freed;
            ids_freed ^= w->ids_freed;
            bad += w->bad;
            reallocs += w->reallocs;
        }
    }
    /* What is still in the arrays goes last, from the main thread. */
    worker_t *last = &workers[0];
    memset(last, 0, sizeof *last);
    for (long k = 0; k < opt_keep; k++) drop_block(last, atomic_load(&keep_slots[k]));
    for (long k = 0; k < opt_pass; k++) drop_block(last, atomic_load(&pass_slots[k]));
    double elapsed = tsb_now() - t0;
    bytes_freed += last->bytes_freed;
    ids_freed ^= last->ids_freed;
    bad += last->bad;
    if (bad) tsb_fail("%ld blocks corrupted", bad);
    if (bytes_freed != bytes_alloc || ids_freed != ids_alloc)
        tsb_fail("freed %" PRIu64 " bytes (ids %016" PRIx64 ") of %" PRIu64
                 " allocated (ids %016" PRIx64 ")",
                 bytes_freed, ids_freed, bytes_alloc, ids_alloc);
    tsb_kv("rounds", "%ld", opt_rounds);
    tsb_kv("objects", "%ld", opt_rounds * opt_threads * opt_objects);
    tsb_kv("reallocs", "%ld", reallocs);
    tsb_kv("peak_rss_kb", "%ld", tsb_peak_rss_kb());
    return tsb_ok(elapsed, opt_threads, bytes_alloc);
}
