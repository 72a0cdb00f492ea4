/* A process whose main thread calls pthread_exit must end with its last
 * thread, also when main's tsalloc heap never gets its destructor: here
 * libtsalloc is loaded with dlopen (so only ts_malloc callers use it and main
 * has no heap at first), and main makes its heap in the last round of its
 * thread-specific destructors, after which glibc runs no more of them. The
 * kernel then marks the heap's robust mutex; the next thread exit must see
 * that (main_heap_orphaned in heap.c) and have the purge helper look at main,
 * or the helper, with every signal blocked, keeps the process alive.
 * Second case: main has an ordinary heap, and a worker makes its heap in its
 * last destructor round and dies after main, with no heap_free at all; the
 * helper finds out by looking again while main has no heap (purge.c). This
 * case hangs the old code only when the helper looks at main before main is
 * a zombie; without sleeps to force that it passed 6 of 6 runs on the code
 * before the fix (a variant with sleeps hung 4 of 4), so
 * it guards the path rather than proving the fix. The first case hung 1-2 of 6.
 * Each case runs in a child; the parent waits at most 20 s and checks that it
 * exited with status 0 after running its atexit handler.
 * Usage: core_exit_dlopen path/to/libtsalloc.so
 */
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"

static void *(*lib_malloc)(size_t);
static void (*lib_free)(void *);
static pthread_key_t key;
static pthread_t main_thread;
static int rounds;

/* Asks to be called again until the last round, then makes the calling
 * thread's heap, whose destructor glibc will not run. On a worker it then
 * waits for main to be gone, so that the worker dies without a word. */
static void destructor(void *value) {
    (void)value;
    if (++rounds < PTHREAD_DESTRUCTOR_ITERATIONS) {
        CHECK(pthread_setspecific(key, (void *)1) == 0);
        return;
    }
    lib_free(lib_malloc(100));
    if (!pthread_equal(pthread_self(), main_thread)) CHECK(pthread_join(main_thread, NULL) == 0);
}

/* main_late_heap: main's heap is the late one; this worker allocates. */
static void *worker_with_heap(void *arg) {
    (void)arg;
    static void *kept[12];
    for (int i = 0; i < 12; i++)
        CHECK((kept[i] = lib_malloc(1 << 20)) != NULL); /* the helper starts */
    CHECK(pthread_join(main_thread, NULL) == 0);
    CHECK_EQ(rounds, PTHREAD_DESTRUCTOR_ITERATIONS); /* main's heap was made in the last round */
    return NULL; /* this thread's exit must get the helper to look */
}

/* worker_late_heap: main has an ordinary heap; this worker's is the late one. */
static void *worker_late_heap(void *arg) {
    (void)arg;
    CHECK(pthread_setspecific(key, (void *)1) == 0);
    return NULL;
}

static void run_case(const char *lib_path, int main_late_heap) {
    pid_t pid = ts_fork_exit_reported();
    if (pid == 0) {
        void *lib = dlopen(lib_path, RTLD_NOW | RTLD_LOCAL);
        CHECK_MSG(lib != NULL, "dlopen %s: %s", lib_path, dlerror());
        lib_malloc = (void *(*)(size_t))dlsym(lib, "ts_malloc");
        lib_free = (void (*)(void *))dlsym(lib, "ts_free");
        CHECK(lib_malloc && lib_free);
        main_thread = pthread_self();
        CHECK(pthread_key_create(&key, destructor) == 0);
        pthread_t t;
        if (main_late_heap) {
            CHECK(pthread_setspecific(key, (void *)1) == 0);
            CHECK(pthread_create(&t, NULL, worker_with_heap, NULL) == 0);
        } else {
            static void *kept[12];
            for (int i = 0; i < 12; i++) CHECK((kept[i] = lib_malloc(1 << 20)) != NULL);
            CHECK(pthread_create(&t, NULL, worker_late_heap, NULL) == 0);
        }
        pthread_exit(NULL);
    }
    ts_expect_clean_exit(pid);
}

int main(int argc, char **argv) {
    CHECK(argc == 2);
    run_case(argv[1], 1);
    run_case(argv[1], 0);
    printf("ok\n");
    return 0;
}
