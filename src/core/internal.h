/* The fast allocator (libtsalloc): definitions shared by the files of src/core.
 * The types (pages, segments, heaps) and their inline readers are in
 * core/types.h, included here; below them, each file's shared functions.
 *
 * Terms, used the same way in every file:
 * - OS page: the kernel's 4 KiB unit.
 * - segment: a 4 MiB region mapped at a 4 MiB boundary, so that the segment of
 *   any pointer is `p & ~TS_SEGMENT_MASK`. Its first 64 KiB hold the header
 *   (the page descriptors); the rest is divided into pages of one kind.
 * - page: a run of memory inside a segment holding blocks of one size class.
 *   Kinds: small pages (64 KiB, blocks up to 8 KiB), medium pages (512 KiB,
 *   blocks up to 64 KiB), big pages (the whole segment, blocks up to 512 KiB).
 * - block: what malloc returns. class: one of the TS_CLASS_COUNT block sizes.
 * - large block: above the largest class; its own mapping (large.c).
 * - heap: the per-thread allocator state. Every page in use belongs to exactly
 *   one heap (page->owner) or to no heap when its thread has exited.
 * - list class: a class of small or medium pages (blocks up to 64 KiB). The
 *   first page of its queue is the heap's "head" page for the class, the one
 *   malloc pops blocks from; while it is head its `used` is not exact.
 *
 * Invariants:
 * - The owner thread allocates and frees on its pages without atomics or locks;
 *   other threads only push onto page->thread_free (or a heap's delayed list).
 * - page->used counts the carved blocks that are not on page->free (handed
 *   out, or waiting in thread_free or in a remote freer's batch), except on
 *   the head page of a list class: there malloc does not count, the owner's
 *   frees count down from TS_HEAD_USED_BIAS (set when the page becomes head,
 *   and again in the rare case it reaches 0), and the exact count, capacity
 *   minus the length of page->free, is computed by walking the list when the
 *   page stops being head. So malloc's fast path touches no counter, free's
 *   is the same for every page of the heap, and a head page is never
 *   retired. A page is retired only at used == 0.
 * - _ts_segmap[p >> 22] holds the page shift (16, 19, 22) of the segment at
 *   that 4 MiB chunk only while the segment is mapped, TS_MAP_LARGE where
 *   large blocks are or were (then the large-block table decides), else 0.
 *   free() consults it before reading any header, so foreign pointers are
 *   rejected without touching their memory.
 *
 * Lock order (outermost first): shared_lock, sweep lock, heap pool lock, reclaim lock,
 * abandoned lock, segment cache lock, registry lock, segment spinlocks,
 * segment reserve lock, large-table stripes, large cache shard locks,
 * big-block cache locks, purge mutex.
 * No lock is held across pthread_create or any call that may allocate.
 */
#ifndef TS_CORE_INTERNAL_H
#define TS_CORE_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/assert.h"
#include "base/base.h"
#include "core/types.h"

/* ---- cross-file functions ------------------------------------------------ */

/* Grouped by the file that defines them, one heading per file
 * (tests/layering/check_internal_h.py, the ctest internal_h_grouping, keeps
 * it so). */

/* ---- sizeclass.c --------------------------------------------------------- */

TS_HIDDEN extern ts_class_info_t _ts_classes[TS_CLASS_COUNT];
/* Sizes above the direct table up to 64 KiB: class = _ts_class_by_256[(size - 1) >> 8]
 * (class boundaries there are multiples of 256). */
#define TS_CLASS_BY_256_MAX TS_LIST_MAX_SIZE
TS_HIDDEN extern uint8_t _ts_class_by_256[TS_CLASS_BY_256_MAX / 256];
/* Big classes, above 64 KiB: class = _ts_class_by_16k[(size - 1) >> 14] (their
 * boundaries are multiples of 16 KiB). */
TS_HIDDEN extern uint8_t _ts_class_by_16k[TS_CLASS_MAX_SIZE >> 14];
TS_HIDDEN void _ts_sizeclass_init(void);
/* The smallest class >= size whose block size is a multiple of align (a power
 * of two, 16 < align <= 64 KiB), or TS_CLASS_COUNT when none. */
TS_HIDDEN unsigned _ts_class_aligned(size_t size, size_t align);

/* ---- options.c ----------------------------------------------------------- */

/* sizeclass.c: see above. options.c */
enum ts_option {
    TS_OPT_PURGE_DELAY_MS,
    TS_OPT_PURGE_THREAD,
    TS_OPT_SEGMENT_CACHE,
    TS_OPT_LARGE_CACHE_MB,
    TS_OPT_HUGE_PAGES,
    TS_OPT_RESCUE,
    TS_OPT_STATS,
    TS_OPT_VERBOSE,
    TS_OPT_SHARED_START,
    TS_OPT_ZERO_ON_FREE,
    TS_OPT_COUNT
};
TS_HIDDEN void _ts_options_init(void);
TS_HIDDEN long long _ts_option(enum ts_option opt);
TS_HIDDEN uint64_t _ts_purge_delay_ns(void);
#define TS_IDLE_SHIFT_MAX 3                     /* idle waits of 1, 2, 4 or 8 purge delays */
TS_HIDDEN uint64_t _ts_idle_ns(unsigned shift); /* options.c: idle owner (rescue.c, sweep.c) */
TS_HIDDEN unsigned _ts_idle_shift_next(unsigned shift, uint64_t at, uint64_t now);
TS_HIDDEN uint64_t _ts_look_period_ns(void); /* options.c: between their looks */
#define TS_REFUSED_RETRY_MAX 6               /* refusals in a row counted: 2^5 periods */
TS_HIDDEN uint64_t _ts_refused_retry_ns(unsigned refusals); /* options.c */
TS_HIDDEN void _ts_verbose(int level, const char *fmt, ...);

/* ---- zerofree.c ------------------------------------------------------------ */

TS_HIDDEN extern uint8_t _ts_map_flag;       /* TS_MAP_SLOW when zeroing frees, else 0 */
TS_HIDDEN extern size_t _ts_zero_free_bytes; /* TSALLOC_ZERO_ON_FREE (plain build) */
TS_HIDDEN void _ts_zero_free_init(void);
TS_HIDDEN void _ts_zero_freed(void *p, size_t size); /* its first bytes, up to the option */

/* ---- stats.c ------------------------------------------------------------- */

/* Process-wide counters, updated on slow paths only. */
typedef struct ts_gstats {
    _Atomic size_t committed; /* bytes mapped and not purged since (upper bound of RSS) */
    _Atomic size_t peak;      /* highest committed seen */
    _Atomic size_t purged;    /* bytes given back with MADV_DONTNEED, cumulative */
    _Atomic size_t unmapped;  /* bytes unmapped, cumulative */
    _Atomic size_t dirty;     /* free bytes still resident (purge candidates) */
    _Atomic size_t segments;  /* segments mapped */
    _Atomic size_t segments_cached;
    _Atomic size_t segments_abandoned;
    _Atomic size_t pages[TS_KIND_COUNT]; /* pages in use */
    _Atomic size_t large_count;          /* live large blocks */
    _Atomic size_t large_bytes;
    _Atomic size_t large_cached_count;
    _Atomic size_t large_cached_bytes;
    _Atomic size_t large_cache_hits;
    _Atomic size_t large_remaps;
    _Atomic size_t heaps_live;
    _Atomic size_t heaps_created;
    _Atomic size_t threads_exited;
    _Atomic size_t adopted;
    _Atomic size_t reclaimed_pages; /* pages of dead threads given back by the purge thread */
    _Atomic size_t rescued_pages;   /* pages of idle threads purged by it (rescue.c) */
    _Atomic size_t swept_bytes;     /* insides of free blocks purged by it (sweep.c) */
    _Atomic size_t swept_blocks;
    _Atomic size_t purge_runs;
    _Atomic size_t huge_halves; /* 2 MiB halves asked for huge pages, cumulative */
    _Atomic size_t huge_splits; /* of them, split by a purge since */
    _Atomic size_t main_checks; /* thread exits that asked the helper to look at main (tests) */
    _Atomic uint64_t alloc[TS_CLASS_COUNT]; /* folded in from exited heaps */
    _Atomic uint64_t remote_frees;
    _Atomic uint64_t remote_pushes; /* CASes that carried them */
    _Atomic uint64_t large_allocs;
    /* Of the committed bytes, those of pages past their `touched` mark: not
     * written since mapped or purged. committed - untouched is what the
     * purge thread's rule counts (purge.c): a big page commits 4 MiB for its first
     * block. */
    _Atomic size_t untouched;
} ts_gstats_t;
TS_HIDDEN extern ts_gstats_t _ts_stats;
TS_HIDDEN void _ts_stat_commit(size_t bytes);
/* The same without asking for the helper (which takes its mutex), for
 * callers holding a segment spinlock: true when they must call
 * _ts_purge_schedule() once they released it. */
TS_HIDDEN bool _ts_stat_commit_locked(size_t bytes);
TS_HIDDEN void _ts_stat_decommit(size_t bytes);
/* A page's area committed or given back, of which area - touched is not
 * written yet (untouched above); the commit returns as _ts_stat_commit_locked. */
TS_HIDDEN bool _ts_stat_commit_page(size_t area, size_t touched);
TS_HIDDEN void _ts_stat_decommit_pages(size_t area, size_t untouched);
/* page_extend wrote `bytes` more of a page (owner, no lock held). */
TS_HIDDEN void _ts_stat_touch(size_t bytes);
/* The same under a segment spinlock; returns as _ts_stat_commit_locked. */
TS_HIDDEN bool _ts_stat_touch_locked(size_t bytes);
/* A page still in use was purged: its `bytes` of writes are fresh again. */
TS_HIDDEN void _ts_stat_untouch(size_t bytes);
/* committed - untouched: the bytes the purge thread's rule counts. */
TS_HIDDEN size_t _ts_stat_used(void);
TS_HIDDEN void _ts_stats_fold_heap(const ts_heap_t *heap);
TS_HIDDEN void _ts_stats_print_exit(void);

/* ---- init.c -------------------------------------------------------------- */

TS_HIDDEN void _ts_process_init(void);
TS_HIDDEN bool _ts_process_ready(void);
TS_HIDDEN ts_heap_t *_ts_thread_init(void);
/* A fresh mark key for a page set up for a class. */
TS_HIDDEN uint64_t _ts_new_mark_key(void);

/* ---- heap.c -------------------------------------------------------------- */

/* The calling thread's heap: one pointer of initial-exec TLS. Starts as the
 * static empty heap (every direct slot points at an empty page), so the first
 * malloc falls into the slow path without a NULL check. */
TS_HIDDEN extern __thread ts_heap_t *_ts_tls_heap __attribute__((tls_model("initial-exec")));
TS_HIDDEN extern ts_heap_t _ts_heap_empty; /* threads without a heap yet */
TS_HIDDEN extern ts_heap_t _ts_heap_dead;  /* threads past their heap's destructor */
/* user: 0, or heapapi.c's mark for a heap of ts_heap_new. */
TS_HIDDEN ts_heap_t *_ts_heap_new(bool for_this_thread, uint32_t user);
TS_HIDDEN void _ts_heap_thread_exit(ts_heap_t *heap);
TS_HIDDEN void _ts_heaps_reap(void);
TS_HIDDEN void _ts_heap_abandon(ts_heap_t *heap);
/* The same, its live pages going to heap `to` rather than the abandoned
 * list when `to` is not NULL (ts_heap_delete). */
TS_HIDDEN void _ts_heap_abandon_to(ts_heap_t *heap, ts_heap_t *to);
TS_HIDDEN void _ts_heap_slow_tick(ts_heap_t *heap);
TS_HIDDEN void _ts_heap_collect(ts_heap_t *heap, bool force);
/* The shared heap: threads past their heap's destructor, and new threads
 * for their first calls (under a lock). */
TS_HIDDEN void *_ts_shared_alloc(size_t size, size_t align, bool zero);
/* For a thread without a heap: true while its call (an allocation, or a free
 * of another thread's block) goes to the shared heap rather than making it
 * one; counts the call. */
TS_HIDDEN bool _ts_thread_start_shared(void);
TS_HIDDEN void _ts_shared_collect(bool wait);
TS_HIDDEN void _ts_heaps_atfork_prepare(void);
TS_HIDDEN void _ts_heaps_atfork_parent(void);
TS_HIDDEN void _ts_heaps_atfork_child(void);
/* Heaps whose threads exist in this process (heaps_live without a fork
 * child's inherited ones). */
TS_HIDDEN size_t _ts_heaps_running(void);
/* False once the main thread's heap is gone (main called pthread_exit), or
 * when main never had one. */
TS_HIDDEN bool _ts_main_heap_live(void);
/* fn(heap, arg) for each live heap, then fn(NULL, arg), all under the pool
 * lock: an exiting heap folds its counts into _ts_stats under that lock, so
 * the NULL call reads totals that count each heap once. */
typedef void (*ts_heap_visit_fn)(const ts_heap_t *heap, void *arg);
TS_HIDDEN void _ts_heaps_visit(ts_heap_visit_fn fn, void *arg);
/* Give back full pages of idle heaps whose blocks other threads freed
 * (rescue.c, one heap at a time); returns when the next look is due. */
TS_HIDDEN uint64_t _ts_heaps_rescue(uint64_t now);
/* Pool lock held: the idle heaps from the window-th TS_SWEEP_MAX_IDLE on,
 * returns how many are idle in all. */
TS_HIDDEN unsigned _ts_heaps_sweep_look(ts_sweep_set_t *set, unsigned window, uint64_t now);
/* How long the heap's owner must make no slow path to count as idle. */
TS_INLINE uint64_t ts_heap_idle_ns(const ts_heap_t *heap) {
    return _ts_idle_ns(atomic_load_explicit(&heap->idle_shift, memory_order_relaxed));
}
/* The purge thread gave back memory of the heap at `now` (rescue.c, sweep.c). */
TS_HIDDEN void _ts_heap_note_give_back(ts_heap_t *heap, uint64_t now);

/* ---- page.c -------------------------------------------------------------- */

TS_HIDDEN extern ts_page_t _ts_page_empty;
TS_HIDDEN void *_ts_heap_malloc_class(ts_heap_t *heap, unsigned cls);
/* A block from the first page of a class's queue, or NULL when that page has
 * none on its list (the caller then takes _ts_heap_malloc_class). Owner only. */
TS_INLINE void *ts_queue_pop(ts_heap_t *heap, unsigned cls) {
    ts_page_t *page = heap->queue[cls].first;
    ts_block_t *block;
    if (!page || (block = page->free) == NULL) return NULL;
    page->free = ts_link_get(page, block, "malloc");
    *ts_mark_word(block) = 0;
    if (!page->is_head) page->used++;
    heap->alloc_class[cls]++;
    return block;
}
TS_HIDDEN void _ts_page_push_local(ts_heap_t *heap, ts_page_t *page, ts_block_t *block);
TS_HIDDEN void _ts_page_unfull(ts_heap_t *heap, ts_page_t *page);
TS_HIDDEN void _ts_page_retire(ts_heap_t *heap, ts_page_t *page);
/* The owner walks the blocks of its pages (heap check, visit): between
 * begin and end the purge thread claims none of the heap's pages for a
 * rescue (rescue.c), and _ts_page_walkable waits out a claim made before
 * and says whether the page still has blocks to walk (false: rescued, every
 * block free and purged). A flag, not a claim of each page, so that a fork
 * meanwhile leaves no page claimed in the child. */
TS_HIDDEN void _ts_heap_walk_begin(ts_heap_t *heap);
TS_HIDDEN void _ts_heap_walk_end(ts_heap_t *heap);
TS_HIDDEN bool _ts_page_walkable(ts_heap_t *heap, ts_page_t *page);
TS_HIDDEN void _ts_page_detach(ts_heap_t *heap, ts_page_t *page);
TS_HIDDEN void _ts_page_settle_notify(ts_page_t *page);
TS_HIDDEN uint32_t _ts_page_live(const ts_page_t *page);
TS_HIDDEN void _ts_queue_push_back(ts_heap_t *heap, ts_page_t *page);
TS_HIDDEN void _ts_page_uncache(ts_heap_t *heap);
TS_HIDDEN TS_NOINLINE void _ts_page_empty_at_free(ts_heap_t *heap, ts_page_t *page);
/* The lingering big page emptied again, still first in its queue and within
 * the bound of _ts_page_empty_at_free: it stays as it is (one big block
 * malloc'ed and freed in a loop), with no call. */
TS_INLINE bool ts_page_lingers_again(const ts_heap_t *heap, const ts_page_t *page) {
    return page == heap->big_linger && heap->queue[page->cls].first == page &&
           (!heap->empty_big[0] || page->touched <= TS_EMPTY_BIG_EXTRA_BYTES);
}
/* Idle-page collection (heap.c calls it about every purge delay). */
TS_HIDDEN void _ts_pages_collect(ts_heap_t *heap, bool force);

/* A heap took `bytes` of pages (segment.c, abandon.c): its footprint for
 * ts_heap_stats (owner only; large blocks join in heapapi.c). */
TS_INLINE void ts_heap_pages_grew(ts_heap_t *heap, size_t bytes) {
    heap->page_bytes += bytes;
    size_t now = heap->page_bytes + atomic_load_explicit(&heap->large_bytes, memory_order_relaxed);
    if (now > heap->footprint_peak) heap->footprint_peak = now;
}

/* ---- alloc.c ------------------------------------------------------------- */

TS_HIDDEN TS_NOINLINE void *_ts_malloc_generic(size_t size, ts_heap_t *heap);
TS_HIDDEN void *_ts_alloc_aligned(size_t size, size_t align, bool zero);
TS_HIDDEN void *_ts_heap_alloc(ts_heap_t *heap, size_t size, size_t align, bool zero);

/* ---- free.c -------------------------------------------------------------- */

TS_HIDDEN TS_NOINLINE void _ts_free_slow(void *p);
TS_HIDDEN TS_NOINLINE void _ts_free_other(ts_heap_t *heap, ts_page_t *page, ts_block_t *block);
TS_HIDDEN void _ts_rbatch_flush(ts_heap_t *heap, ts_rbatch_t *b);
/* A page's batch slots (page.c sets them when the page takes a class):
 * page->rslot by its class and owner heap, so that a producer's current page
 * of each class gets a slot of its own whichever segments they are in, and
 * heaps differ by an offset; page->rslot_alt by its index in the segment, so
 * that pages of one class get distinct ones, and segments differ by an
 * offset. */
TS_INLINE unsigned ts_rbatch_slot_for(const ts_segment_t *seg, unsigned index) {
    uintptr_t a = (uintptr_t)seg >> TS_SEGMENT_SHIFT;
    return (unsigned)(index + a + (a >> 4)) & (TS_RBATCH_SLOTS - 1);
}
TS_HIDDEN void _ts_page_push_remote(ts_page_t *page, ts_block_t *head, ts_block_t *tail,
                                    uint32_t count);
TS_HIDDEN void _ts_process_delayed(ts_heap_t *heap);
/* Classify a pointer: 0 not ours, 1 large block, 2 class block (page set). */
enum { TS_PTR_FOREIGN = 0, TS_PTR_LARGE, TS_PTR_BLOCK };
TS_HIDDEN int _ts_locate(const void *p, ts_page_t **page);
TS_HIDDEN size_t _ts_usable_checked(const void *p, const char *func);
/* The usable size of block p of `page`, after the checks free makes: not a
 * block the page handed out aborts as an invalid pointer, a free one (its
 * mark, or its page rescued) as a double free, naming `func`. */
TS_HIDDEN size_t _ts_block_usable(const ts_page_t *page, const void *p, const char *func);
TS_HIDDEN void _ts_heap_flush_remote(ts_heap_t *heap);

/* ---- segment lists ------------------------------------------------------- */

/* The lists a segment is on through next/prev (one at a time: its heap's
 * segments, the abandoned list, the cache), each under its own lock or
 * owner: push at the front, and unlink. */
TS_INLINE void ts_seg_list_push(ts_segment_t **head, ts_segment_t *seg) {
    seg->prev = NULL;
    seg->next = *head;
    if (*head) (*head)->prev = seg;
    *head = seg;
}

TS_INLINE void ts_seg_list_remove(ts_segment_t **head, ts_segment_t *seg) {
    ts_assert(seg->prev ? seg->prev->next == seg : *head == seg);
    if (seg->prev)
        seg->prev->next = seg->next;
    else
        *head = seg->next;
    if (seg->next) seg->next->prev = seg->prev;
    seg->next = seg->prev = NULL;
}

/* ---- registry.c ---------------------------------------------------------- */

TS_HIDDEN extern _Atomic uint8_t _ts_segmap[TS_SEGMAP_ENTRIES];
TS_HIDDEN void _ts_segmap_init(void); /* process start-up, before any segment */
/* Entries for [addr, addr + size) may be set from now on: false (the
 * commit limit) when the map's pages for them could not be made writable.
 * Always true but under vm.overcommit_memory=2 (_ts_segmap_strict). */
TS_HIDDEN bool _ts_segmap_prepare(uintptr_t addr, size_t size);
TS_HIDDEN bool _ts_segmap_strict(void);
TS_HIDDEN ts_segment_t *_ts_segment_map_new(bool huge_first_half);
TS_HIDDEN void _ts_segment_unmap(ts_segment_t *seg);
TS_HIDDEN uint64_t _ts_segments_purge(uint64_t now, bool force);
TS_HIDDEN unsigned _ts_segments_sweep(const ts_sweep_set_t *set); /* the sweep's walk */
/* The queue pages of idle `heap` whose blocks all came back: rescued
 * (rescue.c); pool lock held. Returns how many. */
TS_HIDDEN unsigned _ts_segments_rescue(ts_heap_t *heap);
TS_HIDDEN void _ts_segments_count(size_t *total, size_t *owned);
TS_HIDDEN size_t _ts_segments_reserved(void); /* reserved, not yet handed out (tests) */
/* fn for every mapped segment, then fn(NULL), all under the registry lock
 * (debugging). */
TS_HIDDEN void _ts_segments_visit(void (*fn)(ts_segment_t *seg, void *arg), void *arg);
TS_HIDDEN void _ts_segments_live(uint64_t live[TS_CLASS_COUNT]);
TS_HIDDEN void _ts_registry_atfork_prepare(void);
TS_HIDDEN void _ts_registry_atfork_parent(void);
TS_HIDDEN void _ts_registry_atfork_child(void);

/* Segment spinlocks and fork. A fork must not catch a segment's state half
 * changed, yet writing every segment's lock around it would cost a
 * copy-on-write fault per segment in the parent (the unlocks) and another in
 * the child (the re-initialisations). So the fork handler closes a gate
 * instead (one write) and waits, reading only, for every segment lock to be
 * free; a thread that takes a lock while the gate is closed lets it go at
 * once, before touching anything, and waits for the gate to open. The lock
 * and the gate are read and written with seq_cst, so that either the fork
 * handler sees the lock held or the taker sees the gate closed. A fork
 * child finds held only the locks of such takers, whose threads it does not
 * have, and frees them. */
TS_HIDDEN extern _Atomic int _ts_seg_gate;
TS_HIDDEN void _ts_seg_lock_wait(ts_segment_t *seg); /* registry.c */

TS_INLINE void ts_seg_lock(ts_segment_t *seg) {
    for (;;) {
        if (ts_likely(!atomic_exchange_explicit(&seg->lock.held, 1, memory_order_seq_cst))) {
            if (ts_likely(!atomic_load_explicit(&_ts_seg_gate, memory_order_seq_cst))) return;
            ts_spin_unlock(&seg->lock); /* a fork is under way */
        }
        _ts_seg_lock_wait(seg);
    }
}

/* Takes the lock if it is free and no fork is under way. */
TS_INLINE bool ts_seg_trylock(ts_segment_t *seg) {
    if (atomic_load_explicit(&seg->lock.held, memory_order_relaxed) ||
        atomic_exchange_explicit(&seg->lock.held, 1, memory_order_seq_cst))
        return false;
    if (ts_likely(!atomic_load_explicit(&_ts_seg_gate, memory_order_seq_cst))) return true;
    ts_spin_unlock(&seg->lock);
    return false;
}

TS_INLINE void ts_seg_unlock(ts_segment_t *seg) {
    ts_spin_unlock(&seg->lock);
}

/* ---- segment.c ----------------------------------------------------------- */

/* A free page of `kind` for class cls; NULL with *adopted set: a segment
 * of the kind (for a big page, of the class) was adopted, look at the
 * queues again. */
TS_HIDDEN ts_page_t *_ts_segment_page_alloc(ts_heap_t *heap, enum ts_kind kind, unsigned cls,
                                            bool may_adopt, bool *adopted);
TS_HIDDEN void _ts_segment_page_free(ts_heap_t *heap, ts_page_t *page);
/* Write page i's index, base and area from the segment's layout (segment
 * lock held; a fresh segment's descriptors get them on first use). */
TS_HIDDEN void _ts_segment_page_place(ts_segment_t *seg, ts_page_t *page, unsigned i);
TS_HIDDEN void _ts_segment_release(ts_segment_t *seg);
TS_HIDDEN void _ts_heap_seg_add(ts_heap_t *heap, ts_segment_t *seg);
TS_HIDDEN void _ts_segment_avail_add(ts_heap_t *heap, ts_segment_t *seg);
TS_HIDDEN size_t _ts_segment_cache_trim(void);
TS_HIDDEN void _ts_segment_cache_shrink(void);
TS_HIDDEN void _ts_heap_release_segments(ts_heap_t *heap, ts_heap_t *to);
TS_HIDDEN bool _ts_segment_drop_pages(ts_segment_t *seg, uint64_t now);
TS_HIDDEN void _ts_segments_atfork_prepare(void);
TS_HIDDEN void _ts_segments_atfork_parent(void);
TS_HIDDEN void _ts_segments_atfork_child(void);

/* ---- segpurge.c ---------------------------------------------------------- */

/* Segments are asked for transparent huge pages by 2 MiB halves. */
#define TS_HALF_SIZE (TS_SEGMENT_SIZE / 2)
TS_HIDDEN bool _ts_huge_wanted(ts_heap_t *heap, enum ts_kind kind);
TS_HIDDEN bool _ts_huge_half_taken(ts_segment_t *seg, unsigned half);
TS_HIDDEN bool _ts_second_half_fresh(const ts_segment_t *seg, unsigned i);
TS_HIDDEN uint64_t _ts_segment_purge_pages(ts_segment_t *seg, uint64_t mask, uint64_t now);
TS_HIDDEN uint64_t _ts_segment_purge_expired(ts_segment_t *seg, uint64_t now, bool force);
/* A page of the full list whose blocks are all free: purge its memory (the
 * page stays in use); false when the OS refused. */
TS_HIDDEN bool _ts_segment_purge_in_use(ts_page_t *page);
/* A page taken for another class than its memory was touched by, with blocks
 * above TS_RELAYOUT_PURGE_MIN: purge what the old layout touched when little
 * of it is resident (the program writes only part of its blocks). */
#define TS_RELAYOUT_PURGE_MIN TS_MEDIUM_PAGE_MAX
TS_HIDDEN void _ts_segment_purge_relayout(ts_page_t *page);
TS_HIDDEN void _ts_segment_sweep_prepare(ts_page_t *page); /* before the sweep purges in it */
/* The free pages in `bits` are resident: their purge is due at `at` (the
 * earliest of theirs). Segment lock held. */
TS_INLINE void ts_segment_dirty_due(ts_segment_t *seg, uint64_t bits, uint64_t at) {
    atomic_fetch_or(&seg->dirty_mask, bits);
    if (bits && at < atomic_load_explicit(&seg->purge_at_min, memory_order_relaxed))
        atomic_store_explicit(&seg->purge_at_min, at, memory_order_relaxed);
}

/* ---- abandon.c ----------------------------------------------------------- */

TS_HIDDEN void _ts_segment_abandon(ts_segment_t *seg);
TS_HIDDEN uint64_t _ts_abandoned_reclaim(uint64_t now, bool force);
/* The newest abandoned segment of `kind` (for a big one, whose page is of
 * class cls), taken off the list; NULL if none among the newest. */
TS_HIDDEN ts_segment_t *_ts_abandoned_pop(enum ts_kind kind, unsigned cls);
TS_HIDDEN void _ts_heap_adopt(ts_heap_t *heap, ts_segment_t *seg);
TS_HIDDEN void _ts_abandoned_note_free(void);
TS_HIDDEN void _ts_abandoned_delay_changed(uint64_t now);
TS_HIDDEN void _ts_abandoned_atfork_prepare(void);
TS_HIDDEN void _ts_abandoned_atfork_parent(void);
TS_HIDDEN void _ts_abandoned_atfork_child(void);

/* ---- bigcache.c ---------------------------------------------------------- */

/* Blocks of big classes freed to pages whose owner exited, for any
 * thread's next allocation of the class. Push: true when kept (an abandoned
 * page's block, marked free, its class with room); pop: a block handed out, or NULL; purge: stacks
 * unused for a purge delay (all when forced) go back to their pages; returns when the next is due.
 */
TS_HIDDEN bool _ts_bigcache_push(ts_page_t *page, ts_block_t *block);
TS_HIDDEN void *_ts_bigcache_pop(unsigned cls);
TS_HIDDEN uint64_t _ts_bigcache_purge(uint64_t now, bool force);
TS_HIDDEN unsigned _ts_bigcache_kept(unsigned cls); /* blocks of the class kept (a hint) */
TS_HIDDEN void _ts_bigcache_atfork_prepare(void);
TS_HIDDEN void _ts_bigcache_atfork_parent(void);
TS_HIDDEN void _ts_bigcache_atfork_child(void);

/* ---- large.c ------------------------------------------------------------- */

TS_HIDDEN void *_ts_large_alloc(size_t size, size_t align, bool zero);
TS_HIDDEN void _ts_large_free(void *p, const char *func);
TS_HIDDEN size_t _ts_large_usable(const void *p, const char *func);
/* For debugging (walks of the table): the large block holding p, its start
 * and mapped size; 1 a live block, 2 a free region in the cache, 0 none. */
TS_HIDDEN int _ts_large_find(const void *p, uintptr_t *start, size_t *size);
/* fn for every live large block, under its table stripe's lock. */
TS_HIDDEN void _ts_large_visit(void (*fn)(uintptr_t start, size_t size, void *arg), void *arg);
TS_HIDDEN void *_ts_large_realloc(void *p, size_t size);
/* Large blocks of ts_heap_new's heaps (heapapi.c): `heap` owns live large
 * block p, just allocated; every block it owns is freed (destroy) or let go
 * (free_them false: delete); the next up to `max` blocks it owns from
 * *cursor on (visit), and the size of p if it is one of them, else 0. */
TS_HIDDEN void _ts_large_own(void *p, ts_heap_t *heap);
TS_HIDDEN void _ts_large_heap_end(ts_heap_t *heap, bool free_them);
TS_HIDDEN size_t _ts_large_heap_list(ts_heap_t *heap, size_t *cursor, void **ptrs, size_t max);
TS_HIDDEN size_t _ts_large_owned_size(const void *p, const ts_heap_t *heap);
TS_HIDDEN void _ts_large_atfork_prepare(void);
TS_HIDDEN void _ts_large_atfork_parent(void);
TS_HIDDEN void _ts_large_atfork_child(void);

/* ---- largecache.c (its other functions: largecache.h) --------------------- */

/* Purge and unmap the cached regions that expired (all with force); the
 * time of the next expiry, or UINT64_MAX. */
TS_HIDDEN uint64_t _ts_large_purge(uint64_t now, bool force);

/* ---- api.c --------------------------------------------------------------- */

/* realloc of p, a block of the core, under the name func: kept when it fits
 * (a large one moved or grown by the OS), else copied into alloc(arg, size)
 * and freed. NULL with errno = ENOMEM for impossible sizes. */
TS_HIDDEN void *_ts_realloc_with(void *p, size_t size, const char *func,
                                 void *(*alloc)(void *arg, size_t size), void *arg);

/* ---- check.c ------------------------------------------------------------- */

/* Owner thread: the length of the page's free list, each block on it in the
 * page's carved blocks, on a boundary, once, with its free mark; else abort
 * naming `where`. */
TS_HIDDEN uint32_t _ts_check_page_list(const ts_page_t *page, const char *where);
/* A page being retired has every block it carved back: on its list, or
 * `used` of them taken back from its thread_free. */
TS_HIDDEN void _ts_check_page_retire(const ts_page_t *page);
/* Segment lock held: its free mask, its page states and used_pages agree. */
TS_HIDDEN void _ts_check_segment_locked(const ts_segment_t *seg, const char *where);
/* The heap's queues, full list and their pages' lists and counts (owner). */
TS_HIDDEN void _ts_check_heap(const ts_heap_t *heap, const char *where);

/* ---- purge.c ------------------------------------------------------------- */

/* Below this much memory in use (committed, less what no page has written
 * yet: _ts_stat_used) a single-threaded process gets no purge thread
 * (purge.c). */
#define TS_PURGE_THREAD_MIN_BYTES ((size_t)8 << 20)
TS_HIDDEN void _ts_purge_schedule(void);
TS_HIDDEN void _ts_purge_schedule_look(void);
TS_HIDDEN void _ts_purge_schedule_later(void);
TS_HIDDEN bool _ts_purge_helper_idle(void); /* for tests */
/* A thread with a heap ended: the helper looks whether main has exited (and
 * then ends, so that it does not keep the process alive). */
TS_HIDDEN void _ts_purge_thread_ended(void);
TS_HIDDEN void _ts_purge_delay_changed(void);
TS_HIDDEN bool _ts_purge_is_helper(void); /* the calling thread is the purge thread */
TS_HIDDEN void _ts_purge_safe_point(void);
TS_HIDDEN extern _Atomic int _ts_purge_wanted; /* the helper thread should be started */
TS_INLINE void ts_purge_safe_point(void) {
    if (ts_unlikely(atomic_load_explicit(&_ts_purge_wanted, memory_order_relaxed)))
        _ts_purge_safe_point();
}
TS_HIDDEN uint64_t _ts_purge_run(uint64_t now, bool force);
TS_HIDDEN void _ts_purge_atfork_prepare(void);
TS_HIDDEN void _ts_purge_atfork_parent(void);
TS_HIDDEN void _ts_purge_atfork_child(void);
TS_HIDDEN bool _ts_purge_thread_running(void);

/* ---- rescue.c ------------------------------------------------------------ */

TS_HIDDEN uint64_t _ts_heap_rescue(ts_heap_t *heap, uint64_t now); /* one heap, pool lock held */
/* A queue page of idle heap taken for a rescue (registry lock held): the
 * page claimed and its thread_free list taken; finished without the lock. */
typedef struct ts_qheld {
    ts_page_t *page;
    uint64_t tf; /* the thread_free word taken */
    bool purged;
} ts_qheld_t;
TS_HIDDEN bool _ts_rescue_queue_take(ts_page_t *page, ts_heap_t *heap, ts_qheld_t *h);
TS_HIDDEN void _ts_rescue_queue_purge(ts_qheld_t *h);
TS_HIDDEN bool _ts_rescue_queue_publish(const ts_qheld_t *h);

/* ---- sweep.c ------------------------------------------------------------- */

TS_HIDDEN extern _Atomic int _ts_sweep_wanted;
TS_HIDDEN void _ts_sweep_request(void);
TS_HIDDEN void _ts_sweep_rescue_on(void);         /* TSALLOC_RESCUE set to 1 at run time */
TS_HIDDEN uint64_t _ts_sweep_next(void);          /* for tests: the next pass (UINT64_MAX: none) */
TS_HIDDEN uint64_t _ts_heaps_sweep(uint64_t now); /* one pass, if due */
TS_HIDDEN unsigned _ts_sweep_take(ts_page_t *page, const ts_sweep_set_t *set, ts_sweep_held_t *h);
TS_HIDDEN void _ts_sweep_purge(ts_sweep_held_t *h);
TS_HIDDEN void _ts_sweep_give_back(ts_sweep_held_t *h);
TS_HIDDEN void _ts_sweep_atfork_prepare(void);
TS_HIDDEN void _ts_sweep_atfork_parent(void);
TS_HIDDEN void _ts_sweep_atfork_child(void);
TS_HIDDEN void _ts_sweep_blocks(ts_page_t *page, ts_block_t *head, uint32_t count,
                                uint32_t stamp); /* rescue.c's hand-overs */

#endif
