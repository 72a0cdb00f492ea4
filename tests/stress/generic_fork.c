/* fork while other threads allocate and free, for every design (glibc's
 * tst-malloc-fork-deadlock is the model): each child must be able to
 * allocate, free blocks its parent's threads allocated, and exit. A child
 * that deadlocks is killed by alarm() and fails the test. */
#include "check.h"

#include <pthread.h>
#include <stdatomic.h>

enum { WORKERS = 3, FORKS = 40, SHARED = 256 };

static atomic_int stop;
static void *shared[SHARED]; /* blocks from worker threads, read by children */
static pthread_mutex_t shared_lock = PTHREAD_MUTEX_INITIALIZER;

static void *worker(void *arg) {
    uint64_t rng = (uintptr_t)arg * 7777 + 1;
    void *mine[64] = {0};
    while (!atomic_load(&stop)) {
        size_t i = ts_rand(&rng) % 64;
        free(mine[i]);
        size_t n = ts_rand_range(&rng, 1, (ts_rand(&rng) % 16) ? 2000 : 300000);
        mine[i] = malloc(n);
        CHECK(mine[i]);
        memset(mine[i], 0x3c, n < 64 ? n : 64);
        if (ts_rand(&rng) % 8 == 0) {
            size_t s = ts_rand(&rng) % SHARED;
            void *b = malloc(48);
            CHECK(b);
            memset(b, (int)(s & 0xff), 48);
            pthread_mutex_lock(&shared_lock);
            void *old = shared[s];
            shared[s] = b;
            pthread_mutex_unlock(&shared_lock);
            free(old);
        }
    }
    for (int i = 0; i < 64; i++) free(mine[i]);
    return NULL;
}

static void child(void) {
    alarm(20);
    /* Blocks of the parent's other threads: contents intact, freeable here. */
    for (int s = 0; s < SHARED; s++) {
        unsigned char *b = shared[s]; /* the lock was held by nobody at fork */
        if (!b) continue;
        for (int k = 0; k < 48; k++)
            if (b[k] != (unsigned char)(s & 0xff)) _exit(3);
        free(b);
    }
    void *blocks[200];
    for (int i = 0; i < 200; i++) {
        blocks[i] = malloc((size_t)(i * 37 % 5000) + 1);
        if (!blocks[i]) _exit(4);
    }
    void *big = malloc(3u << 20);
    if (!big) _exit(5);
    memset(big, 1, 3u << 20);
    free(big);
    for (int i = 0; i < 200; i++) free(blocks[i]);
    _exit(0);
}

int main(void) {
    ts_require_preloaded();
    pthread_t t[WORKERS];
    for (long i = 0; i < WORKERS; i++) CHECK(pthread_create(&t[i], NULL, worker, (void *)i) == 0);
    for (int f = 0; f < FORKS; f++) {
        /* Hold the shared-table lock across fork so the child's view of it is consistent. */
        pthread_mutex_lock(&shared_lock);
        pid_t pid = fork();
        if (pid == 0) {
            pthread_mutex_unlock(&shared_lock);
            child();
        }
        pthread_mutex_unlock(&shared_lock);
        CHECK(pid > 0);
        int status = 0;
        CHECK(waitpid(pid, &status, 0) == pid);
        CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0,
                  "child %d of fork %d: status 0x%x (signal 14 = deadlock)", pid, f, status);
    }
    atomic_store(&stop, 1);
    for (int i = 0; i < WORKERS; i++) pthread_join(t[i], NULL);
    for (int s = 0; s < SHARED; s++) free(shared[s]);
    printf("generic_fork: ok (%d forks with %d busy threads)\n", FORKS, WORKERS);
    return 0;
}
