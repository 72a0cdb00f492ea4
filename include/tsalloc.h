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
