/* The free-block index of a best-fit heap: two treaps threaded through the
 * free blocks, one ordered by address (neighbours for coalescing), one by the
 * key (size, address). The best fit is the least key >= (need, 0): the
 * smallest block that fits, the lowest address among equal sizes -- exactly
 * what a full linear scan picks, found in O(log n) expected steps. Treap
 * priorities are a hash of the node's address, so nothing extra is stored and
 * no input order can unbalance a tree.
 *
 * Invariants of a heap (between calls; nothing here locks, the caller
 * serialises each heap and each segment table):
 *   - no two of its free blocks are adjacent (coalesced eagerly);
 *   - the reserve, if any, ends at top_end and is in neither tree; every other
 *     free block is in both trees; any free block ending at top_end is the
 *     reserve;
 *   - free_bytes is the sum of its free blocks' sizes, headers included;
 *   - with a reserve, reserve <= clean_from and [clean_from + 16, top_end)
 *     holds only zeros. (The reserve only moves up by carving, which moves
 *     clean_from along; it moves down by merging below, leaving its old
 *     header at clean_from; a new chunk resets clean_from to its start.)
 *     Without a reserve, clean_from == top_end: a block that becomes the
 *     reserve later (one merged across top_end and split there, say) has had
 *     index links and user data written into it, so nothing is known clean.
 * Blocks are only ever coalesced by address arithmetic with the heap's own
 * free blocks, so two chunks with foreign memory between them never merge.
 */
#ifndef TS_DESIGNS_BESTFIT_FIT_INDEX_H
#define TS_DESIGNS_BESTFIT_FIT_INDEX_H

#include "designs/bestfit/fit_layout.h"

/* ---- the treaps ----------------------------------------------------------- */

static inline uint64_t fit_prio(const ts_fit_free_t *n) {
    return fit_mix((uintptr_t)n);
}

/* Strict order of tree t: by address, or by (size, address). */
static inline bool fit_before(int t, const ts_fit_free_t *a, const ts_fit_free_t *b) {
    if (t == FIT_BY_SIZE && a->size != b->size) return a->size < b->size;
    return (uintptr_t)a < (uintptr_t)b;
}

static inline void fit_tree_insert(ts_fit_heap_t *h, int t, ts_fit_free_t *x) {
    uint64_t px = fit_prio(x);
    ts_fit_free_t **link = &h->root[t];
    while (*link && fit_prio(*link) > px) link = &(*link)->link[t][fit_before(t, *link, x)];
    /* Split the subtree at *link around x's key; x becomes its root. */
    ts_fit_free_t *n = *link, **l = &x->link[t][0], **r = &x->link[t][1];
    while (n) {
        if (fit_before(t, n, x)) {
            *l = n;
            l = &n->link[t][1];
            n = *l;
        } else {
            *r = n;
            r = &n->link[t][0];
            n = *r;
        }
    }
    *l = *r = NULL;
    *link = x;
}

/* x must be in tree t under the key it was inserted with. */
static inline void fit_tree_erase(ts_fit_heap_t *h, int t, ts_fit_free_t *x) {
    ts_fit_free_t **link = &h->root[t];
    while (*link != x) {
        if (ts_unlikely(!*link)) fit_corrupt("free block missing from the index");
        link = &(*link)->link[t][fit_before(t, *link, x)];
    }
    /* Merge x's subtrees (all of a precede all of b) into its place. */
    ts_fit_free_t *a = x->link[t][0], *b = x->link[t][1];
    while (a && b) {
        if (fit_prio(a) > fit_prio(b)) {
            *link = a;
            link = &a->link[t][1];
            a = *link;
        } else {
            *link = b;
            link = &b->link[t][0];
            b = *link;
        }
    }
    *link = a ? a : b;
}

static inline void fit_index_insert(ts_fit_heap_t *h, ts_fit_free_t *x) {
    fit_tree_insert(h, FIT_BY_ADDR, x);
    fit_tree_insert(h, FIT_BY_SIZE, x);
}

static inline void fit_index_erase(ts_fit_heap_t *h, ts_fit_free_t *x) {
    fit_tree_erase(h, FIT_BY_ADDR, x);
    fit_tree_erase(h, FIT_BY_SIZE, x);
}

/* The indexed block with the least (size, address) such that size >= need. */
static inline ts_fit_free_t *fit_lower_bound(const ts_fit_heap_t *h, size_t need) {
    ts_fit_free_t *best = NULL, *n = h->root[FIT_BY_SIZE];
    while (n) {
        if (n->size >= need) {
            best = n;
            n = n->link[FIT_BY_SIZE][0];
        } else {
            n = n->link[FIT_BY_SIZE][1];
        }
    }
    return best;
}

/* Indexed neighbours of address a: the last block below it, the first above. */
static inline void fit_neighbours(const ts_fit_heap_t *h, uintptr_t a, ts_fit_free_t **below,
                                  ts_fit_free_t **above) {
    ts_fit_free_t *lo = NULL, *hi = NULL, *n = h->root[FIT_BY_ADDR];
    while (n) {
        if ((uintptr_t)n < a) {
            lo = n;
            n = n->link[FIT_BY_ADDR][1];
        } else {
            hi = n;
            n = n->link[FIT_BY_ADDR][0];
        }
    }
    *below = lo;
    *above = hi;
}

/* The indexed block starting exactly at a, or NULL. */
static inline ts_fit_free_t *fit_find(const ts_fit_heap_t *h, uintptr_t a) {
    ts_fit_free_t *n = h->root[FIT_BY_ADDR];
    while (n && (uintptr_t)n != a) n = n->link[FIT_BY_ADDR][(uintptr_t)n < a];
    return n;
}

/* The highest free block (reserve or indexed) starting below a, or NULL: the
 * one that may end at the break when mapped chunks lie above it. */
static inline ts_fit_free_t *fit_highest_below(const ts_fit_heap_t *h, uintptr_t a) {
    ts_fit_free_t *n = h->root[FIT_BY_ADDR], *best = NULL;
    while (n) {
        bool below = (uintptr_t)n < a;
        if (below) best = n;
        n = n->link[FIT_BY_ADDR][below];
    }
    ts_fit_free_t *r = h->reserve;
    if (r && (uintptr_t)r < a && (!best || (uintptr_t)r > (uintptr_t)best)) best = r;
    return best;
}

#endif
