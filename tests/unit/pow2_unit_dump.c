/* pow2 unit cases (see pow2_unit.c): the dump formats, the OS saying no, a
 * foreign sbrk between chunks, misuse the generic tests cannot set up.
 */
#include "pow2_unit.h"

/* ---- the dump formats ----------------------------------------------------------------- */

static char file_buf[1 << 20];

static const char *read_all(FILE *f) {
    rewind(f);
    size_t n = fread(file_buf, 1, sizeof file_buf - 1, f);
    file_buf[n] = 0;
    return file_buf;
}

void test_dump(void) {
    FILE *f = tmpfile();
    CHECK(f);
    void *keep = malloc(100);
    void *big = malloc((2u << 20) + 100);
    CHECK(keep && big);
    PRINT_F(f);
    const char *text = read_all(f);
    /* Line 1, then one line per partition, each followed by its order lines. */
    char head[64];
    snprintf(head, sizeof head, "%s heap: partitions=%u arena=", NAME, pow2_partitioned ? 3u : 1u);
    CHECK_MSG(strncmp(text, head, strlen(head)) == 0, "dump starts: %.80s", text);
    CHECK(strstr(text, " mapped=2101248 mapped_blocks=1 pool_chunks="));
    CHECK(strstr(text, "\npartition 0: chunks="));
    CHECK(strstr(text, " used_blocks=") && strstr(text, " lazy="));
    CHECK(strstr(text, "\npool:"));
    size_t len = strlen(text);
    CHECK(len > 5 && strcmp(text + len - 5, "\nend\n") == 0);
    int order_lines = 0;
    for (const char *l = strstr(text, "\n  order "); l; l = strstr(l + 1, "\n  order ")) {
        char *p;
        unsigned k = (unsigned)strtoul(l + 9, &p, 10);
        CHECK(k >= 5 && k <= 20);
        CHECK(strncmp(p, " size ", 6) == 0);
        CHECK_EQ(strtoull(p + 6, &p, 10), 1ull << k);
        CHECK(*p == ':');
        for (p++; *p == ' ';) {
            CHECK(p[1] == '0' && p[2] == 'x');
            unsigned long long a = strtoull(p + 1, &p, 16);
            CHECK_MSG((a & ((1ull << k) - 1)) == 0, "free block %llx in order %u", a, k);
        }
        CHECK(*p == '\n');
        order_lines++;
    }
    CHECK(order_lines > 0);
    for (const char *l = strstr(text, "\n  lazy "); l; l = strstr(l + 1, "\n  lazy ")) {
        char *p;
        unsigned k = (unsigned)strtoul(l + 8, &p, 10);
        CHECK(k >= 5 && k < 20 && lazy_cap(k));
        CHECK(strncmp(p, " size ", 6) == 0);
        CHECK_EQ(strtoull(p + 6, &p, 10), 1ull << k);
        CHECK(*p == ':');
    }

    /* print_block: one line, exact. */
    char want_line[256];
    const char *part_chunk = "partition=0 chunk=brk";
    fclose(f);
#define EXPECT_BLOCK(ptr, ...)                                                                     \
    do {                                                                                           \
        FILE *g = tmpfile();                                                                       \
        CHECK(g);                                                                                  \
        PRINT_B(ptr, g);                                                                           \
        snprintf(want_line, sizeof want_line, __VA_ARGS__);                                        \
        CHECK_MSG(strcmp(read_all(g), want_line) == 0, "got \"%s\" want \"%s\"", file_buf,         \
                  want_line);                                                                      \
        fclose(g);                                                                                 \
    } while (0)
    EXPECT_BLOCK(keep, "%p: heap block=%p order=7 size=128 usable=112 state=used %s\n", keep,
                 (void *)((char *)keep - 16), part_chunk);
    EXPECT_BLOCK(big, "%p: mapped size=2101248 usable=2101248\n", big);
    int local;
    EXPECT_BLOCK(&local, "%p: not a block of this heap\n", (void *)&local);
    void *al = memalign(64, 100);
    CHECK(al);
    uintptr_t ab = (uintptr_t)al - 64;
    EXPECT_BLOCK(al, "%p: heap block=%p order=8 size=256 usable=192 state=used-aligned %s\n", al,
                 (void *)ab, part_chunk);
    /* A freed block is lazy (while under the watermark), then, merged by
     * malloc_trim but with its buddy in use, free. */
    unsigned char *r = malloc(1000);
    CHECK(realloc(r, 100) == r);
    void *b = malloc(100);
    CHECK((char *)b == (char *)r + 128);
    free(r);
    /* (formatted without stdio, which could allocate r again) */
    if (lazy_cap(7)) {
        snprintf(want_line, sizeof want_line,
                 "%p: heap block=%p order=7 size=128 usable=112 state=lazy %s\n", (void *)r,
                 (void *)(r - 16), part_chunk);
        CHECK_MSG(strcmp(block_line(r), want_line) == 0, "got \"%s\"", line);
        /* The lazy list line lists it first (most recently freed). */
        static char dump[1 << 16];
        CHECK(P2(dump_freelist)(dump, sizeof dump) < sizeof dump);
        char lazy_line[64];
        snprintf(lazy_line, sizeof lazy_line, "\n  lazy 7 size 128: %p", (void *)(r - 16));
        CHECK_MSG(strstr(dump, lazy_line), "no \"%s\" in:\n%s", lazy_line + 1, dump);
        malloc_trim(0);
    }
    snprintf(want_line, sizeof want_line,
             "%p: heap block=%p order=7 size=128 usable=112 state=free %s\n", (void *)r,
             (void *)(r - 16), part_chunk);
    CHECK_MSG(strcmp(block_line(r), want_line) == 0, "got \"%s\"", line);
    free(b);
    free(al);
    free(big);
    free(keep);
    check_heap("dump");
    printf("dump: ok\n");
}

/* ---- the OS says no ------------------------------------------------------------------- */

enum { MAX_HOLD = 96 };

void test_osfail(void) {
    void *hold[MAX_HOLD];
    int n = 0;
    /* Some whole free chunks (the spare, the pool) before the OS says no. */
    for (int i = 0; i < 4; i++) CHECK((hold[i] = malloc(WHOLE)));
    for (int i = 0; i < 4; i++) free(hold[i]);
    /* sbrk and mmap refuse: chunk-sized requests run dry, then fail cleanly. */
    _ts_os_test_fail(TS_OS_FAIL_SBRK | TS_OS_FAIL_MMAP, 0, -1);
    for (;;) {
        CHECK_MSG(n < MAX_HOLD, "malloc never failed");
        errno = 0;
        void *p = malloc(WHOLE);
        if (!p) {
            CHECK_EQ(errno, ENOMEM);
            break;
        }
        memset(p, 0x11, 64);
        hold[n++] = p;
    }
    errno = 0;
    CHECK(malloc(5u << 20) == NULL && errno == ENOMEM);
    errno = 0;
    CHECK(calloc(1, 3u << 20) == NULL && errno == ENOMEM);
    errno = 0;
    CHECK(memalign(4096, 8u << 20) == NULL && errno == ENOMEM);
    /* Small requests still succeed from what is free inside chunks. */
    void *small = malloc(10);
    check_heap("sbrk+mmap refused");
    _ts_os_test_fail(0, 0, 0);
    free(small);

    /* sbrk alone refuses: chunks come from mmap instead. */
    _ts_os_test_fail(TS_OS_FAIL_SBRK, 0, -1);
    int mapped = -1;
    int first_new = n;
    for (; n < MAX_HOLD && mapped < 0; n++) {
        hold[n] = malloc(WHOLE);
        CHECK(hold[n]);
        memset(hold[n], 0x22, WHOLE);
        if (strstr(block_line(hold[n]), "chunk=map")) mapped = n;
    }
    _ts_os_test_fail(0, 0, 0);
    CHECK_MSG(mapped >= first_new, "no chunk came from mmap");
    check_heap("sbrk refused");

    /* mmap refuses: huge blocks fail, the heap still serves. */
    _ts_os_test_fail(TS_OS_FAIL_MMAP, 0, -1);
    errno = 0;
    CHECK(malloc(2u << 20) == NULL && errno == ENOMEM);
    void *ok = malloc(1000);
    CHECK(ok);
    _ts_os_test_fail(0, 0, 0);
    free(ok);

    for (int i = 0; i < n; i++) free(hold[i]);
    check_heap("osfail end");
    void *p = malloc(3u << 20);
    CHECK(p);
    free(p);
    CHECK(first_new >= 1);
    printf("osfail: ok (%d chunks before failure, chunk %d from mmap)\n", first_new, mapped);
}

/* ---- a foreign sbrk between our chunks ------------------------------------------------ */

static void free_ptr(void *p) {
    free(p);
}

void test_gap(void) {
    void *hold[MAX_HOLD];
    int n = 0;
    hold[n++] = malloc(WHOLE);
    /* Someone else moves the break, by an amount that breaks the alignment. */
    char *foreign = sbrk(12345 + 4096);
    CHECK(foreign != (void *)-1);
    memset(foreign, 0x5a, 12345 + 4096);
    char *foreign_end = foreign + 12345 + 4096;
    int above = 0;
    while (!above) {
        CHECK(n < MAX_HOLD);
        char *p = malloc(WHOLE);
        CHECK(p);
        memset(p, 0x33, WHOLE);
        hold[n++] = p;
        CHECK((((uintptr_t)p - 16) & (CHUNK - 1)) == 0);
        CHECK(p + WHOLE <= foreign || p - 16 >= foreign_end);
        above = p > foreign;
    }
    for (size_t i = 0; i < 12345 + 4096; i++) CHECK(foreign[i] == 0x5a);
    check_heap("gap");
    /* Memory in the gap is not ours: freeing it aborts, without touching it. */
    void *inside = (void *)(((uintptr_t)foreign + 64) & ~(uintptr_t)15);
    CHECK(ts_expect_abort(free_ptr, inside, "tsalloc: free(): invalid pointer 0x"));
    for (int i = 0; i < n; i++) free(hold[i]);
    /* Giving back never goes below the foreign memory. */
    CHECK((char *)sbrk(0) >= foreign_end);
    malloc_trim(0);
    CHECK((char *)sbrk(0) >= foreign_end);
    for (size_t i = 0; i < 12345 + 4096; i++) CHECK(foreign[i] == 0x5a);
    check_heap("gap end");
    printf("gap: ok (%d chunks)\n", n);
}

/* ---- misuse the generic test cannot set up ------------------------------------------- */

static void free_twice_ptr(void *p) {
    free(p);
}
static void realloc_ptr(void *p) {
    (void)!realloc(p, 64);
}
static void usable_ptr(void *p) {
    (void)!malloc_usable_size(p);
}

void test_misuse(void) {
    /* R (order 7, lower) and B = R+128 (upper) both freed: they merge, and
     * B's header is no block any more. A second free of either aborts.
     * With lazy merging both stay lazy blocks first (a second free is a
     * double free of either); malloc_trim merges them. `hold` keeps their
     * chunk from being given back by that trim. */
    void *hold = malloc(5000);
    CHECK(hold);
    unsigned char *r = malloc(1000);
    CHECK(realloc(r, 100) == r);
    unsigned char *b = malloc(100);
    CHECK(b == r + 128);
    free(r);
    free(b);
    char want[96];
    if (lazy_cap(7)) {
        snprintf(want, sizeof want, "tsalloc: free(): double free of %p", (void *)b);
        CHECK(ts_expect_abort(free_twice_ptr, b, want));
        snprintf(want, sizeof want, "tsalloc: free(): double free of %p", (void *)r);
        CHECK(ts_expect_abort(free_twice_ptr, r, want));
        snprintf(want, sizeof want, "tsalloc: malloc_usable_size(): invalid pointer %p", (void *)b);
        CHECK(ts_expect_abort(usable_ptr, b, want));
        malloc_trim(0);
    }
    snprintf(want, sizeof want, "tsalloc: free(): invalid pointer %p", (void *)b);
    CHECK(ts_expect_abort(free_twice_ptr, b, want));
    snprintf(want, sizeof want, "tsalloc: free(): double free of %p", (void *)r);
    CHECK(ts_expect_abort(free_twice_ptr, r, want));
    snprintf(want, sizeof want, "tsalloc: realloc(): invalid pointer %p", (void *)b);
    CHECK(ts_expect_abort(realloc_ptr, b, want));
    snprintf(want, sizeof want, "tsalloc: malloc_usable_size(): invalid pointer %p", (void *)r);
    CHECK(ts_expect_abort(usable_ptr, r, want));

    /* memalign: the pointer is the only way in; block + 16 is not a block. */
    unsigned char *a = memalign(256, 100);
    CHECK(a);
    snprintf(want, sizeof want, "tsalloc: free(): invalid pointer %p", (void *)(a - 256 + 16));
    CHECK(ts_expect_abort(free_twice_ptr, a - 256 + 16, want));
    free(a);
    snprintf(want, sizeof want, "tsalloc: free(): invalid pointer %p", (void *)a);
    CHECK(ts_expect_abort(free_twice_ptr, a, want));

    /* A huge block freed twice, and a pointer inside one. */
    unsigned char *h = malloc(3u << 20);
    CHECK(h);
    snprintf(want, sizeof want, "tsalloc: free(): invalid pointer %p", (void *)(h + 4096));
    CHECK(ts_expect_abort(free_twice_ptr, h + 4096, want));
    free(h);
    snprintf(want, sizeof want, "tsalloc: free(): invalid pointer %p", (void *)h);
    CHECK(ts_expect_abort(free_twice_ptr, h, want));
    free(hold);
    check_heap("misuse");
    printf("misuse: ok\n");
}
