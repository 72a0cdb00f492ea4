/* The hardened build's checks (TS_SECURE=1, libtsalloc-secure; docs/secure.md).
 * The design functions _ts_secure_* wrap the core's (_ts_core_*, built from
 * the same sources with encoded free-list links, secure.h):
 *
 * - Canary: every block is asked of the core 8 bytes larger; its last word
 *   (the trailer) holds the slack between the request's end and itself, with
 *   a check value made of the slack, the block's address and a secret. Up to
 *   16 slack bytes after the request hold TS_SLACK_BYTE. free, realloc and
 *   malloc_usable_size check both: "heap overflow after block".
 * - Quarantine: a freed block is zeroed but for its second word (a mark made
 *   of its address and a secret) and waits in its heap's ring
 *   (TSALLOC_QUARANTINE bytes, TS_QUARANTINE_SLOTS blocks) before the core
 *   gets it; leaving, it must still read so: "use after free". A block freed
 *   again while it waits carries the mark: "double free".
 * - Zero-size requests get a unique address in a reserved inaccessible
 *   region; free accepts it.
 * - Sized delete: the size must be the one asked for.
 *
 * Invariants: a pointer is proven a live block of ours (segment map, block
 * boundary, not free, not quarantined) before its trailer is read. A heap's
 * quarantine is touched by its thread only, or by whoever abandons the heap
 * once that thread is gone. No locks of its own; the region of zero-size
 * blocks is reserved once (CAS).
 */
#include "core/fastpath.h"
#include "core/internal.h"

#include <errno.h>
#include <string.h>

#include "base/options.h"
#include "designs/design.h"

TS_DESIGN_DECLARE(core)
TS_DESIGN_DECLARE(secure)
TS_HIDDEN void _ts_secure_free_sized(void *p, size_t size);

#define TS_PAD        ((size_t)8) /* the trailer */
#define TS_SLACK_BYTE 0xc5        /* slack bytes after the request */
#define TS_SLACK_FILL ((size_t)16)
#define TS_ZERO_SPAN  ((size_t)64 << 20) /* region of zero-size blocks */
/* Large blocks from this size on are zeroed by purging their OS pages. */
#define TS_ZERO_PURGE_MIN ((uintptr_t)4096)

/* An extension of a page (page.c) carves at most 8 KiB of blocks of 16 bytes
 * and more; more would be linked in address order past this many. */
#define TS_SHUFFLE_MAX 512

static _Atomic int ready;            /* 0 -> 1 (one thread sets up) -> 2 */
static uint64_t secret;              /* canaries, quarantine marks, link keys */
static _Atomic uint64_t carve_count; /* varies the order of successive carvings */
static size_t quarantine_max;
static _Atomic uintptr_t zero_base;
static _Atomic uintptr_t zero_next;

static uint64_t mix64(uint64_t x) {
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static TS_NOINLINE void secure_init(void) {
    int expect = 0;
    if (atomic_compare_exchange_strong(&ready, &expect, 1)) {
        _ts_process_init();
        secret = _ts_os_random() | 1;
        ts_option_origin_t origin;
        quarantine_max = (size_t)_ts_option_env(TS_OPTID_QUARANTINE, &origin);
        atomic_store_explicit(&ready, 2, memory_order_release);
        return;
    }
    while (atomic_load_explicit(&ready, memory_order_acquire) != 2) _ts_os_yield();
}

TS_INLINE void secure_ready(void) {
    if (ts_unlikely(atomic_load_explicit(&ready, memory_order_acquire) != 2)) secure_init();
}

/* ---- encoded free-list links (secure.h) ------------------------------------- */

void _ts_secure_bad_link(const char *func, const void *block) {
    _ts_fatal("%s(): corrupted free list at block %p", func, block);
}

ts_block_t *_ts_secure_link_any(const ts_page_t *page, const ts_block_t *block, const char *func) {
    uintptr_t next = (uintptr_t)block->next ^ (uintptr_t)block ^ page->link_key;
    if (!next) return NULL;
    ts_page_t *np = NULL;
    if (_ts_locate((void *)next, &np) != TS_PTR_BLOCK || ts_page_state(np) != TS_PAGE_IN_USE ||
        !ts_page_block_ok(np, next))
        _ts_secure_bad_link(func, block);
    return (ts_block_t *)next;
}

void _ts_secure_page_init(ts_page_t *page) {
    secure_ready();
    page->link_key = mix64(page->mark_key ^ secret);
    page->link_lo = page->start;
    page->link_span = page->reserved * page->block_size;
}

/* Link n fresh blocks from `first` in a random order (a Fisher-Yates
 * shuffle of their indices). */
void _ts_secure_carve(ts_page_t *page, char *first, uint32_t n) {
    uint16_t order[TS_SHUFFLE_MAX];
    uint32_t bs = page->block_size;
    ts_assert(n >= 1 && n <= TS_SHUFFLE_MAX);
    uint32_t m = n < TS_SHUFFLE_MAX ? n : TS_SHUFFLE_MAX;
    uint64_t r = mix64(page->link_key ^ atomic_fetch_add(&carve_count, 1));
    for (uint32_t i = 0; i < m; i++) order[i] = (uint16_t)i;
    for (uint32_t i = m - 1; i > 0; i--) {
        r = mix64(r + 0x9e3779b97f4a7c15ull);
        uint32_t j = (uint32_t)((r >> 32) * (i + 1) >> 32);
        uint16_t t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
    ts_block_t *next = NULL;
    for (uint32_t i = n; i-- > 0;) {
        ts_block_t *b = (ts_block_t *)(first + (size_t)(i < m ? order[i] : i) * bs);
        ts_link_set(page, b, next);
        ts_block_mark(page, b);
        next = b;
    }
    page->free = next;
}

/* ---- canaries ------------------------------------------------------------------ */

static uint64_t *trailer_of(void *p, size_t cap) {
    return (uint64_t *)((char *)p + cap - TS_PAD);
}

static uint32_t check_of(const void *p, uint64_t slack) {
    return (uint32_t)(mix64((uintptr_t)p ^ secret) >> 32) ^ (uint32_t)slack;
}

/* p holds `size` bytes of a block of `cap` (the core's usable size). */
static void seal(void *p, size_t size, size_t cap) {
    uint64_t slack = cap - TS_PAD - size;
    char *end = (char *)p + size;
    memset(end, TS_SLACK_BYTE, slack < TS_SLACK_FILL ? slack : TS_SLACK_FILL);
    *trailer_of(p, cap) = slack << 32 | check_of(p, slack);
}

/* The size asked for p, a live block of `cap` bytes; aborts when anything
 * past it changed. */
static size_t unseal(const char *func, void *p, size_t cap) {
    uint64_t w = *trailer_of(p, cap);
    uint64_t slack = w >> 32;
    if ((uint32_t)w != check_of(p, slack) || slack > cap - TS_PAD)
        _ts_fatal("%s(): heap overflow after block %p (size %zu)", func, p, cap - TS_PAD);
    size_t size = cap - TS_PAD - slack;
    const unsigned char *end = (const unsigned char *)p + size;
    for (size_t i = 0; i < slack && i < TS_SLACK_FILL; i++)
        if (end[i] != TS_SLACK_BYTE)
            _ts_fatal("%s(): heap overflow after block %p (size %zu)", func, p, size);
    return size;
}

/* ---- zero-size blocks -------------------------------------------------------------- */

static bool is_zero_block(const void *p) {
    uintptr_t base = atomic_load_explicit(&zero_base, memory_order_acquire);
    return base && (uintptr_t)p - base < TS_ZERO_SPAN;
}

/* A unique address in an inaccessible region (reused after 4 Mi requests). */
static void *zero_alloc(void) {
    uintptr_t base = atomic_load_explicit(&zero_base, memory_order_acquire);
    if (!base) {
        void *r = _ts_os_map(TS_ZERO_SPAN);
        if (!r || !_ts_os_protect(r, TS_ZERO_SPAN, false)) {
            if (r) _ts_os_unmap(r, TS_ZERO_SPAN);
            errno = ENOMEM;
            return NULL;
        }
        _ts_os_name(r, TS_ZERO_SPAN, "tsalloc-zero-size");
        uintptr_t expect = 0;
        if (!atomic_compare_exchange_strong(&zero_base, &expect, (uintptr_t)r))
            _ts_os_unmap(r, TS_ZERO_SPAN);
        base = atomic_load(&zero_base);
    }
    uintptr_t off = atomic_fetch_add_explicit(&zero_next, 16, memory_order_relaxed);
    return (void *)(base + off % TS_ZERO_SPAN);
}

/* ---- checking a pointer ------------------------------------------------------------ */

static uint64_t qmark_of(const void *p) {
    return mix64((uintptr_t)p ^ ~secret) | 1;
}

/* The core's usable size of p after proving it a live block; a pointer that
 * is not one goes to the core's own checks, which abort with their message. */
static size_t live_block(const char *func, void *p, ts_page_t **pagep) {
    ts_page_t *page = NULL;
    switch (_ts_locate(p, &page)) {
    case TS_PTR_FOREIGN:
        _ts_invalid_pointer(func, p);
    case TS_PTR_LARGE:
        *pagep = NULL;
        return _ts_large_usable(p, func);
    default:
        break;
    }
    size_t cap = _ts_block_usable(page, p, func); /* invalid pointer, double free */
    if (((uint64_t *)p)[1] == qmark_of(p)) _ts_double_free(func, p);
    *pagep = page;
    return cap;
}

/* ---- quarantine ------------------------------------------------------------------- */

/* A block leaving quarantine must read as it was left: zero, and its mark. */
static void quarantine_check(void *p, size_t cap) {
    const uint64_t *w = p;
    uint64_t acc = w[0] | (w[1] ^ qmark_of(p));
    for (size_t i = 2; i < cap / 8; i++) acc |= w[i];
    if (acc) _ts_fatal("use after free: block %p written after free", p);
    ((uint64_t *)p)[1] = 0;
}

static void quarantine_release(ts_quarantine_t *q) {
    void *p = q->slot[q->first];
    q->first = (q->first + 1) % TS_QUARANTINE_SLOTS;
    q->count--;
    ts_page_t *page = NULL;
    (void)_ts_locate(p, &page);
    size_t cap = page->block_size;
    q->bytes -= cap;
    quarantine_check(p, cap);
    _ts_core_free(p);
}

void _ts_secure_heap_flush(ts_heap_t *heap) {
    ts_quarantine_t *q = &heap->quarantine;
    while (q->count) quarantine_release(q);
}

/* p: a live class block (or NULL page: large) of cap bytes, checked. */
static void retire(void *p, ts_page_t *page, size_t cap) {
    if (page || cap < 2 * TS_ZERO_PURGE_MIN) {
        memset(p, 0, cap);
    } else { /* a large block: its whole OS pages are given back instead */
        uintptr_t lo = ts_align_up((uintptr_t)p, TS_ZERO_PURGE_MIN);
        uintptr_t hi = ((uintptr_t)p + cap) & ~(TS_ZERO_PURGE_MIN - 1);
        memset(p, 0, lo - (uintptr_t)p);
        if (!_ts_os_purge((void *)lo, hi - lo)) memset((void *)lo, 0, hi - lo);
        memset((void *)hi, 0, (uintptr_t)p + cap - hi);
    }
    ts_heap_t *heap = _ts_tls_heap;
    size_t max = quarantine_max;
    if (!page || heap->state != TS_HEAP_ACTIVE || cap > max / 4) {
        _ts_core_free(p);
        return;
    }
    ((uint64_t *)p)[1] = qmark_of(p);
    ts_quarantine_t *q = &heap->quarantine;
    while (q->count && (q->count == TS_QUARANTINE_SLOTS || q->bytes + cap > max))
        quarantine_release(q);
    q->slot[(q->first + q->count) % TS_QUARANTINE_SLOTS] = p;
    q->count++;
    q->bytes += cap;
}

/* ---- the design functions ---------------------------------------------------------- */

/* The core's usable size of a block it just handed out for `asked` bytes. */
static size_t fresh_cap(void *p, size_t asked) {
    if (asked <= TS_CLASS_MAX_SIZE) return _ts_classes[ts_class_of(asked)].size;
    return _ts_large_usable(p, "malloc");
}

void *_ts_secure_malloc(size_t size) {
    secure_ready();
    if (ts_unlikely(size == 0)) return zero_alloc();
    if (ts_unlikely(size > (size_t)PTRDIFF_MAX - TS_PAD)) {
        errno = ENOMEM;
        return NULL;
    }
    void *p = ts_core_malloc_inline(size + TS_PAD);
    if (ts_unlikely(!p)) return NULL;
    ((uint64_t *)p)[0] = 0; /* the encoded link: the rest was zeroed when freed */
    seal(p, size, fresh_cap(p, size + TS_PAD));
    return p;
}

static void secure_free(const char *func, void *p, size_t expect) {
    if (!p) return;
    secure_ready();
    if (is_zero_block(p)) {
        if (expect != SIZE_MAX && expect != 0)
            _ts_fatal("%s(): size %zu does not match block %p (size 0)", func, expect, p);
        return;
    }
    ts_page_t *page;
    size_t cap = live_block(func, p, &page);
    size_t size = unseal(func, p, cap);
    if (expect != SIZE_MAX && expect != size)
        _ts_fatal("%s(): size %zu does not match block %p (size %zu)", func, expect, p, size);
    retire(p, page, cap);
}

void _ts_secure_free(void *p) {
    secure_free("free", p, SIZE_MAX);
}

void _ts_secure_free_sized(void *p, size_t size) {
    secure_free("operator delete", p, size);
}

void *_ts_secure_calloc(size_t total) {
    secure_ready();
    if (total == 0) return zero_alloc();
    if (total > (size_t)PTRDIFF_MAX - TS_PAD) {
        errno = ENOMEM;
        return NULL;
    }
    void *p = _ts_alloc_aligned(total + TS_PAD, 0, true);
    if (!p) return NULL;
    seal(p, total, fresh_cap(p, total + TS_PAD));
    return p;
}

void *_ts_secure_memalign(size_t align, size_t size) {
    secure_ready();
    if (size > (size_t)PTRDIFF_MAX - TS_PAD) {
        errno = ENOMEM;
        return NULL;
    }
    void *p = _ts_core_memalign(align, size + TS_PAD);
    if (!p) return NULL;
    ts_page_t *page;
    ((uint64_t *)p)[0] = 0;
    ((uint64_t *)p)[1] = 0;
    seal(p, size, live_block("memalign", p, &page));
    return p;
}

void *_ts_secure_realloc(void *p, size_t size) {
    secure_ready();
    if (is_zero_block(p)) return _ts_secure_malloc(size);
    ts_page_t *page;
    size_t cap = live_block("realloc", p, &page);
    size_t old = unseal("realloc", p, cap);
    if (size <= cap - TS_PAD && (size >= (cap - TS_PAD) / 2 || cap <= 64)) {
        if (size > old) memset((char *)p + old, 0, size - old);
        seal(p, size, cap);
        return p;
    }
    void *q = _ts_secure_malloc(size);
    if (!q) return NULL;
    memcpy(q, p, old < size ? old : size);
    retire(p, page, cap);
    return q;
}

size_t _ts_secure_usable_size(const void *cp) {
    void *p = (void *)cp;
    secure_ready();
    if (is_zero_block(p)) return 0;
    ts_page_t *page;
    return unseal("malloc_usable_size", p, live_block("malloc_usable_size", p, &page));
}

int _ts_secure_trim(size_t pad) {
    secure_ready();
    ts_heap_t *heap = _ts_tls_heap;
    if (heap->state == TS_HEAP_ACTIVE) _ts_secure_heap_flush(heap);
    return _ts_core_trim(pad);
}

void _ts_secure_info(ts_heap_info_t *info) {
    _ts_core_info(info);
}

void _ts_secure_atfork_prepare(void) {
    _ts_core_atfork_prepare();
}

void _ts_secure_atfork_parent(void) {
    _ts_core_atfork_parent();
}

void _ts_secure_atfork_child(void) {
    _ts_core_atfork_child();
}
