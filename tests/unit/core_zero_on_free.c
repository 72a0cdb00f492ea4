/* TSALLOC_ZERO_ON_FREE in the plain build (src/core/zerofree.c), run with
 * TSALLOC_ZERO_ON_FREE=4096 (core.cmake). Checks that:
 * - a freed block reads zero through its first 4 KiB (past its free-list
 *   link, free mark and sweep tag, words 0-2), at small, medium, big and
 *   large sizes, freed by its own thread and by another one;
 * - the option is read at start-up only: ts_option_set refuses to change it;
 * - segments are entered in the segment map with TS_MAP_SLOW, and the heap
 *   check (check.c) still accepts the map;
 * - a double free of a block is still caught by the slow path (the zeroing
 *   comes after the check, or it would erase the free mark). */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "core/internal.h"
#include "tsalloc.h"

#define ZEROED 4096

static void check_zeroed(const unsigned char *p, size_t n) {
    size_t end = n < ZEROED ? n : ZEROED;
    for (size_t i = 24; i < end; i++)
        CHECK_MSG(((const volatile unsigned char *)p)[i] == 0,
                  "byte %zu of a freed %zu-byte block is %u", i, n, p[i]);
}

static void free_void(void *p) {
    free(p);
}

static void *free_it(void *p) {
    free(p);
    return NULL;
}

int main(void) {
    static const size_t sizes[] = {16, 200, 1000, 4096, 20000, 100000, 400000, 600000, 3 << 20};
    CHECK(ts_option_get("zero_on_free") == ZEROED);
    CHECK(!ts_option_set("zero_on_free", 0));
    CHECK(ts_option_set("zero_on_free", ZEROED));
    for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
        size_t n = sizes[k];
        unsigned char *keep = malloc(n); /* the page stays in use: no purge */
        unsigned char *p = malloc(n);
        CHECK(p && keep);
        memset(p, 0xaa, n);
        if (n <= TS_CLASS_MAX_SIZE)
            CHECK(_ts_segmap[(uintptr_t)p >> TS_SEGMENT_SHIFT] & TS_MAP_SLOW);
        free(p);
        check_zeroed(p, n);
        /* Freed by another thread. */
        p = malloc(n);
        CHECK(p != NULL);
        memset(p, 0x55, n);
        pthread_t t;
        CHECK(pthread_create(&t, NULL, free_it, p) == 0);
        CHECK(pthread_join(t, NULL) == 0);
        check_zeroed(p, n);
        free(keep);
    }
    ts_heap_check();
    void *p = malloc(100);
    free(p);
    CHECK(ts_expect_abort_at(free_void, p, "tsalloc: free(): double free of %p", p, "double free"));
    return 0;
}
