/* The OS layer and the base utilities: mappings, alignment, remap, purge,
 * the program break, the failure hook (programmatic and from the
 * environment), and the allocation-free formatter. */
#include "check.h"

#include <errno.h>

#include "base/base.h"
#include "os/os.h"

static void test_mappings(void) {
    size_t page = _ts_os_page_size();
    CHECK(page >= 4096 && ts_is_pow2(page));
    CHECK(_ts_os_cpu_count() >= 1);

    unsigned char *p = _ts_os_map(3 * page);
    CHECK(p);
    for (size_t i = 0; i < 3 * page; i++) CHECK(p[i] == 0);
    memset(p, 0x7f, 3 * page);
    /* Purge: the range stays mapped and reads back as zeros. */
    CHECK(_ts_os_purge(p, 3 * page));
    for (size_t i = 0; i < 3 * page; i += 97) CHECK(p[i] == 0);
    /* Remap keeps contents. */
    memset(p, 0x42, 3 * page);
    unsigned char *q = _ts_os_remap(p, 3 * page, 300 * page, true);
    CHECK(q);
    CHECK(q[0] == 0x42 && q[3 * page - 1] == 0x42 && q[300 * page - 1] == 0);
    /* remap_to: the pages move to a chosen address, contents intact. */
    unsigned char *target = _ts_os_map(600 * page);
    CHECK(target);
    unsigned char *moved = _ts_os_remap_to(q, 300 * page, 400 * page, target + 100 * page);
    CHECK(moved == target + 100 * page);
    CHECK(moved[0] == 0x42 && moved[3 * page - 1] == 0x42 && moved[399 * page] == 0);
    CHECK(_ts_os_unmap(target, 600 * page));

    for (size_t align = page * 2; align <= ((size_t)64 << 20); align *= 4) {
        void *a = _ts_os_map_aligned(align, align);
        CHECK_MSG(a && ((uintptr_t)a & (align - 1)) == 0, "map_aligned(%zu) = %p", align, a);
        memset(a, 1, page);
        CHECK(_ts_os_unmap(a, align));
    }
    errno = 0;
    CHECK(_ts_os_map_aligned(SIZE_MAX - page, (size_t)1 << 30) == NULL && errno == ENOMEM);
    errno = 0;
    CHECK(_ts_os_map((size_t)1 << 62) == NULL && errno == ENOMEM);
}

static void test_failure_hook(void) {
    size_t page = _ts_os_page_size();
    long before = _ts_os_test_failures();
    /* Two more calls succeed, then one fails, then they succeed again. */
    _ts_os_test_fail(TS_OS_FAIL_MMAP, 2, 1);
    void *a = _ts_os_map(page), *b = _ts_os_map(page);
    errno = 0;
    void *c = _ts_os_map(page);
    int err = errno;
    void *d = _ts_os_map(page);
    CHECK(a && b && !c && err == ENOMEM && d);
    CHECK_EQ(_ts_os_test_failures(), before + 1);
    _ts_os_unmap(a, page);
    _ts_os_unmap(b, page);
    _ts_os_unmap(d, page);

    /* sbrk refuses while the hook is on; shrinking is never refused. */
    _ts_os_test_fail(TS_OS_FAIL_SBRK, 0, -1);
    errno = 0;
    CHECK(_ts_os_sbrk((intptr_t)page) == NULL && errno == ENOMEM);
    CHECK(_ts_os_sbrk((intptr_t)page) == NULL);
    _ts_os_test_fail(0, 0, 0);
    void *top = _ts_os_brk_current();
    char *old = _ts_os_sbrk((intptr_t)page);
    CHECK(old == top);
    old[page - 1] = 1;
    /* Shrink only when the break is still where we left it. */
    CHECK(!_ts_os_sbrk_shrink_if_top((char *)top + 1, page));
    CHECK(_ts_os_sbrk_shrink_if_top(old + page, page));
    CHECK(_ts_os_brk_current() == top);

    _ts_os_test_fail(TS_OS_FAIL_REMAP, 0, 1);
    void *r = _ts_os_map(page);
    CHECK(r);
    CHECK(_ts_os_remap(r, page, 2 * page, true) == NULL);
    void *r2 = _ts_os_remap(r, page, 2 * page, true);
    CHECK(r2);
    _ts_os_unmap(r2, 2 * page);
}

static void test_format(void) {
    char buf[128];
    CHECK(_ts_format(buf, sizeof buf, "%s(): %p", "free", (void *)0x1234abcd) == 18);
    CHECK(strcmp(buf, "free(): 0x1234abcd") == 0);
    _ts_format(buf, sizeof buf, "%zu|%5d|%ld|%x|%c|%%|%08zu", (size_t)18446744073709551615ull, -42,
               -7L, 255u, 'z', (size_t)42);
    CHECK_MSG(strcmp(buf, "18446744073709551615|  -42|-7|ff|z|%|00000042") == 0, "got %s", buf);
    /* Truncation is safe and reports the wanted length. */
    CHECK(_ts_format(buf, 5, "abcdefgh") == 8 && strcmp(buf, "abcd") == 0);
}

/* An environment number or switch as the option table reads one: parsed
 * by the base parsers, the fallback when unset or malformed. */
static long long env_long(const char *name, long long fallback) {
    const char *v = _ts_env(name);
    long long n;
    return v && _ts_parse_long(v, &n) ? n : fallback;
}
static bool env_bool(const char *name, bool fallback) {
    const char *v = _ts_env(name);
    bool b;
    return v && _ts_parse_bool(v, &b) ? b : fallback;
}

static void test_env(void) {
    setenv("TSALLOC_TEST_NUM", "64k", 1);
    CHECK(env_long("TSALLOC_TEST_NUM", 1) == 65536);
    setenv("TSALLOC_TEST_NUM", "3M", 1);
    CHECK(env_long("TSALLOC_TEST_NUM", 1) == 3 << 20);
    setenv("TSALLOC_TEST_NUM", "12x", 1);
    CHECK(env_long("TSALLOC_TEST_NUM", 7) == 7);
    CHECK(env_long("TSALLOC_TEST_UNSET", 9) == 9);
    setenv("TSALLOC_TEST_BOOL", "yes", 1);
    CHECK(env_bool("TSALLOC_TEST_BOOL", false));
    setenv("TSALLOC_TEST_BOOL", "off", 1);
    CHECK(!env_bool("TSALLOC_TEST_BOOL", true));
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "env-hook") == 0) {
        /* Run with TSALLOC_TEST_OS_FAIL=mmap:1:2: one success, two failures. */
        size_t page = _ts_os_page_size();
        void *a = _ts_os_map(page);
        void *b = _ts_os_map(page);
        void *c = _ts_os_map(page);
        void *d = _ts_os_map(page);
        CHECK(a && !b && !c && d);
        printf("os_base env-hook: ok\n");
        return 0;
    }
    test_mappings();
    test_failure_hook();
    test_format();
    test_env();
    printf("os_base: ok\n");
    return 0;
}
