/* One design's entry points as an fz_api_t, compiled once per design with
 * -DTS_DESIGN=<identifier> -DTS_DESIGN_NAME="<name>". The design is linked
 * into the program without the override shim, so the program's malloc stays
 * glibc's (or ASan's): the fuzzer's own allocations never reach the design,
 * and the design's code is compiled with coverage instrumentation.
 * The edge cases are those of designs/family.h, as in the shim. */
#include "designs/family.h"

#include "fuzz_api.h"

static void *d_malloc(size_t size) {
    return _TS_D(malloc)(size);
}
static void d_free(void *ptr) {
    _TS_D(free)(ptr);
}
static void *d_calloc(size_t count, size_t size) {
    return ts_family_calloc(count, size);
}
static void *d_realloc(void *ptr, size_t size) {
    return ts_family_realloc(ptr, size);
}
static void *d_memalign(size_t align, size_t size) {
    return ts_family_memalign(align, size);
}
static void *d_aligned_alloc(size_t align, size_t size) {
    return ts_family_aligned_alloc(align, size);
}
static int d_posix_memalign(void **out, size_t align, size_t size) {
    return ts_family_posix_memalign(out, align, size);
}
static size_t d_usable_size(void *ptr) {
    return ptr ? _TS_D(usable_size)(ptr) : 0;
}
static int d_trim(size_t pad) {
    return _TS_D(trim)(pad);
}

/* The designs' consistency checks, each defined only where its design is
 * linked in: the fast allocator's ts_heap_check (which aborts with its own
 * message), bestfit's and pow2's debug checks. bins has none. */
extern void ts_heap_check(void) __attribute__((weak));
extern const char *_ts_bestfit_debug_check(void) __attribute__((weak));
extern const char *_ts_bestfit_tls_debug_check(void) __attribute__((weak));
extern int _ts_pow2_check_heap(char *why, size_t cap) __attribute__((weak));
extern int _ts_pow2_part_check_heap(char *why, size_t cap) __attribute__((weak));

static const char *d_check(void) {
    static char why[256];
    if (ts_heap_check) ts_heap_check();
    if (_ts_bestfit_debug_check) return _ts_bestfit_debug_check();
    if (_ts_bestfit_tls_debug_check) return _ts_bestfit_tls_debug_check();
    if (_ts_pow2_check_heap && _ts_pow2_check_heap(why, sizeof why)) return why;
    if (_ts_pow2_part_check_heap && _ts_pow2_part_check_heap(why, sizeof why)) return why;
    return NULL;
}

static size_t d_footprint(void) {
    ts_heap_info_t info = {0};
    _TS_D(info)(&info);
    return info.arena + info.mmapped;
}

const fz_api_t fz_design = {
    TS_DESIGN_NAME, 16,          d_malloc,        d_free,           d_calloc,
    d_realloc,      d_memalign,  d_aligned_alloc, d_posix_memalign, d_usable_size,
    d_trim,         d_footprint, d_check};
