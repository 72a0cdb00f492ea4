/* The rest of the design interface: malloc(0), alignment, realloc in place
 * (into the free next neighbour or the top, shrinking by splitting), realloc
 * that moves, memalign, calloc over dirty memory, usable_size.
 * Usage: bestfit_api lock|nolock */
#include "bestfit_harness.h"

int main(int argc, char **argv) {
    const bf_api_t *api = bf_api_from_args(argc, argv);
    bf_snapshot_t s = {0};

    /* malloc(0): unique, aligned, freeable pointers. */
    void *z[100];
    for (int i = 0; i < 100; i++) {
        z[i] = api->malloc(0);
        CHECK(z[i] && ((uintptr_t)z[i] & 15) == 0);
        CHECK_EQ(api->usable(z[i]), 32);
        for (int j = 0; j < i; j++) CHECK(z[i] != z[j]);
    }
    for (int i = 0; i < 100; i++) api->free(z[i]);
    /* Every size gives a 16-byte aligned block of at least that size. */
    for (size_t n = 0; n < 600; n++) {
        char *p = api->malloc(n);
        CHECK(p && ((uintptr_t)p & 15) == 0 && api->usable(p) >= n);
        CHECK_EQ(api->usable(p), api->block_size(n) - 16);
        api->free(p);
    }
    BF_CHECK_HEAP(api);

    /* realloc grows in place into the free block after it. */
    char *a = api->malloc(100), *b = api->malloc(300), *guard = api->malloc(10);
    CHECK_EQ(bf_block(b), bf_block(a) + 128);
    ts_fill(a, 100, 7);
    api->free(b);
    char *a2 = api->realloc(a, 400);
    CHECK(a2 == a);
    CHECK(ts_verify(a, 100, 7));
    CHECK_EQ(api->usable(a), 432); /* 128 + 320 = 448 bytes: 416 asked, 32 left is too small */
    bf_snapshot(api, &s);
    CHECK(!bf_containing(&s, bf_block(a) + 200));
    /* Shrinking splits the tail off and frees it. */
    ts_fill(a, 400, 8);
    a2 = api->realloc(a, 50);
    CHECK(a2 == a);
    CHECK(ts_verify(a, 50, 8));
    CHECK_EQ(api->usable(a), 64);
    bf_snapshot(api, &s);
    const bf_free_t *tail = bf_find(&s, bf_block(a) + 80);
    CHECK(tail && tail->size == 448 - 80);
    /* Not enough room after it: moves, keeps the contents, frees the old block. */
    ts_fill(a, 50, 9);
    char *moved = api->realloc(a, 5000);
    CHECK(moved && moved != a);
    CHECK(ts_verify(moved, 50, 9));
    bf_snapshot(api, &s);
    CHECK(bf_find(&s, bf_block(a)) && bf_find(&s, bf_block(a))->size == 448);
    /* The top block grows into the reserve. */
    char *top = api->malloc(1000); /* larger than the 448-byte hole: from the reserve */
    bf_snapshot(api, &s);
    CHECK(s.blocks[s.count - 1].is_reserve && s.blocks[s.count - 1].start == bf_block(top) + 1024);
    ts_fill(top, 64, 10);
    char *top2 = api->realloc(top, 20000);
    CHECK(top2 == top);
    CHECK(ts_verify(top, 64, 10));
    bf_snapshot(api, &s);
    CHECK(s.blocks[s.count - 1].is_reserve &&
          s.blocks[s.count - 1].start == bf_block(top) + api->block_size(20000));
    api->free(top);
    api->free(moved);
    api->free(guard);
    BF_CHECK_HEAP(api);

    /* memalign: every power of two from 32 to 64 KiB, various sizes. */
    uint64_t rng = 5;
    void *al[200];
    size_t al_len[200];
    for (int i = 0; i < 200; i++) {
        size_t align = (size_t)32 << (i % 12), n = ts_rand_range(&rng, 0, 5000);
        al[i] = api->memalign(align, n);
        al_len[i] = n;
        CHECK(al[i] && ((uintptr_t)al[i] & (align - 1)) == 0 && api->usable(al[i]) >= n);
        ts_fill(al[i], n, (uint64_t)i);
        if (i % 10 == 0) BF_CHECK_HEAP(api);
    }
    ts_range_t r[200];
    for (int i = 0; i < 200; i++)
        r[i] = (ts_range_t){bf_block(al[i]), bf_block_size_of(api, al[i])};
    CHECK_EQ(ts_find_overlap(r, 200), (unsigned long long)-1);
    for (int i = 0; i < 200; i++) {
        CHECK(ts_verify(al[i], al_len[i], (uint64_t)i));
        api->free(al[i]);
    }
    BF_CHECK_HEAP(api);

    /* calloc zeroes reused, dirty memory. */
    for (int round = 0; round < 20; round++) {
        size_t n = ts_rand_range(&rng, 1, 20000);
        unsigned char *d = api->malloc(n);
        memset(d, 0xab, n);
        api->free(d);
        unsigned char *c = api->calloc(n);
        CHECK(c);
        for (size_t k = 0; k < n; k++) CHECK(c[k] == 0);
        api->free(c);
    }
    BF_CHECK_HEAP(api);

    /* calloc at the top: carved from never-written memory (no clearing
     * needed), from memory freed back into the top, and across new chunks. */
    void *keep[64] = {0};
    for (int round = 0; round < 3000; round++) {
        int k = (int)ts_rand_range(&rng, 0, 63);
        if (keep[k]) {
            memset(keep[k], 0xcd, api->usable(keep[k]));
            api->free(keep[k]);
            keep[k] = NULL;
        }
        size_t n = ts_rand_range(&rng, 0, 100) < 95 ? ts_rand_range(&rng, 1, 3000)
                                                    : ts_rand_range(&rng, 3000, 100000);
        unsigned char *c = api->calloc(n);
        CHECK(c);
        for (size_t i = 0; i < n; i++) CHECK_MSG(c[i] == 0, "calloc(%zu)[%zu] = %#x", n, i, c[i]);
        memset(c, 0xef, n);
        keep[k] = c;
        if (round % 100 == 0) BF_CHECK_HEAP(api);
    }
    for (int k = 0; k < 64; k++) api->free(keep[k]);
    BF_CHECK_HEAP(api);
    bf_snapshot_free(&s);
    printf("bestfit_api %s: ok\n", api->name);
    return 0;
}
