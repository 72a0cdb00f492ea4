/* calloc of fresh memory (src/core/alloc.c, page.c page_extend): a block
 * carved from memory its page never wrote since it was mapped or purged is
 * zero already, so calloc clears only its first two words and does not fault
 * in the rest (a 512 KiB calloc made 128 page faults before). Checks that:
 * - calloc of a fresh big block leaves its untouched OS pages non-resident;
 * - a block malloc'ed, filled and freed, then calloc'ed again, is zero (the
 *   reused block is cleared in full), for big and small classes;
 * - calloc of a fresh block whose carving wrote its list link is zero. */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "check.h"

static size_t resident(const void *p, size_t len) {
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    uintptr_t lo = (uintptr_t)p & ~(page - 1), hi = ((uintptr_t)p + len + page - 1) & ~(page - 1);
    size_t n = (hi - lo) / page, count = 0;
    unsigned char *v = malloc(n);
    CHECK(v != NULL);
    CHECK(mincore((void *)lo, hi - lo, v) == 0);
    for (size_t i = 0; i < n; i++) count += v[i] & 1;
    free(v);
    return count;
}

static void all_zero(const unsigned char *p, size_t n) {
    for (size_t i = 0; i < n; i++) CHECK_MSG(p[i] == 0, "byte %zu of %zu is %u", i, n, p[i]);
}

static void *run(void *arg) {
    (void)arg;
    const size_t big = 512 * 1024;
    unsigned char *p = calloc(1, big);
    CHECK(p != NULL);
    /* 1 page resident (measured); 2 is 2x that, and a
     * calloc that clears the block touches all 128. */
    CHECK_MSG(resident(p, big) <= 2, "calloc of a fresh %zu-byte block made %zu pages resident",
              big, resident(p, big));
    all_zero(p, big);
    /* Reuse: the same block comes back, written, and must be cleared. */
    memset(p, 0xa5, big);
    free(p);
    unsigned char *q = calloc(1, big);
    CHECK(q != NULL);
    all_zero(q, big);
    free(q);
    /* Small and medium classes: fresh, then reused. */
    static const size_t sizes[] = {16, 48, 1000, 4096, 20000, 70000};
    for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
        unsigned char *a[8];
        for (int i = 0; i < 8; i++) {
            a[i] = calloc(1, sizes[s]);
            CHECK(a[i] != NULL);
            all_zero(a[i], sizes[s]);
            memset(a[i], 0x5a, sizes[s]);
        }
        for (int i = 0; i < 8; i++) free(a[i]);
        for (int i = 0; i < 8; i++) {
            a[i] = calloc(sizes[s], 1);
            CHECK(a[i] != NULL);
            all_zero(a[i], sizes[s]);
        }
        for (int i = 0; i < 8; i++) free(a[i]);
    }
    return NULL;
}

int main(void) {
    pthread_t t; /* a fresh thread: a heap with no pages yet */
    CHECK(pthread_create(&t, NULL, run, NULL) == 0);
    CHECK(pthread_join(t, NULL) == 0);
    printf("core_calloc_fresh: ok\n");
    return 0;
}
