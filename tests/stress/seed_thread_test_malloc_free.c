/* Seed 001 thread_test_malloc_free: N threads start together and each mallocs
 * and frees blocks of random sizes at random; then, all threads holding their
 * live blocks, no two live blocks overlap and every pattern is intact.
 * Usage: seed_thread_test_malloc_free lock|nolock threads */
#include "seed_harness.h"

#define SLOTS 400
#define OPS   12000

static seed_block_t pool[64][SLOTS];
static pthread_barrier_t start;

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
    seed_hold_for_check(); /* the main thread checks every live block */
    for (int i = 0; i < SLOTS; i++)
        if (pool[t][i].ptr) seed_release(&pool[t][i]);
    SEED_CHECK_HEAP();
    return NULL;
}

static void check_pool(void) {
    seed_check_live(&pool[0][0], (size_t)seed_threads * SLOTS);
}

int main(int argc, char **argv) {
    seed_args(argc, argv);
    pthread_barrier_init(&start, NULL, (unsigned)seed_threads);
    seed_run_threads(worker, check_pool);
    printf("seed_thread_test_malloc_free %s %d threads: ok (data segment %lu bytes)\n",
           seed_api->name, seed_threads, get_data_segment_size());
    return 0;
}
