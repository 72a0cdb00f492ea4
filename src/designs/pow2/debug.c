/* pow2's debug dumps (the seed's print_freelist and print_block_info) and a
 * full heap consistency check for the tests (every chunk walked block by
 * block against the free and lazy lists, the watermark and the counters).
 *
 * The text is formatted with _ts_format under the design's locks into a
 * buffer that is not heap memory (the caller's, or a fresh mapping); stdio
 * is used only after every lock is released, since under LD_PRELOAD stdio
 * calls our malloc. The exact format is documented in docs/pow2.md.
 *
 * Locking: P2(lock_all) (every partition in order, then the central state).
 */
#include "designs/pow2/pow2.h"

#include <stdarg.h>
#include <stdio.h>

#include "tsalloc/pow2.h"

typedef struct {
    char *buf;
    size_t cap, len;
} text_t;

static void put(text_t *t, const char *fmt, ...) {
    size_t at = t->len < t->cap ? t->len : t->cap;
    va_list ap;
    va_start(ap, fmt);
    int n = _ts_vformat(t->buf + at, t->cap - at, fmt, ap);
    va_end(ap);
    t->len += (size_t)n;
}

static size_t count_free_blocks(void) {
    size_t n = P2(central).pool_chunks;
    for (unsigned i = 0; i < pow2_nparts(); i++)
        for (unsigned s = 0; s < POW2_ORDERS; s++) {
            for (pow2_free_t *b = P2(parts)[i].lists[s]; b; b = b->next) n++;
            n += P2(parts)[i].lazy_count[s];
        }
    return n;
}

static void put_list(text_t *t, const char *kind, unsigned s, const pow2_free_t *b) {
    if (!b) return;
    put(t, "  %s %u size %zu:", kind, s + POW2_MIN_ORDER, (size_t)1 << (s + POW2_MIN_ORDER));
    for (; b; b = b->next) put(t, " %p", (const void *)b);
    put(t, "\n");
}

/* The free-list dump, all locks held. */
static void format_freelist(text_t *t) {
    const pow2_central_t *h = &P2(central);
    unsigned n = pow2_nparts();
    put(t, "%s heap: partitions=%u arena=%zu mapped=%zu mapped_blocks=%zu pool_chunks=%zu\n",
        POW2_NAME, n, (h->brk_chunks + h->map_chunks) * POW2_CHUNK, h->huge_bytes, h->huge_count,
        h->pool_chunks);
    for (unsigned i = 0; i < n; i++) {
        const pow2_part_t *pt = &P2(parts)[i];
        size_t lazy = 0;
        for (unsigned s = 0; s < POW2_ORDERS; s++)
            lazy += (size_t)pt->lazy_count[s] << (s + POW2_MIN_ORDER);
        put(t, "partition %u: chunks=%zu free=%zu used=%zu used_blocks=%zu lazy=%zu\n", i,
            pt->chunks, pt->free_bytes, pt->used_bytes, pt->used_blocks, lazy);
        for (unsigned s = 0; s < POW2_ORDERS; s++) {
            put_list(t, "order", s, pt->lists[s]);
            put_list(t, "lazy", s, pt->lazy[s]);
        }
    }
    put(t, "pool:");
    for (pow2_free_t *c = h->pool; c; c = c->next) put(t, " %p", (void *)c);
    put(t, "\nend\n");
}

size_t P2(dump_freelist)(char *buf, size_t cap) {
    text_t t = {buf, cap, 0};
    P2(lock_all)();
    format_freelist(&t);
    P2(unlock_all)();
    return t.len;
}

static const char *state_name(unsigned state) {
    return state == POW2_USED           ? "used"
           : state == POW2_USED_ALIGNED ? "used-aligned"
           : state == POW2_LAZY         ? "lazy"
                                        : "free";
}

size_t P2(dump_block)(const void *ptr, char *buf, size_t cap) {
    text_t t = {buf, cap, 0};
    pow2_hdr_t *b;
    unsigned part;
    P2(lock_all)();
    int kind = pow2_look(ptr, &b, &part);
    if (kind == POW2_LOOK_FREE) {
        b = (pow2_hdr_t *)ptr - 1;
        part = (pow2_cmap_get((uintptr_t)b) & ~(unsigned)POW2_CMAP_MAPPED) - POW2_CMAP_PART0;
    }
    if (kind == POW2_LOOK_USED || kind == POW2_LOOK_FREE) {
        size_t size = (size_t)1 << b->order;
        unsigned entry = pow2_cmap_get((uintptr_t)b);
        put(&t, "%p: heap block=%p order=%u size=%zu usable=%zu state=%s partition=%u chunk=%s\n",
            ptr, (void *)b, (unsigned)b->order, size,
            (size_t)((char *)b + size - (const char *)ptr), state_name(b->state), part,
            (entry & POW2_CMAP_MAPPED) ? "map" : "brk");
    } else {
        const pow2_central_t *h = &P2(central);
        size_t len = 0;
        if (kind == POW2_LOOK_NOT_HEAP && h->reg_cap) {
            /* Central state entered: look the registry up by hand. */
            for (size_t i = 0; i < h->reg_cap && !len; i++)
                if (h->reg[i].ptr == (uintptr_t)ptr) len = h->reg[i].len;
        }
        if (len)
            put(&t, "%p: mapped size=%zu usable=%zu\n", ptr, len, len);
        else
            put(&t, "%p: not a block of this heap\n", ptr);
    }
    P2(unlock_all)();
    return t.len;
}

/* Print into a fresh mapping under the locks, then write it out without them. */
TS_EXPORT void POW2_PUBLIC(print_freelist)(FILE *out) {
    P2(lock_all)();
    size_t cap = 4096 + 160 * POW2_MAX_PARTS + 20 * count_free_blocks();
    char *buf = _ts_os_map(cap);
    text_t t = {buf, buf ? cap : 0, 0};
    if (buf) format_freelist(&t);
    P2(unlock_all)();
    if (!buf) {
        fputs(POW2_NAME " heap: no memory for the dump\n", out);
        return;
    }
    fwrite(buf, 1, t.len < cap ? t.len : cap - 1, out);
    _ts_os_unmap(buf, cap);
}

TS_EXPORT void POW2_PUBLIC(print_block)(const void *ptr, FILE *out) {
    char buf[256];
    size_t len = P2(dump_block)(ptr, buf, sizeof buf);
    fwrite(buf, 1, len < sizeof buf ? len : sizeof buf - 1, out);
}

/* ---- consistency check ----------------------------------------------------------- */

typedef struct {
    char *why;
    size_t cap;
    int problems;
} check_t;

static void problem(check_t *c, const char *fmt, ...) {
    if (!c->problems++ && c->cap) {
        va_list ap;
        va_start(ap, fmt);
        _ts_vformat(c->why, c->cap, fmt, ap);
        va_end(ap);
    }
}

static bool is_whole_free(uintptr_t chunk) {
    const pow2_hdr_t *h = (const pow2_hdr_t *)chunk;
    return h->magic == pow2_magic(h) && h->state == POW2_FREE && h->order == POW2_MAX_ORDER;
}

typedef struct {
    size_t chunks, free_bytes, free_blocks, used_bytes, used_blocks;
    size_t lazy_bytes, lazy_blocks[POW2_ORDERS];
} tally_t;

/* Walk the blocks of one partition's chunk, front to back. */
static void check_chunk(check_t *c, uintptr_t chunk, tally_t *tally) {
    uintptr_t at = chunk, end = chunk + POW2_CHUNK;
    while (at < end) {
        const pow2_hdr_t *h = (const pow2_hdr_t *)at;
        if (h->magic != pow2_magic(h) || h->order < POW2_MIN_ORDER || h->order > POW2_MAX_ORDER ||
            (at & (((uintptr_t)1 << h->order) - 1)) || at + ((uintptr_t)1 << h->order) > end) {
            problem(c, "bad header at %p in chunk %p", (void *)at, (void *)chunk);
            return;
        }
        size_t size = (size_t)1 << h->order;
        if (h->state == POW2_FREE) {
            tally->free_bytes += size;
            tally->free_blocks++;
            uintptr_t buddy = at ^ size;
            const pow2_hdr_t *bh = (const pow2_hdr_t *)buddy;
            if (h->order < POW2_MAX_ORDER && bh->magic == pow2_magic(bh) &&
                bh->state == POW2_FREE && bh->order == h->order)
                problem(c, "free buddies %p and %p not merged", (void *)at, (void *)buddy);
        } else if (h->state == POW2_LAZY) {
            if (h->order == POW2_MAX_ORDER) {
                problem(c, "lazy whole chunk %p", (void *)at);
                return;
            }
            tally->lazy_bytes += size;
            tally->lazy_blocks[h->order - POW2_MIN_ORDER]++;
        } else if (h->state == POW2_USED || h->state == POW2_USED_ALIGNED) {
            tally->used_bytes += size;
            tally->used_blocks++;
            if (h->state == POW2_USED_ALIGNED) {
                const pow2_hdr_t *r = (const pow2_hdr_t *)(at + h->offset - POW2_HDR);
                if (h->offset >= size || r->magic != pow2_magic(r) || r->state != POW2_REDIRECT ||
                    r->offset != h->offset)
                    problem(c, "aligned block %p without its redirect", (void *)at);
            }
        } else {
            problem(c, "block %p in state %u", (void *)at, (unsigned)h->state);
            return;
        }
        at += size;
    }
}

int P2(check_heap)(char *why, size_t cap) {
    check_t c = {why, cap, 0};
    if (cap) why[0] = 0;
    P2(lock_all)();
    const pow2_central_t *h = &P2(central);
    unsigned n = pow2_nparts();
    tally_t tally[POW2_PART_SLOTS] = {{0}};
    size_t pool = 0, from_break = 0, mapped = 0;
    /* Every chunk the map knows. */
    for (size_t i1 = 0; i1 < POW2_CMAP_L1_SIZE; i1++) {
        atomic_ushort *l2 = atomic_load_explicit(&P2(cmap)[i1], memory_order_acquire);
        if (!l2) continue;
        for (size_t i2 = 0; i2 < POW2_CMAP_L2_SIZE; i2++) {
            unsigned e = atomic_load_explicit(&l2[i2], memory_order_relaxed);
            if (!e) continue;
            uintptr_t chunk =
                ((uintptr_t)i1 << POW2_CMAP_L1_SHIFT) | ((uintptr_t)i2 << POW2_MAX_ORDER);
            if (e & POW2_CMAP_MAPPED)
                mapped++;
            else
                from_break++;
            unsigned owner = e & ~(unsigned)POW2_CMAP_MAPPED;
            if (owner == POW2_CMAP_POOL) {
                pool++;
                if (!is_whole_free(chunk)) problem(&c, "pool chunk %p not free", (void *)chunk);
                continue;
            }
            unsigned p = owner - POW2_CMAP_PART0;
            if (owner < POW2_CMAP_PART0 || p >= n) {
                problem(&c, "chunk %p has owner %u", (void *)chunk, owner);
                continue;
            }
            tally[p].chunks++;
            check_chunk(&c, chunk, &tally[p]);
        }
    }
    if (pool != h->pool_chunks)
        problem(&c, "pool: %zu chunks mapped, %zu counted", pool, h->pool_chunks);
    if (from_break != h->brk_chunks || mapped != h->map_chunks)
        problem(&c, "chunks: %zu brk %zu map, counted %zu %zu", from_break, mapped, h->brk_chunks,
                h->map_chunks);
    size_t listed = 0;
    for (pow2_free_t *ch = h->pool; ch; ch = ch->next) {
        if ((pow2_cmap_get((uintptr_t)ch) & ~(unsigned)POW2_CMAP_MAPPED) != POW2_CMAP_POOL)
            problem(&c, "pool lists %p, not a pool chunk", (void *)ch);
        if (++listed > pool) break;
    }
    if (listed != pool) problem(&c, "pool list has %zu chunks, map %zu", listed, pool);
    /* Each partition's lists against its chunks. */
    for (unsigned p = 0; p < n; p++) {
        const pow2_part_t *pt = &P2(parts)[p];
        size_t blocks = 0, bytes = 0;
        for (unsigned s = 0; s < POW2_ORDERS; s++) {
            unsigned k = s + POW2_MIN_ORDER;
            if (!pt->lists[s] != !(pt->nonempty & (1u << s)))
                problem(&c, "partition %u: nonempty bit %u wrong", p, k);
            const pow2_free_t *prev = NULL;
            for (const pow2_free_t *b = pt->lists[s]; b; prev = b, b = b->next) {
                unsigned e = pow2_cmap_get((uintptr_t)b) & ~(unsigned)POW2_CMAP_MAPPED;
                if (e != POW2_CMAP_PART0 + p || b->hdr.magic != pow2_magic(b) ||
                    b->hdr.state != POW2_FREE || b->hdr.order != k || b->prev != prev) {
                    problem(&c, "partition %u: bad free block %p in list %u", p, (void *)b, k);
                    break;
                }
                blocks++;
                bytes += (size_t)1 << k;
                if (blocks > tally[p].free_blocks) break;
            }
        }
        /* The lazy lists: LAZY blocks of this partition, as many as counted,
         * within the watermark, none while lazy merging is off. */
        size_t lazy_bytes = 0;
        for (unsigned s = 0; s < POW2_ORDERS; s++) {
            unsigned k = s + POW2_MIN_ORDER;
            size_t listed = 0;
            const pow2_free_t *prev = NULL;
            for (const pow2_free_t *b = pt->lazy[s]; b; prev = b, b = b->next) {
                unsigned e = pow2_cmap_get((uintptr_t)b) & ~(unsigned)POW2_CMAP_MAPPED;
                if (e != POW2_CMAP_PART0 + p || b->hdr.magic != pow2_magic(b) ||
                    b->hdr.state != POW2_LAZY || b->hdr.order != k || b->prev != prev) {
                    problem(&c, "partition %u: bad lazy block %p in list %u", p, (void *)b, k);
                    break;
                }
                if (++listed > tally[p].lazy_blocks[s]) break;
            }
            lazy_bytes += listed << k;
            unsigned cap = atomic_load_explicit(&P2(lazy_cap)[s], memory_order_relaxed);
            if (listed != tally[p].lazy_blocks[s] || listed != pt->lazy_count[s])
                problem(&c, "partition %u: order %u: %zu lazy listed, %zu found, %u counted", p, k,
                        listed, tally[p].lazy_blocks[s], (unsigned)pt->lazy_count[s]);
            else if (listed > cap || (listed && pt->lazy_off))
                problem(&c, "partition %u: order %u: %zu lazy blocks, watermark %u%s", p, k, listed,
                        cap, pt->lazy_off ? " (lazy merging off)" : "");
        }
        if (blocks != tally[p].free_blocks || bytes != tally[p].free_bytes ||
            bytes + lazy_bytes != pt->free_bytes || lazy_bytes != tally[p].lazy_bytes)
            problem(&c,
                    "partition %u: free %zu blocks %zu B + %zu B lazy listed, %zu blocks %zu B + "
                    "%zu B lazy found, %zu B counted",
                    p, blocks, bytes, lazy_bytes, tally[p].free_blocks, tally[p].free_bytes,
                    tally[p].lazy_bytes, pt->free_bytes);
        if (tally[p].used_bytes != pt->used_bytes || tally[p].used_blocks != pt->used_blocks ||
            tally[p].chunks != pt->chunks)
            problem(&c, "partition %u: used %zu B in %zu blocks, %zu chunks; counted %zu %zu %zu",
                    p, tally[p].used_bytes, tally[p].used_blocks, tally[p].chunks, pt->used_bytes,
                    pt->used_blocks, pt->chunks);
    }
    /* The huge-block registry against its counters. */
    size_t count = 0, bytes = 0;
    for (size_t i = 0; i < h->reg_cap; i++)
        if (h->reg[i].ptr) count++, bytes += h->reg[i].len;
    if (count != h->huge_count || count != h->reg_count || bytes != h->huge_bytes)
        problem(&c, "registry: %zu blocks %zu B, counted %zu %zu B", count, bytes, h->huge_count,
                h->huge_bytes);
    P2(unlock_all)();
    return c.problems;
}
