/* The fast allocator's data: its geometry, size classes, the page and
 * segment descriptors, heaps and the sweep's sets, with the inline helpers
 * that read them. Part of core/internal.h (which includes it, and whose
 * opening comment gives the terms, invariants and lock order these follow);
 * the functions and variables of the files of src/core are declared there.
 */
#ifndef TS_CORE_TYPES_H
#define TS_CORE_TYPES_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/base.h"
#include "base/spinlock.h"

/* ---- geometry ------------------------------------------------------------ */

#define TS_SEGMENT_SHIFT  22
#define TS_SEGMENT_SIZE   ((size_t)1 << TS_SEGMENT_SHIFT)
#define TS_SEGMENT_MASK   (TS_SEGMENT_SIZE - 1)
#define TS_SEGMENT_HEADER ((size_t)64 * 1024) /* header region; only its start is touched */
#if defined(__aarch64__)
#define TS_ADDRESS_BITS 48 /* user space of arm64 Linux (4 KiB pages, 48-bit VA) */
#else
#define TS_ADDRESS_BITS 47 /* user space of x86-64 Linux (4-level paging) */
#endif
#define TS_SEGMAP_ENTRIES ((size_t)1 << (TS_ADDRESS_BITS - TS_SEGMENT_SHIFT))
#define TS_MAX_PAGES      64

enum { TS_MAP_NONE = 0, TS_MAP_LARGE = 1 }; /* other _ts_segmap values: a page shift */
/* Set with the shift when every free of the segment takes the slow path
 * (TSALLOC_ZERO_ON_FREE, zerofree.c); ts_map_shift takes it off. */
#define TS_MAP_SLOW     0x80u
#define ts_map_shift(m) ((m) & ~TS_MAP_SLOW)

enum ts_kind { TS_KIND_SMALL, TS_KIND_MEDIUM, TS_KIND_BIG, TS_KIND_COUNT };
#define TS_SHIFT_SMALL  16
#define TS_SHIFT_MEDIUM 19
#define TS_SHIFT_BIG    22
#define TS_SHIFT_MIN    TS_SHIFT_SMALL

/* ---- size classes (sizeclass.c) ------------------------------------------- */

/* 16-byte steps up to 128 B, then 4 classes per doubling up to 512 KiB. */
#define TS_CLASS_STEP_LIMIT 128
#define TS_CLASS_MAX_SIZE   ((size_t)512 * 1024)
#define TS_CLASS_COUNT      56
#define TS_LIST_CLASS_LAST  43                  /* 64 KiB: the last class of medium pages */
#define TS_SMALL_PAGE_MAX   ((size_t)8 * 1024)  /* classes up to here use small pages */
#define TS_MEDIUM_PAGE_MAX  ((size_t)64 * 1024) /* ... up to here medium pages, above: big */
/* Pages of classes up to here start their blocks at a per-page colour
 * (page.c, page_colour). */
#define TS_COLOUR_MAX_BLOCK 1024
/* Empty big pages a heap keeps for reuse in its slots (page.c, page_cache),
 * besides the one lingering in its queue (heap->big_linger): up to KEEP + 1
 * in all; beside another, only one with at most TS_EMPTY_BIG_EXTRA_BYTES
 * touched. */
#define TS_EMPTY_BIG_KEEP        4
#define TS_EMPTY_BIG_EXTRA_BYTES ((size_t)1 << 20)
/* Sizes up to TS_DIRECT_MAX reach their page through heap->direct[(size+15)/16]. */
#define TS_DIRECT_MAX   1024
#define TS_DIRECT_SLOTS (TS_DIRECT_MAX / 16 + 1)
/* The list classes: blocks up to 64 KiB (small and medium pages). */
#define TS_LIST_MAX_SIZE TS_MEDIUM_PAGE_MAX

/* The class of a size (0 for size 0). Arithmetic, no table: the table in
 * sizeclass.c is generated from the same rule and tested against it. */
TS_INLINE unsigned ts_class_of(size_t size) {
    if (size <= TS_CLASS_STEP_LIMIT) return size <= 16 ? 0 : (unsigned)((size - 1) >> 4);
    size_t s = size - 1;
    unsigned b = 63u - (unsigned)__builtin_clzl(s); /* 2^b <= s < 2^(b+1), b >= 7 */
    return 8 + (b - 7) * 4 + (unsigned)((s >> (b - 2)) & 3);
}

typedef struct ts_class_info {
    uint32_t size;     /* block size */
    uint8_t kind;      /* enum ts_kind of its pages */
    uint8_t tz;        /* size = odd << tz */
    uint8_t direct_lo; /* direct slots that map to this class (lo > hi: none) */
    uint8_t direct_hi;
    uint64_t inv; /* inverse of odd modulo 2^64 (see ts_page_block_ok) */
} ts_class_info_t;

TS_INLINE bool ts_class_is_list(unsigned cls) {
    return cls <= TS_LIST_CLASS_LAST;
}

/* ---- blocks, pages, segments ---------------------------------------------- */

typedef struct ts_block {
    struct ts_block *next;
} ts_block_t;

typedef struct ts_heap ts_heap_t;
typedef struct ts_segment ts_segment_t;

/* page->thread_free packs the list of blocks freed by other threads, their
 * number, and a 2-bit notification state into one word, so one CAS pushes
 * a whole chain and the owner takes it back without walking it:
 *   bits 63..48 count | bits 47..4 head block | bits 1..0 state.
 * (48 pointer bits: arm64 user addresses reach 2^48; a page holds at most
 * 4096 blocks, well below the 16-bit count limit.)
 * NOTIFY: the page sits in its owner's full list; the next remote freer hands
 * its blocks to the owner heap's delayed list instead, so the owner learns
 * the page has room again. NOTIFYING: that hand-over is in progress (the
 * owner waits for it before it abandons the heap).
 * RESCUED: every block of the page is free and its memory was purged by the
 * purge thread while the page waited, in its idle owner's queue, for the
 * owner (rescue.c): the count says how many blocks that is, with no list; a
 * push onto it is a double free, and the owner retires the page.
 * Bit 2, TS_TF_DETACHED: the owner's heap was abandoned with blocks of this
 * page out (set before the segment joins the abandoned list, cleared when a
 * heap adopts it): a remote freer learns from the word its CAS replaced that
 * it must ask for a reclaim pass; the owner read before the CAS may be stale. */
enum { TS_TF_NORMAL = 0, TS_TF_NOTIFY = 1, TS_TF_NOTIFYING = 2, TS_TF_RESCUED = 3 };
#define TS_TF_DETACHED    ((uint64_t)4)
#define TS_TF_COUNT_SHIFT 48
#define TS_TF_PTR_MASK    ((((uint64_t)1 << TS_TF_COUNT_SHIFT) - 1) & ~(uint64_t)15)
TS_INLINE ts_block_t *ts_tf_ptr(uint64_t w) {
    return (ts_block_t *)(uintptr_t)(w & TS_TF_PTR_MASK);
}
TS_INLINE uint32_t ts_tf_count(uint64_t w) {
    return (uint32_t)(w >> TS_TF_COUNT_SHIFT);
}
TS_INLINE unsigned ts_tf_state(uint64_t w) {
    return (unsigned)(w & 3);
}
_Static_assert(((size_t)1 << TS_SHIFT_SMALL) / 16 < ((size_t)1 << (64 - TS_TF_COUNT_SHIFT)),
               "thread_free count field too small");
TS_INLINE uint64_t ts_tf_make(ts_block_t *p, uint64_t count, unsigned state) {
    return (count << TS_TF_COUNT_SHIFT) | (uint64_t)(uintptr_t)p | state;
}

/* page->owner: the heap, with TS_OWNER_FULL set while the page is in its full
 * list or kept empty (so the owner's free fast path falls into the slow path
 * and moves it back), or TS_OWNER_HEAD while it is the head page of a list
 * class (its `used` is not exact). Never both. */
#define TS_OWNER_FULL  ((uintptr_t)1)
#define TS_OWNER_HEAD  ((uintptr_t)2)
#define TS_OWNER_FLAGS ((uintptr_t)3)
/* Both bits: a page that the purge thread is looking at (rescue.c: one of
 * the full list, or a queue page that is not the head); whoever would
 * change it waits. A queue page the purge thread rescued is left with
 * TS_OWNER_FULL, so that any free into it takes the slow path, which names
 * it a double free. */
#define TS_OWNER_CLAIMED TS_OWNER_FLAGS
/* A head page's `used` while it is head (see the invariants above). */
#define TS_HEAD_USED_BIAS ((uint32_t)1 << 31)

/* Page states in the segment (changed under the segment lock). */
enum { TS_PAGE_FREE_CLEAN = 0, TS_PAGE_FREE_DIRTY, TS_PAGE_IN_USE, TS_PAGE_HEADER };

/* A page descriptor: four cache lines, by who writes them, ordered so that
 * the lines other threads touch (read-mostly, remote-written) and the owner's
 * hot line do not share a 128-byte pair (the unit some prefetchers fetch).
 * 256 bytes, so free finds a small page's descriptor with shifts and masks. */
typedef struct ts_page {
    /* Owner-hot: the fast paths. */
    ts_block_t *free;  /* allocation pops here, the owner's frees push here */
    uint32_t used;     /* see the invariants above */
    uint32_t capacity; /* blocks carved so far */
    uint8_t is_head;   /* the head of a list class: owner has TS_OWNER_HEAD */
    uint8_t in_full;
    uint8_t cached;              /* an empty big page kept by its heap for the next request */
    struct ts_page *next, *prev; /* class queue or full list */
#if TS_SECURE
    uint64_t link_key;  /* free-list links are encoded with it (secure.h) */
    uintptr_t link_lo;  /* a decoded link lies in [link_lo, link_lo + link_span) */
    uint32_t link_span; /* or is NULL */
#endif
    /* Free pages: written under the segment lock. */
    _Alignas(64) uint64_t purge_at; /* free dirty page: when to give it back */
    uintptr_t base;                 /* the page's memory: area bytes from here */
    /* Bytes from base that may be resident: raised by the owner as it carves
     * (whatever the class), cleared by a purge (under the segment lock). */
    uint32_t touched;
    uint8_t purge_refusals; /* purges the OS refused in a row since the page was freed */
#if TS_SECURE
    /* Written by the owner: the blocks of zero_bs bytes from start up to
     * base + zero_end were carved by a layout of this geometry; when the page
     * is set up again they are all free, zero up to TSALLOC_ZERO_ON_FREE but
     * for their first three words (secure.c). */
    uint32_t zero_bs, zero_end;
#endif
    /* thread_free as the last sweep left it (sweep.c, sweep lock: unchanged,
     * nothing new came). The owner clears it when it takes a list, else a
     * list made again the same way (same head, same count) after the owner
     * reused the blocks passed for the swept one and was never swept. */
    _Atomic uint64_t swept_tf;
    /* Read-mostly: set when the page is (re)initialised or grows; remote
     * freers read it to validate pointers without disturbing the owner. */
    _Alignas(64) _Atomic uintptr_t owner; /* heap | TS_OWNER_*; 0: free page or abandoned */
    uintptr_t start;                      /* address of block 0: base + colour */
    uint64_t inv;                         /* of the class: see ts_page_block_ok */
    uint64_t mark_key;                    /* of this page's current class: see ts_mark_of */
    _Atomic uint64_t carved;              /* capacity, for other threads' frees */
    uint32_t block_size;
    uint32_t reserved; /* blocks that fit */
    uint32_t area;     /* bytes of memory the page covers */
    uint8_t cls;
    uint8_t tz;            /* of the class: see ts_page_block_ok */
    uint8_t rslot;         /* this page's slot in a freeing heap's rbatch[], by class */
    uint8_t rslot_alt;     /* its second choice there, by index (free.c) */
    uint8_t rbatch_max;    /* a batch of this page's blocks is pushed at this count */
    uint8_t index;         /* position in its segment */
    _Atomic uint8_t state; /* TS_PAGE_*: written under the segment lock, read anywhere */
    /* Every block free and the memory purged (rescue.c): a full page, or a
     * queue page waiting for its owner to retire it. A free into it is a
     * double free. */
    _Atomic uint8_t rescued;
    /* Remote-written. */
    _Alignas(64) _Atomic uint64_t thread_free;
} ts_page_t;

struct ts_segment {
    _Atomic(ts_heap_t *) owner; /* NULL: abandoned, cached or spare-less */
    uint8_t kind;               /* enum ts_kind; TS_KIND_COUNT before the first format */
    uint8_t page_shift;
    uint8_t first_page; /* index of the first usable page */
    uint8_t page_count; /* pages of this kind (usable: first_page .. page_count-1) */
    ts_spinlock_t lock; /* free_mask, dirty_mask, page states, purge_at */
    uint32_t used_pages;
    uint64_t free_mask;          /* pages not in use */
    _Atomic uint64_t dirty_mask; /* free pages still resident, waiting for purge */
    _Atomic uint64_t purge_at_min;
    ts_segment_t *reg_next, *reg_prev;     /* registry of all segments (registry lock) */
    ts_segment_t *next, *prev;             /* heap's segments, abandoned list or cache */
    ts_segment_t *avail_next, *avail_prev; /* heap's segments with a free page of this kind */
    uint8_t in_avail;
    uint8_t cached;
    uint8_t huge_halves; /* 2 MiB halves asked for huge pages (segment lock; segment.c) */
    uint8_t huge_split;  /* halves a purge split since: not asked again (segment lock) */
    /* A small page of it was set up for a sweepable class (8 KiB): the sweep
     * walks small segments only then (sweep.c). Set by the owner, never
     * cleared while the segment is laid out for small pages. */
    _Atomic uint8_t sweepable;
    uint64_t cached_at;
    _Alignas(64) ts_page_t pages[TS_MAX_PAGES];
};

_Static_assert(sizeof(ts_page_t) == 256, "page descriptor: four cache lines");
_Static_assert(sizeof(ts_segment_t) <= TS_SEGMENT_HEADER, "segment header too big");

TS_INLINE ts_segment_t *ts_segment_of(const void *p) {
    return (ts_segment_t *)((uintptr_t)p & ~(uintptr_t)TS_SEGMENT_MASK);
}
TS_INLINE ts_page_t *ts_page_of(ts_segment_t *seg, const void *p, unsigned shift) {
    return &seg->pages[((uintptr_t)p & TS_SEGMENT_MASK) >> shift];
}
/* The same for a small page: page index * 256 straight from the pointer's bits. */
TS_INLINE ts_page_t *ts_small_page_of(const void *p) {
    uintptr_t u = (uintptr_t)p;
    _Static_assert(TS_SHIFT_SMALL - 8 == 8 && sizeof(ts_page_t) == 256, "index scaling");
    uintptr_t offset =
        (u >> (TS_SHIFT_SMALL - 8)) & (((TS_SEGMENT_SIZE >> TS_SHIFT_SMALL) - 1) << 8);
    return (ts_page_t *)((uintptr_t)ts_segment_of(p)->pages + offset);
}
/* True when p is the start of a block this page has handed out at some time:
 * off = p - start is k * size with k < carved. With size = odd << tz and inv
 * the inverse of odd modulo 2^64, rotating off * inv right by tz gives k when
 * size divides off, and at least 2^64 / size otherwise (nonzero low bits
 * rotate to the top; multiplying by inv maps the multiples of odd, and only
 * them, below 2^64 / odd): one multiply and one compare, exact for every
 * 64-bit off, p below start included. */
TS_INLINE bool ts_page_block_ok(const ts_page_t *page, uintptr_t p) {
    uint64_t x = (uint64_t)(p - page->start) * page->inv;
    unsigned tz = page->tz;
    uint64_t k = (x >> tz) | (x << ((64 - tz) & 63));
    return k < atomic_load_explicit(&page->carved, memory_order_relaxed);
}
TS_INLINE unsigned ts_page_state(const ts_page_t *page) {
    return atomic_load_explicit(&page->state, memory_order_relaxed);
}
TS_INLINE void ts_page_set_state(ts_page_t *page, unsigned state) {
    atomic_store_explicit(&page->state, (uint8_t)state, memory_order_relaxed);
}
TS_INLINE uintptr_t ts_page_owner(const ts_page_t *page) {
    return atomic_load_explicit(&page->owner, memory_order_relaxed);
}
/* For whoever may retire the page (its owner, or a thread adopting it):
 * every block it handed out is back in thread_free (their count makes
 * `used`); if so, thread_free is emptied and true returned. By CAS on the
 * very word whose count was compared: a sweep pass may hold the list for a
 * moment (sweep.c), and taking less than was counted would leave the page
 * in use with its blocks nowhere. */
TS_INLINE bool ts_page_take_all_back(ts_page_t *page) {
    uint64_t w = atomic_load_explicit(&page->thread_free, memory_order_acquire);
    if (ts_tf_count(w) != page->used) return false;
    /* The purge thread holds the page (rescue.c): its word is not final. */
    if ((atomic_load_explicit(&page->owner, memory_order_acquire) & TS_OWNER_FLAGS) ==
        TS_OWNER_CLAIMED)
        return false;
    if (!ts_tf_count(w)) return true;
    if (!atomic_compare_exchange_strong_explicit(&page->thread_free, &w,
                                                 ts_tf_make(NULL, 0, ts_tf_state(w)),
                                                 memory_order_acquire, memory_order_relaxed))
        return false;
    atomic_store_explicit(&page->swept_tf, 0, memory_order_relaxed); /* taken: see swept_tf */
    return true;
}

/* The second word of a free block (blocks are at least 16 bytes) holds its
 * free mark: the block's address mixed with its page's mark key, a value
 * drawn anew (from a per-process random key and a process-wide counter, top
 * bit set) each time the page is set up for a class. Every free, local or
 * remote, and every carving sets it, every allocation clears it; a block
 * being freed that carries it is already free: a double free, caught wherever
 * it waits (free list, remote batch or chain). A live block holds its mark
 * only if the program wrote that random value there: marks left in memory by
 * earlier uses of a page belong to other addresses or to an earlier key, so
 * copying them around (uninitialised bytes of a fresh block, say) never
 * makes one match. */
TS_INLINE uintptr_t ts_mark_of(const ts_page_t *page, const void *block) {
    return (uintptr_t)block ^ page->mark_key;
}
TS_INLINE uintptr_t *ts_mark_word(void *block) {
    return (uintptr_t *)block + 1;
}
TS_INLINE bool ts_block_marked(const ts_page_t *page, void *block) {
    return *ts_mark_word(block) == ts_mark_of(page, block);
}
TS_INLINE void ts_block_mark(const ts_page_t *page, void *block) {
    *ts_mark_word(block) = ts_mark_of(page, block);
}

/* ---- heaps ------------------------------------------------------------------- */

typedef struct ts_page_queue {
    ts_page_t *first, *last;
} ts_page_queue_t;

/* Remote frees waiting to be pushed to one page in one CAS. */
typedef struct ts_rbatch {
    ts_page_t *page;
    ts_block_t *head, *tail;
    uint32_t count;
    uint16_t seen; /* count when free_remote last looked (the fast path adds blocks unstamped) */
    uint16_t last; /* heap->rbatch_clock (mod 2^16) when free_remote last saw it grow */
} ts_rbatch_t;
#define TS_RBATCH_SLOTS     16
#define TS_RBATCH_MAX       32   /* blocks per batch */
#define TS_RBATCH_MAX_BLOCK 1024 /* larger blocks are pushed at once */
#define TS_RBATCH_STALE     16   /* free_remote calls since a batch last grew: left behind */
/* A batch is pushed once it holds this many bytes (page->rbatch_max blocks),
 * so a thread that frees others' blocks and then idles keeps at most
 * TS_RBATCH_SLOTS * TS_RBATCH_MAX_BYTES = 128 KiB. */
#define TS_RBATCH_MAX_BYTES 8192
_Static_assert(TS_RBATCH_MAX <= UINT16_MAX, "a batch's count fits ts_rbatch_t.seen");

enum { TS_HEAP_UNINIT = 0, TS_HEAP_ACTIVE, TS_HEAP_DEAD };

#if TS_SECURE
/* A heap's quarantine: a ring of freed blocks, oldest at `first` (secure.c). */
/* 128: a thread's ring of small blocks stays within L1/L2 (8 KiB of
 * pointers and sizes), and 32 threads hold a few MiB, not 16 (docs/secure.md). */
#define TS_QUARANTINE_SLOTS 128
typedef struct ts_quarantine {
    uint32_t first, count;
    size_t bytes;
    /* Read only below `count`: a new heap does not clear them (heap.c). */
    void *slot[TS_QUARANTINE_SLOTS];
    uint32_t cap[TS_QUARANTINE_SLOTS]; /* the block's size */
} ts_quarantine_t;
#endif

struct ts_heap {
    /* The fast path reads direct[] and head[], and counts allocations. */
    ts_page_t *direct[TS_DIRECT_SLOTS];   /* per size slot: its class's head */
    uint64_t alloc_slot[TS_DIRECT_SLOTS]; /* allocations per size slot (fast path) */
    ts_page_t *head[TS_CLASS_COUNT];      /* per class: the head, or _ts_page_empty */
    uint64_t alloc_class[TS_CLASS_COUNT]; /* other allocations */
    uint64_t allocs_seen[TS_CLASS_COUNT]; /* per class, at the last idle-page collection */
    uint32_t state;                       /* TS_HEAP_* */
    uint32_t id;
    ts_page_queue_t queue[TS_CLASS_COUNT]; /* pages with (possible) room, head first */
    ts_page_queue_t full;                  /* exhausted pages, waiting for frees */
    ts_rbatch_t rbatch[TS_RBATCH_SLOTS];
    uint32_t rbatch_used;
    uint16_t rbatch_clock;       /* counts free_remote calls (mod 2^16): the age of batches */
    _Atomic uint32_t slow_count; /* owner: relaxed load and store; rescue.c reads it */
    _Atomic uint8_t walking; /* the owner walks its pages' blocks (page.c, _ts_heap_walk_begin) */
    /* Pages of the full list the purge thread rescued (rescue.c): the owner
     * retires them at its next collection. */
    _Atomic uint32_t rescued;
    /* rescue.c's own, under the pool lock: */
    uint32_t rescue_seen_slow; /* slow_count at the last look */
    uint8_t rescue_armed;      /* blocks were waiting in `delayed` at the last look */
    uint8_t rescue_backoff;    /* looks in a row that rescued nothing: wait 2^n periods */
    uint64_t rescue_at;        /* no rescue before this (ns) */
    uint64_t rescue_idle_at;   /* idle long enough from then, if slow_count stays */
    /* The wait before the purge thread gives back memory the heap holds: the
     * purge delay << idle_shift (options.c, _ts_idle_ns). The owner moves it
     * when it comes back after a give-back (heap.c, idle_adapt); rescue.c
     * and sweep.c read it. */
    _Atomic uint8_t idle_shift;
    /* When the purge thread first gave back memory of the heap (rescued
     * pages, or swept blocks) since the owner last took it; 0: none since.
     * Set by CAS from 0, taken by the owner's slow path. */
    _Atomic uint64_t gave_back_at;
    /* sweep.c's own, under the pool lock: */
    uint32_t sweep_seen_slow;                  /* slow_count at the last sweep pass */
    uint8_t sweep_armed;                       /* sweep_seen_slow is set */
    uint64_t sweep_idle_since;                 /* first look that saw slow_count as it is */
    uint64_t maint_at;                         /* next idle-page check (ns) */
    ts_segment_t *segments;                    /* every segment this heap owns */
    ts_segment_t *avail[TS_KIND_COUNT];        /* owned segments with a free page */
    ts_segment_t *spare;                       /* one wholly free segment kept for reuse */
    ts_page_t *empty_big[TS_EMPTY_BIG_KEEP];   /* empty big pages kept, oldest first (page.c) */
    uint8_t empty_big_seen[TS_EMPTY_BIG_KEEP]; /* it was there at the last collection */
    ts_page_t *big_linger; /* the big page last emptied by a free, left first in its queue
                            * (kept while used == 0; page.c, _ts_page_empty_at_free) */
    uint64_t remote_frees, remote_pushes, notify_frees, adopted, large_allocs;
#if TS_SECURE
    ts_quarantine_t quarantine; /* freed blocks waiting to be reused (secure.c) */
#endif
    /* The first block of the last carving, when it lay past its page's
     * `touched`: zero but for its first two words (page.c, page_extend;
     * calloc skips the rest). Cleared by the calloc path before it allocates. */
    ts_block_t *fresh;
    ts_heap_t *all_next, *all_prev; /* live heaps (pool lock) */
    ts_heap_t *pool_next;
    /* Held by the heap's thread while it lives (robust: the kernel marks it
     * when the thread dies), so a heap whose thread exited without running
     * its destructor (created after the key destructors ran) is found and
     * abandoned by the purge thread. `watched` under the pool lock. */
    _Alignas(64) pthread_mutex_t alive; /* on one OS page: a fork child takes it anew (heap.c) */
    uint32_t watched;
    /* First-class heaps (heapapi.c): TS_HEAP_USER_MAGIC while a heap made by
     * ts_heap_new lives, 0 for a thread's heap; calls running on it (checked
     * build). page_bytes: the pages it holds (segment.c), with large_bytes
     * (its large blocks, large.c) at most footprint_peak at once. */
    _Atomic uint32_t user; /* read by remote freers (free.c) */
    _Atomic uint32_t user_busy;
    size_t page_bytes, footprint_peak;
    _Atomic size_t large_count, large_bytes;
    /* Written by other threads: alone in its 128-byte pair of lines (heaps
     * are 128-byte aligned in their pool). */
    _Alignas(128) _Atomic(ts_block_t *) delayed; /* blocks handed over for full pages */
    /* rescue.c gave up looking (nothing came of its last looks): a new
     * hand-over, or a push that may complete a page, asks it to look again. */
    _Atomic uint8_t rescue_parked;
    /* A remote push may have given back every block of one of its queue
     * pages: rescue.c looks at its queue pages at its next idle look. */
    _Atomic uint8_t rescue_queue;
    char delayed_pad[118];
};

/* ---- the sweep (sweep.c) ------------------------------------------------- */

/* sweep.c: purge the insides of big free blocks that other threads gave back
 * to pages of idle heaps: blocks of 8 KiB and more (the largest small class,
 * half of each of its blocks; medium and big pages). */
#define TS_SWEEP_MIN_BLOCK ((uint32_t)8192)
enum { TS_SWEEP_NOTHING = 0, TS_SWEEP_PENDING = 1, TS_SWEEP_REFUSED = 2 };
#define TS_SWEEP_MAX_IDLE 1024 /* idle heaps one pass looks at (more: the next passes) */
typedef struct ts_sweep_set {  /* the heaps a pass found idle, and their slow_count */
    const ts_heap_t *heap[TS_SWEEP_MAX_IDLE]; /* sorted by address */
    uint32_t stamp[TS_SWEEP_MAX_IDLE];
    unsigned n;
    uint64_t now; /* when the pass looked */
} ts_sweep_set_t;
typedef struct ts_sweep_held { /* a thread_free list a pass holds */
    ts_page_t *page;
    ts_block_t *head, *tail;
    uint32_t count, stamp;
    uint32_t refused; /* blocks whose purge the OS refused (left untagged) */
} ts_sweep_held_t;

#if TS_SECURE
#include "core/secure.h" /* the encoded free-list links */
#else
/* Free-list links are plain pointers (the secure build encodes them). */
#define ts_link_get(page, block, func)  ((void)(page), (block)->next)
#define ts_link_set(page, block, value) ((void)(page), (block)->next = (value))
#define ts_link_touch(page, block)      ((void)(page), *(ts_block_t *volatile *)&(block)->next)
#endif

#endif
