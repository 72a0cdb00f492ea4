/* Page and segment bookkeeping of the fast allocator (through its internals):
 * a page's blocks and counts, the segment map, retiring pages, the full
 * list, alignment and colours, calloc/realloc reuse and statistics. The kept
 * big pages: core_pages_big.c; remote-free batches and free marks:
 * core_pages_remote.c. Each check runs in a fresh thread, so it starts from
 * an empty heap.
 */
#include "core_pages.h"

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
    /* A head page may stay for each of the two classes used (the blocks'
     * and the pointer array's): exact, 2 (2 measured). The 12 pages kept
     * give 12. */
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
    /* Exact by layout: a 4 MiB page holds 9 blocks of the 448 KiB class
     * that 400000 bytes round to; [8, 16) holds it without naming the class. */
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
    /* 63 of the page's 64 blocks came back (measured): 30 is under half
     * that; a page left in the full list gives 0 and a new page (bound 1). */
    CHECK_MSG(back >= 30, "only %d blocks came from the page that was full", back);
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
    /* 16 blocks over 64 sets: 2 a set allows a collision; no colouring
     * puts all 16 in one set. */
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
    /* 16 offsets for 16 pages (measured): 8 is half; no colouring gives 1. */
    CHECK_MSG(offsets_seen >= 8, "16 pages, %zu block-0 offsets", offsets_seen);
    for (size_t i = 0; i < n; i++) free(run_of[i]);
    for (int i = 0; i < CLASSES; i++) free(first[i]);
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
     * of pages whose remote frees are still pending: the worst read is 64
     * measured, the bound 1000 is 15x that. */
    CHECK_MSG(worst <= 1000, "live 8 KiB blocks read as %llu", (unsigned long long)worst);
}

int main(void) {
    free(malloc(1));
    run(one_page);
    run(segment_map);
    run(retire);
    run(hysteresis);
    run(hysteresis_larger);
    test_full_list();
    run(aligned);
    run(colours);
    run(calloc_realloc);
    run(stats_exact);
    stats_while_heads_change();
    printf("ok\n");
    return 0;
}
