/* C++ operator new and delete, every standard form, for the design the shim
 * is built with.
 *
 * Compiled without exceptions or RTTI and linked without libstdc++, so that
 * preloading tsalloc into a C program loads no C++ runtime. Only when an
 * allocation fails does operator new need the C++ runtime: the new-handler,
 * throwing std::bad_alloc, and (for a nothrow form whose handler throws) a
 * function able to catch. It reaches them through weak references, resolved
 * at load time, and when those are null (libstdc++ came later, with dlopen,
 * maybe RTLD_LOCAL inside a plugin) by looking the symbols up in the loaded
 * objects, again on every failure until found. With no C++ runtime at all a
 * throwing new aborts with a message.
 *
 * Invariants: the fast paths never look anything up; lookups (dlsym, dlopen
 * with RTLD_NOLOAD, dl_iterate_phdr) run with no allocator lock held, and may
 * allocate. A nothrow form never delegates to an operator of this shim, and a
 * throwing form never delegates at all, so the failure paths cannot recurse.
 */
#include <cstddef>
#include <dlfcn.h>
#include <link.h>
#include <new>

extern "C" {
#include "base/malloc_family.h"
#include "override/shim_vg.h"

#include "designs/family.h"
#if TS_SECURE
/* core/secure.c: blocks of new, new[] and malloc are told apart (secure.md). */
TS_HIDDEN void *_ts_secure_new(size_t size);
TS_HIDDEN void *_ts_secure_new_array(size_t size);
TS_HIDDEN void _ts_secure_tag(void *ptr, bool array);
TS_HIDDEN void _ts_secure_free_sized(void *ptr, size_t size, bool array);
TS_HIDDEN void _ts_secure_delete(void *ptr);
TS_HIDDEN void _ts_secure_delete_array(void *ptr);
#endif
}

#ifdef TS_DESIGN_PROF
#include "core/prof.h"
#endif

typedef void (*ts_new_handler_fn)();
typedef ts_new_handler_fn (*ts_get_new_handler_fn)();
typedef void (*ts_throw_fn)();
extern "C" ts_new_handler_fn ts_weak_get_new_handler() __asm__("_ZSt15get_new_handlerv")
    __attribute__((weak));
extern "C" void ts_weak_throw_bad_alloc() __asm__("_ZSt17__throw_bad_allocv")
    __attribute__((weak, noreturn));

#define TS_CXX_EXPORT __attribute__((visibility("default")))

namespace {

/* The four forms of operator new, each with a throwing and a nothrow
 * operator: array + 2 * aligned in the list of base/malloc_family.h. */
enum new_form { FORM_NEW, FORM_NEW_ARRAY, FORM_NEW_ALIGNED, FORM_NEW_ARRAY_ALIGNED };

/* The mangled name of the nothrow operator of a form. */
const char *nothrow_form_name(new_form form) {
#define TS_NOTHROW_NAME(symbol, op, array, aligned, nothrow, params, args)                         \
    if (nothrow && form == (array) + 2 * (aligned)) return #symbol;
    TS_CXX_NEW(TS_NOTHROW_NAME)
#undef TS_NOTHROW_NAME
    return nullptr;
}

/* Resolved by lookup; once set they stay valid (libstdc++ is never unloaded). */
void *found_get_new_handler;
void *found_throw_bad_alloc;
void *found_nothrow_forms[4];

void *object_base(const void *addr) {
    Dl_info info;
    return addr && dladdr(addr, &info) ? info.dli_fbase : nullptr;
}

/* True when addr lies in the object this shim is part of. */
bool in_this_object(const void *addr) {
    void *base = object_base(addr);
    return base && base == object_base(reinterpret_cast<const void *>(&object_base));
}

/* The index-th loaded object with a name, copied so that the loader's lock
 * is not held while it is opened. */
struct nth_object {
    size_t index, seen;
    bool exists;
    char name[1024];
};

int visit_object(struct dl_phdr_info *info, size_t, void *arg) {
    nth_object *q = static_cast<nth_object *>(arg);
    const char *name = info->dlpi_name;
    if (!name || !name[0] || q->seen++ != q->index) return 0;
    size_t len = 0;
    while (name[len] && len < sizeof q->name) len++;
    if (len == sizeof q->name) len = 0; /* too long: skipped */
    for (size_t i = 0; i < len; i++) q->name[i] = name[i];
    q->name[len] = '\0';
    q->exists = true;
    return 1;
}

/* name in the global scope, else in any loaded object with its dependencies:
 * a C++ runtime loaded RTLD_LOCAL by a plugin is only in the plugin's scope. */
void *find_loaded_symbol(const char *name) {
    void *sym = dlsym(RTLD_DEFAULT, name);
    if (sym) return sym;
    nth_object q;
    for (q.index = 0;; q.index++) {
        q.seen = 0;
        q.exists = false;
        dl_iterate_phdr(visit_object, &q);
        if (!q.exists) return nullptr;
        if (!q.name[0]) continue;
        void *handle = dlopen(q.name, RTLD_LAZY | RTLD_NOLOAD);
        if (!handle) continue;
        sym = dlsym(handle, name);
        dlclose(handle);
        if (sym) return sym;
    }
}

/* A C++ runtime function: its weak reference when bound, else looked up and
 * kept in *cache once found. */
void *runtime_function(void *weak, void **cache, const char *name) {
    if (weak) return weak;
    void *fn = __atomic_load_n(cache, __ATOMIC_ACQUIRE);
    if (!fn) {
        fn = find_loaded_symbol(name);
        if (fn) __atomic_store_n(cache, fn, __ATOMIC_RELEASE);
    }
    return fn;
}

ts_get_new_handler_fn runtime_get_new_handler() {
    return reinterpret_cast<ts_get_new_handler_fn>(
        runtime_function(reinterpret_cast<void *>(ts_weak_get_new_handler), &found_get_new_handler,
                         "_ZSt15get_new_handlerv"));
}

ts_new_handler_fn current_new_handler() {
    ts_get_new_handler_fn get = runtime_get_new_handler();
    return get ? get() : nullptr;
}

ts_throw_fn runtime_throw_bad_alloc() {
    return reinterpret_cast<ts_throw_fn>(
        runtime_function(reinterpret_cast<void *>(ts_weak_throw_bad_alloc), &found_throw_bad_alloc,
                         "_ZSt17__throw_bad_allocv"));
}

/* True when a call to ::operator new made by the C++ runtime ends in this
 * allocator: the global operator new is ours, or at least the global malloc
 * it falls back on is. Not so when tsalloc itself was loaded RTLD_LOCAL. */
bool runtime_new_reaches_us() {
    void *global = dlopen(nullptr, RTLD_LAZY);
    if (!global) return false;
    bool ours = in_this_object(dlsym(global, "_Znwm")) || in_this_object(dlsym(global, "malloc"));
    dlclose(global);
    return ours;
}

/* The C++ runtime's own nothrow operator of this form, which calls the
 * throwing one inside try/catch: the only way for this shim, built without
 * exceptions, to turn a throwing new-handler into nullptr. Null when there is
 * none to use. */
void *runtime_nothrow_form(new_form form) {
    void *fn = __atomic_load_n(&found_nothrow_forms[form], __ATOMIC_ACQUIRE);
    if (fn) return fn;
    Dl_info runtime;
    ts_get_new_handler_fn get = runtime_get_new_handler();
    if (!get || !dladdr(reinterpret_cast<void *>(get), &runtime) || !runtime.dli_fname)
        return nullptr;
    void *handle = dlopen(runtime.dli_fname, RTLD_LAZY | RTLD_NOLOAD);
    if (!handle) return nullptr;
    fn = dlsym(handle, nothrow_form_name(form));
    dlclose(handle);
    if (!fn || in_this_object(fn) || !runtime_new_reaches_us()) return nullptr;
    __atomic_store_n(&found_nothrow_forms[form], fn, __ATOMIC_RELEASE);
    return fn;
}

/* The standard's loop: retry while a new-handler exists; when none, throw
 * (or, for the nothrow forms, return NULL). A nothrow form with a handler
 * hands the whole loop to the runtime's nothrow operator, which catches what
 * the handler throws; without one it runs the handler itself. */
__attribute__((noinline, cold)) void *new_slow(size_t size, size_t align, new_form form,
                                               bool nothrow) {
    for (;;) {
        void *p = ts_family_memalign(align, size);
        if (p) return p;
        ts_new_handler_fn handler = current_new_handler();
        if (!handler) {
            if (nothrow) return nullptr;
            if (ts_throw_fn throw_bad_alloc = runtime_throw_bad_alloc()) throw_bad_alloc();
            _ts_fatal("operator new(%zu): out of memory", size);
        }
        if (nothrow) {
            if (void *fn = runtime_nothrow_form(form)) {
                const std::nothrow_t tag{};
                if (form == FORM_NEW || form == FORM_NEW_ARRAY)
                    return reinterpret_cast<void *(*)(size_t, const std::nothrow_t &)>(fn)(size,
                                                                                           tag);
                return reinterpret_cast<void *(*)(size_t, std::align_val_t,
                                                  const std::nothrow_t &)>(fn)(
                    size, std::align_val_t(align), tag);
            }
        }
        handler();
    }
}

/* libstdc++ throws std::bad_alloc for an alignment that is not a power of
 * two, without calling the new-handler. */
__attribute__((noinline, cold)) void *bad_alignment(size_t size, size_t align, bool nothrow) {
    if (nothrow) return nullptr;
    if (ts_throw_fn throw_bad_alloc = runtime_throw_bad_alloc()) throw_bad_alloc();
    _ts_fatal("operator new(%zu, align %zu): alignment is not a power of two", size, align);
}

/* The size and alignment an operator new was called with; `aligned` for the
 * forms with an alignment argument (whatever its value). */
struct new_request {
    size_t size, align;
    bool aligned;
};
inline new_request request_of(size_t size) {
    return {size, 0, false};
}
inline new_request request_of(size_t size, const std::nothrow_t &) {
    return {size, 0, false};
}
inline new_request request_of(size_t size, std::align_val_t align) {
    return {size, static_cast<size_t>(align), true};
}
inline new_request request_of(size_t size, std::align_val_t align, const std::nothrow_t &) {
    return {size, static_cast<size_t>(align), true};
}

#ifdef TS_DESIGN_PROF
/* Operator new while the heap profiler runs (core/prof.h). The profiler's
 * entry reads its caller's frame pointer, so this keeps one, and operator
 * new reaches it by a tail call, its %rbp untouched: the walk then meets
 * this frame's return address (the caller of new, dropped as a repeat of
 * the innermost frame) and goes on into the program's frames. */
__attribute__((noinline)) void *new_profiled(size_t size, size_t align, new_form form, bool nothrow,
                                             void *ra) {
    void *volatile frame = __builtin_frame_address(0);
    (void)frame;
    bool aligned = form == FORM_NEW_ALIGNED || form == FORM_NEW_ARRAY_ALIGNED;
    if (aligned && !ts_is_pow2(align)) return bad_alignment(size, align, nothrow);
    void *p = aligned ? _ts_prof_memalign(align, size, ra) : _ts_prof_malloc(size, ra);
    return __builtin_expect(p != nullptr, 1) ? p
                                             : new_slow(size, aligned ? align : 0, form, nothrow);
}
#endif

/* Every operator new: the design's malloc (or memalign for the aligned
 * forms) and, when it fails, the slow path. Inlined into each operator with
 * its form constant, so each keeps only its own path. */
__attribute__((always_inline)) inline void *new_block(new_request r, new_form form, bool nothrow) {
#ifdef TS_DESIGN_PROF
    if (TS_PROF_ON())
        return new_profiled(r.size, r.align, form, nothrow, __builtin_return_address(0));
#endif
    if (!r.aligned) {
#if TS_SECURE /* a block sealed as new's or new[]'s */
        bool array = form == FORM_NEW_ARRAY;
        void *p = array ? _ts_secure_new_array(r.size) : _ts_secure_new(r.size);
        if (__builtin_expect(p != nullptr, 1)) return p;
        p = new_slow(r.size, 0, form, nothrow);
        if (p) _ts_secure_tag(p, array);
        return p;
#else
        void *p = TS_FAMILY_FN(malloc)(r.size);
        return __builtin_expect(p != nullptr, 1) ? p : new_slow(r.size, 0, form, nothrow);
#endif
    }
    if (__builtin_expect(!ts_is_pow2(r.align), 0)) return bad_alignment(r.size, r.align, nothrow);
    void *p = ts_family_memalign(r.align, r.size);
    return __builtin_expect(p != nullptr, 1) ? p : new_slow(r.size, r.align, form, nothrow);
}

/* Every operator delete: the design's free; the size and alignment a form
 * passes are not needed. */
template <class... Unused> inline void delete_block(void *ptr, const Unused &...) {
    TS_FAMILY_FN(free)(ptr);
}
#if TS_SECURE
/* The hardened build checks the size a sized delete passes, and that
 * delete[] gets the blocks of new[] and delete those of new (secure.c). */
template <bool array, class... Unused> inline void secure_delete(void *ptr, const Unused &...) {
    if (array)
        _ts_secure_delete_array(ptr);
    else
        _ts_secure_delete(ptr);
}
template <bool array> inline void secure_delete(void *ptr, size_t size) {
    _ts_secure_free_sized(ptr, size, array);
}
template <bool array> inline void secure_delete(void *ptr, size_t size, TS_CXX_ALIGN_T) {
    _ts_secure_free_sized(ptr, size, array);
}
#endif

/* What operator new returns: in the hardened build, the blocks of the
 * aligned forms (memalign's) are marked as new's or new[]'s; new_block
 * made the others so. */
inline void *new_made(void *p, new_form form) {
#if TS_SECURE
    if ((form == FORM_NEW_ALIGNED || form == FORM_NEW_ARRAY_ALIGNED) && p)
        _ts_secure_tag(p, form == FORM_NEW_ARRAY_ALIGNED);
#else
    (void)form;
#endif
    return p;
}

} // namespace

/* Every form of operator new and delete, one definition per entry of the
 * lists in base/malloc_family.h; the entry of `operator new(size_t,
 * std::align_val_t)`, for one, expands to
 *   void *operator new(size_t size, std::align_val_t align) noexcept(false) {
 *       return new_block(request_of(size, align), new_form(0 + 2 * 1), false);
 *   }
 */
#define TS_DEFINE_NEW(symbol, op, array, aligned, nothrow, params, args)                           \
    TS_CXX_EXPORT void *operator op params noexcept(nothrow != 0) {                                \
        return new_made(                                                                           \
            new_block(request_of args, new_form((array) + 2 * (aligned)), nothrow != 0),           \
            new_form((array) + 2 * (aligned)));                                                    \
    }
#if TS_SECURE /* _ZdaPv...: delete[]; _ZdlPv...: delete */
#define TS_DEFINE_DELETE(symbol, op, params, args)                                                 \
    TS_CXX_EXPORT void operator op params noexcept {                                               \
        secure_delete<#symbol[3] == 'a'> args;                                                     \
    }
#else
#define TS_DEFINE_DELETE(symbol, op, params, args)                                                 \
    TS_CXX_EXPORT void operator op params noexcept {                                               \
        delete_block args;                                                                         \
    }
#endif
TS_CXX_NEW(TS_DEFINE_NEW)
TS_CXX_DELETE(TS_DEFINE_DELETE)
