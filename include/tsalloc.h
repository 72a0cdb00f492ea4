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

/* The heap profiler (docs/profiling.md): with TSALLOC_PROF=1, writes a heap
 * profile (gperftools format, for pprof and `tsalloc prof`) to path, or with
 * NULL to the next numbered name of TSALLOC_PROF_FILE. 0, or -1 with errno
 * set (ENOENT when the profiler does not run). */
int ts_prof_dump(const char *path);

/* The version of the library, "MAJOR.MINOR.PATCH" (e.g. "0.6.0"). */
const char *ts_version(void);

#ifdef __cplusplus
}
#endif

#endif
