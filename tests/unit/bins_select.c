/* bins: every request gets the smallest power-of-two bin that fits (at least
 * 16 B), a block of exactly that size, aligned to it (to 4 KiB for mapped
 * bins), and realloc stays in place while the new size needs the same bin. */
#include "check.h"

#include <errno.h>
#include <malloc.h>

#include "designs/bins/bins.h"

/* The bin a correct allocator must pick, computed the slow way. */
static unsigned expected_bin(size_t n) {
    unsigned k = 4;
    while (((size_t)1 << k) < n) k++;
    return k <= 28 ? k : 0;
}

static void test_bin_table(void) {
    for (size_t n = 0; n <= (1u << 17) + 64; n++)
        CHECK_MSG(_ts_bins_bin_for_size(n) == expected_bin(n), "size %zu: bin %u, want %u", n,
                  _ts_bins_bin_for_size(n), expected_bin(n));
    for (unsigned k = 1; k < 40; k++) {
        size_t p = (size_t)1 << k;
        size_t sizes[] = {p - 1, p, p + 1};
        for (int i = 0; i < 3; i++)
            CHECK_MSG(_ts_bins_bin_for_size(sizes[i]) == expected_bin(sizes[i]),
                      "size %zu: bin %u, want %u", sizes[i], _ts_bins_bin_for_size(sizes[i]),
                      expected_bin(sizes[i]));
    }
    CHECK_EQ(_ts_bins_bin_for_size(0), 4);
    CHECK_EQ(_ts_bins_bin_for_size(16), 4);
    CHECK_EQ(_ts_bins_bin_for_size(17), 5);
    CHECK_EQ(_ts_bins_bin_for_size((size_t)1 << 28), 28);
    CHECK_EQ(_ts_bins_bin_for_size(((size_t)1 << 28) + 1), 0);
}

/* One live block of size n: its bin, usable size and alignment. */
static void check_block(size_t n) {
    unsigned char *p = malloc(n);
    CHECK_MSG(p != NULL, "malloc(%zu)", n);
    unsigned want = expected_bin(n ? n : 1);
    unsigned bin = _ts_bins_block_bin(p);
    CHECK_MSG(bin == want, "malloc(%zu): block of bin %u, want %u", n, bin, want);
    size_t usable = malloc_usable_size(p);
    if (want) {
        CHECK_MSG(usable == ((size_t)1 << want), "malloc(%zu): usable %zu", n, usable);
        size_t natural = want <= BINS_CHUNK_MAX_BIN ? (size_t)1 << want : 4096;
        CHECK_MSG((uintptr_t)p % natural == 0, "malloc(%zu) = %p not aligned to %zu", n, (void *)p,
                  natural);
        CHECK_EQ(_ts_bins_block_is_mapped(p), want > BINS_CHUNK_MAX_BIN);
    } else {
        CHECK(usable >= n && (uintptr_t)p % 4096 == 0 && _ts_bins_block_is_mapped(p));
    }
    /* The whole usable size is ours: write its ends (and, when small, all of it). */
    if (usable <= 65536) memset(p, 0x5A, usable);
    p[0] = 1;
    p[usable - 1] = 2;
    free(p);
}

static void test_live_blocks(void) {
    for (size_t n = 0; n <= 5000; n++) check_block(n);
    for (unsigned k = 13; k <= 29; k++) {
        size_t p = (size_t)1 << k;
        check_block(p - 1);
        check_block(p);
        check_block(p + 1);
    }
}

/* memalign within the chunk bins: the bin of the alignment, naturally aligned. */
static void test_memalign(void) {
    for (unsigned a = 5; a <= 20; a++) {
        size_t align = (size_t)1 << a;
        void *p = memalign(align, 1);
        CHECK(p && (uintptr_t)p % align == 0);
        CHECK_EQ(_ts_bins_block_bin(p), a);
        void *q = memalign(align, align + 1); /* needs the next bin */
        CHECK(q && (uintptr_t)q % align == 0);
        if (a < BINS_CHUNK_MAX_BIN)
            CHECK_EQ(_ts_bins_block_bin(q), expected_bin(align + 1));
        else /* over 1 MiB and aligned beyond 4 KiB: an exact-size mapping */
            CHECK(_ts_bins_block_is_mapped(q) && _ts_bins_block_bin(q) == 0);
        free(p);
        free(q);
    }
    void *p = memalign((size_t)4 << 20, 100); /* beyond the chunk bins: a mapping */
    CHECK(p && (uintptr_t)p % ((size_t)4 << 20) == 0 && _ts_bins_block_is_mapped(p));
    free(p);
}

/* realloc keeps the block while the new size fits its bin (or the one below),
 * and moves it, contents intact, otherwise. */
static void test_realloc_in_place(void) {
    unsigned char *p = malloc(17); /* bin 5 */
    CHECK(p);
    ts_fill(p, 17, 9);
    for (size_t n = 17; n <= 32; n++) CHECK_MSG(realloc(p, n) == p, "realloc to %zu moved", n);
    for (size_t n = 9; n <= 16; n++) CHECK_MSG(realloc(p, n) == p, "shrink to %zu moved", n);
    CHECK(ts_verify(p, 9, 9));
    /* All of bin 5 asked for (in place), then filled: the move keeps 32 bytes. */
    unsigned char *whole = realloc(p, 32);
    CHECK(whole == p);
    ts_fill(whole, 32, 10);
    unsigned char *q = realloc(whole, 33); /* bin 6 */
    CHECK(q && q != p && _ts_bins_block_bin(q) == 6 && ts_verify(q, 32, 10));
    q = realloc(q, 64);
    CHECK(_ts_bins_block_bin(q) == 6 && ts_verify(q, 32, 10));
    /* 4000 -> 100: a block 32x too big moves down to bin 7, keeping 100 bytes. */
    unsigned char *r = malloc(4000);
    ts_fill(r, 4000, 11);
    unsigned char *s = realloc(r, 100);
    CHECK(s && s != r && _ts_bins_block_bin(s) == 7 && ts_verify(s, 100, 11));
    free(s);
    free(q);
}

int main(void) {
    test_bin_table();
    test_live_blocks();
    test_memalign();
    test_realloc_in_place();
    printf("bins_select: ok\n");
    return 0;
}
