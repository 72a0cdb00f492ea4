/* The sampling heap profiler (TSALLOC_PROF, TSALLOC_LEAKS; docs/profiling.md).
 *
 * Sampling: each thread counts down the bytes it allocates to its next
 * sample; the distance between samples is exponential with mean
 * TSALLOC_PROF_SAMPLE, so a block of s bytes is sampled with chance
 * 1 - exp(-s/rate) whatever came before it, and a sample stands for
 * 1 / (1 - exp(-s/rate)) blocks (the estimate per stack is unbiased).
 * TSALLOC_PROF_SAMPLE=1 samples every allocation, each standing for itself.
 *
 * Cost when off: the shim's malloc tests _ts_prof_on (prof.h); free tests
 * nothing. When on, every malloc of the shim comes here, counts down and
 * calls the core; a sampled block is served as a large block (at least one
 * OS page), so its free leaves free's fast path for the large-block path,
 * where _ts_prof_free drops its sample and may keep the block for a later
 * sample (the pool, below), and _ts_prof_forget drops it before a move.
 *
 * Invariants:
 * - A sampled block is a large block and is in the block table exactly while
 *   it is live (forgotten before the large-block free or move).
 * - A pooled block is a large block still live for the large-block path,
 *   in no table of the profiler but the pool's, and only the profiler's
 *   lock guards it.
 * - Nothing under the lock allocates or takes another lock: tables grow with
 *   _ts_os_map; profiles are written with write(2) from a static buffer.
 * - A thread's `busy` flag stops sampling while the profiler itself may call
 *   malloc (finding the thread's stack), so it never recurses.
 * - The TSALLOC_PROF_SIGNAL handler only ever try-locks, so it cannot wait
 *   on the thread it interrupted; a profile it could not write is written
 *   by the lock's holder on release (prof_unlock).
 * Lock order: the profiler's lock is a leaf, never held with another
 * allocator lock; the fork handlers take it alone.
 */
#include "core/prof_internal.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/options.h"
#include "core/fastpath.h"
#include "core/internal.h"
#include "designs/design.h"
#include "tsalloc.h"

TS_DESIGN_DECLARE(core)
#define TS_DESIGN profd /* designs/family.h calls _ts_profd_*, below */
#include "designs/family.h"

TS_STARTUP_DATA unsigned char _ts_prof_on;
ts_prof_state_t _ts_prof = {.lock = TS_SPINLOCK_INIT};

/* ---- arithmetic: no libm (the library needs libc and pthreads only) ---- */

double _ts_prof_log(double x) {
    union {
        double d;
        uint64_t u;
    } v = {x};
    int e = (int)((v.u >> 52) & 0x7ff) - 1023;
    v.u = (v.u & 0x000fffffffffffffull) | 0x3ff0000000000000ull; /* [1, 2) */
    double m = v.d;
    if (m > 1.4142135623730951) {
        m *= 0.5;
        e++;
    }
    /* ln m = 2 atanh(s), |s| < 0.172: seven terms leave an error below 1e-12 */
    double s = (m - 1) / (m + 1), s2 = s * s;
    double sum =
        1 +
        s2 * (1. / 3 + s2 * (1. / 5 + s2 * (1. / 7 + s2 * (1. / 9 + s2 * (1. / 11 + s2 / 13)))));
    return 2 * s * sum + e * 0.6931471805599453;
}

/* 1 - exp(-x) for x >= 0, accurate for small x too; Horner forms with
 * constant coefficients (this runs once per sample). */
static double one_minus_exp_neg(double x) {
    if (x < 0.5) { /* -expm1(-x) = x (1 - x/2 (1 - x/3 (1 - ...))), 13 terms: error < 1e-15 */
        double h = 1;
        static const double inv[] = {1. / 14, 1. / 13, 1. / 12, 1. / 11, 1. / 10, 1. / 9, 1. / 8,
                                     1. / 7,  1. / 6,  1. / 5,  1. / 4,  1. / 3,  1. / 2};
        for (unsigned k = 0; k < sizeof inv / sizeof inv[0]; k++) h = 1 - x * inv[k] * h;
        return x * h;
    }
    if (x > 700) return 1;
    int k = (int)(x * 1.4426950408889634); /* exp(-x) = 2^-k exp(-r), 0 <= r < ln 2 */
    double r = x - k * 0.6931471805599453, e = 1;
    static const double inv[] = {1. / 16, 1. / 15, 1. / 14, 1. / 13, 1. / 12, 1. / 11,
                                 1. / 10, 1. / 9,  1. / 8,  1. / 7,  1. / 6,  1. / 5,
                                 1. / 4,  1. / 3,  1. / 2,  1.};
    for (unsigned i = 0; i < sizeof inv / sizeof inv[0]; i++) e = 1 - r * inv[i] * e;
    union {
        double d;
        uint64_t u;
    } scale = {.u = (uint64_t)(1023 - k) << 52}; /* 2^-k, k <= 1009 */
    return 1 - e * scale.d;
}

static uint64_t rng_next(uint64_t *s) { /* xorshift64* */
    uint64_t x = *s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * 0x2545f4914f6cdd1dull;
}

int64_t _ts_prof_gap(uint64_t *rng, double rate) {
    if (rate <= 1) return 1;
    double u = (double)((rng_next(rng) >> 11) + 1) * (1.0 / 9007199254740992.0); /* (0, 1] */
    double gap = -_ts_prof_log(u) * rate;
    if (gap > 4e18) return (int64_t)4e18;
    int64_t g = (int64_t)gap;
    return g < (double)gap || g == 0 ? g + 1 : g; /* ceil: P(gap > k) = exp(-k/rate) */
}

double _ts_prof_weight(size_t size, double rate) {
    if (rate <= 1) return 1;
    return 1 / one_minus_exp_neg((double)(size ? size : 1) / rate);
}

/* ---- per thread ---- */

typedef struct prof_tls {
    uint64_t left; /* a block of more than this many bytes is sampled */
    uint64_t rng;
    uintptr_t stack_lo, stack_hi; /* the thread's stack */
    void *ra;                     /* the current call's innermost frame */
    uintptr_t fp;                 /* its caller's frame pointer */
    uintptr_t ra_slot;            /* where the entry's return address lies */
    size_t w_size;                /* the last sample's size and weight (0: none) */
    double w;
    bool started;
    bool busy;
} prof_tls_t;

static TS_TLS prof_tls_t prof_tls;
static _Atomic uint64_t thread_seq;
static uint64_t seed;

/* The countdown to the next sample. A block is sampled when the bytes it
 * counts exceed `left`; a gap of g bytes (the g-th byte from here is
 * sampled) is left = g - 1. malloc(0) counts as one byte (it takes a block
 * like any other): sampled with chance 1 - exp(-1/rate), it stands for
 * 1 / that many objects and no bytes, so the object counts stay unbiased.
 * At rate 1 left = 0 samples every call. The fast test, size - 1 < left,
 * is one instruction more than a compare and sends malloc(0) (size - 1
 * wraps) to take_slow, which counts it. */
static uint64_t next_left(prof_tls_t *t) {
    return _ts_prof.rate <= 1 ? 0 : (uint64_t)_ts_prof_gap(&t->rng, (double)_ts_prof.rate) - 1;
}

/* Counts n bytes (at least 1) down; true when they reach the sample. */
static TS_NOINLINE bool take_slow(prof_tls_t *t, uint64_t n) {
    if (t->busy) return false;
    if (!t->started) { /* this thread's first call */
        uint64_t k = atomic_fetch_add_explicit(&thread_seq, 1, memory_order_relaxed) + 1;
        uint64_t s = seed ? seed + k * 0x9e3779b97f4a7c15ull : _ts_os_random();
        s ^= s >> 31;
        t->rng = (s * 0xbf58476d1ce4e5b9ull) | 1;
        void *ra = t->ra; /* its allocations pass through the entries */
        uintptr_t fp = t->fp, ra_slot = t->ra_slot;
        t->busy = true;
        t->stack_hi = _ts_prof_stack_bounds(&t->stack_lo); /* may allocate: not sampled */
        t->busy = false;
        t->ra = ra;
        t->fp = fp;
        t->ra_slot = ra_slot;
        t->started = true;
        t->left = next_left(t);
    }
    if (n <= t->left) {
        t->left -= n;
        return false;
    }
    t->left = next_left(t);
    /* Inactive: the countdown goes on, so that sampling resumes unbiased. */
    return atomic_load_explicit(&_ts_prof.active, memory_order_relaxed);
}

/* Counts `size` bytes down; true when this allocation is to be sampled. */
static inline bool take(uint64_t size) {
    prof_tls_t *t = &prof_tls;
    if (ts_likely(size - 1 < t->left)) {
        t->left -= size;
        return false;
    }
    return take_slow(t, size + (size == 0));
}

/* ---- the tables ---- */

/* Stacks: never freed; from an arena of mapped chunks. */
#define BUCKETS     (1u << 10) /* 8 KiB: pages of it count in RSS once touched */
#define ARENA_CHUNK ((size_t)256 << 10)
static ts_prof_stack_t *buckets[BUCKETS];
static char *arena, *arena_end;

/* Live sampled blocks: open addressing, linear probing, at most half full. */
typedef struct prof_block {
    uintptr_t ptr; /* 0: empty */
    ts_prof_stack_t *stack;
    double objs, bytes;
    size_t own; /* a large block sampled() asked for: its bytes (page multiple); else 0 */
} prof_block_t;
static prof_block_t *blocks;
static size_t blocks_cap, blocks_count;

/* Freed sampled blocks that sampled() asked the large-block path for, kept
 * (still large blocks, with their table entries) for the next samples: a
 * sample then costs no large-block allocation and free (two locks, two
 * clock reads, the large cache's bookkeeping: most of a sample's cost).
 * Bounded in count and bytes, so what the pool holds is at most POOL_BYTES
 * more than the heap would hold without the profiler. */
#define POOL_SLOTS 32
#define POOL_BYTES ((size_t)1 << 20)
#define POOL_PAGE  ((size_t)4096) /* the large-block path's unit */
typedef struct pool_entry {
    uintptr_t ptr;
    size_t size;
} pool_entry_t;
static pool_entry_t pool[POOL_SLOTS];
static unsigned pool_n;
static size_t pool_bytes;

/* A pooled block of at least `need` bytes (and at most twice that, so that
 * small samples do not hold big blocks), aligned to `align`; 0 if none. */
static uintptr_t pool_take(size_t need, size_t align, size_t *size) {
    int best = -1;
    for (unsigned i = 0; i < pool_n; i++)
        if (pool[i].size >= need && pool[i].size / 2 <= need && !(pool[i].ptr & (align - 1)) &&
            (best < 0 || pool[i].size < pool[best].size))
            best = (int)i;
    if (best < 0) return 0;
    uintptr_t p = pool[best].ptr;
    *size = pool[best].size;
    pool_bytes -= *size;
    pool[best] = pool[--pool_n];
    return p;
}

static bool pool_put(uintptr_t p, size_t size) {
    if (pool_n == POOL_SLOTS || pool_bytes + size > POOL_BYTES) return false;
    pool[pool_n++] = (pool_entry_t){p, size};
    pool_bytes += size;
    return true;
}

/* A pointer the pool holds is freed again: a double free, named here (the
 * large-block path would take it for a live block). */
static void pool_check(const void *p, const char *func) {
    for (unsigned i = 0; i < pool_n; i++)
        if (pool[i].ptr == (uintptr_t)p) {
            ts_spin_unlock(&_ts_prof.lock);
            _ts_double_free(func, p);
        }
}

ts_prof_stack_t *_ts_prof_stack_get(void *const *frames, unsigned depth) {
    uint64_t h = depth;
    for (unsigned i = 0; i < depth; i++) h = ts_mix64(h ^ (uint64_t)(uintptr_t)frames[i]);
    ts_prof_stack_t **head = &buckets[h & (BUCKETS - 1)];
    for (ts_prof_stack_t *s = *head; s; s = s->chain)
        if (s->hash == h && s->depth == depth &&
            memcmp(s->frames, frames, depth * sizeof(void *)) == 0)
            return s;
    size_t need = sizeof(ts_prof_stack_t) + depth * (sizeof(void *) + sizeof(uintptr_t));
    if ((size_t)(arena_end - arena) < need) {
        char *chunk = _ts_os_map(ARENA_CHUNK);
        if (!chunk) return NULL;
        arena = chunk;
        arena_end = chunk + ARENA_CHUNK;
    }
    ts_prof_stack_t *s = (ts_prof_stack_t *)arena;
    arena += ts_align_up(need, 16);
    memset(s, 0, sizeof *s);
    s->hash = h;
    s->depth = depth;
    memcpy(s->frames, frames, depth * sizeof(void *));
    ts_prof_stack_off(s)[0] = 0;
    s->chain = *head;
    *head = s;
    s->next = _ts_prof.stacks;
    _ts_prof.stacks = s;
    _ts_prof.stack_count++;
    return s;
}

static prof_block_t *block_slot(prof_block_t *table, size_t cap, uintptr_t p) {
    size_t i = ts_mix64(p) & (cap - 1);
    while (table[i].ptr && table[i].ptr != p) i = (i + 1) & (cap - 1);
    return &table[i];
}

static bool blocks_grow(void) {
    size_t cap = blocks_cap ? blocks_cap * 2 : 64; /* 2.5 KiB: one page to start */
    prof_block_t *table = _ts_os_map(cap * sizeof *table);
    if (!table) return false;
    for (size_t i = 0; i < blocks_cap; i++)
        if (blocks[i].ptr) *block_slot(table, cap, blocks[i].ptr) = blocks[i];
    if (blocks) _ts_os_unmap(blocks, blocks_cap * sizeof *blocks);
    blocks = table;
    blocks_cap = cap;
    return true;
}

static void block_remove(prof_block_t *b) { /* backward-shift deletion */
    size_t cap = blocks_cap, i = (size_t)(b - blocks), j = i;
    for (;;) {
        j = (j + 1) & (cap - 1);
        if (!blocks[j].ptr) break;
        size_t home = ts_mix64(blocks[j].ptr) & (cap - 1);
        if ((j > i && (home <= i || home > j)) || (j < i && home <= i && home > j)) {
            blocks[i] = blocks[j];
            i = j;
        }
    }
    blocks[i].ptr = 0;
    blocks_count--;
}

/* ---- profiles on a signal (TSALLOC_PROF_SIGNAL) ---- */

/* Writes the profile a signal asked for, unless someone holds the lock: then
 * the holder writes it when it lets go (prof_unlock). The flag's store and
 * the holder's release are each followed by a full fence before the other
 * side's check, so a profile asked for is always written by one of them. */
static void dump_if_pending(void) {
    while (atomic_load_explicit(&_ts_prof.dump_pending, memory_order_relaxed) &&
           ts_spin_trylock(&_ts_prof.lock)) {
        if (atomic_exchange_explicit(&_ts_prof.dump_pending, 0, memory_order_relaxed))
            _ts_prof_dump_locked(TS_PROF_INTERVAL, NULL);
        ts_spin_unlock(&_ts_prof.lock);
    }
}

/* Lets go of the profiler's lock; with a dump signal set, writes a profile
 * the signal asked for while the lock was held. */
static inline void prof_unlock(void) {
    ts_spin_unlock(&_ts_prof.lock);
    if (ts_unlikely(_ts_prof.signal)) {
        atomic_thread_fence(memory_order_seq_cst);
        dump_if_pending();
    }
}

/* The handler: writes only through write(2) into a file it opens, takes no
 * lock it would wait for, and keeps errno. It may run on a thread that
 * holds the lock (in the middle of a sample): the trylock then fails and
 * that thread writes the profile on its way out. */
static void on_dump_signal(int sig) {
    (void)sig;
    int saved = errno;
    atomic_store_explicit(&_ts_prof.dump_pending, 1, memory_order_relaxed);
    atomic_thread_fence(memory_order_seq_cst);
    dump_if_pending();
    errno = saved;
}

/* ---- samples ---- */

/* Records a sample of `size` bytes at p with stack s, weighing w blocks;
 * own: see prof_block_t. Under the lock. */
static void record_locked(void *p, ts_prof_stack_t *s, size_t size, double w, size_t own) {
    double bytes = w * (double)size;
    if (2 * (blocks_count + 1) > blocks_cap && !blocks_grow()) return;
    prof_block_t *b = block_slot(blocks, blocks_cap, (uintptr_t)p);
    if (!b->ptr) blocks_count++;
    *b = (prof_block_t){(uintptr_t)p, s, w, bytes, own};
    s->live_objs += w;
    s->live_bytes += bytes;
    s->alloc_objs += w;
    s->alloc_bytes += bytes;
    _ts_prof.live_bytes += bytes;
    _ts_prof.alloc_bytes += bytes;
    if (_ts_prof.peak_growth && _ts_prof.write && _ts_prof.live_bytes >= _ts_prof.peak_next) {
        _ts_prof_dump_locked(TS_PROF_PEAK, NULL);
        _ts_prof.peak_next = _ts_prof.live_bytes * (1 + (double)_ts_prof.peak_growth / 100);
    }
    if (_ts_prof.interval && _ts_prof.write && _ts_prof.alloc_bytes >= _ts_prof.interval_next) {
        _ts_prof_dump_locked(TS_PROF_INTERVAL, NULL);
        _ts_prof.interval_next = _ts_prof.alloc_bytes + (double)_ts_prof.interval;
    }
}

static void record(void *p, ts_prof_stack_t *s, size_t size, double w, size_t own) {
    ts_spin_lock(&_ts_prof.lock);
    record_locked(p, s, size, w, own);
    prof_unlock();
}

/* Drops p's sample; returns the bytes it owns (prof_block_t.own), or 0 when
 * p was not sampled or not poolable. Under the lock. */
static size_t forget_locked(const void *p, const char *func) {
    if (blocks_count) {
        prof_block_t *b = block_slot(blocks, blocks_cap, (uintptr_t)p);
        if (b->ptr) {
            size_t own = b->own;
            b->stack->live_objs -= b->objs;
            b->stack->live_bytes -= b->bytes;
            _ts_prof.live_bytes -= b->bytes;
            block_remove(b);
            return own;
        }
    }
    pool_check(p, func);
    return 0;
}

void _ts_prof_forget(const void *p) {
    ts_spin_lock(&_ts_prof.lock);
    forget_locked(p, "realloc");
    prof_unlock();
}

bool _ts_prof_free(void *p) {
    ts_spin_lock(&_ts_prof.lock);
    size_t own = forget_locked(p, "free");
    bool kept = own && pool_put((uintptr_t)p, own);
    prof_unlock();
    return kept;
}

/* Takes the lock and returns the current call's stack (the entry's return
 * address and frame pointer are in prof_tls); NULL: none could be kept. */
static ts_prof_stack_t *stack_lock(void) {
    prof_tls_t *t = &prof_tls;
    return _ts_prof_stack_lock(t->ra, t->fp, t->stack_lo, t->stack_hi, t->ra_slot);
}

/* The weight of a sample of `size` bytes: programs sample the same sizes
 * again and again, and the weight takes a few dozen dependent multiplies. */
static double weight(size_t size) {
    prof_tls_t *t = &prof_tls;
    if (t->w_size != size || t->w == 0) {
        t->w = _ts_prof_weight(size, (double)_ts_prof.rate);
        t->w_size = size;
    }
    return t->w;
}

/* A sampled allocation: a large block whatever its size. Below the largest
 * class, a freed sampled block from the pool, taken under the lock that
 * found the stack (a sample then takes the lock once), else the large-block
 * path itself; above, the core's own path gives one. */
static TS_NOINLINE void *sampled(size_t size, size_t align, bool zero) {
    double w = weight(size);
    void *p;
    if (size > TS_CLASS_MAX_SIZE) {
        p = zero    ? _ts_core_calloc(size)
            : align ? _ts_core_memalign(align, size)
                    : _ts_core_malloc(size);
        if (!p) return p;
        ts_prof_stack_t *s = stack_lock();
        if (s) record_locked(p, s, size, w, 0);
        prof_unlock();
        return p;
    }
    size_t own = ts_align_up(size ? size : 1, POOL_PAGE);
    ts_prof_stack_t *s = stack_lock();
    p = s ? (void *)pool_take(own, align ? align : 1, &own) : NULL;
    if (p) record_locked(p, s, size, w, own);
    prof_unlock();
    if (p) {
        if (zero) memset(p, 0, size);
        return p;
    }
    int saved = errno;
    p = _ts_large_alloc(size, align, zero);
    if (p && s) record(p, s, size, w, own);
    ts_purge_safe_point();
    if (p) return p;
    /* No mapping (out of memory, or of mappings: vm.max_map_count): the
     * block is served as if not sampled, rather than refused. */
    errno = saved;
    return zero    ? _ts_core_calloc(size)
           : align ? _ts_core_memalign(align, size)
                   : _ts_core_malloc(size);
}

/* ---- the malloc family, profiled (family.h's edge cases call these) ---- */

void *_ts_profd_malloc(size_t size) {
    if (ts_likely(!take(size))) return _ts_core_malloc(size);
    return sampled(size, 0, false);
}

void *_ts_profd_calloc(size_t total) {
    if (ts_likely(!take(total))) return _ts_core_calloc(total);
    return sampled(total, 0, true);
}

void *_ts_profd_memalign(size_t align, size_t size) {
    if (ts_likely(!take(size))) return _ts_core_memalign(align, size);
    return sampled(size, align, false);
}

void _ts_profd_free(void *p) {
    _ts_core_free(p);
}

/* The new block is sampled or not on its own; the old block's sample (a
 * large block) leaves in the core's realloc or free. A large block grows in
 * place or moves with mremap as without the profiler. */
void *_ts_profd_realloc(void *p, size_t size) {
    if (ts_likely(!take(size))) return _ts_core_realloc(p, size);
    double w = weight(size);
    void *q;
    if (size > TS_CLASS_MAX_SIZE) {
        q = _ts_core_realloc(p, size);
        if (!q) return q;
        ts_prof_stack_t *s = stack_lock();
        if (s) record_locked(q, s, size, w, 0);
        prof_unlock();
        return q;
    }
    size_t old = _ts_usable_checked(p, "realloc");
    size_t own = ts_align_up(size ? size : 1, POOL_PAGE);
    ts_prof_stack_t *s = stack_lock();
    q = s ? (void *)pool_take(own, 1, &own) : NULL;
    if (q) record_locked(q, s, size, w, own);
    prof_unlock();
    if (!q) {
        int saved = errno;
        q = _ts_large_alloc(size, 0, false);
        if (!q) { /* no mapping: not sampled (see sampled()) */
            errno = saved;
            return _ts_core_realloc(p, size);
        }
        if (s) record(q, s, size, w, own);
    }
    memcpy(q, p, old < size ? old : size);
    _ts_core_free(p);
    ts_purge_safe_point();
    return q;
}

/* Entries: the caller's return address and frame pointer for the walk. The
 * frame pointer is read as a value, so a tail call from here is harmless. */
#define ENTER(ra)                                                                                  \
    prof_tls.ra = (ra);                                                                            \
    prof_tls.fp = *(uintptr_t *)__builtin_frame_address(0);                                        \
    prof_tls.ra_slot = (uintptr_t)__builtin_frame_address(0) + sizeof(void *)

static TS_NOINLINE void *malloc_sampled(size_t size, void *ra) {
    ENTER(ra);
    if (!take_slow(&prof_tls, size + (size == 0))) return _ts_core_malloc(size);
    return sampled(size, 0, false);
}

/* malloc, the one entry on every program's hot path: the countdown and the
 * core's inline fast path, with no store of the caller's frame (done on the
 * way to a sample, from the frame pointer this function leaves untouched). */
void *_ts_prof_malloc(size_t size, void *ra) {
    prof_tls_t *t = &prof_tls;
    if (ts_likely(size - 1 < t->left)) { /* malloc(0) goes on: see next_left */
        t->left -= size;
        return ts_core_malloc_inline(size);
    }
    return malloc_sampled(size, ra);
}
void *_ts_prof_calloc(size_t count, size_t size, void *ra) {
    ENTER(ra);
    return ts_family_calloc(count, size);
}

void *_ts_prof_realloc(void *ptr, size_t size, void *ra) {
    ENTER(ra);
    return ts_family_realloc(ptr, size);
}

void *_ts_prof_memalign(size_t align, size_t size, void *ra) {
    ENTER(ra);
    return ts_family_memalign(align, size);
}

void *_ts_prof_aligned_alloc(size_t align, size_t size, void *ra) {
    ENTER(ra);
    return ts_family_aligned_alloc(align, size);
}

int _ts_prof_posix_memalign(void **out, size_t align, size_t size, void *ra) {
    ENTER(ra);
    return ts_family_posix_memalign(out, align, size);
}

/* ---- profiles on demand, at exit, and fork ---- */

TS_EXPORT int ts_prof_dump(const char *path) {
    if (!_ts_prof_on || !_ts_prof.write) {
        errno = ENOENT;
        return -1;
    }
    ts_spin_lock(&_ts_prof.lock);
    int r = _ts_prof_dump_locked(path ? TS_PROF_NAMED : TS_PROF_INTERVAL, path);
    prof_unlock();
    return r;
}

TS_EXPORT int ts_prof_set_active(int active) {
    if (!_ts_prof_on) {
        errno = ENOENT;
        return -1;
    }
    if (active < 0) return atomic_load_explicit(&_ts_prof.active, memory_order_relaxed);
    return atomic_exchange_explicit(&_ts_prof.active, active != 0, memory_order_relaxed);
}

static void prof_exit(void) {
    if (prof_tls.busy) return;
    prof_tls.busy = true; /* later allocations of this thread: not sampled */
    ts_spin_lock(&_ts_prof.lock);
    /* A process that never sampled (a short-lived one, a shell's helper)
     * would write a profile with no stack in it: it writes none. */
    if (_ts_prof.final && _ts_prof.write && _ts_prof.stack_count)
        _ts_prof_dump_locked(TS_PROF_FINAL, NULL);
    bool leaked = _ts_prof.leaks && _ts_prof_leaks_locked();
    prof_unlock();
    prof_tls.busy = false;
    if (leaked && _ts_prof.leak_exitcode) {
        fflush(NULL);
        _exit((int)_ts_prof.leak_exitcode);
    }
}

static void fork_prepare(void) {
    ts_spin_lock(&_ts_prof.lock);
}
static void fork_parent(void) {
    prof_unlock();
}
/* The child writes its own files (%p), numbered from 0, and its first peak
 * profile when its heap grows past what it inherited. */
static void fork_child(void) {
    ts_spin_init(&_ts_prof.lock);
    atomic_store_explicit(&_ts_prof.dump_pending, 0, memory_order_relaxed); /* the parent's */
    _ts_prof.seq = 0;
    if (_ts_prof.peak_growth)
        _ts_prof.peak_next = _ts_prof.live_bytes * (1 + (double)_ts_prof.peak_growth / 100);
}

/* Before main, outside malloc: atexit and pthread_atfork may allocate, and
 * the first backtrace() loads libgcc_s. Allocations before this are not
 * sampled. */
__attribute__((constructor)) static void prof_constructor(void) {
    bool prof = _ts_option_env(TS_OPTID_PROF, NULL);
    bool leaks = _ts_option_env(TS_OPTID_LEAKS, NULL);
    if (!prof && !leaks) return;
    _ts_process_init();
    _ts_prof.write = prof;
    _ts_prof.leaks = leaks;
    _ts_prof.rate = _ts_option_env(TS_OPTID_PROF_SAMPLE, NULL);
    _ts_prof.final = _ts_option_env(TS_OPTID_PROF_FINAL, NULL);
    _ts_prof.peak_growth = _ts_option_env(TS_OPTID_PROF_PEAK_GROWTH, NULL);
    _ts_prof.interval = _ts_option_env(TS_OPTID_PROF_INTERVAL, NULL);
    _ts_prof.unwind = (int)_ts_option_env(TS_OPTID_PROF_UNWIND, NULL);
    _ts_prof.leak_exitcode = _ts_option_env(TS_OPTID_LEAKS_EXITCODE, NULL);
    atomic_store_explicit(&_ts_prof.active, _ts_option_env(TS_OPTID_PROF_ACTIVE, NULL) != 0,
                          memory_order_relaxed);
    seed = (uint64_t)_ts_option_env(TS_OPTID_PROF_SEED, NULL);
    const char *file = _ts_env("TSALLOC_PROF_FILE");
    if (!file || !*file || strlen(file) >= sizeof _ts_prof.file) file = "tsalloc.%p.heap";
    strcpy(_ts_prof.file, file);
    /* The first peak profile once the heap holds a few samples' worth. */
    _ts_prof.peak_next = (double)(_ts_prof.rate > TS_MB(1) ? _ts_prof.rate : TS_MB(1));
    _ts_prof.interval_next = (double)_ts_prof.interval;
    /* backtrace() loads libgcc_s: only where unwind.c does not serve. */
    if (_ts_prof.unwind == 2 || (_ts_prof.unwind == 1 && !_ts_prof_unwind_ok()))
        _ts_prof_walk_prepare();
    _ts_os_keep_stderr();
    int sig = prof ? (int)_ts_option_env(TS_OPTID_PROF_SIGNAL, NULL) : 0;
    if (sig) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_dump_signal;
        sa.sa_flags = SA_RESTART; /* the program's interrupted calls go on */
        sigemptyset(&sa.sa_mask);
        _ts_prof.signal = sig; /* before the handler can run: prof_unlock reads it */
        if (sigaction(sig, &sa, NULL) != 0) {
            _ts_prof.signal = 0;
            _ts_message("TSALLOC_PROF_SIGNAL=%d: the signal cannot be handled", sig);
        }
    }
    pthread_atfork(fork_prepare, fork_parent, fork_child);
    atexit(prof_exit);
    _ts_prof_on = 1;
}
