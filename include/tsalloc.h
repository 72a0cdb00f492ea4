/* tsalloc: the public API of the fast allocator (libtsalloc.so / .a).
 *
 * Linking or preloading libtsalloc replaces malloc, free and the whole malloc
 * family. The ts_-prefixed functions below reach the same allocator without
 * relying on the override, plus options and statistics. docs/core.md explains
 * the design, docs/options.md the options.
 */
#ifndef TSALLOC_H
#define TSALLOC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* As malloc/free/calloc/realloc: 16-byte aligned blocks; NULL with errno =
 * ENOMEM when a size cannot be satisfied. ts_realloc(p, 0) frees p and
 * returns NULL; ts_realloc(NULL, n) is ts_malloc(n). Freeing a pointer
 * tsalloc did not hand out, or a detectable double free, aborts with
 * "tsalloc: free(): invalid pointer 0x..." (or "double free of 0x..."). */
void *ts_malloc(size_t size);
void ts_free(void *ptr);
void *ts_calloc(size_t count, size_t size);
void *ts_realloc(void *ptr, size_t size);
/* align must be a power of two (else NULL with errno = EINVAL). */
void *ts_aligned_alloc(size_t align, size_t size);
/* The usable size of a block (>= the size asked for); 0 for NULL. */
size_t ts_usable_size(const void *ptr);

/* Statistics (per size class: allocated, freed, live; pages and segments in
 * use; bytes committed, purged, peak; large blocks and their cache), as text
 * or as one JSON object. NULL prints to stderr. TSALLOC_STATS=1 (text) or 2
 * (JSON) prints them at exit. */
void ts_stats_print(FILE *out);
void ts_stats_print_json(FILE *out);

/* Options (docs/options.md): by name without the TSALLOC_ prefix, case
 * insensitive, e.g. "purge_delay_ms". get returns -1 for an unknown name;
 * set returns false for an unknown name or a value out of range. */
long long ts_option_get(const char *name);
bool ts_option_set(const char *name, long long value);

/* ---- First-class heaps (docs/heaps.md) ----------------------------------
 * Only the fast allocator (libtsalloc) has them; the other designs'
 * libraries export none of the ts_* functions, so a program that calls
 * these links against libtsalloc (TSALLOC_HAS_HEAPS says the header has them).
 *
 * A heap holds its own pages: blocks allocated from it are ordinary blocks
 * (free, realloc, malloc_usable_size work on them from any thread), and
 * ts_heap_destroy releases all of them at once, in time proportional to the
 * heap's pages. Large blocks (above 512 KiB) allocated from a heap belong to
 * it too.
 *
 * Threading: one thread at a time allocates from a heap (ts_heap_malloc and
 * the others, ts_heap_visit, ts_heap_stats, ts_heap_destroy, ts_heap_delete):
 * the caller serialises them, as for any unsynchronised object; the checked
 * build aborts when two such calls overlap. Any thread may free its blocks
 * at any time before the heap is destroyed; destroying it while another
 * thread may still free into it is an error (a later free of one of its
 * blocks aborts as an invalid pointer or double free where the page was
 * not reused). */
#define TSALLOC_HAS_HEAPS 1
typedef struct ts_heap ts_heap_t;

/* A new, empty heap; NULL with errno = ENOMEM. */
ts_heap_t *ts_heap_new(void);
/* The calling thread's default heap, the one malloc uses (made if the thread
 * has none yet). It cannot be destroyed or deleted. */
ts_heap_t *ts_heap_get_default(void);
/* As malloc, calloc, realloc, aligned_alloc, strdup, strndup, the block
 * coming from heap h. ts_heap_realloc keeps a block that fits in place and
 * moves one that does not into h (p may be any block, or NULL); realloc()
 * moves a block into the calling thread's default heap. */
void *ts_heap_malloc(ts_heap_t *h, size_t size);
void *ts_heap_calloc(ts_heap_t *h, size_t count, size_t size);
void *ts_heap_realloc(ts_heap_t *h, void *p, size_t size);
void *ts_heap_aligned_alloc(ts_heap_t *h, size_t align, size_t size);
char *ts_heap_strdup(ts_heap_t *h, const char *s);
char *ts_heap_strndup(ts_heap_t *h, const char *s, size_t n);
/* Free every block of h at once, then h itself. Its pages go back to their
 * segments, and from there to the OS after the purge delay (docs/options.md),
 * as pages freed one block at a time would. NULL: nothing. */
void ts_heap_destroy(ts_heap_t *h);
/* Delete h but keep its live blocks valid: their pages move to the calling
 * thread's default heap. NULL: nothing. */
void ts_heap_delete(ts_heap_t *h);
/* Call fn(arg, block, usable_size) for each live block of h (NULL: the
 * calling thread's default heap) until fn returns false; returns false when
 * fn stopped the walk. The visitor may read and write the blocks. For a heap
 * of ts_heap_new it may free blocks of h (those not visited yet are then not
 * visited) and allocate anywhere but in h; it must not destroy or delete h.
 * Visiting the default heap, it must not call malloc, free or any function
 * of the malloc family (they use that heap): it may use other heaps. Large
 * blocks of plain malloc belong to no heap and are not visited. */
typedef bool (*ts_heap_visitor_t)(void *arg, void *block, size_t usable_size);
bool ts_heap_visit(ts_heap_t *h, ts_heap_visitor_t fn, void *arg);

typedef struct ts_heap_stats {
    size_t live_blocks;  /* blocks allocated and not freed (large ones included) */
    size_t live_bytes;   /* their usable bytes */
    size_t pages;        /* pages the heap holds */
    size_t page_bytes;   /* their bytes */
    size_t large_blocks; /* large blocks (above 512 KiB) it owns */
    size_t large_bytes;  /* their mapped bytes */
    size_t peak_bytes;   /* the most page_bytes + large_bytes held at once */
} ts_heap_stats_t;
/* Fill *out for h (NULL: the calling thread's default heap, whose large
 * blocks are no heap's). Blocks other threads freed count as live until they reach
 * the heap, which is at once for the heaps of ts_heap_new. */
void ts_heap_stats(ts_heap_t *h, ts_heap_stats_t *out);
/* The heap profiler (docs/profiling.md): with TSALLOC_PROF=1, writes a heap
 * profile (gperftools format, for pprof and `tsalloc prof`) to path, or with
 * NULL to the next numbered name of TSALLOC_PROF_FILE. 0, or -1 with errno
 * set (ENOENT when the profiler does not run). */
int ts_prof_dump(const char *path);
/* Starts (1) or stops (0) sampling new allocations; blocks already sampled
 * stay in the profiles until freed. A negative value only asks. Returns the
 * state before (1 active, 0 not; TSALLOC_PROF_ACTIVE sets the first), or -1
 * with errno ENOENT when the profiler does not run. */
int ts_prof_set_active(int active);
/* Debugging (docs/debugging.md). */
typedef enum ts_block_state {
    TS_BLOCK_FOREIGN = 0, /* not tsalloc's memory, or NULL */
    TS_BLOCK_LIVE,        /* inside a block handed out and not freed since */
    TS_BLOCK_FREE,        /* inside a free block, or tsalloc memory holding none */
    TS_BLOCK_METADATA     /* inside a segment's header (its page descriptors) */
} ts_block_state_t;

typedef struct ts_block_info {
    const char *design; /* "tsalloc" */
    ts_block_state_t state;
    int size_class;      /* 0 .. 55; -1: a large block, or no block */
    int large;           /* 1: a large block (a mapping of its own) */
    void *start;         /* the block holding the pointer; NULL: none */
    size_t usable;       /* its usable size */
    size_t offset;       /* pointer - start */
    const void *heap;    /* the heap owning its page; NULL: none (large, abandoned) */
    unsigned heap_id;    /* that heap's number (ts-heaps in gdb); 0: none */
    const void *segment; /* its 4 MiB segment; NULL for large blocks */
} ts_block_info_t;

/* What tsalloc knows of the memory at ptr: which block holds it, whether that
 * block is live or free, its size class, usable size and owning heap. Any
 * pointer is accepted (NULL, foreign, interior, freed): nothing is read that
 * tsalloc did not map. Returns false, with out->state TS_BLOCK_FOREIGN, when
 * ptr is not in tsalloc's memory. */
bool ts_block_info(const void *ptr, ts_block_info_t *out);

/* Check the allocator's structures: the segment map against the mapped
 * segments, every segment's pages, every large block, and the calling
 * thread's heap (its queues, and each of its pages' free lists and counts;
 * other threads' lists change under a walk and are not followed). Aborts with
 * "tsalloc: ts_heap_check(): ..." naming the first inconsistency found;
 * returns when there is none. */
void ts_heap_check(void);

/* The version of the library, "MAJOR.MINOR.PATCH" (e.g. "0.6.0"). */
const char *ts_version(void);

#ifdef __cplusplus
}
#endif

#endif
