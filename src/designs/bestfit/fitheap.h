/* Best-fit heap machinery shared by the bestfit and bestfit-tls designs: the
 * block layout, the free-block index, split and coalesce, growth with sbrk,
 * heap-top give-back and the segment table that validates pointers.
 *
 * Header-only (static inline) on purpose: each design compiles its own copy,
 * so the code is written once and yet the two designs' objects, linked
 * together in libtsalloc-classic, define no symbol twice.
 *
 * Terms.
 *   block    [b, b + size) in the data segment; a 16-byte header, then the
 *            payload at b + 16. size is a multiple of 16 and >= FIT_MIN_BLOCK.
 *   chunk    what one sbrk call obtained or, when the break cannot grow (a
 *            mapping above it, say), one mapping from _ts_os_map. A mapped
 *            chunk keeps 16 bytes unused at each end (FIT_MAP_GUARD), so none
 *            of its blocks ever touches memory outside it: blocks never
 *            coalesce across a chunk boundary that is not break-contiguous.
 *   segment  a maximal run of address-contiguous break chunks of one design,
 *            or one mapped chunk. A foreign sbrk (glibc's, say) between two
 *            break chunks starts a new one.
 *   heap     a set of free blocks with its index: bestfit has one, bestfit-tls
 *            one per thread plus the shared heap of exited threads.
 *   reserve  a heap's free block that ends where the heap's latest chunk ends
 *            (top_end). It is kept out of the index so that carving the
 *            growing end of the heap costs O(1), yet it takes part in every
 *            best-fit comparison, so the choice stays exact.
 *   clean    memory of the reserve above clean_from, which nobody has written
 *            since sbrk gave it (zero-filled) but for, at most, one stale
 *            header at clean_from itself. A block carved at clean_from (or
 *            above) thus has an all-zero payload: calloc need not clear it.
 *
 * Block header: word 0 = size | FIT_INUSE; word 1 = check: the owner (16
 * bits, bestfit-tls's id of the allocating thread, 0 otherwise and for free
 * blocks) above a 48-bit hash of the header's address, word 0 and the owner.
 * A real header is told from stray bytes by the hash, and a free one from an
 * in-use one by the flag (both are hashed).
 * A free block carries its index links after the header (48 bytes in all).
 *
 * The index: two treaps threaded through the free blocks, one ordered by
 * address (neighbours for coalescing), one by the key (size, address). The
 * best fit is the least key >= (need, 0): the smallest block that fits, the
 * lowest address among equal sizes -- exactly what a full linear scan picks,
 * found in O(log n) expected steps. Treap priorities are a hash of the node's
 * address, so nothing extra is stored and no input order can unbalance a tree.
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
#ifndef TS_DESIGNS_BESTFIT_FITHEAP_H
#define TS_DESIGNS_BESTFIT_FITHEAP_H

#include <errno.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "base/base.h"

#define FIT_HEADER    16
#define FIT_INUSE     ((size_t)1)
#define FIT_MIN_BLOCK 48 /* header + the four index links of a free block */
/* Larger requests fail with ENOMEM before any arithmetic can overflow. */
#define FIT_MAX_REQUEST ((size_t)PTRDIFF_MAX / 4)

/* Compile-time defaults of the TSALLOC_BESTFIT_* options (docs/bestfit.md). */
#define FIT_DEFAULT_MIN_SPLIT      32           /* payload bytes a split-off remainder must hold */
#define FIT_DEFAULT_TRIM_THRESHOLD (128 * 1024) /* give back a free top larger than this */
#define FIT_DEFAULT_GROW_CHUNK     (64 * 1024)  /* smallest sbrk increment */
#define FIT_GROW_TRIES             3 /* sbrk attempts per malloc (another thread may take a chunk) */
/* A mapped chunk (the break could not grow) is at least this large, and at
 * least 1/FIT_MAP_GROWTH_DIV of the bytes mapped so far, so that few of them
 * exist: each may cost a copy of the segment table. */
#define FIT_MAP_MIN        ((size_t)1 << 20)
#define FIT_MAP_GROWTH_DIV 8
#define FIT_MAP_GUARD      16 /* bytes left unused at each end of a mapped chunk */
#define FIT_OWNER_SHIFT    48
#define FIT_OWNER_MAX      0xffffu

enum { FIT_BY_ADDR = 0, FIT_BY_SIZE = 1 };

typedef struct ts_fit_block {
    size_t word; /* size | FIT_INUSE */
    uintptr_t check;
} ts_fit_block_t;

typedef struct ts_fit_free {
    size_t size; /* word 0 of a free block: the size, no flag */
    uintptr_t check;
    struct ts_fit_free *link[2][2]; /* [FIT_BY_ADDR or FIT_BY_SIZE][left, right] */
} ts_fit_free_t;

_Static_assert(sizeof(ts_fit_free_t) == FIT_MIN_BLOCK, "a free block's links fill the minimum");

typedef struct ts_fit_config {
    size_t min_split;      /* smallest remainder worth splitting off: header + minimum payload */
    size_t trim_threshold; /* SIZE_MAX: never give the top back */
    size_t grow_chunk;
} ts_fit_config_t;

typedef struct ts_fit_heap {
    ts_fit_free_t *root[2]; /* [FIT_BY_ADDR], [FIT_BY_SIZE] */
    ts_fit_free_t *reserve;
    uintptr_t top_end;         /* end of this heap's latest chunk */
    uintptr_t clean_from;      /* see "clean" above */
    _Atomic size_t free_bytes; /* written by the heap's owner; read by statistics */
} ts_fit_heap_t;

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

/* ---- small helpers -------------------------------------------------------- */

#define FIT_LOAD(x)     atomic_load_explicit(&(x), memory_order_relaxed)
#define FIT_STORE(x, v) atomic_store_explicit(&(x), (v), memory_order_relaxed)

static inline uint64_t fit_mix(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    return x ^ (x >> 33);
}

static inline uintptr_t fit_check_word(uintptr_t b, size_t word, unsigned owner) {
    uint64_t hash =
        fit_mix(b ^ word ^ 0x7473616c6c6f6366ull ^ ((uint64_t)owner << FIT_OWNER_SHIFT));
    return (uintptr_t)((hash >> (64 - FIT_OWNER_SHIFT)) | ((uint64_t)owner << FIT_OWNER_SHIFT));
}

/* The owner recorded in a header's check word (see fit_check_word). */
static inline unsigned fit_owner(const ts_fit_block_t *b) {
    return (unsigned)(b->check >> FIT_OWNER_SHIFT);
}

static inline void fit_set_free(ts_fit_free_t *f, size_t size) {
    f->size = size;
    f->check = fit_check_word((uintptr_t)f, size, 0);
}

static inline void fit_set_used(ts_fit_block_t *b, size_t size, unsigned owner) {
    b->word = size | FIT_INUSE;
    b->check = fit_check_word((uintptr_t)b, b->word, owner);
}

static inline size_t fit_used_size(const ts_fit_block_t *b) {
    return b->word & ~FIT_INUSE;
}
static inline uintptr_t fit_end(const ts_fit_free_t *f) {
    return (uintptr_t)f + f->size;
}
static inline void *fit_payload(ts_fit_block_t *b) {
    return (char *)b + FIT_HEADER;
}

static inline void fit_add_free(ts_fit_heap_t *h, size_t n) {
    FIT_STORE(h->free_bytes, FIT_LOAD(h->free_bytes) + n);
}
static inline void fit_sub_free(ts_fit_heap_t *h, size_t n) {
    FIT_STORE(h->free_bytes, FIT_LOAD(h->free_bytes) - n);
}

/* The block size for a request of n bytes; 0 when it can never be satisfied. */
static inline size_t fit_block_size(size_t n) {
    if (n > FIT_MAX_REQUEST) return 0;
    size_t s = ts_align_up(n + FIT_HEADER, 16);
    return s < FIT_MIN_BLOCK ? FIT_MIN_BLOCK : s;
}

static inline TS_NORETURN void fit_corrupt(const char *what) {
    _ts_fatal("bestfit: heap corrupted (%s)", what);
}

/* ---- configuration -------------------------------------------------------- */

static inline void fit_config_load(ts_fit_config_t *c) {
    long long payload = _ts_env_long("TSALLOC_BESTFIT_MIN_SPLIT", FIT_DEFAULT_MIN_SPLIT);
    if (payload < FIT_MIN_BLOCK - FIT_HEADER) payload = FIT_MIN_BLOCK - FIT_HEADER;
    if (payload > (1ll << 30)) payload = 1ll << 30;
    c->min_split = FIT_HEADER + ts_align_up((size_t)payload, 16);
    long long trim = _ts_env_long("TSALLOC_BESTFIT_TRIM_THRESHOLD", FIT_DEFAULT_TRIM_THRESHOLD);
    c->trim_threshold = trim < 0 ? SIZE_MAX : (size_t)trim;
    long long grow = _ts_env_long("TSALLOC_BESTFIT_GROW_CHUNK", FIT_DEFAULT_GROW_CHUNK);
    if (grow < 4096) grow = 4096;
    if (grow > (1ll << 30)) grow = 1ll << 30;
    c->grow_chunk = ts_align_up((size_t)grow, 16);
}

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

/* The free block that ends at the break while the break is this design's
 * (what trim could give back), or NULL. */
static inline ts_fit_free_t *fit_break_top(const ts_fit_heap_t *h, ts_fit_segs_t *s) {
    uintptr_t at_break = FIT_LOAD(s->last_end);
    ts_fit_free_t *top = fit_highest_below(h, at_break);
    return top && fit_end(top) == at_break ? top : NULL;
}

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

/* Touches the pages of a chunk just obtained, so that the first-touch page
 * faults of the block headers soon written there are taken here, by the
 * growing thread outside any heap lock, and not later inside one. Only the
 * first `limit` bytes: a large block may never be touched by its user. The
 * memory is fresh and ours: writing zeros changes nothing. */
static inline void fit_prefault(void *old, size_t inc, size_t limit) {
    size_t page = _ts_os_page_size();
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
    if (r && fit_end(r) != start) { /* the old top is no longer the top */
        h->reserve = NULL;
        fit_index_insert(h, r);
    }
    if (!h->reserve) h->clean_from = start; /* below it, nothing is known to be clean */
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
