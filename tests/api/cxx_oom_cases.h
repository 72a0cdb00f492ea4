// The failure paths of operator new, shared by cxx_new_delete (a C++ program:
// the C++ runtime is there from the start) and cxx_plugin.cpp (a plugin that
// a C program dlopens: the runtime arrives after tsalloc). What they assert
// is libstdc++'s behaviour, proved by the [glibc] runs:
//   - the new-handler runs, and retries while it returns; then bad_alloc;
//   - a nothrow form whose handler throws returns nullptr;
//   - a handler that makes memory available and returns gets its allocation;
//   - an alignment that is not a power of two throws bad_alloc (nothrow:
//     nullptr) without calling the handler.
// Every request of kHuge bytes fails at once, without touching memory.
#ifndef TS_TEST_CXX_OOM_CASES_H
#define TS_TEST_CXX_OOM_CASES_H

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <initializer_list>
#include <new>

#include "check.h"

namespace oom_cases {

const size_t kHuge = SIZE_MAX / 2;
// Each recovery request is larger than any block freed before it, so that no
// design can serve it from a cache without asking the OS.
const size_t kBigStep = size_t(128) << 20;
const unsigned kFailAllOs = 7; // TS_OS_FAIL_MMAP | TS_OS_FAIL_SBRK | TS_OS_FAIL_REMAP

int calls;
int returns_before_giving_up;
void (*os_test_fail)(unsigned, long, long);

void count_then_uninstall() {
    calls++;
    if (calls > returns_before_giving_up) std::set_new_handler(nullptr);
}
void count_then_throw() {
    calls++;
    throw std::bad_alloc();
}
void restore_memory_and_return() {
    calls++;
    os_test_fail(0, 0, 0);
}

void install(void (*handler)(), int returns = 0) {
    calls = 0;
    returns_before_giving_up = returns;
    std::set_new_handler(handler);
}

enum Form { PLAIN, ARRAY, ALIGNED, ARRAY_ALIGNED };
const Form kForms[] = {PLAIN, ARRAY, ALIGNED, ARRAY_ALIGNED};
const std::align_val_t kAlign{64};

void *throwing_new(Form f, size_t n, std::align_val_t a = kAlign) {
    switch (f) {
    case PLAIN:
        return ::operator new(n);
    case ARRAY:
        return ::operator new[](n);
    case ALIGNED:
        return ::operator new(n, a);
    default:
        return ::operator new[](n, a);
    }
}
void *nothrow_new(Form f, size_t n, std::align_val_t a = kAlign) {
    switch (f) {
    case PLAIN:
        return ::operator new(n, std::nothrow);
    case ARRAY:
        return ::operator new[](n, std::nothrow);
    case ALIGNED:
        return ::operator new(n, a, std::nothrow);
    default:
        return ::operator new[](n, a, std::nothrow);
    }
}
void release(Form f, void *p) {
    switch (f) {
    case PLAIN:
        ::operator delete(p);
        break;
    case ARRAY:
        ::operator delete[](p);
        break;
    case ALIGNED:
        ::operator delete(p, kAlign);
        break;
    default:
        ::operator delete[](p, kAlign);
        break;
    }
}

bool throws_bad_alloc(Form f, size_t n, std::align_val_t a = kAlign) {
    try {
        void *volatile p = throwing_new(f, n, a);
        (void)p;
    } catch (const std::bad_alloc &) {
        return true;
    }
    return false;
}

// Runs every case; returns normally only when all hold.
void run() {
    for (Form f : kForms) {
        // The handler runs once, removes itself, and new throws.
        install(count_then_uninstall);
        CHECK(throws_bad_alloc(f, kHuge));
        CHECK(calls == 1);
        // A handler that returns is called again until it gives up.
        install(count_then_uninstall, 2);
        CHECK(throws_bad_alloc(f, kHuge));
        CHECK(calls == 3);
        // nothrow: a throwing handler gives nullptr, not std::terminate.
        install(count_then_throw);
        CHECK(nothrow_new(f, kHuge) == nullptr);
        CHECK(calls == 1);
        install(count_then_uninstall, 1);
        CHECK(nothrow_new(f, kHuge) == nullptr);
        CHECK(calls == 2);
        install(nullptr);
        CHECK(nothrow_new(f, kHuge) == nullptr);
    }

    // Alignment not a power of two: bad_alloc, handler untouched.
    for (size_t a : {size_t(24), size_t(48), size_t(3) << 20}) {
        for (Form f : {ALIGNED, ARRAY_ALIGNED}) {
            install(count_then_uninstall);
            CHECK(throws_bad_alloc(f, 100, std::align_val_t(a)));
            CHECK(nothrow_new(f, 100, std::align_val_t(a)) == nullptr);
            CHECK(calls == 0);
        }
    }
    install(nullptr);

    // A handler that makes memory available and returns: the retry succeeds,
    // through the nothrow forms too, with memory this allocator owns (the
    // delete below would abort otherwise). Needs tsalloc's OS failure hook.
    os_test_fail =
        reinterpret_cast<void (*)(unsigned, long, long)>(dlsym(RTLD_DEFAULT, "ts_os_test_fail"));
    if (std::getenv("TSALLOC_EXPECT_DESIGN")) CHECK(os_test_fail != nullptr);
    if (!os_test_fail) return;
    size_t big = 0;
    for (Form f : kForms) {
        for (bool nothrow : {false, true}) {
            big += kBigStep;
            install(restore_memory_and_return);
            os_test_fail(kFailAllOs, 0, -1);
            char *p = static_cast<char *>(nothrow ? nothrow_new(f, big) : throwing_new(f, big));
            os_test_fail(0, 0, 0);
            CHECK(calls == 1); // the first attempt failed
            CHECK(p != nullptr);
            if (f == ALIGNED || f == ARRAY_ALIGNED)
                CHECK(reinterpret_cast<uintptr_t>(p) % static_cast<size_t>(kAlign) == 0);
            p[0] = 1;
            p[big - 1] = 2;
            release(f, p);
        }
    }
    install(nullptr);
}

} // namespace oom_cases

#endif
