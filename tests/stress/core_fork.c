/* fork() while other threads allocate and free (after glibc's
 * tst-malloc-fork-deadlock): every child must be able to allocate, free,
 * free blocks that other parent threads allocated, and start a thread of its
 * own, without deadlocking. Each child has an alarm; ctest has a timeout.
 *
 * Each child first takes every segment's lock and checks what it guards
 * (the free mask and count against the pages' states): a lock the fork left
 * held hangs the child, a segment caught half changed fails it. The busy
 * threads take and give back pages all the time (blocks up to 900 KB), so
 * their segment locks are often held when the fork comes. (What the owner
 * changes without a lock, a page of another thread's being set up, may be
 * caught partway: ts_heap_check() would report that, so it is not run.)
 */
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "core/internal.h"

#define BUSY   4
#define FORKS  40
#define HANDED 256

static volatile int stop;
static pthread_mutex_t handed_lock = PTHREAD_MUTEX_INITIALIZER;
static void *handed[HANDED]; /* blocks of busy threads, with their tag in the first word */

static void *busy(void *arg) {
    uint64_t rng = (uintptr_t)arg;
    void *mine[64] = {0};
    while (!stop) {
        unsigned i = (unsigned)(ts_rand(&rng) % 64);
        free(mine[i]);
        size_t n =
            ts_rand(&rng) % 8 ? ts_rand_range(&rng, 8, 4000) : ts_rand_range(&rng, 5000, 900000);
        mine[i] = malloc(n);
        CHECK(mine[i] != NULL);
        memset(mine[i], 0x5a, n < 256 ? n : 256);
        if (ts_rand(&rng) % 4 == 0) {
            uint64_t *b = malloc(64);
            CHECK(b != NULL);
            b[0] = 0xfeedULL;
            b[7] = (uint64_t)(uintptr_t)b;
            unsigned k = (unsigned)(ts_rand(&rng) % HANDED);
            pthread_mutex_lock(&handed_lock);
            void *old = handed[k];
            handed[k] = b;
            pthread_mutex_unlock(&handed_lock);
            free(old);
        }
    }
    for (int i = 0; i < 64; i++) free(mine[i]);
    return NULL;
}

static void *child_thread(void *arg) {
    (void)arg;
    for (int i = 0; i < 2000; i++) {
        void *p = malloc((size_t)(i % 700) + 1);
        CHECK(p != NULL);
        free(p);
    }
    return NULL;
}

static void check_segment(ts_segment_t *seg, void *arg) {
    (void)arg;
    if (!seg) return;
    ts_seg_lock(seg);
    _ts_check_segment_locked(seg, "fork child");
    ts_seg_unlock(seg);
}

static void child(int round) {
    alarm(20);
    _ts_segments_visit(check_segment, NULL);
    /* Blocks the parent's other threads allocated. */
    for (int k = 0; k < HANDED; k++) {
        uint64_t *b = handed[k];
        if (!b) continue;
        CHECK(b[0] == 0xfeedULL && b[7] == (uint64_t)(uintptr_t)b);
        free(b);
    }
    uint64_t rng = (uint64_t)round + 99;
    void *p[512];
    size_t len[512];
    for (int i = 0; i < 512; i++) {
        size_t n = i % 64 ? ts_rand_range(&rng, 1, 3000) : ts_rand_range(&rng, 600000, 3000000);
        p[i] = malloc(n);
        CHECK(p[i] != NULL);
        len[i] = n < 4096 ? n : 4096;
        ts_fill(p[i], len[i], (uint64_t)i);
    }
    for (int i = 0; i < 512; i++) {
        CHECK(ts_verify(p[i], len[i], (uint64_t)i));
        free(p[i]);
    }
    pthread_t t;
    CHECK(pthread_create(&t, NULL, child_thread, NULL) == 0);
    CHECK(pthread_join(t, NULL) == 0);
    _exit(0);
}

int main(void) {
    pthread_t t[BUSY];
    for (int i = 0; i < BUSY; i++)
        CHECK(pthread_create(&t[i], NULL, busy, (void *)(uintptr_t)(i + 1)) == 0);
    usleep(20000);
    for (int round = 0; round < FORKS; round++) {
        pthread_mutex_lock(&handed_lock); /* the child gets the table in one piece */
        pid_t pid = fork();
        CHECK(pid >= 0);
        if (pid == 0) {
            pthread_mutex_unlock(&handed_lock);
            child(round);
        }
        pthread_mutex_unlock(&handed_lock);
        int status = 0;
        CHECK(waitpid(pid, &status, 0) == pid);
        CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0,
                  "child %d failed: status %#x (signal %d)", round, status,
                  WIFSIGNALED(status) ? WTERMSIG(status) : 0);
    }
    stop = 1;
    for (int i = 0; i < BUSY; i++) CHECK(pthread_join(t[i], NULL) == 0);
    for (int k = 0; k < HANDED; k++) free(handed[k]);
    printf("ok: %d forks while %d threads allocated\n", FORKS, BUSY);
    return 0;
}
