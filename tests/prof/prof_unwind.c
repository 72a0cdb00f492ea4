/* The heap profiler's unwinder against glibc's backtrace(): a program built
 * without frame pointers whose allocations come through recursion, a call
 * through a function pointer, qsort's comparator (frames inside libc, built
 * without frame pointers too), every allocating entry, and a second thread.
 * check_prof.py's `unwind` case runs it with TSALLOC_PROF_UNWIND=1 and 2 at
 * rate 1 and wants the same stacks from both.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void *kept[256];
static unsigned nkept;

static void keep(void *p) {
    if (p && nkept < sizeof kept / sizeof kept[0]) kept[nkept++] = p;
}

__attribute__((noinline)) static void *leaf_alloc(size_t n) {
    void *p = malloc(n);
    __asm__ volatile("" ::"r"(p) : "memory");
    return p;
}

static void *(*volatile through)(size_t) = leaf_alloc;

static size_t recurse(unsigned depth, size_t n);
static size_t (*volatile again)(unsigned, size_t) = recurse; /* no loop made of it */

__attribute__((noinline)) static size_t recurse(unsigned depth, size_t n) {
    char buf[64 + 8 * (depth % 4)];
    memset(buf, (int)depth, sizeof buf);
    if (depth == 0) {
        keep(through(n + (size_t)buf[1]));
        return 1;
    }
    return again(depth - 1, n + 16) + (size_t)buf[depth % sizeof buf];
}

static int compare(const void *a, const void *b) {
    void *p = malloc(24);
    keep(p);
    return *(const int *)a - *(const int *)b;
}

__attribute__((noinline)) static void entries(void) {
    void *p = NULL;
    keep(calloc(10, 30));
    keep(realloc(leaf_alloc(40), 4000));
    keep(aligned_alloc(64, 640));
    if (posix_memalign(&p, 128, 1280) == 0) keep(p);
    keep(strdup("a string the profiler sees through libc"));
}

static void *thread_main(void *arg) {
    (void)arg;
    for (unsigned i = 0; i < 5; i++) recurse(7 + i, 100);
    return NULL;
}

int main(void) {
    for (unsigned i = 0; i < 12; i++) recurse(i, 32);
    int v[40];
    for (unsigned i = 0; i < 40; i++) v[i] = (int)((i * 7919) % 40);
    qsort(v, 40, sizeof v[0], compare);
    entries();
    pthread_t t;
    if (pthread_create(&t, NULL, thread_main, NULL) != 0 || pthread_join(t, NULL) != 0) return 2;
    printf("kept %u\n", nkept);
    return 0;
}
