// tsalloc/heap.hpp: tsalloc::heap owns and moves a heap; standard containers
// draw from it through heap_allocator (their blocks are the heap's live
// blocks, and go when they are freed or the heap is destroyed); std::pmr
// containers through heap_resource, whose release() frees everything.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <list>
#include <map>
#include <memory_resource>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "check.h"
#include "tsalloc/heap.hpp"

// Every block of the containers lies in the heap: the visit sees it.
static bool heap_has(tsalloc::heap &h, const void *p) {
    bool found = false;
    h.visit([&](void *block, std::size_t size) {
        if ((const char *)p >= (char *)block && (const char *)p < (char *)block + size)
            found = true;
        return !found;
    });
    return found;
}

static void test_allocator() {
    tsalloc::heap h;
    CHECK(h.get() != nullptr);
    {
        using str = std::basic_string<char, std::char_traits<char>, tsalloc::heap_allocator<char>>;
        tsalloc::heap_allocator<int> a(h);
        std::vector<int, tsalloc::heap_allocator<int>> v(a);
        for (int i = 0; i < 10000; i++) v.push_back(i);
        CHECK(heap_has(h, v.data()));
        std::map<int, str, std::less<int>, tsalloc::heap_allocator<std::pair<const int, str>>> m(a);
        for (int i = 0; i < 1000; i++)
            m.emplace(i, str("a string too long for the small-string buffer", a));
        CHECK(heap_has(h, m.at(500).data()));
        std::list<double, tsalloc::heap_allocator<double>> l(a);
        std::unordered_map<int, int, std::hash<int>, std::equal_to<int>,
                           tsalloc::heap_allocator<std::pair<const int, int>>>
            u(16, std::hash<int>(), std::equal_to<int>(), a);
        for (int i = 0; i < 1000; i++) {
            l.push_back(i);
            u[i] = i;
        }
        CHECK(heap_has(h, &l.back()) && heap_has(h, &u.at(999)));
        ts_heap_stats_t s = h.stats();
        CHECK(s.live_blocks > 3000);
        for (int i = 0; i < 10000; i++) CHECK(v[(size_t)i] == i);
    }
    // The containers freed their blocks (frees into the heap).
    CHECK_EQ(h.stats().live_blocks, 0);
    // Destroyed with live blocks: a tree left standing (its nodes need no
    // destructor), then the heap.
    struct node {
        node *left, *right;
        long v;
    };
    node *root = nullptr;
    for (long i = 0; i < 5000; i++) {
        node *n = h.make<node>(node{nullptr, nullptr, i});
        n->left = root;
        root = n;
    }
    CHECK_EQ(h.stats().live_blocks, 5000);
    // Move: the heap changes owner, not contents.
    tsalloc::heap g(std::move(h));
    CHECK(!h && g.get() != nullptr);
    CHECK(heap_has(g, root));
    tsalloc::heap k;
    k = std::move(g); // k's own heap destroyed, g's taken
    CHECK(heap_has(k, root) && !g);
    k.destroy();
    CHECK(!k);
}

static void test_pmr() {
    tsalloc::heap_resource r;
    CHECK(r.get() != nullptr);
    {
        std::pmr::vector<std::pmr::string> v(&r);
        for (int i = 0; i < 2000; i++) v.emplace_back("a pmr string longer than the SSO buffer");
        ts_heap_stats_t s;
        ts_heap_stats(r.get(), &s);
        CHECK(s.live_blocks >= 2001);
        std::pmr::map<int, int> m(&r);
        for (int i = 0; i < 1000; i++) m[i] = i;
        for (int i = 0; i < 1000; i++) CHECK(m[i] == i);
    }
    ts_heap_stats_t s;
    ts_heap_stats(r.get(), &s);
    CHECK_EQ(s.live_blocks, 0);
    // Allocate without freeing, then release it all at once.
    auto *v = new std::pmr::vector<int>(&r);
    for (int i = 0; i < 100000; i++) v->push_back(i);
    void *aligned = r.allocate(100, 256);
    CHECK((uintptr_t)aligned % 256 == 0);
    ts_heap_stats(r.get(), &s);
    CHECK(s.live_blocks >= 2);
    ts_heap_t *before = r.get();
    r.release();
    CHECK(r.get() != nullptr);
    ts_heap_stats(r.get(), &s);
    CHECK_EQ(s.live_blocks, 0);
    (void)before;
    ::operator delete(v); // the vector object itself came from ::new
    // A resource borrowing a heap, and equality.
    tsalloc::heap h;
    tsalloc::heap_resource b(h.get());
    CHECK(b.is_equal(b) && !b.is_equal(r));
    std::pmr::vector<int> w({1, 2, 3}, &b);
    CHECK(heap_has(h, w.data()));
}

int main() {
    test_allocator();
    test_pmr();
    std::printf("heap_cxx: ok\n");
    return 0;
}
