/* Programs with known allocations for the recorder test (record.sh).
 *
 *   record_known known     malloc 3 blocks, realloc one, free two, calloc one;
 *                          the trace must be exactly those seven lines
 *   record_known threads   4 threads allocating, resizing and freeing, with
 *                          blocks handed between threads: the trace must
 *                          replay (memsim checks every slot's liveness)
 *   record_known fork      a block allocated before fork() and freed on both
 *                          sides: the parent's trace holds only its own
 *                          operations; with %p the child writes its own
 *   record_known aligned   every aligned form, recorded as m with its size
 *   record_known last      main ends with pthread_exit; the process ends when
 *                          its other thread does (no return from main): the
 *                          trace must still be complete
 *
 * No stdio before the operations (it would allocate); results go through
 * write(2), and a wrong value exits non-zero.
 */
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static void fail(const char *what) {
    (void)!write(2, "record_known: FAIL ", 19);
    (void)!write(2, what, strlen(what));
    (void)!write(2, "\n", 1);
    exit(1);
}

static int known(void) {
    char *a = malloc(100), *b = malloc(200), *c = malloc(300);
    if (!a || !b || !c) fail("malloc");
    memset(b, 'b', 200);
    b = realloc(b, 5000);
    if (!b || b[0] != 'b' || b[199] != 'b') fail("realloc lost the contents");
    free(a);
    free(c);
    int *d = calloc(10, 32);
    if (!d || d[0] || d[79]) fail("calloc not zeroed");
    free(NULL); /* not recorded */
    return 0;
}

enum { THREADS = 4, OPS = 20000, KEEP = 64 };
static _Atomic(void *) handoff[THREADS * 4];

static void *worker(void *arg) {
    uint64_t seed = (uintptr_t)arg * 2654435761u + 1;
    void *mine[KEEP] = {0};
    for (int i = 0; i < OPS; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        unsigned r = (unsigned)(seed >> 33), k = r % KEEP;
        size_t size = 1 + (r >> 8) % 3000;
        switch ((r >> 20) % 6) {
        case 0:
        case 1:
            free(mine[k]);
            mine[k] = malloc(size);
            break;
        case 2:
            mine[k] = realloc(mine[k], size);
            break;
        case 3:
            free(mine[k]);
            mine[k] = calloc(size, 2);
            break;
        case 4: /* hand a block to whichever thread picks it up */
            free(atomic_exchange(&handoff[r % (THREADS * 4)], mine[k]));
            mine[k] = NULL;
            break;
        default:
            free(mine[k]);
            mine[k] = NULL;
            if (posix_memalign(&mine[k], 64, size)) fail("posix_memalign");
        }
        if (mine[k] && ((uintptr_t)mine[k] & 15)) fail("misaligned block");
    }
    for (int k = 0; k < KEEP; k++) free(mine[k]);
    return NULL;
}

static int threads(void) {
    pthread_t tid[THREADS];
    for (long t = 0; t < THREADS; t++)
        if (pthread_create(&tid[t], NULL, worker, (void *)t)) fail("pthread_create");
    for (int t = 0; t < THREADS; t++) pthread_join(tid[t], NULL);
    for (int i = 0; i < THREADS * 4; i++) free(atomic_exchange(&handoff[i], NULL));
    return 0;
}

static int forked(void) {
    char *before = malloc(1111);
    if (!before) fail("malloc");
    pid_t pid = fork();
    if (pid < 0) fail("fork");
    if (pid == 0) {
        free(before); /* allocated by the parent: unknown to a child's own trace */
        char *mine = malloc(2222);
        free(mine);
        exit(0);
    }
    int status;
    if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status)) fail("child");
    char *after = malloc(3333);
    free(before);
    free(after);
    return 0;
}

static int aligned(void) {
    void *p = NULL;
    if (posix_memalign(&p, 256, 1000) || ((uintptr_t)p & 255)) fail("posix_memalign");
    void *q = aligned_alloc(64, 640);
    void *r = memalign(128, 700);
    void *s = valloc(800);
    void *t = pvalloc(900);
    if (!q || !r || !s || !t || ((uintptr_t)q & 63) || ((uintptr_t)r & 127) ||
        ((uintptr_t)s & 4095) || ((uintptr_t)t & 4095))
        fail("aligned forms");
    void *u = reallocarray(NULL, 10, 50);
    u = reallocarray(u, 20, 50);
    if (!u) fail("reallocarray");
    free(p), free(q), free(r), free(s), free(t), free(u);
    volatile size_t huge = SIZE_MAX / 2; /* hidden from the compiler's size check */
    errno = 0;
    if (reallocarray(NULL, huge, 4) || errno != ENOMEM) fail("reallocarray overflow");
    char *z = malloc(10);
    if (realloc(z, 0)) fail("realloc(p, 0) should free");
    return 0;
}

static void *last_worker(void *arg) {
    (void)arg;
    char *p = malloc(4444);
    if (!p) fail("malloc");
    free(p);
    return NULL;
}

static int last(void) {
    pthread_t tid;
    if (pthread_create(&tid, NULL, last_worker, NULL)) fail("pthread_create");
    pthread_detach(tid);
    pthread_exit(NULL);
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "known";
    if (!strcmp(mode, "known")) return known();
    if (!strcmp(mode, "threads")) return threads();
    if (!strcmp(mode, "fork")) return forked();
    if (!strcmp(mode, "aligned")) return aligned();
    if (!strcmp(mode, "last")) return last();
    fail("unknown mode");
}
