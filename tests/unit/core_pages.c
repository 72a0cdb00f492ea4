/* Page and segment bookkeeping of the fast allocator (through its internals).
 * Each check runs in a fresh thread, so it starts from an empty heap.
 */
#include <malloc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "core/internal.h"

static size_t pages_in_use(void) {
    size_t n = 0;
    for (int k = 0; k < TS_KIND_COUNT; k++) n += atomic_load(&_ts_stats.pages[k]);
    return n;
}

static ts_page_t *page_of(void *p) {
    ts_page_t *page = NULL;
    CHECK(_ts_locate(p, &page) == TS_PTR_BLOCK);
    return page;
}

static void run(void *(*fn)(void *)) {
    pthread_t t;
    CHECK(pthread_create(&t, NULL, fn, NULL) == 0);
    CHECK(pthread_join(t, NULL) == 0);
}

/* A fresh page hands out consecutive blocks. While it is the head of its
 * class, malloc does not count `used` and free counts it down from a bias
 * (the exact count is capacity minus the free list's length, when asked); a
 * page that is not the head counts exactly. */
static void *one_page(void *arg) {
    (void)arg;
    void *p[100];
    for (int i = 0; i < 100; i++) p[i] = malloc(40);
    ts_page_t *page = page_of(p[0]);
    CHECK_EQ(page->block_size, 48);
    CHECK_EQ(page->cls, ts_class_of(40));
    CHECK(page->is_head);
    CHECK_EQ(_ts_page_live(page), 100);
    CHECK_EQ(page->used, TS_HEAD_USED_BIAS); /* mallocs on a head do not count */
    CHECK_EQ(ts_page_owner(page), (uintptr_t)_ts_tls_heap | TS_OWNER_HEAD);
    CHECK_EQ(page->state, TS_PAGE_IN_USE);
    for (int i = 0; i < 100; i++) {
        CHECK(page_of(p[i]) == page);
        CHECK_EQ((uintptr_t)p[i], page->start + (uintptr_t)i * 48);
        CHECK_EQ(malloc_usable_size(p[i]), 48);
    }
    for (int i = 0; i < 100; i++) free(p[i]);
    CHECK_EQ(page->used, TS_HEAD_USED_BIAS - 100); /* frees do */
    CHECK_EQ(_ts_page_live(page), 0);              /* the head stays, empty */
    void *q = malloc(33);
    CHECK(page_of(q) == page); /* ... and serves the next request */
    /* After 2^31 frees a head's count reaches 0: it must be biased again, not
     * retired (the page would go back to its segment with blocks in use). */
    void *keep = malloc(33);
    page->used = 1;
    free(q);
    CHECK(page->is_head && page->state == TS_PAGE_IN_USE);
    CHECK_EQ(page->used, TS_HEAD_USED_BIAS);
    CHECK_EQ(_ts_page_live(page), 1);
    q = malloc(33);
    CHECK(page_of(q) == page && q != keep);
    free(q);
    free(keep);

    /* Fill the page: it goes to the full list with every block counted; the
     * next page is the head. Frees into it count exactly. */
    void **all = malloc(page->reserved * sizeof *all);
    uint32_t n = 0;
    for (;;) {
        void *b = malloc(48);
        if (page_of(b) != page) {
            free(b);
            break;
        }
        all[n++] = b;
    }
    CHECK_EQ(n, page->reserved);
    CHECK(page->in_full && !page->is_head && page->used == page->reserved);
    CHECK_EQ(ts_page_owner(page), (uintptr_t)_ts_tls_heap | TS_OWNER_FULL);
    for (uint32_t i = 0; i < 10; i++) free(all[i]);
    CHECK(!page->in_full && !page->is_head);
    CHECK_EQ(page->used, page->reserved - 10);
    CHECK_EQ(ts_page_owner(page), (uintptr_t)_ts_tls_heap);
    for (uint32_t i = 10; i < n; i++) free(all[i]);
    CHECK(page->state != TS_PAGE_IN_USE || ts_page_owner(page) != (uintptr_t)_ts_tls_heap);
    free(all);
    return NULL;
}

/* The segment map names each kind of memory. */
static void *segment_map(void *arg) {
    (void)arg;
    struct {
        size_t size;
        unsigned expect;
    } cases[] = {{1, TS_SHIFT_SMALL},      {8192, TS_SHIFT_SMALL},  {8193, TS_SHIFT_MEDIUM},
                 {65536, TS_SHIFT_MEDIUM}, {65537, TS_SHIFT_BIG},   {524288, TS_SHIFT_BIG},
                 {524289, TS_MAP_LARGE},   {20 << 20, TS_MAP_LARGE}};
    for (unsigned i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *p = malloc(cases[i].size);
        CHECK(p != NULL);
        CHECK_MSG(_ts_segmap[(uintptr_t)p >> TS_SEGMENT_SHIFT] == cases[i].expect,
                  "malloc(%zu): map %u", cases[i].size,
                  _ts_segmap[(uintptr_t)p >> TS_SEGMENT_SHIFT]);
        if (cases[i].expect != TS_MAP_LARGE) {
            ts_segment_t *seg = ts_segment_of(p);
            CHECK_EQ(seg->page_shift, cases[i].expect);
            CHECK(ts_segment_of(p) == seg && (uintptr_t)seg % TS_SEGMENT_SIZE == 0);
            CHECK((uintptr_t)p >= (uintptr_t)seg + TS_SEGMENT_HEADER);
            CHECK(atomic_load(&seg->owner) == _ts_tls_heap);
        }
        memset(p, 1, cases[i].size);
        free(p);
    }
    int local = 0;
    CHECK_EQ(_ts_segmap[(uintptr_t)&local >> TS_SEGMENT_SHIFT], TS_MAP_NONE);
    return NULL;
}

/* Pages that empty go back to their segment at once, except the head. */
static void *retire(void *arg) {
    (void)arg;
    size_t before = pages_in_use();
    enum { N = 64 * 12 };
    void **p = malloc(N * sizeof *p);
    for (int i = 0; i < N; i++) p[i] = malloc(1000); /* 1024-byte class: 64 per page */
    CHECK_MSG(pages_in_use() >= before + 12, "pages %zu -> %zu", before, pages_in_use());
    for (int i = 0; i < N; i++) free(p[i]);
    free(p);
    CHECK_MSG(pages_in_use() <= before + 2, "pages after frees: %zu -> %zu", before,
              pages_in_use());
    return NULL;
}

/* A loop over one block of rotating sizes (the lecture's first program) keeps
 * its pages: no page is retired and re-made on the way. */
static void *hysteresis(void *arg) {
    (void)arg;
    ts_page_t *seen[64] = {0};
    size_t warm = 0;
    size_t dirty = 0;
    for (long i = 0; i < 64 * 2000; i++) {
        size_t n = 8 * (size_t)((i % 64) + 1);
        void *p = malloc(n);
        ts_page_t *page = page_of(p);
        if (!seen[i % 64]) seen[i % 64] = page;
        CHECK_MSG(seen[i % 64] == page, "size %zu moved to another page", n);
        free(p);
        if (i == 63) warm = pages_in_use(), dirty = atomic_load(&_ts_stats.pages[TS_KIND_SMALL]);
    }
    /* Once every size has its page, nothing is retired or made again. */
    CHECK_EQ(pages_in_use(), warm);
    CHECK_EQ(atomic_load(&_ts_stats.pages[TS_KIND_SMALL]), dirty);
    return NULL;
}

/* This thread's heap, made if need be, with no empty page kept. */
static ts_heap_t *trimmed_heap(void) {
    free(malloc(1));
    malloc_trim(0);
    return _ts_tls_heap;
}

/* The heap's kept empty big pages: the one that lingers first in its queue,
 * and those in the slots. */
static int big_kept(ts_page_t *page) {
    ts_heap_t *heap = _ts_tls_heap;
    if (heap->big_linger == page && page->used == 0) return 1;
    for (unsigned i = 0; i < TS_EMPTY_BIG_KEEP; i++)
        if (heap->empty_big[i] == page) return 1;
    return 0;
}

/* The same for medium sizes (pinned heads), and for a big-page size, whose
 * empty page lingers first in its queue, so the next request pops a block
 * from it as from any page. */
static void *hysteresis_larger(void *arg) {
    (void)arg;
    size_t medium[] = {9000, 20000, 33000, 50000, 65536};
    ts_page_t *seen[5] = {0};
    size_t warm = 0;
    for (long i = 0; i < 5 * 400; i++) {
        void *p = malloc(medium[i % 5]);
        ts_page_t *page = page_of(p);
        if (!seen[i % 5]) seen[i % 5] = page;
        CHECK_MSG(seen[i % 5] == page, "size %zu moved to another page", medium[i % 5]);
        free(p);
        if (i == 4) warm = pages_in_use();
    }
    CHECK_EQ(pages_in_use(), warm);
    ts_page_t *big = NULL;
    for (int i = 0; i < 1000; i++) {
        void *p = malloc(100000);
        if (!big) big = page_of(p);
        CHECK_MSG(page_of(p) == big, "a loop over one big block changed pages at %d", i);
        free(p);
        CHECK_MSG(!big->cached && _ts_tls_heap->queue[big->cls].first == big &&
                      _ts_tls_heap->big_linger == big,
                  "an emptied big page left its queue at %d", i);
    }
    /* As many big classes in turn as the heap keeps pages (the slots and the
     * lingering one, with the page above): each keeps its page, none is
     * re-made (with one page kept, every call re-made one). */
    size_t bigs[TS_EMPTY_BIG_KEEP];
    ts_page_t *kept[TS_EMPTY_BIG_KEEP] = {0};
    for (unsigned k = 0; k < TS_EMPTY_BIG_KEEP; k++) bigs[k] = 70000 + (size_t)k * 110000;
    for (int i = 0; i < 400 * TS_EMPTY_BIG_KEEP; i++) {
        unsigned k = (unsigned)i % TS_EMPTY_BIG_KEEP;
        void *p = malloc(bigs[k]);
        ts_page_t *page = page_of(p);
        if (!kept[k]) kept[k] = page;
        CHECK_MSG(kept[k] == page && page->block_size >= bigs[k] &&
                      page->block_size < bigs[k] + bigs[k] / 4,
                  "big size %zu moved to another page at %d", bigs[k], i);
        free(p);
    }
    for (unsigned k = 0; k < TS_EMPTY_BIG_KEEP; k++) {
        CHECK(big_kept(kept[k]) && kept[k] != big);
        for (unsigned j = 0; j < k; j++) CHECK(kept[k] != kept[j]);
    }
    CHECK(big_kept(big));
    CHECK(_ts_tls_heap->empty_big[TS_EMPTY_BIG_KEEP - 1] != NULL); /* every slot taken */
    /* Another big class: the oldest kept page is re-made for it. */
    void *q = malloc(500000);
    ts_page_t *remade = page_of(q);
    CHECK(remade->block_size >= 500000 && !remade->cached);
    CHECK_MSG(remade == big, "the oldest kept page was not re-made");
    free(q);
    /* A page carved in full (4 MiB touched) is not kept beside the others:
     * an idle thread would hold it resident. */
    void *full[16];
    int n = 0;
    ts_page_t *first = NULL;
    for (; n < 16; n++) {
        full[n] = malloc(400000);
        if (!first) first = page_of(full[n]);
        if (page_of(full[n]) != first) break;
    }
    CHECK(n >= 8 && (size_t)first->capacity * first->block_size > TS_EMPTY_BIG_EXTRA_BYTES);
    CHECK(n < 16);
    free(full[n]); /* the next page's block first: `first` then heads its queue */
    for (int i = 0; i < n; i++) free(full[i]);
    CHECK_MSG(!big_kept(first), "a page carved in full was kept");
    return NULL;
}

/* A page in the full list comes back when another thread frees its blocks. */
static void *blocks[200];
static int nblocks;
static void *fill_page(void *arg) {
    (void)arg;
    nblocks = 0;
    ts_page_t *first = NULL;
    for (;;) {
        void *p = malloc(1000);
        if (!first) first = page_of(p);
        blocks[nblocks++] = p;
        if (page_of(p) != first) break; /* the first page went to the full list */
    }
    CHECK(first->in_full && (ts_page_owner(first) & TS_OWNER_FULL));
    return first;
}
static ts_page_t *full_page;
static pthread_barrier_t barrier;
static void *full_then_back(void *arg) {
    (void)arg;
    full_page = fill_page(NULL);
    size_t pages = pages_in_use();
    pthread_barrier_wait(&barrier); /* main frees the full page's blocks */
    pthread_barrier_wait(&barrier);
    int back = 0;
    void *more[200];
    for (int i = 0; i < 130; i++) {
        more[i] = malloc(1000);
        if (page_of(more[i]) == full_page) back++;
    }
    CHECK_MSG(back >= 60, "only %d blocks came from the page that was full", back);
    CHECK_MSG(pages_in_use() <= pages + 1, "pages grew: %zu -> %zu", pages, pages_in_use());
    for (int i = 0; i < 130; i++) free(more[i]);
    free(blocks[nblocks - 1]);
    return NULL;
}
static void test_full_list(void) {
    pthread_barrier_init(&barrier, NULL, 2);
    pthread_t t;
    CHECK(pthread_create(&t, NULL, full_then_back, NULL) == 0);
    pthread_barrier_wait(&barrier);
    for (int i = 0; i < nblocks - 1; i++) free(blocks[i]); /* remote frees */
    malloc_trim(0); /* pushes main's batches of remote frees */
    pthread_barrier_wait(&barrier);
    CHECK(pthread_join(t, NULL) == 0);
    pthread_barrier_destroy(&barrier);
}

/* Aligned requests: every power of two up to 1 MiB, small and large sizes. */
static void *aligned(void *arg) {
    (void)arg;
    size_t sizes[] = {0, 1, 15, 100, 1000, 5000, 70000, 300000, 600000};
    for (size_t align = 32; align <= ((size_t)1 << 20); align *= 2) {
        for (unsigned i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
            void *p = aligned_alloc(align, sizes[i]);
            CHECK_MSG(p != NULL && (uintptr_t)p % align == 0, "aligned_alloc(%zu, %zu) = %p", align,
                      sizes[i], p);
            CHECK(malloc_usable_size(p) >= sizes[i]);
            memset(p, 7, sizes[i]);
            free(p);
        }
    }
    return NULL;
}

/* Page colouring: the blocks 0 of a thread's small classes do not share
 * one cache set (they would all start at offset 0 of pages 64 KiB apart), and
 * every block stays aligned to its size's power-of-two factor. */
static void *colours(void *arg) {
    (void)arg;
    enum { CLASSES = 16 };
    void *first[CLASSES];
    unsigned per_set[64] = {0};
    for (int i = 0; i < CLASSES; i++) {
        size_t size = _ts_classes[i + 1].size; /* 16 .. 512: each its own page */
        CHECK(size <= TS_COLOUR_MAX_BLOCK);
        first[i] = malloc(size);
        ts_page_t *page = page_of(first[i]);
        CHECK_EQ(page->block_size, size);
        CHECK(page->start >= page->base && page->start - page->base < 4096);
        CHECK_EQ((uintptr_t)first[i] % (size & -size), 0);
        CHECK(page->start + (size_t)page->reserved * size <= page->base + page->area);
        per_set[(page->start >> 6) & 63]++; /* block 0's set in a 32 KiB 8-way L1 */
    }
    for (int set = 0; set < 64; set++)
        CHECK_MSG(per_set[set] <= 2, "%u first blocks in cache set %d", per_set[set], set);
    /* 16 pages of one class in a row: their blocks 0 spread out too. */
    static void *run_of[4096 * 16];
    size_t n = 0, pages = 0, offsets_seen = 0;
    uint64_t seen = 0; /* offsets are multiples of 64 below 1 KiB */
    ts_page_t *last = NULL;
    while (pages < 16) {
        void *p = run_of[n++] = malloc(16);
        ts_page_t *page = page_of(p);
        if (page != last) {
            last = page;
            pages++;
            uintptr_t line = (page->start - page->base) / 64;
            CHECK(line < 64);
            if (!(seen & ((uint64_t)1 << line))) offsets_seen++;
            seen |= (uint64_t)1 << line;
        }
    }
    CHECK_MSG(offsets_seen >= 8, "16 pages, %zu block-0 offsets", offsets_seen);
    for (size_t i = 0; i < n; i++) free(run_of[i]);
    for (int i = 0; i < CLASSES; i++) free(first[i]);
    return NULL;
}

/* A thread that frees another thread's blocks holds them in per-page
 * batches until a batch is full: each batch is bounded in bytes, so a thread
 * that then idles keeps little of other threads' memory. */
static void *held_blocks[2000];
static void *free_held(void *arg) {
    (void)arg;
    for (int i = 0; i < 2000; i++) free(held_blocks[i]);
    size_t held = 0, batches = 0;
    const ts_heap_t *heap = _ts_tls_heap;
    for (unsigned i = 0; i < TS_RBATCH_SLOTS; i++)
        if (heap->rbatch[i].page) {
            batches++;
            held += (size_t)heap->rbatch[i].count * heap->rbatch[i].page->block_size;
        }
    CHECK(batches > 0);
    CHECK_MSG(held <= TS_RBATCH_SLOTS * (size_t)TS_RBATCH_MAX_BYTES,
              "an idle freer holds %zu bytes in %zu batches", held, batches);
    return NULL;
}

static void *batch_bytes(void *arg) {
    (void)arg;
    for (int i = 0; i < 2000; i++) held_blocks[i] = malloc(1000 + (size_t)(i % 3) * 8);
    run(free_held);
    return NULL;
}

/* A consumer frees a producer's blocks in the order they were made, cycling
 * through 12 classes (the seed lecture's second program): each page it is
 * working through keeps a batch of its own, so a batch is pushed (one CAS)
 * when it is full, not when another page needs its slot: 31 blocks per push
 * here, where one slot per page index gave 4. A slot by class must not depend
 * on the page's segment: the 8 MiB of blocks spread the classes over several
 * segments, where slots that differed per segment would disagree (checked
 * below). */
enum { CYCLE_CLASSES = 12, CYCLE_BLOCKS = CYCLE_CLASSES * 32 * 160 };
static const size_t cycle_sizes[CYCLE_CLASSES] = {16,  32,  48,  64,  80,  96,
                                                  112, 128, 160, 192, 224, 256};
static void *cycled[CYCLE_BLOCKS];
/* The freeing heap's batches: one slot per open batch, at one of its page's
 * two slots, counted in rbatch_used. Returns the blocks they hold. */
static size_t check_batches(const ts_heap_t *heap) {
    size_t held = 0;
    uint32_t open = 0;
    for (unsigned i = 0; i < TS_RBATCH_SLOTS; i++) {
        const ts_rbatch_t *b = &heap->rbatch[i];
        if (!b->page) {
            CHECK_EQ(b->count, 0);
            continue;
        }
        open++;
        held += b->count;
        CHECK(b->page->rslot == i || b->page->rslot_alt == i);
        for (unsigned j = 0; j < i; j++) CHECK(heap->rbatch[j].page != b->page);
    }
    CHECK_EQ(open, heap->rbatch_used);
    return held;
}

static void *free_cycled(void *arg) {
    (void)arg;
    for (int i = 0; i < CYCLE_BLOCKS; i++) free(cycled[i]);
    const ts_heap_t *heap = _ts_tls_heap;
    size_t held = check_batches(heap);
    CHECK_EQ(heap->remote_frees + held, CYCLE_BLOCKS);
    CHECK_MSG(heap->remote_pushes * 16 <= CYCLE_BLOCKS, "%lu blocks took %lu pushes",
              (unsigned long)heap->remote_frees, (unsigned long)heap->remote_pushes);
    return NULL;
}

static void *batch_slots(void *arg) {
    (void)arg;
    for (int i = 0; i < CYCLE_BLOCKS; i++) cycled[i] = malloc(cycle_sizes[i % CYCLE_CLASSES]);
    /* Each page has two slots; the first is by class, distinct for these 12
     * classes and the same for all pages of a class, in whichever segment. */
    int slot_of[CYCLE_CLASSES];
    const ts_segment_t *first_segment = ts_segment_of(cycled[0]);
    bool segments_differ = false;
    for (int i = 0; i < CYCLE_BLOCKS; i++) {
        ts_page_t *a = page_of(cycled[i]);
        int c = i % CYCLE_CLASSES;
        CHECK(a->rslot != a->rslot_alt);
        if (i < CYCLE_CLASSES) {
            for (int j = 0; j < i; j++) CHECK(slot_of[j] != a->rslot);
            slot_of[c] = a->rslot;
        }
        CHECK_EQ(a->rslot, slot_of[c]);
        segments_differ |= ts_segment_of(cycled[i]) != first_segment;
    }
    CHECK_MSG(segments_differ, "the blocks fit one segment: the case was not tried");
    run(free_cycled);
    return NULL;
}

/* Two streams of one class: a consumer frees blocks i and i + N/2 in turn.
 * Both streams' pages want the same first slot; the one that loses takes
 * its second, and at each page boundary the batch left behind by the
 * finished page must be the one pushed, not the other stream's (pushing the
 * first slot's batch instead made the streams take turns in it, one block
 * per push). */
enum { TWIN_BLOCKS = 50000 };
static void *twin[TWIN_BLOCKS];
static void *free_twins(void *arg) {
    (void)arg;
    for (int i = 0; i < TWIN_BLOCKS / 2; i++) {
        free(twin[i]);
        free(twin[i + TWIN_BLOCKS / 2]);
    }
    const ts_heap_t *heap = _ts_tls_heap;
    CHECK_EQ(heap->remote_frees + check_batches(heap), TWIN_BLOCKS);
    CHECK_MSG(heap->remote_pushes * 24 <= TWIN_BLOCKS, "%lu blocks took %lu pushes",
              (unsigned long)heap->remote_frees, (unsigned long)heap->remote_pushes);
    return NULL;
}

/* A page whose batch had to open in its second slot (the first held another
 * page's batch, still filling) goes back to its first slot, which the fast
 * path tries, once the other batch has not grown for TS_RBATCH_STALE remote
 * frees: the stale batch is pushed and the page's batch moves. */
enum { MOVE_BLOCKS = 2200 };
static void *move_blocks[MOVE_BLOCKS];
static void *move_back(void *arg) {
    (void)arg;
    ts_page_t *first = page_of(move_blocks[0]), *second = page_of(move_blocks[MOVE_BLOCKS - 1]);
    CHECK(first != second && first->rslot == second->rslot); /* one class, one heap */
    int next = MOVE_BLOCKS - 1;
    free(move_blocks[0]);                 /* opens in the shared first slot */
    const ts_heap_t *heap = _ts_tls_heap; /* this thread's heap: made by that free */
    CHECK(heap->rbatch[first->rslot].page == first);
    free(move_blocks[next--]); /* the first slot is taken, not stale: the second */
    CHECK(heap->rbatch[second->rslot_alt].page == second);
    for (int i = 1; i < TS_RBATCH_STALE; i++) free(move_blocks[next--]);
    CHECK(heap->rbatch[second->rslot_alt].page == second); /* first's batch is now stale */
    uint64_t pushes = heap->remote_pushes;
    free(move_blocks[next--]);
    CHECK(heap->rbatch[second->rslot].page == second);
    CHECK(heap->rbatch[second->rslot_alt].page == NULL);
    CHECK_EQ(heap->rbatch[second->rslot].count, TS_RBATCH_STALE + 1);
    CHECK_EQ(heap->remote_pushes, pushes + 1); /* first's one block, pushed */
    CHECK_EQ(heap->remote_frees, 1);
    check_batches(heap);
    for (int i = 1; i <= next; i++) free(move_blocks[i]);
    return NULL;
}

static void *batch_move_back(void *arg) {
    (void)arg;
    for (int i = 0; i < MOVE_BLOCKS; i++) move_blocks[i] = malloc(64);
    run(move_back);
    return NULL;
}

static void *batch_twins(void *arg) {
    (void)arg;
    for (int i = 0; i < TWIN_BLOCKS; i++) twin[i] = malloc(64);
    run(free_twins);
    return NULL;
}

/* calloc zeroes reused memory; realloc keeps a block while it fits. */
static void *calloc_realloc(void *arg) {
    (void)arg;
    for (int i = 0; i < 100; i++) {
        unsigned char *p = malloc(200);
        memset(p, 0xff, 200);
        free(p);
        unsigned char *q = calloc(1, 200);
        for (int k = 0; k < 200; k++) CHECK(q[k] == 0);
        free(q);
    }
    char *p = malloc(100); /* 112-byte class */
    CHECK(realloc(p, 112) == p);
    CHECK(realloc(p, 60) == p);
    char *q = realloc(p, 113);
    CHECK(q != p && malloc_usable_size(q) == 128);
    free(q);
    return NULL;
}

/* Statistics count the calling thread's live blocks exactly, although its
 * head pages do not count them on the fast paths. */
static void *stats_exact(void *arg) {
    (void)arg;
    unsigned c = ts_class_of(200);
    uint64_t before[TS_CLASS_COUNT] = {0}, during[TS_CLASS_COUNT] = {0};
    _ts_segments_live(before);
    enum { N = 1000 };
    void **p = malloc(N * sizeof *p);
    for (int i = 0; i < N; i++) p[i] = malloc(200);
    for (int i = 0; i < N; i += 3) free(p[i]); /* into the head and into full pages */
    _ts_segments_live(during);
    CHECK_EQ(during[c] - before[c], N - (N + 2) / 3);
    for (int i = 0; i < N; i++)
        if (i % 3) free(p[i]);
    memset(during, 0, sizeof during); /* it adds to what it is given */
    _ts_segments_live(during);
    CHECK_EQ(during[c], before[c]);
    free(p);
    return NULL;
}

/* A block freed twice, not twice in a row: its free mark stops the second
 * free before the block is linked again (it used to make the list loop, found
 * only when the head gave its blocks back). */
static void free_twice_apart(void *arg) {
    (void)arg;
    char *volatile a = malloc(64);
    char *volatile b = malloc(64);
    free(a);
    free(b);
    free(a);
    _exit(0); /* not reached */
}

static void *double_free_loop(void *arg) {
    (void)arg;
    CHECK(ts_expect_abort(free_twice_apart, NULL, "tsalloc: free(): double free of 0x"));
    return NULL;
}

/* Bytes of a fresh block the program never wrote may hold free marks of the
 * class that used the page before; copied into another live block (memcpy of
 * uninitialised bytes is allowed) they must not make its free a "double
 * free": a mark is valid only at the block it was made for. */
static void *stale_marks(void *arg) {
    (void)arg;
    enum { N = 12000 };
    static void *small[N], *kept[2000];
    for (int i = 0; i < N; i++) small[i] = malloc(16); /* pages of 16-byte blocks ... */
    for (int i = 0; i < N; i++) free(small[i]);        /* ... retired, still dirty */
    for (int i = 0; i < 2000; i++) {
        unsigned char *a = malloc(32), *b = malloc(32);
        CHECK(a && b);
        memcpy(b, a + 16, 16); /* a's second half was never written */
        free(b);
        kept[i] = a;
    }
    for (int i = 0; i < 2000; i++) free(kept[i]);
    return NULL;
}

/* A record saved with its unwritten padding from inside a block of one class
 * and restored, padding and all, into a block of another class at the same
 * address after the page went back to the first class: the padding may hold
 * the old free mark of exactly that address, which must not count (marks are
 * keyed anew each time a page is set up for a class). */
static void *stale_records(void *arg) {
    (void)arg;
    enum { N = 12000, M = 6000, SLOTS = 1 << 15 };
    static void *small[N];
    static unsigned char *big[M];
    static struct {
        uintptr_t at;
        unsigned char rec[16];
    } saved[SLOTS]; /* open addressing by address */
    for (int i = 0; i < N; i++) small[i] = malloc(16);
    for (int i = 0; i < N; i++) free(small[i]); /* 16-byte pages retired, marks left */
    for (int i = 0; i < M; i++) {
        big[i] = malloc(40); /* 48-byte blocks on those pages */
        CHECK(big[i]);
        memset(big[i], 1, 24); /* the second record's last 8 bytes stay unwritten */
        uintptr_t at = (uintptr_t)(big[i] + 16);
        unsigned h = (unsigned)(at >> 4) & (SLOTS - 1);
        while (saved[h].at) h = (h + 1) & (SLOTS - 1);
        saved[h].at = at;
        memcpy(saved[h].rec, big[i] + 16, 16);
    }
    for (int i = 0; i < M; i++) free(big[i]);
    int restored = 0;
    for (int i = 0; i < N; i++) {
        small[i] = malloc(16);
        CHECK(small[i]);
        for (unsigned h = (unsigned)((uintptr_t)small[i] >> 4) & (SLOTS - 1); saved[h].at;
             h = (h + 1) & (SLOTS - 1))
            if (saved[h].at == (uintptr_t)small[i]) {
                memcpy(small[i], saved[h].rec, 16);
                restored++;
                break;
            }
    }
    CHECK_MSG(restored > 0, "no record landed at its old address: the case was not tried");
    for (int i = 0; i < N; i++) free(small[i]);
    return NULL;
}

/* Statistics read by one thread while another thread's pages keep becoming
 * heads: a reader that saw a page's owner word just before it became head
 * must not take the head's biased `used` for live blocks (it counted about
 * 2^31 of them, a few times in every 10,000 reads). */
static atomic_int churn_stop;
static void *churn_heads(void *arg) {
    (void)arg;
    void *ring[64] = {0};
    for (unsigned i = 0; !atomic_load_explicit(&churn_stop, memory_order_relaxed); i++) {
        /* 8 KiB blocks, 8 to a page: pages fill and the next one becomes head
         * every few mallocs; freeing the oldest brings full pages back. */
        free(ring[i % 64]);
        ring[i % 64] = malloc(8192);
        CHECK(ring[i % 64]);
    }
    for (unsigned k = 0; k < 64; k++) free(ring[k]);
    return NULL;
}

static void stats_while_heads_change(void) {
    pthread_t t;
    CHECK(pthread_create(&t, NULL, churn_heads, NULL) == 0);
    unsigned cls = ts_class_of(8192);
    uint64_t worst = 0;
    for (int reads = 0; reads < 300000; reads++) {
        uint64_t live[TS_CLASS_COUNT] = {0};
        _ts_segments_live(live);
        if (live[cls] > worst) worst = live[cls];
    }
    atomic_store(&churn_stop, 1);
    CHECK(pthread_join(t, NULL) == 0);
    /* 64 blocks live at most, plus the free blocks of the worker's head and
     * of pages whose remote frees are still pending: far below 1000. */
    CHECK_MSG(worst <= 1000, "live 8 KiB blocks read as %llu", (unsigned long long)worst);
}

/* The kept big pages (the slots and the lingering page): which one goes when
 * all are taken, which ones the periodic collection retires (in the slots:
 * those kept since the collection before; the lingering one: when its class
 * was idle since then), that malloc_trim takes them all, and that out of
 * memory a kept page is re-made before malloc gives up. */
TS_HIDDEN void _ts_pages_collect(ts_heap_t *heap, bool force);
#define BIG_KEPT_MAX (TS_EMPTY_BIG_KEEP + 1)
static ts_page_t *keep_big(size_t size) { /* one block of `size`, freed: its page kept */
    void *p = malloc(size);
    CHECK(p != NULL);
    ts_page_t *page = page_of(p);
    free(p);
    CHECK_MSG(big_kept(page) && _ts_tls_heap->big_linger == page,
              "the page of a %zu-byte block was not kept", size);
    return page;
}
static void *big_slots(void *arg) {
    (void)arg;
    ts_heap_t *heap = trimmed_heap();
    CHECK(heap->empty_big[0] == NULL && heap->big_linger == NULL);
    ts_page_t *pg[BIG_KEPT_MAX + 1];
    void *live = malloc(70000 + BIG_KEPT_MAX * 90000); /* its page empties last */
    CHECK(live != NULL);
    pg[BIG_KEPT_MAX] = page_of(live);
    for (unsigned k = 0; k < BIG_KEPT_MAX; k++) pg[k] = keep_big(70000 + (size_t)k * 90000);
    CHECK(heap->empty_big[0] == pg[0]); /* the lingering page before went to a slot */
    free(live);                         /* kept too: all were taken, so the oldest goes */
    CHECK_MSG(!big_kept(pg[0]), "with every place taken the oldest page stayed kept");
    for (unsigned k = 1; k <= BIG_KEPT_MAX; k++) CHECK(big_kept(pg[k]));
    CHECK(heap->big_linger == pg[BIG_KEPT_MAX]);
    /* Collection: a page in a slot since the last collection goes; one that
     * was taken and kept again since stays. The lingering page stays while
     * its class is in use. */
    _ts_pages_collect(heap, false);
    CHECK(big_kept(pg[1]) && big_kept(pg[2]));
    CHECK_MSG(big_kept(pg[BIG_KEPT_MAX]), "the lingering page of a class in use was retired");
    ts_page_t *again = keep_big(70000 + 90000); /* pg[1]'s class: taken, kept again */
    CHECK(again == pg[1]);
    _ts_pages_collect(heap, false);
    CHECK_MSG(big_kept(pg[1]), "a page kept again after the last collection was retired");
    for (unsigned k = 2; k < BIG_KEPT_MAX; k++)
        CHECK_MSG(!big_kept(pg[k]), "a page idle since the last collection stayed kept");
    CHECK(big_kept(pg[BIG_KEPT_MAX])); /* in a slot since pg[1] lingers, not seen yet */
    _ts_pages_collect(heap, false);    /* pg[1]'s class idle since the last one */
    CHECK_MSG(!big_kept(pg[1]) && heap->big_linger == NULL,
              "the lingering page of an idle class stayed");
    keep_big(70000); /* kept since no collection */
    malloc_trim(0);
    CHECK_MSG(heap->empty_big[0] == NULL && heap->big_linger == NULL,
              "malloc_trim left a kept page");
    /* A page touched in full, kept alone, then re-made for another class
     * with one block carved: its memory is still resident, so beside other
     * kept pages it is not kept again. */
    void *fill[64];
    int nfill = 0;
    fill[nfill++] = malloc(400000);
    ts_page_t *whole = page_of(fill[0]);
    while (nfill < 64 && (uint32_t)nfill < whole->reserved) CHECK((fill[nfill++] = malloc(400000)));
    CHECK(page_of(fill[nfill - 1]) == whole && whole->capacity == whole->reserved);
    for (int i = 0; i < nfill; i++) free(fill[i]);
    CHECK(heap->big_linger == whole && big_kept(whole));
    /* Classes other than whole's (400000's) and 500000's, one per place left. */
    static const size_t others[] = {160000, 250000, 340000, 70000};
    _Static_assert(sizeof others / sizeof others[0] == BIG_KEPT_MAX - 1, "one per place");
    for (unsigned k = 0; k < BIG_KEPT_MAX - 1; k++) keep_big(others[k]);
    CHECK(heap->empty_big[0] == whole && heap->empty_big[TS_EMPTY_BIG_KEEP - 1] != NULL);
    void *other = malloc(500000); /* a class with no kept page: the oldest, `whole`, is re-made */
    CHECK(page_of(other) == whole && whole->capacity == 1);
    free(other);
    CHECK_MSG(!big_kept(whole), "a re-made page touched in full was kept beside others");
    malloc_trim(0);
    /* Out of memory: no new segment, but kept pages are re-made. */
    keep_big(70000);
    keep_big(200000);
    static void *held[4096];
    int n = 0;
    _ts_os_test_fail(TS_OS_FAIL_MMAP, 0, -1);
    while (n < 4096 && (held[n] = malloc(400000)) != NULL) n++;
    _ts_os_test_fail(0, 0, 0);
    CHECK(n < 4096);
    CHECK_MSG(heap->empty_big[0] == NULL && heap->big_linger == NULL,
              "malloc failed while empty big pages were kept");
    for (int i = 0; i < n; i++) free(held[i]);
    malloc_trim(0);
    /* Out of memory for a medium page: the kept big pages' segments are
     * given up for it before malloc fails. */
    keep_big(70000);
    keep_big(200000);
    n = 0;
    _ts_os_test_fail(TS_OS_FAIL_MMAP, 0, -1);
    while (n < 4096 && (held[n] = malloc(60000)) != NULL) n++;
    _ts_os_test_fail(0, 0, 0);
    CHECK(n < 4096);
    CHECK_MSG(heap->empty_big[0] == NULL && heap->big_linger == NULL,
              "a medium malloc failed while big pages were kept");
    for (int i = 0; i < n; i++) free(held[i]);
    malloc_trim(0);
    return NULL;
}

/* ---- the lingering big page: cases the tests above leave open ---- */

/* Carve a whole big page of `size` blocks, free them all: it lingers. */
static ts_page_t *linger_full(size_t size) {
    void *b[16];
    int n = 0;
    b[n++] = malloc(size);
    ts_page_t *pg = page_of(b[0]);
    while ((uint32_t)n < pg->reserved && n < 16) b[n++] = malloc(size);
    CHECK((uint32_t)n == pg->reserved);
    CHECK(pg->touched > TS_EMPTY_BIG_EXTRA_BYTES);
    for (int i = 0; i < n; i++) free(b[i]);
    return pg;
}

/* A page carved in full must not be kept beside the lingering page
 * (no slot taken): two whole pages resident in an idle thread. */
static void *two_whole(void *arg) {
    (void)arg;
    ts_heap_t *heap = trimmed_heap();
    ts_page_t *a = linger_full(400000);
    CHECK(heap->big_linger == a && heap->empty_big[0] == NULL);
    ts_page_t *b = linger_full(300000);
    int whole = 0;
    if (heap->big_linger && heap->big_linger->used == 0 &&
        heap->big_linger->touched > TS_EMPTY_BIG_EXTRA_BYTES)
        whole++;
    for (int i = 0; i < TS_EMPTY_BIG_KEEP; i++)
        if (heap->empty_big[i] && heap->empty_big[i]->touched > TS_EMPTY_BIG_EXTRA_BYTES) whole++;
    CHECK_MSG(whole <= 1, "two pages carved in full kept (%p, %p)", (void *)a, (void *)b);
    malloc_trim(0);
    return NULL;
}

/* Mallocs served by the quick pop count for their class: a collection
 * after a loop over one big size keeps its lingering page. */
static void *loop_counts(void *arg) {
    (void)arg;
    ts_heap_t *heap = trimmed_heap();
    unsigned cls = ts_class_of(256 * 1024);
    free(malloc(256 * 1024));
    uint64_t before = heap->alloc_class[cls];
    _ts_pages_collect(heap, false);
    for (int i = 0; i < 100; i++) free(malloc(256 * 1024));
    CHECK_MSG(heap->alloc_class[cls] == before + 100, "quick pops not counted: %llu",
              (unsigned long long)(heap->alloc_class[cls] - before));
    _ts_pages_collect(heap, false);
    CHECK_MSG(heap->big_linger != NULL, "the lingering page of a class in use was retired");
    malloc_trim(0);
    return NULL;
}

/* A lingering page that is in use again must not go to a slot when
 * another page lingers (its live block would then be "freed twice"). */
static void *linger_in_use(void *arg) {
    (void)arg;
    ts_heap_t *heap = trimmed_heap();
    free(malloc(100000));
    ts_page_t *l = heap->big_linger;
    void *p = malloc(100000); /* from the lingering page */
    CHECK(page_of(p) == l);
    free(malloc(300000)); /* another page lingers */
    CHECK_MSG(!l->cached, "a page with a live block went to a slot");
    free(p);
    malloc_trim(0);
    return NULL;
}

/* Big classes on malloc's inline path: the class's head is the first page of
 * its queue, malloc counts `used` exactly there, and the lingering page that
 * a free empties again stays only within the bound of page_emptied: once
 * more than TS_EMPTY_BIG_EXTRA_BYTES of it was carved, with another page
 * kept in a slot, it is retired. */
static void *big_inline(void *arg) {
    (void)arg;
    ts_heap_t *heap = trimmed_heap();
    free(malloc(100000)); /* lingers first... */
    ts_page_t *a = heap->big_linger;
    free(malloc(300000)); /* ...then goes to a slot when this one lingers */
    ts_page_t *b = heap->big_linger;
    CHECK(a && b && a != b && heap->empty_big[0] == a);
    unsigned cls = b->cls;
    void *p[5];
    for (int i = 0; i < 5; i++) {
        p[i] = malloc(300000);
        CHECK(page_of(p[i]) == b);
        CHECK_EQ(b->used, (uint32_t)i + 1);
        CHECK(heap->head[cls] == heap->queue[cls].first);
    }
    CHECK((size_t)b->touched > TS_EMPTY_BIG_EXTRA_BYTES);
    for (int i = 0; i < 5; i++) free(p[i]);
    CHECK_MSG(!big_kept(b), "a lingering page carved past the bound was kept beside a slot's");
    CHECK(heap->head[cls] == (heap->queue[cls].first ? heap->queue[cls].first : &_ts_page_empty));
    /* The inline path's class at each 16 KiB step, with a block ready in the
     * class just above (where a step's size would land if the table were off
     * by one). */
    for (size_t n = TS_CLASS_BY_256_MAX + 16384; n < TS_CLASS_MAX_SIZE; n += 16384) {
        void *above = malloc(n + 1), *ready = malloc(n + 1);
        free(ready);
        void *q = malloc(n);
        CHECK_MSG(malloc_usable_size(q) == _ts_classes[ts_class_of(n)].size, "malloc(%zu)", n);
        free(q);
        free(above);
    }
    malloc_trim(0);
    return NULL;
}

/* A big page that empties behind another in its queue is not kept. */
static void *behind(void *arg) {
    (void)arg;
    ts_heap_t *heap = trimmed_heap();
    void *b[16];
    int n = 0;
    b[n++] = malloc(500000);
    ts_page_t *first = page_of(b[0]);
    while (n < 16 && page_of(b[n - 1]) == first) b[n++] = malloc(500000);
    CHECK(page_of(b[n - 1]) != first);          /* first is full: a second page took over */
    for (int i = 0; i < n - 1; i++) free(b[i]); /* first comes back behind the second */
    CHECK_MSG(heap->big_linger != first || first->used != 0,
              "a page emptied behind another in its queue lingers");
    free(b[n - 1]);
    malloc_trim(0);
    return NULL;
}

/* A big request that adopts a dead thread's segment on its way (which only
 * means "look again") leaves the kept big pages alone. */
static void *leave_block(void *arg) {
    *(void **)arg = malloc(100); /* live at exit: the segment is abandoned */
    return NULL;
}
static void *adopt_keeps(void *arg) {
    (void)arg;
    trimmed_heap();
    ts_page_t *kept = keep_big(70000);
    size_t adopted = atomic_load(&_ts_stats.adopted);
    void *left = NULL;
    pthread_t t;
    CHECK(pthread_create(&t, NULL, leave_block, &left) == 0);
    CHECK(pthread_join(t, NULL) == 0);
    void *p = malloc(200000);
    CHECK(p != NULL && left != NULL);
    CHECK_MSG(atomic_load(&_ts_stats.adopted) > adopted, "no segment was adopted: no test");
    CHECK_MSG(big_kept(kept) && page_of(p) != kept, "an adoption re-made a kept big page");
    free(p);
    free(left);
    malloc_trim(0);
    return NULL;
}

int main(void) {
    free(malloc(1));
    run(one_page);
    run(segment_map);
    run(retire);
    run(hysteresis);
    run(hysteresis_larger);
    run(big_slots);
    run(adopt_keeps);
    run(two_whole);
    run(loop_counts);
    run(linger_in_use);
    run(big_inline);
    run(behind);
    test_full_list();
    run(aligned);
    run(colours);
    run(batch_bytes);
    run(batch_slots);
    run(batch_twins);
    run(batch_move_back);
    run(calloc_realloc);
    run(stats_exact);
    run(double_free_loop);
    run(stale_marks);
    run(stale_records);
    stats_while_heads_change();
    printf("ok\n");
    return 0;
}
