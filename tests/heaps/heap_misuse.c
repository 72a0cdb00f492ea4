/* Misuse of first-class heaps: each case runs in a forked child and must
 * abort with exactly the message naming the function and the heap (or the
 * block). Built twice: against libtsalloc, for the checks every build makes
 * (destroying or deleting a default heap, destroying a heap twice, visiting
 * a destroyed one, freeing a block of a destroyed heap), and against the
 * checked build (HEAP_MISUSE_CHECKED), which also checks every allocation
 * call: a destroyed heap, and two calls on one heap at once.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

#include "check.h"
#include "tsalloc.h"

static int failures;

static void expect(void (*fn)(void *), void *arg, const char *fmt, const void *ptr,
                   const char *what) {
    failures += !ts_expect_abort_at(fn, arg, fmt, ptr, what);
}

static void do_destroy(void *h) {
    ts_heap_destroy(h);
}
static void do_delete(void *h) {
    ts_heap_delete(h);
}
static void do_destroy_twice(void *h) {
    ts_heap_destroy(h);
    ts_heap_destroy(h);
}
static bool count(void *arg, void *block, size_t size) {
    (void)block;
    (void)size;
    ++*(int *)arg;
    return true;
}
static void do_visit_destroyed(void *h) {
    ts_heap_destroy(h);
    int n = 0;
    ts_heap_visit(h, count, &n);
}
/* arg: a block of a heap the child destroys first. */
static ts_heap_t *block_heap;
static void do_free_destroyed(void *p) {
    ts_heap_destroy(block_heap);
    free(p);
}
#ifdef HEAP_MISUSE_CHECKED
static void do_malloc_destroyed(void *h) {
    ts_heap_destroy(h);
    void *volatile p = ts_heap_malloc(h, 10);
    (void)p;
}
/* A visitor that allocates from the heap it visits. */
static bool alloc_visitor(void *arg, void *block, size_t size) {
    (void)block;
    (void)size;
    void *volatile p = ts_heap_malloc(arg, 10);
    (void)p;
    return true;
}
static void do_alloc_in_visit(void *h) {
    ts_heap_visit(h, alloc_visitor, h);
}
#endif

int main(void) {
    ts_heap_t *d = ts_heap_get_default();
    CHECK(d != NULL);
    expect(do_destroy, d, "tsalloc: ts_heap_destroy(): the default heap %p cannot be destroyed", d,
           "destroy the default heap");
    expect(do_delete, d, "tsalloc: ts_heap_delete(): the default heap %p cannot be deleted", d,
           "delete the default heap");
    ts_heap_t *h = ts_heap_new();
    CHECK(h != NULL);
    void *p = ts_heap_malloc(h, 100);
    CHECK(p != NULL);
    expect(do_destroy_twice, h, "tsalloc: ts_heap_destroy(): destroyed or invalid heap %p", h,
           "destroy twice");
    expect(do_visit_destroyed, h, "tsalloc: ts_heap_visit(): destroyed or invalid heap %p", h,
           "visit a destroyed heap");
    block_heap = h;
    expect(do_free_destroyed, p, "tsalloc: free(): double free of %p", p,
           "free a block of a destroyed heap");
#ifdef HEAP_MISUSE_CHECKED
    expect(do_malloc_destroyed, h, "tsalloc: ts_heap_malloc(): destroyed or invalid heap %p", h,
           "allocate from a destroyed heap");
    expect(do_alloc_in_visit, h, "tsalloc: ts_heap_malloc(): concurrent use of heap %p", h,
           "allocate from the heap a visitor visits");
#endif
    ts_heap_destroy(h);
    if (failures) {
        fprintf(stderr, "heap_misuse: %d case(s) failed\n", failures);
        return 1;
    }
    printf("heap_misuse: ok\n");
    return 0;
}
