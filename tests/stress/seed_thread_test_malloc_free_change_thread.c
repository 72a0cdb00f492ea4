/* Seed 001 thread_test_malloc_free_change_thread: as thread_test_malloc_free,
 * but about half the blocks are handed to the next thread, which verifies and
 * frees them: blocks are freed by another thread than the one that allocated
 * them. Then no two live blocks overlap and every pattern is intact.
 * Usage: seed_thread_test_malloc_free_change_thread lock|nolock threads */
#include "seed_harness.h"

#define SLOTS   300
#define OPS     12000
#define MAILBOX 256

typedef struct {
    pthread_mutex_t lock;
    size_t count;
    seed_block_t blocks[MAILBOX]; /* handed over by the previous thread */
} mailbox_t;

static seed_block_t pool[64][SLOTS];
static mailbox_t mailbox[64];
static pthread_barrier_t start;
static long handed[64];

/* Frees everything the previous thread handed over. */
static void drain(int t) {
    mailbox_t *m = &mailbox[t];
    pthread_mutex_lock(&m->lock);
    for (size_t i = 0; i < m->count; i++) seed_release(&m->blocks[i]);
    m->count = 0;
    pthread_mutex_unlock(&m->lock);
}

static void *worker(void *arg) {
    int t = (int)(intptr_t)arg;
    mailbox_t *next = &mailbox[(t + 1) % seed_threads];
    uint64_t rng = 4242 + (uint64_t)t;
    pthread_barrier_wait(&start);
    for (int op = 0; op < OPS; op++) {
        seed_block_t *b = &pool[t][ts_rand_range(&rng, 0, SLOTS - 1)];
        if (!b->ptr) {
            *b = seed_alloc(ts_rand_range(&rng, 1, 2048), ((uint64_t)t << 32) | (uint64_t)op);
            continue;
        }
        int give = seed_threads > 1 && (ts_rand(&rng) & 1);
        pthread_mutex_lock(&next->lock);
        if (give && next->count < MAILBOX) {
            next->blocks[next->count++] = *b;
            b->ptr = NULL;
            handed[t]++;
        }
        pthread_mutex_unlock(&next->lock);
        if (b->ptr) seed_release(b);
        if (op % 16 == 0) drain(t);
    }
    SEED_CHECK_HEAP();
    seed_hold_for_check(); /* the main thread checks every live block */
    drain(t);
    for (int i = 0; i < SLOTS; i++)
        if (pool[t][i].ptr) seed_release(&pool[t][i]);
    SEED_CHECK_HEAP();
    return NULL;
}

/* Every live block: the pools and the mailboxes. */
static void check_all(void) {
    size_t n = (size_t)seed_threads * (SLOTS + MAILBOX);
    seed_block_t *live = calloc(n, sizeof *live);
    size_t k = 0;
    for (int t = 0; t < seed_threads; t++) {
        for (int i = 0; i < SLOTS; i++) live[k++] = pool[t][i];
        for (size_t i = 0; i < mailbox[t].count; i++) live[k++] = mailbox[t].blocks[i];
    }
    seed_check_live(live, k);
    free(live);
}

int main(int argc, char **argv) {
    seed_args(argc, argv);
    for (int t = 0; t < seed_threads; t++) pthread_mutex_init(&mailbox[t].lock, NULL);
    pthread_barrier_init(&start, NULL, (unsigned)seed_threads);
    seed_run_threads(worker, check_all);
    long total = 0;
    for (int t = 0; t < seed_threads; t++) total += handed[t];
    CHECK(seed_threads == 1 || total > 0);
    printf("seed_thread_test_malloc_free_change_thread %s %d threads: ok (%ld blocks freed by "
           "another thread)\n",
           seed_api->name, seed_threads, total);
    return 0;
}
