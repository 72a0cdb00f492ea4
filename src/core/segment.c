/* Segments: 4 MiB regions at 4 MiB boundaries, each divided into pages of one
 * kind. This file lays them out, takes pages from them and returns pages to
 * them for their owner heap, keeps a heap's segment lists, and keeps the
 * cache of wholly free segments. Mapping and the registry: registry.c;
 * purging and huge pages: segpurge.c; segments of exited threads: abandon.c.
 *
 * Where a segment can be (each has its own lock, taken one at a time):
 * - owned by a heap: in heap->segments, and in heap->avail[kind] while it has
 *   a free page; or kept as heap->spare (wholly free, not in those lists);
 * - abandoned (its thread exited with blocks still live): abandoned list;
 * - cached (wholly free, no owner): cache list, at most TSALLOC_SEGMENT_CACHE
 *   but for those with pages not purged yet (until the purge pass after);
 * and always in the registry (registry lock) until it is unmapped, which is how
 * the purge thread finds the free pages to give back.
 *
 * Invariants:
 * - Only the owner heap takes or returns pages of a segment; the purge thread
 *   only turns FREE_DIRTY pages into FREE_CLEAN. Both do so under the segment
 *   spinlock, which nobody holds while taking another lock.
 * - used_pages counts the pages in state IN_USE; free_mask holds the others
 *   (FREE_CLEAN or FREE_DIRTY) among first_page .. page_count - 1.
 * - A segment is in heap->avail[kind] (in_avail) only while its owner is that
 *   heap; cache_count is the length of the cache list, each entry `cached`.
 *
 * Lock order: the cache lock and a segment spinlock are each taken alone
 * (the cache lock is released before _ts_segment_unmap takes the registry
 * lock); fork takes them all in the order of internal.h.
 */
#include "core/internal.h"

static TS_FORK_LOCK pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;
static TS_STARTUP_DATA ts_segment_t *cache_list;
static TS_STARTUP_DATA size_t cache_count;

/* ---- formatting ----------------------------------------------------------------- */

void _ts_segment_page_place(ts_segment_t *seg, ts_page_t *page, unsigned i) {
    unsigned shift = seg->page_shift;
    size_t offset = (size_t)i << shift;
    size_t skip = offset < TS_SEGMENT_HEADER ? TS_SEGMENT_HEADER - offset : 0;
    page->index = (uint8_t)i;
    page->base = page->start = (uintptr_t)seg + offset + skip;
    page->area = (uint32_t)(((size_t)1 << shift) - skip);
#if TS_SECURE
    if (offset + ((size_t)1 << shift) == TS_SEGMENT_SIZE) page->area -= TS_SEGMENT_GUARD;
    page->zero_end = 0; /* a new place: what lies there is of another layout */
#endif
}

/* Lay out a wholly free segment for pages of `kind` (owner only). A segment
 * mapped just now is all zero: its descriptors already read as free clean
 * pages with nothing carved, and each gets its place when its page is first
 * taken (or made dirty), so formatting writes none of them: a program that
 * uses a few pages of a segment touches one or two OS pages of its 16 KiB of
 * descriptors, not all four. */
static void segment_format(ts_segment_t *seg, enum ts_kind kind) {
    ts_assert(seg->used_pages == 0 && kind < TS_KIND_COUNT);
    if (seg->kind == kind) return;
    bool zero = seg->kind == TS_KIND_COUNT; /* never formatted: as mapped */
    static const uint8_t shifts[TS_KIND_COUNT] = {TS_SHIFT_SMALL, TS_SHIFT_MEDIUM, TS_SHIFT_BIG};
    unsigned shift = shifts[kind];
    unsigned count = (unsigned)(TS_SEGMENT_SIZE >> shift);
    unsigned first = kind == TS_KIND_SMALL ? 1 : 0; /* a small page 0 is the header */
    ts_seg_lock(seg);
    /* The old layout's resident pages stay resident: the new pages over them
     * start dirty, due when the earliest of what they cover was, so that
     * memory freed and soon asked for again in pages of another kind (a
     * segment from the cache or a heap's spare) costs no page faults. */
    uint64_t dirty = atomic_load_explicit(&seg->dirty_mask, memory_order_relaxed);
    uintptr_t kept_lo[TS_MAX_PAGES], kept_hi[TS_MAX_PAGES];
    uint64_t kept_at[TS_MAX_PAGES];
    uint8_t kept_refusals[TS_MAX_PAGES];
    unsigned kept = 0;
    size_t kept_bytes = 0, kept_untouched = 0;
    for (uint64_t m = dirty; m; m &= m - 1) {
        const ts_page_t *page = &seg->pages[__builtin_ctzll(m)];
        kept_lo[kept] = page->base;
        kept_hi[kept] = page->base + page->area;
        kept_at[kept] = page->purge_at;
        kept_refusals[kept++] = page->purge_refusals;
        kept_bytes += page->area;
        kept_untouched += page->area - page->touched;
    }
    seg->kind = (uint8_t)kind;
    atomic_store_explicit(&seg->sweepable, 0, memory_order_relaxed);
    seg->page_shift = (uint8_t)shift;
    seg->first_page = (uint8_t)first;
    seg->page_count = (uint8_t)count;
    seg->free_mask = 0;
    ts_assert(first < count && count <= TS_MAX_PAGES);
    if (zero) {
        ts_assert(!dirty);
        seg->free_mask = (count == 64 ? ~(uint64_t)0 : ((uint64_t)1 << count) - 1) &
                         ~(((uint64_t)1 << first) - 1);
    }
    for (unsigned i = 0; i < TS_MAX_PAGES && !zero; i++) {
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
        _ts_segment_page_place(seg, page, i);
        page->touched = 0; /* the old layout's pages were purged (refused ones: below) */
        ts_page_set_state(page, TS_PAGE_FREE_CLEAN);
        atomic_store_explicit(&page->carved, 0, memory_order_relaxed);
        seg->free_mask |= (uint64_t)1 << i;
    }
    uint64_t made = 0, due = UINT64_MAX;
    size_t made_bytes = 0;
    for (unsigned i = first; i < count && kept; i++) {
        ts_page_t *page = &seg->pages[i];
        uint64_t at = UINT64_MAX;
        uint8_t refusals = 0;
        for (unsigned k = 0; k < kept; k++) {
            if (page->base >= kept_hi[k] || kept_lo[k] >= page->base + page->area) continue;
            at = kept_at[k] < at ? kept_at[k] : at;
            refusals = kept_refusals[k] > refusals ? kept_refusals[k] : refusals;
        }
        if (at == UINT64_MAX) continue;
        ts_page_set_state(page, TS_PAGE_FREE_DIRTY);
        page->touched = page->area; /* resident, written: nothing fresh (calloc) */
        page->purge_at = at;
        page->purge_refusals = refusals;
        made |= (uint64_t)1 << i;
        made_bytes += page->area;
        due = at < due ? at : due;
    }
    atomic_store_explicit(&seg->dirty_mask, 0, memory_order_relaxed); /* the old layout's */
    atomic_store_explicit(&seg->purge_at_min, UINT64_MAX, memory_order_relaxed);
    ts_segment_dirty_due(seg, made, due);
    /* The new pages cover the old ones kept, and a little more. */
    atomic_fetch_add(&_ts_stats.dirty, made_bytes - kept_bytes);
    bool grew = _ts_stat_commit_locked(made_bytes - kept_bytes);
    grew |= _ts_stat_touch_locked(kept_untouched); /* the new pages count as touched */
    ts_seg_unlock(seg);
    if (grew) _ts_purge_schedule(); /* big enough for the purge thread now */
    if (made) _ts_purge_schedule_later();
    atomic_store_explicit(&_ts_segmap[(uintptr_t)seg >> TS_SEGMENT_SHIFT],
                          (uint8_t)(shift | _ts_map_flag), memory_order_release);
}

/* ---- a heap's segment lists (owner only) ---------------------------------------- */

void _ts_heap_seg_add(ts_heap_t *heap, ts_segment_t *seg) {
    ts_assert(!seg->in_avail && !seg->cached && heap->spare != seg);
    atomic_store_explicit(&seg->owner, heap, memory_order_release);
    ts_seg_list_push(&heap->segments, seg);
}

static void heap_seg_remove(ts_heap_t *heap, ts_segment_t *seg) {
    ts_assert(!seg->in_avail && atomic_load_explicit(&seg->owner, memory_order_relaxed) == heap);
    ts_seg_list_remove(&heap->segments, seg);
}

void _ts_segment_avail_add(ts_heap_t *heap, ts_segment_t *seg) {
    if (seg->in_avail) return;
    ts_assert(seg->free_mask && atomic_load_explicit(&seg->owner, memory_order_relaxed) == heap);
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
        ts_assert(seg->cached && seg->used_pages == 0 && cache_count > 0);
        ts_seg_list_remove(&cache_list, seg);
        seg->cached = 0;
        cache_count--;
        atomic_fetch_sub(&_ts_stats.segments_cached, 1);
    }
    pthread_mutex_unlock(&cache_lock);
    return seg;
}

void _ts_segment_release(ts_segment_t *seg) {
    ts_assert(seg->used_pages == 0 && !seg->in_avail && !seg->cached);
    atomic_store_explicit(&seg->owner, NULL, memory_order_release);
    size_t limit = (size_t)_ts_option(TS_OPT_SEGMENT_CACHE);
    /* Over the limit, a segment with dirty pages stays too, until they are
     * purged (_ts_segment_cache_shrink): memory freed and soon asked for
     * again is then reused resident, as it is in a heap's own segments. */
    bool dirty = atomic_load_explicit(&seg->dirty_mask, memory_order_relaxed) != 0;
    pthread_mutex_lock(&cache_lock);
    if (cache_count < limit || dirty) {
        ts_seg_list_push(&cache_list, seg);
        seg->cached = 1;
        seg->cached_at = _ts_os_now_ns();
        cache_count++;
        pthread_mutex_unlock(&cache_lock);
        atomic_fetch_add(&_ts_stats.segments_cached, 1);
        return;
    }
    pthread_mutex_unlock(&cache_lock);
    _ts_segment_unmap(seg);
}

/* Unmap cached segments until `keep` remain, only those whose pages are all
 * purged when `clean_only`. Returns the bytes unmapped. */
static size_t cache_drop(size_t keep, bool clean_only) {
    ts_segment_t *drop = NULL;
    size_t n = 0;
    pthread_mutex_lock(&cache_lock);
    for (ts_segment_t *s = cache_list, *next; s && cache_count > keep; s = next) {
        next = s->next;
        if (clean_only && atomic_load_explicit(&s->dirty_mask, memory_order_relaxed)) continue;
        ts_seg_list_remove(&cache_list, s);
        s->cached = 0;
        cache_count--;
        s->next = drop;
        drop = s;
        n++;
    }
    pthread_mutex_unlock(&cache_lock);
    atomic_fetch_sub(&_ts_stats.segments_cached, n);
    while (drop) {
        ts_segment_t *next = drop->next;
        _ts_segment_unmap(drop);
        drop = next;
    }
    return n * TS_SEGMENT_SIZE;
}

/* The cached segments over TSALLOC_SEGMENT_CACHE once their pages are
 * purged (the purge pass, after purging). */
void _ts_segment_cache_shrink(void) {
    (void)cache_drop((size_t)_ts_option(TS_OPT_SEGMENT_CACHE), true);
}

/* Every cached segment (malloc_trim). Returns the bytes unmapped. */
size_t _ts_segment_cache_trim(void) {
    return cache_drop(0, false);
}

/* ---- pages --------------------------------------------------------------------------- */

/* Take a free page from a segment of this heap (owner only). Prefers pages
 * that are still resident, so reuse costs no page faults. */
static ts_page_t *segment_take_page(ts_heap_t *heap, ts_segment_t *seg) {
    ts_seg_lock(seg);
    uint64_t dirty = atomic_load_explicit(&seg->dirty_mask, memory_order_relaxed);
    uint64_t pick = seg->free_mask & dirty ? seg->free_mask & dirty : seg->free_mask;
    ts_assert(pick != 0 && !(dirty & ~seg->free_mask));
    unsigned i = (unsigned)__builtin_ctzll(pick);
    uint64_t bit = (uint64_t)1 << i;
    ts_assert(i >= seg->first_page && i < seg->page_count);
    ts_assert(ts_page_state(&seg->pages[i]) ==
              ((dirty & bit) ? TS_PAGE_FREE_DIRTY : TS_PAGE_FREE_CLEAN));
    seg->free_mask &= ~bit;
    bool was_dirty = (dirty & bit) != 0;
    if (was_dirty) atomic_fetch_and(&seg->dirty_mask, ~bit);
    ts_page_t *page = &seg->pages[i];
    if (!page->area) _ts_segment_page_place(seg, page, i); /* first use since formatted */
    bool huge = !was_dirty && _ts_second_half_fresh(seg, i) && _ts_huge_wanted(heap, seg->kind);
    ts_page_set_state(page, TS_PAGE_IN_USE); /* before _ts_huge_half_taken, which skips it */
    bool dirtied = false;
    if (huge) {
        _ts_os_huge_pages((char *)seg + TS_HALF_SIZE, TS_HALF_SIZE, true);
        dirtied = _ts_huge_half_taken(seg, 1);
    }
    seg->used_pages++;
    if (TS_CHECKED) _ts_check_segment_locked(seg, "segment page alloc");
    ts_seg_unlock(seg);
    ts_heap_pages_grew(heap, page->area);
    if (was_dirty)
        atomic_fetch_sub(&_ts_stats.dirty, page->area);
    else if (_ts_stat_commit_page(page->area, page->touched))
        dirtied = true;                /* the purge thread's rule counts what page_extend writes */
    if (dirtied) _ts_purge_schedule(); /* their deadlines need watching */
    atomic_fetch_add(&_ts_stats.pages[seg->kind], 1);
    return page;
}

ts_page_t *_ts_segment_page_alloc(ts_heap_t *heap, enum ts_kind kind, unsigned cls, bool may_adopt,
                                  bool *adopted) {
    *adopted = false;
    for (;;) {
        ts_segment_t *seg = heap->avail[kind];
        if (seg) {
            ts_page_t *page = segment_take_page(heap, seg);
            if (!seg->free_mask) avail_remove(heap, seg);
            return page;
        }
        /* Not ts_heap_new's heaps: an adopted page may have blocks in another
         * thread's remote batch, which ts_heap_destroy would not wait for. */
        if (may_adopt && !heap->user && (seg = _ts_abandoned_pop(kind, cls)) != NULL) {
            _ts_heap_adopt(heap, seg);
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
                huge = _ts_huge_wanted(heap, kind);
                seg = _ts_segment_map_new(huge);
            }
            if (!seg) return NULL;
        }
        segment_format(seg, kind);
        if (huge) {
            ts_seg_lock(seg);
            bool dirtied = _ts_huge_half_taken(seg, 0);
            ts_seg_unlock(seg);
            if (dirtied) _ts_purge_schedule();
        }
        _ts_heap_seg_add(heap, seg);
        _ts_segment_avail_add(heap, seg);
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
    ts_seg_lock(seg);
    ts_assert(ts_page_state(page) == TS_PAGE_IN_USE && !(seg->free_mask & bit));
    ts_assert(seg->used_pages > 0 && page->index >= seg->first_page);
    ts_assert(page->used == 0 && ts_page_owner(page) == 0);
    ts_page_set_state(page, clean ? TS_PAGE_FREE_CLEAN : TS_PAGE_FREE_DIRTY);
    page->purge_at = at;
    page->purge_refusals = 0;
    seg->free_mask |= bit;
    seg->used_pages--;
    if (TS_CHECKED) _ts_check_segment_locked(seg, "segment page free");
    unsigned used_pages = seg->used_pages;
    if (!clean) {
        atomic_fetch_add(&_ts_stats.dirty, page->area);
        /* Refused (_ts_segment_purge_pages): dirty, due again later, as with a delay. */
        retry = delay == 0 && _ts_segment_purge_pages(seg, bit, at);
        if (delay != 0 || retry) ts_segment_dirty_due(seg, bit, page->purge_at);
    }
    ts_seg_unlock(seg);
    if (retry) _ts_purge_schedule_later(); /* due a look period from now, not at once */
    atomic_fetch_sub(&_ts_stats.pages[seg->kind], 1);
    if (heap) {
        heap->page_bytes -= page->area;
        if (used_pages == 0) {
            avail_remove(heap, seg);
            heap_seg_remove(heap, seg);
            if (!heap->spare && heap->state == TS_HEAP_ACTIVE)
                heap->spare = seg;
            else
                _ts_segment_release(seg);
        } else {
            _ts_segment_avail_add(heap, seg);
        }
    }
    if (delay) _ts_purge_schedule();
}

/* Every page in use of a segment goes back at once, whatever its blocks:
 * _ts_segment_page_free for each, under one lock, with one clock reading
 * and one count (ts_heap_destroy: the segment's heap owns all of them, and
 * no free into them runs). The segment stays on its heap's lists. True
 * when the caller must call _ts_purge_schedule() once done with all its
 * segments: one wake for the heap, with no segment lock held, rather than
 * a pass of the purge thread beside the rest of the destroy. */
bool _ts_segment_drop_pages(ts_segment_t *seg, uint64_t now) {
    uint64_t delay = _ts_purge_delay_ns(), at = now + delay, bits = 0;
    size_t dirty = 0;
    unsigned n = 0;
    ts_seg_lock(seg);
    for (unsigned i = seg->first_page; i < seg->page_count; i++) {
        ts_page_t *page = &seg->pages[i];
        if (ts_page_state(page) != TS_PAGE_IN_USE) continue;
        page->free = NULL;
        page->used = 0;
        page->is_head = page->in_full = page->cached = 0;
        page->next = page->prev = NULL;
        atomic_store_explicit(&page->thread_free, 0, memory_order_relaxed);
        atomic_store_explicit(&page->owner, 0, memory_order_relaxed);
        bool clean = atomic_load_explicit(&page->rescued, memory_order_relaxed);
        if (clean) atomic_store_explicit(&page->rescued, 0, memory_order_relaxed);
        ts_page_set_state(page, clean ? TS_PAGE_FREE_CLEAN : TS_PAGE_FREE_DIRTY);
        page->purge_at = at;
        page->purge_refusals = 0;
        if (!clean) {
            bits |= (uint64_t)1 << i;
            dirty += page->area;
        }
        seg->free_mask |= (uint64_t)1 << i;
        n++;
    }
    ts_assert(seg->used_pages == n);
    seg->used_pages -= n;
    atomic_fetch_add(&_ts_stats.dirty, dirty);
    bool retry = delay == 0 && bits && _ts_segment_purge_pages(seg, bits, at);
    if (delay != 0 || retry) ts_segment_dirty_due(seg, bits, at);
    ts_seg_unlock(seg);
    if (retry) _ts_purge_schedule_later();
    atomic_fetch_sub(&_ts_stats.pages[seg->kind], n);
    return delay && bits;
}

/* Hand every segment of a dying heap on: wholly free ones to the cache, the
 * others to heap `to` (ts_heap_delete) or, without one, the abandoned list. */
void _ts_heap_release_segments(ts_heap_t *heap, ts_heap_t *to) {
    ts_segment_t *seg;
    while ((seg = heap->segments) != NULL) {
        avail_remove(heap, seg);
        heap_seg_remove(heap, seg);
        if (seg->used_pages == 0) {
            _ts_segment_release(seg);
        } else if (to) {
            atomic_store_explicit(&seg->owner, NULL, memory_order_relaxed);
            _ts_heap_adopt(to, seg);
        } else {
            _ts_segment_abandon(seg);
        }
    }
    if (heap->spare) {
        _ts_segment_release(heap->spare);
        heap->spare = NULL;
    }
}

/* ---- fork ------------------------------------------------------------------------------- */

/* Every segment lock, in the lock order: abandon.c's, the cache's, then
 * registry.c's (the registry, each segment spinlock, the reserve). */
void _ts_segments_atfork_prepare(void) {
    _ts_abandoned_atfork_prepare();
    pthread_mutex_lock(&cache_lock);
    _ts_registry_atfork_prepare();
}

void _ts_segments_atfork_parent(void) {
    _ts_registry_atfork_parent();
    pthread_mutex_unlock(&cache_lock);
    _ts_abandoned_atfork_parent();
}

void _ts_segments_atfork_child(void) {
    _ts_registry_atfork_child();
    pthread_mutex_init(&cache_lock, NULL);
    _ts_abandoned_atfork_child();
}
