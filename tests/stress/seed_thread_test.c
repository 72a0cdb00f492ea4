/* Seed 001 thread_test: N threads start together and each allocates blocks
 * of random sizes; afterwards no two blocks overlap and every block holds its
 * pattern. Usage: seed_thread_test lock|nolock threads */
#include "seed_harness.h"

#define PER_THREAD 3000

static seed_block_t blocks[64][PER_THREAD];
static pthread_barrier_t start;

static void *worker(void *arg) {
    int t = (int)(intptr_t)arg;
    uint64_t rng = 1000 + (uint64_t)t;
    pthread_barrier_wait(&start);
    for (int i = 0; i < PER_THREAD; i++)
        blocks[t][i] = seed_alloc(ts_rand_range(&rng, 1, 4096), (uint64_t)t * PER_THREAD + i);
    SEED_CHECK_HEAP();
    return NULL;
}

int main(int argc, char **argv) {
    seed_args(argc, argv);
    pthread_barrier_init(&start, NULL, (unsigned)seed_threads);
    seed_run_threads(worker, NULL);
    seed_check_live(&blocks[0][0], (size_t)seed_threads * PER_THREAD);
    unsigned long segment = get_data_segment_size();
    for (int t = 0; t < seed_threads; t++)
        for (int i = 0; i < PER_THREAD; i++) seed_release(&blocks[t][i]);
    SEED_CHECK_HEAP();
    printf("seed_thread_test %s %d threads: ok (data segment %lu bytes)\n", seed_api->name,
           seed_threads, segment);
    return 0;
}
