/* The fast paths of malloc and free, as inline functions: api.c builds
 * _ts_core_malloc and _ts_core_free from them, and the override shim
 * includes this header (ts_add_design(... INLINE_HEADER core/fastpath.h))
 * to make them malloc and free themselves, saving a jump on each call.
 *
 * Costs (x86-64, gcc 12 -O2, counted with callgrind):
 * - malloc up to 1 KiB: 17 instructions: read the TLS heap, index its direct
 *   table by (size+15)/16 to the head page of the class, pop the page's free
 *   list, clear the block's free mark (internal.h), prefetch the next block,
 *   count. Up to 64 KiB: 4 more to find the class. Up to 512 KiB (big
 *   pages, which are never heads): 8 more, for the class (a 16 KiB-step
 *   table) and for counting `used`. One unlikely branch to
 *   _ts_malloc_generic (empty list, larger sizes, the first call of a
 *   thread).
 * - free by the owning thread: 44 instructions: prove the pointer is ours
 *   (segment map, before reading any header), find its page (segment mask
 *   and the page kind's shift), check it is a block boundary the page
 *   handed out (one multiply, one rotate, one compare; in a small page,
 *   prefetch the block after it), check that the block is not free
 *   already (its free mark) and that the page is this heap's, push it,
 *   marked (LIFO: on the head page the next malloc of the class gets the
 *   block freed last, still in cache), and count `used` down. The head
 *   page and the others take the same path: a branch on which would be
 *   mispredicted on random frees.
 *   Another thread's block goes on the open batch for its page in its
 *   first slot (35 in all),
 *   else to _ts_free_other; anything unusual to _ts_free_slow.
 * Latency: in a loop that frees a block and mallocs its class again, the
 * malloc's load of page->free waits for the free's store to it; so the
 * free computes the page from the pointer alone, with the shift of each
 * page kind as a constant (the segment map's value only picks the branch),
 * which keeps a load off that chain. No locks and no atomic
 * read-modify-write on either path.
 */
#ifndef TS_CORE_FASTPATH_H
#define TS_CORE_FASTPATH_H

#include "core/internal.h"

/* Pop the head of a page's free list (not NULL). */
TS_INLINE void *ts_pop(ts_page_t *page, ts_block_t *block) {
    ts_assert(ts_block_marked(page, block)); /* checked build: a free block, not a stray link */
    ts_block_t *next = ts_link_get(page, block, "malloc");
    *ts_mark_word(block) = 0;
    page->free = next;
    __builtin_prefetch(next); /* often written last by another thread */
    return block;
}

TS_INLINE void *ts_core_malloc_inline(size_t size) {
    ts_heap_t *heap = _ts_tls_heap;
    if (ts_likely(size <= TS_DIRECT_MAX)) {
        size_t slot = (size + 15) >> 4;
        ts_page_t *page = heap->direct[slot];
        ts_block_t *block = page->free;
        if (ts_likely(block != NULL)) {
            heap->alloc_slot[slot]++;
            return ts_pop(page, block);
        }
    } else if (size <= TS_CLASS_BY_256_MAX) {
        unsigned cls = _ts_class_by_256[(size - 1) >> 8];
        ts_page_t *page = heap->head[cls];
        ts_block_t *block = page->free;
        if (ts_likely(block != NULL)) {
            heap->alloc_class[cls]++;
            return ts_pop(page, block);
        }
    } else if (size <= TS_CLASS_MAX_SIZE) {
        /* Big classes: their pages are never heads, so malloc counts `used`. */
        unsigned cls = _ts_class_by_16k[(size - 1) >> 14];
        ts_page_t *page = heap->head[cls];
        ts_block_t *block = page->free;
        if (ts_likely(block != NULL)) {
            page->used++;
            heap->alloc_class[cls]++;
            return ts_pop(page, block);
        }
    }
    return _ts_malloc_generic(size, heap);
}

/* Below: the second half of free's fast path. */
TS_INLINE void ts_free_block(ts_page_t *page, ts_block_t *block, uintptr_t mark);

/* The page of p for free's fast path: NULL when p is not a block boundary
 * that a small, medium or big page handed out (NULL, foreign, large). Also
 * the hardened build's (secure_fast.h, without fetch_next).
 *
 * fetch_next: prefetch the block after p in a small page. Programs often
 * free blocks in the order they made them (a list, a tree, an array of
 * objects); the next free's mark check then finds its line in cache instead
 * of waiting for it. Not in medium and big pages: their next block is often
 * memory never touched, where a prefetch finds nothing to bring. */
TS_INLINE ts_page_t *ts_free_page_of_fetch(const void *p, bool fetch_next) {
    uintptr_t u = (uintptr_t)p;
    size_t chunk = u >> TS_SEGMENT_SHIFT;
    if (ts_unlikely(chunk >= TS_SEGMAP_ENTRIES)) return NULL;
    unsigned shift = atomic_load_explicit(&_ts_segmap[chunk], memory_order_relaxed);
    ts_page_t *page;
    /* Constant shifts: the page's address then follows from p alone, and a
     * malloc that waits for this free's store to page->free does not also
     * wait for the segment map's load (which the branches only confirm). */
    if (ts_likely(shift == TS_SHIFT_SMALL)) {
        page = ts_small_page_of(p);
        if (fetch_next) __builtin_prefetch((const char *)p + page->block_size);
    } else if (shift == TS_SHIFT_MEDIUM)
        page = ts_page_of(ts_segment_of(p), p, TS_SHIFT_MEDIUM);
    else if (shift == TS_SHIFT_BIG)
        page = ts_page_of(ts_segment_of(p), p, TS_SHIFT_BIG);
    else
        return NULL;
    if (ts_unlikely(!ts_page_block_ok(page, u))) return NULL;
    return page;
}

TS_INLINE ts_page_t *ts_free_page_of(const void *p) {
    return ts_free_page_of_fetch(p, false);
}

TS_INLINE void ts_core_free_inline(void *p) {
    ts_page_t *page = ts_free_page_of_fetch(p, true);
    if (ts_unlikely(page == NULL)) goto slow;
    ts_block_t *block = p;
    uintptr_t mark = ts_mark_of(page, block);
    if (ts_unlikely(*ts_mark_word(block) == mark)) goto slow; /* free already */
    ts_free_block(page, block, mark);
    return;
slow:
    _ts_free_slow(p);
}

/* Give back a block proven to be a live block of `page`, with the free mark
 * it gets: also the hardened build's way out of its quarantine
 * (secure_fast.h). */
TS_INLINE void ts_free_block(ts_page_t *page, ts_block_t *block, uintptr_t mark) {
    ts_heap_t *heap = _ts_tls_heap;
    uintptr_t owner = ts_page_owner(page);
    if (ts_likely((owner & ~TS_OWNER_HEAD) == (uintptr_t)heap)) {
        /* Ours, the head or not: one path, so that random frees do not
         * mispredict a branch on which. A head's `used` only drifts down
         * from a bias here (internal.h). Loaded before the block's stores:
         * a decrement in place after them was 3-4% slower on a one-size loop. */
        uint32_t used = page->used - 1;
        ts_link_set(page, block, page->free);
        *ts_mark_word(block) = mark;
        page->free = block;
        page->used = used;
        if (ts_unlikely(used == 0) && !ts_page_lingers_again(heap, page))
            _ts_page_empty_at_free(heap, page);
        return;
    }
    /* Another thread's block (or our full page). A batch already open for
     * this page was checked when it opened; the page cannot be retired while
     * the batch holds some of its blocks. */
    ts_rbatch_t *b = heap->rbatch + (size_t)page->rslot;
    ts_block_t *batched = b->head;
    uint32_t count = b->count + 1;
    if (ts_likely(b->page == page)) {
        b->head = block;
        b->count = count;
        *ts_mark_word(block) = mark;
        ts_link_set(page, block, batched); /* last: the compiler cannot tell block from b */
        if (ts_unlikely(count >= page->rbatch_max)) _ts_rbatch_flush(heap, b);
        return;
    }
    _ts_free_other(heap, page, block);
}

/* For the override shim. */
#define TS_DESIGN_MALLOC_INLINE ts_core_malloc_inline
#define TS_DESIGN_FREE_INLINE   ts_core_free_inline

#endif
