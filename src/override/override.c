/* The override shim: turns the design named by TS_DESIGN into a complete
 * malloc replacement (the whole malloc family, glibc's extras, and the
 * __libc_* aliases). C++ new/delete live in override_cxx.cpp.
 *
 * Invariants:
 * - Safe from the very first call under LD_PRELOAD: no dlsym, no stdio, no
 *   allocation through libc before the design is ready (designs initialise
 *   lazily inside their own malloc).
 * - Edge cases follow glibc 2.36 (documented in docs/api.md): realloc(p, 0)
 *   frees and returns NULL; memalign rounds a non-power-of-two alignment up;
 *   aligned_alloc and posix_memalign reject it with EINVAL.
 * - Lock order at fork: every design lock, then the OS layer's sbrk lock.
 */
#include "override/shim_vg.h"

#include "designs/family.h"

#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/malloc_family.h"
#include "base/options.h"

#ifndef TS_DESIGN
#error "compile the shim with -DTS_DESIGN=<design identifier>"
#endif

/* A design may give the fast paths of malloc and free as inline functions in
 * a header (ts_add_design(... INLINE_HEADER <header>)) that defines
 * TS_DESIGN_MALLOC_INLINE and TS_DESIGN_FREE_INLINE: malloc and free are then
 * those fast paths, without a jump into the design. */
#ifdef TS_DESIGN_INLINE_HEADER
#include TS_DESIGN_INLINE_HEADER
#endif
#ifndef TS_DESIGN_MALLOC_INLINE
#define TS_DESIGN_MALLOC_INLINE TS_FAMILY_FN(malloc)
#endif
#ifndef TS_DESIGN_FREE_INLINE
#define TS_DESIGN_FREE_INLINE TS_FAMILY_FN(free)
#endif

/* The heap profiler of the fast allocator (TS_PROF_DIVERT, core/prof.h):
 * each allocating entry diverts to it while it runs; free needs no hook. */
#include "core/prof.h"

/* Walks of the design's free memory, which memcheck must not report. */
static int design_trim(size_t pad) {
    bool vg = ts_vg_active();
    if (vg) _ts_vg_quiet(true);
    int r = _TS_D(trim)(pad);
    if (vg) _ts_vg_quiet(false);
    return r;
}
static void design_info(ts_heap_info_t *info) {
    bool vg = ts_vg_active();
    if (vg) _ts_vg_quiet(true);
    _TS_D(info)(info);
    if (vg) _ts_vg_quiet(false);
}

#if __has_attribute(copy) /* gcc 9+: the alias gets the target's attributes */
#define TS_ALIAS(name) __attribute__((alias(#name), copy(name), visibility("default")))
#else
#define TS_ALIAS(name) __attribute__((alias(#name), visibility("default")))
#endif

/* What the shim exports is the one list of base/malloc_family.h: these
 * declarations give its names default visibility (the library builds with
 * hidden visibility), and a definition below that strays from the list's
 * signature does not compile. */
#define TS_SHIM_EXPORT(name, ret, params, args) TS_EXPORT ret name params;
TS_MALLOC_FAMILY(TS_SHIM_EXPORT)
TS_MALLOC_EXTRAS(TS_SHIM_EXPORT)

/* malloc and free start on a cache line: their time in a tight loop moved by
 * about 20% with where the linker happened to place them (the same code at
 * another offset: 16.4 against 13.5 ns a 32 KiB pair). */
#define TS_LINE_ALIGNED __attribute__((aligned(64)))

TS_LINE_ALIGNED void *malloc(size_t size) {
    TS_PROF_DIVERT(_ts_prof_malloc, size);
    return TS_DESIGN_MALLOC_INLINE(size);
}

TS_LINE_ALIGNED void free(void *ptr) {
    TS_DESIGN_FREE_INLINE(ptr);
}

void *calloc(size_t count, size_t size) {
    TS_PROF_DIVERT(_ts_prof_calloc, count, size);
    return ts_family_calloc(count, size);
}

void *realloc(void *ptr, size_t size) {
    TS_PROF_DIVERT(_ts_prof_realloc, ptr, size);
    return ts_family_realloc(ptr, size);
}

void *reallocarray(void *ptr, size_t count, size_t size) {
    size_t total;
    if (__builtin_mul_overflow(count, size, &total)) {
        errno = ENOMEM;
        return NULL;
    }
    return realloc(ptr, total);
}

void *memalign(size_t align, size_t size) {
    TS_PROF_DIVERT(_ts_prof_memalign, align, size);
    return ts_family_memalign(align, size);
}

void *aligned_alloc(size_t align, size_t size) {
    TS_PROF_DIVERT(_ts_prof_aligned_alloc, align, size);
    return ts_family_aligned_alloc(align, size);
}

int posix_memalign(void **out, size_t align, size_t size) {
    TS_PROF_DIVERT(_ts_prof_posix_memalign, out, align, size);
    return ts_family_posix_memalign(out, align, size);
}

void *valloc(size_t size) {
    TS_PROF_DIVERT(_ts_prof_memalign, _ts_os_page_size(), size);
    return ts_family_memalign(_ts_os_page_size(), size);
}

void *pvalloc(size_t size) {
    size_t page = _ts_os_page_size();
    if (size > SIZE_MAX - page) {
        errno = ENOMEM;
        return NULL;
    }
    size_t rounded = ts_align_up(size, page);
    TS_PROF_DIVERT(_ts_prof_memalign, page, rounded ? rounded : page);
    return ts_family_memalign(page, rounded ? rounded : page);
}

size_t malloc_usable_size(void *ptr) {
    return ptr ? TS_FAMILY_FN(usable_size)(ptr) : 0;
}

int malloc_trim(size_t pad) {
    return design_trim(pad);
}

/* Parameters are accepted and ignored (tsalloc is tuned by TSALLOC_* options). */
int mallopt(int param, int value) {
    switch (param) {
    case M_MXFAST: /* glibc refuses sizes above its largest fastbin */
        return (size_t)value <= 80 * sizeof(size_t) / 4;
    case M_TRIM_THRESHOLD:
    case M_TOP_PAD:
    case M_MMAP_THRESHOLD:
    case M_MMAP_MAX:
    case M_CHECK_ACTION:
    case M_PERTURB:
    case M_ARENA_TEST:
    case M_ARENA_MAX:
        return 1;
    default:
        return 0;
    }
}

struct mallinfo2 mallinfo2(void) {
    ts_heap_info_t info = {0};
    design_info(&info);
    struct mallinfo2 mi = {0};
    mi.arena = info.arena;
    mi.ordblks = info.free ? 1 : 0;
    mi.hblks = info.mmapped_count;
    mi.hblkhd = info.mmapped;
    mi.usmblks = info.peak;
    mi.uordblks = info.in_use;
    mi.fordblks = info.free;
    mi.keepcost = info.releasable;
    return mi;
}

#define CLAMP_INT(x) ((int)((x) > (size_t)2147483647 ? 2147483647 : (x)))

struct mallinfo mallinfo(void) {
    struct mallinfo2 m2 = mallinfo2();
    struct mallinfo mi = {0};
    mi.arena = CLAMP_INT(m2.arena);
    mi.ordblks = CLAMP_INT(m2.ordblks);
    mi.hblks = CLAMP_INT(m2.hblks);
    mi.hblkhd = CLAMP_INT(m2.hblkhd);
    mi.usmblks = CLAMP_INT(m2.usmblks);
    mi.uordblks = CLAMP_INT(m2.uordblks);
    mi.fordblks = CLAMP_INT(m2.fordblks);
    mi.keepcost = CLAMP_INT(m2.keepcost);
    return mi;
}

/* Like glibc's malloc_stats: a short summary on stderr, without allocating. */
void malloc_stats(void) {
    ts_heap_info_t info = {0};
    design_info(&info);
    char buf[512];
    int n = _ts_format(buf, sizeof buf,
                       "tsalloc (%s)\nsystem bytes     = %10zu\nin use bytes     = %10zu\n"
                       "free bytes       = %10zu\nmmapped regions  = %10zu\n"
                       "mmapped bytes    = %10zu\nmax system bytes = %10zu\n",
                       TS_DESIGN_NAME, info.arena + info.mmapped, info.in_use + info.mmapped,
                       info.free, info.mmapped_count, info.mmapped, info.peak);
    _ts_os_write_stderr(buf, (size_t)n < sizeof buf ? (size_t)n : sizeof buf - 1);
}

/* XML in the shape glibc writes, with one heap. */
int malloc_info(int options, FILE *fp) {
    if (options != 0) return EINVAL; /* as glibc: the error is the return value */
    ts_heap_info_t info = {0};
    design_info(&info);
    fprintf(fp,
            "<malloc version=\"1\" allocator=\"tsalloc-%s\">\n"
            "<heap nr=\"0\">\n<sizes>\n</sizes>\n"
            "<total type=\"fast\" count=\"0\" size=\"0\"/>\n"
            "<total type=\"rest\" count=\"%d\" size=\"%zu\"/>\n"
            "<system type=\"current\" size=\"%zu\"/>\n"
            "<system type=\"max\" size=\"%zu\"/>\n"
            "<aspace type=\"total\" size=\"%zu\"/>\n"
            "<aspace type=\"mprotect\" size=\"%zu\"/>\n"
            "</heap>\n"
            "<total type=\"fast\" count=\"0\" size=\"0\"/>\n"
            "<total type=\"rest\" count=\"%d\" size=\"%zu\"/>\n"
            "<total type=\"mmap\" count=\"%zu\" size=\"%zu\"/>\n"
            "<system type=\"current\" size=\"%zu\"/>\n"
            "<system type=\"max\" size=\"%zu\"/>\n"
            "<aspace type=\"total\" size=\"%zu\"/>\n"
            "<aspace type=\"mprotect\" size=\"%zu\"/>\n"
            "</malloc>\n",
            TS_DESIGN_NAME, info.free ? 1 : 0, info.free, info.arena, info.peak, info.arena,
            info.arena, info.free ? 1 : 0, info.free, info.mmapped_count, info.mmapped,
            info.arena + info.mmapped, info.peak, info.arena + info.mmapped,
            info.arena + info.mmapped);
    return 0;
}

/* glibc's internal names, which some programs and libraries call directly,
 * and cfree, which old binaries still call (glibc keeps it for them). */
#define TS_SHIM_ALIAS(alias, target, ret, params) ret alias params TS_ALIAS(target);
TS_MALLOC_ALIASES(TS_SHIM_ALIAS)

/* Programs built against a C23 libc call the sized frees; like cfree they
 * must reach this allocator, never glibc's free with a pointer glibc does
 * not own. */
void free_sized(void *ptr, size_t size) {
    (void)size;
    free(ptr);
}
void free_aligned_sized(void *ptr, size_t align, size_t size) {
    (void)align;
    (void)size;
    free(ptr);
}

/* fork: the child of a multithreaded parent must find every lock free. */
static void fork_prepare(void) {
    _TS_D(atfork_prepare)();
    _ts_os_atfork_prepare();
}
static void fork_parent(void) {
    _ts_os_atfork_parent();
    _TS_D(atfork_parent)();
}
static void fork_child(void) {
    _ts_os_atfork_child();
    _TS_D(atfork_child)();
}

/* TSALLOC_STATS=1: print the summary at exit (the fast allocator prints its
 * own, richer statistics, so the shim stays quiet for it). */
#ifndef TS_DESIGN_OWN_STATS
static void stats_at_exit(void) {
    malloc_stats();
}
#endif

/* pthread_atfork and atexit may allocate, so register from a constructor
 * (when malloc is usable) rather than from inside malloc. */
__attribute__((constructor)) static void register_handlers(void) {
    pthread_atfork(fork_prepare, fork_parent, fork_child);
#ifndef TS_DESIGN_OWN_STATS
    if (_ts_option_env(TS_OPTID_SHIM_STATS, NULL)) {
        _ts_os_keep_stderr();
        atexit(stats_at_exit);
    }
#endif
}
