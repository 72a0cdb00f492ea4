/* Every malloc-family entry point and its edge cases, run under LD_PRELOAD of
 * each design, and under glibc alone (as "override_api[glibc]") to prove that
 * what this test expects is what glibc does. */
#include "check.h"

#include <dlfcn.h>
#include <errno.h>
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/malloc_family.h"

static int preloaded;

#define ALIGNED(p, a) (((uintptr_t)(p) & ((a)-1)) == 0)

static void test_malloc_basics(void) {
    void *a = malloc(0), *b = malloc(0);
    CHECK(a && b && a != b);
    CHECK(ALIGNED(a, 16) && ALIGNED(b, 16));
    free(a);
    free(b);
    free(NULL);

    /* Every size up to 4 KiB and a sample beyond: aligned, usable, writable. */
    for (size_t n = 1; n < 70000; n += (n < 4096 ? 1 : 997)) {
        unsigned char *p = malloc(n);
        CHECK_MSG(p != NULL, "malloc(%zu)", n);
        CHECK_MSG(ALIGNED(p, 16), "malloc(%zu) = %p", n, (void *)p);
        size_t usable = malloc_usable_size(p);
        CHECK_MSG(usable >= n, "usable %zu < %zu", usable, n);
        memset(p, 0xA5, usable);
        free(p);
    }
    CHECK_EQ(malloc_usable_size(NULL), 0);
}

static void test_impossible_sizes(void) {
    size_t sizes[] = {SIZE_MAX, SIZE_MAX - 15, SIZE_MAX / 2 + 1, (size_t)PTRDIFF_MAX + 1,
                      (size_t)1 << 62};
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
        errno = 0;
        void *p = malloc(ts_opaque(sizes[i]));
        CHECK_MSG(p == NULL && errno == ENOMEM, "malloc(%zu) = %p errno %d", sizes[i], p, errno);
    }
    errno = 0;
    CHECK(calloc(ts_opaque(SIZE_MAX / 2), 3) == NULL && errno == ENOMEM);
    errno = 0;
    CHECK(calloc(ts_opaque((size_t)1 << 33), (size_t)1 << 33) == NULL && errno == ENOMEM);
    errno = 0;
    CHECK(reallocarray(NULL, ts_opaque(SIZE_MAX / 4), 8) == NULL && errno == ENOMEM);
}

static void test_calloc(void) {
    /* Dirty a block, free it, and ask calloc for the same size: must be zero. */
    for (size_t n = 8; n <= (1 << 20); n *= 3) {
        unsigned char *d = malloc(n);
        CHECK(d);
        memset(d, 0xEE, n);
        free(d);
        unsigned char *z = calloc(1, n);
        CHECK(z);
        for (size_t i = 0; i < n; i++) CHECK_MSG(z[i] == 0, "calloc(%zu)[%zu] = %d", n, i, z[i]);
        free(z);
    }
    void *z0 = calloc(0, 16), *z1 = calloc(16, 0);
    CHECK(z0 && z1 && z0 != z1);
    free(z0);
    free(z1);
}

static void test_realloc(void) {
    char *p = realloc(NULL, 100);
    CHECK(p && ALIGNED(p, 16));
    ts_fill(p, 100, 1);
    /* Grow through many sizes, small to large: the prefix survives. */
    size_t old = 100;
    for (size_t n = 150; n < (8u << 20); n = n * 2 + 13) {
        p = realloc(p, n);
        CHECK(p && ALIGNED(p, 16));
        CHECK_MSG(ts_verify(p, 100, 1), "realloc to %zu lost contents", n);
        old = n;
    }
    (void)old;
    /* Shrink: prefix survives. */
    p = realloc(p, 50);
    CHECK(p);
    CHECK(ts_verify(p, 50, 1));
    /* Failure leaves the block intact. */
    errno = 0;
    CHECK(realloc(p, ts_opaque(SIZE_MAX - 64)) == NULL && errno == ENOMEM);
    CHECK(ts_verify(p, 50, 1));
    /* glibc: realloc(p, 0) frees p and returns NULL. */
    CHECK(realloc(p, 0) == NULL);

    int *arr = reallocarray(NULL, 1000, sizeof(int));
    CHECK(arr);
    for (int i = 0; i < 1000; i++) arr[i] = i;
    arr = reallocarray(arr, 100000, sizeof(int));
    CHECK(arr);
    for (int i = 0; i < 1000; i++) CHECK(arr[i] == i);
    free(arr);
}

static void test_alignment(void) {
    void *p = (void *)1;
    /* posix_memalign: EINVAL rules, *out untouched on error. */
    CHECK_EQ(posix_memalign(&p, 3, 16), EINVAL);
    CHECK_EQ(posix_memalign(&p, 4, 16), EINVAL); /* not a multiple of sizeof(void *) */
    CHECK_EQ(posix_memalign(&p, 0, 16), EINVAL);
    CHECK(p == (void *)1);
    errno = 1234;
    CHECK_EQ(posix_memalign(&p, 64, ts_opaque(SIZE_MAX - 100)), ENOMEM);
    CHECK(p == (void *)1);
    if (preloaded) CHECK_EQ(errno, 1234); /* POSIX: errno untouched (glibc sets ENOMEM) */
    for (size_t a = sizeof(void *); a <= (2u << 20); a *= 2) {
        for (size_t n = 0; n < 3 * a + 100; n = n * 3 + 1 + a / 2) {
            void *q = NULL;
            CHECK_EQ(posix_memalign(&q, a, n), 0);
            CHECK_MSG(q && ALIGNED(q, a), "posix_memalign(%zu, %zu) = %p", a, n, q);
            CHECK(malloc_usable_size(q) >= n);
            memset(q, 0x5A, n);
            free(q);
            if (a > 4096 && n > 100000) break;
        }
    }
    void *q = aligned_alloc(64, 100);
    CHECK(q && ALIGNED(q, 64));
    free(q);
    q = aligned_alloc(4096, 4096);
    CHECK(q && ALIGNED(q, 4096));
    free(q);
    if (preloaded) { /* glibc < 2.38 accepts any alignment here; tsalloc follows 2.38 */
        errno = 0;
        CHECK(aligned_alloc(ts_opaque(3), 16) == NULL && errno == EINVAL);
    }
    /* memalign rounds a non-power-of-two alignment up, as glibc does. */
    q = memalign(ts_opaque(24), 10); /* opaque: clang rejects it at compile time */
    CHECK(q && ALIGNED(q, 32));
    free(q);
    q = memalign(1, 10);
    CHECK(q && ALIGNED(q, 16));
    free(q);
    errno = 0;
    CHECK(memalign(ts_opaque(SIZE_MAX / 2 + 2), 16) == NULL && errno == EINVAL);
    errno = 0;
    CHECK(memalign(4096, ts_opaque(SIZE_MAX - 8192)) == NULL && errno == ENOMEM);

    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    q = valloc(10);
    CHECK(q && ALIGNED(q, page));
    free(q);
    q = pvalloc(10);
    CHECK(q && ALIGNED(q, page) && malloc_usable_size(q) >= page);
    free(q);
    q = pvalloc(0);
    CHECK(q && ALIGNED(q, page));
    free(q);
    errno = 0;
    CHECK(pvalloc(ts_opaque(SIZE_MAX - 10)) == NULL && errno == ENOMEM);
}

static void test_large(void) {
    size_t n = 64u << 20;
    unsigned char *p = malloc(n);
    CHECK(p && ALIGNED(p, 16));
    p[0] = 1;
    p[n - 1] = 2;
    for (size_t i = 0; i < n; i += 4096) p[i] = (unsigned char)(i >> 12);
    p = realloc(p, 2 * n);
    CHECK(p);
    for (size_t i = 0; i < n; i += 4096) CHECK(p[i] == (unsigned char)(i >> 12));
    CHECK(p[n - 1] == 2);
    p = realloc(p, n / 16);
    CHECK(p && p[4096] == 1);
    free(p);
}

static void test_introspection(void) {
    void *blocks[64];
    for (int i = 0; i < 64; i++) CHECK((blocks[i] = malloc(1000 + i * 100)));
    void *big = malloc(8u << 20);
    CHECK(big);
    memset(big, 1, 8u << 20);
    struct mallinfo2 mi = mallinfo2();
    CHECK_MSG(mi.arena + mi.hblkhd >= (8u << 20), "arena %zu hblkhd %zu", mi.arena, mi.hblkhd);
    CHECK_MSG(mi.uordblks + mi.hblkhd >= 64 * 1000, "in use %zu", mi.uordblks + mi.hblkhd);
    /* As glibc: a block mapped on its own is in hblkhd only, so that
     * uordblks + hblkhd counts it once (bestfit maps no block on its own). */
    void *huge = malloc(256u << 20);
    CHECK(huge);
    struct mallinfo2 with_huge = mallinfo2();
    /* Counted in uordblks too it would add 256 MiB; 0 is added (measured). */
    if (with_huge.hblkhd >= mi.hblkhd + (256u << 20))
        CHECK_MSG(with_huge.uordblks < mi.uordblks + (128u << 20), "uordblks %zu -> %zu",
                  mi.uordblks, with_huge.uordblks);
    else
        CHECK(with_huge.uordblks >= mi.uordblks + (256u << 20));
    free(huge);
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
    struct mallinfo m1 = mallinfo(); /* the old int version still answers */
#pragma GCC diagnostic pop
    CHECK(m1.arena >= 0);
    for (int i = 0; i < 64; i++) free(blocks[i]);
    free(big);
    int trimmed = malloc_trim(0);
    CHECK_MSG(trimmed == 0 || trimmed == 1, "malloc_trim = %d", trimmed);
    CHECK_EQ(mallopt(M_ARENA_MAX, 2), 1);
    CHECK_EQ(mallopt(M_MXFAST, 1000), 0); /* above glibc's largest fastbin size */
    CHECK_EQ(mallopt(M_MXFAST, 64), 1);

    char *buf = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&buf, &len);
    CHECK(mem);
    CHECK_EQ(malloc_info(0, mem), 0);
    fclose(mem);
    CHECK_MSG(strncmp(buf, "<malloc version=\"1\"", 19) == 0, "malloc_info: %.60s", buf);
    CHECK(strstr(buf, "</malloc>"));
    free(buf);
    CHECK_EQ(malloc_info(1, stderr), EINVAL);
}

/* glibc's internal names reach the same allocator. */
static void test_libc_aliases(void) {
    void *(*libc_malloc)(size_t) = (void *(*)(size_t))dlsym(RTLD_DEFAULT, "__libc_malloc");
    void (*libc_free)(void *) = (void (*)(void *))dlsym(RTLD_DEFAULT, "__libc_free");
    CHECK(libc_malloc && libc_free);
    void *p = libc_malloc(77);
    CHECK(p && malloc_usable_size(p) >= 77);
    free(p); /* mixing the names is allowed: they are one allocator */
    p = malloc(55);
    libc_free(p);
}

/* The OS failure hook, reachable through the preloaded library: when the OS
 * refuses, big requests fail cleanly and the allocator works afterwards. */
static void test_os_failure(void) {
    void (*fail)(unsigned, long, long) =
        (void (*)(unsigned, long, long))dlsym(RTLD_DEFAULT, "ts_os_test_fail");
    CHECK(fail);
    fail(1 | 2 | 4, 0, -1); /* mmap, sbrk and mremap all refuse */
    errno = 0;
    void *p = malloc(256u << 20);
    CHECK_MSG(p == NULL && errno == ENOMEM, "malloc under OS failure = %p errno %d", p, errno);
    errno = 0;
    p = calloc(1, 300u << 20);
    CHECK(p == NULL && errno == ENOMEM);
    fail(0, 0, 0);
    p = malloc(256u << 20);
    CHECK(p);
    memset(p, 1, 4096);
    free(p);
}

/* cfree and C23's free_sized / free_aligned_sized come from the preloaded
 * library (glibc's would take our blocks for its own and abort). */
static void test_other_frees(void) {
    Dl_info mine, theirs;
    CHECK(dladdr((void *)malloc, &mine));
    void (*cfree_fn)(void *) = (void (*)(void *))dlsym(RTLD_DEFAULT, "cfree");
    void (*sized)(void *, size_t) = (void (*)(void *, size_t))dlsym(RTLD_DEFAULT, "free_sized");
    void (*aligned_sized)(void *, size_t, size_t) =
        (void (*)(void *, size_t, size_t))dlsym(RTLD_DEFAULT, "free_aligned_sized");
    CHECK(cfree_fn && sized && aligned_sized);
    CHECK(dladdr((void *)cfree_fn, &theirs) && theirs.dli_fbase == mine.dli_fbase);
    CHECK(dladdr((void *)sized, &theirs) && theirs.dli_fbase == mine.dli_fbase);
    CHECK(dladdr((void *)aligned_sized, &theirs) && theirs.dli_fbase == mine.dli_fbase);
    for (int i = 0; i < 1000; i++) {
        void *p = malloc(100);
        CHECK(p);
        cfree_fn(p);
        p = malloc(1000 + (size_t)i);
        CHECK(p);
        sized(p, 1000 + (size_t)i);
        p = aligned_alloc(64, 128);
        CHECK(p && (uintptr_t)p % 64 == 0);
        aligned_sized(p, 64, 128);
    }
    sized(NULL, 0);
    aligned_sized(NULL, 64, 0);
}

/* Every name of base/malloc_family.h's lists, the one list the shim builds
 * its exports from, comes from the preloaded library; each alias is the
 * very function it names. */
static void check_ours(const char *name, const Dl_info *mine) {
    Dl_info theirs;
    void *sym = dlsym(RTLD_DEFAULT, name);
    CHECK_MSG(sym && dladdr(sym, &theirs) && theirs.dli_fbase == mine->dli_fbase,
              "%s is not the preloaded library's", name);
}

static void test_exports(void) {
    Dl_info mine;
    CHECK(dladdr((void *)malloc, &mine));
#define CHECK_FUNCTION(name, ...) check_ours(#name, &mine);
#define CHECK_ALIAS(alias, target, ...)                                                            \
    check_ours(#alias, &mine);                                                                     \
    CHECK_MSG(dlsym(RTLD_DEFAULT, #alias) == dlsym(RTLD_DEFAULT, #target), "%s", #alias);
    TS_MALLOC_FAMILY(CHECK_FUNCTION)
    TS_MALLOC_EXTRAS(CHECK_FUNCTION)
    TS_MALLOC_ALIASES(CHECK_ALIAS)
    TS_CXX_NEW(CHECK_FUNCTION)
    TS_CXX_DELETE(CHECK_FUNCTION)
#undef CHECK_FUNCTION
#undef CHECK_ALIAS
}

int main(void) {
    ts_require_preloaded();
    preloaded = ts_expected_design() != NULL;
    test_malloc_basics();
    test_impossible_sizes();
    test_calloc();
    test_realloc();
    test_alignment();
    test_large();
    test_introspection();
    test_libc_aliases();
    if (preloaded) test_os_failure();
    if (preloaded) test_other_frees();
    if (preloaded) test_exports();
    printf("override_api: ok (%s)\n", preloaded ? ts_expected_design() : "glibc");
    return 0;
}
