/* C++ for tsalloc's first-class heaps (tsalloc.h, docs/heaps.md); link with
 * -ltsalloc (the fast allocator: the other designs have no heaps).
 *
 * tsalloc::heap              owns a ts_heap_t (move-only); its destructor
 *                            destroys the heap and every block in it.
 * tsalloc::heap_allocator<T> a standard allocator drawing from a heap.
 * tsalloc::heap_resource     a std::pmr::memory_resource drawing from a heap
 *                            (C++17).
 *
 * Blocks are ordinary blocks: deallocation is free(), from any thread. A
 * container must be destroyed before its heap, or never: destroying the
 * heap frees the container's memory without running element destructors,
 * which is the point for trees of trivially destructible nodes.
 */
#ifndef TSALLOC_HEAP_HPP
#define TSALLOC_HEAP_HPP

#include <cstddef>
#include <limits>
#include <new>
#include <type_traits>

#include "tsalloc.h"

#if __cplusplus >= 201703L && defined(__has_include)
#if __has_include(<memory_resource>)
#include <memory_resource>
#define TSALLOC_HAS_PMR 1
#endif
#endif

namespace tsalloc {

/* Owns one heap. A moved-from heap owns none (get() is nullptr). */
class heap {
  public:
    /* A new heap; std::bad_alloc when none can be made. */
    heap() : h_(ts_heap_new()) {
        if (!h_) throw std::bad_alloc();
    }
    /* Take over a heap from ts_heap_new. */
    explicit heap(ts_heap_t *h) noexcept : h_(h) {}
    ~heap() { destroy(); }
    heap(const heap &) = delete;
    heap &operator=(const heap &) = delete;
    heap(heap &&o) noexcept : h_(o.h_) { o.h_ = nullptr; }
    heap &operator=(heap &&o) noexcept {
        if (this != &o) {
            destroy();
            h_ = o.h_;
            o.h_ = nullptr;
        }
        return *this;
    }

    ts_heap_t *get() const noexcept { return h_; }
    explicit operator bool() const noexcept { return h_ != nullptr; }

    void *malloc(std::size_t size) noexcept { return ts_heap_malloc(h_, size); }
    void *calloc(std::size_t count, std::size_t size) noexcept {
        return ts_heap_calloc(h_, count, size);
    }
    void *realloc(void *p, std::size_t size) noexcept { return ts_heap_realloc(h_, p, size); }
    void *aligned_alloc(std::size_t align, std::size_t size) noexcept {
        return ts_heap_aligned_alloc(h_, align, size);
    }
    char *strdup(const char *s) noexcept { return ts_heap_strdup(h_, s); }

    /* Construct a T in the heap (std::bad_alloc when out of memory). */
    template <class T, class... Args> T *make(Args &&...args) {
        void *p = alignof(T) > 16 ? ts_heap_aligned_alloc(h_, alignof(T), sizeof(T))
                                  : ts_heap_malloc(h_, sizeof(T));
        if (!p) throw std::bad_alloc();
        return ::new (p) T(static_cast<Args &&>(args)...);
    }

    /* Free every block at once (ts_heap_destroy); owns no heap after. */
    void destroy() noexcept {
        if (h_) ts_heap_destroy(h_);
        h_ = nullptr;
    }
    /* Delete the heap, its blocks staying valid in the calling thread's
     * default heap (ts_heap_delete); owns no heap after. */
    void delete_keep_blocks() noexcept {
        if (h_) ts_heap_delete(h_);
        h_ = nullptr;
    }
    /* Give up ownership without touching the heap. */
    ts_heap_t *release() noexcept {
        ts_heap_t *h = h_;
        h_ = nullptr;
        return h;
    }

    ts_heap_stats_t stats() const noexcept {
        ts_heap_stats_t s;
        ts_heap_stats(h_, &s);
        return s;
    }
    /* f(void *block, std::size_t usable_size) -> bool (false stops) for
     * each live block; the rules of ts_heap_visit apply. */
    template <class F> bool visit(F &&f) {
        return ts_heap_visit(
            h_,
            [](void *arg, void *block, std::size_t size) -> bool {
                return (*static_cast<typename std::remove_reference<F>::type *>(arg))(block, size);
            },
            &f);
    }

  private:
    ts_heap_t *h_;
};

/* A standard allocator drawing from a heap it does not own: containers move
 * and swap their heap with their contents, and two allocators are equal when
 * they draw from the same heap. */
template <class T> class heap_allocator {
  public:
    using value_type = T;
    using propagate_on_container_copy_assignment = std::true_type;
    using propagate_on_container_move_assignment = std::true_type;
    using propagate_on_container_swap = std::true_type;
    using is_always_equal = std::false_type;

    heap_allocator(heap &h) noexcept : h_(h.get()) {}
    explicit heap_allocator(ts_heap_t *h) noexcept : h_(h) {}
    template <class U> heap_allocator(const heap_allocator<U> &o) noexcept : h_(o.get()) {}

    T *allocate(std::size_t n) {
        if (n > std::numeric_limits<std::size_t>::max() / sizeof(T))
            throw std::bad_array_new_length();
        void *p = alignof(T) > 16 ? ts_heap_aligned_alloc(h_, alignof(T), n * sizeof(T))
                                  : ts_heap_malloc(h_, n * sizeof(T));
        if (!p) throw std::bad_alloc();
        return static_cast<T *>(p);
    }
    void deallocate(T *p, std::size_t) noexcept { ts_free(p); }

    ts_heap_t *get() const noexcept { return h_; }
    template <class U> bool operator==(const heap_allocator<U> &o) const noexcept {
        return h_ == o.get();
    }
    template <class U> bool operator!=(const heap_allocator<U> &o) const noexcept {
        return h_ != o.get();
    }

  private:
    ts_heap_t *h_;
};

#ifdef TSALLOC_HAS_PMR
/* A memory resource drawing from a heap: its own (made here, destroyed with
 * the resource; release() destroys every block and starts a new heap), or
 * one it borrows. Equal only to itself. */
class heap_resource : public std::pmr::memory_resource {
  public:
    heap_resource() : own_(), h_(own_.get()) {}
    explicit heap_resource(ts_heap_t *h) noexcept : own_(nullptr), h_(h) {}
    heap_resource(const heap_resource &) = delete;
    heap_resource &operator=(const heap_resource &) = delete;

    ts_heap_t *get() const noexcept { return h_; }
    /* Free everything allocated so far, at once (an owned heap only). */
    void release() {
        if (!own_) return;
        own_ = heap();
        h_ = own_.get();
    }

  private:
    void *do_allocate(std::size_t bytes, std::size_t align) override {
        void *p = align > 16 ? ts_heap_aligned_alloc(h_, align, bytes) : ts_heap_malloc(h_, bytes);
        if (!p) throw std::bad_alloc();
        return p;
    }
    void do_deallocate(void *p, std::size_t, std::size_t) override { ts_free(p); }
    bool do_is_equal(const std::pmr::memory_resource &o) const noexcept override {
        return this == &o;
    }

    heap own_;
    ts_heap_t *h_;
};
#endif

} // namespace tsalloc

#endif
