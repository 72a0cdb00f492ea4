/* Out of memory: when the OS refuses (the OS layer's failure hook), every
 * allocation path returns NULL with errno = ENOMEM, nothing crashes, live
 * blocks stay intact, and once the OS gives memory again everything works.
 */
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "check.h"
#include "core/internal.h"
#include "os/os.h"
#include "tsalloc.h"

#define MB   ((size_t)1 << 20)
#define MAXB 200000
static void *blocks[MAXB];
static size_t nb;

static pthread_barrier_t ready, go;
static void *thread_first_malloc(void *arg) {
    (void)arg;
    pthread_barrier_wait(&ready);
    pthread_barrier_wait(&go); /* the OS refuses from here on */
    errno = 0;
    void *p = malloc(100);
    return p ? p : (void *)(intptr_t)(errno == ENOMEM ? 1 : 2);
}

/* realloc of a 3 MiB block (0x3c throughout) to 64 MiB with the next
 * `refusals` mremaps refused: it succeeds, keeps the contents, and moves the
 * pages with `remaps` successful mremaps (0: it copied). */
static unsigned char *grow_refused(unsigned char *p, long refusals, size_t remaps) {
    long failures = _ts_os_test_failures();
    size_t remaps_before = atomic_load(&_ts_stats.large_remaps);
    _ts_os_test_fail(TS_OS_FAIL_REMAP, 0, refusals);
    unsigned char *q = realloc(p, 64 * MB);
    CHECK_EQ(_ts_os_test_failures() - failures, refusals);
    CHECK_EQ(atomic_load(&_ts_stats.large_remaps) - remaps_before, remaps);
    CHECK(q != NULL && malloc_usable_size(q) >= 64 * MB);
    for (size_t i = 0; i < 3 * MB; i += 1000) CHECK(q[i] == 0x3c);
    return q;
}

/* Pages whose purge the OS refuses (madvise fails on locked memory) stay
 * dirty and counted resident, and are purged once it agrees again, without
 * malloc_trim (before, they counted as purged and stayed resident for good). */
static void purge_refused(void) {
    enum { N = 16384 };
    static void *b[N];
    for (int i = 0; i < N; i++) CHECK((b[i] = malloc(1000)) != NULL);
    /* One block in 1,024 stays: its segment stays in use (a wholly free one
     * goes to the segment cache instead), its other pages become free. */
    for (int i = 0; i < N; i++)
        if (i % 1024) free(b[i]);
    _ts_os_test_fail(TS_OS_FAIL_PURGE, 0, -1);
    long failures = _ts_os_test_failures();
    malloc_trim(0);
    size_t dirty = atomic_load(&_ts_stats.dirty);
    size_t purged = atomic_load(&_ts_stats.purged);
    CHECK_MSG(_ts_os_test_failures() > failures, "no purge was tried");
    /* 18.6 MiB stay dirty (measured), over 2x the 8 MiB asked for; a purge
     * counted as done although refused leaves 0. */
    CHECK_MSG(dirty >= 8 * MB, "%zu KB free resident after refused purges", dirty >> 10);
    _ts_os_test_fail(0, 0, 0);
    /* A pass as the helper's would come, well after the retry is due. */
    (void)_ts_purge_run(_ts_os_now_ns() + ((uint64_t)60 << 30), false);
    size_t after = atomic_load(&_ts_stats.dirty);
    /* 0 measured: every refused run is retried; without the retry the 18.6
     * MiB above stay. */
    CHECK_MSG(after < 2 * MB, "%zu KB still free resident once the OS agreed", after >> 10);
    CHECK(atomic_load(&_ts_stats.purged) - purged >= dirty - after);
    for (int i = 0; i < N; i += 1024) free(b[i]);
    printf("refused purges: %zu KB kept dirty, then given back\n", dirty >> 10);
}

/* Wholly free segments whose purge the OS refuses, laid out anew for
 * medium pages: THREADS threads take a 32 KiB block each (a segment each,
 * from the cache). The old layout's pages stay counted as resident and go
 * back once the OS agrees (before, they counted as given back and stayed
 * resident for as long as the segments were in use: 30 MB here). */
enum { FORMAT_THREADS = 8 };
static pthread_barrier_t format_taken, format_done;
static void *take_medium(void *arg) {
    (void)arg;
    void *p = malloc(32768);
    CHECK(p != NULL);
    pthread_barrier_wait(&format_taken);
    pthread_barrier_wait(&format_done);
    free(p);
    return NULL;
}
static void format_refused(void) {
    enum { N = 40000 };
    static void *b[N];
    pthread_t t[FORMAT_THREADS];
    malloc_trim(0);
    for (int i = 0; i < N; i++) CHECK((b[i] = malloc(1000)) != NULL);
    _ts_os_test_fail(TS_OS_FAIL_PURGE, 0, -1);
    for (int i = 0; i < N; i++) free(b[i]); /* wholly free small segments: cached */
    pthread_barrier_init(&format_taken, NULL, FORMAT_THREADS + 1);
    pthread_barrier_init(&format_done, NULL, FORMAT_THREADS + 1);
    for (int i = 0; i < FORMAT_THREADS; i++)
        CHECK(pthread_create(&t[i], NULL, take_medium, NULL) == 0);
    pthread_barrier_wait(&format_taken);
    size_t rss = ts_rss_bytes();
    _ts_os_test_fail(0, 0, 0);
    (void)_ts_purge_run(_ts_os_now_ns() + ((uint64_t)60 << 30), false);
    size_t after = atomic_load(&_ts_stats.dirty), rss_after = ts_rss_bytes();
    pthread_barrier_wait(&format_done);
    for (int i = 0; i < FORMAT_THREADS; i++) CHECK(pthread_join(t[i], NULL) == 0);
    /* Dirty falls to 0 and RSS to 6.3 MiB (measured); 16 MiB is 2.5x that and
     * far below the 42 MiB kept while purges are refused. */
    CHECK_MSG(after < 2 * MB, "%zu KB still free resident once the OS agreed", after >> 10);
    CHECK_MSG(rss_after < 16 * MB, "RSS %zu KB once the OS agreed, %zu KB before", rss_after >> 10,
              rss >> 10);
    printf("refused purges of segments laid out anew: RSS %zu -> %zu KB\n", rss >> 10,
           rss_after >> 10);
}

/* With a purge delay of 0, pages freed while the OS refuses their purge: a
 * retry is due a look period later, so the frees must not wake the helper
 * for a pass each (they did: thousands of passes a second). */
static void refused_at_once(void) {
    enum { ROUNDS = 40, BLOCKS = 256 };
    static void *b[BLOCKS];
    CHECK(_ts_purge_thread_running());
    CHECK(ts_option_set("purge_delay_ms", 0));
    _ts_os_test_fail(TS_OS_FAIL_PURGE, 0, -1);
    long refusals = _ts_os_test_failures();
    size_t runs = atomic_load(&_ts_stats.purge_runs);
    for (int r = 0; r < ROUNDS; r++) {
        for (int i = 0; i < BLOCKS; i++) CHECK((b[i] = malloc(8192)) != NULL);
        for (int i = 0; i < BLOCKS; i++) free(b[i]); /* pages retired, their purge refused */
    }
    runs = atomic_load(&_ts_stats.purge_runs) - runs;
    refusals = _ts_os_test_failures() - refusals;
    _ts_os_test_fail(0, 0, 0);
    CHECK(ts_option_set("purge_delay_ms", 100));
    CHECK_MSG(refusals >= ROUNDS, "only %ld purges refused", refusals);
    /* 1 pass for 1,240 refusals (measured); a pass per refusal, the
     * behaviour guarded, is 4x over the bound. */
    CHECK_MSG(runs * 4 < (size_t)refusals, "%zu purge passes for %ld refused purges", runs,
              refusals);
    printf("refused purges at delay 0: %ld refused, %zu passes\n", refusals, runs);
}

/* One locked OS page among free pages: madvise refuses the run it is in
 * (it stops at the locked range), but only that page's own page may stay;
 * its neighbours go back. Needs mlock (RLIMIT_MEMLOCK), else skipped. */
static void one_locked_page(void) {
    enum { N = 16384 };
    static unsigned char *b[N];
    for (int i = 0; i < N; i++) CHECK((b[i] = malloc(1000)) != NULL);
    uintptr_t lock = ((uintptr_t)b[N / 2 + 300] + 4095) & ~(uintptr_t)4095; /* mid-page */
    if (mlock((void *)lock, 4096) != 0) {
        printf("one locked page: skipped (mlock: %s)\n", strerror(errno));
        for (int i = 0; i < N; i++) free(b[i]);
        return;
    }
    for (int i = 0; i < N; i++) /* one block in 1,024 keeps its segment in use */
        if (i % 1024) free(b[i]), b[i] = NULL;
    malloc_trim(0);
    size_t dirty = atomic_load(&_ts_stats.dirty);
    CHECK(munlock((void *)lock, 4096) == 0);
    for (int i = 0; i < N; i++) free(b[i]);
    malloc_trim(0);
    /* 64 KiB stay (measured: the locked page's own page); 256 KiB is 4x that,
     * while a run given up at the locked page keeps its whole rest. */
    CHECK_MSG(dirty <= 256 * 1024, "%zu KB free resident around one locked 4 KiB page",
              dirty >> 10);
    printf("one locked page: %zu KB left free resident\n", dirty >> 10);
}

int main(void) {
    free(malloc(1));
    /* A thread created now (pthread_create itself allocates), that makes its
     * first allocation once the OS refuses. */
    pthread_barrier_init(&ready, NULL, 2);
    pthread_barrier_init(&go, NULL, 2);
    pthread_t t;
    CHECK(pthread_create(&t, NULL, thread_first_malloc, NULL) == 0);
    pthread_barrier_wait(&ready);
    malloc_trim(0); /* no cached memory: new memory must come from the OS */

    _ts_os_test_fail(TS_OS_FAIL_MMAP, 0, -1);
    errno = 0;
    CHECK(malloc(8 * MB) == NULL && errno == ENOMEM);
    errno = 0;
    CHECK(calloc(1, 8 * MB) == NULL && errno == ENOMEM);
    errno = 0;
    CHECK(aligned_alloc(MB, 2 * MB) == NULL && errno == ENOMEM);
    void *p = NULL;
    CHECK(posix_memalign(&p, MB, 2 * MB) == ENOMEM && p == NULL);

    /* Small blocks until the segments in hand are used up. */
    nb = ts_fill_until_null(blocks, MAXB, 4000);
    CHECK_MSG(nb < MAXB && errno == ENOMEM, "%zu blocks, errno %d", nb, errno);
    errno = 0;
    CHECK(malloc(4000) == NULL && errno == ENOMEM); /* and again: still consistent */

    /* The new thread's first allocation. */
    void *r = NULL;
    pthread_barrier_wait(&go);
    CHECK(pthread_join(t, &r) == 0);
    CHECK_MSG(r == (void *)1 || (uintptr_t)r > 4096, "thread's first malloc: %p", r);
    if ((uintptr_t)r > 4096) free(r);

    /* realloc of a large block when mremap fails: NULL, block untouched. */
    _ts_os_test_fail(0, 0, 0);
    unsigned char *big = malloc(3 * MB);
    CHECK(big != NULL);
    memset(big, 0x3c, 3 * MB);
    _ts_os_test_fail(TS_OS_FAIL_REMAP | TS_OS_FAIL_MMAP, 0, -1);
    errno = 0;
    CHECK(realloc(big, 64 * MB) == NULL && errno == ENOMEM);
    for (size_t i = 0; i < 3 * MB; i += 1000) CHECK(big[i] == 0x3c);
    /* ... at each step of a move: refusals of the in-place mremap, the
     * destination's mmap and the copying fallback give NULL, the block as it
     * was; with the move itself refused, realloc copies; then it moves. */
    long failures = _ts_os_test_failures();
    _ts_os_test_fail(TS_OS_FAIL_REMAP | TS_OS_FAIL_MMAP, 0, 3);
    errno = 0;
    CHECK(realloc(big, 64 * MB) == NULL && errno == ENOMEM);
    CHECK_EQ(_ts_os_test_failures() - failures, 3);
    CHECK(malloc_usable_size(big) >= 3 * MB && malloc_usable_size(big) < 64 * MB);
    for (size_t i = 0; i < 3 * MB; i += 1000) CHECK(big[i] == 0x3c);
    unsigned char *copied = grow_refused(big, 2, 0); /* in place and move refused: a copy */
    big = realloc(copied, 3 * MB);
    CHECK(big != NULL && big[0] == 0x3c && big[3 * MB - 1000] == 0x3c);
    unsigned char *moved = grow_refused(big, 1, 1); /* in place refused: the pages move */
    memset(moved + 3 * MB, 0x5a, MB);
    big = realloc(moved, 3 * MB); /* shrinking is in place */
    CHECK(big == moved && big[0] == 0x3c);

    /* Intermittent refusals: some succeed, none crash. */
    _ts_os_test_fail(TS_OS_FAIL_MMAP | TS_OS_FAIL_REMAP, 2, 3);
    void *mix[40];
    int ok = 0;
    for (int i = 0; i < 40; i++) {
        mix[i] = malloc(i % 2 ? (size_t)(i + 1) * MB : (size_t)(i + 1) * 5000);
        ok += mix[i] != NULL;
    }
    CHECK(ok > 0 && ok < 40); /* 37 of 40 succeed (measured) */
    CHECK(_ts_os_test_failures() > 0);

    /* The OS is generous again: all old blocks intact, new ones work. */
    _ts_os_test_fail(0, 0, 0);
    for (size_t i = 0; i < nb; i++) {
        CHECK_MSG(ts_verify(blocks[i], 4000, i), "block %zu", i);
        free(blocks[i]);
    }
    for (int i = 0; i < 40; i++) free(mix[i]);
    big = realloc(big, 64 * MB);
    CHECK(big != NULL && big[0] == 0x3c && big[3 * MB - 1000] == 0x3c);
    free(big);
    for (int i = 0; i < 1000; i++) {
        void *q = malloc((size_t)i * 1000 + 1);
        CHECK(q != NULL);
        free(q);
    }
    /* Memory the cache holds serves large requests while the OS refuses
     * everything: the pieces of one freed region land in different table
     * stripes, which must not need a mapping to record them (before, the
     * first block in a stripe without a table failed and its memory was
     * unmapped). */
    unsigned char *region = malloc(48 * MB);
    CHECK(region != NULL);
    free(region);
    _ts_os_test_fail(TS_OS_FAIL_MMAP | TS_OS_FAIL_REMAP, 0, -1);
    enum { PIECES = 12 };
    void *piece[PIECES];
    for (int i = 0; i < PIECES; i++) {
        piece[i] = malloc(3 * MB);
        CHECK_MSG(piece[i] != NULL, "piece %d of a cached 48 MiB region", i);
        memset(piece[i], i, 3 * MB);
    }
    _ts_os_test_fail(0, 0, 0);
    for (int i = 0; i < PIECES; i++) free(piece[i]);
    purge_refused();
    format_refused();
    refused_at_once();
    one_locked_page();
    printf("ok: %zu blocks before the OS refused; %d of 40 mixed requests succeeded\n", nb, ok);
    return 0;
}
