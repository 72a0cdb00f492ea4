/* Debug hooks of the bestfit and bestfit-tls designs, for tests only.
 *
 * Hidden symbols: reachable by a program linked with a static library that
 * holds the design (libtsalloc-classic.a, libtsalloc-bestfit*.a), never
 * exported from a shared library. Each takes the lock its heap needs.
 */
#ifndef TS_DESIGNS_BESTFIT_DEBUG_H
#define TS_DESIGNS_BESTFIT_DEBUG_H

#include <stddef.h>
#include <stdint.h>

#include "os/os.h"

/* Called for each free block in address order; is_reserve marks the top
 * block kept out of the index (see fitheap.h). */
typedef void (*ts_bestfit_walk_fn)(uintptr_t start, size_t size, int is_reserve, void *arg);

typedef struct ts_bestfit_tunables {
    size_t min_split;      /* smallest remainder block split off (header included) */
    size_t trim_threshold; /* SIZE_MAX: never */
    size_t grow_chunk;
} ts_bestfit_tunables_t;

/* bestfit: the one global heap. */
TS_HIDDEN void _ts_bestfit_debug_walk(ts_bestfit_walk_fn fn, void *arg);
/* NULL when the heap satisfies every invariant, else what is broken. */
TS_HIDDEN const char *_ts_bestfit_debug_check(void);
TS_HIDDEN size_t _ts_bestfit_debug_block_size(size_t request); /* 0: impossible */
TS_HIDDEN void _ts_bestfit_debug_tunables(ts_bestfit_tunables_t *out);
/* Bytes of the data segment in no block: slack at unaligned breaks, and the
 * guards and not yet handed out part of mapped chunks. */
TS_HIDDEN size_t _ts_bestfit_debug_wasted(void);
/* Bytes of chunks mapped because the break could not grow (in the data segment). */
TS_HIDDEN size_t _ts_bestfit_debug_mapped(void);

/* bestfit-tls: the calling thread's heap, and the heap of exited threads. */
TS_HIDDEN void _ts_bestfit_tls_debug_walk(ts_bestfit_walk_fn fn, void *arg);
TS_HIDDEN void _ts_bestfit_tls_debug_walk_orphans(ts_bestfit_walk_fn fn, void *arg);
/* Checks the calling thread's heap and the orphan heap. */
TS_HIDDEN const char *_ts_bestfit_tls_debug_check(void);
TS_HIDDEN size_t _ts_bestfit_tls_debug_block_size(size_t request);
TS_HIDDEN void _ts_bestfit_tls_debug_tunables(ts_bestfit_tunables_t *out);
TS_HIDDEN size_t _ts_bestfit_tls_debug_wasted(void);
TS_HIDDEN size_t _ts_bestfit_tls_debug_mapped(void);
/* Free bytes in the calling thread's heap and in the orphan heap. */
TS_HIDDEN size_t _ts_bestfit_tls_debug_thread_free(void);
TS_HIDDEN size_t _ts_bestfit_tls_debug_orphan_free(void);

#endif
