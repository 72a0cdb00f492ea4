/* Each tsalloc library loaded with dlopen into a running program (whose
 * malloc stays glibc's): it must load (its initial-exec TLS has to fit),
 * and its own malloc/free, reached with dlsym, must work from several
 * threads. Usage: dlopen_designs LIB.so... */
#include "check.h"

#include <dlfcn.h>
#include <pthread.h>

typedef void *(*malloc_fn)(size_t);
typedef void (*free_fn)(void *);
static malloc_fn lib_malloc;
static free_fn lib_free;

static void *worker(void *arg) {
    uint64_t rng = (uintptr_t)arg + 1;
    void *b[128] = {0};
    for (int i = 0; i < 20000; i++) {
        size_t k = ts_rand(&rng) % 128;
        if (b[k]) {
            CHECK(ts_verify(b[k], 32, k));
            lib_free(b[k]);
        }
        b[k] = lib_malloc(ts_rand_range(&rng, 32, 3000));
        CHECK(b[k]);
        ts_fill(b[k], 32, k);
    }
    for (int k = 0; k < 128; k++) lib_free(b[k]);
    return NULL;
}

int main(int argc, char **argv) {
    CHECK(argc > 1);
    for (int a = 1; a < argc; a++) {
        void *h = dlopen(argv[a], RTLD_NOW | RTLD_LOCAL);
        CHECK_MSG(h != NULL, "dlopen %s: %s", argv[a], dlerror());
        lib_malloc = (malloc_fn)dlsym(h, "malloc");
        lib_free = (free_fn)dlsym(h, "free");
        CHECK(lib_malloc && lib_free);
        CHECK(lib_malloc != (malloc_fn)malloc); /* really the library's own */
        pthread_t t[4];
        for (long i = 0; i < 4; i++) CHECK(pthread_create(&t[i], NULL, worker, (void *)i) == 0);
        for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
        printf("dlopen ok: %s\n", argv[a]);
    }
    return 0;
}
