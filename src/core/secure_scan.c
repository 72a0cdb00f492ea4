/* The hardened build's scan of freed blocks leaving quarantine (TS_SECURE=1,
 * secure.c's quarantine_check): whether any bit of a range is set, over
 * the kilobytes that blocks of 4 KiB and more have zeroed. With AVX2 (and
 * an OS that saves its registers) 32 bytes a load, else 16: the scan is
 * most of a malloc/free pair's cost at those sizes.
 *
 * Invariants: _ts_secure_scan_init runs once, in secure.c's set-up, before
 * the first block is freed; the choice never changes after. No locks.
 */
#include "core/internal.h"

#if defined(__x86_64__)
#include <cpuid.h>
#endif

/* Bits set in [from, to) (16-byte aligned, a multiple of 16 bytes), or 0:
 * 64 bytes a step in vector registers, for the kilobytes of large blocks. */
typedef uint64_t ts_v2_t __attribute__((vector_size(16), may_alias));
static uint64_t or_words(uintptr_t from, uintptr_t to) {
    const ts_v2_t *v = (const ts_v2_t *)from;
    size_t n = (to - from) / 16, i = 0;
    ts_v2_t a = {0, 0}, b = {0, 0};
    for (; i + 4 <= n; i += 4) {
        a |= v[i] | v[i + 1];
        b |= v[i + 2] | v[i + 3];
    }
    for (; i < n; i++) a |= v[i];
    a |= b;
    return a[0] | a[1];
}

#if defined(__x86_64__)

/* The same, 128 bytes a step in AVX2 registers: about half the time of the
 * SSE2 loop over a 4 KiB block, where the quarantine's check is most of a
 * malloc/free pair's cost. */
typedef uint64_t ts_v4_t __attribute__((vector_size(32), may_alias));
__attribute__((target("avx2"))) static uint64_t or_words_avx2(uintptr_t from, uintptr_t to) {
    const ts_v4_t *v = (const ts_v4_t *)from;
    size_t n = (to - from) / 32, i = 0;
    ts_v4_t a = {0, 0, 0, 0}, b = {0, 0, 0, 0};
    for (; i + 4 <= n; i += 4) {
        a |= v[i] | v[i + 1];
        b |= v[i + 2] | v[i + 3];
    }
    for (; i < n; i++) a |= v[i];
    a |= b;
    uint64_t r = a[0] | a[1] | a[2] | a[3];
    if ((to - from) % 32) r |= or_words(to - 16, to);
    return r;
}

/* AVX2, and the OS saves its registers (XCR0's SSE and AVX state bits). */
static bool avx2_usable(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & bit_OSXSAVE) || !(c & bit_AVX)) return false;
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    if ((lo & 6) != 6) return false;
    return __get_cpuid_count(7, 0, &a, &b, &c, &d) && (b & bit_AVX2);
}
#else
#define or_words_avx2 or_words
static bool avx2_usable(void) {
    return false;
}
#endif

static bool use_avx2;

void _ts_secure_scan_init(void) {
    use_avx2 = avx2_usable();
}

uint64_t _ts_secure_or_words(uintptr_t from, uintptr_t to) {
    return use_avx2 ? or_words_avx2(from, to) : or_words(from, to);
}
