/* ts_block_info(): what the allocator knows of any address, for debuggers
 * and error messages (docs/debugging.md).
 *
 * Invariants: the segment map is consulted before anything is read, so a
 * foreign pointer is answered without touching its memory; a segment is read
 * only while the map names it (it may be unmapped concurrently: callers that
 * race frees with it get a stale answer, as from any debugger). Heaps are
 * never unmapped, so a page's owner can always be read. Lock order: one
 * large-table stripe, then the large cache lock (large.c, _ts_large_find).
 */
#include "core/internal.h"
#include "tsalloc.h"

#include <string.h>

static void segment_block(const void *p, unsigned shift, ts_block_info_t *out) {
    uintptr_t u = (uintptr_t)p;
    ts_segment_t *seg = ts_segment_of(p);
    out->segment = seg;
    if ((u & TS_SEGMENT_MASK) < TS_SEGMENT_HEADER) {
        out->state = TS_BLOCK_METADATA;
        return;
    }
    const ts_page_t *page = ts_page_of(seg, p, shift);
    out->state = TS_BLOCK_FREE;
    if (ts_page_state(page) != TS_PAGE_IN_USE || !page->block_size || u < page->start) return;
    uint64_t k = (u - page->start) / page->block_size;
    if (k >= page->reserved) return; /* the page's tail, past its last block */
    uintptr_t start = page->start + (uintptr_t)k * page->block_size;
    uintptr_t owner = ts_page_owner(page) & ~TS_OWNER_FLAGS;
    out->size_class = page->cls;
    out->start = (void *)start;
    out->usable = page->block_size;
    out->offset = u - start;
    out->heap = (const void *)owner;
    out->heap_id = owner ? ((const ts_heap_t *)owner)->id : 0;
    bool handed_out = k < atomic_load_explicit(&page->carved, memory_order_relaxed);
    if (handed_out && !ts_block_marked(page, (void *)start) &&
        !atomic_load_explicit(&page->rescued, memory_order_relaxed))
        out->state = TS_BLOCK_LIVE;
}

TS_EXPORT bool ts_block_info(const void *ptr, ts_block_info_t *out) {
    memset(out, 0, sizeof *out);
    out->design = "tsalloc";
    out->size_class = -1;
    uintptr_t u = (uintptr_t)ptr;
    size_t chunk = u >> TS_SEGMENT_SHIFT;
    if (!ptr || chunk >= TS_SEGMAP_ENTRIES) return false;
    unsigned m = atomic_load_explicit(&_ts_segmap[chunk], memory_order_acquire);
    if (m == TS_MAP_NONE) return false;
    if (m != TS_MAP_LARGE) {
        segment_block(ptr, ts_map_shift(m), out);
        return true;
    }
    uintptr_t start;
    size_t size;
    int found = _ts_large_find(ptr, &start, &size);
    if (!found) return false; /* where large blocks were: unmapped since */
    out->state = found == 1 ? TS_BLOCK_LIVE : TS_BLOCK_FREE;
    out->large = 1;
    out->start = (void *)start;
    out->usable = size;
    out->offset = u - start;
    return true;
}
