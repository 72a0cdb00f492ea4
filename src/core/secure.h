/* The hardened build (TS_SECURE=1: libtsalloc-secure, docs/secure.md): the
 * encoding of free-list links, included by core/types.h in that build only,
 * and the functions of secure.c that the core's files call.
 *
 * A free block's first word links it to the next free block of a list: a
 * page's free list, a remote freer's batch, a page's thread_free chain, or a
 * heap's delayed list. It is stored as next ^ its own address ^ the page's
 * link key (drawn when the page is set up for a class), so an overflow or a
 * use after free that writes a chosen pointer there decodes to a random
 * address. Every decoded link is checked before it is followed: on a page's
 * own lists it must be NULL or lie among the page's blocks; on the delayed
 * list (blocks of many pages) it must be a block of one of our pages. A link
 * that fails aborts with "<func>(): corrupted free list at block <p>".
 */
#ifndef TS_CORE_SECURE_H
#define TS_CORE_SECURE_H

#include <stdbool.h>
#include <stdint.h>

#include "base/base.h"

TS_HIDDEN TS_NORETURN void _ts_secure_bad_link(const char *func, const void *block);

TS_INLINE ts_block_t *ts_link_encode(const ts_page_t *page, const ts_block_t *at,
                                     const ts_block_t *next) {
    return (ts_block_t *)((uintptr_t)next ^ (uintptr_t)at ^ page->link_key);
}

/* The link stored in `block`, a block of `page`, decoded and checked. */
TS_INLINE ts_block_t *ts_link_decode(const ts_page_t *page, const ts_block_t *block,
                                     const char *func) {
    uintptr_t next = (uintptr_t)block->next ^ (uintptr_t)block ^ page->link_key;
    if (ts_unlikely(next - page->link_lo >= page->link_span) && next != 0)
        _ts_secure_bad_link(func, block);
    return (ts_block_t *)next;
}

#define ts_link_get(page, block, func)  ts_link_decode((page), (block), (func))
#define ts_link_set(page, block, value) ((block)->next = ts_link_encode((page), (block), (value)))
#define ts_link_touch(page, block)      ts_link_decode((page), (block), "malloc")

/* A link of a heap's delayed list, whose blocks belong to many pages: `page`
 * is the page of `block` itself, the link must be a block of ours. */
TS_HIDDEN ts_block_t *_ts_secure_link_any(const ts_page_t *page, const ts_block_t *block,
                                          const char *func);

/* The last OS page of every segment is inaccessible (registry.c maps it so,
 * segment.c leaves it out of the last page's area): a linear overflow off
 * the segment's end faults before it reaches the next segment's header. */
#define TS_SEGMENT_GUARD ((size_t)4096)
TS_HIDDEN void _ts_secure_segment_guard(void *seg);
/* registry.c: a reservation of n segments at a random offset (in
 * segments) within a larger mapping, the rest given back: addresses with
 * more randomness than the kernel's placement. NULL when the OS refuses. */
TS_HIDDEN char *_ts_secure_reserve(unsigned n);

/* page.c: a page set up for a class draws its link key; its fresh blocks are
 * linked in a random order. */
TS_HIDDEN void _ts_secure_page_init(ts_page_t *page);
TS_HIDDEN void _ts_secure_carve(ts_page_t *page, char *first, uint32_t n);

/* secure_scan.c: the bits set in [from, to) (16-byte aligned, a multiple
 * of 16 bytes), 0 when none; its choice of loop made once, at set-up. */
TS_HIDDEN uint64_t _ts_secure_or_words(uintptr_t from, uintptr_t to);
TS_HIDDEN void _ts_secure_scan_init(void);

/* heap.c: a heap being abandoned frees the blocks in its quarantine first. */
TS_HIDDEN void _ts_secure_heap_flush(ts_heap_t *heap);

#endif
