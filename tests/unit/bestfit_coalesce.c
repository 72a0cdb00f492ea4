/* Coalesce: a freed block merges with a free neighbour below, above, or both,
 * and with the top reserve; the heap never holds two adjacent free blocks,
 * whatever the order of the frees.
 * Usage: bestfit_coalesce lock|nolock */
#include "bestfit_harness.h"

#define N 64

static const bf_free_t *expect_free(const bf_api_t *api, bf_snapshot_t *s, uintptr_t start,
                                    size_t size) {
    bf_snapshot(api, s);
    const bf_free_t *f = bf_find(s, start);
    CHECK_MSG(f != NULL, "no free block at %#lx", (unsigned long)start);
    CHECK_MSG(f->size == size, "free block at %#lx has %zu bytes, want %zu", (unsigned long)start,
              f->size, size);
    return f;
}

int main(int argc, char **argv) {
    const bf_api_t *api = bf_api_from_args(argc, argv);
    bf_snapshot_t s = {0};
    const size_t bs = 272; /* block of a 256-byte request */
    CHECK_EQ(api->block_size(256), bs);

    /* Five neighbours and a guard. */
    char *x[5];
    for (int i = 0; i < 5; i++) x[i] = api->malloc(256);
    char *guard = api->malloc(256);
    for (int i = 1; i < 5; i++) CHECK_EQ(bf_block(x[i]), bf_block(x[i - 1]) + bs);
    CHECK_EQ(bf_block(guard), bf_block(x[4]) + bs);
    for (int i = 0; i < 5; i++) ts_fill(x[i], 256, (uint64_t)i);

    /* Both sides: x1 and x3 free, then x2 joins them. */
    api->free(x[1]);
    api->free(x[3]);
    expect_free(api, &s, bf_block(x[1]), bs);
    expect_free(api, &s, bf_block(x[3]), bs);
    api->free(x[2]);
    expect_free(api, &s, bf_block(x[1]), 3 * bs);
    CHECK(!bf_find(&s, bf_block(x[2])) && !bf_find(&s, bf_block(x[3])));
    /* Below only: x0 joins the run above it. */
    api->free(x[0]);
    expect_free(api, &s, bf_block(x[0]), 4 * bs);
    /* Above only: x4 extends the run. */
    api->free(x[4]);
    expect_free(api, &s, bf_block(x[0]), 5 * bs);
    BF_CHECK_HEAP(api);

    /* With the reserve: the block below the top merges into it. */
    bf_snapshot(api, &s);
    const bf_free_t *top = &s.blocks[s.count - 1];
    CHECK(top->is_reserve);
    CHECK_EQ(top->start, bf_block(guard) + bs);
    size_t top_size = top->size;
    api->free(guard);
    /* guard merges with the run below it and the reserve above it. */
    const bf_free_t *all = expect_free(api, &s, bf_block(x[0]), 6 * bs + top_size);
    CHECK(all->is_reserve);
    CHECK_EQ(s.count, 1);
    BF_CHECK_HEAP(api);

    /* Every order of freeing leaves no adjacent free blocks. */
    uint64_t rng = 12345;
    for (int round = 0; round < 50; round++) {
        void *p[N];
        size_t sz[N];
        bf_alloc_tagged(api, p, sz, N, &rng, 0, 600, (uint64_t)(round * N));
        int order[N];
        for (int i = 0; i < N; i++) order[i] = i;
        for (int i = N - 1; i > 0; i--) {
            int j = (int)ts_rand_range(&rng, 0, (size_t)i), t = order[i];
            order[i] = order[j];
            order[j] = t;
        }
        for (int k = 0; k < N; k++) {
            int i = order[k];
            CHECK(ts_verify(p[i], sz[i], (uint64_t)(round * N + i)));
            api->free(p[i]);
            if (k % 8 == 0) BF_CHECK_HEAP(api);
        }
        BF_CHECK_HEAP(api);
        bf_snapshot(api, &s);
        CHECK_EQ(s.count, 1); /* one chunk, all free: a single block */
    }
    bf_snapshot_free(&s);
    printf("bestfit_coalesce %s: ok\n", api->name);
    return 0;
}
