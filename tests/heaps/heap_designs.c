/* Which libraries have heaps: only the fast allocator's (libtsalloc) exports
 * the ts_heap_* functions; the other designs export none of them, so a
 * program that uses heaps fails to link, or finds them missing with dlsym,
 * rather than running on a fallback (docs/heaps.md). Each library is loaded
 * with dlopen (RTLD_LOCAL) into this program, whose malloc stays glibc's;
 * libtsalloc's heap is used there through dlsym.
 * Usage: heap_designs LIB.so... */
#include "check.h"

#include <dlfcn.h>

static const char *names[] = {"ts_heap_new",           "ts_heap_get_default", "ts_heap_malloc",
                              "ts_heap_calloc",        "ts_heap_realloc",     "ts_heap_strdup",
                              "ts_heap_aligned_alloc", "ts_heap_strndup",     "ts_heap_destroy",
                              "ts_heap_delete",        "ts_heap_visit",       "ts_heap_stats"};

int main(int argc, char **argv) {
    CHECK(argc > 1);
    int cores = 0;
    for (int a = 1; a < argc; a++) {
        const char *base = strrchr(argv[a], '/') ? strrchr(argv[a], '/') + 1 : argv[a];
        int core = strncmp(base, "libtsalloc.so", 13) == 0; /* libtsalloc.so.0.6.0 */
        cores += core;
        void *h = dlopen(argv[a], RTLD_NOW | RTLD_LOCAL);
        CHECK_MSG(h != NULL, "dlopen %s: %s", argv[a], dlerror());
        for (size_t i = 0; i < sizeof names / sizeof *names; i++)
            CHECK_MSG((dlsym(h, names[i]) != NULL) == core, "%s in %s", names[i], base);
        if (core) {
            void *(*heap_new)(void);
            void *(*heap_malloc)(void *, size_t);
            void (*heap_destroy)(void *);
            *(void **)&heap_new = dlsym(h, "ts_heap_new");
            *(void **)&heap_malloc = dlsym(h, "ts_heap_malloc");
            *(void **)&heap_destroy = dlsym(h, "ts_heap_destroy");
            void *heap = heap_new();
            CHECK(heap != NULL);
            for (int i = 0; i < 1000; i++) CHECK(heap_malloc(heap, (size_t)i * 7) != NULL);
            heap_destroy(heap);
        }
    }
    CHECK_EQ(cores, 1);
    printf("heap_designs: ok\n");
    return 0;
}
