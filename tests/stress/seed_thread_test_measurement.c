/* Seed 001 thread_test_measurement, as a test: N threads each allocate
 * blocks of 128..1024 bytes (multiples of 32); every 4th iteration an even
 * thread frees the blocks the next thread allocated at indices 0, 4, 8 ...
 * up to its own iteration. Afterwards: no overlap, patterns intact, and the
 * data segment holds the live blocks without gross waste (the real figures
 * come from bench/workloads/measurement.c).
 * Usage: seed_thread_test_measurement lock|nolock threads */
#include "seed_harness.h"

#include <stdatomic.h>

#define PER_THREAD 5000

static seed_block_t blocks[64][PER_THREAD];
static _Atomic int published[64];
static pthread_barrier_t start, allocated;

static void *worker(void *arg) {
    int t = (int)(intptr_t)arg, next = (t + 1) % seed_threads;
    int frees = t % 2 == 0 && next != t, cursor = 0;
    uint64_t rng = 650 + (uint64_t)t;
    pthread_barrier_wait(&start);
    for (int i = 0; i < PER_THREAD; i++) {
        blocks[t][i] = seed_alloc(128 + 32 * ts_rand_range(&rng, 0, 28), ((uint64_t)t << 32) | i);
        atomic_store_explicit(&published[t], i + 1, memory_order_release);
        if (frees && i % 4 == 0)
            while (cursor <= i &&
                   atomic_load_explicit(&published[next], memory_order_acquire) > cursor) {
                seed_release(&blocks[next][cursor]);
                cursor += 4;
            }
    }
    pthread_barrier_wait(&allocated);
    for (; frees && cursor < PER_THREAD; cursor += 4) seed_release(&blocks[next][cursor]);
    SEED_CHECK_HEAP();
    return NULL;
}

int main(int argc, char **argv) {
    seed_args(argc, argv);
    pthread_barrier_init(&start, NULL, (unsigned)seed_threads);
    pthread_barrier_init(&allocated, NULL, (unsigned)seed_threads);
    const unsigned long before = get_data_segment_size();
    seed_run_threads(worker, NULL);
    const unsigned long segment = get_data_segment_size() - before;
    size_t n = (size_t)seed_threads * PER_THREAD, live = 0, count = 0;
    seed_check_live(&blocks[0][0], n);
    for (size_t i = 0; i < n; i++)
        if ((&blocks[0][0])[i].ptr) live += (&blocks[0][0])[i].size, count++;
    /* Even threads free (thread t frees t + 1's blocks, the last one thread
     * 0's when the count is odd); a lone thread frees nothing. */
    size_t freeing = seed_threads > 1 ? (size_t)(seed_threads + 1) / 2 : 0;
    size_t freed_per_thread = (PER_THREAD + 3) / 4;
    CHECK_EQ(count, n - freeing * freed_per_thread);
    /* The floor is exact: every live block needs its bytes and a 16-byte
     * header. The ceiling allows live bytes again plus 1 MiB a thread; the
     * measured overhead is 0.09 MiB for 1 thread and 1.5 MiB for 8 (20 MiB
     * live), over 10x below it; gross waste (a block's size again for each
     * block, or megabytes a thread) exceeds it. */
    CHECK(segment >= live + 16 * count);
    CHECK_MSG(segment <= 2 * live + (size_t)seed_threads * (1 << 20),
              "data segment %lu for %zu live", segment, live);
    for (size_t i = 0; i < n; i++)
        if ((&blocks[0][0])[i].ptr) seed_release(&(&blocks[0][0])[i]);
    SEED_CHECK_HEAP();
    printf("seed_thread_test_measurement %s %d threads: ok (data segment %lu for %zu live bytes: "
           "%.3f)\n",
           seed_api->name, seed_threads, segment, live, (double)segment / (double)live);
    return 0;
}
