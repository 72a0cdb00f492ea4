/* tsalloc: the public API of the fast allocator (libtsalloc.so / .a).
 *
 * Linking or preloading libtsalloc replaces malloc, free and the whole malloc
 * family. The ts_-prefixed functions below reach the same allocator without
 * relying on the override, plus options and statistics.
 */
#ifndef TSALLOC_H
#define TSALLOC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

void *ts_malloc(size_t size);
void ts_free(void *ptr);
void *ts_calloc(size_t count, size_t size);
void *ts_realloc(void *ptr, size_t size);
void *ts_aligned_alloc(size_t align, size_t size);
size_t ts_usable_size(const void *ptr);

/* Statistics: human-readable text, or one JSON object when `json`. */
void ts_stats_print(FILE *out);
void ts_stats_print_json(FILE *out);

/* Options (docs/options.md): by name without the TSALLOC_ prefix, case
 * insensitive, e.g. "purge_delay_ms". get returns -1 for an unknown name;
 * set returns false for an unknown name or a value out of range. */
long long ts_option_get(const char *name);
bool ts_option_set(const char *name, long long value);

#ifdef __cplusplus
}
#endif

#endif
