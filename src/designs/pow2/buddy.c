/* pow2's partitions and the design interface: buddy split on malloc, lazy
 * buddy merge on free (Barkley & Lee's lazy buddy system with a fixed
 * watermark), in-place realloc (split to shrink, merge with free or lazy
 * buddies to grow), memalign, and the partition a thread uses.
 *
 * Lazy merging: free of an order-k block whose partition holds fewer than
 * P2(lazy_cap)[k] lazy blocks of order k pushes it on the lazy list of k,
 * unmerged; malloc of order k pops that list first. A malloc/free loop of one
 * size thus reuses one block with no split or merge. Beyond the watermark a
 * free merges eagerly. Lazy blocks are all merged (flushed) before the
 * partition takes a new chunk, when a whole chunk leaves it for the pool
 * (after which frees merge eagerly until the next split), and by trim.
 *
 * Invariants (besides those of pow2.h):
 * - A partition's lists hold only free blocks of chunks it owns; bit k of
 *   `nonempty` is set exactly when list k is not empty.
 * - Its lazy lists hold only LAZY blocks of chunks it owns, lazy_count[k]
 *   of order k, never more than P2(lazy_cap)[k]; none while lazy_off.
 * - A partition keeps at most one whole free chunk (its spare, the lowest
 *   one); the others go to the central pool, where any partition reuses them
 *   and the heap top can be given back.
 * - Partition rule: a thread takes partition (n mod P) at its first
 *   allocation, n counting threads in order of first use; a block always
 *   goes back to the partition that owns its chunk, whichever thread frees it.
 *
 * Locking: one partition lock at a time, then possibly the central state
 * (pow2_heap_enter). Huge blocks take only the central lock.
 */
#include "designs/pow2/pow2.h"

#include <errno.h>
#include <string.h>

#include "base/options.h"

pow2_part_t P2(parts)[POW2_PART_SLOTS];
atomic_uint P2(nparts);
atomic_uchar P2(lazy_cap)[POW2_ORDERS];
static atomic_uint next_part;
static TS_TLS unsigned thread_part; /* index + 1; 0 until the first allocation */

/* Reads TSALLOC_POW2_PARTITIONS, TSALLOC_POW2_GIVE_BACK and TSALLOC_POW2_LAZY
 * once, through the option table (base/options.h), whose ranges keep them
 * within what the design supports. Takes no lock (it runs under partition
 * 0's lock in `pow2`); racing callers compute and store the same values. */
unsigned P2(configure)(void) {
    unsigned n = 1;
    if (pow2_partitioned) {
        long long want = _ts_option_env(TS_OPTID_POW2_PARTITIONS, NULL);
        if (want == 0) want = _ts_os_cpu_count();
        if (want > POW2_MAX_PARTS) want = POW2_MAX_PARTS;
        n = (unsigned)want;
    }
    long long give_back = _ts_option_env(TS_OPTID_POW2_GIVE_BACK, NULL);
    atomic_store_explicit(&P2(central).give_back, (size_t)give_back, memory_order_relaxed);
    long long lazy = _ts_option_env(TS_OPTID_POW2_LAZY, NULL);
    for (unsigned k = POW2_MIN_ORDER; k < POW2_MAX_ORDER; k++) {
        size_t cap = POW2_LAZY_BYTES >> k;
        if (cap > (size_t)lazy) cap = (size_t)lazy;
        atomic_store_explicit(&P2(lazy_cap)[k - POW2_MIN_ORDER], (unsigned char)cap,
                              memory_order_relaxed);
    }
    /* The first value stored wins: threads with different CPU affinities
     * compute different counts, and all must use the same one. */
    unsigned first = 0;
    if (!atomic_compare_exchange_strong_explicit(&P2(nparts), &first, n, memory_order_acq_rel,
                                                 memory_order_acquire))
        return first;
    return n;
}

static TS_NOINLINE unsigned assign_part(void) {
    unsigned n = pow2_nparts();
    unsigned i = atomic_fetch_add_explicit(&next_part, 1, memory_order_relaxed) % n + 1;
    thread_part = i;
    return i;
}

static inline pow2_part_t *my_part(void) {
    if (!pow2_partitioned) return &P2(parts)[0];
    unsigned i = thread_part;
    if (ts_unlikely(!i)) i = assign_part();
    return &P2(parts)[i - 1];
}

/* ---- free lists ------------------------------------------------------------- */

/* The doubly linked lists behind both the free lists and the lazy lists. */
static inline void dlist_push(pow2_free_t **head, pow2_free_t *b) {
    b->prev = NULL;
    b->next = *head;
    if (b->next) b->next->prev = b;
    *head = b;
}

static inline void dlist_unlink(pow2_free_t **head, pow2_free_t *b) {
    if (b->prev)
        b->prev->next = b->next;
    else
        *head = b->next;
    if (b->next) b->next->prev = b->prev;
}

static inline void list_push(pow2_part_t *pt, pow2_free_t *b, unsigned k) {
    unsigned slot = k - POW2_MIN_ORDER;
    pow2_set_hdr(b, k, POW2_FREE, 0);
    dlist_push(&pt->lists[slot], b);
    pt->nonempty |= 1u << slot;
    pt->free_bytes += (size_t)1 << k;
}

static inline void list_unlink(pow2_part_t *pt, pow2_free_t *b, unsigned k) {
    unsigned slot = k - POW2_MIN_ORDER;
    dlist_unlink(&pt->lists[slot], b);
    if (!pt->lists[slot]) pt->nonempty &= ~(1u << slot);
    pt->free_bytes -= (size_t)1 << k;
}

/* A free block of order k: one its buddy may merge with. */
static inline bool is_free_block(const void *b, unsigned k) {
    const pow2_hdr_t *h = (const pow2_hdr_t *)b;
    return h->magic == pow2_magic(h) && h->state == POW2_FREE && h->order == k;
}

/* A free or lazy block of order k: one realloc may grow into. */
static inline bool is_unused_block(const void *b, unsigned k) {
    const pow2_hdr_t *h = (const pow2_hdr_t *)b;
    return h->magic == pow2_magic(h) && (h->state == POW2_FREE || h->state == POW2_LAZY) &&
           h->order == k;
}

/* ---- lazy lists --------------------------------------------------------------- */

static inline unsigned lazy_cap(unsigned slot) {
    return atomic_load_explicit(&P2(lazy_cap)[slot], memory_order_relaxed);
}

/* Used block b (its magic and order right) onto its lazy list. */
static inline void lazy_push(pow2_part_t *pt, pow2_free_t *b, unsigned k) {
    unsigned slot = k - POW2_MIN_ORDER;
    b->hdr.state = POW2_LAZY;
    b->hdr.offset = 0; /* a memalign block's; reused as a plain block */
    dlist_push(&pt->lazy[slot], b);
    pt->lazy_count[slot]++;
    pt->free_bytes += (size_t)1 << k;
}

static inline void lazy_unlink(pow2_part_t *pt, pow2_free_t *b, unsigned k) {
    unsigned slot = k - POW2_MIN_ORDER;
    dlist_unlink(&pt->lazy[slot], b);
    pt->lazy_count[slot]--;
    pt->free_bytes -= (size_t)1 << k;
}

static size_t lazy_total(const pow2_part_t *pt) {
    size_t n = 0;
    for (unsigned s = 0; s < POW2_ORDERS; s++) n += pt->lazy_count[s];
    return n;
}

/* ---- split and merge ---------------------------------------------------------- */

static void part_merge(pow2_part_t *pt, pow2_hdr_t *b, unsigned k);

/* Merge every lazy block of pt (lock held). A merge that frees a whole chunk
 * may flush again from part_whole_chunk; each block is unlinked before it
 * merges and the lists are read afresh, so that nested flush is harmless. */
static TS_NOINLINE void part_flush(pow2_part_t *pt) {
    pt->flushes++;
    for (unsigned s = 0; s < POW2_ORDERS; s++) {
        pow2_free_t *b;
        while ((b = pt->lazy[s]) != NULL) {
            lazy_unlink(pt, b, s + POW2_MIN_ORDER);
            part_merge(pt, &b->hdr, s + POW2_MIN_ORDER);
        }
    }
}

/* Unlink the head of the smallest free list of order >= k (lock held);
 * NULL when none; *order is its order. */
static inline pow2_free_t *take_fit(pow2_part_t *pt, unsigned k, unsigned *order) {
    uint32_t fits = pt->nonempty & (~0u << (k - POW2_MIN_ORDER));
    if (!fits) return NULL;
    unsigned j = (unsigned)__builtin_ctz(fits) + POW2_MIN_ORDER;
    pow2_free_t *b = pt->lists[j - POW2_MIN_ORDER];
    list_unlink(pt, b, j);
    *order = j;
    return b;
}

/* No free block of order >= k (lock held): merge the lazy blocks, which may
 * make one; else a fresh chunk. NULL when the OS refuses more memory. */
static TS_NOINLINE pow2_free_t *part_refill(pow2_part_t *pt, unsigned k, unsigned *order) {
    if (lazy_total(pt)) {
        part_flush(pt);
        pow2_free_t *b = take_fit(pt, k, order);
        if (b) return b;
    }
    pow2_nparts(); /* the settings, read before the heap first grows */
    pow2_heap_enter();
    pow2_free_t *c = P2(chunk_get)((unsigned)(pt - P2(parts)));
    pow2_heap_leave();
    if (c) pt->chunks++;
    *order = POW2_MAX_ORDER;
    return c;
}

/* The buddy path of part_take: a block of order k split from the smallest
 * free block that fits (lock held); NULL when the OS refuses more memory. */
static TS_NOINLINE pow2_hdr_t *part_split(pow2_part_t *pt, unsigned k) {
    unsigned j;
    pow2_free_t *b = take_fit(pt, k, &j);
    if (!b) {
        b = part_refill(pt, k, &j);
        if (!b) return NULL;
    }
    if (j > k) {
        /* Growing again: lazy merging back on. */
        pt->lazy_off = false;
        pt->splits += j - k;
    }
    /* Split: the upper half of each level goes to its list. */
    while (j > k) {
        j--;
        list_push(pt, (pow2_free_t *)((char *)b + ((size_t)1 << j)), j);
    }
    pow2_set_hdr(b, k, POW2_USED, 0);
    pt->used_bytes += (size_t)1 << k;
    pt->used_blocks++;
    return &b->hdr;
}

/* A block of order k from partition pt (lock held): the most recently freed
 * lazy block of that order, else split; NULL when the OS refuses more memory.
 * The lazy hit is the malloc fast path: a list pop and the header. */
static inline pow2_hdr_t *part_take(pow2_part_t *pt, unsigned k) {
    unsigned slot = k - POW2_MIN_ORDER;
    pow2_free_t *b = pt->lazy[slot];
    if (ts_unlikely(!b)) return part_split(pt, k);
    pt->lazy[slot] = b->next;
    if (b->next) b->next->prev = NULL;
    pt->lazy_count[slot]--;
    b->hdr.state = POW2_USED; /* magic, order and offset (0) are already right */
    pt->free_bytes -= (size_t)1 << k;
    pt->used_bytes += (size_t)1 << k;
    pt->used_blocks++;
    return &b->hdr;
}

/* A whole free chunk: keep it as the spare if it is lower than the current
 * one (low chunks stay, so the heap top can go back), else to the pool. A
 * chunk going to the pool means the partition is shrinking: its lazy blocks
 * merge (they may pin other chunks) and frees merge eagerly until it splits
 * a block again. */
static TS_NOINLINE void part_whole_chunk(pow2_part_t *pt, pow2_free_t *c) {
    pow2_free_t *spare = pt->lists[POW2_MAX_ORDER - POW2_MIN_ORDER];
    if (spare && c < spare) {
        list_unlink(pt, spare, POW2_MAX_ORDER);
        list_push(pt, c, POW2_MAX_ORDER);
        c = spare;
    } else if (!spare) {
        list_push(pt, c, POW2_MAX_ORDER);
        return;
    }
    pt->chunks--;
    pow2_heap_enter();
    P2(chunk_put)(c);
    pow2_heap_leave();
    if (!pt->lazy_off) {
        pt->lazy_off = true;
        if (lazy_total(pt)) part_flush(pt);
    }
}

/* Block b of order k into pt's free lists (lock held), merging with free
 * buddies (lazy ones count as in use). */
static TS_NOINLINE void part_merge(pow2_part_t *pt, pow2_hdr_t *b, unsigned k) {
    uintptr_t a = (uintptr_t)b;
    unsigned k0 = k;
    while (k < POW2_MAX_ORDER) {
        uintptr_t buddy = a ^ ((uintptr_t)1 << k);
        if (!is_free_block((void *)buddy, k)) break;
        list_unlink(pt, (pow2_free_t *)buddy, k);
        /* The upper header of the pair stops being a block start. */
        ((pow2_hdr_t *)(a > buddy ? a : buddy))->magic = 0;
        a &= ~((uintptr_t)1 << k);
        k++;
    }
    pt->merges += k - k0;
    if (ts_unlikely(k == POW2_MAX_ORDER))
        part_whole_chunk(pt, (pow2_free_t *)a);
    else
        list_push(pt, (pow2_free_t *)a, k);
}

/* Free used block b of order k into pt (lock held): onto its lazy list while
 * under the watermark (the free fast path), else merged. */
static inline void part_release(pow2_part_t *pt, pow2_hdr_t *b, unsigned k) {
    unsigned slot = k - POW2_MIN_ORDER;
    pt->used_bytes -= (size_t)1 << k;
    pt->used_blocks--;
    if (ts_likely(pt->lazy_count[slot] < lazy_cap(slot) && !pt->lazy_off))
        lazy_push(pt, (pow2_free_t *)b, k);
    else
        part_merge(pt, b, k);
}

/* Grow used block b from order k to k2 in place when every buddy on the way
 * is free or lazy (lock held). Returns the block, which moved down (contents
 * moved with it) when b was an upper buddy; NULL when a buddy is in use. */
static pow2_hdr_t *part_grow(pow2_part_t *pt, pow2_hdr_t *b, unsigned k, unsigned k2) {
    uintptr_t a = (uintptr_t)b;
    for (unsigned j = k; j < k2; j++) {
        if (!is_unused_block((void *)(a ^ ((uintptr_t)1 << j)), j)) return NULL;
        a &= ~((uintptr_t)1 << j);
    }
    a = (uintptr_t)b;
    for (unsigned j = k; j < k2; j++) {
        pow2_free_t *buddy = (pow2_free_t *)(a ^ ((uintptr_t)1 << j));
        if (buddy->hdr.state == POW2_LAZY)
            lazy_unlink(pt, buddy, j);
        else
            list_unlink(pt, buddy, j);
        buddy->hdr.magic = 0;
        a &= ~((uintptr_t)1 << j);
    }
    pt->merges += k2 - k;
    if (a != (uintptr_t)b) {
        b->magic = 0;
        memmove((char *)a + POW2_HDR, (char *)b + POW2_HDR, ((size_t)1 << k) - POW2_HDR);
    }
    pow2_set_hdr((void *)a, k2, POW2_USED, 0);
    pt->used_bytes += ((size_t)1 << k2) - ((size_t)1 << k);
    return (pow2_hdr_t *)a;
}

/* Shrink used block b from order k to k2 in place: the upper halves go to
 * their lists (their buddies are b itself, so nothing merges). */
static void part_shrink(pow2_part_t *pt, pow2_hdr_t *b, unsigned k, unsigned k2) {
    for (unsigned j = k; j > k2;) {
        j--;
        list_push(pt, (pow2_free_t *)((char *)b + ((size_t)1 << j)), j);
    }
    b->order = (uint8_t)k2;
    pt->used_bytes -= ((size_t)1 << k) - ((size_t)1 << k2);
    pt->splits += k - k2;
}

/* ---- the design interface ---------------------------------------------------------- */

/* Fast path (a lazy block of the order): ~45 instructions, lock included;
 * ~65 in the partitioned design (the thread's partition). */
void *P2(malloc)(size_t size) {
    if (ts_unlikely(size > POW2_HEAP_MAX_REQUEST)) return P2(huge_alloc)(size, 0);
    unsigned k = pow2_order_for(size + POW2_HDR);
    pow2_part_t *pt = my_part();
    ts_lock(&pt->lock);
    pow2_hdr_t *b = part_take(pt, k);
    ts_unlock(&pt->lock);
    if (ts_unlikely(!b)) {
        errno = ENOMEM;
        return NULL;
    }
    return (char *)b + POW2_HDR;
}

void *P2(calloc)(size_t total) {
    void *p = P2(malloc)(total);
    /* Huge blocks are fresh mappings, already zero. */
    if (p && total <= POW2_HEAP_MAX_REQUEST) memset(p, 0, total);
    return p;
}

void *P2(memalign)(size_t align, size_t size) {
    /* As if the size were not zero: block + align must stay inside the block
     * (else it is the next block's address, or the chunk's end). */
    if (size == 0) size = 1;
    if (size > POW2_HEAP_MAX_REQUEST || align > POW2_HEAP_MAX_REQUEST - size)
        return P2(huge_alloc)(size, align);
    /* A block of 2^k >= size + align is aligned to 2^k > align: the program
     * gets block + align, with a redirect header just before it. */
    unsigned k = pow2_order_for(size + align);
    pow2_part_t *pt = my_part();
    ts_lock(&pt->lock);
    pow2_hdr_t *b = part_take(pt, k);
    if (b) {
        pow2_set_hdr(b, k, POW2_USED_ALIGNED, (uint32_t)align);
        pow2_set_hdr((char *)b + align - POW2_HDR, k, POW2_REDIRECT, (uint32_t)align);
    }
    ts_unlock(&pt->lock);
    if (!b) {
        errno = ENOMEM;
        return NULL;
    }
    return (char *)b + align;
}

int P2(look_other)(uintptr_t a, unsigned entry, pow2_hdr_t **blk, unsigned *part) {
    pow2_hdr_t *hd = (pow2_hdr_t *)(a - POW2_HDR);
    if (hd->magic != pow2_magic(hd)) return POW2_LOOK_BAD;
    if (hd->state == POW2_FREE || hd->state == POW2_LAZY) return POW2_LOOK_FREE;
    if (hd->state != POW2_REDIRECT) return POW2_LOOK_BAD;
    /* memalign's pointer: the block starts `offset` bytes before it. */
    uintptr_t b = a - hd->offset;
    if (hd->offset < 2 * POW2_HDR || hd->offset >= POW2_CHUNK ||
        (b >> POW2_MAX_ORDER) != ((uintptr_t)hd >> POW2_MAX_ORDER))
        return POW2_LOOK_BAD;
    pow2_hdr_t *bh = (pow2_hdr_t *)b;
    if (bh->magic != pow2_magic(bh) || bh->state != POW2_USED_ALIGNED || bh->offset != hd->offset)
        return POW2_LOOK_BAD;
    return pow2_look_block(bh, entry, blk, part);
}

static TS_NOINLINE void free_slow(void *ptr, int kind) {
    if (kind == POW2_LOOK_NOT_HEAP && P2(huge_free)(ptr)) return;
    if (kind == POW2_LOOK_FREE) _ts_double_free("free", ptr);
    _ts_invalid_pointer("free", ptr);
}

/* Fast path (kept lazy): ~105 instructions: the chunk-map lookup and header
 * checks, the lock, the double-free recheck under it, the lazy push. */
void P2(free)(void *ptr) {
    if (!ptr) return;
    pow2_hdr_t *b;
    unsigned part;
    int kind = pow2_look(ptr, &b, &part);
    if (ts_unlikely(kind != POW2_LOOK_USED)) {
        free_slow(ptr, kind);
        return;
    }
    pow2_part_t *pt = &P2(parts)[part];
    ts_lock(&pt->lock);
    /* Checked again under the lock: two threads freeing one block. */
    if (ts_unlikely(b->state != POW2_USED)) {
        if (b->state != POW2_USED_ALIGNED) {
            ts_unlock(&pt->lock);
            _ts_double_free("free", ptr);
        }
        ((pow2_hdr_t *)ptr - 1)->magic = 0; /* the redirect header */
    }
    part_release(pt, b, b->order);
    ts_unlock(&pt->lock);
}

size_t P2(usable_size)(const void *ptr) {
    pow2_hdr_t *b;
    unsigned part;
    int kind = pow2_look(ptr, &b, &part);
    if (ts_likely(kind == POW2_LOOK_USED))
        return (size_t)((char *)b + ((size_t)1 << b->order) - (const char *)ptr);
    size_t len = kind == POW2_LOOK_NOT_HEAP ? P2(huge_size)(ptr) : 0;
    if (!len) _ts_invalid_pointer("malloc_usable_size", ptr);
    return len;
}

/* Move to a new block: malloc, copy, free. */
static void *realloc_move(void *ptr, size_t old_usable, size_t size) {
    void *q = P2(malloc)(size);
    if (!q) return NULL;
    memcpy(q, ptr, old_usable < size ? old_usable : size);
    P2(free)(ptr);
    return q;
}

static TS_NOINLINE void *realloc_huge(void *ptr, size_t size) {
    size_t len = P2(huge_size)(ptr);
    if (!len) _ts_invalid_pointer("realloc", ptr);
    if (size > POW2_HEAP_MAX_REQUEST) return P2(huge_resize)(ptr, len, size);
    /* Small enough for the heap: move there and unmap; if the heap has no
     * room, shrink the mapping instead (that needs no new memory). */
    void *q = realloc_move(ptr, len, size);
    return q ? q : P2(huge_resize)(ptr, len, size);
}

void *P2(realloc)(void *ptr, size_t size) {
    pow2_hdr_t *b;
    unsigned part;
    int kind = pow2_look(ptr, &b, &part);
    if (kind == POW2_LOOK_NOT_HEAP) return realloc_huge(ptr, size);
    if (ts_unlikely(kind != POW2_LOOK_USED)) _ts_invalid_pointer("realloc", ptr);
    pow2_part_t *pt = &P2(parts)[part];
    ts_lock(&pt->lock);
    if (ts_unlikely(b->state != POW2_USED && b->state != POW2_USED_ALIGNED)) {
        ts_unlock(&pt->lock);
        _ts_invalid_pointer("realloc", ptr);
    }
    unsigned k = b->order;
    size_t usable = (size_t)((char *)b + ((size_t)1 << k) - (char *)ptr);
    if (b->state == POW2_USED && size <= POW2_HEAP_MAX_REQUEST) {
        unsigned k2 = pow2_order_for(size + POW2_HDR);
        pow2_hdr_t *nb = b;
        if (k2 < k)
            part_shrink(pt, b, k, k2);
        else if (k2 > k)
            nb = part_grow(pt, b, k, k2);
        ts_unlock(&pt->lock);
        if (nb) return (char *)nb + POW2_HDR;
    } else {
        ts_unlock(&pt->lock);
        if (size <= usable) return ptr; /* aligned blocks keep their place */
    }
    return realloc_move(ptr, usable, size);
}

int P2(trim)(size_t pad) {
    unsigned n = pow2_nparts();
    /* Lazy blocks merged (whole chunks may result) and spares to the pool,
     * so that the top can go and the rest be purged. */
    for (unsigned i = 0; i < n; i++) {
        pow2_part_t *pt = &P2(parts)[i];
        ts_lock(&pt->lock);
        if (lazy_total(pt)) part_flush(pt);
        pow2_free_t *spare = pt->lists[POW2_MAX_ORDER - POW2_MIN_ORDER];
        if (spare) {
            list_unlink(pt, spare, POW2_MAX_ORDER);
            pt->chunks--;
            pow2_heap_enter();
            P2(chunk_put)(spare);
            pow2_heap_leave();
        }
        ts_unlock(&pt->lock);
    }
    pow2_central_lock();
    bool released = P2(release_top)(true, pad);
    size_t purged = P2(purge_pool)();
    pow2_central_unlock();
    return released || purged ? 1 : 0;
}

void P2(lock_all)(void) {
    unsigned n = pow2_nparts();
    for (unsigned i = 0; i < n; i++) ts_lock(&P2(parts)[i].lock);
    pow2_heap_enter();
}

void P2(unlock_all)(void) {
    unsigned n = pow2_nparts();
    pow2_heap_leave();
    for (unsigned i = n; i-- > 0;) ts_unlock(&P2(parts)[i].lock);
}

void P2(counters)(pow2_counters_t *out) {
    pow2_counters_t c = {0};
    P2(lock_all)();
    unsigned n = pow2_nparts();
    for (unsigned i = 0; i < n; i++) {
        const pow2_part_t *pt = &P2(parts)[i];
        c.splits += pt->splits;
        c.merges += pt->merges;
        c.flushes += pt->flushes;
        for (unsigned s = 0; s < POW2_ORDERS; s++) {
            c.lazy_blocks += pt->lazy_count[s];
            c.lazy_bytes += (size_t)pt->lazy_count[s] << (s + POW2_MIN_ORDER);
        }
    }
    P2(unlock_all)();
    *out = c;
}

void P2(info)(ts_heap_info_t *info) {
    P2(lock_all)();
    unsigned n = pow2_nparts();
    const pow2_central_t *h = &P2(central);
    size_t used = 0, blocks = 0, free_bytes = h->pool_chunks * POW2_CHUNK;
    for (unsigned i = 0; i < n; i++) {
        used += P2(parts)[i].used_bytes;
        blocks += P2(parts)[i].used_blocks;
        free_bytes += P2(parts)[i].free_bytes;
    }
    info->arena = (h->brk_chunks + h->map_chunks) * POW2_CHUNK;
    info->mmapped = h->huge_bytes;
    info->mmapped_count = h->huge_count;
    info->in_use = used - blocks * POW2_HDR;
    info->free = free_bytes;
    info->releasable = P2(releasable)();
    info->peak = h->peak;
    P2(unlock_all)();
}

void P2(atfork_prepare)(void) {
    P2(lock_all)();
}

void P2(atfork_parent)(void) {
    P2(unlock_all)();
}

void P2(atfork_child)(void) {
    for (unsigned i = 0; i < POW2_PART_SLOTS; i++) _ts_lock_reinit(&P2(parts)[i].lock);
    _ts_lock_reinit(&P2(central).lock);
}
