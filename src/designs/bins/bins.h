/* bins: power-of-two size classes served from thread-owned arenas (seed 004).
 * The types and constants the files of the design share, the inline helpers
 * of the fast paths, and a few introspection calls for the unit tests.
 *
 * Terms, used the same way in every file of the design:
 * - bin k: the size class of blocks of exactly 2^k bytes, k = 4 .. 28.
 * - chunk: a 2 MiB region aligned to 2 MiB, mapped from the OS; page 0 holds
 *   the chunk header, pages 1 .. 31 hold blocks.
 * - page: 64 KiB of a chunk (not the 4 KiB OS page).
 * - span: the pages that serve one bin: one page for bins 4 .. 16 (many
 *   blocks each), 2^(k-16) pages aligned to 2^k for bins 17 .. 20 (one block).
 * - mapped block: a block in a mapping of its own (bins 21 .. 28, rounded to
 *   the bin, cached on free; larger or over-aligned requests, exact size).
 * - region: a chunk or a mapped block's mapping; its header sits at a 2 MiB
 *   boundary H and every pointer p it hands out has H < p <= H + 2 MiB, so
 *   (p - 1) rounded down to 2 MiB finds the header. No pointer we hand out is
 *   2 MiB-aligned.
 *
 * Invariants:
 * - Every block of bin k is aligned to 2^k within its span (spans are aligned
 *   to their size), so a block is found from its pointer with masks only.
 * - The owner thread of an arena is the only one that touches the arena's
 *   bins, page free lists and counters; other threads only push onto the
 *   arena's `remote` stack (one CAS) and read the fields marked "shared".
 * - A region's header is read only after the registry says the region is
 *   ours, so a foreign pointer is never dereferenced.
 */
#ifndef TS_DESIGNS_BINS_BINS_H
#define TS_DESIGNS_BINS_BINS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "designs/design.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- geometry ------------------------------------------------------------ */

#define BINS_MIN_BIN        4  /* 16 B: the alignment every block needs */
#define BINS_PAGE_BIN       16 /* largest bin with several blocks per page */
#define BINS_CHUNK_MAX_BIN  20 /* largest bin carved from chunks (1 MiB) */
#define BINS_MAX_BIN        28 /* largest bin (256 MiB); beyond: exact-size mappings */
#define BINS_PAGE_SHIFT     16
#define BINS_PAGE_SIZE      ((size_t)1 << BINS_PAGE_SHIFT)
#define BINS_CHUNK_SHIFT    21
#define BINS_CHUNK_SIZE     ((size_t)1 << BINS_CHUNK_SHIFT)
#define BINS_CHUNK_MASK     (BINS_CHUNK_SIZE - 1)
#define BINS_CHUNK_PAGES    (BINS_CHUNK_SIZE >> BINS_PAGE_SHIFT) /* 32 */
#define BINS_ALL_PAGES_FREE 0xFFFFFFFEu /* every page but the header page */
/* A mapped block's user pointer sits this far (or `align`) after its header. */
#define BINS_MAPPED_OFFSET 4096
/* Requests above this are refused at once (more than the address space). */
#define BINS_MAX_REQUEST ((size_t)1 << 46)
/* The registry covers user addresses below 2^48. */
#define BINS_ADDRESS_BITS 48

#define BINS_KIND_CHUNK  0x62696e43u /* "binC" */
#define BINS_KIND_MAPPED 0x62696e4du /* "binM" */

/* Arena states. ORPHAN: owned by a thread that is gone without a goodbye (the
 * parent's other threads after fork); never adopted, remote frees still safe. */
enum { BINS_ARENA_FREE = 0, BINS_ARENA_OWNED = 1, BINS_ARENA_BUSY = 2, BINS_ARENA_ORPHAN = 3 };

/* ---- types --------------------------------------------------------------- */

typedef struct ts_bins_arena ts_bins_arena_t;

/* A free block: the link, and the cookie that marks it free (double-free check). */
typedef struct ts_bins_block {
    struct ts_bins_block *next;
    uintptr_t cookie; /* == _ts_bins_cookie ^ address while free */
} ts_bins_block_t;

/* One span's descriptor, in its chunk's header (index = first page). 64 bytes,
 * so finding it from a pointer is shifts and masks. */
typedef struct ts_bins_page {
    ts_bins_block_t *free_list;       /* owner only */
    _Atomic(char *) bump;             /* shared read: blocks below it were carved; NULL
                                         unless this page heads a span */
    _Atomic uint32_t block_size;      /* shared read: 2^bin, 0 unless this page heads a span */
    uint32_t used;                    /* owner only: blocks handed out and not yet back
                                         here, | BINS_PAGE_FULL while off its bin list */
    uint8_t bin;                      /* owner only */
    uint8_t index;                    /* page number inside the chunk */
    struct ts_bins_page *prev, *next; /* owner only: the bin's list of spans */
    char pad[14];
} ts_bins_page_t;
_Static_assert(sizeof(ts_bins_page_t) == 64, "span descriptors are 64 bytes");

/* In `used`: the span ran out and is off its bin list until a block comes back. */
#define BINS_PAGE_FULL 0x80000000u

/* After `used` was decremented: does the span need the slow path (it is now
 * empty, or it was full)? One compare for both. */
TS_INLINE bool ts_bins_page_needs_care(uint32_t used) {
    return used - 1u >= BINS_PAGE_FULL - 1u;
}

/* What every region header starts with. */
typedef struct ts_bins_region {
    uint32_t kind;                    /* BINS_KIND_* */
    _Atomic(ts_bins_arena_t *) arena; /* owner arena; set before the region is registered */
} ts_bins_region_t;

typedef struct ts_bins_chunk {
    ts_bins_region_t region;
    uint32_t free_pages;               /* owner only: bit i = page i is free */
    uint32_t dirty_pages;              /* owner only: free pages touched since their last purge */
    struct ts_bins_chunk *prev, *next; /* owner only: arena's chunks with a free page */
    ts_bins_page_t pages[BINS_CHUNK_PAGES];
} ts_bins_chunk_t;

typedef struct ts_bins_mapped {
    ts_bins_region_t region;
    uint8_t bin;  /* 21 .. 28: a bin block (cacheable); 0: exact size */
    uint8_t live; /* 0 while in its arena's cache */
    char *map_base;
    size_t map_size;
    char *user;
    size_t usable;
    struct ts_bins_mapped *next; /* in the arena's cache */
} ts_bins_mapped_t;

struct ts_bins_arena {
    /* Owner only (the hot line first). bins[k] is the span blocks of bin k come
     * from next, or &_ts_bins_empty_page when the bin has none. */
    ts_bins_page_t *bins[BINS_CHUNK_MAX_BIN + 1];
    _Atomic size_t live_bytes;                 /* chunk blocks handed out (read by info) */
    ts_bins_chunk_t *avail;                    /* chunks with at least one free page */
    unsigned empty_chunks;                     /* chunks in `avail` with every page free */
    ts_bins_mapped_t *cache[BINS_MAX_BIN + 1]; /* freed mapped bin blocks */
    _Atomic size_t cached_bytes;               /* their mapping sizes (read by info) */
    _Atomic size_t empty_bytes;                /* empty chunks kept (read by info) */
    /* Shared: other threads push the blocks they free here. */
    _Alignas(64) _Atomic(ts_bins_block_t *) remote;
    _Alignas(64) _Atomic int state; /* BINS_ARENA_* */
    ts_bins_arena_t *next_all;      /* every arena ever made; never removed */
    unsigned id;
};

/* ---- shared state ------------------------------------------------------- */

TS_HIDDEN extern _Atomic uint64_t _ts_bins_registry[];
TS_HIDDEN extern ts_bins_page_t _ts_bins_empty_page;
TS_HIDDEN extern uintptr_t _ts_bins_cookie;
TS_HIDDEN extern size_t _ts_bins_cache_limit;
TS_HIDDEN extern unsigned _ts_bins_keep_chunks;
TS_HIDDEN extern TS_TLS ts_bins_arena_t *_ts_bins_tls_arena;

/* Process-wide statistics (relaxed atomics, updated off the fast paths). */
typedef struct ts_bins_stats {
    _Atomic size_t chunk_bytes;
    _Atomic size_t mapped_bytes;
    _Atomic size_t mapped_count;
    _Atomic size_t peak;
} ts_bins_stats_t;
TS_HIDDEN extern ts_bins_stats_t _ts_bins_stats;

/* ---- inline helpers ------------------------------------------------------ */

#define BINS_RELAXED memory_order_relaxed

/* Bin of a request of `size` bytes (1 .. 2^63); size 0 gives 64, which takes
 * every caller to its slow path. */
TS_INLINE unsigned ts_bins_bin_of(size_t size) {
    return 64u - (unsigned)__builtin_clzl((size - 1) | (((size_t)1 << BINS_MIN_BIN) - 1));
}

/* Header address of the region that may hold `p`. */
TS_INLINE uintptr_t ts_bins_header_of(uintptr_t p) {
    return (p - 1) & ~(uintptr_t)BINS_CHUNK_MASK;
}

TS_INLINE bool ts_bins_registered(uintptr_t header) {
    uintptr_t slot = header >> BINS_CHUNK_SHIFT;
    if (ts_unlikely(slot >> (BINS_ADDRESS_BITS - BINS_CHUNK_SHIFT))) return false;
    uint64_t word = atomic_load_explicit(&_ts_bins_registry[slot >> 6], BINS_RELAXED);
    return (word >> (slot & 63)) & 1;
}

TS_INLINE ts_bins_chunk_t *ts_bins_chunk_of_page(const ts_bins_page_t *pg) {
    return (ts_bins_chunk_t *)((uintptr_t)pg & ~(uintptr_t)BINS_CHUNK_MASK);
}
TS_INLINE char *ts_bins_page_start(const ts_bins_page_t *pg) {
    return (char *)ts_bins_chunk_of_page(pg) + ((size_t)pg->index << BINS_PAGE_SHIFT);
}
TS_INLINE size_t ts_bins_span_bytes(unsigned bin) {
    return bin > BINS_PAGE_BIN ? (size_t)1 << bin : BINS_PAGE_SIZE;
}
TS_INLINE unsigned ts_bins_span_pages(unsigned bin) {
    return bin > BINS_PAGE_BIN ? 1u << (bin - BINS_PAGE_BIN) : 1u;
}

/* Owner-only counters that other threads read: plain load and store. */
TS_INLINE void ts_bins_counter_add(_Atomic size_t *c, size_t delta) {
    atomic_store_explicit(c, atomic_load_explicit(c, BINS_RELAXED) + delta, BINS_RELAXED);
}

/* ---- between the files of the design ------------------------------------ */

/* registry.c */
TS_HIDDEN void _ts_bins_registry_add(uintptr_t header);
TS_HIDDEN void _ts_bins_registry_remove(uintptr_t header);
TS_HIDDEN void _ts_bins_note_mapped_total(void);

/* arena.c: the calling thread's arena, attaching one on its first call.
 * NULL when none can be had (out of memory, or the thread is exiting and
 * has given its arena back: then `*exited` is set). */
TS_HIDDEN ts_bins_arena_t *_ts_bins_attach(bool *exited);
TS_HIDDEN ts_bins_arena_t *_ts_bins_arena_acquire(void);
TS_HIDDEN void _ts_bins_arena_release(ts_bins_arena_t *a);
/* Drain, give back caches and empty chunks; with `purge`, also purge free pages.
 * True when something went back to the OS. Caller owns `a`. */
TS_HIDDEN bool _ts_bins_arena_tidy(ts_bins_arena_t *a, bool purge);

/* chunk.c (caller owns the arena) */
TS_HIDDEN void *_ts_bins_small_slow(ts_bins_arena_t *a, unsigned bin);
TS_HIDDEN void _ts_bins_page_changed(ts_bins_arena_t *a, ts_bins_page_t *pg);
TS_HIDDEN void _ts_bins_drain(ts_bins_arena_t *a);
TS_HIDDEN bool _ts_bins_release_empty(ts_bins_arena_t *a, bool purge);

/* mapped.c. `fresh` (may be NULL) tells whether the memory is known zero. */
TS_HIDDEN void *_ts_bins_mapped_alloc(ts_bins_arena_t *a, size_t size, size_t align, bool *fresh);
TS_HIDDEN void _ts_bins_mapped_free(ts_bins_mapped_t *m, ts_bins_arena_t *self);
TS_HIDDEN ts_bins_mapped_t *_ts_bins_mapped_check(uintptr_t header, const void *p, const char *func,
                                                  bool freeing);
/* The block's user pointer after the resize (moved when it grew and could not
 * stay), or NULL with the block untouched. */
TS_HIDDEN void *_ts_bins_mapped_resize(ts_bins_mapped_t *m, size_t size);
TS_HIDDEN bool _ts_bins_cache_flush(ts_bins_arena_t *a);

/* ---- introspection for the unit tests (not part of any public API) ------- */

/* Bin malloc(size) uses: 4 .. 28, or 0 for an exact-size mapping. */
TS_HIDDEN unsigned _ts_bins_bin_for_size(size_t size);
/* Bin of the live block at p (0: exact-size mapping); aborts on a foreign p. */
TS_HIDDEN unsigned _ts_bins_block_bin(const void *p);
/* True when p is a mapped block. */
TS_HIDDEN bool _ts_bins_block_is_mapped(const void *p);
/* The arena that owns the block at p, and the calling thread's (or NULL). */
TS_HIDDEN const void *_ts_bins_block_arena(const void *p);
TS_HIDDEN const void *_ts_bins_thread_arena(void);
/* Arenas ever made, and those free for adoption right now. */
TS_HIDDEN size_t _ts_bins_arena_count(void);
TS_HIDDEN size_t _ts_bins_free_arena_count(void);
/* Chunks mapped right now. */
TS_HIDDEN size_t _ts_bins_chunk_count(void);

#ifdef __cplusplus
}
#endif

#endif
