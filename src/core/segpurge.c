/* Resident free pages of a segment: when their purge is due, the purge
 * itself (MADV_DONTNEED through src/os, one call per run of neighbouring
 * pages), and the transparent huge pages asked for by 2 MiB halves.
 *
 * Invariants:
 * - Only the owner heap takes or returns pages of a segment; the purge thread
 *   only turns FREE_DIRTY pages into FREE_CLEAN. Both do so under the segment
 *   spinlock, which nobody holds while taking another lock.
 * - A segment's dirty_mask holds exactly its FREE_DIRTY pages; purge_at_min
 *   is at most the purge_at of each of them.
 * - A half in huge_split is never asked for huge pages again.
 *
 * Lock order: the segment spinlock is the only lock taken here (the
 * registry lock is held around it by the purge walk, registry.c).
 */
#include "core/internal.h"

static unsigned page_half(const ts_segment_t *seg, unsigned i) {
    return ((size_t)i << seg->page_shift) >= TS_HALF_SIZE;
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

bool _ts_huge_wanted(ts_heap_t *heap, enum ts_kind kind) {
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

/* The free clean pages of a half that was just asked for huge pages will be
 * resident after its first touch: make them dirty, and count them before the
 * lock goes (a purge may subtract them as soon as it can take the lock).
 * Segment lock held; returns whether the caller must call
 * _ts_purge_schedule once it has released it (their deadlines need watching;
 * that also asks for the helper should the commit have crossed 8 MiB). */
bool _ts_huge_half_taken(ts_segment_t *seg, unsigned half) {
    ts_assert(half < 2 && ts_spin_is_locked(&seg->lock));
    uint64_t at = _ts_os_now_ns() + _ts_purge_delay_ns(), made = 0;
    size_t bytes = 0;
    for (unsigned i = seg->first_page; i < seg->page_count; i++) {
        ts_page_t *page = &seg->pages[i];
        if (page_half(seg, i) != half || ts_page_state(page) != TS_PAGE_FREE_CLEAN) continue;
        if (!page->area) _ts_segment_page_place(seg, page, i); /* never taken yet */
        ts_page_set_state(page, TS_PAGE_FREE_DIRTY);
        page->purge_at = at;
        page->purge_refusals = 0;
        made |= (uint64_t)1 << i;
        bytes += page->area;
    }
    ts_segment_dirty_due(seg, made, at);
    seg->huge_halves |= (uint8_t)(1u << half);
    atomic_fetch_add(&_ts_stats.huge_halves, 1);
    if (!bytes) return false;
    atomic_fetch_add(&_ts_stats.dirty, bytes);
    (void)_ts_stat_commit_page(bytes, 0); /* the caller's schedule covers the helper */
    return true;
}

/* True when no page of the second half was touched since it was last
 * purged, and it was never split: page i (free, clean) is about to be. */
bool _ts_second_half_fresh(const ts_segment_t *seg, unsigned i) {
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
    ts_assert(ts_spin_is_locked(&seg->lock)); /* held */
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
uint64_t _ts_segment_purge_pages(ts_segment_t *seg, uint64_t mask, uint64_t now) {
    ts_assert(ts_spin_is_locked(&seg->lock));                     /* held */
    ts_assert(!(mask & ~seg->free_mask) || seg->used_pages == 0); /* free pages, or a format */
    unsigned halves = 0;
    for (uint64_t m = mask; m; m &= m - 1)
        halves |= 1u << page_half(seg, (unsigned)__builtin_ctzll(m));
    huge_halves_split(seg, halves);
    size_t total = 0, untouched = 0;
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
            ts_assert(ts_page_state(page) == TS_PAGE_FREE_DIRTY);
            if (!whole && (first == last || !_ts_os_purge((void *)page->base, page->area))) {
                if (page->purge_refusals < TS_REFUSED_RETRY_MAX) page->purge_refusals++;
                page->purge_at = now + _ts_refused_retry_ns(page->purge_refusals);
                refused |= (uint64_t)1 << i;
                continue;
            }
            ts_page_set_state(page, TS_PAGE_FREE_CLEAN);
            untouched += page->area - page->touched;
            page->touched = 0;
            page->purge_refusals = 0;
            total += page->area;
        }
    }
    _ts_stat_decommit_pages(total, untouched);
    atomic_fetch_sub(&_ts_stats.dirty, total);
    atomic_fetch_add(&_ts_stats.purged, total);
    return refused;
}

bool _ts_segment_purge_in_use(ts_page_t *page) {
    ts_segment_t *seg = ts_segment_of(page);
    ts_assert(ts_page_state(page) == TS_PAGE_IN_USE); /* claimed, every block free (rescue.c) */
    ts_seg_lock(seg);
    huge_halves_split(seg, 1u << page_half(seg, page->index));
    bool purged = _ts_os_purge((void *)page->base, page->area);
    size_t untouched = page->area - page->touched;
    if (purged) page->touched = 0;
    ts_seg_unlock(seg);
    if (purged) { /* in use, yet not resident: _ts_segment_page_free frees it clean */
        _ts_stat_decommit_pages(page->area, untouched);
        atomic_fetch_add(&_ts_stats.purged, page->area);
    }
    return purged;
}

/* Purge the dirty pages whose delay has passed; returns the next deadline. */
uint64_t _ts_segment_purge_expired(ts_segment_t *seg, uint64_t now, bool force) {
    ts_assert(ts_spin_is_locked(&seg->lock)); /* held */
    uint64_t dirty = atomic_load_explicit(&seg->dirty_mask, memory_order_relaxed);
    ts_assert(!(dirty & ~seg->free_mask)); /* only free pages wait for a purge */
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
        uint64_t refused = _ts_segment_purge_pages(seg, expired, now);
        atomic_fetch_and(&seg->dirty_mask, ~(expired & ~refused));
        for (uint64_t m = refused; m; m &= m - 1) {
            uint64_t at = seg->pages[__builtin_ctzll(m)].purge_at;
            if (at < next) next = at;
        }
    }
    atomic_store_explicit(&seg->purge_at_min, next, memory_order_relaxed);
    return next;
}

/* A page taken for a class other than the one whose blocks touched its
 * memory (a dirty free page of its segment, or a kept empty big page made
 * over). A program that writes most of its blocks will write the new ones
 * too, so the resident memory saves it page faults: kept. One that writes
 * only part of each block (a header, a buffer seldom filled) leaves
 * resident OS pages that seldom line up with the new blocks, and they
 * would pile up over every layout the page has had, until a purge that
 * does not come while the page keeps being reused: given back when fewer
 * than half of the OS pages the old blocks covered are resident. */
void _ts_segment_purge_relayout(ts_page_t *page) {
    ts_assert(ts_page_state(page) == TS_PAGE_IN_USE && page->touched <= page->area);
    size_t os_page = _ts_os_page_size();
    size_t pages = ((size_t)page->touched + os_page - 1) / os_page, resident = 0;
    unsigned char vec[1024];
    for (size_t at = 0; at < pages; at += sizeof vec) {
        size_t n = pages - at < sizeof vec ? pages - at : sizeof vec;
        if (!_ts_os_resident((void *)(page->base + at * os_page), n * os_page, vec)) return;
        for (size_t k = 0; k < n; k++) resident += vec[k] & 1;
    }
    if (resident * 2 >= pages) return;
    size_t len = pages * os_page < page->area ? pages * os_page : page->area;
    ts_segment_t *seg = ts_segment_of(page);
    ts_seg_lock(seg);
    huge_halves_split(seg, 1u << page_half(seg, page->index));
    bool purged = _ts_os_purge((void *)page->base, len);
    size_t was = page->touched;
    if (purged) page->touched = 0; /* fresh again: calloc need not clear it */
    ts_seg_unlock(seg);
    if (purged) {
        _ts_stat_untouch(was); /* still committed, no longer in use */
        atomic_fetch_add(&_ts_stats.purged, len);
    }
}

void _ts_segment_sweep_prepare(ts_page_t *page) {
    ts_segment_t *seg = ts_segment_of(page);
    ts_seg_lock(seg);
    huge_halves_split(seg, 1u << page_half(seg, page->index));
    ts_seg_unlock(seg);
}
