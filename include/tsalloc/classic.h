/* The seed assignment's thread-safe malloc API (seed documents 000 and 001).
 *
 * ts_malloc_lock/ts_free_lock: the bestfit design, one address-ordered free
 * list under one mutex. ts_malloc_nolock/ts_free_nolock: the bestfit-tls
 * design, thread-local free lists with a lock only around sbrk. Both grow
 * their heap with sbrk. Link with -ltsalloc-classic (or any libtsalloc*).
 */
#ifndef TSALLOC_CLASSIC_H
#define TSALLOC_CLASSIC_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

void *ts_malloc_lock(size_t size);
void ts_free_lock(void *ptr);
void *ts_malloc_nolock(size_t size);
void ts_free_nolock(void *ptr);
unsigned long get_data_segment_size(void); /* bytes this design obtained with sbrk */
unsigned long
get_data_segment_free_space_size(void); /* bytes in its free blocks, headers included */

#ifdef __cplusplus
}
#endif

#endif
