/* New threads on the shared heap (src/core/heap.c): once TSALLOC_SHARED_START
 * threads have heaps, a new thread's first allocations and remote frees use
 * the shared heap, so a thread that makes only a few costs no heap, segment
 * or pages of its own; past them it gets its own heap. Checks that:
 * - such a thread has no heap while it makes its first calls, and its blocks
 *   lie in pages of a heap that is neither its own nor main's;
 * - its frees of those blocks go back to their pages (and count as calls);
 * - its call past the start makes its heap, which then serves it;
 * - pages of the shared heap whose blocks all came back go back to their
 *   segments on malloc_trim (no thread of the shared heap retires them);
 * - many threads at once, each holding a few blocks, create no heaps;
 * - with TSALLOC_SHARED_START=0 a new thread gets its heap on its first call.
 */
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "core/internal.h"
#include "tsalloc.h"

static ts_heap_t *main_heap;
static ts_page_t *shared_pages[8]; /* the young thread's blocks' pages */
static uintptr_t shared_owner;

static size_t pages_in_use(void) {
    size_t n = 0;
    for (int k = 0; k < TS_KIND_COUNT; k++) n += atomic_load(&_ts_stats.pages[k]);
    return n;
}

static uintptr_t owner_heap(void *p) {
    ts_page_t *page = NULL;
    CHECK_EQ(_ts_locate(p, &page), TS_PTR_BLOCK);
    return ts_page_owner(page) & ~TS_OWNER_FLAGS;
}

static void *young(void *arg) {
    (void)arg;
    free(malloc(8)); /* makes the shared heap, if none yet */
    size_t created = atomic_load(&_ts_stats.heaps_created);
    void *p[8];
    for (int i = 0; i < 8; i++) {
        size_t n = (size_t)16 << (i % 8); /* 16 B .. 2 KiB: eight classes */
        p[i] = malloc(n);
        CHECK(p[i] != NULL);
        memset(p[i], i + 1, n);
        CHECK(_ts_tls_heap == &_ts_heap_empty); /* no heap of its own */
        uintptr_t owner = owner_heap(p[i]);
        CHECK(owner != 0 && owner != (uintptr_t)main_heap);
        CHECK(!shared_owner || owner == shared_owner);
        shared_owner = owner;
        CHECK_EQ(_ts_locate(p[i], &shared_pages[i]), TS_PTR_BLOCK);
    }
    void *z = calloc(3, 100);
    CHECK(z != NULL);
    for (int i = 0; i < 300; i++) CHECK(((unsigned char *)z)[i] == 0);
    CHECK_EQ(atomic_load(&_ts_stats.heaps_created), created);
    for (int i = 0; i < 8; i++) free(p[i]);
    free(z);
    CHECK(_ts_tls_heap == &_ts_heap_empty);
    /* Past the start: its own heap. */
    for (int i = 0; i < 32; i++) free(malloc(24));
    ts_heap_t *own = _ts_tls_heap;
    CHECK(own->state == TS_HEAP_ACTIVE && own != main_heap);
    void *q = malloc(24);
    CHECK_EQ(owner_heap(q), (uintptr_t)own);
    free(q);
    return NULL;
}

#define MANY 200
static pthread_barrier_t holding;

static void *few_blocks(void *arg) {
    void *p[4];
    for (int i = 0; i < 4; i++) {
        p[i] = malloc(40 + 200 * (size_t)i + (uintptr_t)arg % 7);
        CHECK(p[i] != NULL);
    }
    pthread_barrier_wait(&holding);
    pthread_barrier_wait(&holding);
    for (int i = 0; i < 4; i++) free(p[i]);
    return NULL;
}

static void *first_call(void *arg) {
    (void)arg;
    void *p = malloc(24);
    CHECK(_ts_tls_heap->state == TS_HEAP_ACTIVE);
    CHECK_EQ(owner_heap(p), (uintptr_t)_ts_tls_heap);
    free(p);
    return NULL;
}

int main(void) {
    free(malloc(16));
    main_heap = _ts_tls_heap;
    CHECK(main_heap->state == TS_HEAP_ACTIVE);
    CHECK(ts_option_set("SHARED_START", 1)); /* main has a heap: new threads start shared */
    size_t pages0;

    pthread_t t;
    CHECK_EQ(pthread_create(&t, NULL, young, NULL), 0);
    CHECK_EQ(pthread_join(t, NULL), 0);
    malloc_trim(0);
    /* The shared heap's pages, whose blocks all came back, went back to
     * their segments. */
    for (int i = 0; i < 8; i++) {
        ts_page_t *page = shared_pages[i];
        bool mapped = atomic_load(&_ts_segmap[(uintptr_t)page >> TS_SEGMENT_SHIFT]) != 0;
        CHECK_MSG(!mapped || ts_page_state(page) != TS_PAGE_IN_USE ||
                      (ts_page_owner(page) & ~TS_OWNER_FLAGS) != shared_owner,
                  "page %d of the shared heap stays in use", i);
    }
    pages0 = pages_in_use();

    size_t created = atomic_load(&_ts_stats.heaps_created);
    pthread_t many[MANY];
    CHECK_EQ(pthread_barrier_init(&holding, NULL, MANY + 1), 0);
    for (uintptr_t i = 0; i < MANY; i++)
        CHECK_EQ(pthread_create(&many[i], NULL, few_blocks, (void *)i), 0);
    pthread_barrier_wait(&holding);
    CHECK_EQ(atomic_load(&_ts_stats.heaps_created), created);
    pthread_barrier_wait(&holding);
    for (int i = 0; i < MANY; i++) CHECK_EQ(pthread_join(many[i], NULL), 0);
    malloc_trim(0);
    /* As many pages as before (measured): 2 is slack for a head page; a
     * page kept per thread would be 200. */
    CHECK_MSG(pages_in_use() <= pages0 + 2, "pages in use %zu, %zu before", pages_in_use(), pages0);

    CHECK(ts_option_set("SHARED_START", 0));
    CHECK_EQ(pthread_create(&t, NULL, first_call, NULL), 0);
    CHECK_EQ(pthread_join(t, NULL), 0);
    printf("core_shared_start: ok\n");
    return 0;
}
