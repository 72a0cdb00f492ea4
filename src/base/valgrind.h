/* Valgrind memcheck support, shared by every design: the block layout used
 * while the process runs under Valgrind, and the client requests that
 * announce blocks to memcheck (docs/debugging.md).
 *
 * Built in when Valgrind's headers are installed (TS_HAVE_VALGRIND); without
 * them ts_vg_active() is the constant false and every call below is dead
 * code. Whether the process runs under Valgrind's memcheck is decided once,
 * by the first call of the allocator (RUNNING_ON_VALGRIND, and a memcheck
 * request), so that no block can be handed out before the decision. Other
 * tools (callgrind counting the fast paths) see the plain allocator.
 *
 * Under Valgrind each block is carved from a larger one of the design (the
 * backend): [pad][size][check][size bytes for the program][16-byte redzone]
 * [slack]. The program's pointer p sits `pre` bytes (16, or the alignment)
 * into the design's block: never the design's own block boundary, so the fast
 * allocator's free fast path sends it to the slow path without reading it.
 * The word at p - 16 holds the size asked for (usable_size, realloc), the one
 * at p - 8 `pre` mixed with p (a live-block check, cleared by free). All but
 * the program's bytes are NOACCESS for memcheck: overruns of up to 16 bytes,
 * underruns and use after free are reported.
 *
 * Invariant: design code runs with memcheck's error reporting off for the
 * calling thread (it reads and writes its free blocks, which are NOACCESS).
 */
#ifndef TS_BASE_VALGRIND_H
#define TS_BASE_VALGRIND_H

#include <stdbool.h>
#include <stddef.h>

#include "base/base.h"

#if defined(__has_include)
#if __has_include(<valgrind/memcheck.h>)
#define TS_HAVE_VALGRIND 1
#endif
#endif
#ifndef TS_HAVE_VALGRIND
#define TS_HAVE_VALGRIND 0
#endif

#ifdef __cplusplus
extern "C" {
#endif

enum { TS_VG_OFF = 0, TS_VG_UNKNOWN = 1, TS_VG_ON = 2 };
#define TS_VG_REDZONE 16

/* Designs reach their blocks through these while the layer is on. */
typedef struct ts_vg_backend {
    void *(*alloc)(size_t size, size_t align, bool zero); /* align: 0, or a power of 2 > 16 */
    void (*free)(void *block);
    size_t (*usable)(const void *block);
} ts_vg_backend_t;

#if TS_HAVE_VALGRIND
TS_HIDDEN extern int _ts_vg_state; /* TS_VG_*: __atomic builtins (C++ includes this) */
TS_HIDDEN TS_NOINLINE bool _ts_vg_detect(void);
#endif

/* True when the process runs under memcheck (the first call decides). */
TS_INLINE bool ts_vg_active(void) {
#if TS_HAVE_VALGRIND
    int s = __atomic_load_n(&_ts_vg_state, __ATOMIC_RELAXED);
    return ts_unlikely(s != TS_VG_OFF) && (s == TS_VG_ON || _ts_vg_detect());
#else
    return false;
#endif
}

/* malloc/calloc/memalign, free, realloc and usable_size of the layout above.
 * An invalid or double free is memcheck's to report ("Invalid free()"); the
 * block is then left alone, as Valgrind's own malloc does. */
TS_HIDDEN void *_ts_vg_alloc(const ts_vg_backend_t *be, size_t size, size_t align, bool zero);
TS_HIDDEN void _ts_vg_free(const ts_vg_backend_t *be, void *p);
TS_HIDDEN void *_ts_vg_realloc(const ts_vg_backend_t *be, void *p, size_t size);
TS_HIDDEN size_t _ts_vg_usable(const void *p);
/* Memcheck's error reporting off (true) or back on (false) for the calling
 * thread; nests. No-ops outside Valgrind. */
TS_HIDDEN void _ts_vg_quiet(bool quiet);
/* Mark memory the program must not touch (free memory of a design). */
TS_HIDDEN void _ts_vg_noaccess(const void *p, size_t size);

#ifdef __cplusplus
}
#endif

#endif
