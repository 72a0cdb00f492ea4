/* Seed 001 thread_test_malloc_free: N threads start together and each mallocs
 * and frees blocks of random sizes at random; then, all threads holding their
 * live blocks, no two live blocks overlap and every pattern is intact.
 * Usage: seed_thread_test_malloc_free lock|nolock threads */
#include "seed_harness.h"

#define SLOTS 400
#define OPS   12000

static seed_block_t pool[64][SLOTS];
static pthread_barrier_t start, all_done, checked;

static void *worker(void *arg) {
    int t = (int)(intptr_t)arg;
    uint64_t rng = 77 + (uint64_t)t;
    pthread_barrier_wait(&start);
    for (int op = 0; op < OPS; op++) {
        seed_block_t *b = &pool[t][ts_rand_range(&rng, 0, SLOTS - 1)];
        if (b->ptr)
            seed_release(b);
        else
            *b = seed_alloc(ts_rand_range(&rng, 1, 2048), ((uint64_t)t << 32) | (uint64_t)op);
    }
    SEED_CHECK_HEAP();
    pthread_barrier_wait(&all_done); /* the main thread checks every live block */
    pthread_barrier_wait(&checked);
    for (int i = 0; i < SLOTS; i++)
        if (pool[t][i].ptr) seed_release(&pool[t][i]);
    SEED_CHECK_HEAP();
    return NULL;
}

int main(int argc, char **argv) {
    seed_args(argc, argv);
    pthread_barrier_init(&start, NULL, (unsigned)seed_threads);
    pthread_barrier_init(&all_done, NULL, (unsigned)seed_threads + 1);
    pthread_barrier_init(&checked, NULL, (unsigned)seed_threads + 1);
    pthread_t tid[64];
    for (int t = 0; t < seed_threads; t++)
        CHECK(pthread_create(&tid[t], NULL, worker, (void *)(intptr_t)t) == 0);
    pthread_barrier_wait(&all_done);
    seed_check_live(&pool[0][0], (size_t)seed_threads * SLOTS);
    pthread_barrier_wait(&checked);
    for (int t = 0; t < seed_threads; t++) pthread_join(tid[t], NULL);
    printf("seed_thread_test_malloc_free %s %d threads: ok (data segment %lu bytes)\n",
           seed_api->name, seed_threads, get_data_segment_size());
    return 0;
}
