/* bestfit-tls: large blocks freed by other live threads. THREADS threads stay
 * alive for the whole test and take turns (a barrier between turns, so the
 * order of every operation is fixed): in its turn a thread frees what its
 * neighbour allocated in the previous round (SMALL small blocks and maybe one
 * of 256 KiB-1 MiB, all owned by a live thread), then allocates small blocks
 * and, thread 0 every round and the others every fourth, a large one. Live
 * bytes stay below THREADS x (1 MiB + the small ones), so the data segment
 * must stay within twice that. A large block of another live thread must not
 * join the freeing thread's heap: there small requests carve it, no heap
 * holds a large fit again, and large requests grow the data segment (by
 * 30.9 MB over the ROUNDS rounds). It goes to the orphan heap, where the next
 * large request of any thread finds it (4.3 MB at most). Also checks that a
 * small block of a live owner still joins the freeing thread's heap, and a
 * large one goes to the orphan heap. Run with
 * TSALLOC_BESTFIT_TRIM_THRESHOLD=-1: giving back the top of the break would
 * hide the growth. */
#include "bestfit_harness.h"

#include <pthread.h>

#define THREADS 3
#define ROUNDS  60
#define SMALL   200 /* small blocks a thread keeps per round */

static const bf_api_t *api = &bf_apis[1];
static pthread_barrier_t turn;

typedef struct {
    void *small[SMALL];
    size_t small_len[SMALL];
    void *large;
    size_t large_len;
} slot_t;

static slot_t slots[THREADS];
static size_t high; /* the highest data segment seen, by the thread in its turn */

static void drop(slot_t *s, uint64_t tag) {
    for (int k = 0; k < SMALL; k++) {
        if (!s->small[k]) continue;
        CHECK(ts_verify(s->small[k], s->small_len[k], tag + (uint64_t)k));
        api->free(s->small[k]);
        s->small[k] = NULL;
    }
    if (s->large) {
        CHECK(ts_verify(s->large, s->large_len, tag + SMALL));
        api->free(s->large);
        s->large = NULL;
    }
}

static void *worker(void *arg) {
    uintptr_t me = (uintptr_t)arg;
    uint64_t rng = 77 + me;
    for (int round = 0; round < ROUNDS; round++) {
        for (uintptr_t t = 0; t < THREADS; t++) {
            pthread_barrier_wait(&turn);
            if (t != me) continue;
            uintptr_t next = (me + 1) % THREADS;
            drop(&slots[next], next * 1000);
            slot_t *s = &slots[me];
            drop(s, me * 1000); /* what nobody freed last round (round 0: nothing) */
            for (int k = 0; k < SMALL; k++) {
                s->small_len[k] = ts_rand_range(&rng, 16, 3000);
                s->small[k] = api->malloc(s->small_len[k]);
                CHECK(s->small[k]);
                ts_fill(s->small[k], s->small_len[k], me * 1000 + (uint64_t)k);
            }
            if (me == 0 || round % 4 == 0) { /* thread 0 every round, the others less */
                s->large_len = ts_rand_range(&rng, 256 << 10, 1 << 20);
                s->large = api->malloc(s->large_len);
                CHECK(s->large);
                ts_fill(s->large, s->large_len, me * 1000 + SMALL);
            }
            size_t ds = get_data_segment_size();
            if (ds > high) high = ds;
        }
    }
    pthread_barrier_wait(&turn);
    drop(&slots[me], me * 1000); /* each its own, while all still live */
    pthread_barrier_wait(&turn);
    BF_CHECK_HEAP(api);
    return NULL;
}

/* ---- where a live owner's blocks go when another thread frees them ---- */
static void *small_block, *large_block;
static void *live_owner(void *arg) {
    (void)arg;
    large_block = api->malloc(200000);
    small_block = api->malloc(5000);
    CHECK(small_block && large_block);
    pthread_barrier_wait(&turn); /* 1: allocated */
    pthread_barrier_wait(&turn); /* 2: main freed it while we live */
    return NULL;
}

int main(void) {
    /* First, while the orphan heap is empty (the owner's block comes from
     * its own heap): a small block of a live owner joins the freeing thread's
     * heap; a large one goes to the orphans. */
    pthread_barrier_init(&turn, NULL, 2);
    pthread_t o;
    CHECK(pthread_create(&o, NULL, live_owner, NULL) == 0);
    pthread_barrier_wait(&turn);
    const size_t small = bf_block_size_of(api, small_block);
    const size_t large = bf_block_size_of(api, large_block);
    api->free(small_block);
    CHECK_EQ(_ts_bestfit_tls_debug_thread_free(), small);
    CHECK_EQ(_ts_bestfit_tls_debug_orphan_free(), 0);
    api->free(large_block);
    CHECK_EQ(_ts_bestfit_tls_debug_thread_free(), small);
    CHECK_EQ(_ts_bestfit_tls_debug_orphan_free(), large);
    pthread_barrier_wait(&turn);
    CHECK(pthread_join(o, NULL) == 0);
    pthread_barrier_destroy(&turn);
    BF_CHECK_HEAP(api);

    size_t start = get_data_segment_size();
    pthread_barrier_init(&turn, NULL, THREADS);
    pthread_t t[THREADS];
    for (uintptr_t i = 0; i < THREADS; i++)
        CHECK(pthread_create(&t[i], NULL, worker, (void *)i) == 0);
    for (int i = 0; i < THREADS; i++) CHECK(pthread_join(t[i], NULL) == 0);
    pthread_barrier_destroy(&turn);

    /* Live at most: THREADS x (1 MiB + SMALL blocks of <= 3016 B) = 4.96 MB.
     * The segment grows by 4.0 MB (measured): twice the live bytes is 2.5x
     * that; large blocks never reused grow it with every round. */
    size_t live_max = THREADS * ((size_t)(1 << 20) + SMALL * 3016);
    printf("data segment: %zu before, at most %zu (live at most %zu)\n", start, high, live_max);
    CHECK_MSG(high - start <= 2 * live_max,
              "data segment grew by %zu for at most %zu live: large blocks not reused",
              high - start, live_max);

    printf("bestfit_tls_large: ok\n");
    return 0;
}
