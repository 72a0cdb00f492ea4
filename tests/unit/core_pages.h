/* Shared by the fast allocator's page tests (core_pages.c, core_pages_big.c,
 * core_pages_remote.c), which look at its internals. Each check runs in a
 * fresh thread, so it starts from an empty heap.
 */
#ifndef TS_TESTS_CORE_PAGES_H
#define TS_TESTS_CORE_PAGES_H

#include <malloc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "core/internal.h"

static inline size_t pages_in_use(void) {
    size_t n = 0;
    for (int k = 0; k < TS_KIND_COUNT; k++) n += atomic_load(&_ts_stats.pages[k]);
    return n;
}

static inline ts_page_t *page_of(void *p) {
    ts_page_t *page = NULL;
    CHECK(_ts_locate(p, &page) == TS_PTR_BLOCK);
    return page;
}

static inline void run(void *(*fn)(void *)) {
    pthread_t t;
    CHECK(pthread_create(&t, NULL, fn, NULL) == 0);
    CHECK(pthread_join(t, NULL) == 0);
}

/* This thread's heap, made if need be, with no empty page kept. */
static inline ts_heap_t *trimmed_heap(void) {
    free(malloc(1));
    malloc_trim(0);
    return _ts_tls_heap;
}

/* The heap's kept empty big pages: the one that lingers first in its queue,
 * and those in the slots. */
static inline int big_kept(ts_page_t *page) {
    ts_heap_t *heap = _ts_tls_heap;
    if (heap->big_linger == page && page->used == 0) return 1;
    for (unsigned i = 0; i < TS_EMPTY_BIG_KEEP; i++)
        if (heap->empty_big[i] == page) return 1;
    return 0;
}

#endif
