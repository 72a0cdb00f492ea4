/* bins: blocks above the chunk bins live in mappings of their own (bins
 * 21 .. 28 rounded to the bin and cached on free; larger ones exact and
 * unmapped on free); realloc of them keeps the contents; when the OS refuses
 * memory every entry point gives NULL with ENOMEM and the next calls work.
 * A block that cannot grow in place has its pages moved, not copied, and
 * falls back to a copy when the OS refuses the move.
 * Run with "nocache" (and TSALLOC_BINS_CACHE=0): freed bin blocks are unmapped. */
#include "check.h"

#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <pthread.h>

#include "designs/bins/bins.h"

#define MiB ((size_t)1 << 20)

static int nocache;

/* Tag the first byte of each OS page, cheap for big blocks. */
static void tag_pages(unsigned char *p, size_t n, unsigned char seed) {
    for (size_t i = 0; i < n; i += 4096) p[i] = (unsigned char)(seed + i / 4096);
}
/* Asks for the block's whole usable size (realloc within it keeps the
 * block): a test that writes all of it then writes only what it asked for. */
static unsigned char *whole(unsigned char *p) {
    unsigned char *w = realloc(p, malloc_usable_size(p));
    CHECK(w == p);
    return w;
}
static int pages_tagged(const unsigned char *p, size_t n, unsigned char seed) {
    for (size_t i = 0; i < n; i += 4096)
        if (p[i] != (unsigned char)(seed + i / 4096)) return 0;
    return 1;
}

static void test_huge(void) {
    struct mallinfo2 before = mallinfo2();
    size_t n = ((size_t)1 << 28) + 1;
    unsigned char *p = malloc(n);
    CHECK(p && (uintptr_t)p % 4096 == 0);
    CHECK(_ts_bins_block_is_mapped(p) && _ts_bins_block_bin(p) == 0);
    CHECK(malloc_usable_size(p) >= n && malloc_usable_size(p) < n + 4096);
    struct mallinfo2 mi = mallinfo2();
    CHECK_EQ(mi.hblks, before.hblks + 1);
    CHECK(mi.hblkhd >= before.hblkhd + n);
    CHECK(mi.uordblks < before.uordblks + n); /* as glibc: in hblkhd only */
    p[0] = 1;
    p[n - 1] = 2;
    free(p);
    mi = mallinfo2();
    CHECK_EQ(mi.hblks, before.hblks);
    CHECK_EQ(mi.hblkhd, before.hblkhd);
}

static void test_big_bins(void) {
    malloc_trim(0);
    struct mallinfo2 before = mallinfo2();
    unsigned char *p = malloc(3 * MiB);
    CHECK(p && (uintptr_t)p % 4096 == 0 && _ts_bins_block_is_mapped(p));
    CHECK_EQ(_ts_bins_block_bin(p), 22);
    CHECK_EQ(malloc_usable_size(p), 4 * MiB);
    p = whole(p);
    tag_pages(p, malloc_usable_size(p), 3);
    CHECK(pages_tagged(p, 4 * MiB, 3));
    CHECK_EQ(mallinfo2().hblks, before.hblks + 1);
    free(p);
    struct mallinfo2 mi = mallinfo2();
    if (nocache) {
        CHECK_EQ(mi.hblks, before.hblks);
        CHECK_EQ(mi.keepcost, before.keepcost);
    } else {
        /* Cached: still mapped, counted as releasable, handed out again. */
        CHECK_EQ(mi.hblks, before.hblks + 1);
        CHECK(mi.keepcost >= before.keepcost + 4 * MiB);
        unsigned char *q = malloc(3 * MiB + MiB / 2);
        CHECK_MSG(q == p, "cached block not reused: %p then %p", (void *)p, (void *)q);
        free(q);
        CHECK_EQ(malloc_trim(0), 1);
        CHECK_EQ(mallinfo2().hblks, before.hblks);
    }
}

static void test_realloc_big(void) {
    size_t sizes[] = {MiB + 1, 5 * MiB, 20 * MiB, 300 * MiB, 2 * MiB, 100 * 1024, 3 * MiB};
    size_t have = sizes[0];
    unsigned char *p = malloc(have);
    CHECK(p);
    tag_pages(p, have, 9);
    for (size_t i = 1; i < sizeof sizes / sizeof *sizes; i++) {
        unsigned char *q = realloc(p, sizes[i]);
        CHECK_MSG(q, "realloc to %zu", sizes[i]);
        size_t keep = have < sizes[i] ? have : sizes[i];
        for (size_t off = 0; off < keep; off += 4096)
            CHECK_MSG(q[off] == (unsigned char)(9 + off / 4096), "realloc to %zu lost page %zu",
                      sizes[i], off / 4096);
        CHECK(malloc_usable_size(q) >= sizes[i]);
        p = q;
        have = sizes[i];
        tag_pages(p, have, 9);
    }
    CHECK_EQ(_ts_bins_block_bin(p), 22);
    free(p);
}

static void test_calloc_big(void) {
    size_t n = 5 * MiB;
    static unsigned char zero[65536];
    for (int round = 0; round < 3; round++) {
        unsigned char *p = calloc(1, n);
        CHECK(p);
        for (size_t off = 0; off < n; off += sizeof zero)
            CHECK_MSG(memcmp(p + off, zero, sizeof zero) == 0, "round %d: calloc not zero", round);
        memset(p, 0xEE, n); /* dirty it: a cached reuse must be cleared again */
        free(p);
    }
}

/* ---- the OS says no --------------------------------------------------------- */

static pthread_barrier_t fail_on, fail_seen, fail_cleared;
static int thread_failed, thread_recovered;

static void *late_starter(void *unused) {
    (void)unused;
    pthread_barrier_wait(&fail_on);
    errno = 0;
    void *p = malloc(100); /* this thread's first malloc: no arena can be made */
    thread_failed = p == NULL && errno == ENOMEM;
    free(p);
    pthread_barrier_wait(&fail_seen);
    pthread_barrier_wait(&fail_cleared); /* the OS says yes again */
    p = malloc(100);
    thread_recovered = p != NULL;
    free(p);
    return NULL;
}

static void test_os_failure(void) {
    malloc_trim(0); /* nothing cached: big requests need the OS */
    unsigned char *live[8];
    for (int i = 0; i < 8; i++) {
        CHECK((live[i] = malloc((size_t)100 << i)));
        ts_fill(live[i], (size_t)100 << i, (uint64_t)i);
    }
    unsigned char *big = malloc(2 * MiB);
    CHECK(big);
    tag_pages(big, 2 * MiB, 4);
    pthread_barrier_init(&fail_on, NULL, 2);
    pthread_barrier_init(&fail_seen, NULL, 2);
    pthread_barrier_init(&fail_cleared, NULL, 2);
    pthread_t tid;
    CHECK(pthread_create(&tid, NULL, late_starter, NULL) == 0);

    long failures = _ts_os_test_failures();
    _ts_os_test_fail(TS_OS_FAIL_MMAP | TS_OS_FAIL_REMAP, 0, -1);
    errno = 0;
    CHECK(malloc(((size_t)1 << 28) + 1) == NULL && errno == ENOMEM);
    errno = 0;
    CHECK(malloc(5 * MiB) == NULL && errno == ENOMEM);
    errno = 0;
    CHECK(calloc(1, 40 * MiB) == NULL && errno == ENOMEM);
    errno = 0;
    CHECK(memalign(4 * MiB, 10) == NULL && errno == ENOMEM);
    errno = 0;
    CHECK(realloc(big, 9 * MiB) == NULL && errno == ENOMEM);
    CHECK(pages_tagged(big, 2 * MiB, 4));
    /* Chunk bins: 1 MiB spans run out of chunk room quickly. */
    void *held[64];
    int n = 0;
    errno = 0;
    while (n < 64 && (held[n] = malloc(MiB)) != NULL) n++; /* 64 only ends the loop: 1 fits */
    CHECK_MSG(n < 64 && errno == ENOMEM, "%d MiB blocks without the OS, errno %d", n, errno);
    pthread_barrier_wait(&fail_on);
    pthread_barrier_wait(&fail_seen); /* the thread saw its NULL */
    CHECK(_ts_os_test_failures() > failures);

    _ts_os_test_fail(0, 0, 0);
    pthread_barrier_wait(&fail_cleared);
    pthread_join(tid, NULL);
    CHECK_MSG(thread_failed, "a new thread's first malloc did not fail with ENOMEM");
    CHECK(thread_recovered);
    for (int i = 0; i < n; i++) free(held[i]);
    void *p = malloc(((size_t)1 << 28) + 1);
    CHECK(p);
    free(p);
    CHECK((p = malloc(MiB)));
    free(p);
    CHECK((big = realloc(big, 9 * MiB)) && pages_tagged(big, 2 * MiB, 4));
    free(big);
    for (int i = 0; i < 8; i++) {
        CHECK(ts_verify(live[i], (size_t)100 << i, (uint64_t)i));
        free(live[i]);
    }

    /* One refusal only: the call after it works. */
    malloc_trim(0);
    _ts_os_test_fail(TS_OS_FAIL_MMAP, 0, 1);
    errno = 0;
    CHECK(malloc(5 * MiB) == NULL && errno == ENOMEM);
    CHECK((p = malloc(5 * MiB)));
    free(p);

    /* mremap refused: a growing realloc moves the block instead. */
    unsigned char *r = malloc(3 * MiB);
    CHECK(r);
    tag_pages(r, 3 * MiB, 8);
    _ts_os_test_fail(TS_OS_FAIL_REMAP, 0, -1);
    unsigned char *s = realloc(r, 30 * MiB);
    _ts_os_test_fail(0, 0, 0);
    CHECK(s && pages_tagged(s, 3 * MiB, 8));
    free(s);
    pthread_barrier_destroy(&fail_on);
    pthread_barrier_destroy(&fail_seen);
    pthread_barrier_destroy(&fail_cleared);
}

/* ---- growth that cannot stay in place ------------------------------------ */

/* Take the page right after p's mapping (p + usable size), so realloc cannot
 * grow p in place. Returns that page, or NULL when something was there already. */
static void *block_after(const void *p) {
    uintptr_t end = (uintptr_t)p + malloc_usable_size((void *)p);
    uintptr_t lo, hi;
    if (ts_find_mapping(end, &lo, &hi)) return NULL;
    void *page = _ts_os_map(4096);
    CHECK(page);
    if (page != (void *)end) CHECK(_ts_os_remap_to(page, 4096, 4096, (void *)end) == (void *)end);
    return (void *)end;
}

static void do_free(void *p) {
    free(p);
}

/* p's old range must be gone from the design: freeing into it is foreign. */
static void check_not_ours(const void *p) {
    char want[128];
    snprintf(want, sizeof want, "tsalloc: free(): invalid pointer %p", p);
    CHECK_MSG(ts_expect_abort(do_free, (void *)p, want), "old range of %p still ours", p);
}

/* Grow p (its first `have` bytes tagged with seed) to `size` while the page
 * after it is taken and mmap may succeed once only: the copy path would need
 * a second mapping, so only moving the pages can succeed. */
static unsigned char *grow_by_moving(unsigned char *p, size_t have, size_t size,
                                     unsigned char seed) {
    void *blocker = block_after(p);
    struct mallinfo2 before = mallinfo2();
    size_t old_usable = malloc_usable_size(p);
    long failures = _ts_os_test_failures();
    _ts_os_test_fail(TS_OS_FAIL_MMAP, 1, -1);
    unsigned char *q = realloc(p, size);
    _ts_os_test_fail(0, 0, 0);
    CHECK_MSG(q != NULL, "realloc(%zu) of a blocked block did not move its pages", size);
    CHECK_EQ(_ts_os_test_failures(), failures); /* no second mmap was asked for */
    CHECK(q != p);
    CHECK(pages_tagged(q, have, seed));
    CHECK(_ts_bins_block_is_mapped(q)); /* registered: locating it aborts otherwise */
    CHECK(malloc_usable_size(q) >= size);
    struct mallinfo2 mi = mallinfo2();
    CHECK_EQ(mi.hblks, before.hblks);
    CHECK_EQ(mi.hblkhd, before.hblkhd + malloc_usable_size(q) - old_usable);
    check_not_ours(p);
    if (blocker) _ts_os_unmap(blocker, 4096);
    return q;
}

static void test_realloc_moves(void) {
    malloc_trim(0); /* no cached block to hand out instead of a mapping */
    /* A bin block: 3 MiB (bin 22) grows to 40 MiB (bin 26). */
    unsigned char *p = malloc(3 * MiB);
    CHECK(p);
    CHECK_EQ(malloc_usable_size(p), 4 * MiB);
    p = whole(p);
    tag_pages(p, malloc_usable_size(p), 21);
    unsigned char *q = grow_by_moving(p, 4 * MiB, 40 * MiB, 21);
    CHECK_EQ(((uintptr_t)q - BINS_MAPPED_OFFSET) % BINS_CHUNK_SIZE, 0);
    CHECK_EQ(_ts_bins_block_bin(q), 26);
    CHECK_EQ(malloc_usable_size(q), 64 * MiB);
    CHECK(q[4 * MiB] == 0 && q[64 * MiB - 1] == 0); /* the new pages: fresh zeros */
    q = whole(q);
    tag_pages(q, malloc_usable_size(q), 22);
    /* The moved block shrinks in place, and grows back in place into the
     * range it just gave up (mremap needs it to be a single mapping). */
    unsigned char *r = realloc(q, 5 * MiB);
    CHECK_MSG(r == q, "a moved block did not shrink in place: %p -> %p", (void *)q, (void *)r);
    CHECK_EQ(malloc_usable_size(r), 8 * MiB);
    r = whole(r);
    CHECK(pages_tagged(r, 8 * MiB, 22));
    r = realloc(q, 40 * MiB);
    CHECK_MSG(r == q, "a moved block did not grow in place: %p -> %p", (void *)q, (void *)r);
    CHECK_EQ(malloc_usable_size(r), 64 * MiB);
    CHECK(pages_tagged(r, 8 * MiB, 22));
    free(r);

    /* Over-aligned: memalign(4 MiB) keeps its alignment when it moves. */
    p = memalign(4 * MiB, 3 * MiB);
    CHECK(p && (uintptr_t)p % (4 * MiB) == 0);
    tag_pages(p, 3 * MiB, 23);
    q = grow_by_moving(p, 3 * MiB, 10 * MiB, 23);
    CHECK_EQ((uintptr_t)q % (4 * MiB), 0);
    CHECK_EQ(_ts_bins_block_bin(q), 0);
    CHECK_EQ(malloc_usable_size(q), 10 * MiB);
    free(q);
}

/* A growth that a cached block can serve copies into it (its pages are in
 * memory already) and caches the old block; without a cache the pages move. */
static void test_realloc_prefers_cache(void) {
    malloc_trim(0);
    unsigned char *cached = malloc(5 * MiB); /* bin 23 */
    CHECK(cached);
    free(cached);
    unsigned char *p = malloc(3 * MiB); /* bin 22 */
    CHECK(p);
    CHECK_EQ(malloc_usable_size(p), 4 * MiB);
    p = whole(p);
    tag_pages(p, malloc_usable_size(p), 40);
    void *blocker = block_after(p);
    unsigned char *q = realloc(p, 6 * MiB);
    CHECK(q && q != p && pages_tagged(q, 4 * MiB, 40));
    CHECK_EQ(_ts_bins_block_bin(q), 23);
    if (nocache) {
        check_not_ours(p);
    } else {
        CHECK_MSG(q == cached, "cached block %p not used, got %p", (void *)cached, (void *)q);
        unsigned char *again = malloc(3 * MiB);
        CHECK_MSG(again == p, "old block %p not cached, got %p", (void *)p, (void *)again);
        free(again);
    }
    free(q);
    if (blocker) _ts_os_unmap(blocker, 4096);
}

/* The OS refuses part of a blocked growth: the result is still right. */
static void grow_blocked_refused(unsigned ops, long skip, long count, long refusals) {
    malloc_trim(0);
    unsigned char *p = malloc(3 * MiB);
    CHECK(p);
    CHECK_EQ(malloc_usable_size(p), 4 * MiB);
    p = whole(p);
    tag_pages(p, malloc_usable_size(p), 30);
    void *blocker = block_after(p);
    long failures = _ts_os_test_failures();
    _ts_os_test_fail(ops, skip, count);
    unsigned char *q = realloc(p, 20 * MiB);
    _ts_os_test_fail(0, 0, 0);
    CHECK_MSG(q && q != p, "ops %u skip %ld count %ld: realloc gave %p", ops, skip, count,
              (void *)q);
    CHECK_EQ(_ts_os_test_failures() - failures, refusals);
    CHECK(pages_tagged(q, 4 * MiB, 30));
    CHECK_EQ(_ts_bins_block_bin(q), 25);
    CHECK_EQ(malloc_usable_size(q), 32 * MiB);
    q = whole(q);
    tag_pages(q, malloc_usable_size(q), 31);
    CHECK(pages_tagged(q, 32 * MiB, 31));
    free(q);
    if (blocker) _ts_os_unmap(blocker, 4096);
}

static void test_realloc_move_refused(void) {
    grow_blocked_refused(TS_OS_FAIL_REMAP, 0, 1, 1);  /* in place refused: the pages move */
    grow_blocked_refused(TS_OS_FAIL_REMAP, 1, 1, 1);  /* the move refused: copy */
    grow_blocked_refused(TS_OS_FAIL_MMAP, 0, 1, 1);   /* no range to move to: copy */
    grow_blocked_refused(TS_OS_FAIL_REMAP, 0, -1, 2); /* no mremap at all: copy */
}

int main(int argc, char **argv) {
    nocache = argc > 1 && strcmp(argv[1], "nocache") == 0;
    test_huge();
    test_big_bins();
    test_realloc_big();
    test_calloc_big();
    test_os_failure();
    test_realloc_moves();
    test_realloc_prefers_cache();
    test_realloc_move_refused();
    printf("bins_mapped%s: ok\n", nocache ? " (no cache)" : "");
    return 0;
}
