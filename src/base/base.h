/* Base utilities shared by every design: compiler hints, alignment helpers,
 * the fatal-error path, an allocation-free formatter, environment reading
 * and (base/options.h) the table of every TSALLOC_* option.
 *
 * Nothing here allocates from the heap, so it is safe inside malloc itself.
 */
#ifndef TS_BASE_BASE_H
#define TS_BASE_BASE_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "os/os.h"

#ifdef __cplusplus
extern "C" {
#endif

#define ts_likely(x)   __builtin_expect(!!(x), 1)
#define ts_unlikely(x) __builtin_expect(!!(x), 0)
#define TS_NOINLINE    __attribute__((noinline))
#define TS_INLINE      static inline __attribute__((always_inline))
#define TS_NORETURN    __attribute__((noreturn))
#define TS_EXPORT      __attribute__((visibility("default")))
#define TS_TLS         __thread __attribute__((tls_model("initial-exec")))
/* A function that reads other threads' plain counters without synchronising:
 * statistics snapshots, which may be a few counts off but never change the
 * heap. Kept out of ThreadSanitizer so that its reports are races that matter
 * (tests/stress/core_tsan.c prints statistics while threads allocate). */
#define TS_RACY_READER __attribute__((no_sanitize("thread"), noinline))

/* Every block any tsalloc design returns is aligned to this. */
#define TS_MIN_ALIGN 16

TS_INLINE size_t ts_align_up(size_t x, size_t a) {
    return (x + a - 1) & ~(a - 1);
}
TS_INLINE uintptr_t ts_align_up_ptr(uintptr_t x, size_t a) {
    return (x + a - 1) & ~(uintptr_t)(a - 1);
}
TS_INLINE bool ts_is_pow2(size_t x) {
    return x && !(x & (x - 1));
}
/* A 64-bit finaliser: every input bit moves about half the output bits
 * (hash tables keyed by addresses, the hardened build's keys). */
TS_INLINE uint64_t ts_mix64(uint64_t x) {
    x ^= x >> 31;
    x *= 0x7fb5d329728ea185ull;
    x ^= x >> 27;
    x *= 0x81dadef4bc2dd44dull;
    return x ^ (x >> 33);
}

/* Print "tsalloc: <formatted message>\n" to stderr (the _ts_format subset). */
TS_HIDDEN void _ts_vmessage(const char *fmt, va_list ap);
TS_HIDDEN void _ts_message(const char *fmt, ...);
/* Print "tsalloc: <formatted message>\n" to stderr and abort(). */
TS_HIDDEN TS_NORETURN void _ts_fatal(const char *fmt, ...);
/* The message every design uses for a pointer it does not own, or a detected
 * double free: "tsalloc: <func>(): invalid pointer 0x..." then abort(). */
TS_HIDDEN TS_NORETURN void _ts_invalid_pointer(const char *func, const void *ptr);
TS_HIDDEN TS_NORETURN void _ts_double_free(const char *func, const void *ptr);

/* snprintf subset without allocation: %s %d %ld %u %lu %zu %zd %x %lx %p %c %%
 * and a width for numbers (e.g. %8zu). Returns the length it wanted. */
TS_HIDDEN int _ts_vformat(char *buf, size_t cap, const char *fmt, va_list ap);
TS_HIDDEN int _ts_format(char *buf, size_t cap, const char *fmt, ...);

/* getenv without allocation (NULL when unset or empty). The long parser
 * accepts numbers (strtoll base 0) with a suffix k/K, m/M or g/G (powers of
 * 1024) and an optional b/B; the bool parser 0/1, yes/no, true/false, on/off.
 * The parsers return false, *out untouched, for anything else. Options are
 * read through the option table (base/options.h), never with getenv. */
TS_HIDDEN const char *_ts_env(const char *name);
TS_HIDDEN bool _ts_parse_long(const char *v, long long *out);
TS_HIDDEN bool _ts_parse_bool(const char *v, bool *out);

#ifdef __cplusplus
}
#endif

#endif
