/* pow2 and pow2-partitioned, single-threaded unit tests. Linked with the
 * design's static library (it is malloc here) and compiled once per design
 * (POW2_PARTITIONED=1 for the partitioned one), so the hidden dump, check
 * and counters are callable. Each case runs in its own process:
 *   pow2_unit <split|realloc|mremap|giveback|dump|osfail|gap|misuse|
 *              lazy|lazyflush|trim>
 * Cases whose expectations depend on the merge policy read the lazy
 * watermark and also run with TSALLOC_POW2_LAZY=0 (eager merging).
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
    unsigned part, order, lazy; /* lazy: from a lazy list */
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
        } else if (strncmp(line, "  order ", 8) == 0 || strncmp(line, "  lazy ", 7) == 0) {
            unsigned lazy = line[2] == 'l';
            char *p;
            unsigned order = (unsigned)strtoul(line + (lazy ? 7 : 8), &p, 10);
            p = strchr(p, ':');
            CHECK(p);
            p++;
            while (*p == ' ') {
                char *q;
                uintptr_t a = (uintptr_t)strtoull(p + 1, &q, 16);
                CHECK(q > p + 1 && s->n < MAX_FB);
                s->v[s->n++] = (fb_t){part, order, lazy, a};
                p = q;
            }
        }
        line = end + 1;
    }
}

static int fb_less(const fb_t *a, const fb_t *b) {
    if (a->part != b->part) return a->part < b->part;
    if (a->lazy != b->lazy) return a->lazy < b->lazy;
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
            a->v[i].lazy != b->v[i].lazy || a->v[i].addr != b->v[i].addr)
            return 0;
    return 1;
}

static void copy_without(snap_t *dst, const snap_t *src, const fb_t *drop) {
    dst->n = 0;
    for (size_t i = 0; i < src->n; i++)
        if (!(src->v[i].part == drop->part && src->v[i].order == drop->order &&
              src->v[i].lazy == drop->lazy && src->v[i].addr == drop->addr))
            dst->v[dst->n++] = src->v[i];
}

/* Only the entries from free lists (lazy == 0) or from lazy lists. */
static void copy_kind(snap_t *dst, const snap_t *src, unsigned lazy) {
    dst->n = 0;
    for (size_t i = 0; i < src->n; i++)
        if (src->v[i].lazy == lazy) dst->v[dst->n++] = src->v[i];
}

/* First listed (list head) free block of partition `part` with order >= k. */
static int head_at_least(const snap_t *s, unsigned part, unsigned k, fb_t *out) {
    int found = 0;
    for (size_t i = 0; i < s->n; i++) { /* listed in dump order: heads first */
        const fb_t *f = &s->v[i];
        if (f->part != part || f->order < k || f->lazy) continue;
        if (!found || f->order < out->order) {
            *out = *f;
            found = 1;
        }
    }
    return found;
}

/* Head of partition `part`'s lazy list of order k. */
static int lazy_head(const snap_t *s, unsigned part, unsigned k, fb_t *out) {
    for (size_t i = 0; i < s->n; i++)
        if (s->v[i].part == part && s->v[i].order == k && s->v[i].lazy) {
            *out = s->v[i];
            return 1;
        }
    return 0;
}

static size_t count_lazy(const snap_t *s, unsigned part, unsigned k) {
    size_t n = 0;
    for (size_t i = 0; i < s->n; i++)
        n += s->v[i].part == part && s->v[i].order == k && s->v[i].lazy;
    return n;
}

static unsigned order_for(size_t n) {
    unsigned k = 5;
    while (((size_t)1 << k) < n + 16) k++;
    return k;
}

/* The lazy watermark of order k: 0 when merging is eager. Valid once the
 * heap has its first chunk. */
static unsigned lazy_cap(unsigned k) {
    return k < 20 ? atomic_load(&P2(lazy_cap)[k - 5]) : 0;
}

static pow2_counters_t counters(void) {
    pow2_counters_t c;
    P2(counters)(&c);
    return c;
}

/* ---- split and merge ------------------------------------------------------ */

/* malloc takes the most recently freed lazy block of its order, else the
 * head of the smallest non-empty free list that fits and splits it, upper
 * halves to their lists; free puts the block on its lazy list while under
 * the watermark, else merges it back: the free lists are exactly as before.
 * A request no free block fits first merges every lazy block. */
static void test_split(void) {
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

static const char *block_line(const void *p);
static char line[512];

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

static void test_lazy(void) {
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
static void test_lazyflush(void) {
    enum { N = 8 };
    unsigned char *b[N];
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

static void test_trim(void) {
    char *b0 = sbrk(0);
    size_t arena0 = mallinfo2().arena;
    alloc_trim_blocks();
    char *b1 = sbrk(0);
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
        CHECK_MSG(b2 <= b0 + 3 * (long)CHUNK, "sbrk(0) %p, was %p before", b2, b0);
    }
    check_heap("pinned");

    /* malloc_trim merges every lazy block first: every chunk is whole again
     * and the top of the heap goes back. */
    CHECK_EQ(malloc_trim(0), 1);
    c = counters();
    CHECK_EQ(c.lazy_blocks, 0);
    char *b3 = sbrk(0);
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
    else if (!strcmp(t, "lazy"))
        test_lazy();
    else if (!strcmp(t, "lazyflush"))
        test_lazyflush();
    else if (!strcmp(t, "trim"))
        test_trim();
    else
        CHECK_MSG(0, "unknown case %s", t);
    return 0;
}
