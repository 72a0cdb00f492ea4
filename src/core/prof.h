/* The sampling heap profiler's entry points (prof.c), for the override shim
 * and for the core's free and realloc.
 *
 * With profiling off the shim's malloc pays one test of _ts_prof_on (two
 * instructions) and free pays nothing: sampled blocks are served as large
 * blocks, whose free already leaves the fast path, and only that slow path
 * asks the profiler whether the block was sampled (_ts_prof_free).
 * Each entry takes the address its caller returns to (the shim passes its
 * own __builtin_return_address(0)), the innermost frame of the stack.
 */
#ifndef TS_CORE_PROF_H
#define TS_CORE_PROF_H

#include <stdbool.h>
#include <stddef.h>

#include "base/base.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 1 once the profiler runs (TSALLOC_PROF or TSALLOC_LEAKS); set by the
 * library's constructor, before main and before any other thread. */
TS_HIDDEN extern unsigned char _ts_prof_on;

TS_HIDDEN void *_ts_prof_malloc(size_t size, void *ra);
TS_HIDDEN void *_ts_prof_calloc(size_t count, size_t size, void *ra);
TS_HIDDEN void *_ts_prof_realloc(void *ptr, size_t size, void *ra);
TS_HIDDEN void *_ts_prof_memalign(size_t align, size_t size, void *ra);
TS_HIDDEN void *_ts_prof_aligned_alloc(size_t align, size_t size, void *ra);
TS_HIDDEN int _ts_prof_posix_memalign(void **out, size_t align, size_t size, void *ra);

/* A large block is being moved: its sample, if any, leaves the profile.
 * Takes the profiler's lock, a leaf. */
TS_HIDDEN void _ts_prof_forget(const void *p);
/* A large block is being freed: its sample, if any, leaves the profile, and
 * true says the profiler kept the block for its next samples (the caller
 * then frees nothing). Takes the profiler's lock, a leaf. */
TS_HIDDEN bool _ts_prof_free(void *p);

#define TS_PROF_ON() __builtin_expect(_ts_prof_on != 0, 0)

/* An allocating entry of libtsalloc (the shim's and the prefixed API's)
 * hands its call, with the address it returns to, to the profiler's twin
 * while the profiler runs; other designs build without it. */
#ifdef TS_DESIGN_PROF
#define TS_PROF_DIVERT(fn, ...)                                                                    \
    if (TS_PROF_ON()) return fn(__VA_ARGS__, __builtin_return_address(0))
#else
#define TS_PROF_DIVERT(fn, ...) (void)0
#endif

#ifdef __cplusplus
}
#endif

#endif
