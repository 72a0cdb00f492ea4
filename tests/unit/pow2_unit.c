/* pow2 and pow2-partitioned, single-threaded unit tests. Linked with the
 * design's static library (it is malloc here) and compiled once per design
 * (POW2_PARTITIONED=1 for the partitioned one), so the hidden dump and
 * check functions are callable. Each case runs in its own process:
 *   pow2_unit <split|realloc|mremap|giveback|dump|osfail|gap|misuse>
 *
 * Free-list snapshots are taken with the non-allocating dump into static
 * buffers, so the only heap operations between two snapshots are the ones
 * under test.
 */
#include "check.h"

#include <errno.h>
#include <malloc.h>

#include "designs/pow2/pow2.h"
#include "tsalloc/pow2.h"

#define CHUNK   ((size_t)1 << 20)
#define WHOLE   (CHUNK - 16) /* the largest request a chunk serves */
#define NAME    POW2_NAME
#define PRINT_F POW2_PUBLIC(print_freelist)
#define PRINT_B POW2_PUBLIC(print_block)

static void check_heap(const char *where) {
    char why[256];
    int problems = P2(check_heap)(why, sizeof why);
    CHECK_MSG(problems == 0, "%s: %d heap problems, first: %s", where, problems, why);
}

/* ---- free-list snapshots ------------------------------------------------ */

typedef struct {
    unsigned part, order;
    uintptr_t addr;
} fb_t;

enum { MAX_FB = 1 << 16 };
typedef struct {
    fb_t v[MAX_FB];
    size_t n;
} snap_t;

static char dump_buf[8 << 20];
static snap_t s0, s1, s2, want;

static void snapshot(snap_t *s) {
    size_t len = P2(dump_freelist)(dump_buf, sizeof dump_buf);
    CHECK(len < sizeof dump_buf);
    s->n = 0;
    unsigned part = 0;
    for (char *line = dump_buf; *line;) {
        char *end = strchr(line, '\n');
        CHECK(end);
        *end = 0;
        if (strncmp(line, "partition ", 10) == 0) {
            part = (unsigned)strtoul(line + 10, NULL, 10);
        } else if (strncmp(line, "  order ", 8) == 0) {
            char *p;
            unsigned order = (unsigned)strtoul(line + 8, &p, 10);
            p = strchr(p, ':');
            CHECK(p);
            p++;
            while (*p == ' ') {
                char *q;
                uintptr_t a = (uintptr_t)strtoull(p + 1, &q, 16);
                CHECK(q > p + 1 && s->n < MAX_FB);
                s->v[s->n++] = (fb_t){part, order, a};
                p = q;
            }
        }
        line = end + 1;
    }
}

static int fb_less(const fb_t *a, const fb_t *b) {
    if (a->part != b->part) return a->part < b->part;
    if (a->order != b->order) return a->order < b->order;
    return a->addr < b->addr;
}

/* Shell sort: qsort may allocate. */
static void sort_snap(snap_t *s) {
    for (size_t gap = s->n / 2; gap; gap /= 2)
        for (size_t i = gap; i < s->n; i++)
            for (size_t j = i; j >= gap && fb_less(&s->v[j], &s->v[j - gap]); j -= gap) {
                fb_t t = s->v[j];
                s->v[j] = s->v[j - gap];
                s->v[j - gap] = t;
            }
}

static int same_snap(snap_t *a, snap_t *b) {
    sort_snap(a);
    sort_snap(b);
    if (a->n != b->n) return 0;
    for (size_t i = 0; i < a->n; i++)
        if (a->v[i].part != b->v[i].part || a->v[i].order != b->v[i].order ||
            a->v[i].addr != b->v[i].addr)
            return 0;
    return 1;
}

static void copy_without(snap_t *dst, const snap_t *src, unsigned part, unsigned order,
                         uintptr_t addr) {
    dst->n = 0;
    for (size_t i = 0; i < src->n; i++)
        if (!(src->v[i].part == part && src->v[i].order == order && src->v[i].addr == addr))
            dst->v[dst->n++] = src->v[i];
}

/* First listed (list head) block of partition `part` with order >= k. */
static int head_at_least(const snap_t *s, unsigned part, unsigned k, fb_t *out) {
    int found = 0;
    for (size_t i = 0; i < s->n; i++) { /* listed in dump order: heads first */
        const fb_t *f = &s->v[i];
        if (f->part != part || f->order < k) continue;
        if (!found || f->order < out->order) {
            *out = *f;
            found = 1;
        }
    }
    return found;
}

static unsigned order_for(size_t n) {
    unsigned k = 5;
    while (((size_t)1 << k) < n + 16) k++;
    return k;
}

/* ---- split and merge ------------------------------------------------------ */

/* malloc takes the head of the smallest non-empty list that fits and splits
 * it, upper halves to their lists; free merges it back: the free lists are
 * exactly as before. */
static void test_split(void) {
    void *keep = malloc(24); /* make sure a chunk is split already */
    CHECK(keep);
    size_t sizes[] = {0, 1, 16, 17, 100, 1000, 5000, 40000, 300000, 600000, WHOLE};
    int predicted = 0;
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
        size_t n = sizes[i];
        unsigned k = order_for(n);
        snapshot(&s0);
        fb_t from = {0, 0, 0};
        int found = head_at_least(&s0, 0, k, &from);
        unsigned char *p = malloc(n);
        snapshot(&s1);
        CHECK(p);
        uintptr_t b = (uintptr_t)p - 16;
        CHECK_EQ(malloc_usable_size(p), ((size_t)1 << k) - 16);
        CHECK_MSG((b & (((uintptr_t)1 << k) - 1)) == 0, "block %p not aligned to 2^%u", (void *)b,
                  k);
        if (found) {
            CHECK_MSG(b == from.addr, "malloc(%zu): block %p, expected list head %p (order %u)", n,
                      (void *)b, (void *)from.addr, from.order);
            copy_without(&want, &s0, 0, from.order, from.addr);
            predicted++;
        } else {
            /* A whole chunk arrived (pool or OS). */
            CHECK((b & (CHUNK - 1)) == 0);
            want = s0;
            from.order = 20;
        }
        for (unsigned j = k; j < from.order; j++)
            want.v[want.n++] = (fb_t){0, j, b + ((uintptr_t)1 << j)};
        CHECK_MSG(same_snap(&s1, &want), "malloc(%zu): free lists after the split differ", n);
        memset(p, 0x77, n);
        free(p);
        snapshot(&s2);
        if (found) {
            CHECK_MSG(same_snap(&s2, &s0), "free after malloc(%zu): lists not merged back", n);
        } else {
            /* The whole chunk is free again: the partition's spare, or pooled. */
            CHECK(s2.n == want.n - (20 - k) || s2.n == want.n - (20 - k) + 1);
        }
        check_heap("split");
    }
    CHECK_MSG(predicted >= 6, "only %d of the splits were predictable", predicted);
    free(keep);
    check_heap("split end");
    printf("split: %d exact predictions\n", predicted);
}

/* ---- realloc in place ------------------------------------------------------------ */

static void test_realloc(void) {
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
    ts_fill(b, 112, 3);
    free(r);
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

static char line[512];

static const char *block_line(const void *p) {
    size_t n = P2(dump_block)(p, line, sizeof line);
    CHECK(n < sizeof line);
    return line;
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

static void test_mremap(void) {
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

static void test_giveback(void) {
    void *blocks[GIVE_N];
    char *b0 = sbrk(0);
    for (int i = 0; i < GIVE_N; i++) {
        blocks[i] = malloc(WHOLE);
        CHECK(blocks[i]);
        memset(blocks[i], i, 4096);
    }
    char *b1 = sbrk(0);
    CHECK_MSG(b1 - b0 >= (GIVE_N - 3) * (long)CHUNK, "heap grew by %ld only", (long)(b1 - b0));
    size_t arena1 = mallinfo2().arena;
    for (int i = 0; i < GIVE_N; i++) free(blocks[i]);
    char *b2 = sbrk(0);
    /* What stays: the partition's spare, one slack chunk, the alignment pad. */
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

/* ---- the dump formats ----------------------------------------------------------------- */

static char file_buf[1 << 20];

static const char *read_all(FILE *f) {
    rewind(f);
    size_t n = fread(file_buf, 1, sizeof file_buf - 1, f);
    file_buf[n] = 0;
    return file_buf;
}

static void test_dump(void) {
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
    /* A freed block whose buddy is in use stays a block: state=free. */
    unsigned char *r = malloc(1000);
    CHECK(realloc(r, 100) == r);
    void *b = malloc(100);
    CHECK((char *)b == (char *)r + 128);
    free(r);
    /* (formatted without stdio, which could allocate r again) */
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

static void test_osfail(void) {
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

static void test_gap(void) {
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

static void test_misuse(void) {
    /* R (order 7, lower) and B = R+128 (upper) both freed: they merge, and
     * B's header is no block any more. A second free of either aborts. */
    unsigned char *r = malloc(1000);
    CHECK(realloc(r, 100) == r);
    unsigned char *b = malloc(100);
    CHECK(b == r + 128);
    free(r);
    free(b);
    char want[96];
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
    check_heap("misuse");
    printf("misuse: ok\n");
}

int main(int argc, char **argv) {
    CHECK(argc == 2);
    const char *t = argv[1];
    if (!strcmp(t, "split"))
        test_split();
    else if (!strcmp(t, "realloc"))
        test_realloc();
    else if (!strcmp(t, "mremap"))
        test_mremap();
    else if (!strcmp(t, "giveback"))
        test_giveback();
    else if (!strcmp(t, "dump"))
        test_dump();
    else if (!strcmp(t, "osfail"))
        test_osfail();
    else if (!strcmp(t, "gap"))
        test_gap();
    else if (!strcmp(t, "misuse"))
        test_misuse();
    else
        CHECK_MSG(0, "unknown case %s", t);
    return 0;
}
