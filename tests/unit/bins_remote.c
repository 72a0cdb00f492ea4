/* bins: blocks freed by a thread that does not own them go back to the arena
 * that does, intact and without overlap, and that arena hands them out again
 * (its memory does not grow round after round). */
#include "check.h"

#include <pthread.h>

#include "designs/bins/bins.h"

/* ---- one producer, three consumers ----------------------------------------- */

enum { PC_BLOCKS = 20000, PC_ROUNDS = 15, PC_CONSUMERS = 3 };

static struct {
    unsigned char *block[PC_BLOCKS];
    size_t size[PC_BLOCKS];
    const void *producer_arena;
    pthread_barrier_t ready, done;
    size_t chunks_after_first;
} pc;

static void *producer(void *unused) {
    (void)unused;
    uint64_t rng = 7;
    for (int round = 0; round < PC_ROUNDS; round++) {
        for (int i = 0; i < PC_BLOCKS; i++) {
            pc.size[i] = ts_rand_range(&rng, 1, 2048);
            CHECK((pc.block[i] = malloc(pc.size[i])));
            ts_fill(pc.block[i], pc.size[i], (uint64_t)(round * PC_BLOCKS + i));
        }
        if (round == 0) pc.producer_arena = _ts_bins_thread_arena();
        CHECK(_ts_bins_thread_arena() == pc.producer_arena);
        pthread_barrier_wait(&pc.ready);
        pthread_barrier_wait(&pc.done); /* the consumers freed every block */
        if (round == 0) pc.chunks_after_first = _ts_bins_chunk_count();
    }
    /* Without the remote frees coming back, every round would map ~10 more
     * chunks. None more are mapped after the first round (measured); 2 is
     * slack, far below one round's 10. */
    CHECK_MSG(_ts_bins_chunk_count() <= pc.chunks_after_first + 2,
              "producer's chunks grew from %zu to %zu", pc.chunks_after_first,
              _ts_bins_chunk_count());
    return NULL;
}

static void *consumer(void *arg) {
    int id = (int)(intptr_t)arg;
    for (int round = 0; round < PC_ROUNDS; round++) {
        pthread_barrier_wait(&pc.ready);
        for (int i = id; i < PC_BLOCKS; i += PC_CONSUMERS) {
            CHECK_MSG(ts_verify(pc.block[i], pc.size[i], (uint64_t)(round * PC_BLOCKS + i)),
                      "round %d block %d corrupted", round, i);
            CHECK(_ts_bins_block_arena(pc.block[i]) == pc.producer_arena);
            free(pc.block[i]);
        }
        pthread_barrier_wait(&pc.done);
    }
    CHECK(_ts_bins_thread_arena() == NULL); /* freeing never needs an arena */
    return NULL;
}

static void test_producer_consumers(void) {
    pthread_barrier_init(&pc.ready, NULL, 1 + PC_CONSUMERS);
    pthread_barrier_init(&pc.done, NULL, 1 + PC_CONSUMERS);
    pthread_t t[1 + PC_CONSUMERS];
    CHECK(pthread_create(&t[0], NULL, producer, NULL) == 0);
    for (int i = 0; i < PC_CONSUMERS; i++)
        CHECK(pthread_create(&t[1 + i], NULL, consumer, (void *)(intptr_t)i) == 0);
    for (int i = 0; i <= PC_CONSUMERS; i++) pthread_join(t[i], NULL);
    pthread_barrier_destroy(&pc.ready);
    pthread_barrier_destroy(&pc.done);
}

/* ---- a ring: each thread frees what its predecessor allocated -------------- */

enum { RING = 4, MAILBOX = 512, RING_STEPS = 60000, KEEP = 300 };

typedef struct {
    pthread_mutex_t lock;
    unsigned char *block[MAILBOX];
    size_t size[MAILBOX];
    uint64_t tag[MAILBOX];
    const void *arena[MAILBOX];
    int count;
} mailbox_t;

static mailbox_t box[RING];
static const void *ring_arena[RING];
static pthread_barrier_t ring_start, ring_end;
static unsigned char *kept[RING][KEEP];
static size_t kept_size[RING][KEEP];

static void take_and_free(int me, int all) {
    mailbox_t *mb = &box[me];
    pthread_mutex_lock(&mb->lock);
    while (mb->count > 0) {
        int i = --mb->count;
        CHECK_MSG(ts_verify(mb->block[i], mb->size[i], mb->tag[i]), "mail corrupted");
        CHECK(_ts_bins_block_arena(mb->block[i]) == mb->arena[i]);
        free(mb->block[i]);
        if (!all) break;
    }
    pthread_mutex_unlock(&mb->lock);
}

static void *ring_thread(void *arg) {
    int me = (int)(intptr_t)arg, next = (me + 1) % RING;
    uint64_t rng = 1000 + (uint64_t)me;
    for (int i = 0; i < KEEP; i++) {
        kept_size[me][i] = ts_rand_range(&rng, 1, 600);
        CHECK((kept[me][i] = malloc(kept_size[me][i])));
        ts_fill(kept[me][i], kept_size[me][i], (uint64_t)(me * KEEP + i));
    }
    ring_arena[me] = _ts_bins_thread_arena();
    pthread_barrier_wait(&ring_start);
    CHECK(ring_arena[me] != ring_arena[next]);
    for (int step = 0; step < RING_STEPS; step++) {
        /* Replace one kept block (local free and malloc). */
        int k = (int)ts_rand_range(&rng, 0, KEEP - 1);
        CHECK(ts_verify(kept[me][k], kept_size[me][k], (uint64_t)(me * KEEP + k)));
        free(kept[me][k]);
        kept_size[me][k] = ts_rand_range(&rng, 1, 600);
        CHECK((kept[me][k] = malloc(kept_size[me][k])));
        ts_fill(kept[me][k], kept_size[me][k], (uint64_t)(me * KEEP + k));
        /* Mail a new block to the next thread; free one from our own box. */
        size_t size = ts_rand_range(&rng, 1, 3000);
        uint64_t tag = ((uint64_t)me << 40) | (uint64_t)step;
        unsigned char *p = malloc(size);
        CHECK(p);
        ts_fill(p, size, tag);
        mailbox_t *mb = &box[next];
        pthread_mutex_lock(&mb->lock);
        if (mb->count < MAILBOX) {
            mb->block[mb->count] = p;
            mb->size[mb->count] = size;
            mb->tag[mb->count] = tag;
            mb->arena[mb->count] = ring_arena[me];
            mb->count++;
            p = NULL;
        }
        pthread_mutex_unlock(&mb->lock);
        free(p); /* the box was full: a local free */
        take_and_free(me, 0);
    }
    pthread_barrier_wait(&ring_end);
    take_and_free(me, 1);
    return NULL;
}

static void test_ring(void) {
    pthread_barrier_init(&ring_start, NULL, RING);
    pthread_barrier_init(&ring_end, NULL, RING);
    pthread_t t[RING];
    for (int i = 0; i < RING; i++) {
        pthread_mutex_init(&box[i].lock, NULL);
        CHECK(pthread_create(&t[i], NULL, ring_thread, (void *)(intptr_t)i) == 0);
    }
    for (int i = 0; i < RING; i++) pthread_join(t[i], NULL);
    /* The blocks each thread kept: intact and disjoint. */
    static ts_range_t ranges[RING * KEEP];
    for (int me = 0; me < RING; me++)
        for (int i = 0; i < KEEP; i++) {
            CHECK(ts_verify(kept[me][i], kept_size[me][i], (uint64_t)(me * KEEP + i)));
            ranges[me * KEEP + i] = (ts_range_t){(uintptr_t)kept[me][i], kept_size[me][i]};
        }
    CHECK(ts_find_overlap(ranges, RING * KEEP) < 0);
    for (int me = 0; me < RING; me++)
        for (int i = 0; i < KEEP; i++) free(kept[me][i]); /* into exited threads' arenas */
    pthread_barrier_destroy(&ring_start);
    pthread_barrier_destroy(&ring_end);
}

int main(void) {
    test_producer_consumers();
    test_ring();
    printf("bins_remote: ok\n");
    return 0;
}
