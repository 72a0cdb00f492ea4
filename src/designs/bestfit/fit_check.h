/* Debugging of a best-fit heap: walking its free blocks in address order
 * and checking every invariant of fit_index.h and fit_layout.h (used by the
 * designs' debug hooks, hence by the tests). Reads only; the caller holds
 * the heap's lock.
 */
#ifndef TS_DESIGNS_BESTFIT_FIT_CHECK_H
#define TS_DESIGNS_BESTFIT_FIT_CHECK_H

#include "designs/bestfit/fit_segments.h"

/* ---- debugging: walk and check ------------------------------------------- */

/* Calls fn(start, size, is_reserve, arg) for each free block in address order. */
typedef void (*ts_fit_walk_fn)(uintptr_t start, size_t size, int is_reserve, void *arg);

static inline void fit_walk_tree(const ts_fit_free_t *n, const ts_fit_free_t **reserve,
                                 ts_fit_walk_fn fn, void *arg) {
    while (n) {
        fit_walk_tree(n->link[FIT_BY_ADDR][0], reserve, fn, arg);
        if (*reserve && (uintptr_t)*reserve < (uintptr_t)n) {
            fn((uintptr_t)*reserve, (*reserve)->size, 1, arg);
            *reserve = NULL;
        }
        fn((uintptr_t)n, n->size, 0, arg);
        n = n->link[FIT_BY_ADDR][1];
    }
}

static inline void fit_walk(const ts_fit_heap_t *h, ts_fit_walk_fn fn, void *arg) {
    const ts_fit_free_t *reserve = h->reserve;
    fit_walk_tree(h->root[FIT_BY_ADDR], &reserve, fn, arg);
    if (reserve) fn((uintptr_t)reserve, reserve->size, 1, arg);
}

typedef struct {
    ts_fit_segs_t *segs;
    uintptr_t prev_end;
    size_t count, bytes;
    const char *error;
} fit_check_state_t;

static inline void fit_check_one(uintptr_t start, size_t size, int is_reserve, void *arg) {
    fit_check_state_t *st = arg;
    const ts_fit_free_t *f = (const ts_fit_free_t *)start;
    ts_fit_seg_t *g = fit_segs_find(st->segs, start);
    (void)is_reserve;
    if (st->error) return;
    if (size < FIT_MIN_BLOCK || (size & 15) || (start & 15))
        st->error = "bad free block size";
    else if (f->check != fit_check_word(start, size, 0))
        st->error = "bad free block header";
    else if (!g || start < g->start || start + size > FIT_LOAD(g->end))
        st->error = "free block outside the segments";
    else if (start < st->prev_end)
        st->error = "free blocks overlap or are out of order";
    else if (start == st->prev_end)
        st->error = "adjacent free blocks not coalesced";
    st->prev_end = start + size;
    st->count++;
    st->bytes += size;
}

/* Size-tree order check; returns the node count, or SIZE_MAX on disorder. */
static inline size_t fit_check_size_tree(const ts_fit_heap_t *h, const ts_fit_free_t *n,
                                         const ts_fit_free_t **prev) {
    size_t count = 0;
    while (n) {
        size_t left = fit_check_size_tree(h, n->link[FIT_BY_SIZE][0], prev);
        if (left == SIZE_MAX) return SIZE_MAX;
        if ((*prev && !fit_before(FIT_BY_SIZE, *prev, n)) || fit_find(h, (uintptr_t)n) != n)
            return SIZE_MAX;
        *prev = n;
        count += left + 1;
        n = n->link[FIT_BY_SIZE][1];
    }
    return count;
}

/* NULL when h satisfies every invariant, else what is wrong. */
static inline const char *fit_check(const ts_fit_heap_t *h, ts_fit_segs_t *s) {
    fit_check_state_t st = {s, 0, 0, 0, NULL};
    fit_walk(h, fit_check_one, &st);
    if (st.error) return st.error;
    if (st.bytes != FIT_LOAD(h->free_bytes)) return "free_bytes differs from the free blocks";
    if (h->reserve) {
        if (fit_end(h->reserve) != h->top_end) return "reserve does not end at the heap top";
        if (fit_find(h, (uintptr_t)h->reserve)) return "reserve is in the index";
        if ((uintptr_t)h->reserve > h->clean_from) return "reserve above clean_from";
        uintptr_t from = h->clean_from + FIT_HEADER;
        /* The first 64 KiB of the clean part must read as zeros. */
        for (uintptr_t a = from; a < h->top_end && a < from + 65536; a += 8)
            if (*(const uint64_t *)a != 0) return "memory marked clean is not zero";
    } else if (h->clean_from != h->top_end) {
        return "clean_from below the top without a reserve";
    }
    const ts_fit_free_t *prev = NULL;
    size_t indexed = fit_check_size_tree(h, h->root[FIT_BY_SIZE], &prev);
    if (indexed == SIZE_MAX) return "size tree out of order or not matching the address tree";
    if (indexed + (h->reserve ? 1 : 0) != st.count) return "size and address trees differ";
    ts_fit_free_t *top = fit_highest_below(h, UINTPTR_MAX);
    if (top && top != h->reserve && fit_end(top) == h->top_end) return "top block not the reserve";
    return NULL;
}

#endif
