/* The malloc family's edge cases, written once for every entry point that
 * fronts a design: the override shim (malloc, calloc, ...) and a design's own
 * prefixed API (ts_calloc, ...). Include it with TS_DESIGN defined to the
 * design's C identifier; each helper then calls that design directly.
 *
 * The rules are glibc 2.36's (docs/api.md): calloc's product overflow gives
 * ENOMEM; realloc(NULL, n) is malloc(n) and realloc(p, 0) frees p and returns
 * NULL; memalign rounds a non-power-of-two alignment up; aligned_alloc
 * rejects it with EINVAL (glibc 2.38's rule).
 */
#ifndef TS_DESIGNS_FAMILY_H
#define TS_DESIGNS_FAMILY_H

#include <errno.h>
#include <stdint.h>

#include "designs/design.h"

#ifndef TS_DESIGN
#error "define TS_DESIGN to the design's identifier before including designs/family.h"
#endif

_TS_D_DECLARE(TS_DESIGN)

static inline void *ts_family_calloc(size_t count, size_t size) {
    size_t total;
    if (ts_unlikely(__builtin_mul_overflow(count, size, &total))) {
        errno = ENOMEM;
        return NULL;
    }
    return _TS_D(calloc)(total);
}

static inline void *ts_family_realloc(void *ptr, size_t size) {
    if (ptr == NULL) return _TS_D(malloc)(size);
    if (size == 0) { /* glibc: free and return NULL */
        _TS_D(free)(ptr);
        return NULL;
    }
    return _TS_D(realloc)(ptr, size);
}

/* Any alignment; a non-power of two is rounded up, as glibc's memalign does. */
static inline void *ts_family_memalign(size_t align, size_t size) {
    if (align <= TS_MIN_ALIGN) return _TS_D(malloc)(size);
    if (align > SIZE_MAX / 2 + 1) {
        errno = EINVAL;
        return NULL;
    }
    if (!ts_is_pow2(align)) align = (size_t)1 << (64 - __builtin_clzl(align));
    return _TS_D(memalign)(align, size);
}

static inline void *ts_family_aligned_alloc(size_t align, size_t size) {
    if (!ts_is_pow2(align)) {
        errno = EINVAL;
        return NULL;
    }
    return ts_family_memalign(align, size);
}

/* posix_memalign: the error is the result and errno is kept, as POSIX says. */
static inline int ts_family_posix_memalign(void **out, size_t align, size_t size) {
    if (!ts_is_pow2(align) || align % sizeof(void *) != 0) return EINVAL;
    int saved = errno;
    void *p = ts_family_memalign(align, size);
    if (!p) {
        int err = errno == EINVAL ? EINVAL : ENOMEM;
        errno = saved;
        return err;
    }
    *out = p;
    return 0;
}

#endif
