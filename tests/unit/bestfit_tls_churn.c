/* bestfit-tls under thread churn: short-lived threads allocate blocks that the
 * main thread frees after they exited. Those blocks must become reusable by
 * the next threads (they go to the orphan heap, as their owner is dead), so
 * the data segment stops growing after the first rounds. Before the fix they
 * joined the main thread's heap, which never allocates those sizes, and every
 * round grew the data segment by what its threads kept.
 * Also: a live thread's block freed by another thread still goes to the
 * freeing thread's heap (the seed design), and a dead thread's block realloc'd
 * by the main thread leaves nothing in the main thread's heap. */
#include "bestfit_harness.h"

#include <pthread.h>

#define KEEP       12 /* blocks each thread leaves for main to free */
#define PER_THREAD 60
#define THREADS    8 /* per round, 4 at a time */
#define ROUNDS     30
#define WARMUP     4

static const bf_api_t *api = &bf_apis[1];
static void *kept[THREADS][KEEP];

static void *worker(void *arg) {
    uintptr_t id = (uintptr_t)arg;
    uint64_t rng = 1000 + id;
    void *p[PER_THREAD];
    size_t n[PER_THREAD];
    bf_alloc_tagged(api, p, n, PER_THREAD, &rng, 1, 6000, id * 100);
    for (int k = 0; k < PER_THREAD; k++) {
        CHECK(ts_verify(p[k], n[k], id * 100 + (uint64_t)k));
        if (k % (PER_THREAD / KEEP) == 0)
            kept[id % THREADS][k / (PER_THREAD / KEEP)] = p[k];
        else
            api->free(p[k]);
    }
    return NULL;
}

static void round_of_threads(int round) {
    for (int i = 0; i < THREADS; i += 4) {
        pthread_t t[4];
        for (int j = 0; j < 4; j++)
            CHECK(pthread_create(&t[j], NULL, worker,
                                 (void *)(uintptr_t)(round * THREADS + i + j)) == 0);
        for (int j = 0; j < 4; j++) CHECK(pthread_join(t[j], NULL) == 0);
    }
    for (int i = 0; i < THREADS; i++)
        for (int k = 0; k < KEEP; k++) api->free(kept[i][k]); /* their owners have exited */
}

/* ---- a live owner's block stays with the freeing thread ---- */
static pthread_barrier_t step;
static void *live_block;
static void *live_owner(void *arg) {
    (void)arg;
    live_block = api->malloc(700);
    CHECK(live_block);
    pthread_barrier_wait(&step); /* 1: allocated */
    pthread_barrier_wait(&step); /* 2: main freed it while we live */
    return NULL;
}

static void *dead_block;
static void *short_lived(void *arg) {
    (void)arg;
    dead_block = api->malloc(3000);
    api->malloc(16); /* keeps it from the top: leaked on purpose */
    ts_fill(dead_block, 3000, 9);
    return NULL;
}

int main(void) {
    ts_bestfit_tunables_t tun;
    api->tunables(&tun);
    CHECK_EQ(_ts_bestfit_tls_debug_thread_free(), 0);

    /* Live owner (first, while the orphan heap is empty, so that the owner's
     * block comes from its own heap): a small block joins the heap of the
     * thread that frees it. */
    pthread_t t;
    pthread_barrier_init(&step, NULL, 2);
    pthread_create(&t, NULL, live_owner, NULL);
    pthread_barrier_wait(&step);
    size_t size = bf_block_size_of(api, live_block);
    api->free(live_block);
    CHECK_EQ(_ts_bestfit_tls_debug_thread_free(), size);
    pthread_barrier_wait(&step);
    pthread_join(t, NULL);
    void *mine = api->malloc(700); /* our own block now, from our heap */
    CHECK(mine == live_block);
    CHECK_EQ(_ts_bestfit_tls_debug_thread_free(), 0);

    size_t after_warmup = 0, high = 0;
    for (int round = 0; round < ROUNDS; round++) {
        round_of_threads(round);
        size_t ds = get_data_segment_size();
        if (round == WARMUP - 1) after_warmup = ds;
        if (ds > high) high = ds;
        /* The main thread allocated nothing: nothing it freed stays with it. */
        CHECK_MSG(_ts_bestfit_tls_debug_thread_free() == 0,
                  "round %d: %zu bytes of dead threads' blocks kept in the main thread's heap",
                  round, _ts_bestfit_tls_debug_thread_free());
        BF_CHECK_HEAP(api);
    }
    printf("data segment: %zu after %d rounds, at most %zu after %d\n", after_warmup, WARMUP, high,
           ROUNDS);
    /* Bounded: a few grow chunks of slack, not a round's worth of kept blocks per round. */
    CHECK_MSG(high <= after_warmup + 4 * tun.grow_chunk,
              "data segment grew from %zu to %zu under churn", after_warmup, high);

    /* Dead owner, realloc by main: grown elsewhere, the old block to the orphans. */
    pthread_create(&t, NULL, short_lived, NULL);
    pthread_join(t, NULL);
    const uintptr_t old_block = bf_block(dead_block);
    char *moved = api->realloc(dead_block, 200000);
    CHECK(moved && moved != dead_block);
    CHECK(ts_verify(moved, 3000, 9));
    bf_snapshot_t s = {0};
    _ts_bestfit_tls_debug_walk_orphans(bf_snapshot_add, &s);
    CHECK_MSG(bf_containing(&s, old_block) != NULL, "the dead thread's old block is not an orphan");
    bf_snapshot(api, &s);
    CHECK(bf_containing(&s, old_block) == NULL);
    bf_snapshot_free(&s);
    /* moved is ours: shrinking puts its tail (below the give-back threshold) into our heap. */
    char *shrunk = api->realloc(moved, 150000);
    CHECK(shrunk == moved);
    CHECK(_ts_bestfit_tls_debug_thread_free() >= 50000 - 16);
    api->free(shrunk);
    api->free(mine);
    BF_CHECK_HEAP(api);
    printf("bestfit_tls_churn: ok\n");
    return 0;
}
