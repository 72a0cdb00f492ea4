/* The segment registry and the address space behind it: mapping segments
 * (from a reservation of TS_SEGMENT_RESERVE at a time), unmapping them, the
 * segment map _ts_segmap that free() consults, and every walk over all
 * segments (purge, sweep, statistics).
 *
 * Invariants:
 * - Every mapped segment is in the registry (registry lock) from the moment
 *   it is mapped until it is unmapped, whatever its state (owned, spare,
 *   cached, abandoned): the purge thread finds free pages through it.
 * - _ts_segmap is set to the page shift after the segment is formatted
 *   (segment.c) and cleared here before it is unmapped, so any nonzero
 *   entry names mapped memory.
 * - A segment is unmapped only after it left the registry (under the
 *   registry lock, which the purge thread holds while it looks at segments).
 * - A walk may read a segment's layout racily (to choose what to look at);
 *   what it changes it changes under the segment spinlock.
 * - No thread holds a segment spinlock across a fork: the prepare handler
 *   closes the segment-lock gate and waits until each lock is free
 *   (internal.h, ts_seg_lock), writing nothing in the segments.
 *
 * Lock order: registry lock, then segment spinlocks (taken one at a time),
 * then the reserve lock (a leaf).
 */
#include "core/internal.h"
#include "core/valgrind.h"

/* 32 MiB of bss, of which a process writes a page or two: page-aligned so
 * that _ts_segmap_init can map it afresh without a commit charge (a larger
 * alignment would make the bss a LOAD segment of its own, whose symbols
 * Valgrind then loses). */
#define SEGMAP_PAGE ((size_t)4096)
_Atomic uint8_t _ts_segmap[TS_SEGMAP_ENTRIES] __attribute__((aligned(SEGMAP_PAGE)));

/* Under vm.overcommit_memory=2 the map is read-only but for the 4 KiB
 * pages opened for writing (a bit each, set once the page is writable):
 * free may read any entry, and entries are set only in open pages. Opening
 * a page twice is harmless, so racing threads need no lock. */
static bool segmap_strict;
static _Atomic uint64_t segmap_open[TS_SEGMAP_ENTRIES / SEGMAP_PAGE / 64];

/* The loader maps the bss as accountable memory: the whole map would count
 * against the kernel's commit limit (Committed_AS) in every process. Mapped
 * again without a charge (os.h) before its first entry is set, it costs
 * only the pages written, as it always did in RSS. Best effort: where the
 * page size does not divide it, or the kernel refuses, it stays as loaded. */
void _ts_segmap_init(void) {
    size_t page = _ts_os_page_size();
    if ((uintptr_t)_ts_segmap % page != 0 || sizeof _ts_segmap % page != 0) return;
    bool strict = page == SEGMAP_PAGE && _ts_os_overcommit_strict();
    if (_ts_os_map_uncharged_at((void *)_ts_segmap, sizeof _ts_segmap, !strict))
        segmap_strict = strict;
    else
        _ts_verbose(1, "segment map: stays accountable (the OS refused a new mapping)");
}

bool _ts_segmap_strict(void) {
    return segmap_strict;
}

bool _ts_segmap_prepare(uintptr_t addr, size_t size) {
    if (!segmap_strict) return true;
    size_t first = (addr >> TS_SEGMENT_SHIFT) / SEGMAP_PAGE;
    size_t last = ((addr + size - 1) >> TS_SEGMENT_SHIFT) / SEGMAP_PAGE;
    for (size_t i = first; i <= last; i++) {
        uint64_t bit = (uint64_t)1 << (i % 64);
        if (atomic_load_explicit(&segmap_open[i / 64], memory_order_acquire) & bit) continue;
        if (!_ts_os_commit((char *)_ts_segmap + i * SEGMAP_PAGE, SEGMAP_PAGE)) return false;
        atomic_fetch_or_explicit(&segmap_open[i / 64], bit, memory_order_release);
    }
    return true;
}

static TS_FORK_LOCK pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static TS_STARTUP_DATA ts_segment_t *registry;

/* Address space reserved for segments not mapped yet: one aligned mapping of
 * TS_SEGMENT_RESERVE segments at a time, so a new segment costs no mmap
 * most of the time (a lone aligned segment costs an mmap and two munmaps,
 * and each munmap of a multithreaded process interrupts the other CPUs).
 * The reservation is address space only (os.h): a segment is committed
 * (mprotect) when it is handed out, so the memory the kernel counts against
 * its commit limit is the segments in use, not 64 MiB a process. Leaf lock. */
#define TS_SEGMENT_RESERVE 16
static TS_FORK_LOCK pthread_mutex_t reserve_lock = PTHREAD_MUTEX_INITIALIZER;
static TS_STARTUP_DATA uintptr_t reserve_next, reserve_end;

/* Bytes of the header that are ever touched (the rest of its 64 KiB is not). */
#define HEADER_TOUCHED ts_align_up(sizeof(ts_segment_t), 4096)

/* ---- mapping --------------------------------------------------------------- */

static ts_segment_t *segment_reserve_take(void) {
    ts_segment_t *seg = NULL;
    pthread_mutex_lock(&reserve_lock);
    if (reserve_next == reserve_end) {
#if TS_SECURE
        char *r = _ts_secure_reserve(TS_SEGMENT_RESERVE);
#else
        char *r = _ts_os_reserve_aligned(TS_SEGMENT_RESERVE * TS_SEGMENT_SIZE, TS_SEGMENT_SIZE);
#endif
        if (r) {
            reserve_next = (uintptr_t)r;
            reserve_end = (uintptr_t)r + TS_SEGMENT_RESERVE * TS_SEGMENT_SIZE;
        }
    }
    if (reserve_next != reserve_end) {
        seg = (ts_segment_t *)reserve_next;
        reserve_next += TS_SEGMENT_SIZE;
    }
    pthread_mutex_unlock(&reserve_lock);
    /* Address space too short for a whole reservation: one segment alone. */
    if (!seg) seg = _ts_os_reserve_aligned(TS_SEGMENT_SIZE, TS_SEGMENT_SIZE);
    if (seg && (!_ts_os_commit(seg, TS_SEGMENT_SIZE) ||
                !_ts_segmap_prepare((uintptr_t)seg, TS_SEGMENT_SIZE))) { /* the commit limit */
        _ts_os_unmap(seg, TS_SEGMENT_SIZE);
        seg = NULL;
    }
    return seg;
}

size_t _ts_segments_reserved(void) {
    pthread_mutex_lock(&reserve_lock);
    size_t n = (reserve_end - reserve_next) / TS_SEGMENT_SIZE;
    pthread_mutex_unlock(&reserve_lock);
    return n;
}

/* huge_first_half: ask for huge pages in the first half before the header
 * is written (afterwards its first 2 MiB would already have 4 KiB pages). */
ts_segment_t *_ts_segment_map_new(bool huge_first_half) {
    ts_segment_t *seg = segment_reserve_take();
    if (!seg) {
        _ts_verbose(1, "cannot map a segment (out of memory)");
        return NULL;
    }
    if (huge_first_half) _ts_os_huge_pages(seg, TS_HALF_SIZE, true);
    ts_assert(((uintptr_t)seg & TS_SEGMENT_MASK) == 0);
    seg->kind = TS_KIND_COUNT; /* not formatted yet; the rest is zero */
    atomic_store_explicit(&seg->purge_at_min, UINT64_MAX, memory_order_relaxed);
    _ts_os_name(seg, TS_SEGMENT_SIZE, "tsalloc");
#if TS_SECURE
    _ts_secure_segment_guard(seg);
#endif
    if (ts_vg_active()) /* free memory until handed out */
        _ts_vg_noaccess((char *)seg + TS_SEGMENT_HEADER, TS_SEGMENT_SIZE - TS_SEGMENT_HEADER);
    pthread_mutex_lock(&registry_lock);
    seg->reg_next = registry;
    if (registry) registry->reg_prev = seg;
    registry = seg;
    pthread_mutex_unlock(&registry_lock);
    atomic_fetch_add(&_ts_stats.segments, 1);
    _ts_stat_commit(HEADER_TOUCHED);
    _ts_purge_schedule(); /* started by this allocation's safe point, never by a free */
    return seg;
}

void _ts_segment_unmap(ts_segment_t *seg) {
    ts_assert(seg->used_pages == 0 && !seg->in_avail);
    pthread_mutex_lock(&registry_lock);
    ts_assert(seg->reg_prev ? seg->reg_prev->reg_next == seg : registry == seg);
    if (seg->reg_prev)
        seg->reg_prev->reg_next = seg->reg_next;
    else
        registry = seg->reg_next;
    if (seg->reg_next) seg->reg_next->reg_prev = seg->reg_prev;
    /* Under the lock: a registry walk never sees a map entry without its segment. */
    atomic_store_explicit(&_ts_segmap[(uintptr_t)seg >> TS_SEGMENT_SHIFT], TS_MAP_NONE,
                          memory_order_release);
    pthread_mutex_unlock(&registry_lock);
    size_t resident = HEADER_TOUCHED, untouched = 0;
    uint64_t dirty = atomic_load(&seg->dirty_mask);
    for (unsigned i = 0; i < TS_MAX_PAGES; i++)
        if (dirty & ((uint64_t)1 << i)) {
            resident += seg->pages[i].area;
            untouched += seg->pages[i].area - seg->pages[i].touched;
        }
    _ts_stat_decommit_pages(resident, untouched);
    atomic_fetch_sub(&_ts_stats.dirty, resident - HEADER_TOUCHED);
    atomic_fetch_sub(&_ts_stats.segments, 1);
    atomic_fetch_add(&_ts_stats.unmapped, TS_SEGMENT_SIZE);
    _ts_os_unmap(seg, TS_SEGMENT_SIZE);
}

/* ---- walks over every segment ------------------------------------------------ */

uint64_t _ts_segments_purge(uint64_t now, bool force) {
    uint64_t next = UINT64_MAX;
    pthread_mutex_lock(&registry_lock);
    for (ts_segment_t *seg = registry; seg; seg = seg->reg_next) {
        if (!atomic_load_explicit(&seg->dirty_mask, memory_order_relaxed)) continue;
        uint64_t at = atomic_load_explicit(&seg->purge_at_min, memory_order_relaxed);
        if (!force && at > now) {
            if (at < next) next = at;
            continue;
        }
        if (!ts_seg_trylock(seg)) { /* its owner is taking a page: come back soon */
            if (now + 5000000 < next) next = now + 5000000;
            continue;
        }
        uint64_t n = _ts_segment_purge_expired(seg, now, force);
        ts_seg_unlock(seg);
        if (n < next) next = n;
    }
    pthread_mutex_unlock(&registry_lock);
    return next;
}

/* The purge thread's sweep (sweep.c): pages of medium and big segments, and
 * of small ones that had a page of the 8 KiB class, with blocks large enough
 * to be worth it. Racy reads of the layout only choose which pages to offer:
 * _ts_sweep_take decides by CAS on thread_free. The lists taken from one
 * segment are purged with the registry lock released (the purge takes time:
 * 68 ms in one pass over a heap of many idle pages, holding up every thread that
 * needed a segment); the segment stays registered while the pass holds
 * blocks of it, and the last list goes back under the lock, so the walk
 * goes on from a segment still in the registry. */
TS_RACY_READER unsigned _ts_segments_sweep(const ts_sweep_set_t *set) {
    unsigned found = TS_SWEEP_NOTHING;
    ts_sweep_held_t held[TS_MAX_PAGES];
    pthread_mutex_lock(&registry_lock);
    for (ts_segment_t *seg = registry; seg; seg = seg->reg_next) {
        if (seg->kind == TS_KIND_SMALL
                ? !atomic_load_explicit(&seg->sweepable, memory_order_relaxed)
                : seg->kind != TS_KIND_MEDIUM && seg->kind != TS_KIND_BIG)
            continue;
        unsigned count = seg->page_count < TS_MAX_PAGES ? seg->page_count : TS_MAX_PAGES, n = 0;
        for (unsigned i = 0; i < count; i++) {
            ts_page_t *page = &seg->pages[i];
            if (ts_page_state(page) != TS_PAGE_IN_USE || page->block_size < TS_SWEEP_MIN_BLOCK)
                continue;
            found |= _ts_sweep_take(page, set, &held[n]);
            if (held[n].page) n++;
        }
        if (!n) continue;
        pthread_mutex_unlock(&registry_lock);
        for (unsigned k = 0; k < n; k++) {
            _ts_sweep_purge(&held[k]);
            if (held[k].refused) found |= TS_SWEEP_REFUSED;
            if (k + 1 < n) _ts_sweep_give_back(&held[k]);
        }
        pthread_mutex_lock(&registry_lock);
        _ts_sweep_give_back(&held[n - 1]);
    }
    pthread_mutex_unlock(&registry_lock);
    return found;
}

TS_RACY_READER unsigned _ts_segments_rescue(ts_heap_t *heap) {
    unsigned rescued = 0;
    ts_qheld_t held[TS_MAX_PAGES];
    pthread_mutex_lock(&registry_lock);
    for (ts_segment_t *seg = registry; seg; seg = seg->reg_next) {
        if (atomic_load_explicit(&seg->owner, memory_order_relaxed) != heap ||
            (seg->kind != TS_KIND_SMALL && seg->kind != TS_KIND_MEDIUM))
            continue;
        unsigned count = seg->page_count < TS_MAX_PAGES ? seg->page_count : TS_MAX_PAGES, n = 0;
        for (unsigned i = seg->first_page; i < count; i++)
            if (_ts_rescue_queue_take(&seg->pages[i], heap, &held[n])) n++;
        if (!n) continue;
        /* A page taken keeps the segment mapped and registered until it is
         * published (its owner may retire it from then on): the last one is
         * published under the lock, before the walk goes on (sweep.c too). */
        pthread_mutex_unlock(&registry_lock);
        for (unsigned k = 0; k < n; k++) {
            _ts_rescue_queue_purge(&held[k]);
            if (k + 1 < n) rescued += _ts_rescue_queue_publish(&held[k]);
        }
        pthread_mutex_lock(&registry_lock);
        rescued += _ts_rescue_queue_publish(&held[n - 1]);
    }
    pthread_mutex_unlock(&registry_lock);
    return rescued;
}

/* Before the sweep purges inside a page in use: its half no longer asks for

 * (racy reads: a snapshot). Blocks waiting in a freeing thread's batch count
 * as live, and so do the free blocks of other threads' head pages (only the
 * owner may walk a head's list: see internal.h on `used`). */
TS_RACY_READER void _ts_segments_live(uint64_t live[TS_CLASS_COUNT]) {
    uintptr_t self = (uintptr_t)_ts_tls_heap;
    pthread_mutex_lock(&registry_lock);
    for (ts_segment_t *seg = registry; seg; seg = seg->reg_next) {
        for (unsigned i = seg->first_page; i < seg->page_count; i++) {
            const ts_page_t *page = &seg->pages[i];
            if (ts_page_state(page) != TS_PAGE_IN_USE) continue;
            /* Another thread's page may become a head between any two reads,
             * and a head's used is a bias (internal.h): at most carved. */
            uint32_t carved = (uint32_t)atomic_load_explicit(&page->carved, memory_order_relaxed);
            uint32_t used = ts_page_owner(page) == (self | TS_OWNER_HEAD)
                                ? _ts_page_live(page)
                                : *(const volatile uint32_t *)&page->used;
            if (used > carved) used = carved;
            uint32_t pending =
                ts_tf_count(atomic_load_explicit(&page->thread_free, memory_order_relaxed));
            if (used > pending && page->cls < TS_CLASS_COUNT) live[page->cls] += used - pending;
        }
    }
    pthread_mutex_unlock(&registry_lock);
}

void _ts_segments_visit(void (*fn)(ts_segment_t *seg, void *arg), void *arg) {
    pthread_mutex_lock(&registry_lock);
    for (ts_segment_t *seg = registry; seg; seg = seg->reg_next) fn(seg, arg);
    fn(NULL, arg);
    pthread_mutex_unlock(&registry_lock);
}

/* For statistics: segments by state (registry walk). */
void _ts_segments_count(size_t *total, size_t *owned) {
    size_t t = 0, o = 0;
    pthread_mutex_lock(&registry_lock);
    for (ts_segment_t *seg = registry; seg; seg = seg->reg_next) {
        t++;
        if (atomic_load_explicit(&seg->owner, memory_order_relaxed)) o++;
    }
    pthread_mutex_unlock(&registry_lock);
    *total = t;
    *owned = o;
}

/* ---- fork (see _ts_segments_atfork_prepare) ------------------------------ */

/* The segment-lock gate (internal.h): closed from a fork's prepare handler
 * to its end, in the parent and in the child. */
TS_FORK_LOCK _Atomic int _ts_seg_gate;

/* Wait until the lock looks free and the gate open (reads only). */
void _ts_seg_lock_wait(ts_segment_t *seg) {
    unsigned spins = 0;
    while (atomic_load_explicit(&seg->lock.held, memory_order_relaxed) ||
           atomic_load_explicit(&_ts_seg_gate, memory_order_relaxed))
        _ts_spin_turn(&spins);
}

/* Under the registry lock (no segment joins or leaves): close the gate, then
 * wait for each segment's lock to be free. Writes nothing in the segments. */
void _ts_registry_atfork_prepare(void) {
    pthread_mutex_lock(&registry_lock);
    atomic_store_explicit(&_ts_seg_gate, 1, memory_order_seq_cst);
    for (ts_segment_t *seg = registry; seg; seg = seg->reg_next) {
        unsigned spins = 0;
        while (atomic_load_explicit(&seg->lock.held, memory_order_seq_cst)) _ts_spin_turn(&spins);
    }
    pthread_mutex_lock(&reserve_lock);
}

void _ts_registry_atfork_parent(void) {
    pthread_mutex_unlock(&reserve_lock);
    atomic_store_explicit(&_ts_seg_gate, 0, memory_order_release);
    pthread_mutex_unlock(&registry_lock);
}

/* A lock held here was taken after the gate closed, by a thread that would
 * have let it go untouched: free it. Reading the others costs no fault. */
void _ts_registry_atfork_child(void) {
    for (ts_segment_t *seg = registry; seg; seg = seg->reg_next)
        if (atomic_load_explicit(&seg->lock.held, memory_order_relaxed)) ts_spin_init(&seg->lock);
    atomic_store_explicit(&_ts_seg_gate, 0, memory_order_relaxed);
    pthread_mutex_init(&registry_lock, NULL);
    pthread_mutex_init(&reserve_lock, NULL);
}
