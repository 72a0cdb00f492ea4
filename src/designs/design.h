/* The interface every allocator design implements, so that the one override
 * shim (src/override/) turns any of them into a complete malloc.
 *
 * A design with C identifier <d> (core, bestfit, bestfit_tls, pow2, ...)
 * defines, with hidden visibility, the functions declared by
 * TS_DESIGN_DECLARE(<d>) below. The shim is compiled once per design with
 * -DTS_DESIGN=<d> and calls them directly (no indirect call).
 *
 * Contract, for every design:
 * - malloc(0) returns a unique pointer; every pointer is 16-byte aligned.
 * - Sizes that cannot be satisfied, and OS refusal, give NULL with
 *   errno = ENOMEM; the heap stays consistent.
 * - free(NULL) does nothing. free or usable_size of a pointer the design did
 *   not hand out, and a double free it can detect, call _ts_invalid_pointer /
 *   _ts_double_free (abort with a message naming the function and pointer).
 * - realloc is called with ptr != NULL and size != 0 only; on failure it
 *   returns NULL with errno = ENOMEM and leaves ptr untouched.
 * - memalign is called with a power-of-two align > 16 only; size may be 0.
 * - calloc gets the already overflow-checked total size.
 * - atfork_prepare takes every lock of the design (the shim then takes the
 *   OS layer's), atfork_parent releases them, atfork_child makes them usable
 *   in the child, whose only thread is the one that forked.
 */
#ifndef TS_DESIGNS_DESIGN_H
#define TS_DESIGNS_DESIGN_H

#include <stddef.h>
#include <stdio.h>

#include "base/base.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What a design knows about its memory, for mallinfo2/malloc_stats/malloc_info. */
typedef struct ts_heap_info {
    size_t arena;         /* bytes obtained from the OS for non-mmapped blocks */
    size_t mmapped;       /* bytes in blocks mapped on their own */
    size_t mmapped_count; /* number of such blocks */
    size_t in_use;        /* bytes of `arena` handed out to the program (as glibc's uordblks:
                           * blocks mapped on their own are only in `mmapped`) */
    size_t free;          /* bytes held free inside `arena` */
    size_t releasable;    /* bytes trim could give back at once */
    size_t peak;          /* highest arena + mmapped seen, 0 if not tracked */
} ts_heap_info_t;

#define TS_DESIGN_DECLARE(d)                                                                       \
    TS_HIDDEN void *_ts_##d##_malloc(size_t size);                                                 \
    TS_HIDDEN void _ts_##d##_free(void *ptr);                                                      \
    TS_HIDDEN void *_ts_##d##_calloc(size_t total);                                                \
    TS_HIDDEN void *_ts_##d##_realloc(void *ptr, size_t size);                                     \
    TS_HIDDEN void *_ts_##d##_memalign(size_t align, size_t size);                                 \
    TS_HIDDEN size_t _ts_##d##_usable_size(const void *ptr);                                       \
    TS_HIDDEN int _ts_##d##_trim(size_t pad);                                                      \
    TS_HIDDEN void _ts_##d##_info(ts_heap_info_t *info);                                           \
    TS_HIDDEN void _ts_##d##_atfork_prepare(void);                                                 \
    TS_HIDDEN void _ts_##d##_atfork_parent(void);                                                  \
    TS_HIDDEN void _ts_##d##_atfork_child(void);

/* _TS_D(malloc) names the current design's function when TS_DESIGN is set. */
#define _TS_D_CAT3(a, b, c) a##b##c
#define _TS_D_NAME(d, fn)   _TS_D_CAT3(_ts_, d, _##fn)
#define _TS_D(fn)           _TS_D_NAME(TS_DESIGN, fn)
#define _TS_D_DECLARE(d)    TS_DESIGN_DECLARE(d)

#ifdef __cplusplus
}
#endif

#endif
