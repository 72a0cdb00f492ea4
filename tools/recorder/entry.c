/* The recorder's entry points: the malloc family and every form of C++
 * operator new and delete, as listed in base/malloc_family.h. Each passes
 * the call on to the real allocator (real.c) and has blocks.c record it,
 * unless the call comes from inside the recorder or the real allocator
 * (_ts_rec_in_wrapper), or the process does not record.
 *
 * Invariants: before the real functions are known, allocations come from
 * the bootstrap arena and frees of its blocks are ignored; a block of the
 * arena moves to the real allocator when realloc'ed. errno is what the real
 * call left (blocks.c saves it around its work).
 */
#include "recorder.h"

#include <dlfcn.h>
#include <errno.h>
#include <string.h>

TS_TLS int _ts_rec_in_wrapper;

/* The recorder exports the family under its own names: these declarations
 * give them default visibility (the library builds with hidden visibility). */
#define TS_REC_EXPORT(name, ret, params, args) TS_EXPORT ret name params;
TS_MALLOC_FAMILY(TS_REC_EXPORT)

/* ---- the C entry points ---- */

/* True (and _ts_rec_in_wrapper set) when the caller should record this call. */
static inline int enter(void) {
    if (_ts_rec_in_wrapper ||
        atomic_load_explicit(&_ts_rec_mode, memory_order_relaxed) == TS_REC_OFF)
        return 0;
    _ts_rec_in_wrapper = 1;
    return 1;
}

static inline void *leave_new(void *p, char kind, uint64_t count, uint64_t size) {
    if (p) _ts_rec_note_new(p, kind, count, size);
    _ts_rec_in_wrapper = 0;
    return p;
}

void *malloc(size_t size) {
    if (ts_unlikely(!ts_rec_real_ready())) return _ts_rec_boot_alloc(size, 0);
    if (!enter()) return _ts_rec_real.malloc(size);
    return leave_new(_ts_rec_real.malloc(size), 'm', 0, size);
}

void free(void *p) {
    if (!p || ts_unlikely(ts_rec_is_boot(p))) return;
    if (ts_unlikely(!ts_rec_real_ready())) return;
    if (!enter()) {
        _ts_rec_real.free(p);
        return;
    }
    _ts_rec_note_free(p);
    _ts_rec_real.free(p);
    _ts_rec_in_wrapper = 0;
}

void *calloc(size_t count, size_t size) {
    if (ts_unlikely(!ts_rec_real_ready())) {
        size_t total;
        if (__builtin_mul_overflow(count, size, &total)) {
            errno = ENOMEM;
            return NULL;
        }
        return _ts_rec_boot_alloc(total, 0);
    }
    if (!enter()) return _ts_rec_real.calloc(count, size);
    return leave_new(_ts_rec_real.calloc(count, size), 'c', count, size);
}

/* A block from the bootstrap arena moves to the real allocator. */
static void *boot_resize(void *p, size_t size) {
    if (size == 0) return NULL;
    void *q = malloc(size);
    if (q) {
        size_t old = ((size_t *)p)[-1];
        memcpy(q, p, old < size ? old : size);
    }
    return q;
}

void *realloc(void *p, size_t size) {
    if (ts_unlikely(p && ts_rec_is_boot(p))) return boot_resize(p, size);
    if (ts_unlikely(!ts_rec_real_ready())) return p ? NULL : _ts_rec_boot_alloc(size, 0);
    if (!enter()) return _ts_rec_real.realloc(p, size);
    uint32_t slot = p ? _ts_rec_note_resize_start(p) : TS_REC_NO_SLOT;
    void *q = _ts_rec_real.realloc(p, size);
    _ts_rec_note_resize_end(p, slot, q, size);
    _ts_rec_in_wrapper = 0;
    return q;
}

/* The C library's reallocarray, or where it has none, realloc of the
 * checked product. */
static void *real_reallocarray(void *p, size_t count, size_t size, size_t total) {
    return _ts_rec_real.reallocarray ? _ts_rec_real.reallocarray(p, count, size)
                                     : _ts_rec_real.realloc(p, total);
}

void *reallocarray(void *p, size_t count, size_t size) {
    size_t total;
    if (__builtin_mul_overflow(count, size, &total)) {
        errno = ENOMEM;
        return NULL;
    }
    if (ts_unlikely(p && ts_rec_is_boot(p))) return boot_resize(p, total);
    if (ts_unlikely(!ts_rec_real_ready())) return p ? NULL : _ts_rec_boot_alloc(total, 0);
    if (!enter()) return real_reallocarray(p, count, size, total);
    uint32_t slot = p ? _ts_rec_note_resize_start(p) : TS_REC_NO_SLOT;
    void *q = real_reallocarray(p, count, size, total);
    _ts_rec_note_resize_end(p, slot, q, total);
    _ts_rec_in_wrapper = 0;
    return q;
}

/* The aligned forms are recorded as `m` with the size asked for. */
int posix_memalign(void **out, size_t align, size_t size) {
    if (ts_unlikely(!ts_rec_real_ready())) {
        void *p = _ts_rec_boot_alloc(size, align);
        if (!p) return ENOMEM;
        *out = p;
        return 0;
    }
    if (!enter()) return _ts_rec_real.posix_memalign(out, align, size);
    int rc = _ts_rec_real.posix_memalign(out, align, size);
    leave_new(rc == 0 ? *out : NULL, 'm', 0, size);
    return rc;
}

void *aligned_alloc(size_t align, size_t size) {
    if (ts_unlikely(!ts_rec_real_ready())) return _ts_rec_boot_alloc(size, align);
    if (!enter()) return _ts_rec_real.aligned_alloc(align, size);
    return leave_new(_ts_rec_real.aligned_alloc(align, size), 'm', 0, size);
}

void *memalign(size_t align, size_t size) {
    if (ts_unlikely(!ts_rec_real_ready())) return _ts_rec_boot_alloc(size, align);
    if (!enter()) return _ts_rec_real.memalign(align, size);
    return leave_new(_ts_rec_real.memalign(align, size), 'm', 0, size);
}

void *valloc(size_t size) {
    if (ts_unlikely(!ts_rec_real_ready())) return _ts_rec_boot_alloc(size, 4096);
    if (!enter()) return _ts_rec_real.valloc(size);
    return leave_new(_ts_rec_real.valloc(size), 'm', 0, size);
}

/* pvalloc hands out whole pages: recorded with its size rounded up. */
void *pvalloc(size_t size) {
    size_t page = _ts_os_page_size();
    size_t rounded = size ? ts_align_up(size, page) : page;
    if (ts_unlikely(!ts_rec_real_ready())) return _ts_rec_boot_alloc(rounded, page);
    if (!enter()) return _ts_rec_real.pvalloc(size);
    return leave_new(_ts_rec_real.pvalloc(size), 'm', 0, rounded < size ? size : rounded);
}

/* ---- C++ operator new and delete ----
 *
 * A tsalloc design preloaded after the recorder exports its own operators,
 * which never pass through malloc: the recorder wraps them too, forwarding to
 * the next definition (the design's, or libstdc++'s, whose calls back into
 * malloc are then not recorded twice). If the real operator new throws, the
 * cleanup below clears _ts_rec_in_wrapper while the exception unwinds
 * (-fexceptions).
 * When there is no next definition (a C program whose C++ plugin brought
 * libstdc++ with RTLD_LOCAL), the operators fall back on the recorded malloc
 * family: recording must not change what the program can do.
 */

static void *next_symbol(_Atomic(void *) *cache, const char *name) {
    void *fn = atomic_load_explicit(cache, memory_order_acquire);
    if (ts_likely(fn != NULL)) return fn;
    int was = _ts_rec_in_wrapper;
    _ts_rec_in_wrapper = 1; /* dlsym's own allocations are not the program's */
    ts_rec_real_ready();
    fn = dlsym(RTLD_NEXT, name);
    _ts_rec_in_wrapper = was;
    if (fn) atomic_store_explicit(cache, fn, memory_order_release);
    return fn; /* NULL: looked up again next time (libstdc++ may come later) */
}

static void *new_fallback(void *p, size_t size) {
    if (!p) _ts_fatal("record: operator new(%zu): out of memory, no C++ runtime to throw", size);
    return p;
}

static void wrapper_done(int *unused) {
    (void)unused;
    _ts_rec_in_wrapper = 0;
}

/* The fallback of each form when no next definition exists: the recorded
 * malloc or memalign; a throwing form without a runtime to throw stops the
 * program. Named by the form's aligned and nothrow flags. */
static void *fallback_new_00(size_t size) {
    return new_fallback(malloc(size), size);
}
static void *fallback_new_01(size_t size, const void *nt) {
    (void)nt;
    return malloc(size);
}
static void *fallback_new_10(size_t size, size_t align) {
    return new_fallback(memalign(align, size), size);
}
static void *fallback_new_11(size_t size, size_t align, const void *nt) {
    (void)nt;
    return memalign(align, size);
}

#define NEW_ENTRY(symbol, op, array, aligned, nothrow, params, args)                               \
    TS_EXPORT void *symbol params {                                                                \
        static _Atomic(void *) cache;                                                              \
        void *(*next)params = (void *(*)params)next_symbol(&cache, #symbol);                       \
        if (!next) return fallback_new_##aligned##nothrow args;                                    \
        if (!enter()) return next args;                                                            \
        int guard __attribute__((cleanup(wrapper_done))) = 1;                                      \
        (void)guard;                                                                               \
        return leave_new(next args, 'm', 0, size);                                                 \
    }

#define DELETE_ENTRY(symbol, op, params, args)                                                     \
    TS_EXPORT void symbol params {                                                                 \
        static _Atomic(void *) cache;                                                              \
        if (!ptr || ts_rec_is_boot(ptr)) return;                                                   \
        void(*next) params = (void(*) params)next_symbol(&cache, #symbol);                         \
        if (!next) {                                                                               \
            free(ptr);                                                                             \
            return;                                                                                \
        }                                                                                          \
        if (!enter()) {                                                                            \
            next args;                                                                             \
            return;                                                                                \
        }                                                                                          \
        _ts_rec_note_free(ptr);                                                                    \
        next args;                                                                                 \
        _ts_rec_in_wrapper = 0;                                                                    \
    }

/* std::align_val_t is passed as a size_t and std::nothrow_t by reference
 * (base/malloc_family.h writes them so in C). */
TS_CXX_NEW(NEW_ENTRY)
TS_CXX_DELETE(DELETE_ENTRY)
