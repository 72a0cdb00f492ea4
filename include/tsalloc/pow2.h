/* Debug dumps of the pow2 designs (the seed's print_freelist and
 * print_block_info). libtsalloc-pow2 exports ts_pow2_*, libtsalloc-pow2-
 * partitioned exports ts_pow2_partitioned_*. They write with stdio after
 * taking a snapshot under the allocator's locks; the exact line format is
 * documented in docs/pow2.md. For debugging only: the free-list dump walks
 * every free block while holding every lock.
 */
#ifndef TSALLOC_POW2_H
#define TSALLOC_POW2_H

#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Every partition's free lists by order, the pool of free chunks, totals. */
void ts_pow2_print_freelist(FILE *out);
/* One line about the block of `ptr` (heap, mapped, or not ours). */
void ts_pow2_print_block(const void *ptr, FILE *out);

void ts_pow2_partitioned_print_freelist(FILE *out);
void ts_pow2_partitioned_print_block(const void *ptr, FILE *out);

#ifdef __cplusplus
}
#endif

#endif
