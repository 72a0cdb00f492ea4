/* TSALLOC_ZERO_ON_FREE in the plain build (libtsalloc): the first N bytes of
 * every freed block are zeroed, so stale data does not reach a use after
 * free or the block's next owner. (The hardened build zeroes in secure.c
 * and ignores this.)
 *
 * Free's fast path (fastpath.h) is not touched: with the option on, every
 * segment is entered in the segment map with TS_MAP_SLOW set, a value the
 * fast path knows no page shift for, so every free of a class block takes
 * the slow path (free.c), which zeroes the block once it proved it a live
 * block of ours; large blocks are zeroed by large.c's free. Off, the map
 * holds the bare shifts and the fast path runs as ever.
 *
 * Invariants: decided once, at process start-up (init.c), before the first
 * segment is laid out, and never changed after: ts_option_set refuses it.
 * Lock order: no locks.
 */
#include "core/internal.h"

#include <string.h>

uint8_t _ts_map_flag;
size_t _ts_zero_free_bytes;

void _ts_zero_free_init(void) {
#if !TS_SECURE
    _ts_zero_free_bytes = (size_t)_ts_option(TS_OPT_ZERO_ON_FREE);
    _ts_map_flag = _ts_zero_free_bytes ? TS_MAP_SLOW : 0;
#endif
}

void _ts_zero_freed(void *p, size_t size) {
    memset(p, 0, size < _ts_zero_free_bytes ? size : _ts_zero_free_bytes);
}
