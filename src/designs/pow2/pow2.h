/* pow2 (seed 003): power-of-two buddy blocks carved from 1 MiB chunks.
 * Shared by the two designs built from the same sources: `pow2` (one
 * partition, one spinlock) and `pow2-partitioned` (compiled with
 * POW2_PARTITIONED=1: P partitions, each with its own spinlock and lists).
 *
 * Terms, used the same way in every file of the design:
 * - block: 2^k bytes (order k = 5 .. 20) aligned to 2^k, starting with a
 *   16-byte header; the program gets block + 16 (or block + A for memalign).
 * - chunk: 1 MiB aligned to 1 MiB, from sbrk (or mmap when sbrk fails); the
 *   largest block. Each chunk belongs to one partition or to the central
 *   pool of whole free chunks; the chunk map says which.
 * - huge block: a request that does not fit in a chunk (more than 1 MiB - 16
 *   bytes), mapped on its own at a page boundary, without a header; the
 *   registry (a hash table keyed by the pointer) knows each one.
 *
 * - lazy block: a freed block kept unmerged in its partition's lazy list of
 *   its order (lazy buddy coalescing): malloc of that order reuses it with
 *   no split, and the buddy system sees it as in use. At most
 *   P2(lazy_cap)[order] of them per order and partition (the watermark).
 *
 * Invariants:
 * - The buddy of block B of order k < 20 is B ^ 2^k, in the same chunk, so
 *   merging never leaves a chunk and never crosses partitions.
 * - No FREE block has a FREE buddy of its own order (a block that is not
 *   kept lazy merges eagerly); a LAZY block's buddy may be free.
 * - A header is read only after the chunk map says its chunk is ours, so a
 *   foreign pointer is never dereferenced.
 * - A header that stops being a block start (absorbed by a merge) has its
 *   magic cleared, so a stale pointer to it is reported, not trusted.
 *
 * Lock order: partition locks (ascending index) -> central lock -> the OS
 * layer's sbrk lock. In `pow2` the central lock IS partition 0's lock: code
 * that already holds a partition lock enters the central state with
 * pow2_heap_enter(), which locks only in the partitioned design.
 */
#ifndef TS_DESIGNS_POW2_POW2_H
#define TS_DESIGNS_POW2_POW2_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/lock.h"
#include "designs/design.h"

#ifndef POW2_PARTITIONED
#define POW2_PARTITIONED 0
#endif
static const bool pow2_partitioned = POW2_PARTITIONED;

/* P2(x): the design-specific name of a symbol shared across this design's
 * files (_ts_pow2_x or _ts_pow2_part_x); POW2_PUBLIC(x) the exported one. */
#if POW2_PARTITIONED
#define P2(name)          _ts_pow2_part_##name
#define POW2_PUBLIC(name) ts_pow2_partitioned_##name
#define POW2_NAME         "pow2-partitioned"
#else
#define P2(name)          _ts_pow2_##name
#define POW2_PUBLIC(name) ts_pow2_##name
#define POW2_NAME         "pow2"
#endif

TS_DESIGN_DECLARE(pow2)
TS_DESIGN_DECLARE(pow2_part)

/* ---- geometry and policy ------------------------------------------------ */

#define POW2_MIN_ORDER        5  /* 32 B: header + two list links */
#define POW2_MAX_ORDER        20 /* 1 MiB: one chunk */
#define POW2_ORDERS           (POW2_MAX_ORDER - POW2_MIN_ORDER + 1)
#define POW2_CHUNK            ((size_t)1 << POW2_MAX_ORDER)
#define POW2_HDR              16
#define POW2_HEAP_MAX_REQUEST (POW2_CHUNK - POW2_HDR) /* larger: a huge block */
#define POW2_MAX_PARTS        64
/* The give-back threshold before P2(configure) reads TSALLOC_POW2_GIVE_BACK:
 * its default in base/option_list.h, whose minimum is two chunks. */
#define POW2_GIVE_BACK ((size_t)2 << 20)
/* Lazy merging watermark: a partition keeps at most min(TSALLOC_POW2_LAZY,
 * POW2_LAZY_BYTES / 2^k) freed blocks of order k unmerged. With the default
 * 8: 8 of each order up to 16 KiB, 4 of 32 KiB, 2 of 64 KiB, 1 of 128 KiB,
 * none larger; in all at most 87 blocks, 640 KiB, per partition: less than a
 * chunk. TSALLOC_POW2_LAZY=0 merges eagerly, as the seed; its maximum, 64,
 * fits the per-order caps (unsigned char); the 128 KiB per order stays. */
#define POW2_LAZY_BYTES ((size_t)128 << 10)

/* Header states. */
enum {
    POW2_FREE = 0xF5,
    POW2_USED = 0x5A,
    POW2_USED_ALIGNED = 0xA1, /* block serving memalign: `offset` = user - block */
    POW2_REDIRECT = 0x8E,     /* header before a memalign pointer: `offset` back */
    POW2_LAZY = 0xC3,         /* freed, kept unmerged in a lazy list */
};

typedef struct pow2_hdr {
    uint32_t magic; /* pow2_magic(address of this header) */
    uint8_t order;  /* k: the block is 2^k bytes */
    uint8_t state;  /* POW2_FREE ... */
    uint16_t unused;
    uint32_t offset; /* memalign only: user pointer - block start */
    uint32_t unused2;
} pow2_hdr_t;

/* A free or lazy block: the header, then its links in its order's list. */
typedef struct pow2_free {
    pow2_hdr_t hdr;
    struct pow2_free *next, *prev;
} pow2_free_t;

_Static_assert(sizeof(pow2_hdr_t) == POW2_HDR, "header is 16 bytes");
_Static_assert(sizeof(pow2_free_t) == (1u << POW2_MIN_ORDER), "free block fits the minimum");

static inline uint32_t pow2_magic(const void *hdr) {
    return 0x9A0C2B17u ^ (uint32_t)((uintptr_t)hdr >> 4);
}

static inline void pow2_set_hdr(void *blk, unsigned order, unsigned state, uint32_t offset) {
    pow2_hdr_t *h = (pow2_hdr_t *)blk;
    h->magic = pow2_magic(h);
    h->order = (uint8_t)order;
    h->state = (uint8_t)state;
    h->offset = offset;
}

/* The order of the smallest block holding `bytes` (header included). */
static inline unsigned pow2_order_for(size_t bytes) {
    if (bytes <= ((size_t)1 << POW2_MIN_ORDER)) return POW2_MIN_ORDER;
    return (unsigned)(64 - __builtin_clzll((unsigned long long)(bytes - 1)));
}

/* ---- partitions ------------------------------------------------------------ */

typedef struct pow2_part {
    ts_lock_t lock;    /* a spin lock unless TSALLOC_LOCK says otherwise */
    uint32_t nonempty; /* bit k - POW2_MIN_ORDER: lists[k - POW2_MIN_ORDER] not empty */
    pow2_free_t *lists[POW2_ORDERS];
    pow2_free_t *lazy[POW2_ORDERS]; /* lazy blocks by order, most recently freed first */
    uint8_t lazy_count[POW2_ORDERS];
    /* Set when a whole chunk leaves for the pool (the partition is shrinking):
     * frees merge eagerly until the next split, so the heap top can go back. */
    bool lazy_off;
    size_t chunks;                  /* chunks owned */
    size_t free_bytes;              /* in free and lazy blocks, the spare chunk included */
    size_t used_bytes;              /* in blocks handed out, headers included */
    size_t used_blocks;             /* blocks handed out */
    size_t splits, merges, flushes; /* for tests: levels split, merged; flushes */
} __attribute__((aligned(64))) pow2_part_t;

#define POW2_PART_SLOTS (POW2_PARTITIONED ? POW2_MAX_PARTS : 1)
TS_HIDDEN extern pow2_part_t P2(parts)[POW2_PART_SLOTS];
TS_HIDDEN extern atomic_uint P2(nparts); /* 0 until configured */
/* The lazy watermark by order (set by configure, before the first chunk). */
TS_HIDDEN extern atomic_uchar P2(lazy_cap)[POW2_ORDERS];
TS_HIDDEN TS_NOINLINE unsigned P2(configure)(void);

static inline unsigned pow2_nparts(void) {
    unsigned n = atomic_load_explicit(&P2(nparts), memory_order_acquire);
    return ts_likely(n) ? n : P2(configure)();
}

/* ---- the chunk map: chunk address -> owner, read without locks ------------ */

#define POW2_CMAP_L1_SHIFT 32 /* one second-level table per 4 GiB */
#define POW2_CMAP_L1_SIZE  ((size_t)1 << (47 - POW2_CMAP_L1_SHIFT))
#define POW2_CMAP_L2_SIZE  ((size_t)1 << (POW2_CMAP_L1_SHIFT - POW2_MAX_ORDER))
/* Entry: 0 not ours, POW2_CMAP_POOL in the pool, POW2_CMAP_PART0 + i owned by
 * partition i; POW2_CMAP_MAPPED is or-ed in for a chunk obtained by mmap. */
enum { POW2_CMAP_POOL = 1, POW2_CMAP_PART0 = 2, POW2_CMAP_MAPPED = 0x8000 };

TS_HIDDEN extern _Atomic(atomic_ushort *) P2(cmap)[POW2_CMAP_L1_SIZE];

static inline unsigned pow2_cmap_get(uintptr_t addr) {
    if (ts_unlikely(addr >> 47)) return 0;
    atomic_ushort *l2 =
        atomic_load_explicit(&P2(cmap)[addr >> POW2_CMAP_L1_SHIFT], memory_order_acquire);
    if (!l2) return 0;
    return atomic_load_explicit(&l2[(addr >> POW2_MAX_ORDER) & (POW2_CMAP_L2_SIZE - 1)],
                                memory_order_relaxed);
}

/* ---- the central state: pool, program break, huge-block registry --------- */

typedef struct pow2_reg_entry {
    uintptr_t ptr; /* 0: empty slot */
    size_t len;
} pow2_reg_entry_t;

typedef struct pow2_central {
    ts_lock_t lock;    /* the partitioned design only; see pow2_central_lock */
    pow2_free_t *pool; /* whole free chunks, most recently freed first */
    size_t pool_chunks;
    uintptr_t brk_top; /* where our last sbrk left the break (0: never) */
    size_t brk_chunks; /* chunks from sbrk */
    size_t map_chunks; /* chunks from mmap (sbrk refused) */
    size_t brk_pad;    /* bytes skipped to align chunks (never touched) */
    size_t huge_bytes, huge_count;
    size_t peak;
    _Atomic size_t give_back; /* release top free chunks once they reach this */
    pow2_reg_entry_t *reg;    /* open addressing, linear probing, power-of-two size */
    size_t reg_cap, reg_count;
} pow2_central_t;

TS_HIDDEN extern pow2_central_t P2(central);

/* The central lock for callers that hold no partition lock. */
static inline void pow2_central_lock(void) {
    ts_lock(pow2_partitioned ? &P2(central).lock : &P2(parts)[0].lock);
}
static inline void pow2_central_unlock(void) {
    ts_unlock(pow2_partitioned ? &P2(central).lock : &P2(parts)[0].lock);
}
/* The central state from code holding a partition lock. */
static inline void pow2_heap_enter(void) {
    if (pow2_partitioned) ts_lock(&P2(central).lock);
}
static inline void pow2_heap_leave(void) {
    if (pow2_partitioned) ts_unlock(&P2(central).lock);
}

/* heap.c: all with the central state entered. */
/* A chunk for partition `part` (from the pool, else the OS), or NULL. */
TS_HIDDEN pow2_free_t *P2(chunk_get)(unsigned part);
/* A whole free chunk back to the pool; may give the heap top back. */
TS_HIDDEN void P2(chunk_put)(pow2_free_t *chunk);
/* Give back free chunks at the heap top: with `trim`, all but `pad` bytes;
 * else all but one once they reach the give-back threshold. */
TS_HIDDEN bool P2(release_top)(bool trim, size_t pad);
/* Free chunks at the top of the heap, in bytes. */
TS_HIDDEN size_t P2(releasable)(void);
/* MADV_DONTNEED on the pool's chunks (but their first page); bytes purged. */
TS_HIDDEN size_t P2(purge_pool)(void);

/* heap.c: huge blocks; they take the central lock themselves. */
TS_HIDDEN void *P2(huge_alloc)(size_t size, size_t align);
TS_HIDDEN bool P2(huge_free)(void *ptr);
TS_HIDDEN size_t P2(huge_size)(const void *ptr); /* 0: not a huge block */
/* Resize with mremap; NULL (errno ENOMEM) leaves the block as it was. */
TS_HIDDEN void *P2(huge_resize)(void *ptr, size_t old_len, size_t size);

/* ---- finding a pointer's block (buddy.c, debug.c) ------------------------- */

enum { POW2_LOOK_USED, POW2_LOOK_FREE, POW2_LOOK_BAD, POW2_LOOK_NOT_HEAP };

/* The last checks of pow2_look on block header hd: a sane order, aligned. */
TS_INLINE int pow2_look_block(pow2_hdr_t *hd, unsigned entry, pow2_hdr_t **blk, unsigned *part) {
    if (ts_unlikely(hd->order < POW2_MIN_ORDER || hd->order > POW2_MAX_ORDER ||
                    ((uintptr_t)hd & (((uintptr_t)1 << hd->order) - 1))))
        return POW2_LOOK_BAD;
    unsigned i = entry - POW2_CMAP_PART0;
    if (ts_unlikely(i >= POW2_PART_SLOTS)) return POW2_LOOK_BAD;
    *blk = hd;
    *part = i;
    return POW2_LOOK_USED;
}

/* buddy.c: pow2_look for a header that is not a used block's with its magic
 * (free, lazy, a memalign redirect, or no header at all). */
TS_HIDDEN TS_NOINLINE int P2(look_other)(uintptr_t p, unsigned entry, pow2_hdr_t **blk,
                                         unsigned *part);

/* Classify user pointer `p` without locks, reading only our chunks. USED:
 * *blk is its block (state USED or USED_ALIGNED), *part its partition. The
 * common case (a used block) is inline: ~20 instructions. */
TS_INLINE int pow2_look(const void *p, pow2_hdr_t **blk, unsigned *part) {
    uintptr_t a = (uintptr_t)p;
    if (ts_unlikely(a & (TS_MIN_ALIGN - 1))) return POW2_LOOK_BAD;
    /* No heap pointer sits on a chunk boundary (each lies past its header,
     * inside its block), but a huge block may start right where one of our
     * chunks ends, with its p - 16 in that chunk: let the registry decide. */
    if (ts_unlikely(!(a & (POW2_CHUNK - 1)))) return POW2_LOOK_NOT_HEAP;
    uintptr_t h = a - POW2_HDR;
    unsigned entry = pow2_cmap_get(h) & ~(unsigned)POW2_CMAP_MAPPED;
    if (ts_unlikely(entry < POW2_CMAP_PART0)) return entry ? POW2_LOOK_BAD : POW2_LOOK_NOT_HEAP;
    pow2_hdr_t *hd = (pow2_hdr_t *)h;
    if (ts_unlikely(hd->magic != pow2_magic(hd) || hd->state != POW2_USED))
        return P2(look_other)(a, entry, blk, part);
    return pow2_look_block(hd, entry, blk, part);
}

/* debug.c: the dumps into a caller's buffer (no allocation, takes the locks);
 * return the length wanted, as snprintf. And a full consistency check:
 * 0 when consistent, else the number of problems (the first in `why`). */
TS_HIDDEN size_t P2(dump_freelist)(char *buf, size_t cap);
TS_HIDDEN size_t P2(dump_block)(const void *ptr, char *buf, size_t cap);
TS_HIDDEN int P2(check_heap)(char *why, size_t cap);

/* buddy.c: every lock of the design, in order (for dumps, checks, fork). */
TS_HIDDEN void P2(lock_all)(void);
TS_HIDDEN void P2(unlock_all)(void);

/* buddy.c, for tests: the sums over all partitions. */
typedef struct pow2_counters {
    size_t splits;      /* levels split (malloc, realloc shrink) */
    size_t merges;      /* levels merged (free, flush, realloc growth) */
    size_t flushes;     /* times a partition merged all its lazy blocks */
    size_t lazy_blocks; /* lazy blocks held now */
    size_t lazy_bytes;
} pow2_counters_t;
TS_HIDDEN void P2(counters)(pow2_counters_t *out);

#endif
