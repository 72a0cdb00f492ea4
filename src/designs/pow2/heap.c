/* pow2's central state: the chunk map, growing the heap with sbrk (mmap when
 * sbrk refuses), the pool of whole free chunks, giving the heap top back with
 * a negative sbrk, and the registry of huge blocks.
 *
 * Invariants:
 * - Chunks are 1 MiB aligned. sbrk memory below the first aligned address of
 *   an increment (the pad, left when the break was not where we left it) is
 *   never touched nor handed out.
 * - A chunk's map entry is set before any block of it is handed out and
 *   cleared before it goes back to the OS.
 * - brk_top is where our last sbrk left the break; the top is given back
 *   only while the break is still there (_ts_os_sbrk_shrink_if_top), so
 *   memory a foreign sbrk obtained above ours is never released.
 *
 * Locking: every function here runs with the central state entered (see
 * pow2.h), except the huge_* ones, which take the central lock themselves
 * and never call the OS while holding it.
 */
#include "designs/pow2/pow2.h"

#include <errno.h>
#include <string.h>

pow2_central_t P2(central) = {.give_back = POW2_GIVE_BACK};
_Atomic(atomic_ushort *) P2(cmap)[POW2_CMAP_L1_SIZE];

/* ---- chunk map ------------------------------------------------------------ */

/* The second-level table of the first sbrk chunk is static: the sbrk heap
 * (one 4 GiB region in practice) then never needs mmap, even when mmap is
 * refused. */
static atomic_ushort cmap_brk_l2[POW2_CMAP_L2_SIZE];
static bool cmap_brk_l2_used;

/* Make sure the entry of `chunk` exists (maps its second-level table). */
static bool cmap_prepare(uintptr_t chunk, bool from_brk) {
    if (chunk >> 47) return false;
    _Atomic(atomic_ushort *) *slot = &P2(cmap)[chunk >> POW2_CMAP_L1_SHIFT];
    if (atomic_load_explicit(slot, memory_order_relaxed)) return true;
    atomic_ushort *l2;
    if (from_brk && !cmap_brk_l2_used) {
        l2 = cmap_brk_l2;
        cmap_brk_l2_used = true;
    } else {
        l2 = _ts_os_map(POW2_CMAP_L2_SIZE * sizeof(atomic_ushort));
        if (!l2) return false;
    }
    atomic_store_explicit(slot, l2, memory_order_release);
    return true;
}

/* Set the entry of a chunk whose table exists (cmap_prepare succeeded). */
static void cmap_set(uintptr_t chunk, unsigned value) {
    atomic_ushort *l2 =
        atomic_load_explicit(&P2(cmap)[chunk >> POW2_CMAP_L1_SHIFT], memory_order_relaxed);
    atomic_store_explicit(&l2[(chunk >> POW2_MAX_ORDER) & (POW2_CMAP_L2_SIZE - 1)],
                          (unsigned short)value, memory_order_relaxed);
}

/* ---- pool of whole free chunks --------------------------------------------- */

static void pool_push(pow2_free_t *c) {
    pow2_central_t *h = &P2(central);
    pow2_set_hdr(c, POW2_MAX_ORDER, POW2_FREE, 0);
    c->prev = NULL;
    c->next = h->pool;
    if (h->pool) h->pool->prev = c;
    h->pool = c;
    h->pool_chunks++;
}

static void pool_unlink(pow2_free_t *c) {
    pow2_central_t *h = &P2(central);
    if (c->prev)
        c->prev->next = c->next;
    else
        h->pool = c->next;
    if (c->next) c->next->prev = c->prev;
    h->pool_chunks--;
}

static void note_peak(void) {
    pow2_central_t *h = &P2(central);
    size_t total = (h->brk_chunks + h->map_chunks) * POW2_CHUNK + h->huge_bytes;
    if (total > h->peak) h->peak = total;
}

/* ---- growing the heap ----------------------------------------------------- */

/* One new chunk from sbrk, aligned by skipping a pad when the break is not
 * aligned (first use, or a foreign sbrk moved it). NULL when sbrk refuses. */
static uintptr_t grow_brk(void) {
    pow2_central_t *h = &P2(central);
    for (int attempt = 0; attempt < 3; attempt++) {
        uintptr_t cur = (uintptr_t)_ts_os_brk_current();
        if (cur == 0 || cur == UINTPTR_MAX) return 0;
        size_t pad = ts_align_up_ptr(cur, POW2_CHUNK) - cur;
        size_t inc = pad + POW2_CHUNK;
        uintptr_t old = (uintptr_t)_ts_os_sbrk((intptr_t)inc);
        if (!old) return 0;
        uintptr_t end = old + inc;
        uintptr_t start = ts_align_up_ptr(old, POW2_CHUNK);
        if (start + POW2_CHUNK <= end) {
            if (!cmap_prepare(start, true)) {
                _ts_os_sbrk_shrink_if_top((void *)end, inc);
                return 0;
            }
            h->brk_pad += start - old;
            h->brk_top = end;
            h->brk_chunks++;
            return start;
        }
        /* A foreign sbrk slipped in between: undo ours if still on top, retry. */
        if (!_ts_os_sbrk_shrink_if_top((void *)end, inc)) h->brk_pad += inc;
    }
    return 0;
}

static uintptr_t grow_map(void) {
    void *c = _ts_os_map_aligned(POW2_CHUNK, POW2_CHUNK);
    if (!c) return 0;
    if (!cmap_prepare((uintptr_t)c, false)) {
        _ts_os_unmap(c, POW2_CHUNK);
        return 0;
    }
    P2(central).map_chunks++;
    return (uintptr_t)c;
}

pow2_free_t *P2(chunk_get)(unsigned part) {
    pow2_central_t *h = &P2(central);
    pow2_free_t *c = h->pool;
    unsigned mapped;
    if (c) {
        pool_unlink(c);
        mapped = pow2_cmap_get((uintptr_t)c) & POW2_CMAP_MAPPED;
    } else {
        uintptr_t a = grow_brk();
        mapped = 0;
        if (!a) {
            a = grow_map();
            mapped = POW2_CMAP_MAPPED;
        }
        if (!a) return NULL;
        c = (pow2_free_t *)a;
        note_peak();
    }
    cmap_set((uintptr_t)c, mapped | (POW2_CMAP_PART0 + part));
    return c;
}

/* ---- giving memory back ------------------------------------------------------ */

/* The run of pool chunks (from sbrk) ending at the heap top: its count, and
 * its lowest chunk in *low. */
static size_t top_run(uintptr_t *low) {
    pow2_central_t *h = &P2(central);
    uintptr_t c = h->brk_top & ~(uintptr_t)(POW2_CHUNK - 1);
    size_t n = 0;
    if (h->brk_top)
        while (c >= POW2_CHUNK && pow2_cmap_get(c - POW2_CHUNK) == POW2_CMAP_POOL) {
            c -= POW2_CHUNK;
            n++;
        }
    *low = c;
    return n;
}

bool P2(release_top)(bool trim, size_t pad) {
    pow2_central_t *h = &P2(central);
    uintptr_t low;
    size_t run = top_run(&low);
    size_t release;
    if (trim) {
        size_t keep = (pad + POW2_CHUNK - 1) / POW2_CHUNK;
        release = run > keep ? run - keep : 0;
    } else {
        /* Keep the lowest chunk of the run as slack against sbrk ping-pong. */
        release = run * POW2_CHUNK >= h->give_back ? run - 1 : 0;
    }
    if (!release) return false;
    uintptr_t top_chunk_end = h->brk_top & ~(uintptr_t)(POW2_CHUNK - 1);
    uintptr_t cut = top_chunk_end - release * POW2_CHUNK;
    for (uintptr_t c = cut; c < top_chunk_end; c += POW2_CHUNK) {
        pool_unlink((pow2_free_t *)c);
        cmap_set(c, 0);
    }
    if (_ts_os_sbrk_shrink_if_top((void *)h->brk_top, h->brk_top - cut)) {
        h->brk_top = cut;
        h->brk_chunks -= release;
        return true;
    }
    /* A foreign sbrk moved the break above ours: keep the chunks. */
    for (uintptr_t c = cut; c < top_chunk_end; c += POW2_CHUNK) {
        cmap_set(c, POW2_CMAP_POOL);
        pool_push((pow2_free_t *)c);
    }
    return false;
}

size_t P2(releasable)(void) {
    uintptr_t low;
    return top_run(&low) * POW2_CHUNK;
}

void P2(chunk_put)(pow2_free_t *chunk) {
    pow2_central_t *h = &P2(central);
    uintptr_t c = (uintptr_t)chunk;
    unsigned mapped = pow2_cmap_get(c) & POW2_CMAP_MAPPED;
    if (mapped && h->pool_chunks * POW2_CHUNK >= h->give_back) {
        /* Enough slack already: a chunk sbrk could not give goes straight back. */
        cmap_set(c, 0);
        _ts_os_unmap(chunk, POW2_CHUNK);
        h->map_chunks--;
        return;
    }
    cmap_set(c, mapped | POW2_CMAP_POOL);
    pool_push(chunk);
    if (!mapped) P2(release_top)(false, 0);
}

size_t P2(purge_pool)(void) {
    size_t page = _ts_os_page_size(), purged = 0;
    for (pow2_free_t *c = P2(central).pool; c; c = c->next)
        if (_ts_os_purge((char *)c + page, POW2_CHUNK - page)) purged += POW2_CHUNK - page;
    return purged;
}

/* ---- the registry of huge blocks ----------------------------------------------- */

static size_t reg_home(uintptr_t ptr, size_t cap) {
    uint64_t x = (uint64_t)(ptr >> 12) * 0x9E3779B97F4A7C15ull;
    return (size_t)(x >> 32) & (cap - 1);
}

/* Index of `ptr`, or the empty slot where it would go. */
static size_t reg_find(const pow2_reg_entry_t *table, size_t cap, uintptr_t ptr) {
    size_t i = reg_home(ptr, cap);
    while (table[i].ptr && table[i].ptr != ptr) i = (i + 1) & (cap - 1);
    return i;
}

/* Keep the load at most one half; a failed growth is fatal to the insert
 * only when the table is nearly full. */
static bool reg_reserve(void) {
    pow2_central_t *h = &P2(central);
    if ((h->reg_count + 1) * 2 <= h->reg_cap) return true;
    size_t cap = h->reg_cap ? h->reg_cap * 2 : 256;
    pow2_reg_entry_t *table = _ts_os_map(cap * sizeof *table);
    if (!table) return h->reg_count + 2 <= h->reg_cap;
    for (size_t i = 0; i < h->reg_cap; i++)
        if (h->reg[i].ptr) table[reg_find(table, cap, h->reg[i].ptr)] = h->reg[i];
    if (h->reg) _ts_os_unmap(h->reg, h->reg_cap * sizeof *table);
    h->reg = table;
    h->reg_cap = cap;
    return true;
}

static bool reg_insert(uintptr_t ptr, size_t len) {
    pow2_central_t *h = &P2(central);
    if (!reg_reserve()) return false;
    size_t i = reg_find(h->reg, h->reg_cap, ptr);
    h->reg[i].ptr = ptr;
    h->reg[i].len = len;
    h->reg_count++;
    return true;
}

static size_t reg_lookup(uintptr_t ptr) {
    pow2_central_t *h = &P2(central);
    if (!h->reg_cap) return 0;
    size_t i = reg_find(h->reg, h->reg_cap, ptr);
    return h->reg[i].ptr ? h->reg[i].len : 0;
}

/* Remove `ptr` (linear probing's backward-shift deletion); its length, or 0. */
static size_t reg_remove(uintptr_t ptr) {
    pow2_central_t *h = &P2(central);
    if (!h->reg_cap) return 0;
    size_t mask = h->reg_cap - 1;
    size_t i = reg_find(h->reg, h->reg_cap, ptr);
    size_t len = h->reg[i].len;
    if (!h->reg[i].ptr) return 0;
    h->reg[i].ptr = 0;
    h->reg_count--;
    for (size_t j = (i + 1) & mask; h->reg[j].ptr; j = (j + 1) & mask) {
        size_t home = reg_home(h->reg[j].ptr, h->reg_cap);
        /* Entry j may move to the hole at i when its home is not in (i, j]. */
        bool stays = i <= j ? (home > i && home <= j) : (home > i || home <= j);
        if (stays) continue;
        h->reg[i] = h->reg[j];
        h->reg[j].ptr = 0;
        i = j;
    }
    return len;
}

/* ---- huge blocks ------------------------------------------------------------------- */

void *P2(huge_alloc)(size_t size, size_t align) {
    size_t page = _ts_os_page_size();
    if (size > (size_t)PTRDIFF_MAX - page || align > (size_t)PTRDIFF_MAX - size) {
        errno = ENOMEM;
        return NULL;
    }
    size_t len = ts_align_up(size ? size : 1, page);
    void *p = align > page ? _ts_os_map_aligned(len, align) : _ts_os_map(len);
    if (!p) {
        errno = ENOMEM;
        return NULL;
    }
    pow2_central_t *h = &P2(central);
    pow2_central_lock();
    bool ok = reg_insert((uintptr_t)p, len);
    if (ok) {
        h->huge_bytes += len;
        h->huge_count++;
        note_peak();
    }
    pow2_central_unlock();
    if (!ok) {
        _ts_os_unmap(p, len);
        errno = ENOMEM;
        return NULL;
    }
    return p;
}

bool P2(huge_free)(void *ptr) {
    pow2_central_t *h = &P2(central);
    pow2_central_lock();
    size_t len = reg_remove((uintptr_t)ptr);
    if (len) {
        h->huge_bytes -= len;
        h->huge_count--;
    }
    pow2_central_unlock();
    if (!len) return false;
    _ts_os_unmap(ptr, len);
    return true;
}

size_t P2(huge_size)(const void *ptr) {
    pow2_central_lock();
    size_t len = reg_lookup((uintptr_t)ptr);
    pow2_central_unlock();
    return len;
}

void *P2(huge_resize)(void *ptr, size_t old_len, size_t size) {
    size_t page = _ts_os_page_size();
    if (size > (size_t)PTRDIFF_MAX - page) {
        errno = ENOMEM;
        return NULL;
    }
    size_t len = ts_align_up(size, page);
    if (len == old_len) return ptr;
    pow2_central_t *h = &P2(central);
    /* Out of the registry while it moves: a mapping the kernel gives another
     * thread at the old address meanwhile must not collide with our entry. */
    pow2_central_lock();
    reg_remove((uintptr_t)ptr);
    pow2_central_unlock();
    void *q = _ts_os_remap(ptr, old_len, len, true);
    pow2_central_lock();
    /* The removal left room, so this insert needs no growth (unless other
     * threads filled the table meanwhile). */
    reg_insert((uintptr_t)(q ? q : ptr), q ? len : old_len);
    if (q) {
        h->huge_bytes = h->huge_bytes - old_len + len;
        note_peak();
    }
    pow2_central_unlock();
    if (!q) errno = ENOMEM;
    return q;
}
