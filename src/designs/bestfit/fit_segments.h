/* Where best-fit memory comes from and goes back to: the segment table that
 * validates pointers, growth with sbrk (or a mapping when the break cannot
 * grow), heap-top give-back, and the two data-segment functions.
 *
 * Invariants: segments are sorted by start and never overlap; a pointer is
 * accepted only inside a recorded segment with a valid header; memory goes
 * back to the OS only at the top of this design's own break.
 * Lock order: the design's grow lock, then nothing else here (the table's
 * readers take no lock).
 */
#ifndef TS_DESIGNS_BESTFIT_FIT_SEGMENTS_H
#define TS_DESIGNS_BESTFIT_FIT_SEGMENTS_H

#include "designs/bestfit/fit_carve.h"

/* ---- the segment table ----------------------------------------------------
 * Sorted, read without a lock: a reader loads the table pointer and the
 * count with acquire; a writer (holding the design's grow lock) publishes an
 * entry before bumping the count, and on growth copies into a larger mapping
 * and publishes its pointer. Old tables are never unmapped, so a reader never
 * touches freed memory. Entries are sorted by start and never overlap; a
 * chunk that belongs before the last entry (a mapped chunk below an earlier
 * one, a break chunk below a mapped one) is inserted into a new copy of the
 * table, so a reader never sees an entry move. Only a break segment's end
 * changes in place (growth, give-back). */
typedef struct ts_fit_seg {
    uintptr_t start;
    _Atomic uintptr_t end;
} ts_fit_seg_t;

typedef struct ts_fit_segtab {
    size_t cap;
    _Atomic size_t count;
    ts_fit_seg_t seg[];
} ts_fit_segtab_t;

typedef struct ts_fit_segs {
    _Atomic(ts_fit_segtab_t *) tab;
    _Atomic uintptr_t last_end; /* end of this design's latest break chunk: the break, if ours */
    _Atomic size_t obtained;    /* the data segment: bytes obtained minus bytes given back */
    _Atomic size_t peak;
    _Atomic size_t wasted; /* in `obtained`, no block's: slack at unaligned breaks, and of mapped
                            * chunks their guards and the part not handed out (yet) */
    _Atomic size_t mapped; /* bytes of mapped chunks (in `obtained`; never given back) */
    uintptr_t map_next, map_end; /* the latest mapped chunk's part not handed out (grow lock) */
} ts_fit_segs_t;

/* The free block that ends at the break while the break is this design's
 * (what trim could give back), or NULL. */
static inline ts_fit_free_t *fit_break_top(const ts_fit_heap_t *h, ts_fit_segs_t *s) {
    uintptr_t at_break = FIT_LOAD(s->last_end);
    ts_fit_free_t *top = fit_highest_below(h, at_break);
    return top && fit_end(top) == at_break ? top : NULL;
}

/* ---- segments ------------------------------------------------------------- */

/* The segment containing [a, a + FIT_HEADER), or NULL. Lock-free. */
static inline ts_fit_seg_t *fit_segs_find(ts_fit_segs_t *s, uintptr_t a) {
    ts_fit_segtab_t *t = atomic_load_explicit(&s->tab, memory_order_acquire);
    if (!t) return NULL;
    size_t lo = 0, hi = atomic_load_explicit(&t->count, memory_order_acquire);
    /* Find the last segment starting at or below a (most lookups hit the last). */
    if (hi && t->seg[hi - 1].start <= a) {
        lo = hi - 1;
    } else {
        while (hi - lo > 1) {
            size_t mid = lo + (hi - lo) / 2;
            if (t->seg[mid].start <= a)
                lo = mid;
            else
                hi = mid;
        }
        if (hi == 0 || t->seg[lo].start > a) return NULL;
    }
    ts_fit_seg_t *g = &t->seg[lo];
    uintptr_t end = atomic_load_explicit(&g->end, memory_order_acquire);
    return a + FIT_HEADER <= end && a + FIT_HEADER > a ? g : NULL;
}

/* Index of the first entry of t starting above a (== count when none). */
static inline size_t fit_segs_upper(const ts_fit_segtab_t *t, size_t count, uintptr_t a) {
    size_t lo = 0, hi = count;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (t->seg[mid].start <= a)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* Records chunk [start, end): extends the segment ending at `start` when
 * `contiguous` (break chunks), else adds a segment in address order, in place
 * when it goes last and fits, otherwise in a new copy of the table (readers
 * of the old one still find every older segment). False (errno ENOMEM) when
 * no table could be mapped. Caller holds the grow lock. */
static inline bool fit_segs_record(ts_fit_segs_t *s, uintptr_t start, uintptr_t end,
                                   bool contiguous) {
    ts_fit_segtab_t *t = atomic_load_explicit(&s->tab, memory_order_relaxed);
    size_t count = t ? atomic_load_explicit(&t->count, memory_order_relaxed) : 0;
    size_t at = t ? fit_segs_upper(t, count, start) : 0;
    if (contiguous && at && FIT_LOAD(t->seg[at - 1].end) == start) {
        atomic_store_explicit(&t->seg[at - 1].end, end, memory_order_release);
        return true;
    }
    if (t && at == count && count < t->cap) {
        t->seg[count].start = start;
        atomic_store_explicit(&t->seg[count].end, end, memory_order_relaxed);
        atomic_store_explicit(&t->count, count + 1, memory_order_release);
        return true;
    }
    size_t page = _ts_os_page_size();
    size_t cap = !t               ? (page - sizeof(ts_fit_segtab_t)) / sizeof(ts_fit_seg_t)
                 : count < t->cap ? t->cap
                                  : t->cap * 2;
    size_t bytes = ts_align_up(sizeof(ts_fit_segtab_t) + cap * sizeof(ts_fit_seg_t), page);
    ts_fit_segtab_t *n = _ts_os_map(bytes);
    if (!n) return false;
    n->cap = (bytes - sizeof(ts_fit_segtab_t)) / sizeof(ts_fit_seg_t);
    for (size_t i = 0, j = 0; i <= count; i++, j++) {
        if (i == at) {
            n->seg[j].start = start;
            atomic_store_explicit(&n->seg[j].end, end, memory_order_relaxed);
            j++;
        }
        if (i == count) break;
        n->seg[j].start = t->seg[i].start;
        atomic_store_explicit(&n->seg[j].end, FIT_LOAD(t->seg[i].end), memory_order_relaxed);
    }
    atomic_store_explicit(&n->count, count + 1, memory_order_relaxed);
    atomic_store_explicit(&s->tab, n, memory_order_release); /* the old table stays mapped */
    return true;
}

static inline void fit_segs_count(ts_fit_segs_t *s, size_t bytes, size_t waste) {
    size_t total = FIT_LOAD(s->obtained) + bytes;
    FIT_STORE(s->obtained, total);
    if (total > FIT_LOAD(s->peak)) FIT_STORE(s->peak, total);
    if (waste) FIT_STORE(s->wasted, FIT_LOAD(s->wasted) + waste);
}

/* When the break cannot grow: hands out *incp bytes (rounded to 16) from
 * the latest mapped chunk, which every heap of the design shares the way they
 * share the break, and maps a new chunk when it runs out: at least
 * FIT_MAP_MIN and 1/FIT_MAP_GROWTH_DIV of what is mapped already, so that
 * mappings stay few however many thread heaps grow. A chunk is one segment,
 * with FIT_MAP_GUARD unused bytes at each end; what is handed out from it is
 * contiguous, as break chunks are. A chunk counts in `obtained` from when it
 * is mapped, its part not handed out yet in `wasted`. Never given back: the
 * break's give-back cannot reach it. Returns the start and sets *incp; NULL
 * with ENOMEM. Grow lock held; *incp is at most PTRDIFF_MAX / 2 (the caller's
 * check). */
static inline void *fit_segs_map(ts_fit_segs_t *s, size_t *incp) {
    size_t want = ts_align_up(*incp, 16);
    if (s->map_end - s->map_next < want) {
        size_t bytes = want + 2 * FIT_MAP_GUARD, floor = FIT_LOAD(s->mapped) / FIT_MAP_GROWTH_DIV;
        if (bytes < FIT_MAP_MIN) bytes = FIT_MAP_MIN;
        if (bytes < floor) bytes = floor;
        bytes = ts_align_up(bytes, _ts_os_page_size());
        char *m = _ts_os_map(bytes);
        if (!m) return NULL;
        if (!fit_segs_record(s, (uintptr_t)m, (uintptr_t)m + bytes, false)) {
            _ts_os_unmap(m, bytes);
            errno = ENOMEM;
            return NULL;
        }
        FIT_STORE(s->mapped, FIT_LOAD(s->mapped) + bytes);
        fit_segs_count(s, bytes, bytes); /* the previous chunk's rest stays unused */
        s->map_next = (uintptr_t)m + FIT_MAP_GUARD;
        s->map_end = (uintptr_t)m + bytes - FIT_MAP_GUARD;
    }
    uintptr_t piece = s->map_next;
    s->map_next += want;
    FIT_STORE(s->wasted, FIT_LOAD(s->wasted) - want);
    *incp = want;
    return (void *)piece;
}

/* Obtains a chunk for *incp bytes of blocks: sbrk(*incp) when the break can
 * grow, else a mapping (fit_segs_map), as glibc does. Records it and returns
 * its start, with *incp set to its size (a break chunk may grow by up to 15
 * bytes of padding); NULL with errno ENOMEM. Caller holds the grow lock. */
static inline void *fit_segs_obtain(ts_fit_segs_t *s, size_t *incp) {
    /* Someone left the break unaligned (an sbrk of an odd size): pad the chunk
     * so that it ends aligned. Otherwise it and every later chunk lose 16
     * bytes at each end, never merge with the previous one, and a request
     * larger than the grow chunk never fits in its own chunk. */
    size_t want = *incp, inc = want + (size_t)(-(uintptr_t)_ts_os_brk_current() & 15);
    if (inc > (size_t)PTRDIFF_MAX / 2) {
        errno = ENOMEM;
        return NULL;
    }
    char *old = _ts_os_sbrk((intptr_t)inc);
    if (!old) return fit_segs_map(s, incp);
    uintptr_t start = (uintptr_t)old, end = start + inc;
    if (!fit_segs_record(s, start, end, true)) { /* cannot track it: undo */
        if (!_ts_os_sbrk_shrink_if_top((void *)end, inc)) fit_segs_count(s, inc, inc);
        errno = ENOMEM;
        return NULL;
    }
    FIT_STORE(s->last_end, end);
    fit_segs_count(s, inc, (ts_align_up_ptr(start, 16) - start) + (end & 15));
    *incp = inc;
    return old;
}

/* Touches the pages of a chunk just obtained for a block of `need` bytes, so
 * that the first-touch page faults of the block headers soon written there
 * are taken here, by the growing thread outside any heap lock, and not later
 * inside one. Only where headers are sure to come: a chunk grown for a block
 * smaller than a page is carved into many such blocks, a header or more per
 * page, so its pages are touched up to `limit` bytes (the grow chunk). For a
 * larger block nothing is touched: its header usually lands in the old top
 * (fit_add_chunk extends it), the rest of the chunk is payload the program
 * may never write, and a page touched here stays resident. The memory is
 * fresh and ours: writing zeros changes nothing. */
static inline void fit_prefault(void *old, size_t inc, size_t need, size_t limit) {
    size_t page = _ts_os_page_size();
    if (need >= page) return;
    volatile char *p = old, *end = (char *)old + (inc < limit ? inc : limit);
    *p = 0;
    for (p = (volatile char *)ts_align_up_ptr((uintptr_t)old, page); p < end; p += page) *p = 0;
}

/* The sbrk increment for a heap that lacks a block of `need` bytes. */
static inline size_t fit_grow_size(const ts_fit_config_t *cfg, size_t need) {
    return need > cfg->grow_chunk ? need : cfg->grow_chunk;
}

/* Adds chunk [old, old + inc) to h as its new top. No lock needed beyond h's. */
static inline void fit_add_chunk(ts_fit_heap_t *h, void *old, size_t inc) {
    uintptr_t start = ts_align_up_ptr((uintptr_t)old, 16), end = ((uintptr_t)old + inc) & ~15ul;
    if (end <= start || end - start < FIT_MIN_BLOCK) return; /* only slack: counted as wasted */
    ts_fit_free_t *r = h->reserve;
    if (r && fit_end(r) == start) {
        /* The reserve grows over the chunk; no header is written in it, so
         * none of its pages is touched and all of it stays clean. */
        fit_set_free(r, end - (uintptr_t)r);
        fit_add_free(h, end - start);
        h->top_end = end;
        return;
    }
    if (r) { /* the old top is no longer the top */
        h->reserve = NULL;
        fit_index_insert(h, r);
    }
    h->clean_from = start; /* below it, nothing is known to be clean */
    h->top_end = end;
    ts_fit_free_t *x = (ts_fit_free_t *)start;
    fit_set_free(x, end - start);
    /* Merged into a block below: x's header is now stale bytes of fresh memory. */
    if (fit_put(h, x) != x) memset(x, 0, FIT_HEADER);
}

/* Gives back the part of free block f above max(keep, FIT_MIN_BLOCK) bytes
 * (to a page boundary) when f ends at this design's break. Caller holds the
 * grow lock and owns h. True when the break moved. */
static inline bool fit_give_back(ts_fit_heap_t *h, ts_fit_segs_t *s, ts_fit_free_t *f,
                                 size_t keep) {
    uintptr_t start = (uintptr_t)f, end = fit_end(f);
    if (end != FIT_LOAD(s->last_end)) return false;
    if (keep < FIT_MIN_BLOCK) keep = FIT_MIN_BLOCK;
    if (keep >= f->size) return false;
    uintptr_t new_end = ts_align_up_ptr(start + keep, _ts_os_page_size());
    if (new_end >= end) return false;
    size_t give = end - new_end;
    if (!_ts_os_sbrk_shrink_if_top((void *)end, give)) return false;
    /* The break segment holding f (mapped chunks may sort above it). */
    ts_fit_segtab_t *t = atomic_load_explicit(&s->tab, memory_order_relaxed);
    size_t at = fit_segs_upper(t, atomic_load_explicit(&t->count, memory_order_relaxed), start);
    atomic_store_explicit(&t->seg[at - 1].end, new_end, memory_order_release);
    FIT_STORE(s->last_end, new_end);
    FIT_STORE(s->obtained, FIT_LOAD(s->obtained) - give);
    if (f == h->reserve) {
        fit_set_free(f, new_end - start);
        h->top_end = new_end;
        if (h->clean_from > new_end) h->clean_from = new_end; /* regrown memory is fresh */
    } else {
        fit_tree_erase(h, FIT_BY_SIZE, f);
        fit_set_free(f, new_end - start);
        if (h->top_end > start && h->top_end <= end && new_end <= h->top_end) {
            /* f reached across top_end (a neighbour's chunk joined it): h has
             * no reserve (it would end inside f), so f is the new top. When
             * top_end lies above f (a mapped chunk, or memory already given
             * back), f just stays indexed. */
            fit_tree_erase(h, FIT_BY_ADDR, f);
            h->reserve = f;
            h->top_end = h->clean_from = new_end;
        } else {
            fit_tree_insert(h, FIT_BY_SIZE, f);
        }
    }
    fit_sub_free(h, give);
    return true;
}

/* ---- pointer validation --------------------------------------------------- */

/* The in-use block whose payload is ptr. Aborts naming `func` when ptr is not
 * a block of these segments ("invalid pointer"), or, when `freeing`, is a
 * block already free ("double free"). */
static inline ts_fit_block_t *fit_checked_block(ts_fit_segs_t *s, const void *ptr, const char *func,
                                                bool freeing) {
    uintptr_t a = (uintptr_t)ptr, b = a - FIT_HEADER;
    ts_fit_seg_t *g;
    if (ts_unlikely((a & 15) || a < FIT_HEADER || !(g = fit_segs_find(s, b))))
        _ts_invalid_pointer(func, ptr);
    ts_fit_block_t *blk = (ts_fit_block_t *)b;
    size_t word = blk->word, size = word & ~FIT_INUSE;
    uintptr_t end = atomic_load_explicit(&g->end, memory_order_acquire);
    if (ts_likely(blk->check == fit_check_word(b, word, fit_owner(blk)) && size >= FIT_MIN_BLOCK &&
                  (size & 15) == 0 && b >= g->start && size <= end - b)) {
        if (ts_likely(word & FIT_INUSE)) return blk;
        if (freeing) _ts_double_free(func, ptr);
    }
    _ts_invalid_pointer(func, ptr);
}

/* ---- the two data-segment functions ---------------------------------------
 * Both designs define get_data_segment_size and get_data_segment_free_space_size
 * as identical weak functions: each adds what its own design reports to what
 * the other design reports if it is linked in (a weak reference, NULL when
 * absent). Whichever copy the linker keeps, the answer is the same: the bytes
 * the linked designs obtained with sbrk, or mapped when the break could not
 * grow (minus what they gave back), and the bytes in their free blocks,
 * headers included. */
#define FIT_DEFINE_DATA_SEGMENT_API(own, other)                                                    \
    extern TS_HIDDEN size_t other##_segment_bytes(void) __attribute__((weak));                     \
    extern TS_HIDDEN size_t other##_free_space_bytes(void) __attribute__((weak));                  \
    TS_EXPORT __attribute__((weak)) unsigned long get_data_segment_size(void) {                    \
        return own##_segment_bytes() + (other##_segment_bytes ? other##_segment_bytes() : 0);      \
    }                                                                                              \
    TS_EXPORT __attribute__((weak)) unsigned long get_data_segment_free_space_size(void) {         \
        return own##_free_space_bytes() +                                                          \
               (other##_free_space_bytes ? other##_free_space_bytes() : 0);                        \
    }

#endif
