/* The purge helper thread is started only when it is worth a thread: a
 * single-threaded program with a small heap stays single-threaded (some
 * system calls, unshare(CLONE_NEWUSER) and setns() into a mount namespace,
 * refuse multithreaded callers); past TS_PURGE_THREAD_MIN_BYTES, or once a
 * second thread allocates, it runs, so that freed memory goes back without
 * further allocator calls. A fork child of a multithreaded parent is
 * single-threaded again: the parent's other heaps do not count there.
 * A thread's exit makes the helper look whether main has exited only when
 * main has no heap (main_checks): while main's heap lives, main has not.
 */
#include <fcntl.h>
#include <pthread.h>
#include <sys/wait.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "core/internal.h"

static pthread_barrier_t hold;
static void *allocate_and_wait(void *arg) {
    (void)arg;
    free(malloc(100)); /* this thread has a heap */
    pthread_barrier_wait(&hold);
    pthread_barrier_wait(&hold);
    return NULL;
}

/* A thread whose first allocator call frees another thread's block: that
 * makes its heap, and asks for the helper, which starts at the next
 * allocation slow path. */
static void *block_from_main;
static void *free_and_wait(void *arg) {
    (void)arg;
    free(block_from_main);
    pthread_barrier_wait(&hold);
    pthread_barrier_wait(&hold);
    return NULL;
}

static int child_stays_single(void);

/* One block of each class of big pages (80 KiB - 512 KiB), each written a
 * little: every such page is a whole segment, 4 MiB committed for its first
 * block, 47 MiB in all, yet the program uses 3 MiB. The purge thread's rule counts
 * memory in use, so a short program with a few big blocks (git log, python3
 * -c pass) stays single-threaded: a thread would cost it more than all its
 * purging. Returns 0, or what went wrong. */
static int big_blocks_one_thread(void) {
    static void *b[12];
    int n = 0;
    for (size_t p2 = (size_t)64 << 10; p2 <= ((size_t)256 << 10); p2 *= 2)
        for (size_t k = 1; k <= 4; k++) {
            b[n] = malloc(p2 + k * (p2 / 4));
            if (!b[n]) return 1;
            memset(b[n++], 7, 64);
        }
    if (atomic_load(&_ts_stats.committed) < 4 * TS_PURGE_THREAD_MIN_BYTES) return 2;
    if (_ts_stat_used() >= TS_PURGE_THREAD_MIN_BYTES) return 3;
    for (int i = 0; i < n; i++) free(b[i]);
    for (int i = 0; i < 40; i++)
        free(malloc(1100 + 150 * (size_t)i)); /* new classes: safe points */
    return ts_thread_count() == 1 ? 0 : 4;
}

static void *allocate(void *arg) {
    free(malloc(100 + (size_t)arg));
    return NULL;
}

static size_t main_checks(void) {
    return atomic_load(&_ts_stats.main_checks);
}

/* In a child, on a thread that waits for main to call pthread_exit: main's
 * heap went with it, so from now on exits ask the helper to look. */
static size_t checks_before_exit;
static void *after_main_exits(void *main_thread) {
    CHECK(pthread_join(*(pthread_t *)main_thread, NULL) == 0);
    CHECK_EQ(main_checks(), checks_before_exit + 1); /* main's own exit */
    pthread_t t;
    CHECK(pthread_create(&t, NULL, allocate, NULL) == 0);
    CHECK(pthread_join(t, NULL) == 0);
    CHECK_EQ(main_checks(), checks_before_exit + 2);
    exit(0);
}

/* Thread exits while main has a heap cost the helper nothing; once main has
 * gone through pthread_exit, each exit asks it to look. */
static void exits_look_at_main_only_when_needed(void) {
    size_t before = main_checks();
    for (int i = 0; i < 20; i++) {
        pthread_t t;
        CHECK(pthread_create(&t, NULL, allocate, (void *)(intptr_t)i) == 0);
        CHECK(pthread_join(t, NULL) == 0);
    }
    CHECK_EQ(main_checks(), before);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        static pthread_t main_thread;
        main_thread = pthread_self();
        checks_before_exit = main_checks();
        pthread_t t;
        CHECK(pthread_create(&t, NULL, after_main_exits, &main_thread) == 0);
        pthread_exit(NULL);
    }
    int status = 0;
    CHECK(waitpid(pid, &status, 0) == pid);
    CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0, "main_checks child: status %#x",
              status);
}

/* parent_threads: the threads at the fork, 3 when the helper runs. */
static void fork_child_stays_single(void *(*second_thread)(void *), int parent_threads) {
    pthread_barrier_init(&hold, NULL, 2);
    pthread_t t;
    CHECK(pthread_create(&t, NULL, second_thread, NULL) == 0);
    pthread_barrier_wait(&hold);
    CHECK_EQ(ts_thread_count(), parent_threads);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) _exit(child_stays_single());
    int status = 0;
    CHECK(waitpid(pid, &status, 0) == pid);
    CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0,
              "the fork child got a helper thread (status %d)", status);
    pthread_barrier_wait(&hold);
    CHECK(pthread_join(t, NULL) == 0);
    pthread_barrier_destroy(&hold);
}

/* In a child forked while another thread of the parent has a heap. */
static int child_stays_single(void) {
    static void *b[600];
    for (int i = 0; i < 600; i++) b[i] = malloc(2048); /* about 20 pages */
    for (int i = 0; i < 600; i++) free(b[i]);          /* retired: purge work */
    for (int i = 0; i < 40; i++)
        free(malloc(1100 + 150 * (size_t)i)); /* new classes: safe points */
    if (_ts_stat_used() >= TS_PURGE_THREAD_MIN_BYTES) return 2;
    return ts_thread_count() == 1 ? 0 : 1;
}

int main(void) {
    /* A sanitizer's runtime commits 4.1 MB of its own before main (measured):
     * with the program's, past the helper's rule before the test begins. */
    if (ts_sanitizer_loaded()) {
        printf("core_helper: a sanitizer build's heap is not small: skipped\n");
        return 77;
    }
    /* A small program: many small blocks, medium and big-page ones, all
     * freed, three times over. (Large blocks cross the threshold in the
     * child below.) */
    for (int round = 0; round < 3; round++) {
        static void *p[1000];
        for (int i = 0; i < 1000; i++) p[i] = malloc((size_t)(i % 700) + 1);
        void *medium = malloc(40000), *big = malloc(300000);
        CHECK(medium && big);
        for (int i = 0; i < 1000; i++) free(p[i]);
        free(medium);
        free(big);
    }
    /* The bound is the helper's rule itself (exact): below it no helper may
     * start. The program must stay clearly below it for the case to mean
     * anything: it uses about 0.8 MiB (it commits 5.9 MiB, most of it the
     * areas of pages it never wrote: the rule does not count those). A
     * failure here means the core writes more for a small program: shrink
     * the program, not the rule. */
    size_t used = _ts_stat_used();
    CHECK_MSG(used < TS_PURGE_THREAD_MIN_BYTES,
              "a small program uses %zu bytes, not under the purge thread's %zu", used,
              TS_PURGE_THREAD_MIN_BYTES);
    CHECK_EQ(ts_thread_count(), 1);

    pid_t big = fork();
    CHECK(big >= 0);
    if (big == 0) _exit(big_blocks_one_thread());
    int big_status = 0;
    CHECK(waitpid(big, &big_status, 0) == big);
    CHECK_MSG(WIFEXITED(big_status) && WEXITSTATUS(big_status) == 0,
              "a program with a few big blocks: status %#x (2: committed too little to mean "
              "anything, 3: counted as used, 4: a purge thread)",
              big_status);

    /* A bigger heap, still one thread: the helper starts (at the allocation
     * that crossed). In a child, so that the parent stays single-threaded
     * for the cases below. */
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        CHECK_EQ(ts_thread_count(), 1);
        enum { N = 12 };
        void *blocks[N];
        for (int i = 0; i < N; i++) {
            blocks[i] = malloc(1u << 20);
            CHECK(blocks[i] != NULL);
            memset(blocks[i], 1, 1u << 20);
        }
        CHECK(atomic_load(&_ts_stats.committed) >= TS_PURGE_THREAD_MIN_BYTES);
        CHECK_EQ(ts_thread_count(), 2);
        for (int i = 0; i < N; i++) free(blocks[i]);
        _exit(0);
    }
    int status = 0;
    CHECK(waitpid(pid, &status, 0) == pid);
    CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0, "big heap child: status %#x", status);
    CHECK_EQ(ts_thread_count(), 1);

    /* A second thread with a heap, then a fork: the child has one thread.
     * First with the helper asked for but not started at the fork (the
     * child must not inherit the request), then with it running. */
    block_from_main = malloc(64);
    fork_child_stays_single(free_and_wait, 2);
    fork_child_stays_single(allocate_and_wait, 3);
    exits_look_at_main_only_when_needed();
    return 0;
}
