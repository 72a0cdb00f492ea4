/* The heap pool (src/core/heap.c): thread heaps are cut from 256 KiB chunks
 * as threads need them. Checks that a process with one thread has touched
 * only its own heap's pages of the chunk (the old pool linked every heap of a
 * new chunk into a free list and so made the whole chunk resident), that
 * heaps alive at the same time are distinct and do not overlap even when
 * they need a second chunk, and that exited threads' heaps are reused.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "check.h"
#include "core/internal.h"
#include "tsalloc.h"

#define CHUNK   ((size_t)256 * 1024)
#define THREADS 100 /* more heaps than one chunk holds */

static size_t resident_pages(const void *start, size_t len) {
    static unsigned char vec[CHUNK / 4096];
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    CHECK(len / page <= sizeof vec);
    CHECK_EQ(mincore((void *)start, len, vec), 0);
    size_t n = 0;
    for (size_t i = 0; i < len / page; i++) n += vec[i] & 1;
    return n;
}

static pthread_barrier_t all_started, may_exit;
static ts_heap_t *heap_of[THREADS];

static void *worker(void *arg) {
    size_t i = (size_t)arg;
    free(malloc(32)); /* makes this thread's heap */
    heap_of[i] = _ts_tls_heap;
    pthread_barrier_wait(&all_started);
    pthread_barrier_wait(&may_exit);
    return NULL;
}

static void run_threads(void) {
    pthread_t t[THREADS];
    CHECK_EQ(pthread_barrier_init(&all_started, NULL, THREADS + 1), 0);
    CHECK_EQ(pthread_barrier_init(&may_exit, NULL, THREADS + 1), 0);
    for (size_t i = 0; i < THREADS; i++)
        CHECK_EQ(pthread_create(&t[i], NULL, worker, (void *)i), 0);
    pthread_barrier_wait(&all_started);
    pthread_barrier_wait(&may_exit);
    for (size_t i = 0; i < THREADS; i++) CHECK_EQ(pthread_join(t[i], NULL), 0);
    pthread_barrier_destroy(&all_started);
    pthread_barrier_destroy(&may_exit);
}

static int in_set(ts_heap_t *h, ts_heap_t **set, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (set[i] == h) return 1;
    return 0;
}

int main(void) {
    /* Every thread makes its heap on its first call (none starts shared). */
    CHECK(ts_option_set("SHARED_START", 0));
    free(malloc(16));
    ts_heap_t *main_heap = _ts_tls_heap;
    CHECK(main_heap->state == TS_HEAP_ACTIVE);
    /* The main thread's heap opens the first chunk. */
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t lo = 0, hi = 0;
    /* The kernel may have merged neighbours into the pool's mapping. */
    CHECK(ts_find_mapping((uintptr_t)main_heap, &lo, &hi));
    uintptr_t from = (uintptr_t)main_heap & ~(page - 1);
    uintptr_t to = from + CHUNK < hi ? from + CHUNK : hi;
    CHECK(to - from >= CHUNK / 2);
    size_t touched = resident_pages((void *)from, to - from);
    /* The heap's own pages, and a few for whatever the kernel merged in: 7
     * allowed, 2 resident (measured); a pool that touches its chunk makes
     * all of it resident. */
    size_t allowed = (sizeof(ts_heap_t) + page - 1) / page + 1 + 4;
    CHECK_MSG(touched <= allowed, "%zu of %zu pages from the main heap on are resident (max %zu)",
              touched, (size_t)((to - from) / page), allowed);

    /* Heaps alive at once: distinct, non-overlapping, none is main's. */
    run_threads();
    ts_heap_t *first_round[THREADS];
    for (size_t i = 0; i < THREADS; i++) {
        first_round[i] = heap_of[i];
        CHECK(heap_of[i] != NULL && heap_of[i] != main_heap);
        uintptr_t a = (uintptr_t)heap_of[i];
        CHECK(a % 128 == 0);
        for (size_t j = 0; j < i; j++) {
            uintptr_t b = (uintptr_t)heap_of[j];
            CHECK_MSG(a + sizeof(ts_heap_t) <= b || b + sizeof(ts_heap_t) <= a,
                      "heaps %zu and %zu overlap", i, j);
        }
    }

    /* The exited threads' heaps come back: a second round of as many
     * threads uses only heaps of the first. */
    run_threads();
    for (size_t i = 0; i < THREADS; i++)
        CHECK_MSG(in_set(heap_of[i], first_round, THREADS), "thread %zu got a new heap", i);
    return 0;
}
