/* Split: a free block is split when the remainder can hold a header plus the
 * minimum payload (TSALLOC_BESTFIT_MIN_SPLIT), and taken whole otherwise. An
 * indexed block is carved from its back, the top reserve from its front.
 * Usage: bestfit_split lock|nolock */
#include "bestfit_harness.h"

int main(int argc, char **argv) {
    const bf_api_t *api = bf_api_from_args(argc, argv);
    ts_bestfit_tunables_t tun;
    api->tunables(&tun);
    const char *env = getenv("TSALLOC_BESTFIT_MIN_SPLIT");
    size_t want_split = 16 + (env ? ((size_t)atol(env) + 15) / 16 * 16 : 32);
    CHECK_EQ(tun.min_split, want_split);
    const size_t split = tun.min_split;

    /* Consecutive blocks carved from the front of the reserve. */
    char *a = api->malloc(1000);
    char *g1 = api->malloc(1);
    char *b = api->malloc(200);
    char *g2 = api->malloc(1);
    CHECK(a && g1 && b && g2);
    CHECK_EQ(api->block_size(1000), 1024);
    CHECK_EQ(api->block_size(200), 224);
    CHECK_EQ(api->block_size(1), 48);
    CHECK_EQ(api->block_size(0), 48);
    CHECK_EQ((uintptr_t)g1, (uintptr_t)a + 1024);
    CHECK_EQ((uintptr_t)b, (uintptr_t)g1 + 48);
    CHECK_EQ((uintptr_t)g2, (uintptr_t)b + 224);
    CHECK_EQ(api->usable(a), 1008);

    bf_snapshot_t s = {0};
    bf_snapshot(api, &s);
    CHECK_EQ(s.count, 1); /* the reserve, right after g2 */
    CHECK(s.blocks[0].is_reserve);
    CHECK_EQ(s.blocks[0].start, bf_block(g2) + 48);
    const uintptr_t reserve_start = s.blocks[0].start;
    const size_t reserve_size = s.blocks[0].size;

    /* Remainder exactly the minimum: split, carved from the back. */
    api->free(a);
    const uintptr_t A = bf_block(a);
    size_t need = 1024 - split;
    char *p = api->malloc(need - 16);
    CHECK_EQ(bf_block(p), A + split);
    CHECK_EQ(bf_block_size_of(api, p), need);
    bf_snapshot(api, &s);
    CHECK_EQ(s.count, 2);
    CHECK_EQ(s.blocks[0].start, A);
    CHECK_EQ(s.blocks[0].size, split);
    api->free(p);
    bf_snapshot(api, &s);
    CHECK(bf_find(&s, A) && bf_find(&s, A)->size == 1024); /* coalesced back */

    /* Remainder one granule short of the minimum: taken whole. */
    need = 1024 - split + 16;
    p = api->malloc(need - 16);
    CHECK_EQ(bf_block(p), A);
    CHECK_EQ(api->usable(p), 1024 - 16);
    bf_snapshot(api, &s);
    CHECK_EQ(s.count, 1);
    api->free(p);

    /* Best fit: the 224-byte hole beats the 1024-byte one and the reserve. */
    api->free(b);
    const uintptr_t B = bf_block(b);
    p = api->malloc(100); /* 128-byte block */
    bf_snapshot(api, &s);
    if (224 - 128 >= split) {
        CHECK_EQ(bf_block(p), B + 224 - 128);
        CHECK(bf_find(&s, B) && bf_find(&s, B)->size == 224 - 128);
    } else {
        CHECK_EQ(bf_block(p), B);
        CHECK(!bf_find(&s, B));
    }
    CHECK(bf_find(&s, A) && bf_find(&s, A)->size == 1024);

    /* The reserve is carved from its front, and split by the same rule. */
    char *r = api->malloc(4000);
    CHECK_EQ(bf_block(r), reserve_start);
    bf_snapshot(api, &s);
    const bf_free_t *top = &s.blocks[s.count - 1];
    CHECK(top->is_reserve);
    CHECK_EQ(top->start, reserve_start + 4016);
    CHECK_EQ(top->size, reserve_size - 4016);
    /* Take the reserve but leave less than the minimum: the block gets it all. */
    size_t rest = top->size;
    char *whole = api->malloc(rest - 16 - (split - 16));
    CHECK_EQ(bf_block(whole), top->start);
    CHECK_EQ(bf_block_size_of(api, whole), rest);
    BF_CHECK_HEAP(api);

    api->free(whole);
    api->free(r);
    api->free(p);
    api->free(g1);
    api->free(g2);
    BF_CHECK_HEAP(api);
    bf_snapshot(api, &s);
    CHECK_EQ(s.count, 1); /* everything merged back into one top block */
    CHECK_EQ(s.blocks[0].start, A);
    bf_snapshot_free(&s);
    printf("bestfit_split %s: ok (min split %zu)\n", api->name, split);
    return 0;
}
