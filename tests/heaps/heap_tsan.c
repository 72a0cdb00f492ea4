/* ThreadSanitizer over heaps (built with the core's sources by
 * tests/stress/tsan.cmake; the core is reached through its ts_* names):
 * worker threads free a heap's blocks while its owner keeps allocating from
 * it, the purge thread purges with a 1 ms delay meanwhile, and the owner
 * visits, counts and destroys the heap once the workers are joined; every
 * other round the heap is deleted instead and the workers free what was
 * left after the delete.
 * Usage: heap_tsan ROUNDS BLOCKS */
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>

#include "check.h"
#include "tsalloc.h"

typedef struct {
    void **blocks;
    size_t n;
} work_t;

static void *free_all(void *arg) {
    work_t *w = arg;
    for (size_t i = 0; i < w->n; i++) ts_free(w->blocks[i]);
    return NULL;
}

static bool count(void *arg, void *block, size_t size) {
    (void)block;
    (void)size;
    ++*(size_t *)arg;
    return true;
}

int main(int argc, char **argv) {
    CHECK(argc == 3);
    int rounds = atoi(argv[1]);
    size_t n = (size_t)atol(argv[2]);
    CHECK(ts_option_set("purge_delay_ms", 1));
    void **a = calloc(n, sizeof *a), **b = calloc(n, sizeof *b), **keep = calloc(n, sizeof *keep);
    uint64_t rng = 7;
    for (int r = 0; r < rounds; r++) {
        ts_heap_t *h = ts_heap_new();
        CHECK(h != NULL);
        for (size_t i = 0; i < n; i++) {
            size_t size = i % 997 == 0 ? 600 * 1024 : ts_rand_range(&rng, 1, 3000);
            a[i] = ts_heap_malloc(h, size);
            b[i] = ts_heap_malloc(h, ts_rand_range(&rng, 1, 300));
            CHECK(a[i] && b[i]);
        }
        work_t wa = {a, n / 2}, wb = {b, n / 2};
        pthread_t t[2];
        CHECK(pthread_create(&t[0], NULL, free_all, &wa) == 0);
        CHECK(pthread_create(&t[1], NULL, free_all, &wb) == 0);
        for (size_t i = 0; i < n; i++) { /* the owner allocates meanwhile */
            keep[i] = ts_heap_malloc(h, ts_rand_range(&rng, 1, 500));
            CHECK(keep[i] != NULL);
        }
        for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
        size_t seen = 0;
        ts_heap_visit(h, count, &seen);
        ts_heap_stats_t st;
        ts_heap_stats(h, &st);
        CHECK_EQ(seen, st.live_blocks);
        CHECK_EQ(seen, 2 * n - 2 * (n / 2) + n);
        if (r % 2 == 0) {
            ts_heap_destroy(h);
            continue;
        }
        ts_heap_delete(h); /* the rest stays valid: freed by two threads */
        work_t wk = {keep, n}, wr = {a + n / 2, n - n / 2};
        CHECK(pthread_create(&t[0], NULL, free_all, &wk) == 0);
        CHECK(pthread_create(&t[1], NULL, free_all, &wr) == 0);
        for (size_t i = n / 2; i < n; i++) ts_free(b[i]);
        for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
    }
    free(a);
    free(b);
    free(keep);
    return 0;
}
