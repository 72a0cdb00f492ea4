/* The design functions the override shim calls (override.c and
 * override_cxx.cpp, through designs/family.h's TS_FAMILY_FN).
 *
 * A design with an inline header (the fast allocator) supports Valgrind in
 * its own slow paths (core/vgcore.c): the shim calls it directly. For the
 * other designs the shared library's shim (compiled with TS_SHIM_VG_ROUTE)
 * calls ts_shim_<fn>, GNU ifuncs bound once at load time (shim_route.c): to
 * the Valgrind layer (base/valgrind.h), which announces every block to
 * memcheck, when the process runs under memcheck; to the design's function
 * otherwise, so that the plain run costs not one instruction more. The static
 * library's shim calls the design directly: glibc refuses ifuncs in a static
 * library linked into an executable, and these blocks are not announced.
 *
 * Include inside extern "C" from C++, before designs/family.h.
 */
#ifndef TS_OVERRIDE_SHIM_VG_H
#define TS_OVERRIDE_SHIM_VG_H

#include "base/valgrind.h"
#include "designs/design.h"

_TS_D_DECLARE(TS_DESIGN)

#if defined(TS_SHIM_VG_ROUTE) && !defined(TS_DESIGN_INLINE_HEADER)
/* Declared without TS_HIDDEN: with -fno-plt each call is one indirect call
 * through the GOT slot that the IRELATIVE relocation fills. */
void *ts_shim_malloc(size_t size);
void ts_shim_free(void *ptr);
void *ts_shim_calloc(size_t total);
void *ts_shim_realloc(void *ptr, size_t size);
void *ts_shim_memalign(size_t align, size_t size);
size_t ts_shim_usable_size(const void *ptr);
#define TS_FAMILY_FN(fn) ts_shim_##fn
#else
#define TS_FAMILY_FN(fn) _TS_D(fn)
#endif

#endif
