/* Call stacks for the heap profiler, without allocating and without a lock
 * that malloc may hold.
 *
 * Default (TSALLOC_PROF_UNWIND=1): unwind.c, which reads the DWARF unwind
 * tables itself, so code built without frame pointers (most distribution
 * binaries) still gives whole stacks and nothing is loaded. With 2, or where
 * unwind.c does not serve (not x86-64, glibc before 2.35): glibc's
 * backtrace(), the same tables through libgcc_s; its first call loads
 * libgcc_s, which allocates, so the constructor makes it once before
 * sampling starts.
 * Stacks walked once are kept (below) and checked against the stack
 * instead of walked again, under the profiler's lock, which the sample then
 * keeps for its table updates.
 * TSALLOC_PROF_UNWIND=0, and the fallback when the unwinder does not reach
 * the caller: the frame-pointer chain. The innermost frame is the return
 * address the shim's entry passed; then each frame pointer must lie above
 * the last, 8-aligned, below the thread's stack top, so garbage in %rbp
 * (code built without frame pointers) ends the walk early instead of
 * reading outside the stack.
 *
 * Invariant: only the calling thread's stack is read, between the walker's
 * own frame and the top that _ts_prof_stack_bounds found, and only when the
 * walker runs on that stack; on a signal stack (sigaltstack), unwind.c reads
 * that one up to its top.
 * Lock order: the walk itself (backtrace(), which may take the loader's
 * lock) runs outside the profiler's lock, a leaf.
 */
#include "core/prof_internal.h"

#include <execinfo.h>
#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>

#include "core/internal.h"

extern void *__libc_stack_end; /* ld.so: the main thread's initial stack pointer */

uintptr_t _ts_prof_stack_bounds(uintptr_t *lo) {
    *lo = 0;
    if (_ts_os_is_main_thread()) {
        /* The main stack grows down from here up to its limit; mappings
         * begin below the limit, so nothing else lies in that range. */
        uintptr_t top = (uintptr_t)__libc_stack_end;
        struct rlimit rl;
        uintptr_t span = (uintptr_t)8 << 20;
        if (getrlimit(RLIMIT_STACK, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
            rl.rlim_cur < ((rlim_t)1 << 32))
            span = rl.rlim_cur;
        *lo = top > span ? top - span : 0;
        return top;
    }
    pthread_attr_t attr;
    void *addr;
    size_t size;
    uintptr_t top = 0;
    if (pthread_getattr_np(pthread_self(), &attr) != 0) return 0;
    if (pthread_attr_getstack(&attr, &addr, &size) == 0) {
        *lo = (uintptr_t)addr;
        top = (uintptr_t)addr + size;
    }
    pthread_attr_destroy(&attr);
    return top;
}

void _ts_prof_walk_prepare(void) {
    void *warm[4];
    (void)backtrace(warm, 4);
}

/* Stacks already walked, so that a call site sampled again costs a few
 * loads instead of an unwind (2.6 against about 0.1 us) and no hashing of
 * its frames. A slot names the interned stack of an innermost frame at a
 * distance below the stack's top; the stack keeps where each other frame's
 * return address lay (ts_prof_stack_off). It is reused when every one is
 * still in its place. Direct-mapped, under the profiler's lock, which the
 * sample then keeps for its table updates: one lock a sample. */
#define CACHE_SLOTS 256
#define SCAN_MAX    ((uintptr_t)256 << 10) /* a frame's return address within this */

typedef struct walk_cache {
    void *ra;
    uintptr_t off0; /* stack top - the innermost return address's slot */
    ts_prof_stack_t *stack;
} walk_cache_t;

static walk_cache_t cache[CACHE_SLOTS];

static walk_cache_t *cache_entry(void *ra, uintptr_t off0) {
    return &cache[ts_mix64((uint64_t)(uintptr_t)ra ^ (uint64_t)off0 << 32) % CACHE_SLOTS];
}

/* Under the lock. Reads only between the innermost slot and the top: the
 * caller's stack. */
static ts_prof_stack_t *cache_find(void *ra, uintptr_t off0, uintptr_t top) {
    walk_cache_t *e = cache_entry(ra, off0);
    ts_prof_stack_t *s = e->stack;
    if (!s || e->ra != ra || e->off0 != off0) return NULL;
    const uintptr_t *off = ts_prof_stack_off(s);
    if (off[0] != off0) return NULL; /* kept for another position: off[i] < off0 */
    for (unsigned i = 1; i < s->depth; i++)
        if (*(void *const *)(top - off[i]) != s->frames[i]) return NULL;
    return s;
}

/* Finds each frame's return address on the stack, upward from the
 * innermost one's slot; false when one is not there (not kept). */
static bool cache_scan(uintptr_t *off, void *const *frames, unsigned depth, uintptr_t slot,
                       uintptr_t top) {
    uintptr_t at = slot;
    for (unsigned i = 1; i < depth; i++) {
        uintptr_t end = top - at > SCAN_MAX ? at + SCAN_MAX : top;
        do at += sizeof(void *);
        while (at < end && *(void *const *)at != frames[i]);
        if (at >= end) return false; /* not on this stack (or too far) */
        off[i] = top - at;
    }
    return true;
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

/* The top of the signal stack the walker runs on, or 0. */
static uintptr_t altstack_top(uintptr_t here) {
    stack_t ss;
    if (sigaltstack(NULL, &ss) != 0 || !(ss.ss_flags & SS_ONSTACK)) return 0;
    uintptr_t lo = (uintptr_t)ss.ss_sp, hi = lo + ss.ss_size;
    return here > lo && here < hi ? hi : 0;
}

static unsigned walk(void **out, unsigned max, void *ra, uintptr_t fp, uintptr_t here,
                     uintptr_t stack_hi) {
    if (_ts_prof.unwind == 1 && _ts_prof_unwind_ok()) {
        unsigned depth = _ts_prof_unwind(out, max, ra, stack_hi ? stack_hi : altstack_top(here));
        if (depth) return depth;
    } else if (_ts_prof.unwind) {
        unsigned depth = walk_backtrace(out, max, ra);
        if (depth) return depth;
    }
    unsigned depth = 0;
    out[depth++] = ra;
    while (depth < max && fp > here && fp + 2 * sizeof(void *) <= stack_hi && !(fp & 7)) {
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

ts_prof_stack_t *_ts_prof_stack_lock(void *ra, uintptr_t fp, uintptr_t stack_lo, uintptr_t stack_hi,
                                     uintptr_t ra_slot) {
    /* On another stack (sigaltstack, a coroutine's), nothing between here
     * and the thread's top is known to be mapped: read nothing there. */
    uintptr_t here = (uintptr_t)__builtin_frame_address(0);
    if (here <= stack_lo || here >= stack_hi) stack_hi = 0;
    /* ra_slot: where the entry's return address lies, when that is ra (the
     * shim reached the entry by a tail call): then the program's frames are
     * above it, ours below. */
    bool cacheable =
        stack_hi && ra_slot > here && ra_slot < stack_hi && *(void *const *)ra_slot == ra;
    ts_spin_lock(&_ts_prof.lock);
    if (cacheable) {
        ts_prof_stack_t *s = cache_find(ra, stack_hi - ra_slot, stack_hi);
        if (s) return s;
    }
    ts_spin_unlock(&_ts_prof.lock);
    void *frames[TS_PROF_FRAMES];
    uintptr_t off[TS_PROF_FRAMES];
    unsigned depth = walk(frames, TS_PROF_FRAMES, ra, fp, here, stack_hi);
    cacheable = cacheable && cache_scan(off, frames, depth, ra_slot, stack_hi);
    ts_spin_lock(&_ts_prof.lock);
    ts_prof_stack_t *s = _ts_prof_stack_get(frames, depth);
    if (s && cacheable) {
        uintptr_t *to = ts_prof_stack_off(s);
        to[0] = stack_hi - ra_slot;
        for (unsigned i = 1; i < depth; i++) to[i] = off[i];
        walk_cache_t *e = cache_entry(ra, stack_hi - ra_slot);
        *e = (walk_cache_t){ra, stack_hi - ra_slot, s};
    }
    return s;
}
