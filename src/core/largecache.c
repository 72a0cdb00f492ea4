/* The cache of freed large regions: LCACHE_SLOTS of them in all, in
 * LCACHE_SHARDS shards, at most TSALLOC_LARGE_CACHE_MB resident, joined with
 * neighbours of the same mapping in the same shard, purged and unmapped by
 * age (_ts_large_purge). The policy and its measurements are described at
 * the top of large.c.
 *
 * Why shards: with one lock, threads that hand large buffers to each other
 * all waited for it (docs/core/large-blocks.md has the figures). A region
 * lives in the shard of its mapping (origin), so the pieces of one mapping
 * still meet and join; a request looks at the shards from its thread's own
 * on, taking a close fit where it finds one and else the best fit of all
 * shards, as the single cache did (the first fit of one's own shard made
 * tsb-exchange take 0.19-0.22 s and 192-212 MB, against 0.13-0.16 s and
 * 128-137 MB, 4 runs each).
 *
 * Invariants: dirty_all is the sum of the entries' dirty bytes;
 * _ts_stats.large_cached_count is the number of entries, so at least any
 * one shard's n; an entry lies within one mapping (its origin).
 * Lock order: a shard's lock is a leaf, taken after large.c's move_lock or a
 * table stripe, one shard at a time (the fork handlers: all, in order);
 * nothing that may allocate runs under it.
 */
#include "core/largecache.h"

#include <string.h>

#define LCACHE_SHARDS 8
#define LCACHE_SLOTS  128
#define FREED_RING    64

/* One shard's regions; its lock is shard_lock[] (apart: the fork handlers
 * write every lock, TS_FORK_LOCK). */
typedef struct lcache_shard {
    lcache_entry_t entry[LCACHE_SLOTS];
    unsigned n;
    _Atomic unsigned held;       /* n, for a look without the lock (take skips empty shards) */
    uintptr_t freed[FREED_RING]; /* recent frees, to name double frees */
    unsigned freed_pos;
} __attribute__((aligned(64))) lcache_shard_t;

typedef struct {
    pthread_mutex_t m;
} __attribute__((aligned(64))) shard_lock_t;

static lcache_shard_t shards[LCACHE_SHARDS];
static TS_FORK_LOCK shard_lock_t shard_lock[LCACHE_SHARDS] = {
    [0 ... LCACHE_SHARDS - 1] = {PTHREAD_MUTEX_INITIALIZER}};
static _Atomic size_t dirty_all;  /* the entries' dirty bytes, summed */
static _Atomic uint64_t asked_at; /* the last large allocation (_ts_large_purge) */

static void lock(unsigned i) {
    pthread_mutex_lock(&shard_lock[i].m);
}
static void unlock(unsigned i) {
    pthread_mutex_unlock(&shard_lock[i].m);
}

/* Where a thread starts looking: threads take the shards in turn as they
 * first allocate a large block, so the first LCACHE_SHARDS of them start on
 * different locks. */
static _Atomic unsigned next_home;
static TS_TLS unsigned home_plus1; /* 0: none yet */

static unsigned home(void) {
    if (ts_unlikely(!home_plus1))
        home_plus1 =
            atomic_fetch_add_explicit(&next_home, 1, memory_order_relaxed) % LCACHE_SHARDS + 1;
    return home_plus1 - 1;
}

/* Split a region only when the rest is worth keeping apart. */
size_t _ts_lcache_split_min(size_t need) {
    size_t m = need / 8;
    return m > ((size_t)256 << 10) ? m : (size_t)256 << 10;
}

static void unmap_region(uintptr_t base, size_t size, size_t dirty) {
    _ts_stat_decommit(dirty);
    atomic_fetch_sub(&_ts_stats.dirty, dirty);
    atomic_fetch_add(&_ts_stats.unmapped, size);
    _ts_os_unmap((void *)base, size);
}

static void dirty_sub(size_t bytes) {
    atomic_fetch_sub_explicit(&dirty_all, bytes, memory_order_relaxed);
}

static void lcache_remove_at(lcache_shard_t *sh, unsigned i) {
    lcache_entry_t *e = &sh->entry[i];
    dirty_sub(e->dirty);
    atomic_fetch_sub(&_ts_stats.large_cached_count, 1);
    atomic_fetch_sub(&_ts_stats.large_cached_bytes, e->size);
    sh->entry[i] = sh->entry[--sh->n];
    atomic_store_explicit(&sh->held, sh->n, memory_order_relaxed);
}

static void lcache_add(lcache_shard_t *sh, uintptr_t base, size_t size, size_t dirty, uint64_t when,
                       uint64_t origin) {
    lcache_entry_t *e = &sh->entry[sh->n++];
    atomic_store_explicit(&sh->held, sh->n, memory_order_relaxed);
    e->base = base;
    e->size = size;
    e->dirty = dirty;
    e->freed_at = when;
    e->zero = e->stuck = false;
    e->origin = origin;
    atomic_fetch_add_explicit(&dirty_all, dirty, memory_order_relaxed);
    atomic_fetch_add(&_ts_stats.large_cached_count, 1);
    atomic_fetch_add(&_ts_stats.large_cached_bytes, size);
}

static void purge_entry(lcache_entry_t *e) {
    if (!_ts_os_purge((void *)e->base, e->size)) { /* contents and residency unchanged */
        e->stuck = true;
        return;
    }
    e->zero = true;
    dirty_sub(e->dirty);
    _ts_stat_decommit(e->dirty);
    atomic_fetch_sub(&_ts_stats.dirty, e->dirty);
    atomic_fetch_add(&_ts_stats.purged, e->dirty);
    e->dirty = 0;
}

/* The shard's oldest region (it has one). */
static unsigned oldest(const lcache_shard_t *sh) {
    unsigned old = 0;
    for (unsigned i = 1; i < sh->n; i++)
        if (sh->entry[i].freed_at < sh->entry[old].freed_at) old = i;
    return old;
}

/* Purge a shard's oldest resident regions while the cache as a whole holds
 * more than `limit` resident (the caller holds the shard's lock). */
static void trim_shard(lcache_shard_t *sh, size_t limit) {
    while (atomic_load_explicit(&dirty_all, memory_order_relaxed) > limit) {
        int old = -1;
        for (unsigned i = 0; i < sh->n; i++)
            if (sh->entry[i].dirty && !sh->entry[i].stuck &&
                (old < 0 || sh->entry[i].freed_at < sh->entry[old].freed_at))
                old = (int)i;
        if (old < 0) break;
        purge_entry(&sh->entry[old]);
    }
}

/* Keep a freed region for reuse in the shard of its mapping, joined with
 * neighbours of the same mapping (all in that shard). The cache holds
 * LCACHE_SLOTS regions in all: past that, the oldest region of the shard
 * (else of the next shard that has one) is unmapped. A region larger than
 * the budget is unmapped at once. */
void _ts_lcache_put(uintptr_t base, size_t size, uint64_t origin) {
    unsigned at = (unsigned)(origin % LCACHE_SHARDS);
    size_t limit = (size_t)_ts_option(TS_OPT_LARGE_CACHE_MB) << 20;
    atomic_fetch_add(&_ts_stats.dirty, size);
    uint64_t now = _ts_os_now_ns();
    lcache_entry_t evict = {0};
    lcache_shard_t *sh = &shards[at];
    lock(at);
    sh->freed[sh->freed_pos++ % FREED_RING] = base; /* cached or not: a second free is named */
    if (size > limit) {
        unlock(at);
        unmap_region(base, size, size);
        return;
    }
    size_t dirty = size;
    for (unsigned i = 0; i < sh->n;) { /* neighbours: one region again */
        lcache_entry_t *e = &sh->entry[i];
        if (e->origin == origin && (e->base + e->size == base || base + size == e->base)) {
            if (e->base < base) base = e->base;
            size += e->size;
            dirty += e->dirty;
            lcache_remove_at(sh, i);
            continue;
        }
        i++;
    }
    bool full =
        atomic_load_explicit(&_ts_stats.large_cached_count, memory_order_relaxed) >= LCACHE_SLOTS;
    /* The count is at least sh->n: a shard never overflows. */
    if (full && sh->n) { /* full: the oldest region goes, this shard's first */
        unsigned old = oldest(sh);
        evict = sh->entry[old];
        lcache_remove_at(sh, old);
        full = false;
    }
    lcache_add(sh, base, size, dirty, now, origin);
    trim_shard(sh, limit); /* over budget: purge the oldest resident ones, here first */
    if (_ts_purge_delay_ns() == 0)
        for (unsigned i = 0; i < sh->n; i++)
            if (sh->entry[i].dirty && !sh->entry[i].stuck) purge_entry(&sh->entry[i]);
    unlock(at);
    for (unsigned k = 1; k < LCACHE_SHARDS; k++) { /* then the others, one lock at a time */
        if (!full && atomic_load_explicit(&dirty_all, memory_order_relaxed) <= limit) break;
        unsigned other = (at + k) % LCACHE_SHARDS;
        lcache_shard_t *o = &shards[other];
        lcache_entry_t gone = {0};
        lock(other);
        if (full && o->n) {
            unsigned old = oldest(o);
            gone = o->entry[old];
            lcache_remove_at(o, old);
            full = false;
        }
        trim_shard(o, limit);
        unlock(other);
        if (gone.base) unmap_region(gone.base, gone.size, gone.dirty);
    }
    if (evict.base) unmap_region(evict.base, evict.size, evict.dirty);
    _ts_purge_schedule();
}

/* In one shard (its lock held): the smallest region that fits (*fit), and,
 * when no special alignment is asked, the largest smaller one (*grow); -1
 * for none. */
static void pick_in(const lcache_shard_t *sh, size_t need, size_t align, int *fit, int *grow) {
    *fit = *grow = -1;
    for (unsigned i = 0; i < sh->n; i++) {
        const lcache_entry_t *e = &sh->entry[i];
        if (e->base & (align - 1)) continue;
        if (e->size >= need) {
            if (*fit < 0 || e->size < sh->entry[*fit].size) *fit = (int)i;
        } else if (align <= OS_PAGE && (*grow < 0 || e->size > sh->entry[*grow].size)) {
            *grow = (int)i;
        }
    }
}

/* Hand region i of the shard (its lock held) to *out: its start when it
 * fits and the rest is worth keeping apart (the rest stays), else whole. */
static void take_at(lcache_shard_t *sh, unsigned i, size_t need, lcache_entry_t *out) {
    lcache_entry_t *e = &sh->entry[i];
    if (e->size >= need && e->size - need >= _ts_lcache_split_min(need)) {
        size_t rest = e->size - need;
        /* Split the resident bytes in proportion, in whole pages. */
        size_t rest_dirty = (size_t)((double)e->dirty * ((double)rest / (double)e->size));
        rest_dirty &= ~(OS_PAGE - 1);
        if (e->dirty - rest_dirty > need) rest_dirty = e->dirty - need;
        *out = *e;
        out->size = need;
        out->dirty = e->dirty - rest_dirty;
        dirty_sub(out->dirty);
        e->base += need;
        e->size = rest;
        e->dirty = rest_dirty;
        atomic_fetch_sub(&_ts_stats.large_cached_bytes, need);
    } else {
        *out = *e;
        lcache_remove_at(sh, i);
    }
}

/* Take memory for `need` bytes: the start of the smallest region that fits
 * (a rest worth keeping stays cached), else, when no special alignment is
 * asked, the largest smaller region, to be grown by the caller. The shards
 * are looked at one lock at a time, from the thread's own on; a region that
 * fits closely (taken whole) is taken where it is found, else the best of
 * all is taken once the look is over (looked for again if it went
 * meanwhile). */
bool _ts_lcache_take(size_t need, size_t align, lcache_entry_t *out) {
    atomic_store_explicit(&asked_at, _ts_os_now_ns(), memory_order_relaxed);
    unsigned start = home();
    for (int attempt = 0; attempt < 4; attempt++) {
        if (!atomic_load_explicit(&_ts_stats.large_cached_count, memory_order_relaxed))
            return false;
        int fit_at = -1, grow_at = -1;
        uintptr_t fit_base = 0, grow_base = 0;
        size_t fit_size = 0, grow_size = 0;
        for (unsigned k = 0; k < LCACHE_SHARDS; k++) {
            unsigned at = (start + k) % LCACHE_SHARDS;
            lcache_shard_t *sh = &shards[at];
            if (!atomic_load_explicit(&sh->held, memory_order_relaxed))
                continue; /* empty when looked at: passed without its lock */
            lock(at);
            int fit, grow;
            pick_in(sh, need, align, &fit, &grow);
            if (fit >= 0 && sh->entry[fit].size - need < _ts_lcache_split_min(need)) {
                take_at(sh, (unsigned)fit, need, out); /* close: taken whole, here */
                unlock(at);
                return true;
            }
            if (fit >= 0 && (fit_at < 0 || sh->entry[fit].size < fit_size)) {
                fit_at = (int)at;
                fit_base = sh->entry[fit].base;
                fit_size = sh->entry[fit].size;
            }
            if (grow >= 0 && (grow_at < 0 || sh->entry[grow].size > grow_size)) {
                grow_at = (int)at;
                grow_base = sh->entry[grow].base;
                grow_size = sh->entry[grow].size;
            }
            unlock(at);
        }
        int at = fit_at >= 0 ? fit_at : grow_at;
        if (at < 0) return false;
        uintptr_t base = fit_at >= 0 ? fit_base : grow_base;
        lcache_shard_t *sh = &shards[at];
        lock((unsigned)at);
        for (unsigned i = 0; i < sh->n; i++)
            if (sh->entry[i].base == base && (fit_at < 0 || sh->entry[i].size >= need)) {
                take_at(sh, i, need, out);
                unlock((unsigned)at);
                return true;
            }
        unlock((unsigned)at); /* taken or changed meanwhile: look again */
    }
    return false;
}

/* Purge and unmap what expired. While the program allocates large blocks
 * (the last one less than a purge delay ago) the cache is busy: its regions
 * are the pool the next requests are carved from, and one that waits longer
 * than the delay for a request it fits is still taken (malloc-large, 20
 * blocks of 5-25 MB replaced at random: 7% of the bytes taken had waited
 * over 100 ms, and purging them faulted 2.1 GB back in, 4.2 times the page
 * faults of no purge). So a busy cache keeps its regions resident, bounded
 * by the budget (lcache_put) and by time: one freed ten delays ago is
 * unmapped. Once the program stops, each region is purged a delay after its
 * free, or at once if that passed, and unmapped ten delays after it. */
uint64_t _ts_large_purge(uint64_t now, bool force) {
    uint64_t delay = _ts_purge_delay_ns(), next = UINT64_MAX;
    uint64_t keep = delay * 10 > 1000000000u ? delay * 10 : 1000000000u;
    uint64_t busy_until = atomic_load_explicit(&asked_at, memory_order_relaxed) + delay;
    bool busy = !force && busy_until > now;
    for (unsigned k = 0; k < LCACHE_SHARDS; k++) {
        lcache_shard_t *sh = &shards[k];
        lcache_entry_t drop[LCACHE_SLOTS];
        unsigned ndrop = 0;
        lock(k);
        for (unsigned i = 0; i < sh->n;) {
            lcache_entry_t *e = &sh->entry[i];
            if (e->dirty && !e->stuck) {
                uint64_t due = e->freed_at + delay;
                if (busy && due < busy_until) due = busy_until;
                if (due > e->freed_at + keep) due = e->freed_at + keep;
                if (busy && e->freed_at + keep <= now) { /* unused for ten delays */
                    drop[ndrop++] = *e;
                    lcache_remove_at(sh, i);
                    continue;
                }
                if (force || due <= now)
                    purge_entry(e);
                else if (due < next)
                    next = due;
            }
            if (!e->dirty || e->stuck) {
                uint64_t until = e->freed_at + (e->stuck ? delay : keep);
                if (force || until <= now) {
                    drop[ndrop++] = *e;
                    lcache_remove_at(sh, i);
                    continue;
                }
                if (until < next) next = until;
            }
            i++;
        }
        unlock(k);
        for (unsigned i = 0; i < ndrop; i++)
            unmap_region(drop[i].base, drop[i].size, drop[i].dirty);
    }
    return next;
}

bool _ts_lcache_freed_recently(uintptr_t p) {
    bool seen = false;
    for (unsigned k = 0; k < LCACHE_SHARDS && !seen; k++) {
        lock(k);
        for (unsigned i = 0; i < FREED_RING; i++)
            if (shards[k].freed[i] == p) seen = true;
        unlock(k);
    }
    return seen;
}

bool _ts_lcache_find(uintptr_t u, uintptr_t *start, size_t *size) {
    bool found = false;
    for (unsigned k = 0; k < LCACHE_SHARDS && !found; k++) {
        lcache_shard_t *sh = &shards[k];
        lock(k);
        for (unsigned i = 0; i < sh->n && !found; i++) {
            if (u >= sh->entry[i].base && u - sh->entry[i].base < sh->entry[i].size) {
                *start = sh->entry[i].base;
                *size = sh->entry[i].size;
                found = true;
            }
        }
        unlock(k);
    }
    return found;
}

void _ts_lcache_atfork_prepare(void) {
    for (unsigned k = 0; k < LCACHE_SHARDS; k++) lock(k);
}

void _ts_lcache_atfork_parent(void) {
    for (unsigned k = 0; k < LCACHE_SHARDS; k++) unlock(k);
}

void _ts_lcache_atfork_child(void) {
    for (unsigned k = 0; k < LCACHE_SHARDS; k++) pthread_mutex_init(&shard_lock[k].m, NULL);
}
