/* The malloc family's names and signatures, written once: the lists of what
 * every tsalloc library exports as a malloc replacement (the override shim,
 * src/override/) and of what the trace recorder (tools/recorder/) wraps.
 *
 * X-macro lists; each user passes a macro X that turns one entry into what
 * it needs (a definition, a declaration, a function pointer, a name):
 * - TS_MALLOC_FAMILY(X), X(name, ret, params, args): the functions that hand
 *   out or take back blocks. The shim defines them over its design; the
 *   recorder wraps each one.
 * - TS_MALLOC_EXTRAS(X), same shape: glibc's introspection and tuning
 *   functions and C23's sized frees. The shim defines them; the recorder
 *   passes them through unwrapped (a sized free goes unrecorded).
 * - TS_MALLOC_ALIASES(X), X(alias, target, ret, params): other names of
 *   family functions (glibc's internal __libc_* names, cfree). The shim
 *   makes them aliases; the recorder does not wrap them.
 * - TS_CXX_NEW(X), X(symbol, op, array, aligned, nothrow, params, args), and
 *   TS_CXX_DELETE(X), X(symbol, op, params, args): every standard form of
 *   C++ operator new and delete under its Itanium-mangled name; op is the
 *   C++ operator (new, new[], delete, delete[]); array, aligned and nothrow
 *   are 0 or 1. The C++ shim defines the operators; the recorder, written in
 *   C, defines the mangled symbols.
 *
 * Invariants: params name their arguments the same way in every entry (ptr,
 * size, count, align, out, nt) and args lists them in order, so a wrapper
 * forwards a call as `next args`. In C++ params use std::align_val_t and
 * const std::nothrow_t &; in C, where those do not exist, the same ABI
 * types: size_t and a pointer. The mangled names are LP64's (size_t is `m`).
 * The types in ret and params (struct mallinfo, FILE) come from <malloc.h>
 * and <stdio.h>, which a user expanding them includes.
 */
#ifndef TS_BASE_MALLOC_FAMILY_H
#define TS_BASE_MALLOC_FAMILY_H

#include <stddef.h>

#if __SIZEOF_SIZE_T__ != 8
#error "the mangled names of operator new and delete below are LP64's"
#endif

/* clang-format off */
#define TS_MALLOC_FAMILY(X)                                                                        \
    X(malloc,         void *, (size_t size),                          (size))                      \
    X(free,           void,   (void *ptr),                            (ptr))                       \
    X(calloc,         void *, (size_t count, size_t size),            (count, size))               \
    X(realloc,        void *, (void *ptr, size_t size),               (ptr, size))                 \
    X(reallocarray,   void *, (void *ptr, size_t count, size_t size), (ptr, count, size))          \
    X(posix_memalign, int,    (void **out, size_t align, size_t size), (out, align, size))         \
    X(aligned_alloc,  void *, (size_t align, size_t size),            (align, size))               \
    X(memalign,       void *, (size_t align, size_t size),            (align, size))               \
    X(valloc,         void *, (size_t size),                          (size))                      \
    X(pvalloc,        void *, (size_t size),                          (size))

#define TS_MALLOC_EXTRAS(X)                                                                        \
    X(malloc_usable_size, size_t,           (void *ptr),                           (ptr))          \
    X(malloc_trim,        int,              (size_t pad),                          (pad))          \
    X(mallopt,            int,              (int param, int value),                (param, value)) \
    X(mallinfo,           struct mallinfo,  (void),                                ())             \
    X(mallinfo2,          struct mallinfo2, (void),                                ())             \
    X(malloc_stats,       void,             (void),                                ())             \
    X(malloc_info,        int,              (int options, FILE *fp),               (options, fp))  \
    X(free_sized,         void,             (void *ptr, size_t size),              (ptr, size))    \
    X(free_aligned_sized, void,             (void *ptr, size_t align, size_t size),                \
      (ptr, align, size))

#define TS_MALLOC_ALIASES(X)                                                                       \
    X(__libc_malloc,    malloc,         void *, (size_t size))                                     \
    X(__libc_free,      free,           void,   (void *ptr))                                       \
    X(__libc_calloc,    calloc,         void *, (size_t count, size_t size))                       \
    X(__libc_realloc,   realloc,        void *, (void *ptr, size_t size))                          \
    X(__libc_memalign,  memalign,       void *, (size_t align, size_t size))                       \
    X(__libc_valloc,    valloc,         void *, (size_t size))                                     \
    X(__libc_pvalloc,   pvalloc,        void *, (size_t size))                                     \
    X(__posix_memalign, posix_memalign, int,    (void **out, size_t align, size_t size))           \
    X(cfree,            free,           void,   (void *ptr))

#ifdef __cplusplus
#define TS_CXX_ALIGN_T   std::align_val_t
#define TS_CXX_NOTHROW_T const std::nothrow_t &
#else
#define TS_CXX_ALIGN_T   size_t
#define TS_CXX_NOTHROW_T const void *
#endif

#define TS_CXX_NEW(X)                                                                              \
    X(_Znwm,                              new,   0, 0, 0, (size_t size), (size))                   \
    X(_Znam,                              new[], 1, 0, 0, (size_t size), (size))                   \
    X(_ZnwmRKSt9nothrow_t,                new,   0, 0, 1, (size_t size, TS_CXX_NOTHROW_T nt),      \
      (size, nt))                                                                                  \
    X(_ZnamRKSt9nothrow_t,                new[], 1, 0, 1, (size_t size, TS_CXX_NOTHROW_T nt),      \
      (size, nt))                                                                                  \
    X(_ZnwmSt11align_val_t,               new,   0, 1, 0, (size_t size, TS_CXX_ALIGN_T align),     \
      (size, align))                                                                               \
    X(_ZnamSt11align_val_t,               new[], 1, 1, 0, (size_t size, TS_CXX_ALIGN_T align),     \
      (size, align))                                                                               \
    X(_ZnwmSt11align_val_tRKSt9nothrow_t, new,   0, 1, 1,                                          \
      (size_t size, TS_CXX_ALIGN_T align, TS_CXX_NOTHROW_T nt), (size, align, nt))                 \
    X(_ZnamSt11align_val_tRKSt9nothrow_t, new[], 1, 1, 1,                                          \
      (size_t size, TS_CXX_ALIGN_T align, TS_CXX_NOTHROW_T nt), (size, align, nt))

#define TS_CXX_DELETE(X)                                                                           \
    X(_ZdlPv,                               delete,   (void *ptr),              (ptr))             \
    X(_ZdaPv,                               delete[], (void *ptr),              (ptr))             \
    X(_ZdlPvm,                              delete,   (void *ptr, size_t size), (ptr, size))       \
    X(_ZdaPvm,                              delete[], (void *ptr, size_t size), (ptr, size))       \
    X(_ZdlPvRKSt9nothrow_t,                 delete,   (void *ptr, TS_CXX_NOTHROW_T nt), (ptr, nt)) \
    X(_ZdaPvRKSt9nothrow_t,                 delete[], (void *ptr, TS_CXX_NOTHROW_T nt), (ptr, nt)) \
    X(_ZdlPvSt11align_val_t,                delete,   (void *ptr, TS_CXX_ALIGN_T align),           \
      (ptr, align))                                                                                \
    X(_ZdaPvSt11align_val_t,                delete[], (void *ptr, TS_CXX_ALIGN_T align),           \
      (ptr, align))                                                                                \
    X(_ZdlPvmSt11align_val_t,               delete,                                                \
      (void *ptr, size_t size, TS_CXX_ALIGN_T align), (ptr, size, align))                          \
    X(_ZdaPvmSt11align_val_t,               delete[],                                              \
      (void *ptr, size_t size, TS_CXX_ALIGN_T align), (ptr, size, align))                          \
    X(_ZdlPvSt11align_val_tRKSt9nothrow_t,  delete,                                                \
      (void *ptr, TS_CXX_ALIGN_T align, TS_CXX_NOTHROW_T nt), (ptr, align, nt))                    \
    X(_ZdaPvSt11align_val_tRKSt9nothrow_t,  delete[],                                              \
      (void *ptr, TS_CXX_ALIGN_T align, TS_CXX_NOTHROW_T nt), (ptr, align, nt))
/* clang-format on */

#endif
