/* The fast allocator as a backend of the Valgrind layer (base/valgrind.h).
 *
 * Under Valgrind a thread's _ts_tls_heap stays &_ts_heap_empty, so every
 * malloc fast path misses and reaches _ts_alloc_aligned, which routes it
 * here; its real heap waits in vg_heap. Each call into the core swaps the
 * real heap into _ts_tls_heap for its duration (vg_inside set, so the core's
 * own calls are not routed again) and back out after, keeping any change
 * (first heap, heap gone at thread exit).
 *
 * Blocks the core hands out while inside (to libc, for a key it arms) are
 * plain blocks, block boundaries or large-block starts, unlike the layer's:
 * their free, realloc and usable size go to the core as they are. The purge
 * thread is turned off (TSALLOC_PURGE_THREAD=0: its work runs on the slow
 * paths): started from inside, its thread's libc blocks would be plain
 * blocks in memory memcheck holds NOACCESS.
 *
 * Invariant: outside the swap, the thread's TLS heap is the empty heap;
 * inside it, vg_inside is set. Only the owning thread touches its TLS. No
 * locks.
 */
#include "core/valgrind.h"

#include "core/fastpath.h"
#include "core/internal.h"
#include "designs/design.h"
#include "tsalloc.h"

TS_DESIGN_DECLARE(core)

static TS_TLS ts_heap_t *vg_heap = &_ts_heap_empty;
static TS_TLS int vg_inside;

static void swap_in(void) {
    vg_inside = 1;
    _ts_tls_heap = vg_heap;
}

static void swap_out(void) {
    vg_heap = _ts_tls_heap;
    _ts_tls_heap = &_ts_heap_empty;
    vg_inside = 0;
}

static void *core_alloc(size_t size, size_t align, bool zero) {
    swap_in();
    void *p = _ts_alloc_aligned(size, align, zero);
    swap_out();
    return p;
}

static void core_free(void *block) {
    swap_in();
    ts_core_free_inline(block);
    swap_out();
}

static size_t core_usable(const void *block) {
    return _ts_usable_checked(block, "free");
}

static const ts_vg_backend_t backend = {core_alloc, core_free, core_usable};

/* A block the core handed out as it is, not through the layer. */
static bool plain_block(const void *p) {
    ts_page_t *page = NULL;
    uintptr_t start;
    size_t size;
    switch (_ts_locate(p, &page)) {
    case TS_PTR_BLOCK:
        return ts_page_block_ok(page, (uintptr_t)p);
    case TS_PTR_LARGE:
        return ((uintptr_t)p & 4095) == 0 && _ts_large_find(p, &start, &size) == 1 &&
               start == (uintptr_t)p;
    default:
        return false;
    }
}

bool _ts_vg_core_outside(void) {
    return !vg_inside;
}

void *_ts_vg_core_alloc(size_t size, size_t align, bool zero) {
    static _Atomic int purge_thread_off;
    if (!atomic_load_explicit(&purge_thread_off, memory_order_relaxed)) {
        atomic_store_explicit(&purge_thread_off, 1, memory_order_relaxed);
        (void)ts_option_set("purge_thread", 0);
    }
    return _ts_vg_alloc(&backend, size, align, zero);
}

bool _ts_vg_core_free(void *p) {
    ts_page_t *page;
    if (vg_inside || _ts_locate(p, &page) == TS_PTR_FOREIGN) return false;
    if (plain_block(p)) {
        _ts_vg_quiet(true);
        core_free(p);
        _ts_vg_quiet(false);
        return true;
    }
    _ts_vg_free(&backend, p);
    return true;
}

void *_ts_vg_core_realloc(void *p, size_t size) {
    if (!plain_block(p)) return _ts_vg_realloc(&backend, p, size);
    _ts_vg_quiet(true);
    swap_in();
    void *q = _ts_core_realloc(p, size);
    swap_out();
    _ts_vg_quiet(false);
    return q;
}

size_t _ts_vg_core_usable(const void *p) {
    if (!plain_block(p)) return _ts_vg_usable(p);
    swap_in();
    size_t n = _ts_usable_checked(p, "malloc_usable_size");
    swap_out();
    return n;
}

bool _ts_vg_core_enter(void) {
    if (!ts_vg_core_routes()) return false;
    _ts_vg_quiet(true);
    swap_in();
    return true;
}

void _ts_vg_core_leave(void) {
    swap_out();
    _ts_vg_quiet(false);
}
