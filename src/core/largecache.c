/* The cache of freed large regions: up to LCACHE_SLOTS of them, at most
 * TSALLOC_LARGE_CACHE_MB resident, joined with neighbours of the same
 * mapping, purged and unmapped by age (_ts_large_purge). The policy and its
 * measurements are described at the top of large.c.
 *
 * Invariants: lcache_dirty is the sum of the entries' dirty bytes; an entry
 * lies within one mapping (its origin).
 * Lock order: lcache_lock is a leaf, taken after large.c's move_lock or a
 * table stripe; nothing that may allocate runs under it.
 */
#include "core/largecache.h"

#include <string.h>

#define LCACHE_SLOTS 32
#define FREED_RING   64

static TS_FORK_LOCK pthread_mutex_t lcache_lock = PTHREAD_MUTEX_INITIALIZER;
static lcache_entry_t lcache[LCACHE_SLOTS];
static unsigned lcache_n;
static size_t lcache_dirty;              /* sum of the entries' dirty bytes */
static uint64_t lcache_asked_at;         /* the last large allocation (_ts_large_purge) */
static uintptr_t freed_ring[FREED_RING]; /* recent frees, to name double frees */
static unsigned freed_pos;

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

static void lcache_remove_at(unsigned i) {
    lcache_entry_t *e = &lcache[i];
    lcache_dirty -= e->dirty;
    atomic_fetch_sub(&_ts_stats.large_cached_count, 1);
    atomic_fetch_sub(&_ts_stats.large_cached_bytes, e->size);
    lcache[i] = lcache[--lcache_n];
}

static void lcache_add(uintptr_t base, size_t size, size_t dirty, uint64_t when, uint64_t origin) {
    lcache_entry_t *e = &lcache[lcache_n++];
    e->base = base;
    e->size = size;
    e->dirty = dirty;
    e->freed_at = when;
    e->zero = e->stuck = false;
    e->origin = origin;
    lcache_dirty += dirty;
    atomic_fetch_add(&_ts_stats.large_cached_count, 1);
    atomic_fetch_add(&_ts_stats.large_cached_bytes, size);
}

static void purge_entry(lcache_entry_t *e) {
    if (!_ts_os_purge((void *)e->base, e->size)) { /* contents and residency unchanged */
        e->stuck = true;
        return;
    }
    e->zero = true;
    lcache_dirty -= e->dirty;
    _ts_stat_decommit(e->dirty);
    atomic_fetch_sub(&_ts_stats.dirty, e->dirty);
    atomic_fetch_add(&_ts_stats.purged, e->dirty);
    e->dirty = 0;
}

/* Keep a freed region for reuse, joined with cached neighbours of the same
 * mapping, or give it back at once when the cache cannot hold it. */
void _ts_lcache_put(uintptr_t base, size_t size, uint64_t origin) {
    size_t limit = (size_t)_ts_option(TS_OPT_LARGE_CACHE_MB) << 20;
    atomic_fetch_add(&_ts_stats.dirty, size);
    uint64_t now = _ts_os_now_ns();
    lcache_entry_t evict = {0};
    pthread_mutex_lock(&lcache_lock);
    freed_ring[freed_pos++ % FREED_RING] = base; /* cached or not: a second free is named */
    if (size > limit) {
        pthread_mutex_unlock(&lcache_lock);
        unmap_region(base, size, size);
        return;
    }
    size_t dirty = size;
    for (unsigned i = 0; i < lcache_n;) { /* neighbours: one region again */
        lcache_entry_t *e = &lcache[i];
        if (e->origin == origin && (e->base + e->size == base || base + size == e->base)) {
            if (e->base < base) base = e->base;
            size += e->size;
            dirty += e->dirty;
            lcache_remove_at(i);
            continue;
        }
        i++;
    }
    if (lcache_n == LCACHE_SLOTS) { /* full: drop the oldest */
        unsigned old = 0;
        for (unsigned i = 1; i < lcache_n; i++)
            if (lcache[i].freed_at < lcache[old].freed_at) old = i;
        evict = lcache[old];
        lcache_remove_at(old);
    }
    lcache_add(base, size, dirty, now, origin);
    while (lcache_dirty > limit) { /* over budget: purge the oldest resident ones */
        int old = -1;
        for (unsigned i = 0; i < lcache_n; i++)
            if (lcache[i].dirty && !lcache[i].stuck &&
                (old < 0 || lcache[i].freed_at < lcache[old].freed_at))
                old = (int)i;
        if (old < 0) break;
        purge_entry(&lcache[old]);
    }
    if (_ts_purge_delay_ns() == 0)
        for (unsigned i = 0; i < lcache_n; i++)
            if (lcache[i].dirty && !lcache[i].stuck) purge_entry(&lcache[i]);
    pthread_mutex_unlock(&lcache_lock);
    if (evict.base) unmap_region(evict.base, evict.size, evict.dirty);
    _ts_purge_schedule();
}

/* Take memory for `need` bytes: the smallest region that fits (its start;
 * a rest worth keeping stays cached), else, when no special alignment is
 * asked, the largest smaller region, to be grown by the caller. */
bool _ts_lcache_take(size_t need, size_t align, lcache_entry_t *out) {
    uint64_t now = _ts_os_now_ns();
    pthread_mutex_lock(&lcache_lock);
    lcache_asked_at = now;
    int fit = -1, grow = -1;
    for (unsigned i = 0; i < lcache_n; i++) {
        lcache_entry_t *e = &lcache[i];
        if (e->base & (align - 1)) continue;
        if (e->size >= need) {
            if (fit < 0 || e->size < lcache[fit].size) fit = (int)i;
        } else if (align <= OS_PAGE && (grow < 0 || e->size > lcache[grow].size)) {
            grow = (int)i;
        }
    }
    int pick = fit >= 0 ? fit : grow;
    if (pick >= 0) {
        lcache_entry_t *e = &lcache[pick];
        if (fit >= 0 && e->size - need >= _ts_lcache_split_min(need)) {
            size_t rest = e->size - need;
            /* Split the resident bytes in proportion, in whole pages. */
            size_t rest_dirty = (size_t)((double)e->dirty * ((double)rest / (double)e->size));
            rest_dirty &= ~(OS_PAGE - 1);
            if (e->dirty - rest_dirty > need) rest_dirty = e->dirty - need;
            *out = *e;
            out->size = need;
            out->dirty = e->dirty - rest_dirty;
            lcache_dirty -= out->dirty;
            e->base += need;
            e->size = rest;
            e->dirty = rest_dirty;
            atomic_fetch_sub(&_ts_stats.large_cached_bytes, need);
        } else {
            *out = *e;
            lcache_remove_at((unsigned)pick);
        }
    }
    pthread_mutex_unlock(&lcache_lock);
    return pick >= 0;
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
    lcache_entry_t drop[LCACHE_SLOTS];
    unsigned ndrop = 0;
    pthread_mutex_lock(&lcache_lock);
    uint64_t busy_until = lcache_asked_at + delay;
    bool busy = !force && busy_until > now;
    for (unsigned i = 0; i < lcache_n;) {
        lcache_entry_t *e = &lcache[i];
        if (e->dirty && !e->stuck) {
            uint64_t due = e->freed_at + delay;
            if (busy && due < busy_until) due = busy_until;
            if (due > e->freed_at + keep) due = e->freed_at + keep;
            if (busy && e->freed_at + keep <= now) { /* unused for ten delays */
                drop[ndrop++] = *e;
                lcache_remove_at(i);
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
                lcache_remove_at(i);
                continue;
            }
            if (until < next) next = until;
        }
        i++;
    }
    pthread_mutex_unlock(&lcache_lock);
    for (unsigned i = 0; i < ndrop; i++) unmap_region(drop[i].base, drop[i].size, drop[i].dirty);
    return next;
}

bool _ts_lcache_freed_recently(uintptr_t p) {
    bool seen = false;
    pthread_mutex_lock(&lcache_lock);
    for (unsigned i = 0; i < FREED_RING; i++)
        if (freed_ring[i] == p) seen = true;
    pthread_mutex_unlock(&lcache_lock);
    return seen;
}

bool _ts_lcache_find(uintptr_t u, uintptr_t *start, size_t *size) {
    bool found = false;
    pthread_mutex_lock(&lcache_lock);
    for (unsigned i = 0; i < lcache_n && !found; i++) {
        if (u >= lcache[i].base && u - lcache[i].base < lcache[i].size) {
            *start = lcache[i].base;
            *size = lcache[i].size;
            found = true;
        }
    }
    pthread_mutex_unlock(&lcache_lock);
    return found;
}

void _ts_lcache_atfork_prepare(void) {
    pthread_mutex_lock(&lcache_lock);
}

void _ts_lcache_atfork_parent(void) {
    pthread_mutex_unlock(&lcache_lock);
}

void _ts_lcache_atfork_child(void) {
    pthread_mutex_init(&lcache_lock, NULL);
}
