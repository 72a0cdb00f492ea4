/* tsb-measurement: the seeds' thread_test_measurement (seed 001).
 *
 * Workload: --threads threads (4) start together; thread t allocates --blocks
 * blocks (20000) of --min-size..--max-size bytes (128..1024), multiples of 32,
 * drawn from a fixed seed; --min-size 32 --max-size 524288 is the big-block
 * variant, whose blocks the program writes only at their ends. Every 4th
 * block of an odd thread is freed by the even thread before it, "every 4th
 * iteration": at iteration i an even thread frees the next
 * thread's blocks 0, 4, 8 ... <= i that are already allocated; after its own
 * loop it keeps freeing them, waiting for them to be allocated. The timed
 * part is everything from the start barrier until every thread is done.
 * At that point the data segment is read, against the bytes still live.
 *
 * APIs: --api lock: ts_malloc_lock/ts_free_lock; --api nolock:
 * ts_malloc_nolock/ts_free_nolock (both found with dlsym: run under
 * LD_PRELOAD of libtsalloc-bestfit.so, libtsalloc-bestfit-tls.so or
 * libtsalloc-classic.so); --api malloc (default): malloc/free, whichever
 * allocator LD_PRELOAD installs (glibc without).
 *
 * Correctness: each block gets a per-block tag in its first and last 8 bytes
 * when allocated; tags are checked before every free and, after the timed
 * part, in every live block, along with their 16-byte alignment and that no
 * two live blocks overlap. Then every thread frees its live blocks and exits.
 *
 * Output, one line per run (tsbench parses it; keep it stable):
 *   measurement: api=lock threads=4 time_s=0.041200 data_segment_bytes=41943040
 *     live_bytes=40632320 sbrk_growth_bytes=41943040 free_space_bytes=180224
 *     blocks=20000 run=1 check=46091776 malloc_from=/path/libtsalloc-bestfit.so ok
 * (on one line). data_segment_bytes is get_data_segment_size() (dlsym), or
 * "unknown" when no loaded object defines it, free_space_bytes likewise
 * get_data_segment_free_space_size(); live_bytes the requested bytes
 * of the blocks still allocated; sbrk_growth_bytes how far the program break
 * moved since main began; check the requested bytes of all blocks, which
 * depend on the arguments only. On a failure: "measurement: FAILED <why>" and
 * exit status 1; bad arguments: exit status 2. --csv FILE appends one row per
 * run (a header first when the file is empty).
 *
 * The harness's own tables are mapped with mmap, never malloc'ed, so the data
 * segment holds only the workload's blocks.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* dladdr, RTLD_DEFAULT */
#endif
#include <dlfcn.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define MAX_THREADS 256

typedef void *(*malloc_fn)(size_t);
typedef void (*free_fn)(void *);

typedef struct {
    char *ptr;
    uint32_t size;
    uint32_t freed; /* by the previous (even) thread, during the timed part */
} item_t;

typedef struct {
    _Atomic size_t published; /* items[0 .. published) are allocated and tagged */
    _Atomic int waiting;      /* the freeing thread sleeps on `cond` */
    pthread_mutex_t lock;
    pthread_cond_t cond;
    char pad[64];
} progress_t;

static malloc_fn do_malloc;
static free_fn do_free;
static const char *api_name = "malloc";
static long nthreads = 4, nblocks = 20000, nruns = 1;
static uint64_t seed = 650;
static long min_size = 128, max_size = 1024; /* multiples of 32 */
static const char *csv_path;
static char *brk_at_start;

static item_t *items; /* nthreads * nblocks, mmap'ed */
static progress_t *progress;
static pthread_barrier_t start_barrier, done_barrier, cleanup_barrier;
static _Atomic int failed;
static char failure[256];
static int run_index;

static void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void fail(const char *fmt, ...) {
    if (atomic_exchange(&failed, 1)) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(failure, sizeof failure, fmt, ap);
    va_end(ap);
}

static __attribute__((noreturn)) void die(const char *why) {
    fflush(stdout);
    printf("measurement: FAILED %s\n", why);
    fflush(stdout);
    exit(1);
}

static void *pages(size_t bytes) {
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) die("harness mmap failed");
    return p;
}

static uint64_t mix(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static uint32_t block_size(long t, long i) {
    uint64_t steps = (uint64_t)(max_size - min_size) / 32 + 1;
    return (uint32_t)min_size +
           32 * (uint32_t)(mix(seed ^ ((uint64_t)t << 40) ^ (uint64_t)i) % steps);
}

static uint64_t block_tag(long t, long i) {
    return mix(((uint64_t)run_index << 56) ^ ((uint64_t)t << 32) ^ (uint64_t)i) | 1;
}

static inline item_t *item(long t, long i) {
    return &items[t * nblocks + i];
}

static inline void tag(char *p, uint32_t size, uint64_t v) {
    *(volatile uint64_t *)p = v;
    *(volatile uint64_t *)(p + size - 8) = ~v;
}

static inline int tag_ok(const char *p, uint32_t size, uint64_t v) {
    return *(const volatile uint64_t *)p == v && *(const volatile uint64_t *)(p + size - 8) == ~v;
}

/* Publishes item i of thread t (already tagged) and wakes its freer. */
static void publish(long t, long i) {
    progress_t *pr = &progress[t];
    atomic_store(&pr->published, (size_t)i + 1);
    if (atomic_load(&pr->waiting)) {
        pthread_mutex_lock(&pr->lock);
        pthread_cond_broadcast(&pr->cond);
        pthread_mutex_unlock(&pr->lock);
    }
}

/* Waits until thread t has allocated item i. */
static void wait_for(long t, long i) {
    progress_t *pr = &progress[t];
    if (atomic_load(&pr->published) > (size_t)i) return;
    pthread_mutex_lock(&pr->lock);
    atomic_store(&pr->waiting, 1);
    while (atomic_load(&pr->published) <= (size_t)i) pthread_cond_wait(&pr->cond, &pr->lock);
    atomic_store(&pr->waiting, 0);
    pthread_mutex_unlock(&pr->lock);
}

static void free_foreign(long t, long i) {
    item_t *it = item(t, i);
    if (!tag_ok(it->ptr, it->size, block_tag(t, i)))
        fail("block %ld of thread %ld corrupted before its free", i, t);
    do_free(it->ptr);
    it->freed = 1;
}

static void *worker(void *arg) {
    long t = (long)(intptr_t)arg;
    long next = (t + 1) % nthreads;
    int frees = t % 2 == 0 && next != t;
    long cursor = 0; /* the next thread's next block to free (a multiple of 4) */
    pthread_barrier_wait(&start_barrier);
    for (long i = 0; i < nblocks; i++) {
        item_t *it = item(t, i);
        char *p = do_malloc(it->size);
        if (!p || ((uintptr_t)p & 15)) {
            fail("malloc(%u) returned %p", it->size, (void *)p);
            p = NULL;
        } else {
            tag(p, it->size, block_tag(t, i));
        }
        it->ptr = p;
        publish(t, p ? i : nblocks - 1); /* on failure: wake the freer, it finds NULL */
        if (!p) break;
        if (frees && i % 4 == 0) {
            while (cursor <= i && atomic_load_explicit(&progress[next].published,
                                                       memory_order_acquire) > (size_t)cursor) {
                free_foreign(next, cursor);
                cursor += 4;
            }
        }
    }
    if (frees) {
        for (; cursor < nblocks && !atomic_load(&failed); cursor += 4) {
            wait_for(next, cursor);
            if (!item(next, cursor)->ptr) break;
            free_foreign(next, cursor);
        }
    }
    pthread_barrier_wait(&done_barrier);
    pthread_barrier_wait(&cleanup_barrier);
    for (long i = 0; i < nblocks; i++) {
        item_t *it = item(t, i);
        if (it->ptr && !it->freed) do_free(it->ptr);
    }
    return NULL;
}

/* ---- the overlap check: heapsort (no malloc) on block start ---- */

typedef struct {
    uintptr_t start, end;
} range_t;

static void sift(range_t *r, size_t root, size_t n) {
    for (;;) {
        size_t child = 2 * root + 1;
        if (child >= n) return;
        if (child + 1 < n && r[child + 1].start > r[child].start) child++;
        if (r[root].start >= r[child].start) return;
        range_t tmp = r[root];
        r[root] = r[child];
        r[child] = tmp;
        root = child;
    }
}

static void sort_ranges(range_t *r, size_t n) {
    for (size_t i = n / 2; i-- > 0;) sift(r, i, n);
    for (size_t end = n; end-- > 1;) {
        range_t tmp = r[0];
        r[0] = r[end];
        r[end] = tmp;
        sift(r, 0, end);
    }
}

/* Checks the live blocks; returns their requested bytes. */
static size_t check_live(void) {
    size_t n = (size_t)(nthreads * nblocks), count = 0, live = 0;
    range_t *r = pages(n * sizeof *r);
    for (long t = 0; t < nthreads; t++) {
        for (long i = 0; i < nblocks; i++) {
            item_t *it = item(t, i);
            if (!it->ptr || it->freed) continue;
            if (!tag_ok(it->ptr, it->size, block_tag(t, i)))
                fail("block %ld of thread %ld corrupted", i, t);
            r[count].start = (uintptr_t)it->ptr;
            r[count].end = (uintptr_t)it->ptr + it->size;
            count++;
            live += it->size;
        }
    }
    sort_ranges(r, count);
    for (size_t k = 1; k < count; k++)
        if (r[k - 1].end > r[k].start) {
            fail("live blocks %#" PRIxPTR " and %#" PRIxPTR " overlap", r[k - 1].start, r[k].start);
            break;
        }
    munmap(r, n * sizeof *r);
    return live;
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static const char *malloc_from(void) {
    Dl_info info;
    void *sym = dlsym(RTLD_DEFAULT, "malloc");
    if (sym && dladdr(sym, &info) && info.dli_fname) return info.dli_fname;
    return "unknown";
}

static unsigned long (*data_segment)(void), (*free_space)(void);

static void run(int r, FILE *csv) {
    run_index = r;
    size_t check = 0;
    for (long t = 0; t < nthreads; t++) {
        atomic_store(&progress[t].published, 0);
        atomic_store(&progress[t].waiting, 0);
        for (long i = 0; i < nblocks; i++) {
            item_t *it = item(t, i);
            it->ptr = NULL;
            it->size = block_size(t, i);
            it->freed = 0;
            check += it->size;
        }
    }
    pthread_t tid[MAX_THREADS];
    for (long t = 0; t < nthreads; t++)
        if (pthread_create(&tid[t], NULL, worker, (void *)(intptr_t)t) != 0)
            die("pthread_create failed");
    pthread_barrier_wait(&start_barrier);
    double t0 = now();
    pthread_barrier_wait(&done_barrier);
    double elapsed = now() - t0;

    char segment[32] = "unknown", segment_free[32] = "unknown";
    if (data_segment) snprintf(segment, sizeof segment, "%lu", data_segment());
    if (free_space) snprintf(segment_free, sizeof segment_free, "%lu", free_space());
    long growth = (long)((char *)sbrk(0) - brk_at_start);
    size_t live = atomic_load(&failed) ? 0 : check_live();

    pthread_barrier_wait(&cleanup_barrier);
    for (long t = 0; t < nthreads; t++) pthread_join(tid[t], NULL);
    if (atomic_load(&failed)) die(failure);

    printf(
        "measurement: api=%s threads=%ld time_s=%.6f data_segment_bytes=%s live_bytes=%zu "
        "sbrk_growth_bytes=%ld free_space_bytes=%s blocks=%ld run=%d check=%zu malloc_from=%s ok\n",
        api_name, nthreads, elapsed, segment, live, growth, segment_free, nblocks, r, check,
        malloc_from());
    fflush(stdout);
    if (csv) {
        fprintf(csv, "%s,%ld,%ld,%d,%.6f,%s,%zu,%ld\n", api_name, nthreads, nblocks, r, elapsed,
                segment, live, growth);
        fflush(csv);
    }
}

static __attribute__((noreturn)) void usage(int status) {
    fprintf(status ? stderr : stdout,
            "usage: tsb-measurement [--api lock|nolock|malloc] [--threads N] [--blocks N]\n"
            "                       [--runs N] [--csv FILE] [--seed N]\n"
            "                       [--min-size BYTES] [--max-size BYTES]\n"
            "  the seeds' thread_test_measurement; prints one result line per run\n");
    exit(status);
}

static long number(const char *s, long lo, long hi) {
    char *end;
    errno = 0;
    long v = s ? strtol(s, &end, 0) : 0;
    if (!s || errno || end == s || *end || v < lo || v > hi) usage(2);
    return v;
}

int main(int argc, char **argv) {
    brk_at_start = sbrk(0);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h"))
            usage(0);
        else if (!strcmp(a, "--api") && v)
            api_name = v, i++;
        else if (!strcmp(a, "--threads"))
            nthreads = number(v, 1, MAX_THREADS), i++;
        else if (!strcmp(a, "--blocks"))
            nblocks = number(v, 1, 1 << 24), i++;
        else if (!strcmp(a, "--runs"))
            nruns = number(v, 1, 1000000), i++;
        else if (!strcmp(a, "--seed"))
            seed = (uint64_t)number(v, 0, 1L << 62), i++;
        else if (!strcmp(a, "--min-size"))
            min_size = number(v, 16, 1L << 30), i++;
        else if (!strcmp(a, "--max-size"))
            max_size = number(v, 16, 1L << 30), i++;
        else if (!strcmp(a, "--csv") && v)
            csv_path = v, i++;
        else
            usage(2);
    }
    /* Multiples of 32 from min to max; the tags need 16 bytes. */
    if (min_size % 32 || max_size % 32 || max_size < min_size) usage(2);
    const char *want_malloc = NULL, *want_free = NULL;
    if (!strcmp(api_name, "lock"))
        want_malloc = "ts_malloc_lock", want_free = "ts_free_lock";
    else if (!strcmp(api_name, "nolock"))
        want_malloc = "ts_malloc_nolock", want_free = "ts_free_nolock";
    else if (strcmp(api_name, "malloc"))
        usage(2);
    if (want_malloc) {
        do_malloc = (malloc_fn)dlsym(RTLD_DEFAULT, want_malloc);
        do_free = (free_fn)dlsym(RTLD_DEFAULT, want_free);
        if (!do_malloc || !do_free) {
            char why[256];
            snprintf(why, sizeof why,
                     "%s not found: run under LD_PRELOAD=<build>/lib/libtsalloc-%s.so "
                     "(or libtsalloc-classic.so)",
                     want_malloc, !strcmp(api_name, "lock") ? "bestfit" : "bestfit-tls");
            die(why);
        }
    } else {
        do_malloc = malloc;
        do_free = free;
    }
    const char *design = getenv("TSALLOC_EXPECT_DESIGN");
    if (design && *design && !strstr(malloc_from(), "tsalloc")) {
        char why[256];
        snprintf(why, sizeof why, "LD_PRELOAD of tsalloc design %s is not in effect", design);
        die(why);
    }
    data_segment = (unsigned long (*)(void))dlsym(RTLD_DEFAULT, "get_data_segment_size");
    free_space = (unsigned long (*)(void))dlsym(RTLD_DEFAULT, "get_data_segment_free_space_size");

    items = pages((size_t)nthreads * (size_t)nblocks * sizeof *items);
    progress = pages((size_t)nthreads * sizeof *progress);
    for (long t = 0; t < nthreads; t++) {
        pthread_mutex_init(&progress[t].lock, NULL);
        pthread_cond_init(&progress[t].cond, NULL);
    }
    pthread_barrier_init(&start_barrier, NULL, (unsigned)nthreads + 1);
    pthread_barrier_init(&done_barrier, NULL, (unsigned)nthreads + 1);
    pthread_barrier_init(&cleanup_barrier, NULL, (unsigned)nthreads + 1);

    FILE *csv = NULL;
    if (csv_path) {
        csv = fopen(csv_path, "a");
        if (!csv) die("cannot open the CSV file");
        if (ftell(csv) == 0)
            fprintf(csv, "api,threads,blocks,run,time_s,data_segment_bytes,live_bytes,"
                         "sbrk_growth_bytes\n");
    }
    for (int r = 1; r <= nruns; r++) run(r, csv);
    if (csv) fclose(csv);
    return 0;
}
