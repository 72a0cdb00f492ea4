/* Shared helpers for the tsbench workloads (bench/workloads/<name>.c, each
 * built as bin/tsb-<name>): option parsing, a clock, a PRNG, block tagging,
 * heap-free scratch memory, RSS readings and the one result line.
 *
 * Result line contract (tsbench and tests/bench parse it):
 *   "<name>: key=value key=value ... ok"       exit status 0
 *   "<name>: FAILED <why>"                      exit status 1
 * Every ok line carries time_s (the timed part only), threads, check (a value
 * that depends only on the arguments, so every allocator must print the same
 * one), sbrk_growth_bytes (data segment growth since main began) and
 * malloc_from (the object that defines malloc, to prove LD_PRELOAD worked).
 *
 * Invariants: the harness's own tables come from tsb_pages (mmap), never from
 * malloc, so the allocator under test sees only the workload's own calls.
 * Blocks are verified through volatile accesses so the compiler can neither
 * drop the stores nor fold the loads into the values it just wrote.
 */
#ifndef TSB_H
#define TSB_H

#include <dlfcn.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>
#include <fcntl.h>

#define TSB_UNUSED __attribute__((unused))

static const char *tsb_name = "workload";
static void *tsb_brk_start;
static char tsb_line[2048];
static size_t tsb_line_len;

static TSB_UNUSED __attribute__((noreturn, format(printf, 1, 2))) void tsb_fail(const char *fmt,
                                                                                ...) {
    char why[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    fflush(stdout);
    printf("%s: FAILED %s\n", tsb_name, why);
    fflush(stdout);
    exit(1);
}

/* ---- options: "--name value" or "--name=value", all integers or strings ---- */

typedef struct {
    const char *name; /* without the leading "--" */
    long *num;        /* set for an integer option */
    const char **str; /* set for a string option */
    const char *help;
} tsb_opt_t;

static TSB_UNUSED void tsb_usage(const tsb_opt_t *opts, FILE *to) {
    fprintf(to, "usage: tsb-%s [options]\n", tsb_name);
    for (const tsb_opt_t *o = opts; o->name; o++) {
        if (o->num)
            fprintf(to, "  --%-14s %s (default %ld)\n", o->name, o->help, *o->num);
        else
            fprintf(to, "  --%-14s %s (default %s)\n", o->name, o->help, *o->str ? *o->str : "-");
    }
}

static TSB_UNUSED __attribute__((noreturn)) void tsb_bad_arg(const char *arg,
                                                             const tsb_opt_t *opts) {
    fprintf(stderr, "tsb-%s: bad argument '%s'\n", tsb_name, arg);
    tsb_usage(opts, stderr);
    exit(2);
}

/* Parses argv against `opts`; unknown options and bad numbers exit with 2.
 * (No goto past initialisations: the C++ workloads include this too.) */
static TSB_UNUSED void tsb_parse(int argc, char **argv, const tsb_opt_t *opts) {
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (!strcmp(arg, "--help") || !strcmp(arg, "-h")) {
            tsb_usage(opts, stdout);
            exit(0);
        }
        if (strncmp(arg, "--", 2) != 0) tsb_bad_arg(argv[i], opts);
        arg += 2;
        const char *eq = strchr(arg, '=');
        size_t len = eq ? (size_t)(eq - arg) : strlen(arg);
        const tsb_opt_t *o = opts;
        while (o->name && !(strlen(o->name) == len && !strncmp(o->name, arg, len))) o++;
        if (!o->name) tsb_bad_arg(argv[i], opts);
        const char *val = eq ? eq + 1 : (i + 1 < argc ? argv[++i] : NULL);
        if (!val) tsb_bad_arg(argv[i], opts);
        if (o->num) {
            char *end;
            errno = 0;
            long v = strtol(val, &end, 0);
            if (errno || end == val || *end) tsb_bad_arg(argv[i], opts);
            *o->num = v;
        } else {
            *o->str = val;
        }
    }
}

static TSB_UNUSED void tsb_require(int cond, const char *what) {
    if (!cond) {
        fprintf(stderr, "tsb-%s: invalid arguments: %s\n", tsb_name, what);
        exit(2);
    }
}

/* ---- clock, PRNG ---- */

static TSB_UNUSED double tsb_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* splitmix64: seeds; xorshift64*: streams. Deterministic per seed. */
static TSB_UNUSED uint64_t tsb_mix(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}
static TSB_UNUSED uint64_t tsb_rand(uint64_t *s) {
    uint64_t x = *s ? *s : 0x9e3779b97f4a7c15ull;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * 0x2545f4914f6cdd1dull;
}
/* Uniform in [lo, hi] (to within 2^-64 per value): the high half of a
 * 64x64-bit product, not a remainder. A 64-bit division costs tens of cycles,
 * and a workload's loop should spend its time in the allocator. */
static TSB_UNUSED size_t tsb_range(uint64_t *s, size_t lo, size_t hi) {
    unsigned __int128 scaled = (unsigned __int128)tsb_rand(s) * ((uint64_t)(hi - lo) + 1);
    return lo + (size_t)(scaled >> 64);
}

/* ---- scratch memory that does not come from the allocator under test ---- */

static TSB_UNUSED void *tsb_pages(size_t bytes) {
    if (bytes == 0) bytes = 1;
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) tsb_fail("harness mmap of %zu bytes: %s", bytes, strerror(errno));
    return p;
}
static TSB_UNUSED void tsb_pages_free(void *p, size_t bytes) {
    if (p) munmap(p, bytes ? bytes : 1);
}

/* ---- worker threads ---- */

/* Runs n (at most TSB_MAX_THREADS) threads, thread t on
 * fn((char *)args + t * stride), and returns once all have ended. With
 * `start` (a barrier for n + 1 threads), the main thread waits there too, so
 * the workers leave it together. Nothing is mapped here: callers time it. */
#define TSB_MAX_THREADS 4096
static TSB_UNUSED void tsb_run_threads(long n, void *(*fn)(void *), void *args, size_t stride,
                                       pthread_barrier_t *start) {
    static pthread_t tid[TSB_MAX_THREADS];
    if (n > TSB_MAX_THREADS) tsb_fail("at most %d threads", TSB_MAX_THREADS);
    for (long t = 0; t < n; t++)
        if (pthread_create(&tid[t], NULL, fn, (char *)args + (size_t)t * stride))
            tsb_fail("pthread_create failed");
    if (start) pthread_barrier_wait(start);
    for (long t = 0; t < n; t++) pthread_join(tid[t], NULL);
}

/* A worker's own timing of its loop (the main thread may be scheduled only
 * after the workers finish, so it cannot time them itself). */
typedef struct {
    double start, end;
} tsb_span_t;

/* From the first start to the last end of n spans, `stride` bytes apart. */
static TSB_UNUSED double tsb_spans_elapsed(const tsb_span_t *first, long n, size_t stride) {
    double from = first->start, to = first->end;
    for (long t = 1; t < n; t++) {
        const tsb_span_t *s = (const tsb_span_t *)((const char *)first + (size_t)t * stride);
        from = s->start < from ? s->start : from;
        to = s->end > to ? s->end : to;
    }
    return to - from;
}

/* ---- block tags: head word, and tail byte, written and checked volatile ---- */

static inline void tsb_tag(void *p, size_t n, uint64_t tag) {
    volatile unsigned char *b = (volatile unsigned char *)p;
    if (n >= 8)
        *(volatile uint64_t *)p = tag;
    else if (n > 0)
        b[0] = (unsigned char)tag;
    if (n > 8 || (n > 1 && n < 8)) b[n - 1] = (unsigned char)(tag >> 3);
}
/* 1 when the block still holds the tag tsb_tag wrote. */
static inline int tsb_tag_ok(const void *p, size_t n, uint64_t tag) {
    const volatile unsigned char *b = (const volatile unsigned char *)p;
    if (n >= 8 && *(const volatile uint64_t *)p != tag) return 0;
    if (n > 0 && n < 8 && b[0] != (unsigned char)tag) return 0;
    if ((n > 8 || (n > 1 && n < 8)) && b[n - 1] != (unsigned char)(tag >> 3)) return 0;
    return 1;
}

/* ---- memory readings ---- */

/* Current resident set in KiB, from /proc/self/statm (no stdio, no malloc). */
static TSB_UNUSED long tsb_rss_kb(void) {
    char buf[128];
    int fd = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return -1;
    buf[n] = 0;
    char *p = buf;
    strtol(p, &p, 10); /* size */
    long resident = strtol(p, NULL, 10);
    return resident * (sysconf(_SC_PAGESIZE) / 1024);
}
/* Peak resident set of this process in KiB. */
static TSB_UNUSED long tsb_peak_rss_kb(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss;
}

/* ---- start and result line ---- */

/* The object that defines malloc, as the dynamic linker resolved it. */
static TSB_UNUSED const char *tsb_malloc_from(void) {
    Dl_info info;
    void *sym = dlsym(RTLD_DEFAULT, "malloc");
    if (sym && dladdr(sym, &info) && info.dli_fname) return info.dli_fname;
    return "unknown";
}

/* Call first in main. Under the test harness (TSALLOC_EXPECT_DESIGN set by
 * ts_preload_test) malloc must come from a tsalloc library, or the test
 * would silently measure glibc. */
static TSB_UNUSED void tsb_start(const char *name) {
    tsb_name = name;
    tsb_brk_start = sbrk(0);
    const char *design = getenv("TSALLOC_EXPECT_DESIGN");
    if (design && *design && !strstr(tsb_malloc_from(), "tsalloc"))
        tsb_fail("LD_PRELOAD of tsalloc design %s is not in effect (malloc from %s)", design,
                 tsb_malloc_from());
    tsb_line_len = (size_t)snprintf(tsb_line, sizeof tsb_line, "%s:", name);
}

static TSB_UNUSED __attribute__((format(printf, 2, 3))) void tsb_kv(const char *key,
                                                                    const char *fmt, ...) {
    if (tsb_line_len >= sizeof tsb_line) return;
    tsb_line_len +=
        (size_t)snprintf(tsb_line + tsb_line_len, sizeof tsb_line - tsb_line_len, " %s=", key);
    if (tsb_line_len >= sizeof tsb_line) return;
    va_list ap;
    va_start(ap, fmt);
    tsb_line_len +=
        (size_t)vsnprintf(tsb_line + tsb_line_len, sizeof tsb_line - tsb_line_len, fmt, ap);
    va_end(ap);
}

/* Prints the ok line with the common keys; returns main's exit status. */
static TSB_UNUSED int tsb_ok(double time_s, long threads, uint64_t check) {
    long growth = (long)((char *)sbrk(0) - (char *)tsb_brk_start);
    tsb_kv("threads", "%ld", threads);
    tsb_kv("time_s", "%.6f", time_s);
    tsb_kv("check", "%" PRIu64, check);
    tsb_kv("sbrk_growth_bytes", "%ld", growth);
    tsb_kv("malloc_from", "%s", tsb_malloc_from());
    printf("%s ok\n", tsb_line);
    fflush(stdout);
    return 0;
}

#endif
