/* Split and coalesce: taking the best fit out of a heap (splitting it when
 * the remainder is worth keeping), putting a free block back (merging with
 * its free neighbours at once), and resizing or aligning an in-use block in
 * place.
 *
 * Invariants: every function leaves the heap invariants of fit_index.h true;
 * only the heap's own free blocks are ever merged, by address arithmetic, so
 * no neighbour's boundary tag is read (in bestfit-tls it may be another
 * thread's). The caller serialises the heap.
 */
#ifndef TS_DESIGNS_BESTFIT_FIT_CARVE_H
#define TS_DESIGNS_BESTFIT_FIT_CARVE_H

#include "designs/bestfit/fit_index.h"

/* ---- take and put --------------------------------------------------------- */

/* Best fit for a block of `need` bytes (a fit_block_size value), marked in
 * use, or NULL when no free block of the heap is large enough. The reserve is
 * carved from its front (the free space stays at the top, where it can be
 * given back); an indexed block from its back (its address, hence its place
 * in the address tree, stays). *clean (if not NULL) tells whether the payload
 * is all zeros. The block is marked as `owner`'s. */
static inline ts_fit_block_t *fit_take(ts_fit_heap_t *h, const ts_fit_config_t *cfg, size_t need,
                                       unsigned owner, bool *clean) {
    ts_fit_free_t *c = fit_lower_bound(h, need), *r = h->reserve;
    ts_fit_block_t *b;
    size_t got;
    bool zeros = false;
    if (r && r->size >= need &&
        (!c || r->size < c->size || (r->size == c->size && (uintptr_t)r < (uintptr_t)c))) {
        size_t rest = r->size - need;
        b = (ts_fit_block_t *)r;
        if (rest >= cfg->min_split) {
            ts_fit_free_t *nr = (ts_fit_free_t *)((char *)r + need);
            fit_set_free(nr, rest);
            h->reserve = nr;
            got = need;
        } else {
            h->reserve = NULL;
            got = r->size;
        }
        zeros = (uintptr_t)r >= h->clean_from;
        if ((uintptr_t)r + got > h->clean_from) h->clean_from = (uintptr_t)r + got;
    } else if (c) {
        size_t rest = c->size - need;
        if (rest >= cfg->min_split) {
            fit_tree_erase(h, FIT_BY_SIZE, c);
            fit_set_free(c, rest);
            b = (ts_fit_block_t *)((char *)c + rest);
            if ((uintptr_t)b == h->top_end) {
                /* c reached across top_end (a neighbour's chunk joined it)
                 * and now ends there: it is the reserve, with nothing clean. */
                fit_tree_erase(h, FIT_BY_ADDR, c);
                h->reserve = c;
            } else {
                fit_tree_insert(h, FIT_BY_SIZE, c);
            }
            got = need;
        } else {
            fit_index_erase(h, c);
            b = (ts_fit_block_t *)c;
            got = c->size;
        }
    } else {
        return NULL;
    }
    fit_set_used(b, got, owner);
    fit_sub_free(h, got);
    if (clean) *clean = zeros;
    return b;
}

/* Adds free block x (header already free, in no heap) to h, coalescing with
 * h's free neighbours on both sides. Returns the block that now holds x. */
static inline ts_fit_free_t *fit_put(ts_fit_heap_t *h, ts_fit_free_t *x) {
    uintptr_t lo = (uintptr_t)x, hi = lo + x->size;
    fit_add_free(h, x->size);
    ts_fit_free_t *below, *above, *r = h->reserve, *base = x;
    bool base_indexed = false; /* base is `below`, still in the address tree */
    fit_neighbours(h, lo, &below, &above);
    if (above && (uintptr_t)above == hi) {
        fit_index_erase(h, above);
        hi += above->size;
    } else if (r && (uintptr_t)r == hi) {
        hi += r->size;
        h->reserve = r = NULL;
    }
    if (below && fit_end(below) == lo) {
        fit_tree_erase(h, FIT_BY_SIZE, below);
        base = below;
        base_indexed = true;
    } else if (r && fit_end(r) == lo) {
        base = r;
        h->reserve = NULL;
    }
    fit_set_free(base, hi - (uintptr_t)base);
    if (hi == h->top_end) {
        if (base_indexed) fit_tree_erase(h, FIT_BY_ADDR, base);
        h->reserve = base;
    } else {
        if (!base_indexed) fit_tree_insert(h, FIT_BY_ADDR, base);
        fit_tree_insert(h, FIT_BY_SIZE, base);
    }
    /* A reserve absorbed from below or above got index links (and base may
     * hold user data): no part of a later reserve is known clean. */
    if (!h->reserve) h->clean_from = h->top_end;
    return base;
}

/* Removes some free block from h (for handing a heap over), or NULL. */
static inline ts_fit_free_t *fit_pop(ts_fit_heap_t *h) {
    ts_fit_free_t *x = h->reserve;
    if (x) {
        h->reserve = NULL;
        h->clean_from = h->top_end;
    } else if ((x = h->root[FIT_BY_ADDR]) != NULL) {
        fit_index_erase(h, x);
    } else {
        return NULL;
    }
    fit_sub_free(h, x->size);
    return x;
}

/* ---- resizing in place ---------------------------------------------------- */

/* Resizes in-use block b to `need` bytes without moving it, using only h's
 * free blocks: shrinking splits the tail off (if worth it) and puts it into h;
 * growing absorbs h's free block right after b when large enough. Returns
 * false when it cannot grow. *freed is set to a block put into h, or NULL. */
static inline bool fit_resize(ts_fit_heap_t *h, const ts_fit_config_t *cfg, ts_fit_block_t *b,
                              size_t need, ts_fit_free_t **freed) {
    size_t size = fit_used_size(b);
    *freed = NULL;
    if (need <= size) {
        if (size - need >= cfg->min_split) {
            ts_fit_free_t *tail = (ts_fit_free_t *)((char *)b + need);
            fit_set_used(b, need, fit_owner(b));
            fit_set_free(tail, size - need);
            *freed = fit_put(h, tail);
        }
        return true;
    }
    uintptr_t next = (uintptr_t)b + size;
    bool is_reserve = h->reserve && (uintptr_t)h->reserve == next;
    ts_fit_free_t *n = is_reserve ? h->reserve : fit_find(h, next);
    if (!n || size + n->size < need) return false;
    size_t total = size + n->size, got = need;
    if (is_reserve)
        h->reserve = NULL;
    else
        fit_index_erase(h, n);
    if (total - need >= cfg->min_split) {
        ts_fit_free_t *rest = (ts_fit_free_t *)((char *)b + need);
        fit_set_free(rest, total - need);
        /* Its upper neighbour was n's: not free in h. Only n may have been the reserve. */
        if (is_reserve)
            h->reserve = rest;
        else
            fit_index_insert(h, rest);
    } else {
        got = total;
    }
    if (is_reserve && (uintptr_t)b + got > h->clean_from) h->clean_from = (uintptr_t)b + got;
    fit_sub_free(h, got - size);
    fit_set_used(b, got, fit_owner(b));
    return true;
}

/* Turns in-use block b, of at least need + align + FIT_MIN_BLOCK bytes, into
 * a block of `need` bytes whose payload is aligned to `align` (a power of two
 * > 16); the slack before and after goes back to h. */
static inline ts_fit_block_t *fit_align(ts_fit_heap_t *h, const ts_fit_config_t *cfg,
                                        ts_fit_block_t *b, size_t align, size_t need,
                                        ts_fit_free_t **freed) {
    uintptr_t p = (uintptr_t)fit_payload(b), q = ts_align_up_ptr(p, align);
    /* A leading gap must be able to stand as a free block of its own. */
    while (q != p && q - p < FIT_MIN_BLOCK) q += align;
    size_t lead = q - p;
    ts_fit_free_t *lead_free = NULL;
    if (lead) {
        ts_fit_block_t *nb = (ts_fit_block_t *)((char *)b + lead);
        fit_set_used(nb, fit_used_size(b) - lead, fit_owner(b));
        ts_fit_free_t *f = (ts_fit_free_t *)b;
        fit_set_free(f, lead);
        lead_free = fit_put(h, f);
        b = nb;
    }
    fit_resize(h, cfg, b, need, freed);
    if (!*freed) *freed = lead_free;
    return b;
}

#endif
