/* The fast allocator's kept empty big pages (through its internals): the
 * slots, the big page that lingers first in its queue, and adoption of a
 * segment holding them. Each check runs in a fresh thread, so it starts from
 * an empty heap.
 */
#include <sys/mman.h>

#include "core_pages.h"

/* The kept big pages (the slots and the lingering page): which one goes when
 * all are taken, which ones the periodic collection retires (in the slots:
 * those kept since the collection before; the lingering one: when its class
 * was idle since then), that malloc_trim takes them all, and that out of
 * memory a kept page is re-made before malloc gives up. */
TS_HIDDEN void _ts_pages_collect(ts_heap_t *heap, bool force);
#define BIG_KEPT_MAX (TS_EMPTY_BIG_KEEP + 1)
static size_t resident_pages(void *addr, size_t len) { /* OS pages of [addr, +len) in RAM */
    static unsigned char vec[TS_SEGMENT_SIZE / 4096];
    CHECK(len <= sizeof vec * 4096 && mincore(addr, len, vec) == 0);
    size_t n = 0;
    for (size_t i = 0; i < (len + 4095) / 4096; i++) n += vec[i] & 1;
    return n;
}
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
    /* A page carved in full, kept alone, then re-made for another class:
     * what the old class touched goes back first (the new blocks' OS pages
     * seldom line up with the old ones), so only the new block's carving is
     * resident, and beside other kept pages it is kept again. */
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
    CHECK_MSG(resident_pages((void *)whole->base, whole->area) <= 2,
              "a page re-made for another class kept the old class's memory resident");
    free(other);
    CHECK_MSG(big_kept(whole), "a re-made page with one block carved was not kept");
    malloc_trim(0);
    /* Out of memory: no new segment, but kept pages are re-made. */
    keep_big(70000);
    keep_big(200000);
    static void *held[4096];
    int n = 0;
    _ts_os_test_fail(TS_OS_FAIL_MMAP, 0, -1);
    while (n < 4096 && (held[n] = malloc(400000)) != NULL) n++;
    _ts_os_test_fail(0, 0, 0);
    CHECK(n < 4096); /* not a measure: malloc must fail before the array ends */
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

/* A thread that leaves big blocks live at exit, so that its segment is
 * abandoned: one, or (full) every block of its first page. */
typedef struct left_big {
    size_t size;
    int full, n;
    void *p[64];
} left_big_t;
static void *leave_big(void *arg) {
    left_big_t *l = arg;
    do {
        CHECK((l->p[l->n++] = malloc(l->size)) != NULL);
    } while (l->full && l->n < 64 && page_of(l->p[l->n - 1])->used < page_of(l->p[0])->reserved);
    CHECK(page_of(l->p[l->n - 1]) == page_of(l->p[0]));
    return NULL;
}
static void free_left(left_big_t *l) {
    for (int i = 0; i < l->n; i++) free(l->p[i]);
}
/* A big request that adopts a dead thread's segment on its way, its own
 * class's page but full (which only means "look again"), leaves the kept
 * big pages alone. */
static void *adopt_keeps(void *arg) {
    (void)arg;
    trimmed_heap();
    ts_page_t *kept = keep_big(70000);
    size_t adopted = atomic_load(&_ts_stats.adopted);
    left_big_t left = {200000, 1, 0, {0}};
    pthread_t t;
    CHECK(pthread_create(&t, NULL, leave_big, &left) == 0);
    CHECK(pthread_join(t, NULL) == 0);
    void *p = malloc(200000);
    CHECK(p != NULL && page_of(p) != page_of(left.p[0]));
    CHECK_MSG(atomic_load(&_ts_stats.adopted) > adopted, "no segment was adopted: no test");
    CHECK_MSG(big_kept(kept) && page_of(p) != kept, "an adoption re-made a kept big page");
    free(p);
    free_left(&left);
    malloc_trim(0);
    return NULL;
}

/* A heap adopts only a dead thread's segment of the kind it needs, and for
 * a big page of its class: another page would only be hoarded. (Adopting
 * any segment, the thread that leaves `mine` adopts the segment of `other`,
 * which the big request then takes first.) */
static void *adopt_own_class(void *arg) {
    (void)arg;
    trimmed_heap();
    left_big_t mine = {200000, 0, 0, {0}}, other = {400000, 0, 0, {0}}; /* two big classes */
    pthread_t t;
    CHECK(pthread_create(&t, NULL, leave_big, &other) == 0 && pthread_join(t, NULL) == 0);
    CHECK(pthread_create(&t, NULL, leave_big, &mine) == 0 && pthread_join(t, NULL) == 0);
    CHECK(page_of(mine.p[0])->cls != page_of(other.p[0])->cls);
    size_t adopted = atomic_load(&_ts_stats.adopted);
    void *p = malloc(200000);
    CHECK(p != NULL);
    size_t took = atomic_load(&_ts_stats.adopted) - adopted;
    CHECK_MSG(took == 1 && page_of(p) == page_of(mine.p[0]),
              "a 200000-byte request adopted %zu segments, and %s the page of its class", took,
              page_of(p) == page_of(mine.p[0]) ? "got" : "did not get");
    free(p);
    free_left(&mine);
    free_left(&other);
    /* A dead thread's big page left, a medium page wanted: not that one. */
    left_big_t big = {400000, 0, 0, {0}};
    CHECK(pthread_create(&t, NULL, leave_big, &big) == 0 && pthread_join(t, NULL) == 0);
    ts_segment_t *seg = _ts_abandoned_pop(TS_KIND_MEDIUM, 0);
    CHECK_MSG(!seg || seg->kind == TS_KIND_MEDIUM, "a heap that wanted a medium page adopted a %s",
              seg->kind == TS_KIND_BIG ? "big page" : "small segment");
    if (seg) _ts_heap_adopt(_ts_tls_heap, seg);
    free_left(&big);
    malloc_trim(0);
    return NULL;
}

/* A big page of 400000-byte blocks, each written for its first `written`
 * bytes, goes back to its segment (not kept: another page is) and is taken
 * again, still resident, for another class. Returns the OS pages of it
 * resident then. */
static size_t relayout_resident(size_t written) {
    ts_heap_t *heap = trimmed_heap();
    ts_page_t *kept = keep_big(70000);
    void *fill[64];
    int nfill = 0;
    fill[nfill++] = malloc(400000);
    ts_page_t *whole = page_of(fill[0]);
    while (nfill < 64 && (uint32_t)nfill < whole->reserved) CHECK((fill[nfill++] = malloc(400000)));
    CHECK(page_of(fill[nfill - 1]) == whole);
    for (int i = 0; i < nfill; i++) memset(fill[i], 0x5a, written);
    for (int i = 0; i < nfill; i++) free(fill[i]);
    CHECK_MSG(!big_kept(whole) && heap->spare == ts_segment_of(whole),
              "the page was kept, or its segment is not the spare: no test");
    void *other = malloc(250000); /* another class: the spare's page, still dirty */
    CHECK(other != NULL && page_of(other) == whole && big_kept(kept));
    size_t n = resident_pages((void *)whole->base, whole->area);
    free(other);
    malloc_trim(0);
    return n;
}
/* Blocks written for a few bytes each: the old layout's resident pages go
 * back before the new blocks are carved, so they do not pile up under it. */
static void *relayout_sparse(void *arg) {
    (void)arg;
    CHECK_MSG(relayout_resident(16) <= 2,
              "a dirty page taken for another class kept the old class's few written pages");
    return NULL;
}
/* Blocks written in full: the new ones will likely be too, so the page
 * stays resident and saves their page faults. */
static void *relayout_dense(void *arg) {
    (void)arg;
    CHECK_MSG(relayout_resident(400000) >= 9 * 97,
              "a dirty page written in full was given back when taken for another class");
    return NULL;
}

int main(void) {
    free(malloc(1));
    run(relayout_sparse);
    run(relayout_dense);
    run(big_slots);
    run(adopt_keeps);
    run(adopt_own_class);
    run(two_whole);
    run(loop_counts);
    run(linger_in_use);
    run(big_inline);
    run(behind);
    printf("ok\n");
    return 0;
}
