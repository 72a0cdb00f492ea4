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

/* The design function each helper calls: the design's own unless the
 * includer routes them (the override shim adds Valgrind support). */
#ifndef TS_FAMILY_FN
#define TS_FAMILY_FN(fn) _TS_D(fn)
#endif

static inline void *ts_family_calloc(size_t count, size_t size) {
    size_t total;
    if (ts_unlikely(__builtin_mul_overflow(count, size, &total))) {
        errno = ENOMEM;
        return NULL;
    }
    return TS_FAMILY_FN(calloc)(total);
}

static inline void *ts_family_realloc(void *ptr, size_t size) {
    if (ptr == NULL) return TS_FAMILY_FN(malloc)(size);
    if (size == 0) { /* glibc: free and return NULL */
        TS_FAMILY_FN(free)(ptr);
        return NULL;
    }
    return TS_FAMILY_FN(realloc)(ptr, size);
}

/* Any alignment; a non-power of two is rounded up, as glibc's memalign does. */
static inline void *ts_family_memalign(size_t align, size_t size) {
    if (align <= TS_MIN_ALIGN) return TS_FAMILY_FN(malloc)(size);
    if (align > SIZE_MAX / 2 + 1) {
        errno = EINVAL;
        return NULL;
    }
    if (!ts_is_pow2(align)) align = (size_t)1 << (64 - __builtin_clzl(align));
    return TS_FAMILY_FN(memalign)(align, size);
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
