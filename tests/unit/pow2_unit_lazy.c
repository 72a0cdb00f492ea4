/* pow2 unit cases (see pow2_unit.c): lazy merging and its flush, trim and
 * give-back with lazy blocks.
 */
#include "pow2_unit.h"

/* ---- lazy merging ------------------------------------------------------------------- */

/* Partition 0's lazy list of order k, head first. */
static size_t lazy_list(unsigned k, uintptr_t *out, size_t max) {
    snapshot(&s0);
    size_t n = 0;
    for (size_t i = 0; i < s0.n; i++)
        if (s0.v[i].part == 0 && s0.v[i].order == k && s0.v[i].lazy) {
            CHECK(n < max);
            out[n++] = s0.v[i].addr;
        }
    return n;
}

enum { LAZY_EXTRA = 4, LAZY_MAX = 8 + LAZY_EXTRA };

void test_lazy(void) {
    free(malloc(1)); /* the settings are read with the first chunk */
    /* The documented watermark: 8 blocks of each order up to 16 KiB, then
     * 128 KiB worth per order, nothing above 128 KiB nor whole chunks. */
    for (unsigned k = 5; k <= 14; k++) CHECK_EQ(lazy_cap(k), 8);
    CHECK_EQ(lazy_cap(15), 4);
    CHECK_EQ(lazy_cap(16), 2);
    CHECK_EQ(lazy_cap(17), 1);
    CHECK_EQ(lazy_cap(18), 0);
    CHECK_EQ(lazy_cap(19), 0);

    /* A malloc/free loop of one size: after the first pair the same block
     * comes back every time, with no split and no merge. */
    size_t sizes[] = {1, 16, 100, 1000, 4096, 32768, 100000};
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
        size_t n = sizes[i];
        pow2_counters_t c0 = counters();
        unsigned char *first = malloc(n);
        CHECK(first);
        free(first);
        pow2_counters_t c1 = counters();
        CHECK_MSG(c1.merges == c0.merges, "free(malloc(%zu)) merged %zu levels", n,
                  c1.merges - c0.merges);
        CHECK_MSG(strstr(block_line(first), " state=lazy "), "%s", line);
        for (int it = 0; it < 1000; it++) {
            unsigned char *p = malloc(n);
            CHECK_MSG(p == first, "malloc(%zu) #%d: %p, not the lazy block %p", n, it, (void *)p,
                      (void *)first);
            p[0] = (unsigned char)it;
            p[n - 1] = (unsigned char)it;
            free(p);
        }
        pow2_counters_t c2 = counters();
        CHECK_MSG(c2.splits == c1.splits && c2.merges == c1.merges && c2.flushes == c1.flushes,
                  "malloc/free(%zu) loop: %zu splits %zu merges %zu flushes", n,
                  c2.splits - c1.splits, c2.merges - c1.merges, c2.flushes - c1.flushes);
        CHECK_EQ(c2.lazy_blocks, c1.lazy_blocks);
    }
    check_heap("loops");

    /* Above 128 KiB a freed block is never kept lazy. */
    pow2_counters_t c0 = counters();
    unsigned char *big = malloc(200000);
    CHECK(big);
    free(big);
    pow2_counters_t c1 = counters();
    CHECK_EQ(c1.lazy_blocks, c0.lazy_blocks);
    CHECK_MSG(!strstr(block_line(big), " state=lazy "), "%s", line);

    /* The watermark: of cap + 4 blocks freed, the first cap stay lazy (most
     * recent first in the list), the others merge; malloc then takes the
     * lazy ones back in that order, splitting nothing. */
    unsigned k = order_for(100), cap = lazy_cap(k);
    CHECK(cap + LAZY_EXTRA <= LAZY_MAX);
    unsigned char *b[LAZY_MAX];
    for (unsigned i = 0; i < cap + LAZY_EXTRA; i++) CHECK((b[i] = malloc(100)));
    for (unsigned i = 0; i < cap + LAZY_EXTRA; i++) free(b[i]);
    uintptr_t list[LAZY_MAX];
    size_t n = lazy_list(k, list, LAZY_MAX);
    CHECK_EQ(n, cap);
    for (unsigned i = 0; i < cap; i++)
        CHECK_MSG(list[i] == (uintptr_t)b[cap - 1 - i] - 16, "lazy list[%u] %p, expected %p", i,
                  (void *)list[i], (void *)(b[cap - 1 - i] - 16));
    for (unsigned i = cap; i < cap + LAZY_EXTRA; i++)
        CHECK_MSG(!strstr(block_line(b[i]), " state=lazy "), "over the watermark: %s", line);
    check_heap("watermark");
    c0 = counters();
    for (unsigned i = 0; i < cap; i++) {
        unsigned char *p = malloc(100);
        CHECK_MSG(p == b[cap - 1 - i], "malloc #%u: %p, expected %p", i, (void *)p,
                  (void *)b[cap - 1 - i]);
    }
    c1 = counters();
    CHECK_EQ(c1.splits, c0.splits);
    CHECK_EQ(c1.lazy_blocks, c0.lazy_blocks - cap);
    for (unsigned i = 0; i < cap; i++) free(b[i]);
    check_heap("lazy end");
    printf("lazy: ok (watermark %u for 128 B blocks)\n", cap);
}

/* Lazy blocks are merged before the partition takes a new chunk: with the
 * OS refusing memory, a chunk whose blocks are all lazy still serves a
 * whole-chunk request. */
void test_lazyflush(void) {
    enum { N = 8 };
    unsigned char *b[N];
    if (ts_sanitizer_loaded()) { /* its runtime's blocks share the chunk */
        printf("lazyflush: a sanitizer build's heap is not fresh: skipped\n");
        return;
    }
    for (int i = 0; i < N; i++) CHECK((b[i] = malloc(100)));
    CHECK_EQ(mallinfo2().arena, CHUNK); /* a fresh process: one chunk */
    CHECK(lazy_cap(order_for(100)) >= N);
    for (int i = 0; i < N; i++) free(b[i]);
    pow2_counters_t c0 = counters();
    CHECK_EQ(c0.lazy_blocks, (size_t)N);
    _ts_os_test_fail(TS_OS_FAIL_SBRK | TS_OS_FAIL_MMAP, 0, -1);
    unsigned char *w = malloc(WHOLE);
    _ts_os_test_fail(0, 0, 0);
    CHECK_MSG(w, "the lazy blocks were not merged into their whole chunk");
    CHECK_EQ((uintptr_t)w - 16, ((uintptr_t)b[0] - 16) & ~(uintptr_t)(CHUNK - 1));
    pow2_counters_t c1 = counters();
    CHECK(c1.lazy_blocks == 0 && c1.flushes > c0.flushes);
    memset(w, 0x44, WHOLE);
    free(w);
    check_heap("lazyflush");
    printf("lazyflush: ok\n");
}

/* ---- trim and give-back with lazy blocks ---------------------------------------------- */

enum { TRIM_CHUNKS = 6, TRIM_SIZE = 5000 /* 8 KiB blocks */, TRIM_N = TRIM_CHUNKS * 128 };
static unsigned char *trim_blocks[TRIM_N];
static bool trim_freed[TRIM_N];

static uintptr_t chunk_of(const void *p) {
    return ((uintptr_t)p - 16) & ~(uintptr_t)(CHUNK - 1);
}

static void alloc_trim_blocks(void) {
    for (int i = 0; i < TRIM_N; i++) {
        CHECK((trim_blocks[i] = malloc(TRIM_SIZE)));
        memset(trim_blocks[i], i, TRIM_SIZE);
        trim_freed[i] = false;
    }
}

static void free_trim_block(int i) {
    CHECK(!trim_freed[i] && trim_blocks[i][TRIM_SIZE - 1] == (unsigned char)i);
    free(trim_blocks[i]);
    trim_freed[i] = true;
}

void test_trim(void) {
    char *b0 = sbrk(0);
    size_t arena0 = mallinfo2().arena;
    alloc_trim_blocks();
    char *b1 = sbrk(0);
    /* Exact: the blocks fill TRIM_CHUNKS chunks, one of which may be the
     * spare the heap had. Measured: 6.05 to 6.76 chunks for 6. */
    CHECK_MSG(b1 - b0 >= (TRIM_CHUNKS - 1) * (long)CHUNK, "heap grew by %ld only", (long)(b1 - b0));
    unsigned cap = lazy_cap(order_for(TRIM_SIZE));

    /* First one block of each chunk, then the rest: the first `cap` frees
     * stay lazy, in every chunk, so no chunk becomes whole and nothing can
     * go back; eager merging gives the top back at once. */
    uintptr_t seen[TRIM_N];
    int nseen = 0, first_frees = 0;
    for (int i = 0; i < TRIM_N; i++) {
        uintptr_t c = chunk_of(trim_blocks[i]);
        int known = 0;
        for (int j = 0; j < nseen; j++) known |= seen[j] == c;
        if (known) continue;
        seen[nseen++] = c;
        free_trim_block(i);
        first_frees++;
    }
    CHECK(nseen >= TRIM_CHUNKS);
    for (int i = TRIM_N; i-- > 0 && first_frees < (int)cap;)
        if (!trim_freed[i]) free_trim_block(i), first_frees++;
    for (int i = 0; i < TRIM_N; i++)
        if (!trim_freed[i]) free_trim_block(i);
    char *b2 = sbrk(0);
    pow2_counters_t c = counters();
    if (cap >= (unsigned)nseen) {
        CHECK_EQ(c.lazy_blocks, (size_t)cap);
        CHECK_MSG(b2 == b1, "chunks pinned by lazy blocks went back: sbrk(0) %p, was %p", b2, b1);
    } else if (cap == 0) {
        /* Exact: the spare, one slack chunk and the pad stay (2.05 to 2.76
         * chunks measured), as in pow2_unit_blocks' giveback. */
        CHECK_MSG(b2 <= b0 + 3 * (long)CHUNK, "sbrk(0) %p, was %p before", b2, b0);
    }
    check_heap("pinned");

    /* malloc_trim merges every lazy block first: every chunk is whole again
     * and the top of the heap goes back. */
    CHECK_EQ(malloc_trim(0), 1);
    c = counters();
    CHECK_EQ(c.lazy_blocks, 0);
    char *b3 = sbrk(0);
    /* Exact: only the alignment pad, under a chunk, may stay (0.05 to 0.76
     * chunks measured). */
    CHECK_MSG(b3 <= b0 + (long)CHUNK, "after trim sbrk(0) %p, was %p", b3, b0);
    CHECK_MSG(mallinfo2().arena <= arena0, "arena %zu after trim, %zu before", mallinfo2().arena,
              arena0);
    check_heap("trimmed");

    /* Shrinking without trim: everything freed in allocation order. The first
     * frees go lazy, but once a whole chunk leaves the partition for the pool
     * they merge and frees merge at once: the top goes back as with eager
     * merging, and no lazy block is left. */
    pow2_counters_t c0 = counters();
    alloc_trim_blocks();
    char *b4 = sbrk(0);
    CHECK(b4 - b3 >= (TRIM_CHUNKS - 1) * (long)CHUNK);
    for (int i = 0; i < TRIM_N; i++) free_trim_block(i);
    char *b5 = sbrk(0);
    c = counters();
    CHECK_EQ(c.lazy_blocks, 0);
    if (cap) CHECK(c.flushes > c0.flushes);
    /* Exact, as above: 2.0 chunks stay (measured), of 6 at the peak. */
    CHECK_MSG(b5 <= b3 + 3 * (long)CHUNK, "sbrk(0) %p after freeing, %p at the peak, %p before", b5,
              b4, b3);
    check_heap("shrink");

    /* Growing again (a split) turns lazy merging back on. */
    unsigned char *first = malloc(100);
    CHECK(first);
    free(first);
    c0 = counters();
    for (int i = 0; i < 100; i++) {
        unsigned char *p = malloc(100);
        CHECK(p == first);
        free(p);
    }
    c = counters();
    if (cap)
        CHECK_MSG(c.splits == c0.splits && c.merges == c0.merges && c.lazy_blocks == 1,
                  "after shrinking: %zu splits, %zu merges, %zu lazy", c.splits - c0.splits,
                  c.merges - c0.merges, c.lazy_blocks);
    check_heap("trim end");
    printf("trim: heap %ld KiB after freeing (watermark %u), %ld KiB after trim; %ld KiB after "
           "a sequential free\n",
           (long)(b2 - b0) >> 10, cap, (long)(b3 - b0) >> 10, (long)(b5 - b3) >> 10);
}
