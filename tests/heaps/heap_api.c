/* First-class heaps (ts_heap_*, docs/heaps.md): blocks of two heaps never
 * overlap and outlive the other heap's destruction; visit reports exactly
 * the live blocks with their usable sizes (the default heap's too); stats
 * count them; frees from other threads reach the heap before destroy; a
 * heap passes from one thread to another, and on to a fork child; delete
 * keeps blocks usable;
 * destroy gives the pages back (run with TSALLOC_PURGE_DELAY_MS=0, so the
 * purge rules say at once); the ts_heap_* variants of the malloc family.
 */
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "tsalloc.h"

#define LARGE ((size_t)600 * 1024) /* above the largest class: a large block */

static uint64_t rng = 42;

/* A size of every kind: small, medium, big pages, now and then large. */
static size_t some_size(void) {
    uint64_t r = ts_rand(&rng) % 1000;
    if (r < 700) return ts_rand_range(&rng, 1, 256);
    if (r < 900) return ts_rand_range(&rng, 257, 8192);
    if (r < 995) return ts_rand_range(&rng, 8193, 300 * 1024);
    return LARGE + ts_rand_range(&rng, 0, 100000);
}

typedef struct {
    void *p;
    size_t size;
    int live;
} blk_t;

/* ---- visit: exactly the live blocks ------------------------------------------ */

typedef struct {
    blk_t *b;
    size_t n, seen, wrong;
} visit_t;

static int blk_cmp(const void *x, const void *y) {
    uintptr_t a = (uintptr_t)((const blk_t *)x)->p, b = (uintptr_t)((const blk_t *)y)->p;
    return a < b ? -1 : a > b;
}

/* Binary search in the sorted array; each live block must be seen once. */
static bool visitor(void *arg, void *block, size_t usable) {
    visit_t *v = arg;
    size_t lo = 0, hi = v->n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if ((uintptr_t)v->b[mid].p < (uintptr_t)block)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == v->n || v->b[lo].p != block || v->b[lo].live != 1 ||
        usable != malloc_usable_size(block)) {
        v->wrong++;
        return true;
    }
    v->b[lo].live = 2; /* seen */
    v->seen++;
    return true;
}

static size_t count_live(blk_t *b, size_t n) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++) k += b[i].live != 0;
    return k;
}

static void check_visit(ts_heap_t *h, blk_t *b, size_t n) {
    qsort(b, n, sizeof *b, blk_cmp);
    visit_t v = {b, n, 0, 0};
    CHECK(ts_heap_visit(h, visitor, &v));
    CHECK_EQ(v.wrong, 0);
    CHECK_EQ(v.seen, count_live(b, n));
    for (size_t i = 0; i < n; i++)
        if (b[i].live) b[i].live = 1;
}

static bool stop_at_third(void *arg, void *block, size_t usable) {
    (void)block;
    (void)usable;
    return ++*(int *)arg < 3;
}

/* ---- frees from other threads ----------------------------------------------------- */

typedef struct {
    blk_t *b;
    size_t from, to;
} span_t;

static void *free_odd(void *arg) {
    span_t *s = arg;
    for (size_t i = s->from; i < s->to; i++)
        if (i % 2 && s->b[i].live) {
            free(s->b[i].p);
            s->b[i].live = 0;
        }
    return NULL;
}

static void test_visit_stats_remote(void) {
    enum { N = 6000 };
    static blk_t b[N];
    ts_heap_t *h = ts_heap_new();
    CHECK(h != NULL);
    size_t bytes = 0, larges = 0;
    for (size_t i = 0; i < N; i++) {
        b[i].size = some_size();
        b[i].p = ts_heap_malloc(h, b[i].size);
        CHECK(b[i].p != NULL);
        b[i].live = 1;
        memset(b[i].p, 0xA5, b[i].size); /* whatever the program writes */
    }
    /* This thread frees every fifth (a free of a heap block is a remote
     * free, whichever thread makes it), two threads the odd ones. */
    for (size_t i = 0; i < N; i += 5) {
        free(b[i].p);
        b[i].live = 0;
    }
    pthread_t t[2];
    span_t s[2] = {{b, 0, N / 2}, {b, N / 2, N}};
    for (int i = 0; i < 2; i++) CHECK(pthread_create(&t[i], NULL, free_odd, &s[i]) == 0);
    for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
    for (size_t i = 0; i < N; i++)
        if (b[i].live) {
            bytes += malloc_usable_size(b[i].p);
            larges += b[i].size > 512 * 1024;
        }
    check_visit(h, b, N);
    ts_heap_stats_t st;
    ts_heap_stats(h, &st);
    CHECK_EQ(st.live_blocks, count_live(b, N));
    CHECK_EQ(st.live_bytes, bytes);
    CHECK_EQ(st.large_blocks, larges);
    CHECK(st.pages > 0 && st.page_bytes >= st.live_bytes - st.large_bytes);
    CHECK(st.peak_bytes >= st.page_bytes + st.large_bytes);
    /* Allocating again reuses what the other threads gave back; still exact. */
    for (size_t i = 0; i < N; i++)
        if (!b[i].live && b[i].size <= 1024) {
            b[i].p = ts_heap_malloc(h, b[i].size);
            b[i].live = 1;
        }
    check_visit(h, b, N);
    int calls = 0;
    CHECK(!ts_heap_visit(h, stop_at_third, &calls));
    CHECK_EQ(calls, 3);
    ts_heap_destroy(h);
}

/* ---- two heaps: disjoint, and each outlives the other ---------------------------- */

static void test_two_heaps(void) {
    enum { N = 3000 };
    static blk_t a[N], c[N];
    static ts_range_t r[2 * N];
    ts_heap_t *ha = ts_heap_new(), *hc = ts_heap_new();
    CHECK(ha && hc && ha != hc);
    for (size_t i = 0; i < N; i++) {
        a[i].size = some_size();
        c[i].size = some_size();
        a[i].p = ts_heap_malloc(ha, a[i].size);
        c[i].p = ts_heap_malloc(hc, c[i].size);
        CHECK(a[i].p && c[i].p);
        ts_fill(a[i].p, a[i].size, i);
        ts_fill(c[i].p, c[i].size, i + N);
        r[2 * i] = (ts_range_t){(uintptr_t)a[i].p, a[i].size};
        r[2 * i + 1] = (ts_range_t){(uintptr_t)c[i].p, c[i].size};
    }
    CHECK(ts_find_overlap(r, 2 * N) < 0);
    ts_heap_destroy(ha);
    for (size_t i = 0; i < N; i++) CHECK(ts_verify(c[i].p, c[i].size, i + N));
    /* A new heap after the destruction: still apart from hc's blocks. */
    ha = ts_heap_new();
    for (size_t i = 0; i < N; i++) {
        a[i].p = ts_heap_malloc(ha, a[i].size);
        ts_fill(a[i].p, a[i].size, i);
        r[2 * i] = (ts_range_t){(uintptr_t)a[i].p, a[i].size};
        r[2 * i + 1] = (ts_range_t){(uintptr_t)c[i].p, c[i].size};
    }
    CHECK(ts_find_overlap(r, 2 * N) < 0);
    ts_heap_destroy(hc);
    for (size_t i = 0; i < N; i++) CHECK(ts_verify(a[i].p, a[i].size, i));
    ts_heap_destroy(ha);
}

/* ---- delete: blocks stay valid, in the default heap --------------------------------- */

static void *free_all(void *arg) {
    span_t *s = arg;
    for (size_t i = s->from; i < s->to; i++) free(s->b[i].p);
    return NULL;
}

static void test_delete(void) {
    enum { N = 2000 };
    static blk_t b[N];
    ts_heap_t *h = ts_heap_new();
    for (size_t i = 0; i < N; i++) {
        b[i].size = some_size();
        b[i].p = ts_heap_malloc(h, b[i].size);
        ts_fill(b[i].p, b[i].size, i);
    }
    ts_heap_stats_t before;
    ts_heap_stats(NULL, &before);
    ts_heap_delete(h);
    ts_heap_stats_t after;
    ts_heap_stats(NULL, &after);
    CHECK(after.pages > before.pages); /* the pages with live blocks moved here */
    for (size_t i = 0; i < N; i++) {
        CHECK(ts_verify(b[i].p, b[i].size, i));
        CHECK(malloc_usable_size(b[i].p) >= b[i].size);
    }
    /* Usable as any block: realloc, then frees here and in another thread. */
    for (size_t i = 0; i < N; i += 2) {
        b[i].p = realloc(b[i].p, b[i].size + 100);
        CHECK(ts_verify(b[i].p, b[i].size, i));
        free(b[i].p);
    }
    for (size_t i = 1; i < N; i += 2) b[i / 2].p = b[i].p;
    span_t s = {b, 0, N / 2};
    pthread_t t;
    CHECK(pthread_create(&t, NULL, free_all, &s) == 0);
    pthread_join(t, NULL);
}

/* ---- destroy gives memory back ---------------------------------------------------- */

static void test_destroy_returns_memory(void) {
    CHECK_EQ(ts_option_get("purge_delay_ms"), 0); /* set by the test's environment */
    for (int round = 0; round < 2; round++) {
        size_t rss0 = ts_rss_bytes();
        ts_heap_t *h = ts_heap_new();
        size_t total = 0;
        for (size_t i = 0; total < ((size_t)64 << 20); i++) {
            size_t n = i % 64 == 63 ? ((size_t)1 << 20) : ts_rand_range(&rng, 16, 70000);
            char *p = ts_heap_malloc(h, n);
            CHECK(p != NULL);
            memset(p, 1, n); /* resident */
            total += n;
        }
        size_t rss1 = ts_rss_bytes();
        /* 64 MB written: RSS rises 66 MiB (measured); 32 MiB is half that,
         * enough to show the heap's memory was resident. */
        CHECK_MSG(rss1 > rss0 + ((size_t)32 << 20), "rss %zu -> %zu", rss0, rss1);
        ts_heap_destroy(h);
        size_t rss2 = ts_rss_bytes();
        /* 4 to 136 KiB stay (measured): 2 MiB is 15x that, and about 1/30
         * of what a destroy that kept its pages would leave. */
        CHECK_MSG(rss2 < rss0 + ((size_t)2 << 20), "round %d: rss %zu -> %zu -> %zu", round, rss0,
                  rss1, rss2);
    }
}

/* ---- destroy right after this thread freed some of the heap's blocks ----------------- */

/* Frees of a heap's blocks are pushed to it at once, never held back in the
 * freeing thread's batches: such a batch, pushed after the heap was
 * destroyed, would land in a page reused by another heap and hand its live
 * blocks out again. */
static void test_destroy_after_own_frees(void) {
    enum { N = 512, M = 4000 };
    static void *p[N];
    static ts_range_t r[M];
    for (int round = 0; round < 4; round++) {
        ts_heap_t *h = ts_heap_new();
        for (size_t i = 0; i < N; i++) p[i] = ts_heap_malloc(h, 48);
        for (size_t i = 0; i < N; i += 3) free(p[i]);
        ts_heap_destroy(h);
        ts_heap_t *h2 = ts_heap_new();
        for (size_t i = 0; i < M; i++) {
            if (i == M / 2) malloc_trim(0); /* pushes whatever this thread held back */
            void *q = ts_heap_malloc(h2, 48);
            ts_fill(q, 48, i);
            r[i] = (ts_range_t){(uintptr_t)q, 48};
        }
        for (size_t i = 0; i < M; i++) CHECK(ts_verify((void *)r[i].start, 48, i));
        CHECK(ts_find_overlap(r, M) < 0);
        ts_heap_destroy(h2);
    }
}

/* ---- one heap, two threads in turn; the default heap's visit ----------------------- */

typedef struct {
    ts_heap_t *h;
    void *p[1000];
} turn_t;

static void *alloc_turn(void *arg) {
    turn_t *t = arg;
    for (size_t i = 0; i < 1000; i++) {
        t->p[i] = ts_heap_malloc(t->h, 100 + i);
        ts_fill(t->p[i], 100 + i, i);
    }
    return NULL;
}

typedef struct {
    void *want[3];
    int found;
} find_t;

static bool find_blocks(void *arg, void *block, size_t usable) {
    find_t *f = arg;
    for (int i = 0; i < 3; i++)
        if (block == f->want[i] && usable >= 40) f->found++;
    return true;
}

static void test_turns_and_default_visit(void) {
    turn_t t = {ts_heap_new(), {0}};
    pthread_t th;
    CHECK(pthread_create(&th, NULL, alloc_turn, &t) == 0);
    pthread_join(th, NULL); /* the heap passes to this thread */
    void *more = ts_heap_malloc(t.h, 5000);
    ts_heap_stats_t st;
    ts_heap_stats(t.h, &st);
    CHECK_EQ(st.live_blocks, 1001);
    for (size_t i = 0; i < 1000; i++) CHECK(ts_verify(t.p[i], 100 + i, i));
    free(more);
    ts_heap_destroy(t.h);
    /* The default heap: plain malloc's blocks, seen by a visitor that does
     * not allocate. */
    find_t f = {{malloc(40), malloc(40), malloc(40)}, 0};
    CHECK(ts_heap_visit(NULL, find_blocks, &f));
    CHECK_EQ(f.found, 3);
    for (int i = 0; i < 3; i++) free(f.want[i]);
    f.found = 0;
    ts_heap_visit(NULL, find_blocks, &f);
    CHECK_EQ(f.found, 0);
}

/* ---- fork: the child keeps using the parent's heap --------------------------------- */

static void test_fork(void) {
    ts_heap_t *h = ts_heap_new();
    void *p[500];
    for (size_t i = 0; i < 500; i++) {
        p[i] = ts_heap_malloc(h, 24 + i);
        ts_fill(p[i], 24 + i, i);
    }
    fflush(NULL);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        int ok = 1;
        for (size_t i = 0; i < 500; i++) {
            ok &= ts_verify(p[i], 24 + i, i);
            if (i % 2) free(p[i]);
            void *q = ts_heap_malloc(h, 24 + i);
            ok &= q != NULL;
            if (q) memset(q, 0, 24 + i);
        }
        ts_heap_stats_t st;
        ts_heap_stats(h, &st);
        ok &= st.live_blocks == 750;
        ts_heap_destroy(h);
        _exit(ok ? 0 : 1);
    }
    int status = 0;
    CHECK(waitpid(pid, &status, 0) == pid);
    CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status %d", status);
    for (size_t i = 0; i < 500; i++) CHECK(ts_verify(p[i], 24 + i, i));
    ts_heap_destroy(h);
}

/* ---- the malloc family ------------------------------------------------------------ */

static void test_family(void) {
    ts_heap_t *h = ts_heap_new();
    ts_heap_t *d = ts_heap_get_default();
    CHECK(d != NULL && d != h && ts_heap_get_default() == d);
    char *s = ts_heap_strdup(h, "heap");
    CHECK(s && strcmp(s, "heap") == 0);
    char *t = ts_heap_strndup(h, "heaps and more", 5);
    CHECK(t && strcmp(t, "heaps") == 0);
    unsigned char *z = ts_heap_calloc(h, 1000, 3);
    for (size_t i = 0; i < 3000; i++) CHECK(z[i] == 0);
    unsigned char *zl = ts_heap_calloc(h, 1, LARGE);
    for (size_t i = 0; i < LARGE; i += 512) CHECK(zl[i] == 0);
    errno = 0;
    CHECK(ts_heap_calloc(h, SIZE_MAX / 2, 3) == NULL && errno == ENOMEM);
    for (size_t align = 32; align <= ((size_t)1 << 20); align *= 4) {
        void *p = ts_heap_aligned_alloc(h, align, 100);
        CHECK(p && (uintptr_t)p % align == 0);
    }
    errno = 0;
    CHECK(ts_heap_aligned_alloc(h, 48, 100) == NULL && errno == EINVAL);
    /* realloc within the heap: grown blocks move into it, large ones stay its. */
    char *r = ts_heap_realloc(h, NULL, 10);
    strcpy(r, "abc");
    r = ts_heap_realloc(h, r, 5000);
    CHECK(strcmp(r, "abc") == 0);
    r = ts_heap_realloc(h, r, LARGE);
    CHECK(strcmp(r, "abc") == 0);
    r = ts_heap_realloc(h, r, 3 * LARGE);
    CHECK(strcmp(r, "abc") == 0);
    ts_heap_stats_t st;
    ts_heap_stats(h, &st);
    CHECK_EQ(st.large_blocks, 4); /* zl, r, and the blocks aligned to 128 and 512 KiB */
    CHECK(st.large_bytes >= 4 * LARGE);
    CHECK(ts_heap_realloc(h, s, 0) == NULL); /* frees, as realloc */
    /* The default heap's handle allocates as malloc does. */
    void *m = ts_heap_malloc(d, 100);
    CHECK(m && malloc_usable_size(m) >= 100);
    free(m);
    ts_heap_destroy(h);
    ts_heap_destroy(NULL);
    ts_heap_delete(NULL);
}

int main(void) {
    test_family();
    test_two_heaps();
    test_visit_stats_remote();
    test_delete();
    test_turns_and_default_visit();
    test_destroy_after_own_frees();
    test_fork();
    test_destroy_returns_memory();
    printf("heap_api: ok\n");
    return 0;
}
