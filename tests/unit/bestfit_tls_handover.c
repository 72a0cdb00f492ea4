/* bestfit-tls across threads:
 * - a block goes to the heap of the thread that frees it: the allocating
 *   thread does not see it again, the freeing thread reuses it;
 * - an exiting thread hands all its free blocks to the orphan heap, exactly;
 * - a thread with no fit of its own takes its best fit from the orphans
 *   before growing the data segment, and that block goes back to the orphans
 *   when freed, even by the thread that took it;
 * - malloc and free after the thread's own exit hook ran use the orphan heap.
 * Run with TSALLOC_BESTFIT_TRIM_THRESHOLD=-1 so no block leaves through the top. */
#include "bestfit_harness.h"

#include <pthread.h>

static const bf_api_t *api = &bf_apis[1];
static pthread_barrier_t step;
static void *shared_block;
static bf_snapshot_t exited; /* the free blocks of a thread just before it exits */

/* ---- a block belongs to the heap of the thread that frees it ---- */

static void *owner_thread(void *arg) {
    (void)arg;
    shared_block = api->malloc(500);
    CHECK(shared_block);
    pthread_barrier_wait(&step); /* 1: allocated */
    pthread_barrier_wait(&step); /* 2: the other thread freed it */
    void *again = api->malloc(500);
    CHECK(again && again != shared_block); /* not in our heap any more */
    bf_snapshot_t s = {0};
    bf_snapshot(api, &s);
    CHECK(!bf_containing(&s, bf_block(shared_block)));
    bf_snapshot_free(&s);
    pthread_barrier_wait(&step); /* 3 */
    api->free(again);
    return NULL;
}

static void *freer_thread(void *arg) {
    (void)arg;
    pthread_barrier_wait(&step); /* 1 */
    api->free(shared_block);
    bf_snapshot_t s = {0};
    bf_snapshot(api, &s);
    CHECK_EQ(s.count, 1); /* only that block */
    CHECK_EQ(s.blocks[0].start, bf_block(shared_block));
    pthread_barrier_wait(&step); /* 2 */
    pthread_barrier_wait(&step); /* 3 */
    void *mine = api->malloc(500);
    CHECK(mine == shared_block); /* the exact fit in our own heap */
    api->free(mine);
    bf_snapshot_free(&s);
    return NULL;
}

/* ---- an exiting thread leaves its free blocks to the orphans ---- */

static void *leaving_thread(void *arg) {
    uint64_t rng = (uint64_t)(uintptr_t)arg;
    void *p[60];
    for (int i = 0; i < 60; i++) {
        p[i] = api->malloc(ts_rand_range(&rng, 1, 3000));
        CHECK(p[i]);
    }
    for (int i = 0; i < 60; i += 2) api->free(p[i]);
    BF_CHECK_HEAP(api);
    bf_snapshot(api, &exited);
    return NULL; /* p[odd] stay allocated: they keep the free blocks apart */
}

/* ---- malloc and free after the exit hook ---- */

static pthread_key_t late_key;
static void *late_block, *late_freed;
static void late_destructor(void *arg) {
    late_freed = arg;
    api->free(arg);               /* after our exit hook: to the orphans */
    late_block = api->malloc(77); /* from the orphans */
    CHECK(late_block);
    ts_fill(late_block, 77, 5);
}
static void *late_thread(void *arg) {
    (void)arg;
    void *p = api->malloc(5000);
    api->malloc(10); /* keeps p apart from the top */
    /* Created after the design's key: its destructor runs after the design's. */
    CHECK(pthread_key_create(&late_key, late_destructor) == 0);
    pthread_setspecific(late_key, p);
    return NULL;
}

static size_t orphan_bytes(bf_snapshot_t *s) {
    s->count = s->bytes = 0;
    _ts_bestfit_tls_debug_walk_orphans(bf_snapshot_add, s);
    return s->bytes;
}

int main(void) {
    bf_snapshot_t s = {0};
    ts_bestfit_tunables_t tun;
    api->tunables(&tun);
    CHECK_EQ(tun.trim_threshold, SIZE_MAX);

    /* The first thread to exit: the (empty) orphan heap gets exactly its free blocks. */
    CHECK_EQ(orphan_bytes(&s), 0);
    pthread_t t;
    pthread_create(&t, NULL, leaving_thread, (void *)(uintptr_t)42);
    pthread_join(t, NULL);
    CHECK_EQ(orphan_bytes(&s), exited.bytes);
    CHECK_EQ(_ts_bestfit_tls_debug_orphan_free(), exited.bytes);
    CHECK_EQ(s.count, exited.count);
    for (size_t i = 0; i < exited.count; i++) {
        const bf_free_t *f = bf_find(&s, exited.blocks[i].start);
        CHECK_MSG(f && f->size == exited.blocks[i].size, "block %zu of the exited thread lost", i);
    }
    BF_CHECK_HEAP(api);

    /* A block belongs to the heap of the thread that frees it. The two
     * threads must not take from the orphans (such blocks go back there), so
     * main takes every orphan block first (exact fits), and returns them. */
    void *drained[512];
    CHECK(s.count <= 512);
    const size_t drained_count = s.count;
    for (size_t i = 0; i < drained_count; i++) {
        drained[i] = api->malloc(s.blocks[i].size - 16);
        CHECK(drained[i]);
    }
    CHECK_EQ(_ts_bestfit_tls_debug_orphan_free(), 0);
    pthread_t a, b;
    pthread_barrier_init(&step, NULL, 2);
    pthread_create(&a, NULL, owner_thread, NULL);
    pthread_create(&b, NULL, freer_thread, NULL);
    pthread_join(a, NULL);
    pthread_join(b, NULL);
    for (size_t i = 0; i < drained_count; i++) api->free(drained[i]); /* back to the orphans */
    CHECK_EQ(_ts_bestfit_tls_debug_thread_free(), 0);
    BF_CHECK_HEAP(api);
    orphan_bytes(&s);
    CHECK_EQ(s.bytes, _ts_bestfit_tls_debug_orphan_free());

    /* The main thread has no fit of its own: it takes its best fit from the
     * orphans, and the data segment does not grow. */
    const bf_free_t *largest = NULL;
    for (size_t i = 0; i < s.count; i++)
        if (!largest || s.blocks[i].size > largest->size) largest = &s.blocks[i];
    const bf_free_t want = *largest;
    const size_t want_total = s.bytes;
    CHECK_EQ(_ts_bestfit_tls_debug_thread_free(), 0); /* main never used its heap */
    const size_t ds = get_data_segment_size();
    void *from_orphans = api->malloc(want.size - 16 - tun.min_split);
    CHECK(from_orphans);
    CHECK(bf_containing(&s, bf_block(from_orphans)) != NULL);
    CHECK_EQ(get_data_segment_size(), ds);
    /* It stays an orphans' block: freed, it goes back and coalesces there. */
    api->free(from_orphans);
    CHECK_EQ(_ts_bestfit_tls_debug_thread_free(), 0);
    CHECK_EQ(orphan_bytes(&s), want_total);
    CHECK(bf_find(&s, want.start) && bf_find(&s, want.start)->size == want.size);
    BF_CHECK_HEAP(api);

    /* Many threads come and go; the orphans coalesce what they leave. */
    size_t before = orphan_bytes(&s);
    size_t expected = 0;
    for (int i = 0; i < 16; i++) {
        pthread_create(&t, NULL, leaving_thread, (void *)(uintptr_t)(1000 + i));
        pthread_join(t, NULL);
        expected += exited.bytes;
        BF_CHECK_HEAP(api);
    }
    /* Exited threads also take from the orphans, so compare with the total. */
    CHECK(orphan_bytes(&s) <= before + expected);
    CHECK(orphan_bytes(&s) > 0);

    /* After the exit hook: the freed block lands in the orphan heap. */
    pthread_create(&t, NULL, late_thread, NULL);
    pthread_join(t, NULL);
    CHECK(late_block && late_freed);
    CHECK(ts_verify(late_block, 77, 5));
    orphan_bytes(&s);
    CHECK(bf_containing(&s, bf_block(late_freed)) != NULL);
    BF_CHECK_HEAP(api);
    api->free(late_block);
    BF_CHECK_HEAP(api);
    bf_snapshot_free(&s);
    printf("bestfit_tls_handover: ok (%zu bytes in the orphan heap)\n",
           _ts_bestfit_tls_debug_orphan_free());
    return 0;
}
