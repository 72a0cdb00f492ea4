/* The Valgrind memcheck layer (valgrind.h): the block layout used under
 * Valgrind and the client requests that describe it.
 *
 * Invariants: a block handed out here has a live check word at p - 8 until
 * it is freed; every backend call runs with error reporting off (design code
 * touches NOACCESS free memory); nothing is touched after the backend's free
 * (another thread may be handed the block at once). No locks.
 */
#include "base/valgrind.h"

#include <errno.h>
#include <stdint.h>
#include <string.h>

#if TS_HAVE_VALGRIND
#include <valgrind/memcheck.h>
#include <valgrind/valgrind.h>

int _ts_vg_state = TS_VG_UNKNOWN;

bool _ts_vg_detect(void) {
    int s = __atomic_load_n(&_ts_vg_state, __ATOMIC_RELAXED);
    if (s == TS_VG_UNKNOWN) {
        /* Memcheck only: it answers this request with -1, other tools with
         * the default 0 (callgrind then counts the plain paths). */
        static char probe[1];
        s = RUNNING_ON_VALGRIND && (long)VALGRIND_MAKE_MEM_DEFINED(probe, 1) == -1 ? TS_VG_ON
                                                                                   : TS_VG_OFF;
        __atomic_store_n(&_ts_vg_state, s, __ATOMIC_RELAXED);
    }
    return s == TS_VG_ON;
}

#define VG_KEY       ((uintptr_t)0x7a5c3e91d2b46f08ull)
#define VG_PRE_LIMIT ((size_t)1 << 40) /* larger alignments are refused by every design */

static uintptr_t *size_word(void *p) {
    return (uintptr_t *)p - 2;
}
static uintptr_t *check_word(void *p) {
    return (uintptr_t *)p - 1;
}

void _ts_vg_quiet(bool quiet) {
    if (quiet)
        VALGRIND_DISABLE_ERROR_REPORTING;
    else
        VALGRIND_ENABLE_ERROR_REPORTING;
}

void _ts_vg_noaccess(const void *p, size_t size) {
    VALGRIND_MAKE_MEM_NOACCESS(p, size);
}

void *_ts_vg_alloc(const ts_vg_backend_t *be, size_t size, size_t align, bool zero) {
    size_t pre = align > TS_MIN_ALIGN ? align : TS_MIN_ALIGN;
    if (size > (size_t)PTRDIFF_MAX - pre - TS_VG_REDZONE || pre > VG_PRE_LIMIT) {
        errno = ENOMEM;
        return NULL;
    }
    _ts_vg_quiet(true);
    char *block = be->alloc(size + pre + TS_VG_REDZONE, align > TS_MIN_ALIGN ? align : 0, zero);
    if (!block) {
        _ts_vg_quiet(false);
        return NULL;
    }
    size_t usable = be->usable(block);
    char *p = block + pre;
    *size_word(p) = size;
    *check_word(p) = pre ^ (uintptr_t)p ^ VG_KEY;
    _ts_vg_quiet(false);
    VALGRIND_MAKE_MEM_NOACCESS(block, pre);
    VALGRIND_MAKE_MEM_NOACCESS(p + size, usable - pre - size);
    VALGRIND_MALLOCLIKE_BLOCK(p, size, TS_VG_REDZONE, zero);
    return p;
}

/* The distance of p into its design block, or 0 when p is no live block. */
static size_t live_pre(void *p, size_t *size) {
    _ts_vg_quiet(true);
    size_t pre = (size_t)(*check_word(p) ^ (uintptr_t)p ^ VG_KEY);
    *size = *size_word(p);
    _ts_vg_quiet(false);
    return pre >= TS_MIN_ALIGN && pre <= VG_PRE_LIMIT && ts_is_pow2(pre) ? pre : 0;
}

void _ts_vg_free(const ts_vg_backend_t *be, void *p) {
    if (!p) return;
    size_t size;
    size_t pre = live_pre(p, &size);
    VALGRIND_FREELIKE_BLOCK(p, TS_VG_REDZONE); /* reports an invalid or double free */
    if (!pre) return;
    _ts_vg_quiet(true);
    *check_word(p) = 0;
    be->free((char *)p - pre);
    _ts_vg_quiet(false);
}

void *_ts_vg_realloc(const ts_vg_backend_t *be, void *p, size_t size) {
    size_t old;
    if (!live_pre(p, &old)) { /* memcheck names the bad pointer; glibc's answer */
        VALGRIND_FREELIKE_BLOCK(p, TS_VG_REDZONE);
        errno = ENOMEM;
        return NULL;
    }
    void *q = _ts_vg_alloc(be, size, 0, false);
    if (!q) return NULL;
    memcpy(q, p, old < size ? old : size);
    _ts_vg_free(be, p);
    return q;
}

size_t _ts_vg_usable(const void *p) {
    size_t size;
    if (!p || !live_pre((void *)p, &size)) return 0;
    return size;
}

#else /* no Valgrind headers: never called (ts_vg_active() is false) */

void *_ts_vg_alloc(const ts_vg_backend_t *be, size_t size, size_t align, bool zero) {
    (void)be;
    (void)size;
    (void)align;
    (void)zero;
    return NULL;
}
void _ts_vg_free(const ts_vg_backend_t *be, void *p) {
    (void)be;
    (void)p;
}
void *_ts_vg_realloc(const ts_vg_backend_t *be, void *p, size_t size) {
    (void)be;
    (void)p;
    (void)size;
    return NULL;
}
size_t _ts_vg_usable(const void *p) {
    (void)p;
    return 0;
}
void _ts_vg_quiet(bool quiet) {
    (void)quiet;
}
void _ts_vg_noaccess(const void *p, size_t size) {
    (void)p;
    (void)size;
}

#endif
