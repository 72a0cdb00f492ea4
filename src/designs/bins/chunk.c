/* bins: chunks, spans and the owner's slow path for chunk blocks.
 *
 * A chunk is 2 MiB aligned to 2 MiB: page 0 holds the header (the page
 * descriptors), pages 1 .. 31 are handed to bins as spans. A span is carved
 * lazily (at most one OS page of blocks at a time) so an idle bin costs one
 * OS page of memory. Each bin of an arena keeps a list of its spans that have
 * something to hand out; the head is the span the fast path pops from.
 *
 * Invariants (all data here is owned by the arena's owner thread):
 * - A span on its bin list has a free block or uncarved room, except the head
 *   right after it ran out; a span off the list is marked BINS_PAGE_FULL, and
 *   goes back on (second place) when one of its blocks comes back.
 * - `used` counts the blocks handed out and not yet back on the span's list,
 *   including those waiting on the arena's remote stack, so a span with
 *   used == 0 has no live block and may be given back to its chunk.
 * - A span other than its bin's head is given back to its chunk as soon as
 *   it is empty. An arena keeps at most TSALLOC_BINS_KEEP_CHUNKS (default 4)
 *   chunks with every page free; more go back to the OS at once (all of them
 *   at trim or at thread exit).
 */
#include "designs/bins/bins.h"

#include <errno.h>

ts_bins_page_t _ts_bins_empty_page; /* no free list: the fast path always misses */

/* Chunks a multi-page span looks at before it maps a new one (keeps it O(1)). */
#define SPAN_SEARCH_CHUNKS 4
/* Carving touches at most this much memory at a time (one OS page). */
#define CARVE_BYTES 4096

/* ---- lists --------------------------------------------------------------- */

static void bin_push_front(ts_bins_arena_t *a, ts_bins_page_t *pg, unsigned bin) {
    ts_bins_page_t *head = a->bins[bin];
    pg->prev = NULL;
    pg->next = head == &_ts_bins_empty_page ? NULL : head;
    if (pg->next) pg->next->prev = pg;
    a->bins[bin] = pg;
}

/* Behind the head, so the head keeps serving until it runs out. */
static void bin_insert_second(ts_bins_arena_t *a, ts_bins_page_t *pg, unsigned bin) {
    ts_bins_page_t *head = a->bins[bin];
    if (head == &_ts_bins_empty_page) {
        pg->prev = pg->next = NULL;
        a->bins[bin] = pg;
        return;
    }
    pg->prev = head;
    pg->next = head->next;
    if (pg->next) pg->next->prev = pg;
    head->next = pg;
}

static void bin_remove(ts_bins_arena_t *a, ts_bins_page_t *pg, unsigned bin) {
    if (pg->prev)
        pg->prev->next = pg->next;
    else
        a->bins[bin] = pg->next ? pg->next : &_ts_bins_empty_page;
    if (pg->next) pg->next->prev = pg->prev;
    pg->prev = pg->next = NULL;
}

static void avail_push(ts_bins_arena_t *a, ts_bins_chunk_t *c) {
    c->prev = NULL;
    c->next = a->avail;
    if (c->next) c->next->prev = c;
    a->avail = c;
}

static void avail_remove(ts_bins_arena_t *a, ts_bins_chunk_t *c) {
    if (c->prev)
        c->prev->next = c->next;
    else
        a->avail = c->next;
    if (c->next) c->next->prev = c->prev;
    c->prev = c->next = NULL;
}

/* ---- chunks -------------------------------------------------------------- */

static ts_bins_chunk_t *chunk_new(ts_bins_arena_t *a) {
    char *mem = _ts_os_map_aligned(BINS_CHUNK_SIZE, BINS_CHUNK_SIZE);
    if (!mem) return NULL;
    if ((uintptr_t)mem >> BINS_ADDRESS_BITS) { /* beyond what the registry covers */
        _ts_os_unmap(mem, BINS_CHUNK_SIZE);
        errno = ENOMEM;
        return NULL;
    }
    _ts_os_name(mem, BINS_CHUNK_SIZE, "tsalloc-bins");
    ts_bins_chunk_t *c = (ts_bins_chunk_t *)mem; /* zero-filled */
    c->region.kind = BINS_KIND_CHUNK;
    atomic_store_explicit(&c->region.arena, a, BINS_RELAXED);
    c->free_pages = BINS_ALL_PAGES_FREE;
    for (unsigned i = 0; i < BINS_CHUNK_PAGES; i++) c->pages[i].index = (uint8_t)i;
    _ts_bins_registry_add((uintptr_t)c);
    atomic_fetch_add_explicit(&_ts_bins_stats.chunk_bytes, BINS_CHUNK_SIZE, BINS_RELAXED);
    _ts_bins_note_mapped_total();
    avail_push(a, c);
    a->empty_chunks++;
    ts_bins_counter_add(&a->empty_bytes, BINS_CHUNK_SIZE);
    return c;
}

/* Unmap an empty chunk that is on the arena's list (and counted as empty). */
static void chunk_release(ts_bins_arena_t *a, ts_bins_chunk_t *c) {
    avail_remove(a, c);
    a->empty_chunks--;
    ts_bins_counter_add(&a->empty_bytes, (size_t)0 - BINS_CHUNK_SIZE);
    _ts_bins_registry_remove((uintptr_t)c);
    atomic_fetch_sub_explicit(&_ts_bins_stats.chunk_bytes, BINS_CHUNK_SIZE, BINS_RELAXED);
    _ts_os_unmap(c, BINS_CHUNK_SIZE);
}

/* First run of `n` free pages aligned to `n` (n a power of two <= 16), or -1. */
static int find_run(uint32_t free_pages, unsigned n) {
    static const uint32_t aligned_starts[17] = {[1] = 0xFFFFFFFFu,
                                                [2] = 0x55555555u,
                                                [4] = 0x11111111u,
                                                [8] = 0x01010101u,
                                                [16] = 0x00010001u};
    uint32_t m = free_pages;
    for (unsigned s = 1; s < n; s <<= 1) m &= m >> s;
    m &= aligned_starts[n];
    return m ? __builtin_ctz(m) : -1;
}

/* ---- spans --------------------------------------------------------------- */

static ts_bins_page_t *span_new(ts_bins_arena_t *a, unsigned bin) {
    unsigned n = ts_bins_span_pages(bin);
    ts_bins_chunk_t *c = a->avail;
    int index = -1;
    for (int tries = 0; c && tries < SPAN_SEARCH_CHUNKS; c = c->next, tries++)
        if ((index = find_run(c->free_pages, n)) >= 0) break;
    if (index < 0) {
        c = chunk_new(a);
        if (!c) return NULL;
        index = find_run(c->free_pages, n);
    }
    if (c->free_pages == BINS_ALL_PAGES_FREE) {
        a->empty_chunks--;
        ts_bins_counter_add(&a->empty_bytes, (size_t)0 - BINS_CHUNK_SIZE);
    }
    c->free_pages &= ~(((1u << n) - 1) << index);
    if (!c->free_pages) avail_remove(a, c);
    ts_bins_page_t *pg = &c->pages[index];
    pg->free_list = NULL;
    pg->used = 0;
    pg->bin = (uint8_t)bin;
    atomic_store_explicit(&pg->block_size, (uint32_t)1 << bin, BINS_RELAXED);
    atomic_store_explicit(&pg->bump, ts_bins_page_start(pg), BINS_RELAXED);
    bin_push_front(a, pg, bin);
    return pg;
}

/* Give an empty span's pages back to its chunk. */
static void span_retire(ts_bins_arena_t *a, ts_bins_page_t *pg) {
    unsigned bin = pg->bin;
    if (!(pg->used & BINS_PAGE_FULL)) bin_remove(a, pg, bin);
    ts_bins_chunk_t *c = ts_bins_chunk_of_page(pg);
    uint32_t bits = ((1u << ts_bins_span_pages(bin)) - 1) << pg->index;
    /* A free of a pointer into this page now fails the bump check. */
    atomic_store_explicit(&pg->bump, NULL, BINS_RELAXED);
    atomic_store_explicit(&pg->block_size, 0, BINS_RELAXED);
    pg->bin = 0;
    pg->free_list = NULL;
    pg->used = 0;
    if (!c->free_pages) avail_push(a, c);
    c->free_pages |= bits;
    c->dirty_pages |= bits;
    if (c->free_pages == BINS_ALL_PAGES_FREE) {
        a->empty_chunks++;
        ts_bins_counter_add(&a->empty_bytes, BINS_CHUNK_SIZE);
        if (a->empty_chunks > _ts_bins_keep_chunks) chunk_release(a, c);
    }
}

/* Hand out the span's next uncarved block; put up to one OS page more of
 * blocks on its free list. The span's free list is empty. */
static void *carve(ts_bins_page_t *pg, unsigned bin) {
    char *start = atomic_load_explicit(&pg->bump, BINS_RELAXED);
    char *end = ts_bins_page_start(pg) + ts_bins_span_bytes(bin);
    size_t size = (size_t)1 << bin;
    size_t count = (size_t)(end - start) >> bin;
    size_t batch = CARVE_BYTES >> bin;
    if (batch == 0) batch = 1;
    if (batch > count) batch = count;
    ts_bins_block_t *list = NULL;
    for (size_t i = batch; i-- > 1;) {
        ts_bins_block_t *b = (ts_bins_block_t *)(start + i * size);
        b->next = list;
        b->cookie = _ts_bins_cookie ^ (uintptr_t)b;
        list = b;
    }
    pg->free_list = list;
    atomic_store_explicit(&pg->bump, start + batch * size, BINS_RELAXED);
    ts_bins_block_t *first = (ts_bins_block_t *)start;
    first->cookie = 0;
    pg->used++;
    return first;
}

static bool span_has_room(const ts_bins_page_t *pg, unsigned bin) {
    return atomic_load_explicit(&pg->bump, BINS_RELAXED) <
           ts_bins_page_start(pg) + ts_bins_span_bytes(bin);
}

/* ---- the owner's slow paths ---------------------------------------------- */

/* The fast path found the head span of `bin` without a free block. */
void *_ts_bins_small_slow(ts_bins_arena_t *a, unsigned bin) {
    if (atomic_load_explicit(&a->remote, BINS_RELAXED)) _ts_bins_drain(a);
    void *p = NULL;
    for (;;) {
        ts_bins_page_t *pg = a->bins[bin];
        if (pg == &_ts_bins_empty_page) break;
        ts_bins_block_t *b = pg->free_list;
        if (b) {
            pg->free_list = b->next;
            pg->used++;
            b->cookie = 0;
            p = b;
            break;
        }
        if (span_has_room(pg, bin)) {
            p = carve(pg, bin);
            break;
        }
        bin_remove(a, pg, bin); /* ran out: off the list until a block comes back */
        pg->used |= BINS_PAGE_FULL;
    }
    if (!p) {
        ts_bins_page_t *pg = span_new(a, bin);
        if (!pg) {
            errno = ENOMEM;
            return NULL;
        }
        p = carve(pg, bin);
    }
    ts_bins_counter_add(&a->live_bytes, (size_t)1 << bin);
    return p;
}

/* A block went back on pg's free list, and pg was full or is now empty. */
void _ts_bins_page_changed(ts_bins_arena_t *a, ts_bins_page_t *pg) {
    unsigned bin = pg->bin;
    if (pg->used & BINS_PAGE_FULL) {
        pg->used &= ~BINS_PAGE_FULL;
        bin_insert_second(a, pg, bin);
    }
    if (pg->used == 0 && a->bins[bin] != pg) span_retire(a, pg);
}

/* Take every block other threads freed into this arena back to its span. */
void _ts_bins_drain(ts_bins_arena_t *a) {
    ts_bins_block_t *b = atomic_exchange_explicit(&a->remote, NULL, memory_order_acquire);
    size_t freed = 0;
    while (b) {
        ts_bins_block_t *next = b->next;
        uintptr_t p = (uintptr_t)b;
        ts_bins_chunk_t *c = (ts_bins_chunk_t *)ts_bins_header_of(p);
        ts_bins_page_t *pg = &c->pages[(p >> BINS_PAGE_SHIFT) & (BINS_CHUNK_PAGES - 1)];
        b->next = pg->free_list;
        pg->free_list = b;
        freed += (size_t)1 << pg->bin;
        if (ts_bins_page_needs_care(--pg->used)) _ts_bins_page_changed(a, pg);
        b = next;
    }
    if (freed) ts_bins_counter_add(&a->live_bytes, (size_t)0 - freed);
}

/* Purge the free pages of c touched since their last purge. */
static bool purge_free_pages(ts_bins_chunk_t *c) {
    uint32_t todo = c->dirty_pages & c->free_pages;
    bool purged = todo != 0;
    while (todo) {
        unsigned first = (unsigned)__builtin_ctz(todo);
        unsigned len = 0;
        while (first + len < BINS_CHUNK_PAGES && (todo >> (first + len) & 1)) len++;
        _ts_os_purge((char *)c + ((size_t)first << BINS_PAGE_SHIFT),
                     (size_t)len << BINS_PAGE_SHIFT);
        todo &= ~(len == 32 ? 0xFFFFFFFFu : ((1u << len) - 1) << first);
    }
    c->dirty_pages &= ~c->free_pages;
    return purged;
}

/* Give back empty head spans and every empty chunk; with `purge`, also the
 * memory of free pages in chunks still in use. */
bool _ts_bins_release_empty(ts_bins_arena_t *a, bool purge) {
    bool released = false;
    for (unsigned bin = BINS_MIN_BIN; bin <= BINS_CHUNK_MAX_BIN; bin++) {
        ts_bins_page_t *pg = a->bins[bin];
        if (pg != &_ts_bins_empty_page && pg->used == 0) span_retire(a, pg);
    }
    ts_bins_chunk_t *next;
    for (ts_bins_chunk_t *c = a->avail; c; c = next) {
        next = c->next;
        if (c->free_pages == BINS_ALL_PAGES_FREE) {
            chunk_release(a, c);
            released = true;
        } else if (purge) {
            released |= purge_free_pages(c);
        }
    }
    return released;
}
