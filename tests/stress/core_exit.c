/* A process whose main thread calls pthread_exit ends when its last thread
 * ends (POSIX: as if by exit(0), so exit handlers run). tsalloc's purge
 * helper is a thread too, and must not keep such a process alive. Each case
 * runs in a child; the parent waits for it at most 20 s and checks that it
 * exited with status 0 after running its atexit handler.
 *   worker_with_heap:     the last thread allocated (its exit wakes the
 *                         helper, if the helper has not found main gone
 *                         already: it looks while main has no heap);
 *   worker_without_heap:  the last thread never allocated (the helper finds
 *                         out by looking again after growing pauses);
 *   worker_with_late_key: the last thread allocates in a key destructor
 *                         after its heap was handed over (the orphan heap is
 *                         no thread's).
 * The helper must end once main is gone, so exit handlers run on a program
 * thread, with its signal mask.
 */
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"

/* Exit handlers run on a thread of the program's, not one that blocks
 * every signal. */
static void check_exit_thread(void) {
    sigset_t blocked;
    CHECK(pthread_sigmask(SIG_BLOCK, NULL, &blocked) == 0);
    CHECK(!sigismember(&blocked, SIGTERM));
}

/* Enough memory that the helper starts however many threads have heaps. */
enum { BLOCKS = 16 };
static void allocate_and_free(void) {
    void *b[BLOCKS];
    for (int i = 0; i < BLOCKS; i++) {
        b[i] = malloc(1 << 20);
        CHECK(b[i] != NULL);
        memset(b[i], 1, 1 << 20);
    }
    free(malloc(100)); /* a slow path: the helper starts here */
    for (int i = 0; i < BLOCKS; i++) free(b[i]);
}

static pthread_t main_thread;

static void *worker_with_heap(void *arg) {
    (void)arg;
    CHECK(pthread_join(main_thread, NULL) == 0); /* main is gone */
    allocate_and_free();
    /* This one, main as a zombie, and the helper this allocation started,
     * unless it has already seen main gone and ended. */
    int threads = ts_thread_count();
    CHECK_MSG(threads == 2 || threads == 3, "%d threads", threads);
    return NULL;
}

/* A key made after tsalloc's whose destructor allocates: that allocation
 * comes after the thread's heap was handed over, from the orphan heap, which
 * belongs to no thread. */
static pthread_key_t late_key;
static void late_destructor(void *value) {
    free(value);
    free(malloc(200));
}

static void *worker_with_late_key(void *arg) {
    (void)arg;
    CHECK(pthread_join(main_thread, NULL) == 0);
    CHECK(pthread_setspecific(late_key, malloc(100)) == 0);
    return NULL;
}

static void *worker_without_heap(void *arg) {
    (void)arg;
    CHECK(pthread_join(main_thread, NULL) == 0);
    return NULL; /* never called the allocator */
}

static void run_case(void *(*worker)(void *), int allocate_in_main) {
    pid_t pid = ts_fork_exit_reported();
    if (pid == 0) {
        CHECK(atexit(check_exit_thread) == 0);
        main_thread = pthread_self();
        if (allocate_in_main) allocate_and_free();
        pthread_t t;
        CHECK(pthread_create(&t, NULL, worker, NULL) == 0);
        if (allocate_in_main) CHECK_EQ(ts_thread_count(), 3); /* main, worker, helper */
        pthread_exit(NULL);
    }
    ts_expect_clean_exit(pid);
}

int main(void) {
    free(malloc(1));
    run_case(worker_with_heap, 0);
    run_case(worker_without_heap, 1);
    CHECK(pthread_key_create(&late_key, late_destructor) == 0);
    run_case(worker_with_late_key, 1);
    printf("ok\n");
    return 0;
}
