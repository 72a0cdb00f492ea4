/* Consistency checks of the fast allocator's structures: ts_heap_check()
 * (every build, tsalloc.h) and the page and heap checks the checked build
 * (TS_CHECKED=1) runs at page and heap transitions (docs/debugging.md).
 *
 * What is checked:
 * - the segment map: every entry naming a page shift has a mapped segment of
 *   that layout there, and every formatted segment is in the map;
 * - each segment: its layout, its free mask against its page states and
 *   used_pages, each page in use (class, geometry, counts, owner heap live);
 * - each large block: its chunks marked large in the map;
 * - the calling thread's heap: its queues (links, class, owner, installed
 *   head) and full list, and on each page of its queues the free list (inside
 *   the page, on block boundaries, each block once and carrying its free
 *   mark) and the count against it (full pages may be held by the purge
 *   thread, rescue.c). Other threads' lists change under a walk: they are
 *   checked by their own threads, at their transitions in the checked build.
 *
 * Failures abort with "tsalloc: ts_heap_check(): <what>" (_ts_fatal, which
 * does not allocate); nothing here allocates.
 *
 * The checked build also checks a segment's pages against its free mask at
 * each page taken or given back (under the segment lock).
 *
 * Lock order: check_lock, then the pool lock (the heap walk), then the
 * registry lock and one segment spinlock at a time, then the large-table
 * stripes one at a time.
 */
#include "core/internal.h"
#include "core/valgrind.h"
#include "tsalloc.h"

#include <string.h>

#define FAIL(...)  _ts_fatal("ts_heap_check(): " __VA_ARGS__)
#define MAX_BLOCKS ((size_t)1 << (TS_SHIFT_SMALL - 4)) /* blocks a page can hold */
#define MAX_HEAPS  1024                                /* heaps whose owners are checked */
#define MAX_SEGS   16384                               /* segments whose map is checked */
#define MAX_QUEUE  ((size_t)1 << 20)                   /* pages in one queue, or a loop */

/* ---- one page ---------------------------------------------------------------------- */

uint32_t _ts_check_page_list(const ts_page_t *page, const char *where) {
    uint64_t seen[MAX_BLOCKS / 64];
    memset(seen, 0, sizeof seen);
    uint32_t n = 0;
    uintptr_t start = page->start, size = page->block_size;
    uintptr_t end = start + (uintptr_t)page->capacity * size;
    for (const ts_block_t *b = page->free; b; b = ts_link_get(page, b, "ts_heap_check")) {
        uintptr_t u = (uintptr_t)b;
        if (u < start || u >= end || !size)
            _ts_fatal("%s: the free list of page %p (class %u, %u-byte blocks) leaves its "
                      "page at %p",
                      where, (const void *)page, page->cls, page->block_size, (const void *)b);
        uintptr_t k = (u - start) / size;
        if (u != start + k * size)
            _ts_fatal("%s: the free list of page %p holds %p, not a block boundary", where,
                      (const void *)page, (const void *)b);
        if ((seen[k / 64] >> (k % 64)) & 1)
            _ts_fatal("%s: block %p is twice on the free list of page %p", where, (const void *)b,
                      (const void *)page);
        seen[k / 64] |= (uint64_t)1 << (k % 64);
        if (!ts_block_marked(page, (void *)b))
            _ts_fatal("%s: block %p is both free and live: on the free list of page %p "
                      "without its free mark (handed out, or written after its free)",
                      where, (const void *)b, (const void *)page);
        n++;
    }
    return n;
}

/* The page's count against its list: `used` + the list = what was carved
 * (a head's `used` is a bias, internal.h: not compared). */
static void check_page_count(const ts_page_t *page, uint32_t listed, const char *where);
static void check_page_count(const ts_page_t *page, uint32_t listed, const char *where) {
    if (page->is_head) return;
    if (page->used + listed != page->capacity)
        _ts_fatal("%s: the count of page %p (class %u) disagrees with its free list: %u "
                  "blocks out by the count, %u carved, %u on the list",
                  where, (const void *)page, page->cls, page->used, page->capacity, listed);
}

/* Retiring a page: every block it carved is back, on its list or (`used` of
 * them) taken back from its thread_free by the caller. */
void _ts_check_page_retire(const ts_page_t *page) {
    if (atomic_load_explicit(&page->rescued, memory_order_relaxed)) return; /* purged */
    check_page_count(page, _ts_check_page_list(page, "page retire"), "page retire");
}

/* ---- the calling thread's heap --------------------------------------------------- */

static void check_heap_page(const ts_heap_t *heap, const ts_page_t *page, unsigned cls, bool full,
                            const char *where) {
    uintptr_t owner = ts_page_owner(page);
    if ((owner & ~TS_OWNER_FLAGS) != (uintptr_t)heap)
        _ts_fatal("%s: page %p in a list of heap %p (id %u) is owned by %p", where,
                  (const void *)page, (const void *)heap, heap->id,
                  (const void *)(owner & ~TS_OWNER_FLAGS));
    if (ts_page_state(page) != TS_PAGE_IN_USE)
        _ts_fatal("%s: page %p in a list of heap %p is not in use", where, (const void *)page,
                  (const void *)heap);
    if (!full && page->cls != cls)
        _ts_fatal("%s: page %p of class %u is in the queue of class %u", where, (const void *)page,
                  page->cls, cls);
    if (full != (page->in_full != 0))
        _ts_fatal("%s: page %p is %s the full list but says otherwise", where, (const void *)page,
                  full ? "in" : "out of");
    /* A full page's count and list are the purge thread's to change while it
     * holds the page claimed (rescue.c): only the queues' pages are walked,
     * with the heap marked walking; a rescued page has no list. */
    if (full) return;
    _ts_heap_walk_begin((ts_heap_t *)heap);
    if (_ts_page_walkable((ts_heap_t *)heap, (ts_page_t *)page))
        check_page_count(page, _ts_check_page_list(page, where), where);
    _ts_heap_walk_end((ts_heap_t *)heap);
}

static void check_page_list_links(const ts_heap_t *heap, const ts_page_queue_t *q, unsigned cls,
                                  bool full, const char *where) {
    const ts_page_t *prev = NULL;
    size_t n = 0;
    for (const ts_page_t *page = q->first; page; prev = page, page = page->next) {
        if (page->prev != prev)
            _ts_fatal("%s: page %p of heap %p has a broken back link", where, (const void *)page,
                      (const void *)heap);
        if (++n > MAX_QUEUE)
            _ts_fatal("%s: a page list of heap %p loops", where, (const void *)heap);
        check_heap_page(heap, page, cls, full, where);
    }
    if (q->last != prev)
        _ts_fatal("%s: the page list of heap %p ends at %p, its last is %p", where,
                  (const void *)heap, (const void *)prev, (const void *)q->last);
}

void _ts_check_heap(const ts_heap_t *heap, const char *where) {
    if (heap->state != TS_HEAP_ACTIVE) return;
    for (unsigned cls = 0; cls < TS_CLASS_COUNT; cls++) {
        const ts_page_queue_t *q = &heap->queue[cls];
        check_page_list_links(heap, q, cls, false, where);
        const ts_page_t *want = q->first ? q->first : &_ts_page_empty;
        if (heap->head[cls] != want)
            _ts_fatal("%s: heap %p installs page %p for class %u, its queue starts at %p", where,
                      (const void *)heap, (const void *)heap->head[cls], cls, (const void *)want);
    }
    check_page_list_links(heap, &heap->full, 0, true, where);
}

/* ---- segments, the map, large blocks ---------------------------------------------- */

static pthread_mutex_t check_lock = PTHREAD_MUTEX_INITIALIZER;
static const ts_heap_t *heaps[MAX_HEAPS];
static unsigned heap_count;
static bool heaps_all_seen;
static uintptr_t segs[MAX_SEGS];
static size_t seg_count;
static bool segs_all_seen;

static void collect_heap(const ts_heap_t *heap, void *arg) {
    (void)arg;
    if (!heap) return;
    if (heap_count < MAX_HEAPS)
        heaps[heap_count++] = heap;
    else
        heaps_all_seen = false;
}

static bool heap_known(uintptr_t h) {
    for (unsigned i = 0; i < heap_count; i++)
        if ((uintptr_t)heaps[i] == h) return true;
    return !heaps_all_seen;
}

static void check_page(const ts_segment_t *seg, const ts_page_t *page) {
    const void *p = page;
    /* Owned: laid out (an owner is set last, page.c); unowned pages may be
     * being set up, or abandoned. */
    uintptr_t owner = atomic_load_explicit(&page->owner, memory_order_acquire) & ~TS_OWNER_FLAGS;
    if (!owner) return;
    if (page->cls >= TS_CLASS_COUNT || page->block_size != _ts_classes[page->cls].size)
        FAIL("page %p in use has class %u and %u-byte blocks", p, page->cls, page->block_size);
    uint64_t carved = atomic_load_explicit(&page->carved, memory_order_relaxed);
    if (carved > page->reserved || page->reserved > MAX_BLOCKS || page->start < page->base ||
        page->start + (uintptr_t)page->reserved * page->block_size > page->base + page->area)
        FAIL("page %p of segment %p: %u blocks of %u bytes from %p overflow its %u bytes at %p", p,
             (const void *)seg, page->reserved, page->block_size, (const void *)page->start,
             page->area, (const void *)page->base);
    if (owner && !heap_known(owner))
        FAIL("page %p of segment %p is owned by %p, which is no live heap", p, (const void *)seg,
             (const void *)owner);
}

void _ts_check_segment_locked(const ts_segment_t *seg, const char *where) {
    unsigned in_use = 0;
    for (unsigned i = seg->first_page; i < seg->page_count; i++) {
        bool free_bit = (seg->free_mask >> i) & 1;
        bool used = ts_page_state(&seg->pages[i]) == TS_PAGE_IN_USE;
        if (free_bit == used)
            _ts_fatal("%s: page %u of segment %p is %s but %s its free mask", where, i,
                      (const void *)seg, used ? "in use" : "free", free_bit ? "in" : "not in");
        in_use += used;
    }
    if (seg->used_pages != in_use)
        _ts_fatal("%s: segment %p counts %u pages in use, its pages say %u", where,
                  (const void *)seg, seg->used_pages, in_use);
}

static unsigned shift_of_kind(unsigned kind) {
    return kind == TS_KIND_SMALL    ? TS_SHIFT_SMALL
           : kind == TS_KIND_MEDIUM ? TS_SHIFT_MEDIUM
                                    : TS_SHIFT_BIG;
}

static void check_map(void);
static void sort_segs(void);

static void check_segment(ts_segment_t *seg, void *arg) {
    (void)arg;
    const void *s = seg;
    if (!seg) { /* the last call, still under the registry lock: the map */
        sort_segs();
        check_map();
        return;
    }
    if (seg_count < MAX_SEGS)
        segs[seg_count++] = (uintptr_t)seg;
    else
        segs_all_seen = false;
    if ((uintptr_t)seg & TS_SEGMENT_MASK) FAIL("segment %p is not aligned", s);
    if (seg->kind == TS_KIND_COUNT) return; /* mapped, never laid out */
    unsigned mapped = ts_map_shift(atomic_load_explicit(
        &_ts_segmap[(uintptr_t)seg >> TS_SEGMENT_SHIFT], memory_order_relaxed));
    if (seg->kind > TS_KIND_BIG || seg->page_shift != shift_of_kind(seg->kind))
        FAIL("segment %p has kind %u and page shift %u", s, seg->kind, seg->page_shift);
    if (mapped != seg->page_shift)
        FAIL("segment %p (page shift %u) has %u in the segment map", s, seg->page_shift, mapped);
    if (seg->first_page >= seg->page_count || seg->page_count > TS_MAX_PAGES)
        FAIL("segment %p lays out pages %u to %u", s, seg->first_page, seg->page_count);
    ts_seg_lock(seg);
    _ts_check_segment_locked(seg, "ts_heap_check()");
    ts_seg_unlock(seg);
    for (unsigned i = seg->first_page; i < seg->page_count; i++)
        if (ts_page_state(&seg->pages[i]) == TS_PAGE_IN_USE) check_page(seg, &seg->pages[i]);
}

static bool seg_known(uintptr_t seg) {
    size_t lo = 0, hi = seg_count;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (segs[mid] == seg) return true;
        if (segs[mid] < seg)
            lo = mid + 1;
        else
            hi = mid;
    }
    return !segs_all_seen;
}

static void sort_segs(void) { /* shell sort: no allocation, n is small */
    for (size_t gap = seg_count / 2; gap; gap /= 2)
        for (size_t i = gap; i < seg_count; i++)
            for (size_t j = i; j >= gap && segs[j - gap] > segs[j]; j -= gap) {
                uintptr_t t = segs[j];
                segs[j] = segs[j - gap];
                segs[j - gap] = t;
            }
}

/* Entries naming a page shift without a segment there (whole words of zero
 * entries are skipped: the map is mostly empty). */
static void check_map(void) {
    const _Atomic uint8_t *map = _ts_segmap;
    for (size_t i = 0; i < TS_SEGMAP_ENTRIES; i += 8) {
        uint64_t w;
        memcpy(&w, (const void *)&map[i], sizeof w);
        if (!w) continue;
        for (size_t j = i; j < i + 8; j++) {
            unsigned v = ts_map_shift(atomic_load_explicit(&map[j], memory_order_relaxed));
            if (v == TS_MAP_NONE || v == TS_MAP_LARGE) continue;
            if (v != TS_SHIFT_SMALL && v != TS_SHIFT_MEDIUM && v != TS_SHIFT_BIG)
                FAIL("segment map entry %zu holds %u", j, v);
            if (!seg_known((uintptr_t)j << TS_SEGMENT_SHIFT))
                FAIL("segment map entry %zu names a segment at %p that is not mapped", j,
                     (const void *)((uintptr_t)j << TS_SEGMENT_SHIFT));
        }
    }
}

static void check_large(uintptr_t start, size_t size, void *arg) {
    (void)arg;
    if (!size || start & 4095) FAIL("large block %p of %zu bytes", (const void *)start, size);
    for (uintptr_t c = start >> TS_SEGMENT_SHIFT; c <= (start + size - 1) >> TS_SEGMENT_SHIFT; c++)
        if (atomic_load_explicit(&_ts_segmap[c], memory_order_relaxed) != TS_MAP_LARGE)
            FAIL("large block %p of %zu bytes is not marked large in the segment map",
                 (const void *)start, size);
}

/* The pool lock is held across the segment walk (fn(NULL) comes last, under
 * it): a page's owner cannot leave the heap list meanwhile. */
static void check_all(const ts_heap_t *heap, void *arg) {
    collect_heap(heap, arg);
    if (heap) return;
    seg_count = 0;
    segs_all_seen = true;
    _ts_segments_visit(check_segment, NULL);
}

TS_EXPORT void ts_heap_check(void) {
    _ts_process_init();
    bool vg = _ts_vg_core_enter(); /* the real heap, and no memcheck reports */
    ts_heap_t *self = _ts_tls_heap;
    _ts_check_heap(self, "ts_heap_check()");
    pthread_mutex_lock(&check_lock);
    heap_count = 0;
    heaps_all_seen = true;
    _ts_heaps_visit(check_all, NULL);
    _ts_large_visit(check_large, NULL);
    pthread_mutex_unlock(&check_lock);
    if (vg) _ts_vg_core_leave();
}
