/* Large blocks: requests above the largest class (512 KiB) get a mapping of
 * their own, recorded in a hash table (so free can prove a pointer is one of
 * them), and go back to a bounded cache when freed (largecache.c).
 *
 * The cache keeps up to 128 freed regions, at most TSALLOC_LARGE_CACHE_MB
 * of them resident, in shards by mapping, each with its own lock. A freed
 * region joins cached neighbours of the same mapping; a request takes the
 * start of the smallest region that fits
 * (the rest stays cached), or grows the largest smaller one with mremap.
 * Either way the pages it holds need no page faults, which is what makes
 * programs that allocate and free 5-25 MB blocks in a loop cheap. While the
 * program keeps allocating large blocks (one within the purge delay), the
 * cached regions are the pool it draws from and stay resident, within the
 * budget, until ten purge delays (at least a second) after their free; once
 * it stops, regions are purged (MADV_DONTNEED) a purge delay after their
 * free, and unmapped ten delays after it. realloc of a large block is one mremap
 * in place; failing that, the pages move with mremap to wherever the kernel
 * finds room (large blocks need no alignment beyond the OS page, unlike
 * segments), with the table slot for the new address made sure of first, so
 * no step can fail after the data moved (move_block).
 *
 * Invariants:
 * - Every chunk a large block touches has _ts_segmap == TS_MAP_LARGE before
 *   the block is handed out; the mark stays after unmapping (a segment
 *   mapped there later overwrites it), so free of a pointer near freed large
 *   blocks still ends in a table lookup and an invalid-pointer report.
 * - Lock order: move_lock, then one table stripe at a time or the cache lock
 *   (the fork handler: move_lock, every stripe in order, the cache lock).
 *   Stripes and the cache lock are leaves otherwise, and nothing that may
 *   allocate is called under any of them.
 * - A cached region lies within one of our mappings (its `origin`): mremap
 *   moves or grows only a range within one kernel VMA, and a region joined
 *   across two mappings could be two (the kernel merges neighbouring VMAs
 *   only sometimes), so every realloc of a block carved from it failed its
 *   mremap and copied.
 */
#include "core/internal.h"
#include "core/largecache.h"

#include <errno.h>
#include <string.h>

#define STRIPES 16
/* calloc from a reused region this big asks which pages are resident
 * (clear_reused). */
#define CALLOC_PROBE_MIN ((size_t)1 << 20)

typedef struct large_entry {
    uintptr_t ptr;   /* 0: empty slot */
    size_t size;     /* mapping size (page multiple) */
    uint64_t origin; /* the mapping it lies in (see lcache_entry_t) */
    ts_heap_t *heap; /* the ts_heap_new heap that owns it (heapapi.c), or NULL */
} large_entry_t;

/* Each stripe starts with a table in the library's data (no mmap, so the
 * first blocks of a process whose mmap is refused later still have a slot,
 * and the pages are touched only when used), and grows by mapping. */
#define FIRST_SLOTS 64

typedef struct stripe {
    large_entry_t *slots;
    size_t cap, count;
    large_entry_t first_slots[FIRST_SLOTS];
} __attribute__((aligned(64))) stripe_t;

static stripe_t stripes[STRIPES];
/* Stripe i's lock, apart from its table: the tables span 9 pages, and a fork
 * writes every lock (TS_FORK_LOCK). */
typedef struct {
    pthread_mutex_t m;
} __attribute__((aligned(64))) stripe_lock_t;
static TS_FORK_LOCK stripe_lock_t stripe_locks[STRIPES] = {
    [0 ... STRIPES - 1] = {PTHREAD_MUTEX_INITIALIZER}};
static pthread_mutex_t *lock_of(const stripe_t *s) {
    return &stripe_locks[s - stripes].m;
}

/* One move at a time (move_block): then each stripe's spare slot is enough. */
static TS_FORK_LOCK pthread_mutex_t move_lock = PTHREAD_MUTEX_INITIALIZER;
static _Atomic uint64_t origin_seq;

/* A number for a mapping just made (mmap, or mremap moving pages to a new
 * place): never reused, unlike addresses. */
static uint64_t new_origin(void) {
    return atomic_fetch_add_explicit(&origin_seq, 1, memory_order_relaxed) + 1;
}

/* ---- the table ---------------------------------------------------------------- */

static uint64_t mix(uintptr_t p) {
    return ts_mix64((uint64_t)p >> 12); /* large blocks are page-aligned */
}

static stripe_t *stripe_of(uintptr_t p) {
    return &stripes[mix(p) >> 60];
}

static bool table_grow(stripe_t *s) {
    if (!s->slots) {
        s->slots = s->first_slots;
        s->cap = FIRST_SLOTS;
        return true;
    }
    size_t cap = s->cap * 2;
    large_entry_t *slots = _ts_os_map(cap * sizeof *slots);
    if (!slots) return false;
    for (size_t i = 0; i < s->cap; i++) {
        if (!s->slots[i].ptr) continue;
        size_t j = mix(s->slots[i].ptr) & (cap - 1);
        while (slots[j].ptr) j = (j + 1) & (cap - 1);
        slots[j] = s->slots[i];
    }
    if (s->slots != s->first_slots) _ts_os_unmap(s->slots, s->cap * sizeof *slots);
    s->slots = slots;
    s->cap = cap;
    return true;
}

static void table_put(stripe_t *s, uintptr_t ptr, size_t size, uint64_t origin, ts_heap_t *heap) {
    size_t i = mix(ptr) & (s->cap - 1);
    while (s->slots[i].ptr) i = (i + 1) & (s->cap - 1);
    s->slots[i].ptr = ptr;
    s->slots[i].size = size;
    s->slots[i].origin = origin;
    s->slots[i].heap = heap;
    s->count++;
}

/* A stripe keeps one slot empty (its probe runs end) and one spare for the
 * block a move is about to enter (move_block). False only when the table is
 * that full and cannot grow (the OS refused). */
static bool table_insert(stripe_t *s, uintptr_t ptr, size_t size, uint64_t origin) {
    if ((s->count + 1) * 2 > s->cap) table_grow(s);
    if (s->count + 3 > s->cap) return false;
    table_put(s, ptr, size, origin, NULL);
    return true;
}

/* The stripe has its spare slot, growing it if need be (a move used it). */
static bool table_spare_ready(stripe_t *s) {
    if (s->count + 2 > s->cap) table_grow(s);
    return s->count + 2 <= s->cap;
}

static large_entry_t *table_find(stripe_t *s, uintptr_t ptr) {
    if (!s->cap) return NULL;
    for (size_t i = mix(ptr) & (s->cap - 1);; i = (i + 1) & (s->cap - 1)) {
        if (s->slots[i].ptr == ptr) return &s->slots[i];
        if (!s->slots[i].ptr) return NULL;
    }
}

/* Remove by shifting later members of the probe run back (no tombstones). */
static void table_remove(stripe_t *s, large_entry_t *e) {
    size_t mask = s->cap - 1, i = (size_t)(e - s->slots);
    for (size_t j = (i + 1) & mask; s->slots[j].ptr; j = (j + 1) & mask) {
        size_t home = mix(s->slots[j].ptr) & mask;
        bool movable = i <= j ? (home <= i || home > j) : (home <= i && home > j);
        if (movable) {
            s->slots[i] = s->slots[j];
            i = j;
        }
    }
    s->slots[i].ptr = 0;
    s->slots[i].size = 0;
    s->slots[i].origin = 0;
    s->slots[i].heap = NULL;
    s->count--;
}

static bool mark_large(uintptr_t p, size_t size) {
    if (!_ts_segmap_prepare(p, size)) return false;
    for (size_t ci = p >> TS_SEGMENT_SHIFT; ci <= (p + size - 1) >> TS_SEGMENT_SHIFT; ci++)
        if (atomic_load_explicit(&_ts_segmap[ci], memory_order_relaxed) != TS_MAP_LARGE)
            atomic_store_explicit(&_ts_segmap[ci], TS_MAP_LARGE, memory_order_release);
    return true;
}

/* ---- blocks ------------------------------------------------------------------------ */

/* Clear [from, to) (page-aligned from; `to` may end mid-page): purge it if
 * no page is resident, else memset. */
static void clear_run(uintptr_t from, uintptr_t to, bool resident) {
    if (resident || !_ts_os_purge((void *)from, ts_align_up(to - from, OS_PAGE)))
        memset((void *)from, 0, to - from);
}

/* calloc of a block whose first `stale` bytes may hold old data. Resident
 * pages are cleared with memset: a page fault costs more than clearing the
 * page (4 us per fault on the VM measured, against 0.16 us to clear 4 KiB).
 * Runs of pages that are not resident are purged instead: they hold nothing
 * unless swapped out, and touching them with memset would fault them all in
 * (a 100 MiB block freed with one page touched, then calloc'ed: 3.4 ms with
 * memset of all of it, 23 us purging all of it). From CALLOC_PROBE_MIN on,
 * mincore tells which pages are which; smaller blocks, or when the OS
 * refuses, are cleared with memset. */
static void clear_reused(uintptr_t p, size_t stale, size_t size) {
    size_t n = stale < size ? stale : size; /* bytes to clear */
    if (n < CALLOC_PROBE_MIN) {
        clear_run(p, p + n, true);
        return;
    }
    uintptr_t end = p + n, run = p; /* [run, page): pages alike, resident or not */
    bool run_resident = false;
    unsigned char resident[4096];
    for (uintptr_t base = p; base < end; base += sizeof resident * OS_PAGE) {
        size_t chunk =
            (size_t)(end - base + OS_PAGE - 1) / OS_PAGE; /* the region is page-rounded */
        if (chunk > sizeof resident) chunk = sizeof resident;
        if (!_ts_os_resident((void *)base, chunk * OS_PAGE, resident)) {
            if (run < base) clear_run(run, base, run_resident);
            clear_run(base, end, true);
            return;
        }
        for (size_t i = 0; i < chunk; i++) {
            bool in = resident[i] & 1;
            uintptr_t page = base + i * OS_PAGE;
            if (in != run_resident && page > run) {
                clear_run(run, page, run_resident);
                run = page;
            }
            run_resident = in;
        }
    }
    clear_run(run, end, run_resident);
}

void *_ts_large_alloc(size_t size, size_t align, bool zero) {
    if (size > (size_t)PTRDIFF_MAX - TS_SEGMENT_SIZE) {
        errno = ENOMEM;
        return NULL;
    }
    size_t need = ts_align_up(size ? size : 1, OS_PAGE);
    if (align < OS_PAGE) align = OS_PAGE;
    uintptr_t p = 0;
    size_t stale = 0; /* leading bytes that may hold old data */
    uint64_t origin = 0;
    lcache_entry_t e;
    if (_ts_lcache_take(need, align, &e)) {
        atomic_fetch_add(&_ts_stats.large_cache_hits, 1);
        /* From here the whole region counts as committed and none of it as free. */
        _ts_stat_commit(e.size - e.dirty);
        atomic_fetch_sub(&_ts_stats.dirty, e.dirty);
        if (e.size >= need) {
            p = e.base;
            need = e.size;
            stale = e.zero ? 0 : need;
            origin = e.origin;
        } else {
            void *q = _ts_os_remap((void *)e.base, e.size, need, true);
            if (q) {
                _ts_stat_commit(need - e.size);
                p = (uintptr_t)q;
                stale = e.zero ? 0 : e.size; /* the grown part is fresh */
                origin = p == e.base ? e.origin : new_origin();
            } else { /* could not grow (e.g. it spans two mappings): map afresh */
                _ts_stat_decommit(e.size);
                atomic_fetch_add(&_ts_stats.unmapped, e.size);
                _ts_os_unmap((void *)e.base, e.size);
            }
        }
    }
    if (!p) {
        void *q = align > OS_PAGE ? _ts_os_map_aligned(need, align) : _ts_os_map(need);
        if (!q) {
            _ts_verbose(1, "cannot map a large block of %zu bytes", need);
            errno = ENOMEM;
            return NULL;
        }
        p = (uintptr_t)q;
        origin = new_origin();
        _ts_stat_commit(need);
        _ts_purge_schedule(); /* see _ts_segment_map_new */
    }
    bool ok = mark_large(p, need); /* false: the commit limit (_ts_segmap_prepare) */
    if (ok) {
        stripe_t *s = stripe_of(p);
        pthread_mutex_lock(lock_of(s));
        ok = table_insert(s, p, need, origin);
        pthread_mutex_unlock(lock_of(s));
    }
    if (!ok) { /* the OS refused a bigger table or map page: the region waits in the cache */
        _ts_verbose(1, "no table slot for a large block of %zu bytes", need);
        _ts_lcache_put(p, need, origin);
        errno = ENOMEM;
        return NULL;
    }
    atomic_fetch_add(&_ts_stats.large_count, 1);
    atomic_fetch_add(&_ts_stats.large_bytes, need);
    atomic_fetch_add(&_ts_stats.large_allocs, 1);
    if (zero && stale) clear_reused(p, stale, size);
    return (void *)p;
}

static TS_NORETURN void not_large(const void *p, const char *func) {
    if (_ts_lcache_freed_recently((uintptr_t)p)) _ts_double_free(func, p);
    _ts_invalid_pointer(func, p);
}

int _ts_large_find(const void *p, uintptr_t *start, size_t *size) {
    uintptr_t u = (uintptr_t)p;
    for (unsigned i = 0; i < STRIPES; i++) {
        stripe_t *s = &stripes[i];
        bool found = false;
        pthread_mutex_lock(lock_of(s));
        for (size_t j = 0; j < s->cap && !found; j++) {
            large_entry_t *e = &s->slots[j];
            if (e->ptr && u >= e->ptr && u - e->ptr < e->size) {
                *start = e->ptr;
                *size = e->size;
                found = true;
            }
        }
        pthread_mutex_unlock(lock_of(s));
        if (found) return 1;
    }
    return _ts_lcache_find(u, start, size) ? 2 : 0;
}

void _ts_large_visit(void (*fn)(uintptr_t start, size_t size, void *arg), void *arg) {
    for (unsigned i = 0; i < STRIPES; i++) {
        stripe_t *s = &stripes[i];
        pthread_mutex_lock(lock_of(s));
        for (size_t j = 0; j < s->cap; j++)
            if (s->slots[j].ptr) fn(s->slots[j].ptr, s->slots[j].size, arg);
        pthread_mutex_unlock(lock_of(s));
    }
}

void _ts_large_free(void *p, const char *func) {
    stripe_t *s = stripe_of((uintptr_t)p);
    pthread_mutex_lock(lock_of(s));
    large_entry_t *e = table_find(s, (uintptr_t)p);
    if (!e) {
        pthread_mutex_unlock(lock_of(s));
        not_large(p, func);
    }
    size_t size = e->size;
    uint64_t origin = e->origin;
    ts_heap_t *heap = e->heap;
    ts_assert(size % OS_PAGE == 0 && (uintptr_t)p % OS_PAGE == 0);
    ts_assert(atomic_load_explicit(&_ts_segmap[(uintptr_t)p >> TS_SEGMENT_SHIFT],
                                   memory_order_relaxed) == TS_MAP_LARGE);
    table_remove(s, e);
    pthread_mutex_unlock(lock_of(s));
    if (_ts_zero_free_bytes) _ts_zero_freed(p, size); /* zerofree.c */
    if (heap) { /* a heap's (heapapi.c), live: destroying it with frees running is an error */
        atomic_fetch_sub(&heap->large_count, 1);
        atomic_fetch_sub(&heap->large_bytes, size);
    }
    atomic_fetch_sub(&_ts_stats.large_count, 1);
    atomic_fetch_sub(&_ts_stats.large_bytes, size);
    _ts_lcache_put((uintptr_t)p, size, origin);
}

size_t _ts_large_usable(const void *p, const char *func) {
    stripe_t *s = stripe_of((uintptr_t)p);
    pthread_mutex_lock(lock_of(s));
    large_entry_t *e = table_find(s, (uintptr_t)p);
    size_t size = e ? e->size : 0;
    pthread_mutex_unlock(lock_of(s));
    if (!e) not_large(p, func);
    return size;
}

/* Move live block p (its entry says `old` bytes) to where the kernel finds
 * room for `need` bytes, with mremap: the kernel picks the place, so a
 * refusal changes nothing (MREMAP_FIXED onto a mapping made first, as
 * before, may leave that mapping unmapped or not when it fails, depending on
 * the kernel and the reason: see os.h). No step may fail once the pages have
 * moved, so the table slot for the new address is made sure of first: every
 * stripe keeps a spare one, and moves take turns. p's entry leaves under its
 * stripe's lock before p's range (free once the pages moved) can be entered
 * by another thread; the new range is ours alone until this returns. NULL
 * when the OS refuses or a stripe has no spare slot and cannot grow. */
static void *move_block(void *p, size_t need) {
    /* Where the segment map's pages are opened one by one, the new range's
     * page might not open once the pages have moved: the caller copies. */
    if (_ts_segmap_strict()) return NULL;
    pthread_mutex_lock(&move_lock);
    bool ready = true;
    for (unsigned i = 0; i < STRIPES && ready; i++) {
        pthread_mutex_lock(&stripe_locks[i].m);
        ready = table_spare_ready(&stripes[i]);
        pthread_mutex_unlock(&stripe_locks[i].m);
    }
    void *q = NULL;
    if (ready) {
        stripe_t *s = stripe_of((uintptr_t)p);
        pthread_mutex_lock(lock_of(s));
        large_entry_t *e = table_find(s, (uintptr_t)p);
        ts_heap_t *heap = e->heap;
        q = _ts_os_remap(p, e->size, need, true);
        if (q == p)
            e->size = need; /* room after it after all: grown in place */
        else if (q)
            table_remove(s, e);
        pthread_mutex_unlock(lock_of(s));
        if (q) (void)mark_large((uintptr_t)q, need); /* opens no page: not strict */
        if (q && q != p) {
            stripe_t *t = stripe_of((uintptr_t)q);
            pthread_mutex_lock(lock_of(t));
            table_put(t, (uintptr_t)q, need, new_origin(), heap);
            pthread_mutex_unlock(lock_of(t));
        }
    }
    pthread_mutex_unlock(&move_lock);
    return q;
}

/* Resize in place or move with mremap. NULL with errno = ENOMEM when the OS
 * refuses (p is then intact: the caller may still allocate, copy and free). */
void *_ts_large_realloc(void *p, size_t size) {
    if (size > (size_t)PTRDIFF_MAX - TS_SEGMENT_SIZE) {
        errno = ENOMEM;
        return NULL;
    }
    size_t need = ts_align_up(size, OS_PAGE);
    stripe_t *s = stripe_of((uintptr_t)p);
    pthread_mutex_lock(lock_of(s));
    large_entry_t *e = table_find(s, (uintptr_t)p);
    if (!e) {
        pthread_mutex_unlock(lock_of(s));
        not_large(p, "realloc");
    }
    size_t old = e->size;
    ts_heap_t *heap = e->heap; /* the block's: it cannot change while realloc runs */
    if (need <= old && old - need < _ts_lcache_split_min(need)) { /* fits; not worth shrinking */
        pthread_mutex_unlock(lock_of(s));
        return p;
    }
    /* In place first (a shrink always is), under the stripe lock, into
     * chunks whose map entries can be set. */
    if (need > old && !_ts_segmap_prepare((uintptr_t)p, need)) {
        pthread_mutex_unlock(lock_of(s));
        errno = ENOMEM;
        return NULL;
    }
    void *q = _ts_os_remap(p, old, need, false);
    if (q) {
        if (need > old) (void)mark_large((uintptr_t)q, need); /* the chunks it grew into */
        e->size = need;
        pthread_mutex_unlock(lock_of(s));
    } else {
        pthread_mutex_unlock(lock_of(s));
        q = move_block(p, need);
        if (!q) {
            errno = ENOMEM;
            return NULL;
        }
    }
    if (need > old)
        _ts_stat_commit(need - old);
    else
        _ts_stat_decommit(old - need);
    atomic_fetch_add(&_ts_stats.large_bytes, need - old); /* wraps correctly when smaller */
    if (heap) atomic_fetch_add(&heap->large_bytes, need - old);
    atomic_fetch_add(&_ts_stats.large_remaps, 1);
    return q;
}

/* ---- blocks of ts_heap_new's heaps (heapapi.c) --------------------------------------- */

void _ts_large_own(void *p, ts_heap_t *heap) {
    stripe_t *s = stripe_of((uintptr_t)p);
    pthread_mutex_lock(lock_of(s));
    large_entry_t *e = table_find(s, (uintptr_t)p);
    e->heap = heap;
    size_t size = e->size;
    pthread_mutex_unlock(lock_of(s));
    atomic_fetch_add(&heap->large_count, 1);
    atomic_fetch_add(&heap->large_bytes, size);
}

/* One stripe at a time; the cache (its own lock) after the stripe's. A
 * removal shifts later members of a probe run back, so slot i is looked at
 * again; a run wrapping past the end can move one to the end, not skipped. */
void _ts_large_heap_end(ts_heap_t *heap, bool free_them) {
    for (unsigned k = 0; k < STRIPES && atomic_load(&heap->large_count); k++) {
        stripe_t *s = &stripes[k];
        pthread_mutex_lock(lock_of(s));
        for (size_t i = 0; i < s->cap;) {
            large_entry_t *e = &s->slots[i];
            if (!e->ptr || e->heap != heap) {
                i++;
                continue;
            }
            atomic_fetch_sub(&heap->large_count, 1);
            atomic_fetch_sub(&heap->large_bytes, e->size);
            if (!free_them) {
                e->heap = NULL;
                i++;
                continue;
            }
            large_entry_t gone = *e, *slots = s->slots;
            table_remove(s, e);
            pthread_mutex_unlock(lock_of(s));
            atomic_fetch_sub(&_ts_stats.large_count, 1);
            atomic_fetch_sub(&_ts_stats.large_bytes, gone.size);
            _ts_lcache_put(gone.ptr, gone.size, gone.origin);
            pthread_mutex_lock(lock_of(s));
            if (s->slots != slots) i = 0; /* grown meanwhile: rehashed */
        }
        pthread_mutex_unlock(lock_of(s));
    }
}

/* Cursor: stripe * 2^32 + slot. Blocks freed meanwhile may be missed, not
 * listed twice: the caller checks each with _ts_large_owned_size. */
size_t _ts_large_heap_list(ts_heap_t *heap, size_t *cursor, void **ptrs, size_t max) {
    size_t n = 0;
    for (size_t k = *cursor >> 32; k < STRIPES && n < max; k++, *cursor = k << 32) {
        stripe_t *s = &stripes[k];
        pthread_mutex_lock(lock_of(s));
        size_t i = *cursor & 0xffffffffu;
        for (; i < s->cap && n < max; i++)
            if (s->slots[i].ptr && s->slots[i].heap == heap) ptrs[n++] = (void *)s->slots[i].ptr;
        pthread_mutex_unlock(lock_of(s));
        if (n == max) {
            *cursor = (k << 32) | i;
            break;
        }
    }
    return n;
}

size_t _ts_large_owned_size(const void *p, const ts_heap_t *heap) {
    stripe_t *s = stripe_of((uintptr_t)p);
    pthread_mutex_lock(lock_of(s));
    large_entry_t *e = table_find(s, (uintptr_t)p);
    size_t size = e && e->heap == heap ? e->size : 0;
    pthread_mutex_unlock(lock_of(s));
    return size;
}

/* ---- fork --------------------------------------------------------------------------- */

void _ts_large_atfork_prepare(void) {
    pthread_mutex_lock(&move_lock);
    for (unsigned i = 0; i < STRIPES; i++) pthread_mutex_lock(&stripe_locks[i].m);
    _ts_lcache_atfork_prepare();
}

void _ts_large_atfork_parent(void) {
    _ts_lcache_atfork_parent();
    for (unsigned i = 0; i < STRIPES; i++) pthread_mutex_unlock(&stripe_locks[i].m);
    pthread_mutex_unlock(&move_lock);
}

void _ts_large_atfork_child(void) {
    pthread_mutex_init(&move_lock, NULL);
    _ts_lcache_atfork_child();
    for (unsigned i = 0; i < STRIPES; i++) pthread_mutex_init(&stripe_locks[i].m, NULL);
}
