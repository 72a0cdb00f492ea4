/* Heap-top give-back: when the free block at the top of the heap (at the
 * break) exceeds TSALLOC_BESTFIT_TRIM_THRESHOLD, the break moves back down;
 * never when the threshold is negative, and never over memory someone else
 * obtained above our top. malloc_trim (the design's trim) gives back on demand.
 * Usage: bestfit_trim lock|nolock [never]    ("never": run with threshold -1) */
#include "bestfit_harness.h"

#include <unistd.h>

#define BLOCKS 64
#define BLOCK  (16 * 1024)

static char *brk_now(void) {
    return (char *)sbrk(0);
}

int main(int argc, char **argv) {
    const bf_api_t *api = bf_api_from_args(argc, argv);
    const int never = argc > 2 && !strcmp(argv[2], "never");
    ts_bestfit_tunables_t tun;
    api->tunables(&tun);
    CHECK_EQ(tun.trim_threshold, never ? SIZE_MAX : (size_t)128 * 1024);
    free(malloc(1)); /* glibc's own heap is set up before ours grows */
    setvbuf(stdout, NULL, _IONBF, 0);

    const size_t ds0 = get_data_segment_size();
    char *brk0 = brk_now();
    char *p[BLOCKS];
    for (int i = 0; i < BLOCKS; i++) {
        p[i] = api->malloc(BLOCK);
        CHECK(p[i]);
        ts_fill(p[i], BLOCK, (uint64_t)i);
    }
    const size_t ds1 = get_data_segment_size();
    char *brk1 = brk_now();
    CHECK(ds1 >= ds0 + BLOCKS * BLOCK);
    CHECK(brk1 >= brk0 + BLOCKS * BLOCK);
    CHECK((uintptr_t)brk1 > bf_block(p[BLOCKS - 1]) + BLOCK); /* our chunks are at the top */

    /* Free from the top down: the top block grows past the threshold. */
    for (int i = BLOCKS - 1; i >= 0; i--) {
        CHECK(ts_verify(p[i], BLOCK, (uint64_t)i));
        api->free(p[i]);
        BF_CHECK_HEAP(api);
        size_t ds = get_data_segment_size();
        if (never) {
            CHECK_EQ(ds, ds1);
        } else {
            /* What stays is at most the threshold plus a page of rounding. */
            size_t live = (size_t)i * (BLOCK + 16);
            CHECK_MSG(ds <= ds0 + live + tun.trim_threshold + 4096 + 65536,
                      "after freeing block %d: %zu bytes kept", i, ds - ds0);
        }
    }
    const size_t ds2 = get_data_segment_size();
    char *brk2 = brk_now();
    if (never) {
        CHECK_EQ(ds2, ds1);
        CHECK(brk2 == brk1);
    } else {
        CHECK_MSG(ds2 < ds1 - (BLOCKS * BLOCK - tun.trim_threshold - 65536 - 4096),
                  "data segment %zu -> %zu", ds1, ds2);
        CHECK_EQ((size_t)(brk1 - brk2), ds1 - ds2); /* the break moved by what we gave back */
    }

    /* Someone else's sbrk above our top: nothing may be given back. */
    char *q[BLOCKS];
    for (int i = 0; i < BLOCKS; i++) q[i] = api->malloc(BLOCK);
    const size_t ds3 = get_data_segment_size();
    char *foreign = sbrk(4096);
    CHECK(foreign != (void *)-1);
    for (int i = BLOCKS - 1; i >= 0; i--) api->free(q[i]);
    CHECK_EQ(get_data_segment_size(), ds3);
    CHECK_EQ(api->trim(0), 0);
    CHECK(brk_now() == foreign + 4096);
    BF_CHECK_HEAP(api);
    CHECK(sbrk(-4096) != (void *)-1); /* the foreigner leaves */

    /* On demand, even with the automatic give-back off. */
    CHECK_EQ(api->trim(0), 1);
    const size_t ds4 = get_data_segment_size();
    CHECK_MSG(ds4 < ds3 - (BLOCKS * BLOCK - 4096 - 65536), "trim kept %zu of %zu", ds4, ds3);
    CHECK_EQ(api->trim(0), 0); /* nothing left to give */
    BF_CHECK_HEAP(api);
    /* The heap still works after giving back. */
    char *r = api->malloc(3 * BLOCK);
    CHECK(r);
    ts_fill(r, 3 * BLOCK, 99);
    CHECK(ts_verify(r, 3 * BLOCK, 99));
    api->free(r);
    BF_CHECK_HEAP(api);
    printf("bestfit_trim %s%s: ok (%zu -> %zu -> %zu bytes)\n", api->name, never ? " never" : "",
           ds1, ds2, ds4);
    return 0;
}
