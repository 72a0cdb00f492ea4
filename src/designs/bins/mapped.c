/* bins: blocks in mappings of their own.
 *
 * Bins 21 .. 28 (2 MiB .. 256 MiB) do not fit a 2 MiB chunk: each such block
 * is one mapping, rounded to its bin, and a freed one is kept in its owner
 * arena's cache for the next request of that bin (up to TSALLOC_BINS_CACHE
 * bytes per arena, default 16 MiB). Larger requests, and big ones with an
 * alignment above 4 KiB, get a mapping of the exact (page-rounded) size that
 * goes back to the OS on free.
 *
 * Layout: the mapping is aligned to 2 MiB (or to the alignment asked for);
 * its header H sits on a 2 MiB boundary and the block starts at H + 4 KiB
 * (H + align when align <= 2 MiB, H + 2 MiB when larger), so a pointer finds
 * its header like a chunk block does.
 *
 * realloc grows a block into a cached block of the new bin when the caller's
 * arena has one (warm pages: a copy beats page faults); else it resizes in
 * place with mremap, and when the address space after the block is taken the
 * kernel moves its pages onto a new range with the same alignment (header
 * included) instead of realloc copying them.
 *
 * Invariants: the cache is owner-only; a thread that frees another arena's
 * mapped block unmaps it at once. A cached block has live == 0, which is how
 * a second free of it is caught; an unmapped or moved-away range is no longer
 * registered. map_size always matches the mapping (one mapping per block).
 */
#include "designs/bins/bins.h"

#include <errno.h>

static void *map_block(ts_bins_arena_t *a, size_t usable, size_t align, unsigned bin, bool *fresh) {
    size_t lead = align > BINS_CHUNK_SIZE ? align - BINS_CHUNK_SIZE : 0;
    size_t offset = align > BINS_CHUNK_SIZE      ? BINS_CHUNK_SIZE
                    : align > BINS_MAPPED_OFFSET ? align
                                                 : BINS_MAPPED_OFFSET;
    size_t map_size = lead + offset + usable;
    char *base = _ts_os_map_aligned(map_size, align > BINS_CHUNK_SIZE ? align : BINS_CHUNK_SIZE);
    if (!base) return NULL;
    if (((uintptr_t)base + map_size - 1) >> BINS_ADDRESS_BITS) {
        _ts_os_unmap(base, map_size);
        errno = ENOMEM;
        return NULL;
    }
    ts_bins_mapped_t *m = (ts_bins_mapped_t *)(base + lead);
    m->region.kind = BINS_KIND_MAPPED;
    atomic_store_explicit(&m->region.arena, a, BINS_RELAXED);
    m->bin = (uint8_t)bin;
    m->live = 1;
    m->map_base = base;
    m->map_size = map_size;
    m->user = (char *)m + offset;
    m->usable = usable;
    m->next = NULL;
    _ts_bins_registry_add((uintptr_t)m);
    atomic_fetch_add_explicit(&_ts_bins_stats.mapped_bytes, map_size, BINS_RELAXED);
    atomic_fetch_add_explicit(&_ts_bins_stats.mapped_count, 1, BINS_RELAXED);
    _ts_bins_note_mapped_total();
    if (fresh) *fresh = true;
    return m->user;
}

static void unmap_block(ts_bins_mapped_t *m) {
    _ts_bins_registry_remove((uintptr_t)m);
    atomic_fetch_sub_explicit(&_ts_bins_stats.mapped_bytes, m->map_size, BINS_RELAXED);
    atomic_fetch_sub_explicit(&_ts_bins_stats.mapped_count, 1, BINS_RELAXED);
    _ts_os_unmap(m->map_base, m->map_size);
}

/* size > 1 MiB, or an alignment a chunk bin cannot give. */
void *_ts_bins_mapped_alloc(ts_bins_arena_t *a, size_t size, size_t align, bool *fresh) {
    if (size > BINS_MAX_REQUEST || align > BINS_MAX_REQUEST) {
        errno = ENOMEM;
        return NULL;
    }
    size_t page = _ts_os_page_size();
    if (align <= BINS_MAPPED_OFFSET && size <= ((size_t)1 << BINS_MAX_BIN)) {
        unsigned bin = ts_bins_bin_of(size);
        ts_bins_mapped_t *m = a->cache[bin];
        if (m) {
            a->cache[bin] = m->next;
            ts_bins_counter_add(&a->cached_bytes, (size_t)0 - m->map_size);
            m->next = NULL;
            m->live = 1;
            if (fresh) *fresh = false;
            return m->user;
        }
        return map_block(a, (size_t)1 << bin, 0, bin, fresh);
    }
    return map_block(a, ts_align_up(size, page), align, 0, fresh);
}

/* The mapped block whose header is at `header`, if p is its block; else abort
 * naming func. A cached (freed) block is a double free when `freeing`. */
ts_bins_mapped_t *_ts_bins_mapped_check(uintptr_t header, const void *p, const char *func,
                                        bool freeing) {
    ts_bins_mapped_t *m = (ts_bins_mapped_t *)header;
    if (m->region.kind != BINS_KIND_MAPPED || m->user != (const char *)p)
        _ts_invalid_pointer(func, p);
    if (!m->live) {
        if (freeing) _ts_double_free(func, p);
        _ts_invalid_pointer(func, p);
    }
    return m;
}

void _ts_bins_mapped_free(ts_bins_mapped_t *m, ts_bins_arena_t *self) {
    m->live = 0;
    if (m->bin && self && atomic_load_explicit(&m->region.arena, BINS_RELAXED) == self) {
        size_t cached = atomic_load_explicit(&self->cached_bytes, BINS_RELAXED);
        if (cached + m->map_size <= _ts_bins_cache_limit) {
            m->next = self->cache[m->bin];
            self->cache[m->bin] = m;
            ts_bins_counter_add(&self->cached_bytes, m->map_size);
            return;
        }
    }
    unmap_block(m);
}

/* Move the block's pages onto a fresh region of `new_size` bytes aligned like
 * the old one; the header moves with them. Reserving the region first is what
 * finds a free range with the right alignment; mremap then replaces the
 * reservation with one mapping of `new_size` (the old pages at its start, zero
 * pages after them), so later in-place resizes, which need a single mapping,
 * still work. NULL when the OS says no (the block is then untouched). */
static ts_bins_mapped_t *move_block(ts_bins_mapped_t *m, size_t new_size) {
    size_t lead = (size_t)((char *)m - m->map_base); /* align - 2 MiB when over-aligned */
    size_t offset = (size_t)(m->user - (char *)m);
    char *base = _ts_os_map_aligned(new_size, lead + BINS_CHUNK_SIZE);
    if (!base) return NULL;
    if (((uintptr_t)base + new_size - 1) >> BINS_ADDRESS_BITS) {
        _ts_os_unmap(base, new_size);
        return NULL;
    }
    /* Unregister first: once moved, the old range may become another region. */
    _ts_bins_registry_remove((uintptr_t)m);
    if (!_ts_os_remap_to(m->map_base, m->map_size, new_size, base)) {
        _ts_bins_registry_add((uintptr_t)m); /* base is given up (os.h) */
        return NULL;
    }
    ts_bins_mapped_t *moved = (ts_bins_mapped_t *)(base + lead);
    moved->map_base = base;
    moved->map_size = new_size;
    moved->user = (char *)moved + offset;
    _ts_bins_registry_add((uintptr_t)moved);
    return moved;
}

/* Does the calling thread's arena cache a block that malloc(size) would take? */
static bool cache_holds(size_t size) {
    ts_bins_arena_t *a = _ts_bins_tls_arena;
    return a && size <= ((size_t)1 << BINS_MAX_BIN) && a->cache[ts_bins_bin_of(size)];
}

/* Resize a mapped block for realloc; the caller keeps size > 1 MiB. Shrinks
 * and grows in place with mremap; a growth that finds the address space after
 * the block taken moves the pages (move_block) rather than copying them.
 * Returns the block's (possibly new) user pointer, or NULL with the block
 * untouched and errno unchanged: then realloc copies. */
void *_ts_bins_mapped_resize(ts_bins_mapped_t *m, size_t size) {
    if (size > BINS_MAX_REQUEST) return NULL;
    /* A cached block of the new size has its pages in memory already: copying
     * into it costs less than faulting in fresh pages, and the old block goes
     * into the cache in turn, so a buffer grown again and again keeps reusing
     * the same warm blocks (the cache bound also bounds the copy). */
    if (size > m->usable && cache_holds(size)) return NULL;
    size_t usable;
    unsigned bin = 0;
    if (m->bin && size <= ((size_t)1 << BINS_MAX_BIN)) {
        bin = ts_bins_bin_of(size);
        usable = (size_t)1 << bin;
    } else {
        usable = ts_align_up(size, _ts_os_page_size());
    }
    size_t old_size = m->map_size;
    size_t new_size = (size_t)(m->user - m->map_base) + usable;
    if (new_size != old_size) {
        int saved = errno;
        ts_bins_mapped_t *at = m;
        if (_ts_os_remap(m->map_base, old_size, new_size, false))
            m->map_size = new_size;
        else
            at = new_size > old_size ? move_block(m, new_size) : NULL;
        errno = saved;
        if (!at) return NULL;
        m = at;
        if (new_size > old_size) {
            atomic_fetch_add_explicit(&_ts_bins_stats.mapped_bytes, new_size - old_size,
                                      BINS_RELAXED);
            _ts_bins_note_mapped_total();
        } else {
            atomic_fetch_sub_explicit(&_ts_bins_stats.mapped_bytes, old_size - new_size,
                                      BINS_RELAXED);
        }
    }
    m->usable = usable;
    m->bin = (uint8_t)bin;
    return m->user;
}

/* Unmap every cached block of the arena (its owner calls). */
bool _ts_bins_cache_flush(ts_bins_arena_t *a) {
    bool any = false;
    for (unsigned bin = 0; bin <= BINS_MAX_BIN; bin++) {
        while (a->cache[bin]) {
            ts_bins_mapped_t *m = a->cache[bin];
            a->cache[bin] = m->next;
            ts_bins_counter_add(&a->cached_bytes, (size_t)0 - m->map_size);
            unmap_block(m);
            any = true;
        }
    }
    return any;
}
