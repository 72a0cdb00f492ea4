/* Regression tests for two pow2 bugs, run under LD_PRELOAD
 * of pow2 and pow2-partitioned with sbrk refused (so chunks come from mmap,
 * which leaves a hole right above each chunk):
 * - huge-adjacent: a 1 MiB huge block mapped right where a chunk ends was
 *   taken for a bad heap pointer (its p - 16 lies in the chunk), so free,
 *   realloc and malloc_usable_size aborted on a valid block;
 * - memalign-zero: memalign(A, 0) returned the end of its block, which could
 *   be another live block's address. */
#include "check.h"

#include <malloc.h>

static void huge_adjacent(void) {
    void *chunks[4];
    for (int i = 0; i < 4; i++) CHECK((chunks[i] = malloc(600000))); /* a chunk each */
    void *huge[8];
    for (int i = 0; i < 8; i++) {
        huge[i] = malloc(1 << 20);
        CHECK(huge[i]);
        memset(huge[i], i, 64);
    }
    for (int i = 0; i < 8; i++) {
        CHECK(malloc_usable_size(huge[i]) >= (1u << 20));
        huge[i] = realloc(huge[i], (1u << 20) + 4096);
        CHECK(huge[i] && ((unsigned char *)huge[i])[63] == i);
        free(huge[i]);
    }
    for (int i = 0; i < 4; i++) free(chunks[i]);
}

static void memalign_zero(void) {
    enum { N = 64 };
    void *zero[N], *other[N];
    for (int i = 0; i < N; i++) {
        size_t align = (size_t)32 << (i % 12);
        zero[i] = memalign(align, 0);
        CHECK(zero[i] && ((uintptr_t)zero[i] & (align - 1)) == 0);
        other[i] = malloc((size_t)1 << (i % 21));
        CHECK(other[i]);
    }
    for (int i = 0; i < N; i++)
        for (int j = 0; j < N; j++) {
            CHECK_MSG(zero[i] != other[j], "memalign(.., 0) = %p is also a live block", zero[i]);
            CHECK(i == j || zero[i] != zero[j]);
        }
    for (int i = 0; i < N; i++) free(zero[i]), free(other[i]);
}

int main(void) {
    ts_require_preloaded();
    huge_adjacent();
    memalign_zero();
    printf("pow2_regress: ok\n");
    return 0;
}
