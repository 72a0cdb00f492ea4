/* Exact best fit: on long random sequences of malloc, free and realloc, every
 * block malloc returns is carved from the block a full linear best-fit scan
 * of the free blocks picks (smallest that fits, lowest address among equal
 * sizes), and from new memory only when no free block fits. Foreign sbrk calls
 * in between split the data segment into several segments.
 * Usage: bestfit_reference lock|nolock [ops] [seed] */
#include "bestfit_harness.h"

#include <unistd.h>

#define SLOTS 1500

static void *slot[SLOTS];
static size_t len[SLOTS];

static size_t random_size(uint64_t *rng) {
    unsigned k = (unsigned)ts_rand_range(rng, 0, 99);
    if (k < 50) return ts_rand_range(rng, 0, 256);
    if (k < 85) return ts_rand_range(rng, 256, 4096);
    if (k < 97) return ts_rand_range(rng, 4096, 40000);
    return ts_rand_range(rng, 40000, 300000);
}

int main(int argc, char **argv) {
    const bf_api_t *api = bf_api_from_args(argc, argv);
    long ops = argc > 2 ? atol(argv[2]) : 30000;
    uint64_t rng = argc > 3 ? (uint64_t)atoll(argv[3]) : 2024;
    bf_snapshot_t s = {0};
    long exact = 0, grown = 0;

    for (long op = 0; op < ops; op++) {
        int i = (int)ts_rand_range(&rng, 0, SLOTS - 1);
        unsigned kind = (unsigned)ts_rand_range(&rng, 0, 99);
        if (slot[i] && kind < 85) {
            CHECK_MSG(ts_verify(slot[i], len[i], (uint64_t)i), "slot %d corrupted", i);
            api->free(slot[i]);
            slot[i] = NULL;
        } else if (slot[i]) {
            size_t n = random_size(&rng);
            bf_realloc_slot(api, &slot[i], &len[i], (uint64_t)i, n);
        } else {
            size_t n = random_size(&rng), need = api->block_size(n);
            bf_snapshot(api, &s);
            const bf_free_t *want = bf_reference_fit(&s, need);
            bf_free_t copy = want ? *want : (bf_free_t){0, 0, 0};
            void *p = api->malloc(n);
            CHECK(p);
            uintptr_t b = bf_block(p);
            size_t bs = bf_block_size_of(api, p);
            CHECK(bs >= need);
            if (want) {
                /* Inside the chosen block, at its front or its back. */
                CHECK_MSG(b >= copy.start && b + bs <= copy.start + copy.size &&
                              (b == copy.start || b + bs == copy.start + copy.size),
                          "op %ld: malloc(%zu) gave [%#lx,+%zu), best fit is [%#lx,+%zu)", op, n,
                          (unsigned long)b, bs, (unsigned long)copy.start, copy.size);
                exact++;
            } else {
                /* Nothing fitted: new memory, possibly extending the old top. */
                const bf_free_t *f = bf_containing(&s, b);
                CHECK_MSG(!f || (f->is_reserve && b == f->start), "op %ld: grew but reused", op);
                grown++;
            }
            slot[i] = p;
            len[i] = n;
            ts_fill(p, n, (uint64_t)i);
        }
        if (op % 2000 == 1000)
            CHECK(sbrk((intptr_t)ts_rand_range(&rng, 1, 8) * 4096) != (void *)-1);
        if (op % 1000 == 0) BF_CHECK_HEAP(api);
    }
    BF_CHECK_HEAP(api);
    ts_range_t *r = calloc(SLOTS, sizeof *r);
    size_t nr = 0;
    for (int i = 0; i < SLOTS; i++)
        if (slot[i]) r[nr++] = (ts_range_t){bf_block(slot[i]), bf_block_size_of(api, slot[i])};
    CHECK_EQ(ts_find_overlap(r, nr), (unsigned long long)-1);
    for (int i = 0; i < SLOTS; i++) {
        if (slot[i]) CHECK(ts_verify(slot[i], len[i], (uint64_t)i));
        api->free(slot[i]);
    }
    BF_CHECK_HEAP(api);
    CHECK(exact > ops / 10);
    printf("bestfit_reference %s: ok (%ld exact best fits, %ld growths)\n", api->name, exact,
           grown);
    free(r);
    bf_snapshot_free(&s);
    return 0;
}
