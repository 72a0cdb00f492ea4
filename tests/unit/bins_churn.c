/* bins: arenas of exited threads are adopted by new threads, so thread churn
 * never grows the number of arenas past the peak number of live threads;
 * blocks freed into an unowned arena are safe and are handed out again by the
 * thread that adopts it; a thread may still malloc and free after its arena
 * was given back (in later TLS destructors). */
#include "check.h"

#include <pthread.h>

#include "designs/bins/bins.h"

enum { LEFT = 50 };

typedef struct {
    unsigned char *left[LEFT]; /* blocks the thread leaves behind for main */
    size_t size[LEFT];
    const void *arena;
    int seed;
} churn_t;

static void *churn_thread(void *arg) {
    churn_t *c = arg;
    uint64_t rng = (uint64_t)c->seed + 1;
    void *tmp[100];
    for (int i = 0; i < 100; i++) CHECK((tmp[i] = malloc(ts_rand_range(&rng, 1, 5000))));
    for (int i = 0; i < LEFT; i++) {
        c->size[i] = ts_rand_range(&rng, 1, 5000);
        CHECK((c->left[i] = malloc(c->size[i])));
        ts_fill(c->left[i], c->size[i], (uint64_t)(c->seed * LEFT + i));
    }
    for (int i = 0; i < 100; i++) free(tmp[i]);
    c->arena = _ts_bins_thread_arena();
    CHECK(c->arena != NULL);
    return NULL;
}

static void verify_and_free(churn_t *c) {
    for (int i = 0; i < LEFT; i++) {
        CHECK_MSG(ts_verify(c->left[i], c->size[i], (uint64_t)(c->seed * LEFT + i)),
                  "block left by thread %d corrupted", c->seed);
        CHECK(_ts_bins_block_arena(c->left[i]) == c->arena);
        free(c->left[i]); /* a remote free into an arena no thread owns */
    }
}

/* One thread at a time: two arenas in all (main's and the one they share). */
static void test_sequential(void) {
    free(malloc(1)); /* main has its arena */
    size_t base = _ts_bins_arena_count();
    churn_t prev = {0};
    for (int t = 0; t < 300; t++) {
        churn_t c = {.seed = t};
        pthread_t tid;
        CHECK(pthread_create(&tid, NULL, churn_thread, &c) == 0);
        pthread_join(tid, NULL);
        /* Exact: an exited thread's arena is adopted by the next (measured:
         * base + 1 after every thread); a leak per thread grows by 300. */
        CHECK_MSG(_ts_bins_arena_count() <= base + 1, "thread %d: %zu arenas (base %zu)", t,
                  _ts_bins_arena_count(), base);
        if (t > 0) CHECK(c.arena == prev.arena); /* the same arena, adopted again */
        if (t > 0) verify_and_free(&prev);
        prev = c;
    }
    verify_and_free(&prev);
}

/* Waves of 6 concurrent threads: at most 6 more arenas, ever. */
static void test_waves(void) {
    enum { WAVE = 6 };
    size_t base = _ts_bins_arena_count();
    for (int w = 0; w < 40; w++) {
        churn_t c[WAVE];
        pthread_t tid[WAVE];
        for (int i = 0; i < WAVE; i++) {
            c[i] = (churn_t){.seed = 1000 + w * WAVE + i};
            CHECK(pthread_create(&tid[i], NULL, churn_thread, &c[i]) == 0);
        }
        for (int i = 0; i < WAVE; i++) pthread_join(tid[i], NULL);
        for (int i = 0; i < WAVE; i++) verify_and_free(&c[i]);
        /* Exact: at most one arena per thread alive at once (measured: base
         * + 1, the threads mostly running one after another here). */
        CHECK_MSG(_ts_bins_arena_count() <= base + WAVE, "wave %d: %zu arenas (base %zu)", w,
                  _ts_bins_arena_count(), base);
    }
    /* Every arena but main's is free for the next thread. */
    CHECK_EQ(_ts_bins_free_arena_count(), _ts_bins_arena_count() - 1);
}

/* A block freed (by main) into the arena of an exited thread comes back out
 * of that arena once a new thread adopts it. */
static struct {
    void *orphan;
    const void *arena;
    int found;
} adopt;

static void *leave_one(void *unused) {
    (void)unused;
    adopt.orphan = malloc(48);
    CHECK(adopt.orphan);
    adopt.arena = _ts_bins_thread_arena();
    return NULL;
}

static void *find_it(void *unused) {
    (void)unused;
    static void *got[20000];
    int n = 0;
    for (; n < 20000; n++) {
        got[n] = malloc(48);
        CHECK(got[n]);
        if (got[n] == adopt.orphan) {
            adopt.found = 1;
            n++;
            break;
        }
    }
    CHECK(_ts_bins_thread_arena() == adopt.arena);
    for (int i = 0; i < n; i++) free(got[i]);
    return NULL;
}

static void test_adoption_drains(void) {
    pthread_t tid;
    CHECK(pthread_create(&tid, NULL, leave_one, NULL) == 0);
    pthread_join(tid, NULL);
    memset(adopt.orphan, 0x77, 48);
    free(adopt.orphan);
    CHECK(pthread_create(&tid, NULL, find_it, NULL) == 0);
    pthread_join(tid, NULL);
    CHECK_MSG(adopt.found, "the block freed into an unowned arena never came back");
}

/* malloc and free from a TLS destructor that runs after ours. */
static pthread_key_t late_key;
static int late_ok;

static void late_destructor(void *value) {
    unsigned char *p = value;
    CHECK(ts_verify(p, 300, 5));
    free(p); /* this thread's arena may already be given back */
    unsigned char *q = malloc(1000);
    CHECK(q);
    ts_fill(q, 1000, 6);
    CHECK(ts_verify(q, 1000, 6));
    free(q);
    void *big = malloc((size_t)3 << 20);
    CHECK(big);
    free(big);
    late_ok++;
}

static void *late_thread(void *unused) {
    (void)unused;
    unsigned char *p = malloc(300);
    CHECK(p);
    ts_fill(p, 300, 5);
    pthread_setspecific(late_key, p);
    return NULL;
}

static void test_after_exit(void) {
    size_t base = _ts_bins_arena_count();
    for (int i = 0; i < 50; i++) {
        /* A key made after the design's runs its destructor later. */
        CHECK(pthread_key_create(&late_key, late_destructor) == 0);
        pthread_t tid;
        CHECK(pthread_create(&tid, NULL, late_thread, NULL) == 0);
        pthread_join(tid, NULL);
        pthread_key_delete(late_key);
    }
    CHECK_EQ(late_ok, 50);
    /* No arena more than at the start (measured); 2 is slack, far below
     * the 50 more that an arena leaked per late thread makes. */
    CHECK_MSG(_ts_bins_arena_count() <= base + 2, "%zu arenas (base %zu)", _ts_bins_arena_count(),
              base);
}

int main(void) {
    test_sequential();
    test_waves();
    test_adoption_drains();
    test_after_exit();
    printf("bins_churn: ok\n");
    return 0;
}
