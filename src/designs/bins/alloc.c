/* bins: the entry points of the design (design.h), with their fast paths.
 *
 * malloc: bin = smallest power of two >= size (at least 16 B); pop the head
 * span of the calling thread's arena for that bin. 24 instructions (x86-64,
 * gcc -O2), no lock, no atomic RMW; one unlikely exit to the slow path.
 * free: mask the pointer down to its region header, check the registry bit,
 * the header kind, the block's alignment and carved range, and the free
 * mark; then push on the span's list if the calling thread owns the arena
 * (44 instructions, no atomic RMW), or onto the owner's remote stack with
 * one CAS otherwise.
 *
 * Invariants: a free block's second word holds _ts_bins_cookie ^ address and
 * a block handed out never does (malloc clears it), which is how a second
 * free of the same block is caught. No path here holds a lock.
 */
#include "designs/bins/bins.h"

#include <errno.h>
#include <string.h>

TS_DESIGN_DECLARE(bins)

/* ---- allocation ---------------------------------------------------------- */

TS_INLINE void *pop_block(ts_bins_arena_t *a, unsigned bin) {
    ts_bins_page_t *pg = a->bins[bin];
    ts_bins_block_t *b = pg->free_list;
    if (ts_likely(b != NULL)) {
        pg->free_list = b->next;
        pg->used++;
        b->cookie = 0;
        ts_bins_counter_add(&a->live_bytes, (size_t)1 << bin);
        return b;
    }
    return _ts_bins_small_slow(a, bin);
}

/* Any request, in arena a (owned by the caller). align: 0 or a power of two. */
static void *alloc_in(ts_bins_arena_t *a, size_t size, size_t align, bool *fresh) {
    unsigned bin = ts_bins_bin_of(size);
    if (align > TS_MIN_ALIGN && (unsigned)__builtin_ctzl(align) > bin)
        bin = (unsigned)__builtin_ctzl(align);
    if (bin <= BINS_CHUNK_MAX_BIN) {
        if (fresh) *fresh = false;
        return pop_block(a, bin);
    }
    return _ts_bins_mapped_alloc(a, size, align > TS_MIN_ALIGN ? align : 0, fresh);
}

/* Everything but the fast path: size 0, big sizes, first call of a thread,
 * and calls from a thread whose arena was already given back at its exit. */
static TS_NOINLINE void *alloc_slow(size_t size, size_t align, bool *fresh) {
    if (size == 0) size = 1;
    if (size > BINS_MAX_REQUEST || align > BINS_MAX_REQUEST) {
        errno = ENOMEM;
        return NULL;
    }
    bool exited = false;
    ts_bins_arena_t *a = _ts_bins_attach(&exited);
    if (ts_likely(a != NULL)) return alloc_in(a, size, align, fresh);
    if (!exited) {
        errno = ENOMEM;
        return NULL;
    }
    /* An exiting thread: borrow an arena for this one call. */
    a = _ts_bins_arena_acquire();
    if (!a) {
        errno = ENOMEM;
        return NULL;
    }
    _ts_bins_tls_arena = a;
    void *p = alloc_in(a, size, align, fresh);
    _ts_bins_tls_arena = NULL;
    _ts_bins_arena_release(a);
    return p;
}

void *_ts_bins_malloc(size_t size) {
    unsigned bin = ts_bins_bin_of(size);
    ts_bins_arena_t *a = _ts_bins_tls_arena;
    if (ts_likely(bin <= BINS_CHUNK_MAX_BIN && a != NULL)) return pop_block(a, bin);
    return alloc_slow(size, 0, NULL);
}

void *_ts_bins_calloc(size_t total) {
    unsigned bin = ts_bins_bin_of(total);
    ts_bins_arena_t *a = _ts_bins_tls_arena;
    bool fresh = false;
    void *p;
    if (ts_likely(bin <= BINS_CHUNK_MAX_BIN && a != NULL))
        p = pop_block(a, bin);
    else
        p = alloc_slow(total, 0, &fresh);
    if (p && !fresh) memset(p, 0, total);
    return p;
}

void *_ts_bins_memalign(size_t align, size_t size) {
    return alloc_slow(size, align, NULL);
}

/* ---- finding a block ------------------------------------------------------ */

/* What a pointer handed out by this design is. */
typedef struct located {
    ts_bins_chunk_t *chunk; /* NULL for a mapped block */
    ts_bins_page_t *page;
    ts_bins_mapped_t *mapped;
    unsigned bin;
    size_t usable;
} located_t;

/* Validate p (aborting with func's name when it is not ours) and find it. */
static located_t locate(const void *ptr, const char *func) {
    located_t at = {0};
    uintptr_t p = (uintptr_t)ptr;
    uintptr_t h = ts_bins_header_of(p);
    if (!ts_bins_registered(h)) _ts_invalid_pointer(func, ptr);
    ts_bins_chunk_t *c = (ts_bins_chunk_t *)h;
    if (c->region.kind != BINS_KIND_CHUNK) {
        at.mapped = _ts_bins_mapped_check(h, ptr, func, false);
        at.bin = at.mapped->bin;
        at.usable = at.mapped->usable;
        return at;
    }
    ts_bins_page_t *pg = &c->pages[(p >> BINS_PAGE_SHIFT) & (BINS_CHUNK_PAGES - 1)];
    uint32_t size = atomic_load_explicit(&pg->block_size, BINS_RELAXED);
    if (((uint32_t)p & (size - 1)) != 0 ||
        (const char *)ptr >= atomic_load_explicit(&pg->bump, BINS_RELAXED))
        _ts_invalid_pointer(func, ptr);
    at.chunk = c;
    at.page = pg;
    at.bin = (unsigned)__builtin_ctz(size);
    at.usable = size;
    return at;
}

static bool block_is_free(const void *ptr) {
    return ((const ts_bins_block_t *)ptr)->cookie == (_ts_bins_cookie ^ (uintptr_t)ptr);
}

/* ---- free ---------------------------------------------------------------- */

static TS_NOINLINE void free_remote(ts_bins_chunk_t *c, ts_bins_block_t *b) {
    ts_bins_arena_t *owner = atomic_load_explicit(&c->region.arena, BINS_RELAXED);
    ts_bins_block_t *head = atomic_load_explicit(&owner->remote, BINS_RELAXED);
    do {
        b->next = head;
    } while (!atomic_compare_exchange_weak_explicit(&owner->remote, &head, b, memory_order_release,
                                                    BINS_RELAXED));
}

static TS_NOINLINE void free_mapped(uintptr_t header, void *ptr) {
    ts_bins_mapped_t *m = _ts_bins_mapped_check(header, ptr, "free", true);
    _ts_bins_mapped_free(m, _ts_bins_tls_arena);
}

static TS_NOINLINE TS_NORETURN void free_invalid(void *ptr) {
    _ts_invalid_pointer("free", ptr);
}
static TS_NOINLINE TS_NORETURN void free_double(void *ptr) {
    _ts_double_free("free", ptr);
}

void _ts_bins_free(void *ptr) {
    if (ts_unlikely(ptr == NULL)) return;
    uintptr_t p = (uintptr_t)ptr;
    uintptr_t h = ts_bins_header_of(p);
    if (ts_unlikely(!ts_bins_registered(h))) free_invalid(ptr);
    ts_bins_chunk_t *c = (ts_bins_chunk_t *)h;
    if (ts_unlikely(c->region.kind != BINS_KIND_CHUNK)) {
        free_mapped(h, ptr);
        return;
    }
    ts_bins_page_t *pg = &c->pages[(p >> BINS_PAGE_SHIFT) & (BINS_CHUNK_PAGES - 1)];
    /* A page that heads no span has bump == NULL: the second test fails it. */
    uint32_t size = atomic_load_explicit(&pg->block_size, BINS_RELAXED);
    if (ts_unlikely(((uint32_t)p & (size - 1)) != 0 ||
                    (char *)ptr >= atomic_load_explicit(&pg->bump, BINS_RELAXED)))
        free_invalid(ptr);
    ts_bins_block_t *b = (ts_bins_block_t *)ptr;
    uintptr_t mark = _ts_bins_cookie ^ p;
    if (ts_unlikely(b->cookie == mark)) free_double(ptr);
    b->cookie = mark;
    ts_bins_arena_t *a = _ts_bins_tls_arena;
    if (ts_likely(atomic_load_explicit(&c->region.arena, BINS_RELAXED) == a)) {
        b->next = pg->free_list;
        pg->free_list = b;
        ts_bins_counter_add(&a->live_bytes, (size_t)0 - size);
        if (ts_unlikely(ts_bins_page_needs_care(--pg->used))) _ts_bins_page_changed(a, pg);
        return;
    }
    free_remote(c, b);
}

/* ---- realloc and friends ------------------------------------------------- */

void *_ts_bins_realloc(void *ptr, size_t size) {
    located_t at = locate(ptr, "realloc");
    if (at.chunk && block_is_free(ptr)) _ts_invalid_pointer("realloc", ptr);
    void *q;
    if (size <= at.usable) {
        /* Shrinking: stay unless the block would be more than 4x too big. */
        if (at.chunk) {
            if (ts_bins_bin_of(size) + 1 >= at.bin) return ptr;
        } else if (size > at.usable / 2) {
            return ptr;
        } else if (size > ((size_t)1 << BINS_CHUNK_MAX_BIN) &&
                   (q = _ts_bins_mapped_resize(at.mapped, size)) != NULL) {
            return q; /* shrunk in place */
        }
    } else if (at.mapped && (q = _ts_bins_mapped_resize(at.mapped, size)) != NULL) {
        return q; /* grown in place, or its pages moved */
    }
    q = _ts_bins_malloc(size);
    if (!q) return NULL;
    memcpy(q, ptr, size < at.usable ? size : at.usable);
    _ts_bins_free(ptr);
    return q;
}

size_t _ts_bins_usable_size(const void *ptr) {
    return locate(ptr, "malloc_usable_size").usable;
}

/* ---- introspection for the unit tests ------------------------------------ */

unsigned _ts_bins_bin_for_size(size_t size) {
    if (size == 0) size = 1;
    return size > ((size_t)1 << BINS_MAX_BIN) ? 0 : ts_bins_bin_of(size);
}

unsigned _ts_bins_block_bin(const void *p) {
    return locate(p, "bins_block_bin").bin;
}

bool _ts_bins_block_is_mapped(const void *p) {
    return locate(p, "bins_block_is_mapped").mapped != NULL;
}

const void *_ts_bins_block_arena(const void *p) {
    located_t at = locate(p, "bins_block_arena");
    ts_bins_region_t *r = at.chunk ? &at.chunk->region : &at.mapped->region;
    return atomic_load_explicit(&r->arena, BINS_RELAXED);
}
