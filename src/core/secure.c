/* The hardened build's checks (TS_SECURE=1, libtsalloc-secure; docs/secure.md).
 * The design functions _ts_secure_* wrap the core's (_ts_core_*, built from
 * the same sources with encoded free-list links, secure.h); their fast
 * paths are in secure_fast.h.
 *
 * - Canary: every block is asked of the core 8 bytes larger; its last word
 *   (the trailer) holds the slack between the request's end and itself, with
 *   a check of the slack, the block's address and a secret; up to 8 slack
 *   bytes after the request hold a pattern. free, realloc,
 *   malloc_usable_size and sized delete check both: "heap overflow".
 * - Kinds: the check of a block of operator new is mixed with TS_KIND_NEW,
 *   of new[] with TS_KIND_ARRAY. delete refuses a block of new[] and
 *   delete[] any other; with TSALLOC_DEALLOC_MISMATCH (the default) free
 *   and realloc refuse the blocks of new and new[], and delete those of
 *   malloc.
 * - Quarantine: a freed class block is zeroed (its first
 *   TSALLOC_ZERO_ON_FREE bytes) but for its second word, a mark of its
 *   address and a secret, and waits in its heap's ring (TSALLOC_QUARANTINE
 *   bytes, TS_QUARANTINE_SLOTS blocks, blocks up to half of it) before the
 *   core gets it; leaving, it must still read so: "use after free". A block
 *   freed again while it waits carries the mark: "double free".
 * - Large blocks: their last OS page is an inaccessible guard; freed, they
 *   are kept inaccessible for TS_LARGE_QUARANTINE more frees (purged past
 *   TS_LARGE_RESIDENT bytes), and malloc may take an older one back whole,
 *   its guard still in place (one mprotect).
 * - Segments: their last OS page is an inaccessible guard.
 * - Fresh blocks of a page are linked in a random order.
 * - Zero-size requests get a unique address in a reserved inaccessible
 *   region; free accepts it. Sized delete: the size must be the one asked.
 *
 * Invariants: a pointer is proven a live block of ours (segment map, block
 * boundary, not free, not quarantined) before its trailer is read. A heap's
 * quarantine is touched by its thread only, or by whoever abandons the heap
 * once that thread is gone. Lock order: large_q's spin lock is a leaf (no
 * call while it is held); fork takes it before the core's locks.
 */
#include "core/secure_fast.h"
#include "core/internal.h"
#include "core/valgrind.h"

#include <errno.h>
#include <string.h>

#include "base/options.h"
#include "designs/design.h"

TS_DESIGN_DECLARE(core)
TS_DESIGN_DECLARE(secure)
TS_HIDDEN void _ts_secure_free_sized(void *p, size_t size, bool array);
TS_HIDDEN void *_ts_secure_new(size_t size);
TS_HIDDEN void *_ts_secure_new_array(size_t size);
TS_HIDDEN void _ts_secure_tag(void *p, bool array);
TS_HIDDEN void _ts_secure_delete(void *p);
TS_HIDDEN void _ts_secure_delete_array(void *p);

/* What malloc_usable_size accepts: a block of any kind. */
#define KIND_ANY UINT64_MAX
/* A trailer whose check matches no kind: overwritten. */
#define KIND_NONE (UINT64_MAX - 1)

#define TS_ZERO_SPAN ((size_t)64 << 20) /* region of zero-size blocks */
/* A large block's last OS page is its guard: inaccessible. */
#define TS_GUARD ((size_t)4096)
/* Freed large blocks kept inaccessible before the core gets them; they stay
 * resident meanwhile while those that do hold at most TS_LARGE_RESIDENT
 * bytes, the others are purged. */
#define TS_LARGE_QUARANTINE 8
#define TS_LARGE_RESIDENT   ((size_t)8 << 20)
/* The large blocks freed last, never handed out again from the quarantine. */
#define TS_LARGE_KEEP 4

/* An extension of a page (page.c) carves at most 8 KiB of blocks of 16 bytes
 * and more; more would be linked in address order past this many. */
#define TS_SHUFFLE_MAX 512

static _Atomic int ready;            /* 0 -> 1 (one thread sets up) -> 2 */
uint64_t _ts_secure_secret;          /* canaries, quarantine marks, link keys */
static _Atomic uint64_t carve_count; /* varies the order of successive carvings */
size_t _ts_secure_quarantine_max;
size_t _ts_secure_zero_max;
static bool dealloc_check; /* TSALLOC_DEALLOC_MISMATCH */
uint32_t _ts_secure_slot_cap[TS_DIRECT_SLOTS];
static _Atomic uintptr_t zero_base;
static _Atomic uintptr_t zero_next;

/* Freed large blocks, purged and inaccessible, oldest at `first`. A leaf
 * lock: nothing is called while it is held. */
static struct {
    ts_spinlock_t lock;
    void *slot[TS_LARGE_QUARANTINE];
    size_t cap[TS_LARGE_QUARANTINE]; /* the block's bytes before its guard */
    bool own[TS_LARGE_QUARANTINE];   /* no ts_heap_new heap's: malloc may take it */
    bool res[TS_LARGE_QUARANTINE];   /* not purged: counts in `resident` */
    size_t resident;
    unsigned first, count;
} large_q = {.lock = TS_SPINLOCK_INIT};

static TS_NOINLINE void secure_init(void) {
    int expect = 0;
    if (atomic_compare_exchange_strong(&ready, &expect, 1)) {
        _ts_process_init();
        _ts_secure_secret = _ts_os_random() | 1;
        ts_option_origin_t origin;
        _ts_secure_quarantine_max = (size_t)_ts_option_env(TS_OPTID_QUARANTINE, &origin);
        for (unsigned s = 0; s < TS_DIRECT_SLOTS; s++)
            _ts_secure_slot_cap[s] = _ts_classes[ts_class_of(s * 16)].size;
        _ts_secure_zero_max = (size_t)_ts_option_env(TS_OPTID_ZERO_ON_FREE, &origin);
        dealloc_check = _ts_option_env(TS_OPTID_DEALLOC_MISMATCH, &origin) != 0;
        _ts_secure_scan_init();
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
    page->link_key = ts_mix64(page->mark_key ^ _ts_secure_secret);
    page->link_lo = page->start;
    page->link_span = page->reserved * page->block_size;
    if (page->zero_bs != page->block_size) { /* another layout: its blocks are not ours */
        page->zero_bs = page->block_size;
        page->zero_end = 0;
    }
}

void _ts_secure_segment_guard(void *seg) {
    char *guard = (char *)seg + TS_SEGMENT_SIZE - TS_SEGMENT_GUARD;
    if (!_ts_os_protect(guard, TS_SEGMENT_GUARD, false))
        _ts_verbose(1, "segment %p: no guard page (the OS refused)", seg);
}

/* Segments slid by up to this many (5 bits of randomness beyond ASLR). */
#define TS_RESERVE_SLIDE 32

char *_ts_secure_reserve(unsigned n) {
    size_t seg = TS_SEGMENT_SIZE, slide = (size_t)(_ts_os_random() % TS_RESERVE_SLIDE);
    char *r = _ts_os_reserve_aligned((n + TS_RESERVE_SLIDE - 1) * seg, seg);
    if (!r) return _ts_os_reserve_aligned(n * seg, seg); /* no room to slide: as the kernel gives */
    if (slide) _ts_os_unmap(r, slide * seg);
    if (slide + 1 < TS_RESERVE_SLIDE)
        _ts_os_unmap(r + (slide + n) * seg, (TS_RESERVE_SLIDE - 1 - slide) * seg);
    return r + slide * seg;
}

/* Link n fresh blocks from `first` in a random order (a Fisher-Yates
 * shuffle of their indices). Blocks over memory written before (below the
 * page's `touched`: an earlier layout's blocks, zeroed only up to
 * TSALLOC_ZERO_ON_FREE) get their first TSALLOC_ZERO_ON_FREE bytes zeroed,
 * as freed blocks have. */
void _ts_secure_carve(ts_page_t *page, char *first, uint32_t n) {
    uint16_t order[TS_SHUFFLE_MAX];
    uint32_t bs = page->block_size;
    ts_assert(n >= 1 && n <= TS_SHUFFLE_MAX);
    uint32_t m = n < TS_SHUFFLE_MAX ? n : TS_SHUFFLE_MAX;
    uint64_t r = ts_mix64(page->link_key ^ atomic_fetch_add(&carve_count, 1));
    for (uint32_t i = 0; i < m; i++) order[i] = (uint16_t)i;
    for (uint32_t i = m - 1; i > 0; i--) {
        r = ts_mix64(r + 0x9e3779b97f4a7c15ull);
        uint32_t j = (uint32_t)((r >> 32) * (i + 1) >> 32);
        uint16_t t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
    uintptr_t clean = page->base + page->touched; /* zero from here on */
    uintptr_t same = page->base + page->zero_end; /* freed blocks of this layout below */
    size_t zero = bs < _ts_secure_zero_max ? bs : _ts_secure_zero_max;
    char *end = first + (size_t)n * bs;
    for (char *b = first; b < end && (uintptr_t)b < clean; b += bs) {
        if ((uintptr_t)b + bs > same)
            memset(b, 0, zero);
        else if (bs >= TS_SWEEP_MIN_BLOCK)
            ((uint64_t *)b)[2] = 0; /* a swept tag (sweep.c); words 0 and 1 are set below */
    }
    if ((uintptr_t)end - page->base > page->zero_end)
        page->zero_end = (uint32_t)((uintptr_t)end - page->base);
    ts_block_t *next = NULL;
    for (uint32_t i = n; i-- > 0;) {
        ts_block_t *b = (ts_block_t *)(first + (size_t)(i < m ? order[i] : i) * bs);
        ts_link_set(page, b, next);
        ts_block_mark(page, b);
        next = b;
    }
    page->free = next;
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

static TS_NORETURN void overflow(const char *func, void *p, size_t size) {
    _ts_fatal("%s(): heap overflow after block %p (size %zu)", func, p, size);
}

/* The core's usable size of p after proving it a live block (*pagep: its
 * page, NULL for a large block); a pointer that is not one aborts with the
 * core's message (invalid pointer, double free). */
static size_t live_block(const char *func, void *p, ts_page_t **pagep) {
    ts_page_t *page = NULL;
    switch (_ts_locate(p, &page)) {
    case TS_PTR_FOREIGN:
        _ts_invalid_pointer(func, p);
    case TS_PTR_LARGE:
        *pagep = NULL;
        ts_spin_lock(&large_q.lock);
        for (unsigned i = 0; i < large_q.count; i++)
            if (large_q.slot[(large_q.first + i) % TS_LARGE_QUARANTINE] == p) {
                ts_spin_unlock(&large_q.lock);
                _ts_double_free(func, p);
            }
        ts_spin_unlock(&large_q.lock);
        return _ts_large_usable(p, func) - TS_GUARD;
    default:
        break;
    }
    size_t cap = _ts_block_usable(page, p, func);
    if (((uint64_t *)p)[1] == ts_secure_qmark(page, p)) _ts_double_free(func, p); /* quarantined */
    *pagep = page;
    return cap;
}

/* The kind of p, a live block of cap bytes, whose check its trailer
 * carries (0, TS_KIND_NEW or TS_KIND_ARRAY), or KIND_NONE. */
static uint64_t block_kind(void *p, size_t cap) {
    uint64_t w = *ts_secure_trailer(p, cap);
    uint32_t kind = (uint32_t)w ^ ts_secure_check(p, w >> 32);
    return kind == 0 || kind == TS_KIND_NEW || kind == TS_KIND_ARRAY ? kind : KIND_NONE;
}

/* A block of `kind` given to func, which takes blocks of `want`: delete
 * and delete[] never take each other's blocks; free, realloc and delete
 * take those of malloc and new from each other unless
 * TSALLOC_DEALLOC_MISMATCH. */
static void kind_check(const char *func, void *p, uint64_t want, uint64_t kind) {
    if (want == KIND_ANY || kind == want) return;
    if (want == TS_KIND_ARRAY) _ts_fatal("%s(): block %p was not allocated by new[]", func, p);
    if (kind == TS_KIND_ARRAY) {
        if (want == TS_KIND_NEW || dealloc_check)
            _ts_fatal("%s(): block %p was allocated by new[]", func, p);
        return;
    }
    if (!dealloc_check) return;
    if (want == TS_KIND_NEW) _ts_fatal("%s(): block %p was not allocated by new", func, p);
    _ts_fatal("%s(): block %p was allocated by new", func, p);
}

/* The size asked for a live block of cap bytes, of kind `want` (KIND_ANY:
 * any); aborts on an overflow or a block of a kind func refuses
 * (kind_check). The size named is the capacity when the trailer itself was
 * overwritten. */
static size_t sealed_size(const char *func, void *p, size_t cap, uint64_t want) {
    uint64_t kind = block_kind(p, cap);
    if (kind == KIND_NONE) overflow(func, p, cap - TS_PAD);
    size_t size = ts_secure_sealed_size_as(p, cap, (uint32_t)kind);
    if (size == SIZE_MAX) { /* the slack changed, or its length is impossible */
        uint64_t slack = *ts_secure_trailer(p, cap) >> 32;
        overflow(func, p, slack <= cap - TS_PAD ? cap - TS_PAD - slack : cap - TS_PAD);
    }
    kind_check(func, p, want, kind);
    return size;
}

/* ---- quarantine ------------------------------------------------------------------- */

/* A block of page leaving quarantine must read as it was left: its zeroed
 * bytes zero, and its mark. */
static void quarantine_check(const ts_page_t *page, void *p, size_t cap) {
    uint64_t *w = p;
    uint64_t acc = w[1] ^ ts_secure_qmark(page, p);
    w[1] = 0;                         /* for the scan */
    size_t n = ts_secure_zeroed(cap); /* a multiple of 16 */
    if (n <= 128) {                   /* most blocks: unrolled */
        acc |= w[0];
        if (n > 16) acc |= w[2] | w[3];
        if (n > 32) acc |= w[4] | w[5];
        if (n > 48) acc |= w[6] | w[7];
        if (n > 64) acc |= w[8] | w[9];
        if (n > 80) acc |= w[10] | w[11];
        if (n > 96) acc |= w[12] | w[13];
        if (n > 112) acc |= w[14] | w[15];
    } else {
        acc |= _ts_secure_or_words((uintptr_t)p, (uintptr_t)p + n); /* secure_scan.c */
    }
    if (acc) _ts_fatal("use after free: block %p written after free", p);
}

static void quarantine_release(ts_quarantine_t *q) {
    void *p = q->slot[q->first];
    size_t cap = q->cap[q->first];
    q->first = (q->first + 1) % TS_QUARANTINE_SLOTS;
    q->count--;
    q->bytes -= cap;
    uintptr_t u = (uintptr_t)p;
    unsigned shift = atomic_load_explicit(&_ts_segmap[u >> TS_SEGMENT_SHIFT], memory_order_relaxed);
    ts_page_t *page = ts_page_of(ts_segment_of(p), p, shift);
    quarantine_check(page, p, cap);
    ts_free_block(page, p, ts_mark_of(page, p)); /* checked when it came in */
}

void _ts_secure_heap_flush(ts_heap_t *heap) {
    ts_quarantine_t *q = &heap->quarantine;
    while (q->count) quarantine_release(q);
}

/* Room for one more block of cap bytes: the oldest blocks leave, down to
 * TS_QUARANTINE_BATCH free slots, or as many as the bytes need. */
void _ts_secure_quarantine_make_room(ts_quarantine_t *q, size_t cap) {
    size_t max = _ts_secure_quarantine_max;
    while (q->count &&
           (q->count > TS_QUARANTINE_SLOTS - TS_QUARANTINE_BATCH || q->bytes + cap > max))
        quarantine_release(q);
}

/* A large block of cap bytes before its guard: zeroed (its first
 * TSALLOC_ZERO_ON_FREE bytes, as class blocks, while the resident ones of
 * the large quarantine stay within TS_LARGE_RESIDENT; else whole, by giving
 * its pages back), made inaccessible, and kept in the large quarantine; the
 * oldest there goes to the core, accessible again, guard and all. */
static void retire_large(void *p, size_t cap) {
    ts_spin_lock(&large_q.lock);
    bool res = large_q.resident + cap <= TS_LARGE_RESIDENT;
    if (res) large_q.resident += cap; /* taken back below if the OS refuses */
    ts_spin_unlock(&large_q.lock);
    if (res)
        memset(p, 0, cap < _ts_secure_zero_max ? cap : _ts_secure_zero_max);
    else if (!_ts_os_purge(p, cap))
        memset(p, 0, cap);
    bool kept = _ts_os_protect(p, cap, false);
    bool own = _ts_large_owned_size(p, NULL) != 0;
    void *old = NULL;
    size_t old_cap = 0;
    ts_spin_lock(&large_q.lock);
    if (kept && large_q.count == TS_LARGE_QUARANTINE) {
        old = large_q.slot[large_q.first];
        old_cap = large_q.cap[large_q.first];
        if (large_q.res[large_q.first]) large_q.resident -= old_cap;
        large_q.first = (large_q.first + 1) % TS_LARGE_QUARANTINE;
        large_q.count--;
    }
    if (kept) {
        unsigned at = (large_q.first + large_q.count) % TS_LARGE_QUARANTINE;
        large_q.slot[at] = p;
        large_q.cap[at] = cap;
        large_q.own[at] = own;
        large_q.res[at] = res;
        large_q.count++;
    } else if (res) {
        large_q.resident -= cap;
    }
    ts_spin_unlock(&large_q.lock);
    if (!kept) { /* the OS refused (out of mappings): straight back */
        old = p;
        old_cap = cap;
    }
    if (old) {
        if (!_ts_os_protect(old, old_cap + TS_GUARD, true))
            _ts_fatal("free(): cannot make large block %p accessible again", old);
        _ts_core_free(old);
    }
}

/* A block of the large quarantine for `size` bytes, or NULL: the oldest
 * that fits without wasting more than a quarter, among all but the
 * TS_LARGE_KEEP freed last (no immediate reuse). Its guard page never left,
 * so one mprotect makes it usable again (three on the core's way: the
 * release, the new block's guard, the next retire). Its first bytes were
 * zeroed when it was retired (or all of it, purged). */
static void *large_reuse(size_t size) {
    size_t need = size + TS_PAD;
    void *p = NULL;
    size_t cap = 0;
    ts_spin_lock(&large_q.lock);
    for (unsigned i = 0; i + TS_LARGE_KEEP < large_q.count; i++) {
        unsigned at = (large_q.first + i) % TS_LARGE_QUARANTINE;
        if (!large_q.own[at] || large_q.cap[at] < need || large_q.cap[at] - need > need / 4)
            continue;
        p = large_q.slot[at];
        cap = large_q.cap[at];
        if (large_q.res[at]) large_q.resident -= cap;
        for (; i + 1 < large_q.count; i++) { /* close the gap */
            unsigned to = (large_q.first + i) % TS_LARGE_QUARANTINE;
            unsigned from = (to + 1) % TS_LARGE_QUARANTINE;
            large_q.slot[to] = large_q.slot[from];
            large_q.cap[to] = large_q.cap[from];
            large_q.own[to] = large_q.own[from];
            large_q.res[to] = large_q.res[from];
        }
        large_q.count--;
        break;
    }
    ts_spin_unlock(&large_q.lock);
    if (!p) return NULL;
    if (!_ts_os_protect(p, cap, true))
        _ts_fatal("malloc(): cannot make large block %p accessible again", p);
    if (_ts_secure_zero_max < 16) memset(p, 0, 16); /* retire zeroed none */
    ts_secure_seal(p, size, cap);
    return p;
}

/* A large block for `size` bytes just made: its last OS page becomes its
 * guard (when the OS refuses, the page stays accessible: it is left unused
 * all the same, and the canary still covers the block). */
static void *guard_large(void *p, size_t size) {
    size_t cap = _ts_large_usable(p, "malloc") - TS_GUARD;
    if (!_ts_os_protect((char *)p + cap, TS_GUARD, false))
        _ts_verbose(1, "large block %p: no guard page (the OS refused)", p);
    ts_secure_seal(p, size, cap);
    return p;
}

void _ts_secure_free_rest(void *p, ts_page_t *page, size_t cap) {
    ts_secure_zero(p, cap);
    ts_heap_t *heap = _ts_tls_heap;
    if (heap->state == TS_HEAP_ACTIVE && cap <= _ts_secure_quarantine_max / 2)
        ts_secure_quarantine(heap, p, cap, ts_secure_qmark(page, p));
    else
        ts_free_block(page, p, ts_mark_of(page, p));
}

static void retire(void *p, ts_page_t *page, size_t cap) {
    if (!page) {
        retire_large(p, cap);
        return;
    }
    ts_secure_zero(p, cap);
    ts_heap_t *heap = _ts_tls_heap;
    if (heap->state == TS_HEAP_ACTIVE && cap <= _ts_secure_quarantine_max / 2)
        ts_secure_quarantine(heap, p, cap, ts_secure_qmark(page, p));
    else
        _ts_core_free(p);
}

/* ---- the design functions ---------------------------------------------------------- */

static bool too_big(size_t size) {
    if (ts_likely(size <= (size_t)PTRDIFF_MAX - TS_PAD - TS_GUARD)) return false;
    errno = ENOMEM;
    return true;
}

void *_ts_secure_malloc_slow(size_t size) {
    if (ts_vg_core_routes()) return _ts_vg_core_alloc(size, 0, false);
    secure_ready();
    if (size == 0) return zero_alloc();
    if (too_big(size)) return NULL;
    size_t asked = size + TS_PAD;
    if (asked > TS_CLASS_MAX_SIZE) {
        void *p = large_reuse(size);
        if (p) return p;
        p = ts_core_malloc_inline(asked + TS_GUARD);
        if (!p) return NULL;
        /* A region from the large cache may start inside an earlier block,
         * past the bytes zeroed when that one was freed. */
        memset(p, 0, ts_secure_zeroed(size + TS_PAD));
        return guard_large(p, size);
    }
    void *p = ts_core_malloc_inline(asked);
    if (ts_unlikely(!p)) return NULL;
    size_t cap = _ts_classes[ts_class_of(asked)].size;
    ((uint64_t *)p)[0] = 0; /* the encoded link: the rest was zeroed when freed */
    if (cap >= TS_SWEEP_MIN_BLOCK) ((uint64_t *)p)[2] = 0; /* and a swept tag (sweep.c) */
    ts_secure_seal(p, size, cap);
    return p;
}

void *_ts_secure_malloc(size_t size) {
    return ts_secure_malloc_inline(size);
}

static void secure_free(const char *func, void *p, size_t expect, uint64_t kind) {
    if (!p) return;
    if (ts_vg_active() && _ts_vg_core_free(p)) return;
    secure_ready();
    if (is_zero_block(p)) {
        if (expect != SIZE_MAX && expect != 0)
            _ts_fatal("%s(): size %zu does not match block %p (size 0)", func, expect, p);
        return;
    }
    ts_page_t *page;
    size_t cap = live_block(func, p, &page);
    size_t size = sealed_size(func, p, cap, kind);
    if (expect != SIZE_MAX && expect != size)
        _ts_fatal("%s(): size %zu does not match block %p (size %zu)", func, expect, p, size);
    retire(p, page, cap);
}

void _ts_secure_free_slow(void *p) {
    secure_free("free", p, SIZE_MAX, 0);
}

void _ts_secure_free(void *p) {
    ts_secure_free_inline(p);
}

void _ts_secure_delete_slow(void *p) {
    secure_free("operator delete", p, SIZE_MAX, TS_KIND_NEW);
}

void _ts_secure_delete_array_slow(void *p) {
    secure_free("operator delete[]", p, SIZE_MAX, TS_KIND_ARRAY);
}

/* The C++ shim's operator delete and delete[] (override_cxx.cpp). */
void _ts_secure_delete(void *p) {
    ts_secure_free_as(p, TS_KIND_NEW, _ts_secure_delete_slow);
}

void _ts_secure_delete_array(void *p) {
    ts_secure_free_as(p, TS_KIND_ARRAY, _ts_secure_delete_array_slow);
}

void _ts_secure_free_sized(void *p, size_t size, bool array) {
    if (array)
        secure_free("operator delete[]", p, size, TS_KIND_ARRAY);
    else
        secure_free("operator delete", p, size, TS_KIND_NEW);
}

/* The C++ shim's operator new and new[] (override_cxx.cpp): a block sealed
 * as theirs (NULL when the core has none: the shim's new-handler loop
 * follows, then _ts_secure_tag). */
void *_ts_secure_new(size_t size) {
    return ts_secure_malloc_as(size, TS_KIND_NEW);
}

void *_ts_secure_new_array(size_t size) {
    return ts_secure_malloc_as(size, TS_KIND_ARRAY);
}

/* A block of malloc's kind made for operator new (its aligned forms, and
 * new's way through the new-handler) or new[]: its trailer marked as
 * theirs. Zero-size blocks have no trailer (and so no kind). */
void _ts_secure_tag(void *p, bool array) {
    if (ts_vg_core_routes() || is_zero_block(p)) return;
    ts_page_t *page;
    size_t cap = live_block(array ? "operator new[]" : "operator new", p, &page);
    uint64_t *t = ts_secure_trailer(p, cap), slack = *t >> 32;
    *t = slack << 32 | (ts_secure_check(p, slack) ^ (array ? TS_KIND_ARRAY : TS_KIND_NEW));
}

void *_ts_secure_new_slow(size_t size, uint32_t kind) {
    void *p = _ts_secure_malloc_slow(size);
    if (p) _ts_secure_tag(p, kind == TS_KIND_ARRAY);
    return p;
}

void *_ts_secure_calloc(size_t total) {
    if (ts_vg_core_routes()) return _ts_vg_core_alloc(total, 0, true);
    secure_ready();
    if (total == 0) return zero_alloc();
    if (too_big(total)) return NULL;
    /* Every block comes zero through its first TSALLOC_ZERO_ON_FREE bytes
     * (zeroed when freed, or fresh, or cleared when carved): malloc's then. */
    if (total <= (_ts_secure_zero_max & ~(size_t)15)) return _ts_secure_malloc(total);
    size_t asked = total + TS_PAD;
    if (asked > TS_CLASS_MAX_SIZE) {
        void *p = _ts_alloc_aligned(asked + TS_GUARD, 0, true);
        return p ? guard_large(p, total) : NULL;
    }
    void *p = _ts_alloc_aligned(asked, 0, true);
    if (!p) return NULL;
    ts_secure_seal(p, total, _ts_classes[ts_class_of(asked)].size);
    return p;
}

void *_ts_secure_memalign(size_t align, size_t size) {
    if (ts_vg_core_routes()) return _ts_vg_core_alloc(size, align, false);
    secure_ready();
    if (too_big(size)) return NULL;
    size_t asked = size + TS_PAD;
    if (_ts_class_aligned(asked, align) >= TS_CLASS_COUNT) {
        void *p = _ts_core_memalign(align, asked + TS_GUARD);
        if (!p) return NULL;
        memset(p, 0, ts_secure_zeroed(size + TS_PAD)); /* as malloc's */
        return guard_large(p, size);
    }
    void *p = _ts_core_memalign(align, asked);
    if (!p) return NULL;
    ts_page_t *page;
    ((uint64_t *)p)[0] = 0;
    ((uint64_t *)p)[1] = 0;
    size_t cap = live_block("memalign", p, &page);
    if (cap >= TS_SWEEP_MIN_BLOCK) ((uint64_t *)p)[2] = 0; /* a swept tag (sweep.c) */
    ts_secure_seal(p, size, cap);
    return p;
}

void *_ts_secure_realloc(void *p, size_t size) {
    if (ts_vg_core_routes()) return _ts_vg_core_realloc(p, size);
    secure_ready();
    if (is_zero_block(p)) return _ts_secure_malloc(size);
    if (too_big(size)) return NULL;
    ts_page_t *page;
    size_t cap = live_block("realloc", p, &page);
    size_t old = sealed_size("realloc", p, cap, 0);
    size_t room = cap - TS_PAD;
    if (size <= room && (size >= room / 2 || cap <= 64)) {
        if (size > old) memset((char *)p + old, 0, size - old);
        ts_secure_seal_as(p, size, cap, (uint32_t)block_kind(p, cap));
        return p;
    }
    if (!page && size + TS_PAD > TS_CLASS_MAX_SIZE) {
        /* Large to large: the core moves or grows the pages (mremap), the
         * guard made accessible first so that no hole travels with them. */
        if (!_ts_os_protect((char *)p + cap, TS_GUARD, true))
            _ts_fatal("realloc(): cannot make the guard of %p accessible", p);
        void *q = _ts_core_realloc(p, size + TS_PAD + TS_GUARD);
        if (q) return guard_large(q, size);
        (void)_ts_os_protect((char *)p + cap, TS_GUARD, false);
        return NULL;
    }
    void *q = _ts_secure_malloc(size);
    if (!q) return NULL;
    memcpy(q, p, old < size ? old : size);
    retire(p, page, cap);
    return q;
}

size_t _ts_secure_usable_size(const void *cp) {
    void *p = (void *)cp;
    if (ts_vg_core_routes()) return _ts_vg_core_usable(p);
    secure_ready();
    if (is_zero_block(p)) return 0;
    ts_page_t *page;
    size_t cap = live_block("malloc_usable_size", p, &page);
    return sealed_size("malloc_usable_size", p, cap, KIND_ANY);
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

/* fork: the large quarantine's lock too, so the child finds it free. */
void _ts_secure_atfork_prepare(void) {
    ts_spin_lock(&large_q.lock);
    _ts_core_atfork_prepare();
}

void _ts_secure_atfork_parent(void) {
    _ts_core_atfork_parent();
    ts_spin_unlock(&large_q.lock);
}

void _ts_secure_atfork_child(void) {
    _ts_core_atfork_child();
    ts_spin_init(&large_q.lock);
}
