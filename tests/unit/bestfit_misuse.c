/* Misuse: freeing what the design did not hand out, or freeing twice, aborts
 * with the exact message naming the function and the pointer.
 * Usage: bestfit_misuse lock|nolock */
#include "bestfit_harness.h"

static const bf_api_t *api;

static void free_stack(void *arg) {
    (void)arg;
    char local[64];
    api->free(local + 16);
}
static void free_glibc(void *arg) {
    (void)arg;
    api->free(malloc(100));
}
static void free_interior(void *arg) {
    (void)arg;
    char *p = api->malloc(200);
    api->free(p + 32);
}
static void free_misaligned(void *arg) {
    (void)arg;
    char *p = api->malloc(200);
    api->free(p + 1);
}
static void free_twice(void *arg) {
    (void)arg;
    char *p = api->malloc(200);
    api->malloc(10); /* keeps p out of the top block */
    api->free(p);
    api->free(p);
}
static void free_twice_coalesced(void *arg) {
    (void)arg;
    char *a = api->malloc(200), *b = api->malloc(200);
    api->malloc(10);
    api->free(a);
    api->free(b); /* merges into a's block */
    api->free(b);
}
static void realloc_foreign(void *arg) {
    (void)arg;
    api->realloc(malloc(100), 300);
}
static void usable_freed(void *arg) {
    (void)arg;
    char *p = api->malloc(200);
    api->malloc(10);
    api->free(p);
    api->usable(p);
}
static void free_past_top(void *arg) {
    (void)arg;
    char *p = api->malloc(200);
    api->free(p + (1 << 24));
}

int main(int argc, char **argv) {
    api = bf_api_from_args(argc, argv);
    struct {
        void (*fn)(void *);
        const char *msg;
    } cases[] = {
        {free_stack, "tsalloc: free(): invalid pointer 0x"},
        {free_glibc, "tsalloc: free(): invalid pointer 0x"},
        {free_interior, "tsalloc: free(): invalid pointer 0x"},
        {free_misaligned, "tsalloc: free(): invalid pointer 0x"},
        {free_past_top, "tsalloc: free(): invalid pointer 0x"},
        {free_twice, "tsalloc: free(): double free of 0x"},
        {free_twice_coalesced, "tsalloc: free(): double free of 0x"},
        {realloc_foreign, "tsalloc: realloc(): invalid pointer 0x"},
        {usable_freed, "tsalloc: malloc_usable_size(): invalid pointer 0x"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        CHECK_MSG(ts_expect_abort(cases[i].fn, NULL, cases[i].msg), "case %zu", i);
    /* The parent's heap is untouched and fine. */
    char *p = api->malloc(100);
    api->free(p);
    BF_CHECK_HEAP(api);
    printf("bestfit_misuse %s: ok\n", api->name);
    return 0;
}
