/* The hardened build's malloc and free fast paths (TS_SECURE=1), as inline
 * functions: secure.c builds _ts_secure_malloc and _ts_secure_free from
 * them, and the override shim inlines them (ts_add_design(secure ...
 * INLINE_HEADER core/secure_fast.h)). Anything unusual goes to secure.c's
 * slow paths, which give every abort its message.
 *
 * Block layout (docs/secure.md): the core is asked for size + 8 bytes; the
 * last word of the core's block (its capacity `cap`) is the trailer:
 * slack << 32 | check, where slack = cap - 8 - size and check mixes the
 * block's address with a secret and the slack. Up to 8 bytes after the
 * request (the slack's first, when there is any) hold TS_SLACK_BYTE: one
 * unaligned store before the trailer's, which overwrites what of it falls
 * on the trailer.
 *
 * Freed blocks: zeroed but for word 1, the quarantine mark (the core's free
 * mark with its top bit clear, so one compare finds either), while they
 * wait in the heap's quarantine (secure.c).
 */
#ifndef TS_CORE_SECURE_FAST_H
#define TS_CORE_SECURE_FAST_H

#include <string.h>

#include "core/fastpath.h"

#define TS_PAD        ((size_t)8) /* the trailer */
#define TS_SLACK_BYTE 0xc5        /* slack bytes after the request */
#define TS_SLACK_WORD 0xc5c5c5c5c5c5c5c5ull
#define TS_MARK_TOP   ((uint64_t)1 << 63) /* set in every core free mark */
/* Mixed into the trailer's check of blocks made by operator new and new[]
 * (malloc's blocks mix in 0), so that each deallocating function sees a
 * block of another kind (secure.c decides what a mismatch costs). */
#define TS_KIND_NEW   0xbb67ae85u
#define TS_KIND_ARRAY 0x6a09e667u

/* Set once, before the first block (secure.c). */
TS_HIDDEN extern uint64_t _ts_secure_secret; /* odd */
TS_HIDDEN void *_ts_secure_malloc_slow(size_t size);
TS_HIDDEN void _ts_secure_free_slow(void *p);
TS_HIDDEN void *_ts_secure_new_slow(size_t size, uint32_t kind); /* operator new's */
TS_HIDDEN void _ts_secure_delete_slow(void *p);                  /* operator delete's */
TS_HIDDEN void _ts_secure_delete_array_slow(void *p);            /* operator delete[]'s */
TS_HIDDEN void _ts_secure_quarantine_make_room(ts_quarantine_t *q, size_t cap);
/* The rest of free for a checked class block of page that free's inline
 * part leaves (more than 128 bytes to zero, a full ring): zero, quarantine
 * or give back. A call at the end keeps the inline part free of calls. */
TS_HIDDEN void _ts_secure_free_rest(void *p, ts_page_t *page, size_t cap);
/* TSALLOC_ZERO_ON_FREE: bytes zeroed at the start of a freed block. */
TS_HIDDEN extern size_t _ts_secure_zero_max;
/* TSALLOC_QUARANTINE, in bytes. */
TS_HIDDEN extern size_t _ts_secure_quarantine_max;
/* The block size of each direct slot's class (heap->direct). */
TS_HIDDEN extern uint32_t _ts_secure_slot_cap[TS_DIRECT_SLOTS];

TS_INLINE uint32_t ts_secure_check(const void *p, uint64_t slack) {
    return (uint32_t)(((uintptr_t)p * _ts_secure_secret) >> 32) ^ (uint32_t)slack;
}
/* The quarantine mark of p, a block of page: its free mark but for the
 * top bit (never a core free mark, whose top bit is set). */
TS_INLINE uint64_t ts_secure_qmark(const ts_page_t *page, const void *p) {
    return ts_mark_of(page, p) ^ TS_MARK_TOP;
}
/* Whether word 1 of p is its free mark or its quarantine mark (one test). */
TS_INLINE bool ts_secure_freed(uint64_t word1, uint64_t mark) {
    return ((word1 ^ mark) << 1) == 0;
}
TS_INLINE uint64_t *ts_secure_trailer(void *p, size_t cap) {
    return (uint64_t *)((char *)p + cap - TS_PAD);
}

/* The bytes of a freed block of cap bytes that are zeroed (and checked when
 * it leaves quarantine): all, up to TSALLOC_ZERO_ON_FREE; at least the link
 * and the mark. */
TS_INLINE size_t ts_secure_zeroed(size_t cap) {
    size_t n = _ts_secure_zero_max;
    return cap <= n ? cap : n > 16 ? n & ~(size_t)15 : 16;
}

/* Zero the first n bytes (a multiple of 16, at most 128) of a freed block. */
TS_INLINE void ts_secure_zero_small(void *p, size_t n) {
    uint64_t *w = p;
    w[0] = w[1] = 0;
    if (n > 16) w[2] = w[3] = 0;
    if (n > 32) w[4] = w[5] = 0;
    if (n > 48) w[6] = w[7] = 0;
    if (n > 64) w[8] = w[9] = 0;
    if (n > 80) w[10] = w[11] = 0;
    if (n > 96) w[12] = w[13] = 0;
    if (n > 112) w[14] = w[15] = 0;
}

/* Zero a freed class block (small ones without a call). */
TS_INLINE void ts_secure_zero(void *p, size_t cap) {
    size_t n = ts_secure_zeroed(cap); /* a multiple of 16 */
    if (n > 128)
        memset(p, 0, n);
    else
        ts_secure_zero_small(p, n);
}

/* The bits of the slack pattern's word at the end of a request that are
 * the slack's (the rest fall on the trailer when slack < 8). */
TS_INLINE uint64_t ts_secure_fill_mask(uint64_t slack) {
    return slack >= 8 ? ~(uint64_t)0 : ~(~(uint64_t)0 << (slack * 8));
}

/* A full ring releases its oldest blocks this many at a time (secure.c), so
 * that most frees only append. */
#define TS_QUARANTINE_BATCH 8u

/* Put p, a checked and zeroed class block of cap bytes, in this thread's
 * quarantine (heap active), marked in its second word with qmark. */
TS_INLINE void ts_secure_quarantine(ts_heap_t *heap, void *p, size_t cap, uint64_t qmark) {
    ts_quarantine_t *q = &heap->quarantine;
    ((uint64_t *)p)[1] = qmark;
    if (ts_unlikely(q->count == TS_QUARANTINE_SLOTS || q->bytes + cap > _ts_secure_quarantine_max))
        _ts_secure_quarantine_make_room(q, cap);
    uint32_t at = (q->first + q->count) % TS_QUARANTINE_SLOTS;
    q->slot[at] = p;
    q->cap[at] = (uint32_t)cap;
    q->count++;
    q->bytes += cap;
}

/* p holds `size` bytes of a block of `cap` (the core's usable size), of
 * kind 0 (malloc), TS_KIND_NEW (new) or TS_KIND_ARRAY (new[]). */
TS_INLINE void ts_secure_seal_as(void *p, size_t size, size_t cap, uint32_t kind) {
    uint64_t slack = cap - TS_PAD - size, fill = TS_SLACK_WORD;
    memcpy((char *)p + size, &fill, 8); /* in the block: size + 8 <= cap */
    *ts_secure_trailer(p, cap) = slack << 32 | (ts_secure_check(p, slack) ^ kind);
}
#define ts_secure_seal(p, size, cap) ts_secure_seal_as((p), (size), (cap), 0)

/* The size asked for p, a live block of `cap` bytes and of that kind, or
 * SIZE_MAX when anything after it changed (or it is of another kind). */
TS_INLINE size_t ts_secure_sealed_size_as(void *p, size_t cap, uint32_t kind) {
    uint64_t w = *ts_secure_trailer(p, cap);
    uint64_t slack = w >> 32;
    if (ts_unlikely((uint32_t)w != (ts_secure_check(p, slack) ^ kind) || slack > cap - TS_PAD))
        return SIZE_MAX;
    size_t size = cap - TS_PAD - slack;
    uint64_t fill;
    memcpy(&fill, (const char *)p + size, 8);
    if (ts_unlikely((fill ^ TS_SLACK_WORD) & ts_secure_fill_mask(slack))) return SIZE_MAX;
    return size;
}
#define ts_secure_sealed_size(p, cap) ts_secure_sealed_size_as((p), (cap), 0)

/* malloc (kind 0), and operator new (TS_KIND_NEW) and new[] (TS_KIND_ARRAY):
 * a block sealed as that kind. */
TS_INLINE void *ts_secure_malloc_as(size_t size, uint32_t kind) {
    size_t asked = size + TS_PAD;
    if (ts_likely(asked - (TS_PAD + 1) < TS_DIRECT_MAX - TS_PAD)) { /* 1 .. 1016 */
        ts_heap_t *heap = _ts_tls_heap;
        size_t slot = (asked + 15) >> 4;
        ts_page_t *page = heap->direct[slot];
        ts_block_t *block = page->free;
        if (ts_likely(block != NULL)) {
            heap->alloc_slot[slot]++;
            ts_pop(page, block);
            ((uint64_t *)block)[0] = 0; /* the link: the rest was zeroed when freed */
            ts_secure_seal_as(block, size, _ts_secure_slot_cap[slot], kind);
            return block;
        }
    }
    return kind ? _ts_secure_new_slow(size, kind) : _ts_secure_malloc_slow(size);
}

TS_INLINE void *ts_secure_malloc_inline(size_t size) {
    return ts_secure_malloc_as(size, 0);
}

/* free (kind 0), and operator delete (TS_KIND_NEW) and delete[]
 * (TS_KIND_ARRAY): a block of another kind goes to `slow`, which accepts it
 * or aborts (secure.c). */
TS_INLINE void ts_secure_free_as(void *p, uint32_t kind, void (*slow)(void *)) {
    ts_page_t *page = ts_free_page_of(p);
    if (ts_unlikely(page == NULL)) goto slow; /* NULL, foreign, large or zero-size */
    uint64_t mark = ts_mark_of(page, p);
    if (ts_unlikely(ts_secure_freed(((uint64_t *)p)[1], mark))) goto slow;
    size_t cap = page->block_size;
    if (ts_unlikely(ts_secure_sealed_size_as(p, cap, kind) == SIZE_MAX)) goto slow;
    size_t n = ts_secure_zeroed(cap), max = _ts_secure_quarantine_max;
    if (ts_unlikely(n > 128)) goto rest;
    ts_heap_t *heap = _ts_tls_heap;
    if (ts_likely(heap->state == TS_HEAP_ACTIVE && cap <= max / 2)) {
        ts_quarantine_t *q = &heap->quarantine;
        if (ts_unlikely(q->count == TS_QUARANTINE_SLOTS || q->bytes + cap > max)) goto rest;
        ts_secure_zero_small(p, n);
        ((uint64_t *)p)[1] = mark ^ TS_MARK_TOP;
        uint32_t at = (q->first + q->count) % TS_QUARANTINE_SLOTS;
        q->slot[at] = p;
        q->cap[at] = (uint32_t)cap;
        q->count++;
        q->bytes += cap;
        return;
    }
    ts_secure_zero_small(p, n);
    ts_free_block(page, p, mark); /* straight back */
    return;
rest:
    _ts_secure_free_rest(p, page, cap);
    return;
slow:
    slow(p);
}

TS_INLINE void ts_secure_free_inline(void *p) {
    ts_secure_free_as(p, 0, _ts_secure_free_slow);
}

/* For the override shim (instead of the core's, which fastpath.h names). */
#undef TS_DESIGN_MALLOC_INLINE
#undef TS_DESIGN_FREE_INLINE
#define TS_DESIGN_MALLOC_INLINE ts_secure_malloc_inline
#define TS_DESIGN_FREE_INLINE   ts_secure_free_inline

#endif
