/* Misuse must abort with a message naming the function and the pointer,
 * never corrupt the heap silently. Run under LD_PRELOAD of every design.
 * Each case runs in a forked child (ts_expect_abort). */
#include "check.h"

#include <malloc.h>

static char static_area[4096] __attribute__((aligned(64)));

static void free_ptr(void *p) {
    free(p);
}

static void free_stack(void *unused) {
    (void)unused;
    char local[256] __attribute__((aligned(64)));
    memset(local, 0, sizeof local);
    void *volatile p = local + 64;
    free(p);
}

static void free_interior(void *unused) {
    (void)unused;
    unsigned char *p = malloc(256);
    memset(p, 0, 256);
    free(p + 64);
}

static void free_twice(void *p) {
    free(p);
    free(p);
}

static int expect(void (*fn)(void *), void *arg, const char *fmt, const void *ptr) {
    char want[128];
    snprintf(want, sizeof want, fmt, ptr);
    return ts_expect_abort(fn, arg, want);
}

int main(void) {
    ts_require_preloaded();
    if (!ts_expected_design()) {
        printf("generic_misuse: run under a tsalloc design only\n");
        return 0;
    }
    int ok = 1;
    /* A pointer into static memory, not at any block. */
    ok &= expect(free_ptr, static_area + 128, "tsalloc: free(): invalid pointer %p",
                 static_area + 128);
    /* A pointer into the stack (the message names it; we only check the prefix). */
    ok &= ts_expect_abort(free_stack, NULL, "tsalloc: free(): invalid pointer 0x");
    /* A pointer inside a live block. */
    ok &= ts_expect_abort(free_interior, NULL, "tsalloc: free(): invalid pointer 0x");
    /* An unaligned pointer. */
    ok &= expect(free_ptr, static_area + 3, "tsalloc: free(): invalid pointer %p", static_area + 3);
    /* Freeing the same block twice in a row: every design detects it, and
     * says either "double free of P" or "invalid pointer P". */
    for (size_t n = 16; n <= (4u << 20); n *= 8) {
        void *p = malloc(n);
        CHECK(p);
        char want_double[96], want_invalid[96], out[4096];
        snprintf(want_double, sizeof want_double, "tsalloc: free(): double free of %p", p);
        snprintf(want_invalid, sizeof want_invalid, "tsalloc: free(): invalid pointer %p", p);
        CHECK_MSG(ts_run_expect_sigabrt(free_twice, p, out, sizeof out),
                  "double free of a %zu-byte block was not detected", n);
        CHECK_MSG(strstr(out, want_double) || strstr(out, want_invalid),
                  "double free of a %zu-byte block: message was: %s", n, out);
        free(p);
    }
    CHECK(ok);
    printf("generic_misuse: ok\n");
    return 0;
}
