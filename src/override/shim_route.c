/* Valgrind routing of a design without an inline header, in its shared
 * library only (shim_vg.h): each ts_shim_<fn> is a GNU ifunc whose resolver
 * runs once, while the library is relocated (-z now), and binds it to the
 * Valgrind layer's function when the process runs under memcheck, to the
 * design's own otherwise. Other Valgrind tools (callgrind) get the design's.
 *
 * Invariants: a resolver calls only hidden functions of this library
 * (nothing needing a relocation) and decides _ts_vg_state for the whole
 * process, before the first block is handed out. No locks.
 */
#include "override/shim_vg.h"

#include <stdbool.h>
#include <stddef.h>

#ifndef TS_DESIGN
#error "compile the shim with -DTS_DESIGN=<design identifier>"
#endif

/* The design as the Valgrind layer's backend. */
static void *backend_alloc(size_t size, size_t align, bool zero) {
    if (zero) return _TS_D(calloc)(size);
    return align ? _TS_D(memalign)(align, size) : _TS_D(malloc)(size);
}
static size_t backend_usable(const void *block) {
    return _TS_D(usable_size)(block);
}
static const ts_vg_backend_t backend = {backend_alloc, _TS_D(free), backend_usable};

static void *vg_malloc(size_t size) {
    return _ts_vg_alloc(&backend, size, 0, false);
}
static void vg_free(void *ptr) {
    _ts_vg_free(&backend, ptr);
}
static void *vg_calloc(size_t total) {
    return _ts_vg_alloc(&backend, total, 0, true);
}
static void *vg_realloc(void *ptr, size_t size) {
    return _ts_vg_realloc(&backend, ptr, size);
}
static void *vg_memalign(size_t align, size_t size) {
    return _ts_vg_alloc(&backend, size, align, false);
}
static size_t vg_usable_size(const void *ptr) {
    return _ts_vg_usable(ptr);
}

#define TS_SHIM_ROUTE(fn, ret, params)                                                             \
    typedef ret(*fn##_fn_t) params;                                                                \
    __attribute__((used)) static fn##_fn_t resolve_##fn(void) {                                    \
        return ts_vg_active() ? vg_##fn : _TS_D(fn);                                               \
    }                                                                                              \
    ret ts_shim_##fn params __attribute__((ifunc("resolve_" #fn)));

TS_SHIM_ROUTE(malloc, void *, (size_t size))
TS_SHIM_ROUTE(free, void, (void *ptr))
TS_SHIM_ROUTE(calloc, void *, (size_t total))
TS_SHIM_ROUTE(realloc, void *, (void *ptr, size_t size))
TS_SHIM_ROUTE(memalign, void *, (size_t align, size_t size))
TS_SHIM_ROUTE(usable_size, size_t, (const void *ptr))
