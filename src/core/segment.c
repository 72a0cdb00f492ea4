/* Segments: 4 MiB regions at 4 MiB boundaries, each divided into pages of one
 * kind, and the process-wide lists that hold them.
 *
 * Where a segment can be (each has its own lock, taken one at a time):
 * - owned by a heap: in heap->segments, and in heap->avail[kind] while it has
 *   a free page; or kept as heap->spare (wholly free, not in those lists);
 * - abandoned (its thread exited with blocks still live): abandoned list;
 * - cached (wholly free, no owner): cache list, at most TSALLOC_SEGMENT_CACHE;
 * and always in the registry (registry lock) until it is unmapped, which is how
 * the purge thread finds the free pages to give back.
 *
 * Invariants:
 * - Only the owner heap takes or returns pages of a segment; the purge thread
 *   only turns FREE_DIRTY pages into FREE_CLEAN. Both do so under the segment
 *   spinlock, which nobody holds while taking another lock.
 * - _ts_segmap is set to the page shift after the segment is formatted and
 *   cleared before it is unmapped, so any nonzero entry names mapped memory.
 * - A segment is unmapped only after it left the registry (under the registry
 *   lock, which the purge thread holds while it looks at segments).
 */
#include "core/internal.h"

_Atomic uint8_t _ts_segmap[TS_SEGMAP_ENTRIES];

/* Segments are asked for transparent huge pages by 2 MiB halves (see
 * "transparent huge pages" below). */
#define TS_HALF_SIZE (TS_SEGMENT_SIZE / 2)
static unsigned page_half(const ts_segment_t *seg, unsigned i) {
    return ((size_t)i << seg->page_shift) >= TS_HALF_SIZE;
}

static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static ts_segment_t *registry;

/* Address space reserved for segments not mapped yet: one aligned mapping of
 * TS_SEGMENT_RESERVE segments at a time, so a new segment costs no system
 * call most of the time (a lone aligned segment costs an mmap and two munmaps,
 * and each munmap of a multithreaded process interrupts the other CPUs).
 * Untouched reserved memory costs address space only. Leaf lock. */
#define TS_SEGMENT_RESERVE 16
static pthread_mutex_t reserve_lock = PTHREAD_MUTEX_INITIALIZER;
static uintptr_t reserve_next, reserve_end;

static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;
static ts_segment_t *cache_list;
static size_t cache_count;

/* One reclaim pass at a time: a pass takes the whole abandoned list, so
 * malloc_trim running beside the helper's pass would find it empty and give
 * nothing back. Taken before abandoned_lock. */
static pthread_mutex_t reclaim_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t abandoned_lock = PTHREAD_MUTEX_INITIALIZER;
static ts_segment_t *abandoned_list;
static _Atomic size_t abandoned_count;
/* When the next reclaim pass is due (monotonic ns; 0: none asked): the first
 * remote free into an abandoned segment after a pass sets it a purge delay
 * ahead. A pass per such free woke the helper thousands of times a second
 * while one thread freed a dead thread's blocks. */
static _Atomic uint64_t abandoned_due;

/* Bytes of the header that are ever touched (the rest of its 64 KiB is not). */
#define HEADER_TOUCHED ts_align_up(sizeof(ts_segment_t), 4096)

/* ---- mapping --------------------------------------------------------------- */

static ts_segment_t *segment_reserve_take(void) {
    ts_segment_t *seg = NULL;
    pthread_mutex_lock(&reserve_lock);
    if (reserve_next == reserve_end) {
        char *r = _ts_os_map_aligned(TS_SEGMENT_RESERVE * TS_SEGMENT_SIZE, TS_SEGMENT_SIZE);
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
    return seg ? seg : _ts_os_map_aligned(TS_SEGMENT_SIZE, TS_SEGMENT_SIZE);
}

size_t _ts_segments_reserved(void) {
    pthread_mutex_lock(&reserve_lock);
    size_t n = (reserve_end - reserve_next) / TS_SEGMENT_SIZE;
    pthread_mutex_unlock(&reserve_lock);
    return n;
}

/* huge_first_half: ask for huge pages in the first half before the header
 * is written (afterwards its first 2 MiB would already have 4 KiB pages). */
static ts_segment_t *segment_map_new(bool huge_first_half) {
    ts_segment_t *seg = segment_reserve_take();
    if (!seg) {
        _ts_verbose(1, "cannot map a segment (out of memory)");
        return NULL;
    }
    if (huge_first_half) _ts_os_huge_pages(seg, TS_HALF_SIZE, true);
    seg->kind = TS_KIND_COUNT; /* not formatted yet; the rest is zero */
    atomic_store_explicit(&seg->purge_at_min, UINT64_MAX, memory_order_relaxed);
    _ts_os_name(seg, TS_SEGMENT_SIZE, "tsalloc");
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

static void segment_unmap(ts_segment_t *seg) {
    pthread_mutex_lock(&registry_lock);
    if (seg->reg_prev)
        seg->reg_prev->reg_next = seg->reg_next;
    else
        registry = seg->reg_next;
    if (seg->reg_next) seg->reg_next->reg_prev = seg->reg_prev;
    pthread_mutex_unlock(&registry_lock);
    atomic_store_explicit(&_ts_segmap[(uintptr_t)seg >> TS_SEGMENT_SHIFT], TS_MAP_NONE,
                          memory_order_release);
    size_t resident = HEADER_TOUCHED;
    uint64_t dirty = atomic_load(&seg->dirty_mask);
    for (unsigned i = 0; i < TS_MAX_PAGES; i++)
        if (dirty & ((uint64_t)1 << i)) resident += seg->pages[i].area;
    _ts_stat_decommit(resident);
    atomic_fetch_sub(&_ts_stats.dirty, resident - HEADER_TOUCHED);
    atomic_fetch_sub(&_ts_stats.segments, 1);
    atomic_fetch_add(&_ts_stats.unmapped, TS_SEGMENT_SIZE);
    _ts_os_unmap(seg, TS_SEGMENT_SIZE);
}

/* ---- transparent huge pages --------------------------------------------------- */

/* A heap that already holds TS_HUGE_HEAP_MIN resident in small and medium
 * pages asks for huge pages in each 2 MiB half of a segment it enters while
 * the half is still untouched: the first half of a segment it maps, the
 * second half when it takes the first page there. One fault then maps 2 MiB
 * instead of 512 faults of 4 KiB (measured under KVM: 0.4 against 2.2 us per
 * 4 KiB). Heaps below that (small programs, the many light threads of a
 * server) keep 4 KiB pages: a huge page would multiply their RSS.
 * The whole half becomes resident at its first touch, so its free pages are
 * marked dirty: those the heap has not taken within the purge delay are
 * purged. A purge in a huge half first withdraws the request (else
 * khugepaged may fill the holes back in), and that half is not asked again. */
#define TS_HUGE_HEAP_MIN ((size_t)2 << 20)

static bool huge_wanted(ts_heap_t *heap, enum ts_kind kind) {
    if (kind == TS_KIND_BIG || !_ts_option(TS_OPT_HUGE_PAGES) || !_ts_purge_delay_ns())
        return false;
    size_t resident = 0; /* the heap's own pages: the owner reads them without locks */
    for (ts_segment_t *seg = heap->segments; seg; seg = seg->next) {
        if (seg->kind == TS_KIND_BIG) continue;
        for (unsigned i = seg->first_page; i < seg->page_count; i++) {
            const ts_page_t *page = &seg->pages[i];
            unsigned state = ts_page_state(page);
            if (state == TS_PAGE_IN_USE)
                resident += page->start - page->base + (size_t)page->capacity * page->block_size;
            else if (state == TS_PAGE_FREE_DIRTY)
                resident += page->area;
            if (resident >= TS_HUGE_HEAP_MIN) return true;
        }
    }
    return false;
}

/* The free pages in `bits` are resident: their purge is due at `at` (the
 * earliest of theirs). Segment lock held. */
static void dirty_due(ts_segment_t *seg, uint64_t bits, uint64_t at) {
    atomic_fetch_or(&seg->dirty_mask, bits);
    if (bits && at < atomic_load_explicit(&seg->purge_at_min, memory_order_relaxed))
        atomic_store_explicit(&seg->purge_at_min, at, memory_order_relaxed);
}

/* The free clean pages of a half that was just asked for huge pages will be
 * resident after its first touch: make them dirty, and count them before the
 * lock goes (a purge may subtract them as soon as it can take the lock).
 * Segment lock held; returns whether the caller must call
 * _ts_purge_schedule once it has released it (their deadlines need watching;
 * that also asks for the helper should the commit have crossed 8 MiB). */
static bool huge_half_taken(ts_segment_t *seg, unsigned half) {
    uint64_t at = _ts_os_now_ns() + _ts_purge_delay_ns(), made = 0;
    size_t bytes = 0;
    for (unsigned i = seg->first_page; i < seg->page_count; i++) {
        ts_page_t *page = &seg->pages[i];
        if (page_half(seg, i) != half || ts_page_state(page) != TS_PAGE_FREE_CLEAN) continue;
        ts_page_set_state(page, TS_PAGE_FREE_DIRTY);
        page->purge_at = at;
        page->purge_refusals = 0;
        made |= (uint64_t)1 << i;
        bytes += page->area;
    }
    dirty_due(seg, made, at);
    seg->huge_halves |= (uint8_t)(1u << half);
    atomic_fetch_add(&_ts_stats.huge_halves, 1);
    if (!bytes) return false;
    atomic_fetch_add(&_ts_stats.dirty, bytes);
    (void)_ts_stat_commit_locked(bytes); /* the caller's schedule covers the helper */
    return true;
}

/* True when no page of the second half was touched since it was last
 * purged, and it was never split: page i (free, clean) is about to be. */
static bool second_half_fresh(const ts_segment_t *seg, unsigned i) {
    if (page_half(seg, i) != 1 || ((seg->huge_halves | seg->huge_split) & 2)) return false;
    for (unsigned j = seg->first_page; j < seg->page_count; j++)
        if (page_half(seg, j) == 1 && ts_page_state(&seg->pages[j]) != TS_PAGE_FREE_CLEAN)
            return false;
    return true;
}

/* ---- purging pages (segment lock held) ------------------------------------- */

/* Before a purge inside the halves in `halves` (bit h: half h): withdraw
 * their huge-page request, else khugepaged may fill the purged holes back
 * in; such a half is not asked again. Segment lock held. */
static void huge_halves_split(ts_segment_t *seg, unsigned halves) {
    halves &= seg->huge_halves;
    for (unsigned h = 0; h < 2; h++) {
        if (!(halves & (1u << h))) continue;
        _ts_os_huge_pages((char *)seg + h * TS_HALF_SIZE, TS_HALF_SIZE, false);
        atomic_fetch_add(&_ts_stats.huge_splits, 1);
    }
    seg->huge_halves &= (uint8_t)~halves;
    seg->huge_split |= (uint8_t)halves;
}

/* Give back the pages in `mask` (free and dirty), one call per run of
 * neighbouring pages; returns the pages whose purge the OS refused (locked
 * memory, or the test hook). Those stay dirty and counted as resident, their
 * purge due again after _ts_refused_retry_ns. */
static uint64_t purge_pages(ts_segment_t *seg, uint64_t mask, uint64_t now) {
    unsigned halves = 0;
    for (uint64_t m = mask; m; m &= m - 1)
        halves |= 1u << page_half(seg, (unsigned)__builtin_ctzll(m));
    huge_halves_split(seg, halves);
    size_t total = 0;
    uint64_t refused = 0;
    while (mask) {
        unsigned first = (unsigned)__builtin_ctzll(mask), last = first;
        while (last + 1 < TS_MAX_PAGES && (mask & ((uint64_t)1 << (last + 1)))) last++;
        ts_page_t *a = &seg->pages[first], *b = &seg->pages[last];
        size_t len = b->base + b->area - a->base;
        uint64_t run = (last == 63 ? ~(uint64_t)0 : (((uint64_t)1 << (last + 1)) - 1)) &
                       ~(((uint64_t)1 << first) - 1);
        mask &= ~run;
        /* Refused: page by page, so that one locked range keeps its pages
         * only (madvise stops at the first; the rest of the run stayed). */
        bool whole = _ts_os_purge((void *)a->base, len);
        for (unsigned i = first; i <= last; i++) {
            ts_page_t *page = &seg->pages[i];
            if (!whole && (first == last || !_ts_os_purge((void *)page->base, page->area))) {
                if (page->purge_refusals < TS_REFUSED_RETRY_MAX) page->purge_refusals++;
                page->purge_at = now + _ts_refused_retry_ns(page->purge_refusals);
                refused |= (uint64_t)1 << i;
                continue;
            }
            ts_page_set_state(page, TS_PAGE_FREE_CLEAN);
            page->touched = 0;
            page->purge_refusals = 0;
            total += page->area;
        }
    }
    _ts_stat_decommit(total);
    atomic_fetch_sub(&_ts_stats.dirty, total);
    atomic_fetch_add(&_ts_stats.purged, total);
    return refused;
}

bool _ts_segment_purge_in_use(ts_page_t *page) {
    ts_segment_t *seg = ts_segment_of(page);
    ts_spin_lock(&seg->lock);
    huge_halves_split(seg, 1u << page_half(seg, page->index));
    bool purged = _ts_os_purge((void *)page->base, page->area);
    if (purged) page->touched = 0;
    ts_spin_unlock(&seg->lock);
    if (purged) { /* in use, yet not resident: _ts_segment_page_free frees it clean */
        _ts_stat_decommit(page->area);
        atomic_fetch_add(&_ts_stats.purged, page->area);
    }
    return purged;
}

/* Purge the dirty pages whose delay has passed; returns the next deadline. */
static uint64_t purge_expired(ts_segment_t *seg, uint64_t now, bool force) {
    uint64_t dirty = atomic_load_explicit(&seg->dirty_mask, memory_order_relaxed);
    uint64_t expired = 0, next = UINT64_MAX;
    for (uint64_t m = dirty; m; m &= m - 1) {
        unsigned i = (unsigned)__builtin_ctzll(m);
        uint64_t at = seg->pages[i].purge_at;
        if (force || at <= now)
            expired |= (uint64_t)1 << i;
        else if (at < next)
            next = at;
    }
    if (expired) {
        uint64_t refused = purge_pages(seg, expired, now);
        atomic_fetch_and(&seg->dirty_mask, ~(expired & ~refused));
        for (uint64_t m = refused; m; m &= m - 1) {
            uint64_t at = seg->pages[__builtin_ctzll(m)].purge_at;
            if (at < next) next = at;
        }
    }
    atomic_store_explicit(&seg->purge_at_min, next, memory_order_relaxed);
    return next;
}

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
        if (!ts_spin_trylock(&seg->lock)) { /* its owner is taking a page: come back soon */
            if (now + 5000000 < next) next = now + 5000000;
            continue;
        }
        uint64_t n = purge_expired(seg, now, force);
        ts_spin_unlock(&seg->lock);
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

/* Before the sweep purges inside a page in use: its half no longer asks for
 * huge pages (see purge_pages). */
void _ts_segment_sweep_prepare(ts_page_t *page) {
    ts_segment_t *seg = ts_segment_of(page);
    ts_spin_lock(&seg->lock);
    huge_halves_split(seg, 1u << page_half(seg, page->index));
    ts_spin_unlock(&seg->lock);
}

/* ---- formatting ----------------------------------------------------------------- */

/* Lay out a wholly free segment for pages of `kind` (owner only). */
static void segment_format(ts_segment_t *seg, enum ts_kind kind) {
    if (seg->kind == kind) return;
    static const uint8_t shifts[TS_KIND_COUNT] = {TS_SHIFT_SMALL, TS_SHIFT_MEDIUM, TS_SHIFT_BIG};
    unsigned shift = shifts[kind];
    unsigned count = (unsigned)(TS_SEGMENT_SIZE >> shift);
    unsigned first = kind == TS_KIND_SMALL ? 1 : 0; /* a small page 0 is the header */
    uint64_t now = _ts_os_now_ns();
    ts_spin_lock(&seg->lock);
    /* The old layout's resident pages go back now. Those the OS refused to
     * purge (locked memory) stay resident: the new pages over them start
     * dirty, as those were (before, they counted as given back and stayed
     * resident for as long as the segment was in use). */
    uint64_t dirty = atomic_load_explicit(&seg->dirty_mask, memory_order_relaxed);
    uint64_t refused = dirty ? purge_pages(seg, dirty, now) : 0;
    uintptr_t kept_lo[TS_MAX_PAGES], kept_hi[TS_MAX_PAGES];
    unsigned kept = 0;
    size_t kept_bytes = 0;
    for (uint64_t m = refused; m; m &= m - 1) {
        const ts_page_t *page = &seg->pages[__builtin_ctzll(m)];
        kept_lo[kept] = page->base;
        kept_hi[kept++] = page->base + page->area;
        kept_bytes += page->area;
    }
    seg->kind = (uint8_t)kind;
    atomic_store_explicit(&seg->sweepable, 0, memory_order_relaxed);
    seg->page_shift = (uint8_t)shift;
    seg->first_page = (uint8_t)first;
    seg->page_count = (uint8_t)count;
    seg->free_mask = 0;
    for (unsigned i = 0; i < TS_MAX_PAGES; i++) {
        ts_page_t *page = &seg->pages[i];
        atomic_store_explicit(&page->owner, 0, memory_order_relaxed);
        page->index = (uint8_t)i;
        if (i < first || i >= count) {
            ts_page_set_state(page, TS_PAGE_HEADER);
            page->base = page->start = 0;
            page->area = 0;
            atomic_store_explicit(&page->carved, 0, memory_order_relaxed);
            continue;
        }
        size_t offset = (size_t)i << shift;
        size_t skip = offset < TS_SEGMENT_HEADER ? TS_SEGMENT_HEADER - offset : 0;
        page->base = page->start = (uintptr_t)seg + offset + skip;
        page->area = (uint32_t)(((size_t)1 << shift) - skip);
        ts_page_set_state(page, TS_PAGE_FREE_CLEAN);
        atomic_store_explicit(&page->carved, 0, memory_order_relaxed);
        seg->free_mask |= (uint64_t)1 << i;
    }
    uint64_t made = 0;
    size_t made_bytes = 0;
    for (unsigned i = first; i < count && kept; i++) {
        ts_page_t *page = &seg->pages[i];
        for (unsigned k = 0; k < kept; k++) {
            if (page->base >= kept_hi[k] || kept_lo[k] >= page->base + page->area) continue;
            ts_page_set_state(page, TS_PAGE_FREE_DIRTY);
            page->purge_at = now + _ts_look_period_ns();
            page->purge_refusals = 1;
            made |= (uint64_t)1 << i;
            made_bytes += page->area;
            break;
        }
    }
    atomic_store_explicit(&seg->dirty_mask, 0, memory_order_relaxed); /* the old layout's */
    atomic_store_explicit(&seg->purge_at_min, UINT64_MAX, memory_order_relaxed);
    dirty_due(seg, made, now + _ts_look_period_ns());
    /* The new pages cover the old ones kept, and a little more. */
    atomic_fetch_add(&_ts_stats.dirty, made_bytes - kept_bytes);
    (void)_ts_stat_commit_locked(made_bytes - kept_bytes);
    ts_spin_unlock(&seg->lock);
    if (made) _ts_purge_schedule_later();
    atomic_store_explicit(&_ts_segmap[(uintptr_t)seg >> TS_SEGMENT_SHIFT], (uint8_t)shift,
                          memory_order_release);
}

/* ---- a heap's segment lists (owner only) ---------------------------------------- */

static void heap_seg_add(ts_heap_t *heap, ts_segment_t *seg) {
    atomic_store_explicit(&seg->owner, heap, memory_order_release);
    seg->prev = NULL;
    seg->next = heap->segments;
    if (heap->segments) heap->segments->prev = seg;
    heap->segments = seg;
}

static void heap_seg_remove(ts_heap_t *heap, ts_segment_t *seg) {
    if (seg->prev)
        seg->prev->next = seg->next;
    else
        heap->segments = seg->next;
    if (seg->next) seg->next->prev = seg->prev;
    seg->next = seg->prev = NULL;
}

static void avail_add(ts_heap_t *heap, ts_segment_t *seg) {
    if (seg->in_avail) return;
    ts_segment_t **head = &heap->avail[seg->kind];
    seg->avail_prev = NULL;
    seg->avail_next = *head;
    if (*head) (*head)->avail_prev = seg;
    *head = seg;
    seg->in_avail = 1;
}

static void avail_remove(ts_heap_t *heap, ts_segment_t *seg) {
    if (!seg->in_avail) return;
    if (seg->avail_prev)
        seg->avail_prev->avail_next = seg->avail_next;
    else
        heap->avail[seg->kind] = seg->avail_next;
    if (seg->avail_next) seg->avail_next->avail_prev = seg->avail_prev;
    seg->avail_next = seg->avail_prev = NULL;
    seg->in_avail = 0;
}

/* ---- the cache of free segments ------------------------------------------------------ */

static ts_segment_t *cache_pop(enum ts_kind kind) {
    pthread_mutex_lock(&cache_lock);
    ts_segment_t *seg = cache_list;
    for (ts_segment_t *s = cache_list; s; s = s->next)
        if (s->kind == kind) {
            seg = s;
            break;
        }
    if (seg) {
        if (seg->prev)
            seg->prev->next = seg->next;
        else
            cache_list = seg->next;
        if (seg->next) seg->next->prev = seg->prev;
        seg->next = seg->prev = NULL;
        seg->cached = 0;
        cache_count--;
        atomic_fetch_sub(&_ts_stats.segments_cached, 1);
    }
    pthread_mutex_unlock(&cache_lock);
    return seg;
}

void _ts_segment_release(ts_segment_t *seg) {
    atomic_store_explicit(&seg->owner, NULL, memory_order_release);
    size_t limit = (size_t)_ts_option(TS_OPT_SEGMENT_CACHE);
    pthread_mutex_lock(&cache_lock);
    if (cache_count < limit) {
        seg->prev = NULL;
        seg->next = cache_list;
        if (cache_list) cache_list->prev = seg;
        cache_list = seg;
        seg->cached = 1;
        seg->cached_at = _ts_os_now_ns();
        cache_count++;
        pthread_mutex_unlock(&cache_lock);
        atomic_fetch_add(&_ts_stats.segments_cached, 1);
        return;
    }
    pthread_mutex_unlock(&cache_lock);
    segment_unmap(seg);
}

/* Unmap every cached segment (malloc_trim). Returns the bytes unmapped. */
size_t _ts_segment_cache_trim(void) {
    pthread_mutex_lock(&cache_lock);
    ts_segment_t *list = cache_list;
    cache_list = NULL;
    atomic_fetch_sub(&_ts_stats.segments_cached, cache_count);
    cache_count = 0;
    pthread_mutex_unlock(&cache_lock);
    size_t n = 0;
    while (list) {
        ts_segment_t *next = list->next;
        segment_unmap(list);
        n += TS_SEGMENT_SIZE;
        list = next;
    }
    return n;
}

/* ---- abandoned segments ---------------------------------------------------------------- */

void _ts_segment_abandon(ts_segment_t *seg) {
    atomic_store_explicit(&seg->owner, NULL, memory_order_release);
    pthread_mutex_lock(&abandoned_lock);
    seg->prev = NULL;
    seg->next = abandoned_list;
    if (abandoned_list) abandoned_list->prev = seg;
    abandoned_list = seg;
    atomic_fetch_add(&abandoned_count, 1);
    pthread_mutex_unlock(&abandoned_lock);
    atomic_fetch_add(&_ts_stats.segments_abandoned, 1);
    /* A free that found one of its pages detached (owner 0) before the segment
     * was on this list may have had its reclaim pass already: ask for one more. */
    _ts_abandoned_note_free();
}

static ts_segment_t *abandoned_pop(void) {
    if (!atomic_load_explicit(&abandoned_count, memory_order_relaxed)) return NULL;
    pthread_mutex_lock(&abandoned_lock);
    ts_segment_t *seg = abandoned_list;
    if (seg) {
        abandoned_list = seg->next;
        if (abandoned_list) abandoned_list->prev = NULL;
        seg->next = NULL;
        atomic_fetch_sub(&abandoned_count, 1);
        atomic_fetch_sub(&_ts_stats.segments_abandoned, 1);
    }
    pthread_mutex_unlock(&abandoned_lock);
    return seg;
}

void _ts_abandoned_note_free(void) {
    /* The caller's push, then this load; a pass clears the request, then
     * reads the pages: with a fence on each side, either this load sees the
     * request cleared (and asks again) or the pass sees the push. */
    atomic_thread_fence(memory_order_seq_cst);
    if (atomic_load_explicit(&abandoned_due, memory_order_relaxed)) return; /* already asked */
    uint64_t none = 0, due = _ts_os_now_ns() + _ts_purge_delay_ns();
    if (atomic_compare_exchange_strong(&abandoned_due, &none, due)) _ts_purge_schedule();
}

/* The purge delay changed: a pending request is due no later than the new
 * delay from now. */
void _ts_abandoned_delay_changed(uint64_t now) {
    uint64_t due = atomic_load(&abandoned_due), sooner = now + _ts_purge_delay_ns();
    while (due && due > sooner && !atomic_compare_exchange_weak(&abandoned_due, &due, sooner)) {
    }
}

/* Reset a page whose blocks have all come back, and return it to its segment
 * (no owner heap involved: abandoned segments only). */
static void page_reclaim(ts_segment_t *seg, ts_page_t *page) {
    atomic_store_explicit(&page->thread_free, 0, memory_order_relaxed);
    page->free = NULL;
    page->used = 0;
    atomic_store_explicit(&page->owner, 0, memory_order_relaxed);
    (void)seg;
    _ts_segment_page_free(NULL, page);
    atomic_fetch_add(&_ts_stats.reclaimed_pages, 1);
}

/* Give back the pages of dead threads whose blocks were all freed since,
 * once a pass is due (or at once if forced). Returns when the next is due. */
uint64_t _ts_abandoned_reclaim(uint64_t now, bool force) {
    uint64_t due = atomic_load(&abandoned_due);
    if (!force) {
        if (!due) return UINT64_MAX;
        if (now < due || pthread_mutex_trylock(&reclaim_lock)) return due; /* or a pass runs */
        if (!atomic_compare_exchange_strong(&abandoned_due, &due, 0)) {
            pthread_mutex_unlock(&reclaim_lock);
            return due; /* a forced pass took it; this is a newer request */
        }
    } else {
        pthread_mutex_lock(&reclaim_lock); /* after a running pass, its own */
        atomic_store(&abandoned_due, 0);
    }
    atomic_thread_fence(memory_order_seq_cst); /* see _ts_abandoned_note_free */
    pthread_mutex_lock(&abandoned_lock);
    ts_segment_t *list = abandoned_list;
    abandoned_list = NULL;
    size_t n = atomic_exchange(&abandoned_count, 0);
    pthread_mutex_unlock(&abandoned_lock);
    atomic_fetch_sub(&_ts_stats.segments_abandoned, n);
    ts_segment_t *keep = NULL, *keep_tail = NULL;
    size_t kept = 0;
    while (list) {
        ts_segment_t *seg = list;
        list = seg->next;
        for (unsigned i = seg->first_page; i < seg->page_count; i++) {
            ts_page_t *page = &seg->pages[i];
            if (ts_page_state(page) != TS_PAGE_IN_USE) continue;
            uint64_t w = atomic_load_explicit(&page->thread_free, memory_order_acquire);
            if (ts_tf_count(w) == page->used) page_reclaim(seg, page);
        }
        if (seg->used_pages == 0) {
            _ts_segment_release(seg);
            continue;
        }
        seg->prev = keep_tail;
        seg->next = NULL;
        if (keep_tail)
            keep_tail->next = seg;
        else
            keep = seg;
        keep_tail = seg;
        kept++;
    }
    if (keep) {
        pthread_mutex_lock(&abandoned_lock);
        keep_tail->next = abandoned_list;
        if (abandoned_list) abandoned_list->prev = keep_tail;
        abandoned_list = keep;
        atomic_fetch_add(&abandoned_count, kept);
        pthread_mutex_unlock(&abandoned_lock);
        atomic_fetch_add(&_ts_stats.segments_abandoned, kept);
    }
    pthread_mutex_unlock(&reclaim_lock);
    uint64_t again = atomic_load(&abandoned_due); /* a free during the pass asked again */
    return again ? again : UINT64_MAX;
}

/* Take over a segment whose thread exited (the segment is ours alone: it was
 * popped from the abandoned list). Its live pages join this heap's queues. */
static void heap_adopt(ts_heap_t *heap, ts_segment_t *seg) {
    heap_seg_add(heap, seg);
    uint64_t empty = 0;
    for (unsigned i = seg->first_page; i < seg->page_count; i++) {
        ts_page_t *page = &seg->pages[i];
        if (ts_page_state(page) != TS_PAGE_IN_USE) continue;
        page->is_head = 0;
        page->in_full = 0;
        page->next = page->prev = NULL;
        atomic_fetch_and_explicit(&page->thread_free, ~TS_TF_DETACHED, memory_order_relaxed);
        atomic_store_explicit(&page->owner, (uintptr_t)heap, memory_order_release);
        /* From the owner store on, a sweep pass may take the list. */
        if (ts_page_take_all_back(page))
            empty |= (uint64_t)1 << i;
        else
            _ts_queue_push_back(heap, page);
    }
    if (seg->free_mask) avail_add(heap, seg);
    heap->adopted++;
    atomic_fetch_add(&_ts_stats.adopted, 1);
    /* Pages whose blocks all came back: return them (the last may release the
     * whole segment, so nothing of `seg` is touched after the loop). */
    while (empty) {
        unsigned i = (unsigned)__builtin_ctzll(empty);
        empty &= empty - 1;
        ts_page_t *page = &seg->pages[i];
        page->free = NULL;
        page->used = 0;
        atomic_store_explicit(&page->owner, 0, memory_order_relaxed);
        _ts_segment_page_free(heap, page);
    }
}

void _ts_heap_adopt(ts_heap_t *heap, ts_segment_t *seg) {
    heap_adopt(heap, seg);
}

/* ---- pages --------------------------------------------------------------------------- */

/* Take a free page from a segment of this heap (owner only). Prefers pages
 * that are still resident, so reuse costs no page faults. */
static ts_page_t *segment_take_page(ts_heap_t *heap, ts_segment_t *seg) {
    ts_spin_lock(&seg->lock);
    uint64_t dirty = atomic_load_explicit(&seg->dirty_mask, memory_order_relaxed);
    uint64_t pick = seg->free_mask & dirty ? seg->free_mask & dirty : seg->free_mask;
    unsigned i = (unsigned)__builtin_ctzll(pick);
    uint64_t bit = (uint64_t)1 << i;
    seg->free_mask &= ~bit;
    bool was_dirty = (dirty & bit) != 0;
    if (was_dirty) atomic_fetch_and(&seg->dirty_mask, ~bit);
    ts_page_t *page = &seg->pages[i];
    bool huge = !was_dirty && second_half_fresh(seg, i) && huge_wanted(heap, seg->kind);
    ts_page_set_state(page, TS_PAGE_IN_USE); /* before huge_half_taken, which skips it */
    bool dirtied = false;
    if (huge) {
        _ts_os_huge_pages((char *)seg + TS_HALF_SIZE, TS_HALF_SIZE, true);
        dirtied = huge_half_taken(seg, 1);
    }
    seg->used_pages++;
    ts_spin_unlock(&seg->lock);
    if (was_dirty)
        atomic_fetch_sub(&_ts_stats.dirty, page->area);
    else
        _ts_stat_commit(page->area);
    if (dirtied) _ts_purge_schedule(); /* their deadlines need watching */
    atomic_fetch_add(&_ts_stats.pages[seg->kind], 1);
    return page;
}

ts_page_t *_ts_segment_page_alloc(ts_heap_t *heap, enum ts_kind kind, bool may_adopt,
                                  bool *adopted) {
    *adopted = false;
    for (;;) {
        ts_segment_t *seg = heap->avail[kind];
        if (seg) {
            ts_page_t *page = segment_take_page(heap, seg);
            if (!seg->free_mask) avail_remove(heap, seg);
            return page;
        }
        if (may_adopt && (seg = abandoned_pop()) != NULL) {
            heap_adopt(heap, seg);
            *adopted = true;
            return NULL; /* the caller looks at its queues again */
        }
        bool huge = false;
        if (heap->spare) {
            seg = heap->spare;
            heap->spare = NULL;
        } else {
            seg = cache_pop(kind);
            if (!seg) {
                huge = huge_wanted(heap, kind);
                seg = segment_map_new(huge);
            }
            if (!seg) return NULL;
        }
        segment_format(seg, kind);
        if (huge) {
            ts_spin_lock(&seg->lock);
            bool dirtied = huge_half_taken(seg, 0);
            ts_spin_unlock(&seg->lock);
            if (dirtied) _ts_purge_schedule();
        }
        heap_seg_add(heap, seg);
        avail_add(heap, seg);
    }
}

void _ts_segment_page_free(ts_heap_t *heap, ts_page_t *page) {
    ts_segment_t *seg = ts_segment_of((void *)page);
    uint64_t delay = _ts_purge_delay_ns();
    uint64_t at = _ts_os_now_ns() + delay;
    uint64_t bit = (uint64_t)1 << page->index;
    /* A rescued page (rescue.c) was purged and decommitted already. */
    bool clean = atomic_load_explicit(&page->rescued, memory_order_relaxed);
    if (clean) atomic_store_explicit(&page->rescued, 0, memory_order_relaxed);
    bool retry = false;
    ts_spin_lock(&seg->lock);
    ts_page_set_state(page, clean ? TS_PAGE_FREE_CLEAN : TS_PAGE_FREE_DIRTY);
    page->purge_at = at;
    page->purge_refusals = 0;
    seg->free_mask |= bit;
    seg->used_pages--;
    unsigned used_pages = seg->used_pages;
    if (!clean) {
        atomic_fetch_add(&_ts_stats.dirty, page->area);
        /* Refused (purge_pages): dirty, due again later, as with a delay. */
        retry = delay == 0 && purge_pages(seg, bit, at);
        if (delay != 0 || retry) dirty_due(seg, bit, page->purge_at);
    }
    ts_spin_unlock(&seg->lock);
    if (retry) _ts_purge_schedule_later(); /* due a look period from now, not at once */
    atomic_fetch_sub(&_ts_stats.pages[seg->kind], 1);
    if (heap) {
        if (used_pages == 0) {
            avail_remove(heap, seg);
            heap_seg_remove(heap, seg);
            if (!heap->spare && heap->state == TS_HEAP_ACTIVE)
                heap->spare = seg;
            else
                _ts_segment_release(seg);
        } else {
            avail_add(heap, seg);
        }
    }
    if (delay) _ts_purge_schedule();
}

/* Hand every segment of a dying heap on: wholly free ones to the cache, the
 * others to the abandoned list. */
void _ts_heap_release_segments(ts_heap_t *heap) {
    ts_segment_t *seg;
    while ((seg = heap->segments) != NULL) {
        avail_remove(heap, seg);
        heap_seg_remove(heap, seg);
        if (seg->used_pages == 0)
            _ts_segment_release(seg);
        else
            _ts_segment_abandon(seg);
    }
    if (heap->spare) {
        _ts_segment_release(heap->spare);
        heap->spare = NULL;
    }
}

/* ---- fork ------------------------------------------------------------------------------- */

void _ts_segments_atfork_prepare(void) {
    pthread_mutex_lock(&reclaim_lock);
    pthread_mutex_lock(&abandoned_lock);
    pthread_mutex_lock(&cache_lock);
    pthread_mutex_lock(&registry_lock);
    for (ts_segment_t *seg = registry; seg; seg = seg->reg_next) ts_spin_lock(&seg->lock);
    pthread_mutex_lock(&reserve_lock);
}

void _ts_segments_atfork_parent(void) {
    pthread_mutex_unlock(&reserve_lock);
    for (ts_segment_t *seg = registry; seg; seg = seg->reg_next) ts_spin_unlock(&seg->lock);
    pthread_mutex_unlock(&registry_lock);
    pthread_mutex_unlock(&cache_lock);
    pthread_mutex_unlock(&abandoned_lock);
    pthread_mutex_unlock(&reclaim_lock);
}

void _ts_segments_atfork_child(void) {
    for (ts_segment_t *seg = registry; seg; seg = seg->reg_next)
        ts_spin_init(&seg->lock);
    pthread_mutex_init(&registry_lock, NULL);
    pthread_mutex_init(&cache_lock, NULL);
    pthread_mutex_init(&abandoned_lock, NULL);
    pthread_mutex_init(&reclaim_lock, NULL);
    pthread_mutex_init(&reserve_lock, NULL);
}

/* For statistics: live blocks per class, counted from the pages in use
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
