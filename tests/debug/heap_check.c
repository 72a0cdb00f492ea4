/* ts_heap_check() and ts_block_info() of the fast allocator, linked with
 * libtsalloc.a (and, as heap_check_checked, with the checked build's
 * libtsalloc-checked.a, whose page transitions check the same invariants).
 *
 * Each corruption is what a program's heap bug does (a write after free into
 * a block's link or free mark, a count gone wrong, a stray segment map entry),
 * made in a forked child, which must abort with the message naming it.
 */
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "core/internal.h"
#include "tsalloc.h"

static int failures;
static _Alignas(64) char bogus[4096]; /* mapped memory no page holds */

static void expect(void (*fn)(void *), void *arg, const char *want, const char *what) {
    if (!ts_expect_abort(fn, arg, want)) {
        fprintf(stderr, "  case: %s\n", what);
        failures++;
    }
}

/* ---- a clean heap passes, from any thread, in any state ------------------------- */

static void *churn(void *arg) {
    uint64_t seed = (uintptr_t)arg;
    void *keep[500];
    for (int i = 0; i < 500; i++) keep[i] = malloc(ts_rand_range(&seed, 1, 70000));
    ts_heap_check();
    for (int i = 0; i < 500; i += 2) free(keep[i]);
    void *big = malloc(3 << 20);
    ts_heap_check();
    free(big);
    for (int i = 1; i < 500; i += 2) free(keep[i]);
    ts_heap_check();
    return NULL;
}

static void clean(void) {
    pthread_t t[2];
    void *mine = malloc(100);
    for (int i = 0; i < 2; i++)
        CHECK(pthread_create(&t[i], NULL, churn, (void *)(uintptr_t)(i + 1)) == 0);
    for (int i = 0; i < 2; i++) CHECK(pthread_join(t[i], NULL) == 0);
    free(mine);
    ts_heap_check();
}

/* ---- ts_block_info ---------------------------------------------------------------- */

static void block_info(void) {
    ts_block_info_t bi;
    CHECK(!ts_block_info(NULL, &bi) && bi.state == TS_BLOCK_FOREIGN);
    CHECK(!ts_block_info(bogus, &bi) && bi.state == TS_BLOCK_FOREIGN);
    CHECK(!ts_block_info(&bi, &bi)); /* the stack */
    CHECK(!ts_block_info((void *)(uintptr_t)-4096, &bi));
    char *p = malloc(100);
    CHECK(ts_block_info(p + 50, &bi));
    CHECK(bi.state == TS_BLOCK_LIVE && bi.start == p && bi.offset == 50 && !bi.large);
    CHECK(bi.usable == malloc_usable_size(p) && bi.size_class == (int)ts_class_of(100));
    CHECK(!strcmp(bi.design, "tsalloc") && bi.heap && bi.heap_id > 0 && bi.segment);
    CHECK(bi.heap == (void *)_ts_tls_heap && bi.heap_id == _ts_tls_heap->id);
    free(p);
    CHECK(ts_block_info(p, &bi) && bi.state == TS_BLOCK_FREE && bi.start == p);
    CHECK(ts_block_info(ts_segment_of(p), &bi) && bi.state == TS_BLOCK_METADATA);
    char *big = malloc(1 << 20);
    CHECK(ts_block_info(big + 12345, &bi) && bi.state == TS_BLOCK_LIVE && bi.large);
    CHECK(bi.start == big && bi.offset == 12345 && bi.usable >= (1 << 20) && bi.size_class == -1);
    free(big);
    CHECK(!ts_block_info(big, &bi) || bi.state == TS_BLOCK_FREE); /* cached, or unmapped */
}

/* ---- corruptions ---------------------------------------------------------------- */

static void *freed_48(void) {
    void *keep = malloc(48); /* the page stays in use */
    (void)keep;
    void *x = malloc(48);
    free(x);
    return x;
}

static void link_out(void *arg) {
    ts_block_t *x = freed_48();
    (void)arg;
    x->next = (ts_block_t *)(bogus + 64); /* a write after free into the link */
    ts_heap_check();
}

static void mark_gone(void *arg) {
    uintptr_t *x = freed_48();
    (void)arg;
    x[1] = 0; /* a write after free into the free mark */
    ts_heap_check();
}

/* The first page of 1 KiB blocks, filled, then given one block back: in
 * its class's queue behind the head, so its count is exact. blocks[0 .. n-1]
 * are its blocks, blocks[0] the one freed. */
static ts_page_t *queued_page(void **blocks, int *n) {
    blocks[0] = malloc(1024);
    ts_page_t *page = ts_small_page_of(blocks[0]);
    *n = 1;
    while (ts_small_page_of(blocks[*n] = malloc(1024)) == page) (*n)++;
    CHECK(page->in_full && !page->is_head);
    free(blocks[0]);
    CHECK(!page->in_full && !page->is_head && page->used == (uint32_t)*n - 1);
    return page;
}

static void count_off(void *arg) {
    void *blocks[128];
    int n;
    ts_page_t *page = queued_page(blocks, &n);
    (void)arg;
    page->used--;
    ts_heap_check();
}

static void *volatile escaped; /* malloc's result, seen to escape */

static void segment_count_off(void *arg) {
    (void)arg;
    escaped = malloc(16);
    ts_segment_of(escaped)->used_pages++;
    ts_heap_check();
}

static void map_stray(void *arg) {
    (void)arg;
    free(malloc(16)); /* initialised */
    uintptr_t chunk = ((uintptr_t)bogus >> TS_SEGMENT_SHIFT) + 1;
    atomic_store(&_ts_segmap[chunk], TS_SHIFT_SMALL);
    ts_heap_check();
}

/* The checked build, without ts_heap_check: a stray link is caught when
 * malloc reaches it, a wrong count when the page is retired. */
static void checked_link(void *arg) {
    ts_block_t *x = freed_48();
    (void)arg;
    x->next = (ts_block_t *)(bogus + 64);
    void *volatile a = malloc(48); /* x */
    void *volatile b = malloc(48); /* the stray link */
    (void)a;
    (void)b;
}

static void checked_count(void *arg) {
    void *blocks[128];
    int n;
    ts_page_t *page = queued_page(blocks, &n);
    (void)arg;
    page->used--;
    for (int i = 1; i < n; i++) free(blocks[i]);
}

int main(void) {
    clean();
    block_info();
    char want[256];
    void *x = freed_48(); /* the addresses a child will see: the same as here */
    ts_page_t *page = ts_small_page_of(x);
    snprintf(want, sizeof want,
             "tsalloc: ts_heap_check(): the free list of page %p (class 2, 48-byte blocks) "
             "leaves its page at %p\n",
             (void *)page, (void *)(bogus + 64));
    free(malloc(48)); /* as the child finds it */
    expect(link_out, NULL, want, "a free list leaving its page");
    snprintf(want, sizeof want,
             "is both free and live: on the free list of page %p without its free mark",
             (void *)page);
    expect(mark_gone, NULL, want, "a block both free and live");
    expect(count_off, NULL, "tsalloc: ts_heap_check(): the count of page ",
           "a count that disagrees with the list");
    snprintf(want, sizeof want,
             "tsalloc: ts_heap_check(): segment map entry %zu names a segment at %p that is "
             "not mapped\n",
             ((size_t)(uintptr_t)bogus >> TS_SEGMENT_SHIFT) + 1,
             (void *)((((uintptr_t)bogus >> TS_SEGMENT_SHIFT) + 1) << TS_SEGMENT_SHIFT));
    expect(map_stray, NULL, want, "a segment map entry without a segment");
    expect(segment_count_off, NULL, "tsalloc: ts_heap_check(): segment ",
           "a segment's page count that disagrees with its pages");
    if (TS_CHECKED) {
        expect(checked_link, NULL, "tsalloc: assertion failed: ts_block_marked(page, block)",
               "checked build: malloc reaching a stray link");
        expect(checked_count, NULL, "tsalloc: page retire: the count of page ",
               "checked build: retiring a page whose count is wrong");
    }
    if (failures) return 1;
    printf("heap_check: ok\n");
    return 0;
}
