/* idle-owner: memory freed by another thread while the thread that allocated
 * it waits. Main mallocs --mb MiB in blocks of --min..--max bytes (tagged), a
 * worker checks and frees every block and exits, and main then waits
 * --wait-ms milliseconds without any allocator call, reading its RSS every
 * 10 ms. A producer that waits in pthread_join while its consumers free
 * what it made is this program; so is a thread blocked on a queue.
 *
 * time_s covers the fill and the frees (the allocator's speed), not the
 * wait. Reported: rss_base_kb (before the fill), rss_filled_kb (after it),
 * rss_end_kb (after the wait: what the allocator still holds) and fall_ms
 * (when RSS first came back within a quarter of what the fill added; -1:
 * not within the wait). check = bytes freed, which the arguments determine.
 * The pointer arrays come from mmap, so they are not the allocator's.
 * --keep K: main keeps every K-th block (the worker frees the others), so
 * no page has all its blocks back while main waits; main checks and frees
 * the kept ones after the wait (not timed). check counts the bytes the
 * worker freed. --touch 1 writes every byte of each block (else only its
 * tags: small blocks are resident either way, big ones are not).
 * --churn C: after the fill, main frees C times as many random blocks as it
 * made and allocates a new one (of a new random size) for each, as a
 * program that builds a structure and then replaces parts of it before it
 * waits; its own frees leave free blocks in most of its pages (larson's
 * main thread, before its workers take over its blocks). Not timed.
 */
#include <pthread.h>

#include "tsb.h"

static long opt_mb = 128, opt_min = 16, opt_max = 1000, opt_wait_ms = 1000, opt_keep = 0,
            opt_touch = 0, opt_churn = 0;

static void **ptr;
static uint32_t *size;
static long count;
static uint64_t freed_bytes;
static long bad;

static uint64_t tag_of(long k) {
    return tsb_mix((uint64_t)k + 1);
}

static void *free_all(void *arg) {
    (void)arg;
    for (long k = 0; k < count; k++) {
        if (opt_keep && k % opt_keep == 0) continue; /* main's */
        bad += !tsb_tag_ok(ptr[k], size[k], tag_of(k));
        freed_bytes += size[k];
        free(ptr[k]);
    }
    return NULL;
}

int main(int argc, char **argv) {
    static const tsb_opt_t opts[] = {
        {"mb", &opt_mb, NULL, "MiB to fill (sum of block sizes)"},
        {"min", &opt_min, NULL, "smallest block (>= 8)"},
        {"max", &opt_max, NULL, "largest block"},
        {"wait-ms", &opt_wait_ms, NULL, "how long main waits after the frees"},
        {"keep", &opt_keep, NULL, "main keeps every K-th block (0: none)"},
        {"touch", &opt_touch, NULL, "1: write every byte of each block (else its tags only)"},
        {"churn", &opt_churn, NULL, "main replaces this many times its blocks, at random, first"},
        {0}};
    tsb_start("idle-owner");
    tsb_parse(argc, argv, opts);
    tsb_require(opt_mb >= 1 && opt_mb <= 65536, "1 <= mb <= 65536");
    tsb_require(opt_min >= 8 && opt_max >= opt_min && opt_max < (1L << 31), "8 <= min <= max");
    tsb_require(opt_wait_ms >= 0 && opt_wait_ms <= 600000, "0 <= wait-ms <= 600000");
    tsb_require(opt_keep >= 0, "keep >= 0");
    tsb_require(opt_churn >= 0 && opt_churn <= 100, "0 <= churn <= 100");

    uint64_t target = (uint64_t)opt_mb << 20;
    long cap = (long)(target / (uint64_t)opt_min) + 1;
    ptr = tsb_pages(sizeof(void *) * (size_t)cap);
    size = tsb_pages(sizeof(uint32_t) * (size_t)cap);
    uint64_t rng = 12345, filled = 0;
    long rss_base_kb = tsb_rss_kb();
    double t0 = tsb_now();
    while (filled < target) {
        size_t n = tsb_range(&rng, (size_t)opt_min, (size_t)opt_max);
        void *p = malloc(n);
        if (!p) tsb_fail("malloc(%zu) returned NULL", n);
        if (opt_touch) memset(p, 0x5a, n); /* resident, as a program's data would be */
        tsb_tag(p, n, tag_of(count));
        ptr[count] = p;
        size[count++] = (uint32_t)n;
        filled += n;
    }
    double fill_s = tsb_now() - t0;
    for (long r = 0; r < opt_churn * count; r++) { /* sizes change, the sum hardly */
        long k = (long)tsb_range(&rng, 0, (size_t)count - 1);
        if (!tsb_tag_ok(ptr[k], size[k], tag_of(k))) tsb_fail("block %ld corrupted", k);
        free(ptr[k]);
        filled -= size[k];
        size_t n = tsb_range(&rng, (size_t)opt_min, (size_t)opt_max);
        void *p = malloc(n);
        if (!p) tsb_fail("malloc(%zu) returned NULL", n);
        if (opt_touch) memset(p, 0x5a, n);
        tsb_tag(p, n, tag_of(k));
        ptr[k] = p;
        size[k] = (uint32_t)n;
        filled += n;
    }
    long rss_filled_kb = tsb_rss_kb();
    pthread_t worker;
    double t1 = tsb_now();
    if (pthread_create(&worker, NULL, free_all, NULL)) tsb_fail("pthread_create failed");
    pthread_join(worker, NULL);
    double free_s = tsb_now() - t1;
    if (bad) tsb_fail("%ld blocks corrupted", bad);
    uint64_t kept_bytes = 0;
    for (long k = 0; opt_keep && k < count; k += opt_keep) kept_bytes += size[k];
    if (freed_bytes + kept_bytes != filled)
        tsb_fail("freed %" PRIu64 " of %" PRIu64 " bytes", freed_bytes, filled - kept_bytes);

    /* The wait: no allocator call from here on. */
    long threshold = rss_base_kb + (rss_filled_kb - rss_base_kb) / 4, fall_ms = -1;
    double w0 = tsb_now();
    long rss_end_kb = tsb_rss_kb();
    for (;;) {
        double ms = (tsb_now() - w0) * 1000;
        rss_end_kb = tsb_rss_kb();
        if (fall_ms < 0 && rss_end_kb <= threshold) fall_ms = (long)ms;
        if (ms >= (double)opt_wait_ms) break;
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    for (long k = 0; opt_keep && k < count; k += opt_keep) {
        if (!tsb_tag_ok(ptr[k], size[k], tag_of(k))) tsb_fail("kept block %ld corrupted", k);
        free(ptr[k]);
    }
    tsb_kv("blocks", "%ld", count);
    tsb_kv("fill_s", "%.6f", fill_s);
    tsb_kv("free_s", "%.6f", free_s);
    tsb_kv("rss_base_kb", "%ld", rss_base_kb);
    tsb_kv("rss_filled_kb", "%ld", rss_filled_kb);
    tsb_kv("rss_end_kb", "%ld", rss_end_kb);
    tsb_kv("fall_ms", "%ld", fall_ms);
    return tsb_ok(fill_s + free_s, 2, freed_bytes);
}
