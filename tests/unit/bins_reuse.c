/* bins: a freed block is the next one its bin hands out (LIFO, O(1)), in
 * every bin up to the cached mapped ones; bins never lend blocks to each
 * other; a steady malloc/free mix stops mapping chunks once warm. */
#include "check.h"

#include <malloc.h>

#include "designs/bins/bins.h"

static void test_same_block_back(void) {
    for (unsigned k = 4; k <= 23; k++) {
        size_t size = (size_t)1 << k;
        unsigned char *p = malloc(size - size / 4);
        CHECK(p);
        free(p);
        unsigned char *q = malloc(size); /* another size of the same bin */
        CHECK_MSG(q == p, "bin %u: freed %p, got %p", k, (void *)p, (void *)q);
        free(q);
    }
}

/* Blocks freed onto the span a bin is serving come back newest first. */
static void test_lifo(void) {
    enum { N = 300 };
    void *blocks[N];
    for (unsigned k = 4; k <= 14; k++) {
        size_t size = (size_t)1 << k;
        for (int i = 0; i < N; i++) CHECK((blocks[i] = malloc(size)));
        /* The last blocks all came from the span now serving the bin. */
        uintptr_t span = (uintptr_t)blocks[N - 1] >> BINS_PAGE_SHIFT;
        int first = N - 1;
        while (first > 0 && (uintptr_t)blocks[first - 1] >> BINS_PAGE_SHIFT == span) first--;
        for (int i = first; i < N; i++) free(blocks[i]);
        for (int i = N - 1; i >= first; i--) {
            void *p = malloc(size);
            CHECK_MSG(p == blocks[i], "bin %u: block %d came back as %p, want %p", k, i, p,
                      blocks[i]);
        }
        for (int i = 0; i < N; i++) free(blocks[i]);
    }
}

static void test_bins_do_not_mix(void) {
    void *small = malloc(32);
    free(small);
    void *other = malloc(64);
    CHECK(other != small && _ts_bins_block_bin(other) == 6);
    void *again = malloc(20);
    CHECK(again == small);
    free(other);
    free(again);
}

/* A working set churned at random: once warm, no new chunk is mapped and the
 * blocks handed out never overlap. */
static void test_steady_state(void) {
    enum { SLOTS = 2000, ROUNDS = 200000 };
    static unsigned char *slot[SLOTS];
    static size_t size[SLOTS];
    uint64_t rng = 42;
    for (int i = 0; i < SLOTS; i++) {
        size[i] = ts_rand_range(&rng, 1, 3000);
        CHECK((slot[i] = malloc(size[i])));
        ts_fill(slot[i], size[i], (uint64_t)i);
    }
    size_t warm = 0;
    for (int r = 0; r < ROUNDS; r++) {
        if (r == ROUNDS / 4) warm = _ts_bins_chunk_count();
        int i = (int)ts_rand_range(&rng, 0, SLOTS - 1);
        CHECK_MSG(ts_verify(slot[i], size[i], (uint64_t)i), "slot %d corrupted", i);
        free(slot[i]);
        size[i] = ts_rand_range(&rng, 1, 3000);
        CHECK((slot[i] = malloc(size[i])));
        ts_fill(slot[i], size[i], (uint64_t)i);
    }
    /* Exact: steady state maps nothing (measured: 4 chunks at r = ROUNDS / 4
     * and at the end). */
    CHECK_MSG(_ts_bins_chunk_count() <= warm, "chunks grew from %zu to %zu in steady state", warm,
              _ts_bins_chunk_count());
    static ts_range_t ranges[SLOTS];
    for (int i = 0; i < SLOTS; i++) ranges[i] = (ts_range_t){(uintptr_t)slot[i], size[i]};
    CHECK(ts_find_overlap(ranges, SLOTS) < 0);
    for (int i = 0; i < SLOTS; i++) {
        CHECK(ts_verify(slot[i], size[i], (uint64_t)i));
        free(slot[i]);
    }
}

/* Empty spans go back to their chunk and empty chunks to the OS: after a
 * burst is freed and trimmed, the chunk count is back where it started. */
static void test_give_back(void) {
    enum { N = 40000 };
    static void *blocks[N];
    malloc_trim(0);
    size_t before = _ts_bins_chunk_count();
    for (int i = 0; i < N; i++) CHECK((blocks[i] = malloc(100 + (size_t)(i % 7) * 300)));
    CHECK(_ts_bins_chunk_count() > before);
    for (int i = 0; i < N; i++) free(blocks[i]);
    /* At most 4 empty chunks are kept before trim (TSALLOC_BINS_KEEP_CHUNKS),
     * plus those holding the (empty) span each of the 5 bins used serves:
     * exact, 9 (measured: 5)... */
    CHECK_MSG(_ts_bins_chunk_count() <= before + 4 + 5, "%zu chunks left, %zu before",
              _ts_bins_chunk_count(), before);
    /* ...and none after. */
    CHECK_EQ(malloc_trim(0), 1);
    CHECK_MSG(_ts_bins_chunk_count() <= before, "%zu chunks after trim, %zu before",
              _ts_bins_chunk_count(), before);
    struct mallinfo2 mi = mallinfo2();
    CHECK_EQ(mi.arena, _ts_bins_chunk_count() * BINS_CHUNK_SIZE);
}

int main(void) {
    test_same_block_back();
    test_lifo();
    test_bins_do_not_mix();
    test_steady_state();
    test_give_back();
    printf("bins_reuse: ok\n");
    return 0;
}
