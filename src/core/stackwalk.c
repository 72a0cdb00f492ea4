/* Call stacks for the heap profiler, without allocating and without a lock
 * that malloc may hold.
 *
 * Default (TSALLOC_PROF_UNWIND=1): glibc's backtrace(), which unwinds with
 * the DWARF tables of libgcc_s, so code built without frame pointers (most
 * distribution binaries) still gives whole stacks. Its first call loads
 * libgcc_s, which allocates, so the constructor makes it once before
 * sampling starts; with glibc 2.35 and libgcc 12 or later it finds each
 * frame's tables with _dl_find_object, without the loader's lock. About 3 us
 * more per sample than the frame pointers (docs/profiling.md).
 * TSALLOC_PROF_UNWIND=0, and the fallback when backtrace() does not reach
 * the caller: the frame-pointer chain. The innermost frame is the return
 * address the shim's entry passed; then each frame pointer must lie above
 * the last, 8-aligned, below the thread's stack top, so garbage in %rbp
 * (code built without frame pointers) ends the walk early instead of
 * reading outside the stack.
 *
 * Invariant: only the calling thread's stack is read, between the walker's
 * own frame and the top that _ts_prof_stack_top found.
 */
#include "core/prof_internal.h"

#include <execinfo.h>
#include <pthread.h>

#include "core/internal.h"

extern void *__libc_stack_end; /* ld.so: the main thread's initial stack pointer */

uintptr_t _ts_prof_stack_top(void) {
    if (_ts_os_is_main_thread()) return (uintptr_t)__libc_stack_end;
    pthread_attr_t attr;
    void *addr;
    size_t size;
    uintptr_t top = 0;
    if (pthread_getattr_np(pthread_self(), &attr) != 0) return 0;
    if (pthread_attr_getstack(&attr, &addr, &size) == 0) top = (uintptr_t)addr + size;
    pthread_attr_destroy(&attr);
    return top;
}

void _ts_prof_walk_prepare(void) {
    void *warm[4];
    (void)backtrace(warm, 4);
}

static unsigned walk_backtrace(void **out, unsigned max, void *ra) {
    void *all[TS_PROF_FRAMES + 8];
    int n = backtrace(all, TS_PROF_FRAMES + 8);
    /* Our own frames first: the stack starts at the entry's return address. */
    for (int i = 0; i < n; i++) {
        if (all[i] != ra) continue;
        unsigned depth = 0;
        for (int j = i; j < n && depth < max; j++) out[depth++] = all[j];
        return depth;
    }
    return 0;
}

unsigned _ts_prof_walk(void **out, unsigned max, void *ra, uintptr_t fp, uintptr_t stack_hi) {
    if (_ts_prof.unwind) {
        unsigned depth = walk_backtrace(out, max, ra);
        if (depth) return depth;
    }
    unsigned depth = 0;
    out[depth++] = ra;
    uintptr_t lo = (uintptr_t)__builtin_frame_address(0);
    while (depth < max && fp > lo && fp < stack_hi - 2 * sizeof(void *) && !(fp & 7)) {
        const uintptr_t *frame = (const uintptr_t *)fp;
        uintptr_t ret = frame[1];
        if (ret < 4096) break;
        if (depth > 1 || ret != (uintptr_t)ra) /* a shim frame that returns to ra */
            out[depth++] = (void *)ret;
        uintptr_t next = frame[0];
        if (next <= fp) break;
        fp = next;
    }
    return depth;
}
