/* The fast allocator under Valgrind (vgcore.c): the hooks its slow paths
 * call. The fast paths stay as they are: under Valgrind each thread's TLS
 * heap is the empty heap (every malloc fast path misses) and the program's
 * pointers are never block boundaries (every free fast path falls to the slow
 * path), so both reach these hooks; the plain run never does.
 */
#ifndef TS_CORE_VALGRIND_H
#define TS_CORE_VALGRIND_H

#include <stdbool.h>
#include <stddef.h>

#include "base/valgrind.h"

/* The calling thread is not inside the layer's own calls into the core. */
TS_HIDDEN bool _ts_vg_core_outside(void);
/* The calling thread's calls go to the Valgrind layer: under memcheck, and
 * not from inside that layer's own calls into the core. Outside Valgrind:
 * one load and one branch. */
TS_INLINE bool ts_vg_core_routes(void) {
    return ts_vg_active() && _ts_vg_core_outside();
}
/* malloc, realloc and usable_size when routed. */
TS_HIDDEN void *_ts_vg_core_alloc(size_t size, size_t align, bool zero);
TS_HIDDEN void *_ts_vg_core_realloc(void *p, size_t size);
TS_HIDDEN size_t _ts_vg_core_usable(const void *p);
/* free(p) under Valgrind: false when the core must handle p itself (inside
 * the layer, or a foreign pointer, which the caller reports). */
TS_HIDDEN bool _ts_vg_core_free(void *p);
/* Around core work on the calling thread's real heap outside the layer
 * (thread exit): the TLS heap is the real one in between. False: nothing to
 * undo. */
TS_HIDDEN bool _ts_vg_core_enter(void);
TS_HIDDEN void _ts_vg_core_leave(void);

#endif
