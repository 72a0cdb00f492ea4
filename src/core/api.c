/* The entry points: malloc and free (their fast paths are in fastpath.h),
 * the design.h functions the override shim calls (_ts_core_*), and the
 * public ts_* API (tsalloc.h).
 *
 * Statistics cost one increment per malloc; frees are not counted (live
 * blocks are counted from the pages when statistics are asked for).
 */
#include "core/fastpath.h"
#include "core/internal.h"
#include "core/prof.h"
#include "core/valgrind.h"

#include <errno.h>
#include <string.h>

#if TS_SECURE
#define TS_DESIGN secure /* the ts_* API goes through the checks of secure.c */
#else
#define TS_DESIGN core /* designs/family.h calls _ts_core_* */
#endif
#include "designs/family.h"
#include "tsalloc.h"

TS_DESIGN_DECLARE(core)
TS_HIDDEN void _ts_core_info_fill(ts_heap_info_t *info);

void *_ts_core_malloc(size_t size) {
    return ts_core_malloc_inline(size);
}

void _ts_core_free(void *p) {
    ts_core_free_inline(p);
}

void *_ts_core_calloc(size_t total) {
    if (total <= 1024) { /* small: the fast path, then clear what was asked for */
        void *p = _ts_core_malloc(total);
        if (p) memset(p, 0, total);
        return p;
    }
    return _ts_alloc_aligned(total, 0, true); /* large blocks fresh from the OS skip memset */
}

void *_ts_realloc_with(void *p, size_t size, const char *func,
                       void *(*alloc)(void *arg, size_t size), void *arg) {
    if (size > (size_t)PTRDIFF_MAX) {
        errno = ENOMEM;
        return NULL;
    }
    ts_page_t *page = NULL;
    size_t old;
    switch (_ts_locate(p, &page)) {
    case TS_PTR_FOREIGN:
        _ts_invalid_pointer(func, p);
    case TS_PTR_LARGE:
        if (TS_PROF_ON()) _ts_prof_forget(p); /* moved or freed below */
        if (size > TS_CLASS_MAX_SIZE) {
            int saved_errno = errno;
            void *q = _ts_large_realloc(p, size);
            ts_purge_safe_point();
            if (q) return q;
            /* mremap refused (e.g. the region spans two mappings): copy
             * instead, and a copy that succeeds leaves errno as it was */
            errno = saved_errno;
        }
        old = _ts_large_usable(p, func);
        break;
    default:
        old = _ts_block_usable(page, p, func);
        if (size <= old && (size >= old / 2 || old <= 64)) return p;
        break;
    }
    void *q = alloc(arg, size);
    if (!q) return NULL;
    memcpy(q, p, old < size ? old : size);
    _ts_core_free(p);
    return q;
}

static void *core_alloc(void *arg, size_t size) {
    (void)arg;
    return _ts_core_malloc(size);
}

void *_ts_core_realloc(void *p, size_t size) {
    if (ts_vg_core_routes() && size <= (size_t)PTRDIFF_MAX) return _ts_vg_core_realloc(p, size);
    return _ts_realloc_with(p, size, "realloc", core_alloc, NULL);
}

void *_ts_core_memalign(size_t align, size_t size) {
    return _ts_alloc_aligned(size, align, false);
}

size_t _ts_core_usable_size(const void *p) {
    return _ts_usable_checked(p, "malloc_usable_size");
}

/* Give back everything that can go now, ignoring the purge delay. */
int _ts_core_trim(size_t pad) {
    (void)pad;
    _ts_process_init();
    size_t purged = atomic_load(&_ts_stats.purged), unmapped = atomic_load(&_ts_stats.unmapped);
    ts_heap_t *heap = _ts_tls_heap;
    if (heap->state == TS_HEAP_ACTIVE) _ts_heap_collect(heap, true);
    _ts_shared_collect(true);
    _ts_purge_run(_ts_os_now_ns(), true);
    _ts_segment_cache_trim();
    return atomic_load(&_ts_stats.purged) != purged || atomic_load(&_ts_stats.unmapped) != unmapped;
}

void _ts_core_info(ts_heap_info_t *info) {
    _ts_core_info_fill(info);
}

/* fork: take every lock in the documented order; the child gets them free. */
void _ts_core_atfork_prepare(void) {
    _ts_heaps_atfork_prepare();
    _ts_segments_atfork_prepare();
    _ts_large_atfork_prepare();
    _ts_bigcache_atfork_prepare();
    _ts_purge_atfork_prepare();
}

void _ts_core_atfork_parent(void) {
    _ts_purge_atfork_parent();
    _ts_bigcache_atfork_parent();
    _ts_large_atfork_parent();
    _ts_segments_atfork_parent();
    _ts_heaps_atfork_parent();
}

void _ts_core_atfork_child(void) {
    _ts_purge_atfork_child();
    _ts_bigcache_atfork_child();
    _ts_large_atfork_child();
    _ts_segments_atfork_child();
    _ts_heaps_atfork_child();
}

/* ---- the prefixed API --------------------------------------------------------------- */

/* The heap profiler samples the prefixed functions as it does the shim's. */
TS_EXPORT void *ts_malloc(size_t size) {
    TS_PROF_DIVERT(_ts_prof_malloc, size);
    return _TS_D(malloc)(size);
}

TS_EXPORT void ts_free(void *ptr) {
    _TS_D(free)(ptr);
}

TS_EXPORT void *ts_calloc(size_t count, size_t size) {
    TS_PROF_DIVERT(_ts_prof_calloc, count, size);
    return ts_family_calloc(count, size);
}

TS_EXPORT void *ts_realloc(void *ptr, size_t size) {
    TS_PROF_DIVERT(_ts_prof_realloc, ptr, size);
    return ts_family_realloc(ptr, size);
}

TS_EXPORT void *ts_aligned_alloc(size_t align, size_t size) {
    TS_PROF_DIVERT(_ts_prof_aligned_alloc, align, size);
    return ts_family_aligned_alloc(align, size);
}

TS_EXPORT size_t ts_usable_size(const void *ptr) {
#if TS_SECURE
    return ptr ? _ts_secure_usable_size(ptr) : 0;
#else
    return ptr ? _ts_usable_checked(ptr, "ts_usable_size") : 0;
#endif
}

/* TS_VERSION_STRING comes from the build (CMake's project version). */
TS_EXPORT const char *ts_version(void) {
    return TS_VERSION_STRING;
}
