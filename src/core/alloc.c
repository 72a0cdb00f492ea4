/* Allocation beyond the fast path (fastpath.h): first use by a thread, empty
 * free lists, sizes above 512 KiB, aligned requests, large blocks, and threads
 * whose heap is gone.
 *
 * Invariants: every failure returns NULL with errno = ENOMEM and leaves the
 * heap usable; the purge thread is only started from _ts_purge_safe_point(),
 * called here after every lock has been released.
 */
#include "core/internal.h"
#include "core/valgrind.h"

#include <errno.h>
#include <string.h>

void *_ts_heap_alloc(ts_heap_t *heap, size_t size, size_t align, bool zero) {
    if (ts_unlikely(size > (size_t)PTRDIFF_MAX)) {
        errno = ENOMEM;
        return NULL;
    }
    unsigned cls;
    if (align <= TS_MIN_ALIGN) {
        if (size > TS_CLASS_MAX_SIZE) {
            heap->large_allocs++;
            return _ts_large_alloc(size, 0, zero);
        }
        cls = ts_class_of(size);
    } else {
        cls = _ts_class_aligned(size, align);
        if (cls >= TS_CLASS_COUNT) {
            heap->large_allocs++;
            return _ts_large_alloc(size, align, zero);
        }
    }
    if (zero) heap->fresh = NULL;
    void *p = _ts_heap_malloc_class(heap, cls);
    if (ts_unlikely(!p)) {
        errno = ENOMEM;
        return NULL;
    }
    /* A block carved by this call from memory never written since it was
     * mapped or purged is zero past its list link and free mark (the mark
     * was cleared as it was handed out): calloc of a fresh 512 KiB block
     * then faults in only what the program writes, as glibc's does. */
    if (zero) memset(p, 0, p == (void *)heap->fresh ? 2 * sizeof(void *) : size);
    return p;
}

/* Any allocation request from a thread that may have no heap yet. */
void *_ts_alloc_aligned(size_t size, size_t align, bool zero) {
    ts_heap_t *heap = _ts_tls_heap;
    if (ts_unlikely(heap->state != TS_HEAP_ACTIVE)) {
        if (ts_vg_core_routes()) return _ts_vg_core_alloc(size, align, zero);
        if (heap == &_ts_heap_dead || _ts_thread_start_shared()) {
            void *p = _ts_shared_alloc(size, align, zero);
            ts_purge_safe_point();
            return p;
        }
        heap = _ts_thread_init();
        if (!heap) {
            errno = ENOMEM;
            return NULL;
        }
    }
    void *p = _ts_heap_alloc(heap, size, align, zero);
    ts_purge_safe_point();
    return p;
}

void *_ts_malloc_generic(size_t size, ts_heap_t *heap) {
    if (ts_likely(heap->state == TS_HEAP_ACTIVE)) {
        /* Sizes of a class get here with their head's list empty. */
        void *p = _ts_heap_alloc(heap, size, 0, false);
        ts_purge_safe_point();
        return p;
    }
    return _ts_alloc_aligned(size, 0, false);
}
