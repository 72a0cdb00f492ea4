/* Best-fit block layout: the terms, the block header, the heap and its
 * configuration, and the small helpers every other part uses.
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
 *
 * Invariants: every block size is a multiple of 16 and >= FIT_MIN_BLOCK; a
 * header's check word always matches its address, word 0 and owner, so a
 * pointer that does not lead to one is rejected (fit_checked_block).
 */
#ifndef TS_DESIGNS_BESTFIT_FIT_LAYOUT_H
#define TS_DESIGNS_BESTFIT_FIT_LAYOUT_H

#include <errno.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "base/base.h"
#include "base/options.h"

#define FIT_HEADER    16
#define FIT_INUSE     ((size_t)1)
#define FIT_MIN_BLOCK 48 /* header + the four index links of a free block */
/* Larger requests fail with ENOMEM before any arithmetic can overflow. */
#define FIT_MAX_REQUEST ((size_t)PTRDIFF_MAX / 4)

#define FIT_GROW_TRIES 3 /* sbrk attempts per malloc (another thread may take a chunk) */
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

/* Reads the TSALLOC_BESTFIT_* options through the option table
 * (base/options.h), whose ranges keep them within what the heap supports:
 * the minimum payload (at least FIT_MIN_BLOCK - FIT_HEADER) and the grow
 * chunk are rounded up to 16; a trim threshold of -1 never gives back. */
static inline void fit_config_load(ts_fit_config_t *c) {
    long long payload = _ts_option_env(TS_OPTID_BESTFIT_MIN_SPLIT, NULL);
    c->min_split = FIT_HEADER + ts_align_up((size_t)payload, 16);
    long long trim = _ts_option_env(TS_OPTID_BESTFIT_TRIM_THRESHOLD, NULL);
    c->trim_threshold = trim < 0 ? SIZE_MAX : (size_t)trim;
    long long grow = _ts_option_env(TS_OPTID_BESTFIT_GROW_CHUNK, NULL);
    c->grow_chunk = ts_align_up((size_t)grow, 16);
}

#endif
