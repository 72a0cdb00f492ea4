/* Out of memory: impossible sizes, and sbrk and mmap refused by the OS
 * failure hook (sbrk alone is not enough: the heap then grows with mapped
 * chunks, see bestfit_mapped), give NULL with errno = ENOMEM and leave the
 * heap consistent and usable; malloc fails only when no free block fits.
 * realloc failure keeps the old block intact.
 * Usage: bestfit_oom lock|nolock */
#include "bestfit_harness.h"

#define SLOTS 400

static void *slot[SLOTS];
static size_t len[SLOTS];

static void expect_enomem(void *p) {
    CHECK(p == NULL);
    CHECK_EQ(errno, ENOMEM);
}

int main(int argc, char **argv) {
    const bf_api_t *api = bf_api_from_args(argc, argv);
    bf_snapshot_t s = {0};

    /* Sizes no heap can hold. */
    const size_t huge[] = {SIZE_MAX,        SIZE_MAX - 15,  SIZE_MAX / 2, (size_t)PTRDIFF_MAX,
                           (size_t)1 << 62, (size_t)1 << 50};
    for (size_t k = 0; k < sizeof huge / sizeof huge[0]; k++) {
        errno = 0;
        expect_enomem(api->malloc(huge[k]));
        errno = 0;
        expect_enomem(api->calloc(huge[k]));
        errno = 0;
        expect_enomem(api->memalign(4096, huge[k]));
        errno = 0;
        expect_enomem(api->memalign((size_t)1 << 62, 16));
    }
    BF_CHECK_HEAP(api);
    /* sbrk and mmap refused: growth fails, what fits in free memory still works. */
    char *keep = api->malloc(100);
    CHECK(keep);
    const size_t ds0 = get_data_segment_size();
    ts_fill(keep, 100, 1);
    ts_os_test_fail(TS_OS_FAIL_SBRK | TS_OS_FAIL_MMAP, 0, -1);
    errno = 0;
    expect_enomem(api->malloc(1 << 20));
    errno = 0;
    expect_enomem(api->memalign(1 << 16, 1 << 20));
    errno = 0;
    void *r = api->realloc(keep, 1 << 20);
    expect_enomem(r);
    CHECK(ts_verify(keep, 100, 1)); /* old block untouched */
    CHECK_EQ(api->usable(keep), 112);
    BF_CHECK_HEAP(api);
    void *small = api->malloc(1000); /* fits in the reserve */
    CHECK(small);
    api->free(small);
    CHECK_EQ(get_data_segment_size(), ds0);
    ts_os_test_fail(0, 0, 0);
    void *big = api->malloc(1 << 20);
    CHECK(big);
    ts_fill(big, 1 << 20, 2);
    CHECK(ts_verify(big, 1 << 20, 2));
    api->free(big);
    api->free(keep);
    BF_CHECK_HEAP(api);

    /* Random work with every few growths refused (an sbrk and the mmap that
     * replaces it): NULL only when nothing fits. */
    uint64_t rng = 99;
    long failures = 0;
    for (int op = 0; op < 8000; op++) {
        int i = (int)ts_rand_range(&rng, 0, SLOTS - 1);
        if (op % 25 == 0)
            ts_os_test_fail(TS_OS_FAIL_SBRK | TS_OS_FAIL_MMAP, (long)ts_rand_range(&rng, 0, 2), 2);
        if (slot[i]) {
            CHECK(ts_verify(slot[i], len[i], (uint64_t)i));
            api->free(slot[i]);
            slot[i] = NULL;
            continue;
        }
        size_t n = ts_rand_range(&rng, 0, 100) < 80 ? ts_rand_range(&rng, 0, 3000)
                                                    : ts_rand_range(&rng, 3000, 150000);
        size_t need = api->block_size(n);
        bf_snapshot(api, &s);
        const bf_free_t *fit = bf_reference_fit(&s, need);
        errno = 0;
        void *p = api->malloc(n);
        if (!p) {
            CHECK_EQ(errno, ENOMEM);
            CHECK_MSG(fit == NULL, "malloc(%zu) failed with a %zu-byte block free", n, fit->size);
            failures++;
            BF_CHECK_HEAP(api);
            continue;
        }
        slot[i] = p;
        len[i] = n;
        ts_fill(p, n, (uint64_t)i);
        if (op % 200 == 0) BF_CHECK_HEAP(api);
    }
    ts_os_test_fail(0, 0, 0);
    CHECK(failures > 0);
    BF_CHECK_HEAP(api);
    for (int i = 0; i < SLOTS; i++) {
        if (slot[i]) CHECK(ts_verify(slot[i], len[i], (uint64_t)i));
        api->free(slot[i]);
    }
    BF_CHECK_HEAP(api);
    bf_snapshot_free(&s);
    printf("bestfit_oom %s: ok (%ld refused growths)\n", api->name, failures);
    return 0;
}
