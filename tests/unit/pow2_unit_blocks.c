/* pow2 unit cases (see pow2_unit.c): splitting and merging, realloc in
 * place, mapped blocks and mremap, giving the heap top back.
 */
#include "pow2_unit.h"

/* ---- split and merge ------------------------------------------------------ */

/* malloc takes the most recently freed lazy block of its order, else the
 * head of the smallest non-empty free list that fits and splits it, upper
 * halves to their lists; free puts the block on its lazy list while under
 * the watermark, else merges it back: the free lists are exactly as before.
 * A request no free block fits first merges every lazy block. */
void test_split(void) {
    void *keep = malloc(24); /* make sure a chunk is split already */
    CHECK(keep);
    static snap_t base;
    snapshot(&base); /* keep is the only block: every lazy block merged gives this */
    CHECK(count_lazy(&base, 0, order_for(24)) == 0);
    size_t sizes[] = {0, 1, 16, 17, 100, 1000, 5000, 40000, 300000, 600000, WHOLE};
    int predicted = 0, lazy_hits = 0, lazy_frees = 0;
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
        size_t n = sizes[i];
        unsigned k = order_for(n);
        snapshot(&s0);
        pow2_counters_t c0 = counters();
        fb_t from = {0, 0, 0, 0};
        int hit = lazy_head(&s0, 0, k, &from);
        int found = hit || head_at_least(&s0, 0, k, &from);
        unsigned char *p = malloc(n);
        snapshot(&s1);
        pow2_counters_t c1 = counters();
        CHECK(p);
        uintptr_t b = (uintptr_t)p - 16;
        CHECK_EQ(malloc_usable_size(p), ((size_t)1 << k) - 16);
        CHECK_MSG((b & (((uintptr_t)1 << k) - 1)) == 0, "block %p not aligned to 2^%u", (void *)b,
                  k);
        if (found) {
            CHECK_MSG(b == from.addr, "malloc(%zu): block %p, expected %s head %p (order %u)", n,
                      (void *)b, hit ? "lazy" : "list", (void *)from.addr, from.order);
            copy_without(&want, &s0, &from);
            predicted++;
        } else {
            /* A whole chunk arrived (pool or OS), after every lazy block merged. */
            CHECK((b & (CHUNK - 1)) == 0);
            copy_kind(&want, &base, 0);
            from.order = 20;
        }
        for (unsigned j = k; j < from.order; j++)
            want.v[want.n++] = (fb_t){0, j, 0, b + ((uintptr_t)1 << j)};
        CHECK_MSG(same_snap(&s1, &want), "malloc(%zu): free lists after the split differ", n);
        CHECK_EQ(c1.splits - c0.splits, (size_t)(from.order - k));
        lazy_hits += hit;
        memset(p, 0x77, n);
        size_t lazy_before = count_lazy(&s1, 0, k);
        free(p);
        snapshot(&s2);
        pow2_counters_t c2 = counters();
        if (lazy_before < lazy_cap(k)) {
            /* Kept lazy: nothing merges. */
            want = s1;
            want.v[want.n++] = (fb_t){0, k, 1, b};
            CHECK_MSG(same_snap(&s2, &want), "free after malloc(%zu): not kept lazy", n);
            CHECK_EQ(c2.merges, c1.merges);
            lazy_frees++;
        } else if (found) {
            CHECK_MSG(same_snap(&s2, &s0), "free after malloc(%zu): lists not merged back", n);
            CHECK_EQ(c2.merges - c1.merges, (size_t)(from.order - k));
        } else {
            /* The whole chunk is free again: the partition's spare, or pooled. */
            CHECK(s2.n == want.n - (20 - k) || s2.n == want.n - (20 - k) + 1);
        }
        check_heap("split");
    }
    CHECK_MSG(predicted >= 6, "only %d of the splits were predictable", predicted);
    if (lazy_cap(5)) CHECK(lazy_hits >= 2 && lazy_frees >= 6);
    free(keep);
    check_heap("split end");
    printf("split: %d exact predictions, %d lazy hits, %d lazy frees\n", predicted, lazy_hits,
           lazy_frees);
}

/* ---- realloc in place ------------------------------------------------------------ */

void test_realloc(void) {
    /* Own a 1 KiB block R, then shrink it: R keeps order 7, its upper halves
     * R+128 (7), R+256 (8), R+512 (9) become free list heads. */
    unsigned char *r = malloc(1000);
    CHECK(r);
    uintptr_t R = (uintptr_t)r - 16;
    ts_fill(r, 1000, 1);
    CHECK(realloc(r, 100) == r);
    CHECK(ts_verify(r, 100, 1));
    CHECK_EQ(malloc_usable_size(r), 112);
    snapshot(&s0);
    int seen = 0;
    for (size_t i = 0; i < s0.n; i++)
        if (s0.v[i].part == 0 && ((s0.v[i].order == 7 && s0.v[i].addr == R + 128) ||
                                  (s0.v[i].order == 8 && s0.v[i].addr == R + 256) ||
                                  (s0.v[i].order == 9 && s0.v[i].addr == R + 512)))
            seen++;
    CHECK_MSG(seen == 3, "shrink freed %d of the 3 upper halves", seen);

    /* Grow to the right: the free buddies join, the pointer stays. */
    CHECK(realloc(r, 200) == r);
    CHECK(ts_verify(r, 100, 1));
    CHECK_EQ(malloc_usable_size(r), 240);
    CHECK(realloc(r, 1000) == r);
    CHECK_EQ(malloc_usable_size(r), 1008);
    CHECK(ts_verify(r, 100, 1));
    check_heap("right merge");

    /* Grow to the left: R free (order 7), the block at R+128 grows into it. */
    ts_fill(r, 1000, 2);
    CHECK(realloc(r, 100) == r);
    unsigned char *b = malloc(100);
    CHECK_MSG((uintptr_t)b == R + 128 + 16, "b = %p, expected R+128 = %p", (void *)b,
              (void *)(R + 128 + 16));
    /* The whole block (112 bytes) asked for, in place: it moves whole. */
    CHECK_EQ(malloc_usable_size(b), 112);
    b = realloc(b, 112);
    CHECK((uintptr_t)b == R + 128 + 16);
    ts_fill(b, 112, 3);
    free(r);
    /* Lazy merging keeps r unmerged; growth takes lazy buddies as well. */
    CHECK_MSG(strstr(block_line(r), lazy_cap(7) ? " state=lazy " : " state=free "), "%s", line);
    unsigned char *m = realloc(b, 200);
    CHECK_MSG(m == r, "left merge: got %p, expected %p", (void *)m, (void *)r);
    CHECK_MSG(ts_verify(m, 112, 3), "left merge lost contents");
    CHECK_EQ(malloc_usable_size(m), 240);
    check_heap("left merge");

    /* A buddy in use: no merge, the block moves, contents follow. */
    unsigned char *x = realloc(m, 100); /* m at R, order 7 again; R+128 free */
    CHECK(x == m);
    unsigned char *y = malloc(100); /* takes R+128 */
    CHECK((uintptr_t)y == R + 128 + 16);
    unsigned char *z = realloc(x, 500);
    CHECK(z != x);
    CHECK(ts_verify(z, 112, 3));
    free(y);
    free(z);

    /* memalign blocks: aligned, usable up to their block's end, freed whole. */
    for (size_t a = 32; a <= 65536; a *= 4) {
        unsigned char *p = memalign(a, 3 * a + 5);
        CHECK(p && ((uintptr_t)p & (a - 1)) == 0);
        size_t u = malloc_usable_size(p);
        CHECK(u >= 3 * a + 5);
        ts_fill(p, u, a);
        unsigned char *q = realloc(p, u); /* fits: stays */
        CHECK(q == p);
        q = realloc(p, u + 1); /* moves */
        CHECK(q && ts_verify(q, u, a));
        free(q);
    }
    check_heap("realloc end");
    printf("realloc: ok\n");
}

/* ---- mapped blocks and mremap ----------------------------------------------------- */

static void fill_pages(unsigned char *p, size_t n, unsigned char tag) {
    for (size_t i = 0; i < n; i += 4096) p[i] = (unsigned char)(tag + (i >> 12));
    p[n - 1] = tag;
}
static int verify_pages(const unsigned char *p, size_t n, unsigned char tag) {
    for (size_t i = 0; i < n; i += 4096)
        if (p[i] != (unsigned char)(tag + (i >> 12))) return 0;
    return 1;
}

void test_mremap(void) {
    char want_line[160];
    /* The threshold: WHOLE bytes fit a chunk, one more byte is mapped. */
    void *h = malloc(WHOLE), *m = malloc(WHOLE + 1);
    CHECK(h && m);
    CHECK(strstr(block_line(h), " order=20 size=1048576 "));
    snprintf(want_line, sizeof want_line, "%p: mapped size=%zu usable=%zu\n", m, CHUNK, CHUNK);
    CHECK_MSG(strcmp(block_line(m), want_line) == 0, "%s", line);
    CHECK(((uintptr_t)m & 4095) == 0);
    free(h);
    free(m);

    size_t n = 3u << 20;
    unsigned char *p = malloc(n);
    CHECK(p);
    fill_pages(p, n, 7);
    struct mallinfo2 mi = mallinfo2();
    CHECK(mi.hblks >= 1 && mi.hblkhd >= n);

    /* Grow: mremap, contents preserved. */
    size_t big = 40u << 20;
    unsigned char *q = realloc(p, big);
    CHECK(q);
    CHECK(verify_pages(q, n, 7));
    snprintf(want_line, sizeof want_line, "%p: mapped size=%zu usable=%zu\n", (void *)q, big, big);
    CHECK_MSG(strcmp(block_line(q), want_line) == 0, "%s", line);
    fill_pages(q, big, 9);

    /* When mremap fails, realloc fails and the block is untouched: realloc
     * of a mapped block goes through mremap, not map-and-copy. */
    long failures = _ts_os_test_failures();
    _ts_os_test_fail(TS_OS_FAIL_REMAP, 0, -1);
    errno = 0;
    CHECK(realloc(q, 80u << 20) == NULL && errno == ENOMEM);
    _ts_os_test_fail(0, 0, 0);
    CHECK_EQ(_ts_os_test_failures(), failures + 1);
    CHECK(verify_pages(q, big, 9));

    /* Shrink: mremap in place never moves. */
    unsigned char *s = realloc(q, (2u << 20) + 100);
    CHECK(s == q);
    CHECK(strstr(block_line(s), "mapped size=2101248 "));
    CHECK(verify_pages(s, 2u << 20, 9));

    /* Down to a heap size: moves into the heap, the mapping goes. */
    size_t before = mallinfo2().hblks;
    unsigned char *t = realloc(s, 5000);
    CHECK(t && strstr(block_line(t), ": heap block="));
    CHECK(t[0] == 9 && t[4096] == 10);
    CHECK_EQ(mallinfo2().hblks, before - 1);

    /* Heap to mapped and back. */
    unsigned char *u = realloc(t, 5u << 20);
    CHECK(u && strstr(block_line(u), "mapped size=5242880 "));
    CHECK(u[0] == 9 && u[4096] == 10);
    free(u);
    check_heap("mremap");
    printf("mremap: ok\n");
}

/* ---- giving the heap top back ------------------------------------------------------ */

enum { GIVE_N = 24 };

void test_giveback(void) {
    void *blocks[GIVE_N];
    char *b0 = sbrk(0);
    for (int i = 0; i < GIVE_N; i++) {
        blocks[i] = malloc(WHOLE);
        CHECK(blocks[i]);
        memset(blocks[i], i, 4096);
    }
    char *b1 = sbrk(0);
    /* Exact: each block takes a chunk; 3 of them may come from the spare,
     * the slack chunk and the pad below. Measured: 24 chunks. */
    CHECK_MSG(b1 - b0 >= (GIVE_N - 3) * (long)CHUNK, "heap grew by %ld only", (long)(b1 - b0));
    size_t arena1 = mallinfo2().arena;
    for (int i = 0; i < GIVE_N; i++) free(blocks[i]);
    char *b2 = sbrk(0);
    /* What stays: the partition's spare, one slack chunk, the alignment pad
     * (under a chunk): exact, 3 chunks. Measured: 2.20 (pow2) and 2.57
     * (pow2-partitioned) chunks; kept chunks would leave the 24. */
    CHECK_MSG(b2 <= b0 + 3 * (long)CHUNK, "sbrk(0) %p, was %p before, %p at the peak", b2, b0, b1);
    CHECK(mallinfo2().arena < arena1);
    check_heap("giveback");

    /* Below the threshold nothing goes: two chunks up, the top one freed. */
    void *x = malloc(WHOLE), *y = malloc(WHOLE);
    CHECK(x && y);
    char *b3 = sbrk(0);
    free(y);
    CHECK(sbrk(0) == b3);
    free(x); /* one free chunk at the top: under the 2 MiB threshold */
    CHECK(sbrk(0) == b3);
    check_heap("threshold");

    /* malloc_trim gives back the slack and the spare too. */
    CHECK_EQ(malloc_trim(0), 1);
    char *b4 = sbrk(0);
    CHECK_MSG(b4 <= b0 + (long)CHUNK, "after trim sbrk(0) %p, was %p", b4, b0);
    check_heap("trim");
    void *again = malloc(WHOLE); /* the heap works after all that */
    CHECK(again);
    memset(again, 1, WHOLE);
    free(again);
    check_heap("giveback end");
    printf("giveback: %ld KiB at the peak, %ld KiB after free, %ld KiB after trim\n",
           (long)(b1 - b0) >> 10, (long)(b2 - b0) >> 10, (long)(b4 - b0) >> 10);
}
