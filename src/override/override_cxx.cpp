/* C++ operator new and delete, every standard form, for the design the shim
 * is built with.
 *
 * Compiled without exceptions or RTTI and linked without libstdc++, so that
 * preloading tsalloc into a C program loads no C++ runtime. What operator new
 * needs from the C++ runtime when it fails (the new-handler and throwing
 * std::bad_alloc) is reached through weak references: present whenever the
 * program is C++, and when absent new aborts with a message instead.
 */
#include <cstddef>
#include <new>

#include "designs/design.h"

extern "C" {
_TS_D_DECLARE(TS_DESIGN)
}

typedef void (*ts_new_handler_fn)();
extern "C" ts_new_handler_fn ts_weak_get_new_handler() __asm__("_ZSt15get_new_handlerv")
    __attribute__((weak));
extern "C" void ts_weak_throw_bad_alloc() __asm__("_ZSt17__throw_bad_allocv")
    __attribute__((weak, noreturn));

#define TS_CXX_EXPORT __attribute__((visibility("default")))

namespace {

/* The standard's loop: retry while a new-handler exists; when none, throw
 * (or, for the nothrow forms, return NULL). */
__attribute__((noinline)) void *new_slow(size_t size, size_t align, bool nothrow) {
    for (;;) {
        void *p = align > TS_MIN_ALIGN ? _TS_D(memalign)(align, size) : _TS_D(malloc)(size);
        if (p) return p;
        ts_new_handler_fn handler = ts_weak_get_new_handler ? ts_weak_get_new_handler() : nullptr;
        if (!handler) {
            if (nothrow) return nullptr;
            if (ts_weak_throw_bad_alloc) ts_weak_throw_bad_alloc();
            _ts_fatal("operator new(%zu): out of memory", size);
        }
        handler();
    }
}

inline void *new_impl(size_t size) {
    void *p = _TS_D(malloc)(size);
    return __builtin_expect(p != nullptr, 1) ? p : new_slow(size, 0, false);
}

inline void *new_aligned(size_t size, std::align_val_t align, bool nothrow) {
    size_t a = static_cast<size_t>(align);
    if (!ts_is_pow2(a)) {
        if (nothrow) return nullptr;
        _ts_fatal("operator new(%zu, align %zu): alignment is not a power of two", size, a);
    }
    void *p = a > TS_MIN_ALIGN ? _TS_D(memalign)(a, size) : _TS_D(malloc)(size);
    return __builtin_expect(p != nullptr, 1) ? p : new_slow(size, a, nothrow);
}

inline void *new_nothrow(size_t size) {
    void *p = _TS_D(malloc)(size);
    return __builtin_expect(p != nullptr, 1) ? p : new_slow(size, 0, true);
}

} // namespace

TS_CXX_EXPORT void *operator new(size_t size) {
    return new_impl(size);
}
TS_CXX_EXPORT void *operator new[](size_t size) {
    return new_impl(size);
}
TS_CXX_EXPORT void *operator new(size_t size, const std::nothrow_t &) noexcept {
    return new_nothrow(size);
}
TS_CXX_EXPORT void *operator new[](size_t size, const std::nothrow_t &) noexcept {
    return new_nothrow(size);
}
TS_CXX_EXPORT void *operator new(size_t size, std::align_val_t align) {
    return new_aligned(size, align, false);
}
TS_CXX_EXPORT void *operator new[](size_t size, std::align_val_t align) {
    return new_aligned(size, align, false);
}
TS_CXX_EXPORT void *operator new(size_t size, std::align_val_t align,
                                 const std::nothrow_t &) noexcept {
    return new_aligned(size, align, true);
}
TS_CXX_EXPORT void *operator new[](size_t size, std::align_val_t align,
                                   const std::nothrow_t &) noexcept {
    return new_aligned(size, align, true);
}

TS_CXX_EXPORT void operator delete(void *p) noexcept {
    _TS_D(free)(p);
}
TS_CXX_EXPORT void operator delete[](void *p) noexcept {
    _TS_D(free)(p);
}
TS_CXX_EXPORT void operator delete(void *p, size_t) noexcept {
    _TS_D(free)(p);
}
TS_CXX_EXPORT void operator delete[](void *p, size_t) noexcept {
    _TS_D(free)(p);
}
TS_CXX_EXPORT void operator delete(void *p, const std::nothrow_t &) noexcept {
    _TS_D(free)(p);
}
TS_CXX_EXPORT void operator delete[](void *p, const std::nothrow_t &) noexcept {
    _TS_D(free)(p);
}
TS_CXX_EXPORT void operator delete(void *p, std::align_val_t) noexcept {
    _TS_D(free)(p);
}
TS_CXX_EXPORT void operator delete[](void *p, std::align_val_t) noexcept {
    _TS_D(free)(p);
}
TS_CXX_EXPORT void operator delete(void *p, size_t, std::align_val_t) noexcept {
    _TS_D(free)(p);
}
TS_CXX_EXPORT void operator delete[](void *p, size_t, std::align_val_t) noexcept {
    _TS_D(free)(p);
}
TS_CXX_EXPORT void operator delete(void *p, std::align_val_t, const std::nothrow_t &) noexcept {
    _TS_D(free)(p);
}
TS_CXX_EXPORT void operator delete[](void *p, std::align_val_t, const std::nothrow_t &) noexcept {
    _TS_D(free)(p);
}
