/* bins: fork while other threads allocate and free (locally and into each
 * other's arenas). The child finds the allocator usable: its thread keeps its
 * arena and its blocks, new threads never adopt the arenas of the parent's
 * other threads (they may have been mid-update), and frees into those arenas
 * are safe. */
#include "check.h"

#include <pthread.h>
#include <stdatomic.h>

#include "designs/bins/bins.h"

enum { WORKERS = 3, SLOTS = 256 };

static atomic_int stop;
static const void *_Atomic worker_arena[WORKERS];
static void *_Atomic shared_slot[SLOTS]; /* blocks any thread may free */

static void *worker(void *arg) {
    int me = (int)(intptr_t)arg;
    uint64_t rng = 77 + (uint64_t)me;
    void *local[64] = {0};
    while (!atomic_load(&stop)) {
        int i = (int)ts_rand_range(&rng, 0, 63);
        free(local[i]);
        CHECK((local[i] = malloc(ts_rand_range(&rng, 1, 4000))));
        if (!atomic_load_explicit(&worker_arena[me], memory_order_relaxed))
            atomic_store(&worker_arena[me], _ts_bins_thread_arena());
        /* Swap a block through the shared slots: frees of other threads' blocks. */
        void *mine = malloc(ts_rand_range(&rng, 1, 300));
        CHECK(mine);
        void *old = atomic_exchange(&shared_slot[ts_rand_range(&rng, 0, SLOTS - 1)], mine);
        free(old);
    }
    for (int i = 0; i < 64; i++) free(local[i]);
    return NULL;
}

static void *child_thread(void *arg) {
    const void **parents = arg;
    unsigned char *p[100];
    for (int i = 0; i < 100; i++) {
        CHECK((p[i] = malloc(50 + (size_t)i * 40)));
        ts_fill(p[i], 50 + (size_t)i * 40, (uint64_t)i);
    }
    const void *mine = _ts_bins_thread_arena();
    for (int w = 0; w < WORKERS; w++)
        CHECK_MSG(mine != parents[w], "a child thread adopted a parent thread's arena");
    for (int i = 0; i < 100; i++) {
        CHECK(ts_verify(p[i], 50 + (size_t)i * 40, (uint64_t)i));
        free(p[i]);
    }
    return NULL;
}

static int child(unsigned char *kept, const void **parents) {
    CHECK(ts_verify(kept, 5000, 3));
    /* Free every shared block: many belong to the parent's other threads. */
    for (int i = 0; i < SLOTS; i++) free(atomic_exchange(&shared_slot[i], NULL));
    void *blocks[1000];
    for (int i = 0; i < 1000; i++) CHECK((blocks[i] = malloc((size_t)i + 1)));
    for (int i = 0; i < 1000; i++) free(blocks[i]);
    for (int round = 0; round < 3; round++) {
        pthread_t t;
        CHECK(pthread_create(&t, NULL, child_thread, parents) == 0);
        pthread_join(t, NULL);
    }
    free(kept);
    return 0;
}

int main(void) {
    unsigned char *kept = malloc(5000);
    CHECK(kept);
    ts_fill(kept, 5000, 3);
    pthread_t t[WORKERS];
    for (int i = 0; i < WORKERS; i++)
        CHECK(pthread_create(&t[i], NULL, worker, (void *)(intptr_t)i) == 0);
    for (int w = 0; w < WORKERS; w++)
        while (!atomic_load(&worker_arena[w])) sched_yield(); /* each worker has its arena */
    const void *parents[WORKERS];
    for (int w = 0; w < WORKERS; w++) parents[w] = atomic_load(&worker_arena[w]);
    for (int f = 0; f < 20; f++) {
        fflush(NULL);
        pid_t pid = fork();
        CHECK(pid >= 0);
        if (pid == 0) _exit(child(kept, parents));
        int status = 0;
        CHECK(waitpid(pid, &status, 0) == pid);
        CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child %d: status %d", f, status);
    }
    atomic_store(&stop, 1);
    for (int i = 0; i < WORKERS; i++) pthread_join(t[i], NULL);
    for (int i = 0; i < SLOTS; i++) free(atomic_exchange(&shared_slot[i], NULL));
    CHECK(ts_verify(kept, 5000, 3));
    free(kept);
    printf("bins_fork: ok\n");
    return 0;
}
