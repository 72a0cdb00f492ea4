/* Regression tests, both about glibc's thread-stack cache calling
 * free() at odd moments (from pthread_join or a thread's exit, after the key
 * destructors, holding dl_stack_cache_lock). Run under LD_PRELOAD of
 * libtsalloc.so with small stack-cache tunables so the cache overflows.
 *
 * deadlock: a thread that never allocated joins another; the DTV free inside
 *   pthread_join gave it a heap, whose creation started the purge thread from
 *   inside free() -> pthread_create -> dl_stack_cache_lock again: a hang
 *   (caught by the test timeout). The purge thread is now only started from
 *   malloc.
 * stale-tsd: a heap made after glibc cleared a dying thread's keys stayed in
 *   the cached stack's thread-specific data; the next thread on that stack
 *   "abandoned" it at exit although another live thread owned it by then, so
 *   two threads allocated from one heap: blocks handed out twice.
 */
#include "check.h"

#include <dirent.h>
#include <malloc.h>
#include <pthread.h>
#include <sched.h>
#include <semaphore.h>

static void *nothing(void *arg) {
    return arg;
}

static void *joiner(void *arg) {
    pthread_join(*(pthread_t *)arg, NULL); /* frees the joined thread's DTV */
    return NULL;
}

static void deadlock(void) {
    for (int round = 0; round < 3; round++) {
        pthread_t a, j;
        CHECK(pthread_create(&a, NULL, nothing, NULL) == 0);
        CHECK(pthread_create(&j, NULL, joiner, &a) == 0);
        CHECK(pthread_join(j, NULL) == 0);
    }
}

static int tasks(void) {
    int n = 0;
    DIR *d = opendir("/proc/self/task");
    CHECK(d);
    struct dirent *e;
    while ((e = readdir(d)))
        if (e->d_name[0] != '.') n++;
    closedir(d);
    return n;
}

enum { M = 200000 };
static void *dblocks[M], *eblocks[M];
static sem_t d_ready, d_go, e_done, start;

static void *thread_d(void *arg) {
    (void)arg;
    free(malloc(40)); /* D takes a heap from the pool */
    sem_post(&d_ready);
    sem_wait(&d_go);
    sem_wait(&start);
    for (int i = 0; i < M; i++) CHECK((dblocks[i] = malloc(40)));
    return NULL;
}

static void *thread_e(void *arg) {
    (void)arg;
    free(malloc(40));
    sem_post(&e_done);
    sem_wait(&start);
    for (int i = 0; i < M; i++) CHECK((eblocks[i] = malloc(40)));
    return NULL;
}

static int cmp_ptr(const void *a, const void *b) {
    uintptr_t x = *(const uintptr_t *)a, y = *(const uintptr_t *)b;
    return x < y ? -1 : x > y;
}

static void stale_tsd(void) {
    sem_init(&d_ready, 0, 0);
    sem_init(&d_go, 0, 0);
    sem_init(&e_done, 0, 0);
    sem_init(&start, 0, 0);
    int base = tasks();
    pthread_attr_t detached, small;
    pthread_attr_init(&detached);
    pthread_attr_setdetachstate(&detached, PTHREAD_CREATE_DETACHED);
    pthread_attr_init(&small);
    pthread_attr_setstacksize(&small, 1 << 20);
    pthread_t a, b, c, d, e;
    /* A: finished, its 1 MiB stack cached. */
    CHECK(pthread_create(&a, &small, nothing, NULL) == 0);
    pthread_join(a, NULL);
    /* B: detached, never allocates; its exit overflows the cache and frees
     * A's DTV: B's first allocator call comes after its keys were cleared. */
    CHECK(pthread_create(&b, &detached, nothing, NULL) == 0);
    while (tasks() > base) sched_yield();
    malloc_trim(0); /* reaps B's heap into the pool */
    CHECK(pthread_create(&d, &small, thread_d, NULL) == 0);
    sem_wait(&d_ready);
    /* C reuses B's stack, never allocates, exits. */
    CHECK(pthread_create(&c, NULL, nothing, NULL) == 0);
    pthread_join(c, NULL);
    CHECK(pthread_create(&e, &small, thread_e, NULL) == 0);
    sem_wait(&e_done);
    sem_post(&d_go);
    sem_post(&start);
    sem_post(&start);
    pthread_join(d, NULL);
    pthread_join(e, NULL);
    static void *all[2 * M];
    memcpy(all, dblocks, sizeof dblocks);
    memcpy(all + M, eblocks, sizeof eblocks);
    qsort(all, 2 * M, sizeof *all, cmp_ptr);
    long twice = 0;
    for (int i = 1; i < 2 * M; i++) twice += all[i] == all[i - 1];
    CHECK_MSG(twice == 0, "%ld blocks handed out to two threads at once", twice);
    for (int i = 0; i < M; i++) free(dblocks[i]), free(eblocks[i]);
}

int main(int argc, char **argv) {
    ts_require_preloaded();
    CHECK(argc > 1);
    if (!strcmp(argv[1], "deadlock"))
        deadlock();
    else if (!strcmp(argv[1], "stale-tsd"))
        stale_tsd();
    else
        CHECK(!"unknown case");
    printf("core_glibc_stacks %s: ok\n", argv[1]);
    return 0;
}
