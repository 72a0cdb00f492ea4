// Every form of operator new and delete, under LD_PRELOAD of each design (and
// under glibc alone as a baseline): alignment, nothrow, the new-handler loop,
// std::bad_alloc on failure, and that the memory is usable. The failure
// paths in depth (throwing handlers under nothrow, handlers that recover,
// alignments that are not powers of two) are in cxx_oom_cases.h.
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <malloc.h>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include "cxx_oom_cases.h"

static bool aligned(void *p, size_t a) {
    return (reinterpret_cast<uintptr_t>(p) & (a - 1)) == 0;
}

static int handler_calls;
static void counting_handler() {
    handler_calls++;
    std::set_new_handler(nullptr); // next failure throws
}

static const size_t kHuge = SIZE_MAX / 2; // no allocator can satisfy it

int main() {
    // Plain, array, sized and nothrow forms.
    for (size_t n : {size_t(0), size_t(1), size_t(24), size_t(1000), size_t(1) << 20}) {
        void *p = ::operator new(n);
        CHECK(p && aligned(p, 16));
        std::memset(p, 0x11, n);
        ::operator delete(p);
        p = ::operator new[](n);
        CHECK(p);
        std::memset(p, 0x22, n);
        ::operator delete[](p);
        p = ::operator new(n);
        ::operator delete(p, n);
        p = ::operator new[](n);
        ::operator delete[](p, n);
        p = ::operator new(n, std::nothrow);
        CHECK(p);
        ::operator delete(p, std::nothrow);
        p = ::operator new[](n, std::nothrow);
        CHECK(p);
        ::operator delete[](p, std::nothrow);
    }
    void *zero_a = ::operator new(0), *zero_b = ::operator new(0);
    CHECK(zero_a != zero_b);
    ::operator delete(zero_a);
    ::operator delete(zero_b);

    // Aligned forms, every power of two from 16 to 64 KiB.
    for (size_t a = 16; a <= 65536; a *= 2) {
        std::align_val_t al{a};
        for (size_t n : {size_t(1), a - 1, a, 3 * a + 5}) {
            void *p = ::operator new(n, al);
            CHECK(p && aligned(p, a));
            std::memset(p, 0x33, n);
            ::operator delete(p, al);
            p = ::operator new[](n, al);
            CHECK(p && aligned(p, a));
            ::operator delete[](p, al);
            p = ::operator new(n, al);
            ::operator delete(p, n, al);
            p = ::operator new[](n, al);
            ::operator delete[](p, n, al);
            p = ::operator new(n, al, std::nothrow);
            CHECK(p && aligned(p, a));
            ::operator delete(p, al, std::nothrow);
            p = ::operator new[](n, al, std::nothrow);
            CHECK(p && aligned(p, a));
            ::operator delete[](p, al, std::nothrow);
        }
    }
    struct alignas(128) Wide {
        char bytes[300];
    };
    Wide *w = new Wide[7];
    CHECK(aligned(w, 128));
    delete[] w;

    // Failure: nothrow returns nullptr; the throwing forms throw bad_alloc.
    CHECK(::operator new(kHuge, std::nothrow) == nullptr);
    CHECK(::operator new[](kHuge, std::nothrow) == nullptr);
    CHECK(::operator new (kHuge, std::align_val_t{64}, std::nothrow) == nullptr);
    bool thrown = false;
    try {
        void *volatile p = ::operator new(kHuge);
        (void)p;
    } catch (const std::bad_alloc &) {
        thrown = true;
    }
    CHECK(thrown);
    thrown = false;
    try {
        void *volatile p = ::operator new[](kHuge, std::align_val_t{256});
        (void)p;
    } catch (const std::bad_alloc &) {
        thrown = true;
    }
    CHECK(thrown);

    // The new-handler runs before the throw.
    std::set_new_handler(counting_handler);
    thrown = false;
    try {
        void *volatile p = ::operator new(kHuge);
        (void)p;
    } catch (const std::bad_alloc &) {
        thrown = true;
    }
    CHECK(thrown && handler_calls == 1);
    oom_cases::run();

    // Ordinary C++ use across threads: containers and strings.
    std::vector<std::thread> threads;
    std::vector<size_t> sums(4);
    for (int t = 0; t < 4; t++)
        threads.emplace_back([t, &sums] {
            std::vector<std::string> v;
            for (int i = 0; i < 20000; i++)
                v.push_back(std::string(size_t(i % 200), char('a' + t)));
            size_t s = 0;
            for (auto &x : v) s += x.size();
            sums[t] = s;
        });
    for (auto &th : threads) th.join();
    size_t expect = 0;
    for (int i = 0; i < 20000; i++) expect += size_t(i % 200);
    for (size_t s : sums) CHECK(s == expect);
    std::printf("cxx_new_delete: ok\n");
    return 0;
}
