/* What the hardened build promises a correct program, under
 * LD_PRELOAD=libtsalloc-secure.so: malloc(0) gives distinct pointers that
 * free, realloc and malloc_usable_size accept; malloc_usable_size is the
 * size asked for; every block comes zeroed up to TSALLOC_ZERO_ON_FREE
 * (4 KiB) however its memory was used before; a freed block is not handed
 * out again at once; realloc, memalign and sized delete of the right size
 * never trip a check; malloc_usable_size takes the blocks of new and
 * new[], and delete and delete[] their own; with TSALLOC_DEALLOC_MISMATCH=0
 * (the test's second run) free, realloc and delete take the blocks of
 * malloc, new and new[] from each other, and a realloc in place keeps a
 * block new[]'s; ts_heap_check() reads the encoded free lists and finds
 * nothing wrong. */
#include "check.h"

#include <malloc.h>

static const size_t sizes[] = {1,    8,    15,   16,    24,     100,    1000,   1016,
                               1024, 4096, 5000, 70000, 262144, 600000, 1 << 20};
#define NSIZES (sizeof sizes / sizeof *sizes)

static void zero_size(void) {
    void *a = malloc(0), *b = malloc(0);
    CHECK(a && b && a != b);
    CHECK_EQ(malloc_usable_size(a), (size_t)0);
    void *c = realloc(a, 32);
    CHECK(c);
    memset(c, 1, 32);
    free(c);
    free(b);
}

static void usable_and_realloc(void) {
    for (size_t i = 0; i < NSIZES; i++) {
        size_t n = sizes[i];
        unsigned char *p = malloc(n);
        CHECK(p);
        CHECK_EQ(malloc_usable_size(p), n);
        ts_fill(p, n, n);
        unsigned char *q = realloc(p, n + 7); /* in place or moved: content kept */
        CHECK(q && ts_verify(q, n, n));
        CHECK_EQ(malloc_usable_size(q), n + 7);
        memset(q + n, 0x5a, 7);
        unsigned char *r = realloc(q, n / 2 + 1);
        CHECK(r && ts_verify(r, n / 2 + 1, n));
        free(r);
    }
}

/* Blocks of one size, filled and freed many times over: whatever block a
 * malloc gets, its first 4 KiB read zero. */
static void zeroed_blocks(void) {
    for (size_t i = 0; i < NSIZES; i++) {
        size_t n = sizes[i], z = n < 4096 ? n : 4096;
        for (int round = 0; round < 3; round++) {
            unsigned char *v[64];
            for (int k = 0; k < 64; k++) {
                v[k] = malloc(n);
                CHECK(v[k]);
                for (size_t b = 0; b < z; b++)
                    CHECK_MSG(v[k][b] == 0, "%zu-byte block %p: byte %zu not zero", n, v[k], b);
                memset(v[k], 0xee, n);
            }
            for (int k = 0; k < 64; k++) free(v[k]);
        }
    }
}

/* The block freed last is not among the next allocations of its size (a
 * 1 MiB quarantine holds 128 small blocks, or three of 320 KiB: the next
 * two allocations for those). */
static void no_immediate_reuse(void) {
    for (size_t i = 0; i < NSIZES; i++) {
        size_t n = sizes[i];
        if (n > 400000) continue; /* past half the quarantine: not held */
        void *p = malloc(n);
        free(p);
        for (int k = 0; k < (n <= 4096 ? 8 : 2); k++) {
            void *q = malloc(n);
            CHECK_MSG(q != p, "a freed %zu-byte block came back at once", n);
            free(q);
        }
    }
}

static void aligned_and_calloc(void) {
    for (size_t align = 32; align <= 65536; align *= 4) {
        for (size_t i = 0; i < NSIZES; i++) {
            void *p = NULL;
            CHECK_EQ(posix_memalign(&p, align, sizes[i]), 0);
            CHECK(((uintptr_t)p & (align - 1)) == 0);
            memset(p, 0x33, sizes[i]);
            CHECK_EQ(malloc_usable_size(p), sizes[i]);
            free(p);
        }
    }
    for (size_t i = 0; i < NSIZES; i++) {
        unsigned char *p = calloc(1, sizes[i]);
        CHECK(p);
        for (size_t b = 0; b < sizes[i]; b++) CHECK(p[b] == 0);
        free(p);
    }
}

/* operator new / sized delete of the same size (libstdc++ may be absent). */
static void sized_delete(void) {
    void *(*op_new)(size_t) = (void *(*)(size_t))dlsym(RTLD_DEFAULT, "_Znwm");
    void (*op_delete)(void *, size_t) = (void (*)(void *, size_t))dlsym(RTLD_DEFAULT, "_ZdlPvm");
    if (!op_new || !op_delete) return;
    for (size_t i = 0; i < NSIZES; i++) {
        void *p = op_new(sizes[i]);
        memset(p, 1, sizes[i]);
        op_delete(p, sizes[i]);
    }
}

static void cxx_blocks(void) {
    void *(*op_new)(size_t) = (void *(*)(size_t))dlsym(RTLD_DEFAULT, "_Znwm");
    void *(*op_new_array)(size_t) = (void *(*)(size_t))dlsym(RTLD_DEFAULT, "_Znam");
    void (*op_delete)(void *) = (void (*)(void *))dlsym(RTLD_DEFAULT, "_ZdlPv");
    void (*op_delete_array)(void *) = (void (*)(void *))dlsym(RTLD_DEFAULT, "_ZdaPv");
    void (*op_delete_array_sized)(void *, size_t) =
        (void (*)(void *, size_t))dlsym(RTLD_DEFAULT, "_ZdaPvm");
    if (!op_new || !op_new_array || !op_delete || !op_delete_array || !op_delete_array_sized)
        return;
    const char *option = getenv("TSALLOC_DEALLOC_MISMATCH");
    int mixed = option && !strcmp(option, "0");
    for (size_t i = 0; i < NSIZES; i++) {
        size_t n = sizes[i];
        char *p = op_new_array(n);
        memset(p, 1, n);
        CHECK_EQ(malloc_usable_size(p), n);
        op_delete_array(p);
        p = op_new(n);
        CHECK_EQ(malloc_usable_size(p), n);
        op_delete(p);
        p = op_new_array(n);
        op_delete_array_sized(p, n);
        if (!mixed) continue;
        free(op_new(n));
        free(op_new_array(n));
        p = realloc(op_new(n), n + n / 2);
        CHECK(p != NULL);
        free(p);
        op_delete(malloc(n));
        p = op_new_array(n);
        if (n > 16) {
            p = realloc(p, n - 1); /* in place: still new[]'s */
            op_delete_array_sized(p, n - 1);
        } else {
            op_delete_array(p);
        }
    }
}

/* Pages with blocks on their free lists, whose links are encoded: the
 * check decodes them (it took an encoded link for a pointer off the page). */
static void heap_check_reads_links(void) {
    void (*check)(void) = (void (*)(void))dlsym(RTLD_DEFAULT, "ts_heap_check");
    CHECK(check != NULL);
    enum { N = 600 };
    static void *b[N];
    for (int i = 0; i < N; i++) CHECK((b[i] = malloc(16 + (size_t)(i % 6) * 400)));
    for (int i = 0; i < N; i += 2) free(b[i]);
    for (int i = 0; i < N; i += 4) CHECK((b[i] = malloc(16 + (size_t)(i % 6) * 400)));
    check();
    for (int i = 0; i < N; i++)
        if (i % 4 == 0 || i % 2 == 1) free(b[i]);
    check();
}

int main(void) {
    ts_require_preloaded();
    zero_size();
    usable_and_realloc();
    zeroed_blocks();
    no_immediate_reuse();
    aligned_and_calloc();
    sized_delete();
    cxx_blocks();
    heap_check_reads_links();
    printf("secure_api: ok\n");
    return 0;
}
