/* bins: pointers the design did not hand out, and blocks freed twice, abort
 * with the exact message, in every kind of region (chunk header, uncarved
 * span room, a block's inside, a mapped block's inside or tail, a cached
 * mapped block) and from a thread that does not own the block. */
#include "check.h"

#include <malloc.h>
#include <pthread.h>

#include "designs/bins/bins.h"

#define MiB ((size_t)1 << 20)

static int expect(void (*fn)(void *), void *arg, const char *fmt, const void *ptr) {
    char want[128];
    snprintf(want, sizeof want, fmt, ptr);
    return ts_expect_abort(fn, arg, want);
}

static void do_free(void *p) {
    free(p);
}
static void do_free_twice(void *p) {
    free(p);
    free(p);
}
static void do_usable(void *p) {
    (void)malloc_usable_size(p);
}
static void *volatile sink;
static void do_realloc(void *p) {
    sink = realloc(p, 100);
}

static void *free_in_thread(void *p) {
    free(p);
    return NULL;
}
/* The second free comes from a thread that never owned the block. */
static void do_free_twice_remote(void *p) {
    pthread_t t;
    free(p);
    CHECK(pthread_create(&t, NULL, free_in_thread, p) == 0);
    pthread_join(t, NULL);
}
/* Both frees from another thread. */
static void *free_twice_thread(void *p) {
    free(p);
    free(p);
    return NULL;
}
static void do_remote_twice(void *p) {
    pthread_t t;
    CHECK(pthread_create(&t, NULL, free_twice_thread, p) == 0);
    pthread_join(t, NULL);
}

int main(void) {
    int ok = 1;
    const char *invalid = "tsalloc: free(): invalid pointer %p";
    const char *twice = "tsalloc: free(): double free of %p";

    /* The chunk header (page 0) and a chunk's first byte past the header. */
    unsigned char *small = malloc(64);
    CHECK(small && !_ts_bins_block_is_mapped(small));
    unsigned char *chunk = (unsigned char *)((uintptr_t)small & ~(uintptr_t)BINS_CHUNK_MASK);
    ok &= expect(do_free, chunk + 64, invalid, chunk + 64);
    ok &= expect(do_free, chunk + 4096, invalid, chunk + 4096);
    /* Inside a block, and misaligned for its bin. */
    ok &= expect(do_free, small + 16, invalid, small + 16);
    ok &= expect(do_free, small + 32, invalid, small + 32);
    /* Span room never carved: the first 4 KiB block is carved alone. */
    unsigned char *page_block = malloc(4096);
    CHECK(page_block && _ts_bins_block_bin(page_block) == 12);
    unsigned char *uncarved = page_block + 8 * 4096;
    if (((uintptr_t)uncarved >> BINS_PAGE_SHIFT) == ((uintptr_t)page_block >> BINS_PAGE_SHIFT))
        ok &= expect(do_free, uncarved, invalid, uncarved);
    /* A free page of a chunk (no span there). */
    unsigned char *last_page = chunk + BINS_CHUNK_SIZE - BINS_PAGE_SIZE;
    if (((uintptr_t)small >> BINS_PAGE_SHIFT) != ((uintptr_t)last_page >> BINS_PAGE_SHIFT) &&
        ((uintptr_t)page_block >> BINS_PAGE_SHIFT) != ((uintptr_t)last_page >> BINS_PAGE_SHIFT))
        ok &= expect(do_free, last_page, invalid, last_page);

    /* Double frees: local, the second one remote, both remote. */
    for (size_t n = 1; n <= MiB; n *= 4) {
        unsigned char *p = malloc(n);
        CHECK(p);
        ok &= expect(do_free_twice, p, twice, p);
        ok &= expect(do_free_twice_remote, p, twice, p);
        ok &= expect(do_remote_twice, p, twice, p);
        free(p);
    }

    /* Mapped blocks: inside, past the first 2 MiB, twice (cached: "double
     * free"; unmapped: no longer ours, "invalid pointer"). */
    unsigned char *big = malloc(3 * MiB);
    CHECK(big && _ts_bins_block_is_mapped(big));
    ok &= expect(do_free, big + 4096, invalid, big + 4096);
    ok &= expect(do_free, big + 16, invalid, big + 16);
    ok &= expect(do_free, big + 3 * MiB, invalid, big + 3 * MiB);
    ok &= expect(do_free_twice, big, twice, big);
    unsigned char *huge = malloc(300 * MiB);
    CHECK(huge);
    ok &= expect(do_free_twice, huge, invalid, huge);
    ok &= expect(do_free, huge - 4096, invalid, huge - 4096);

    /* Other entry points name themselves. */
    ok &= expect(do_usable, small + 16, "tsalloc: malloc_usable_size(): invalid pointer %p",
                 small + 16);
    ok &= expect(do_realloc, small + 16, "tsalloc: realloc(): invalid pointer %p", small + 16);
    unsigned char *gone = malloc(100);
    free(gone);
    ok &= expect(do_realloc, gone, "tsalloc: realloc(): invalid pointer %p", gone);

    free(small);
    free(page_block);
    free(big);
    free(huge);
    CHECK(ok);
    printf("bins_misuse: ok\n");
    return 0;
}
