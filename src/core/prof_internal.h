/* The heap profiler's shared state and functions, for its files only:
 * prof.c (sampling and the tables), prof_write.c (profiles and the leak
 * report), stackwalk.c (call stacks).
 *
 * Invariants: every field of ts_prof_state_t below `lock` changes only under
 * it; the lock is a leaf (nothing that allocates or takes another allocator
 * lock runs under it), so it nests with nothing at fork.
 */
#ifndef TS_CORE_PROF_INTERNAL_H
#define TS_CORE_PROF_INTERNAL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "base/base.h"
#include "base/spinlock.h"
#include "core/prof.h"

#define TS_PROF_FRAMES 64

/* One distinct call stack and what its samples stand for (scaled). */
typedef struct ts_prof_stack {
    struct ts_prof_stack *chain; /* next in its hash bucket */
    struct ts_prof_stack *next;  /* next in the list of every stack */
    uint64_t hash;
    double live_objs, live_bytes, alloc_objs, alloc_bytes;
    uint32_t depth;
    void *frames[]; /* innermost first: return addresses; then ts_prof_stack_off */
} ts_prof_stack_t;

/* After the frames: off[0] is the innermost return address's distance below
 * the stack's top when the stack was last walked (0: never), off[i] frame
 * i's (stackwalk.c checks a kept stack against them). */
static inline uintptr_t *ts_prof_stack_off(ts_prof_stack_t *s) {
    return (uintptr_t *)(s->frames + s->depth);
}

typedef struct ts_prof_state {
    ts_spinlock_t lock;
    ts_prof_stack_t *stacks; /* every stack, newest first */
    size_t stack_count;
    double live_bytes;  /* estimated bytes in live blocks */
    double alloc_bytes; /* estimated bytes allocated so far */
    double peak_next;   /* live bytes that make the next peak profile */
    double interval_next;
    unsigned seq; /* the %n of the next numbered profile */
    bool holder_exiting;
    /* Outside the lock: whether allocations are sampled (ts_prof_set_active),
     * and a profile that TSALLOC_PROF_SIGNAL asked for while the lock was
     * held, written by whoever takes the lock next or releases it. */
    _Atomic unsigned char active;
    _Atomic unsigned char dump_pending;
    /* the options, read once by the constructor */
    long long rate, peak_growth, interval, leak_exitcode;
    int signal; /* TSALLOC_PROF_SIGNAL: 0, or the signal whose handler writes a profile */
    bool final, leaks, write;
    int unwind;
    char file[512]; /* TSALLOC_PROF_FILE */
} ts_prof_state_t;

TS_HIDDEN extern ts_prof_state_t _ts_prof;

/* ---- prof.c: the sampler's arithmetic (pure, for tests) ---- */

/* Bytes to the next sample: exponential with mean `rate` (in whole bytes,
 * at least 1), from the generator state *rng. */
TS_HIDDEN int64_t _ts_prof_gap(uint64_t *rng, double rate);
/* How many blocks one sampled block of `size` bytes stands for:
 * 1 / (1 - exp(-size / rate)), the inverse of its chance to be sampled. */
TS_HIDDEN double _ts_prof_weight(size_t size, double rate);
TS_HIDDEN double _ts_prof_log(double x);

/* The interned stack frames[0..depth) (depth at least 1), made on first
 * sight; NULL when there is no memory for it. Under the lock. */
TS_HIDDEN ts_prof_stack_t *_ts_prof_stack_get(void *const *frames, unsigned depth);

/* ---- prof_write.c ---- */

enum ts_prof_dump_kind { TS_PROF_FINAL, TS_PROF_PEAK, TS_PROF_INTERVAL, TS_PROF_NAMED };
/* Writes a profile; path NULL: named from TSALLOC_PROF_FILE for `kind`.
 * Called with the lock held. 0, or -1 with errno set. */
TS_HIDDEN int _ts_prof_dump_locked(enum ts_prof_dump_kind kind, const char *path);
/* Prints the leak report on stderr; true when there were live samples to
 * report. Called with the lock held, at exit. */
TS_HIDDEN bool _ts_prof_leaks_locked(void);

/* ---- stackwalk.c ---- */

/* Takes the profiler's lock (not held by the caller) and returns the stack
 * of the allocation whose caller returns to `ra`, its frame pointer being
 * `fp` (the caller's %rbp at the entry) and ra_slot the address of the
 * entry's return address; the thread's stack [stack_lo, stack_hi) bounds
 * the walk. Returns with the lock held; NULL when no stack could be kept
 * (no memory for it). */
TS_HIDDEN ts_prof_stack_t *_ts_prof_stack_lock(void *ra, uintptr_t fp, uintptr_t stack_lo,
                                               uintptr_t stack_hi, uintptr_t ra_slot);
/* The calling thread's stack: returns its top and sets *lo to its bottom
 * (top 0 when unknown). May allocate: called outside the lock, with the
 * thread's profiler busy. */
TS_HIDDEN uintptr_t _ts_prof_stack_bounds(uintptr_t *lo);
/* ---- unwind.c ---- */

/* True when unwind.c's walker works here (x86-64, glibc 2.35+). */
TS_HIDDEN bool _ts_prof_unwind_ok(void);
/* Fills out[0..max) with the stack from the entry's return address `ra`
 * outward, by the unwind tables; reads the stack below stack_hi only.
 * Returns the depth, 0 when ra was not reached. */
TS_HIDDEN unsigned _ts_prof_unwind(void **out, unsigned max, void *ra, uintptr_t stack_hi);

/* Makes the walk with glibc's backtrace() safe to call from malloc
 * (its first call loads libgcc_s); called by the constructor. */
TS_HIDDEN void _ts_prof_walk_prepare(void);

#endif
