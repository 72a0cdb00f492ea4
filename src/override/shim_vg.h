/* The design functions the override shim calls (override.c and
 * override_cxx.cpp, through designs/family.h's TS_FAMILY_FN): under Valgrind
 * they go through the Valgrind layer (base/valgrind.h), which announces every
 * block to memcheck; otherwise straight to the design. The fast allocator
 * (a design with an inline header) does this in its own slow paths
 * (core/vgcore.c), so that its fast paths stay untouched.
 *
 * Include inside extern "C" from C++, before designs/family.h.
 */
#ifndef TS_OVERRIDE_SHIM_VG_H
#define TS_OVERRIDE_SHIM_VG_H

#include "base/valgrind.h"
#include "designs/design.h"

_TS_D_DECLARE(TS_DESIGN)

#ifdef TS_DESIGN_INLINE_HEADER
#define TS_FAMILY_FN(fn) _TS_D(fn)
#else
/* The design as the layer's backend (override.c). */
TS_HIDDEN extern const ts_vg_backend_t _ts_shim_vg;

static inline void *ts_shim_malloc(size_t size) {
    if (ts_vg_active()) return _ts_vg_alloc(&_ts_shim_vg, size, 0, false);
    return _TS_D(malloc)(size);
}
static inline void ts_shim_free(void *ptr) {
    if (ts_vg_active()) {
        _ts_vg_free(&_ts_shim_vg, ptr);
        return;
    }
    _TS_D(free)(ptr);
}
static inline void *ts_shim_calloc(size_t total) {
    if (ts_vg_active()) return _ts_vg_alloc(&_ts_shim_vg, total, 0, true);
    return _TS_D(calloc)(total);
}
static inline void *ts_shim_realloc(void *ptr, size_t size) {
    if (ts_vg_active()) return _ts_vg_realloc(&_ts_shim_vg, ptr, size);
    return _TS_D(realloc)(ptr, size);
}
static inline void *ts_shim_memalign(size_t align, size_t size) {
    if (ts_vg_active()) return _ts_vg_alloc(&_ts_shim_vg, size, align, false);
    return _TS_D(memalign)(align, size);
}
static inline size_t ts_shim_usable_size(const void *ptr) {
    if (ts_vg_active()) return _ts_vg_usable(ptr);
    return _TS_D(usable_size)(ptr);
}
#define TS_FAMILY_FN(fn) ts_shim_##fn
#endif

#endif
