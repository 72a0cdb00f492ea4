/* Misuse of the fast allocator: each case runs in a forked child and must
 * abort with exactly "tsalloc: <func>(): invalid pointer 0x..." or
 * "tsalloc: <func>(): double free of 0x..." naming the pointer.
 */
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "check.h"
#include "tsalloc.h"

static int failures;

static void expect(void (*fn)(void *), void *arg, const char *fmt, const void *ptr,
                   const char *what) {
    failures += !ts_expect_abort_at(fn, arg, fmt, ptr, what);
}

static void do_free(void *p) {
    free(p);
}
static void do_free_twice(void *p) {
    free(p);
    free(p);
}
/* A large block bigger than the large cache holds: unmapped at its free. */
static void do_free_twice_uncached(void *p) {
    CHECK(ts_option_set("large_cache_mb", 1));
    free(p);
    free(p);
}
static void do_realloc(void *p) {
    void *volatile q = realloc(p, 100);
    (void)q;
}
static void do_usable(void *p) {
    (void)malloc_usable_size(p);
}

static void do_free_then_usable(void *p) {
    free(p);
    (void)malloc_usable_size(p);
}

static void *free_twice_in_thread(void *p) {
    free(p);
    free(p);
    return NULL;
}
/* Another thread (not the block's owner) frees the block twice. */
static void do_free_remote_twice(void *p) {
    pthread_t t;
    pthread_create(&t, NULL, free_twice_in_thread, p);
    pthread_join(t, NULL);
}
/* The block's page is retired in between (it was the only block of a page
 * that is not the head of its queue). */
static void do_free_after_retire(void *unused) {
    (void)unused;
    /* First retire some pages, so that the purge thread (whose creation
     * allocates) is running before the page below is retired and stays free. */
    void *warm[256];
    for (int i = 0; i < 256; i++) warm[i] = malloc(2000);
    for (int i = 0; i < 256; i++) free(warm[i]);
    void *fill[64];
    for (int i = 0; i < 64; i++) fill[i] = malloc(1024); /* one page of the 1 KiB class */
    void *last = malloc(1024);                           /* a second page, now the head */
    for (int i = 0; i < 64; i++) free(fill[i]);          /* the first page is retired */
    (void)last;
    free(fill[10]);
}

/* Freed twice with other frees in between (the first free is no longer the
 * head of any list): the block's free mark catches it. */
static void do_free_twice_apart(void *p) {
    void *other = malloc(malloc_usable_size(p));
    free(p);
    free(other);
    free(p);
}
/* The same on a page that is not its class's head (counted frees: a missed
 * double free would retire the page with live blocks). */
static void do_free_twice_counted(void *unused) {
    (void)unused;
    void *first[32], *more[100];
    for (int i = 0; i < 32; i++) first[i] = malloc(2048); /* fills a 64 KiB page */
    for (int i = 0; i < 100; i++) more[i] = malloc(2048); /* later pages; the first is no head */
    free(first[3]);
    free(first[4]);
    free(first[3]);
    (void)more;
}
static void *free_apart_in_thread(void *p) {
    void **pair = p;
    free(pair[0]);
    free(pair[1]);
    free(pair[0]);
    return NULL;
}
/* Another thread frees a block twice, apart. */
static void do_free_remote_apart(void *p) {
    void *pair[2] = {p, malloc(malloc_usable_size(p))};
    pthread_t t;
    pthread_create(&t, NULL, free_apart_in_thread, pair);
    pthread_join(t, NULL);
}
/* realloc of a block already freed: freeing it again is a double free, and
 * reusing it would hand the same memory out twice. */
static void do_realloc_freed(void *p) {
    size_t grow = 2 * malloc_usable_size(p) + 100000;
    free(p);
    void *volatile q = realloc(p, grow);
    (void)q;
}
/* A block boundary that was carved but never handed out. */
static void do_free_never_allocated(void *p) {
    free((char *)p + 4 * malloc_usable_size(p));
}

int main(void) {
    char stack_buf[256] __attribute__((aligned(64)));
    memset(stack_buf, 0, sizeof stack_buf);
    static char static_buf[256] __attribute__((aligned(64)));

    expect(do_free, stack_buf + 64, "tsalloc: free(): invalid pointer %p", stack_buf + 64,
           "stack pointer");
    expect(do_free, static_buf, "tsalloc: free(): invalid pointer %p", static_buf,
           "static pointer");

    unsigned char *p = malloc(64);
    expect(do_free, p + 16, "tsalloc: free(): invalid pointer %p", p + 16, "inside a block");
    expect(do_free, p + 1, "tsalloc: free(): invalid pointer %p", p + 1, "unaligned");
    expect(do_free_twice, p, "tsalloc: free(): double free of %p", p, "double free");
    expect(do_free_remote_twice, p, "tsalloc: free(): double free of %p", p,
           "double free by another thread");
    expect(do_free_after_retire, NULL, "tsalloc: free(): double free of 0x", NULL,
           "double free into a retired page");
    expect(do_free_twice_apart, p, "tsalloc: free(): double free of %p", p,
           "double free, other frees between");
    expect(do_free_twice_counted, NULL, "tsalloc: free(): double free of 0x", NULL,
           "double free, apart, into a counted page");
    expect(do_free_remote_apart, p, "tsalloc: free(): double free of %p", p,
           "double free by another thread, apart");
    expect(do_realloc_freed, p, "tsalloc: realloc(): double free of %p", p,
           "realloc of a freed block");
    expect(do_free_never_allocated, p, "tsalloc: free(): double free of %p",
           p + 4 * malloc_usable_size(p), "free of a block never handed out");
    expect(do_realloc, p + 32, "tsalloc: realloc(): invalid pointer %p", p + 32,
           "realloc of an inner pointer");
    expect(do_usable, stack_buf, "tsalloc: malloc_usable_size(): invalid pointer %p", stack_buf,
           "usable size of a stack pointer");

    /* The segment's header, and memory that was never handed out. */
    uintptr_t seg = (uintptr_t)p & ~(uintptr_t)((4u << 20) - 1);
    expect(do_free, (void *)seg, "tsalloc: free(): invalid pointer %p", (void *)seg,
           "segment header");
    expect(do_free, (void *)(seg + (3u << 20)), "tsalloc: free(): invalid pointer %p",
           (void *)(seg + (3u << 20)), "never handed out");

    /* Medium and big-page blocks, and large ones. */
    unsigned char *m = malloc(20000), *b = malloc(300000), *l = malloc(3u << 20);
    expect(do_free, m + 4096, "tsalloc: free(): invalid pointer %p", m + 4096, "inside medium");
    expect(do_free_twice, m, "tsalloc: free(): double free of %p", m, "medium double free");
    expect(do_free_twice, b, "tsalloc: free(): double free of %p", b, "big double free");
    expect(do_realloc_freed, b, "tsalloc: realloc(): double free of %p", b,
           "realloc of a freed big block (its page kept empty)");
    expect(do_free_twice_apart, b, "tsalloc: free(): double free of %p", b,
           "big double free, apart");
    /* The size of a freed block is a use after free, in every page kind. */
    unsigned char *freed_kinds[] = {p, m, b};
    for (int i = 0; i < 3; i++)
        expect(do_free_then_usable, freed_kinds[i],
               "tsalloc: malloc_usable_size(): double free of %p", freed_kinds[i],
               "usable size of a freed block");
    expect(do_free, l + 4096, "tsalloc: free(): invalid pointer %p", l + 4096, "inside large");
    expect(do_free_twice, l, "tsalloc: free(): double free of %p", l, "large double free");
    expect(do_free_twice_uncached, l, "tsalloc: free(): double free of %p", l,
           "large double free, not cached");
    expect(do_realloc, l + 64, "tsalloc: realloc(): invalid pointer %p", l + 64,
           "realloc inside large");

    /* Memory another allocator (here: the kernel) handed out. */
    void *foreign = mmap(NULL, 1 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(foreign != MAP_FAILED);
    expect(do_free, foreign, "tsalloc: free(): invalid pointer %p", foreign, "mmap'd memory");
    expect(do_free, (void *)((uintptr_t)1 << 50), "tsalloc: free(): invalid pointer %p",
           (void *)((uintptr_t)1 << 50), "outside the address space");

    free(p);
    free(m);
    free(b);
    free(l);
    if (failures) {
        fprintf(stderr, "%d misuse cases did not abort as expected\n", failures);
        return 1;
    }
    printf("ok: every misuse aborted with its message\n");
    return 0;
}
