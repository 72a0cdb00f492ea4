/* Rescue of an idle thread's full pages (src/core/rescue.c): blocks that
 * other threads free into the full pages of a thread that makes no allocator
 * call go back to the OS all the same, and nothing that is still in use is
 * touched.
 *
 * 1. An owner fills small, medium and big pages, then waits; another thread
 *    frees every block and exits. Without any further allocator call, RSS
 *    falls (the purge thread, woken by the hand-overs, rescues the pages),
 *    and the pages count as rescued.
 *    The owner then allocates and frees again: its blocks hold what it
 *    wrote, and after its malloc_trim its pages in use are back where they
 *    started (the rescued pages were retired, not leaked).
 * 2. One block per page still out: passes driven by hand (purge delay ten
 *    minutes, so the helper stays out) rescue nothing, the blocks keep their
 *    contents, and the owner frees them itself. With TSALLOC_RESCUE=0
 *    (ts_option_set) passes do not look at the heap at all.
 * 3. A double free into a rescued page aborts with the usual message, by
 *    another thread and by the owner.
 * 4. Stress: owners alternate bursts of allocation with idle spells while
 *    freers free their blocks and a driver runs rescue passes without pause
 *    (purge delay 1 ms); the owners free a quarter of their blocks
 *    themselves (into full pages the driver may hold claimed) and exit after
 *    a few bursts, a new thread taking over; every block's contents are
 *    checked before its free.
 * 5. The owner frees the last block of each of its full pages (taking them
 *    off its full list) while a driver runs passes without pause: no page of
 *    its queues may be left marked full or rescued, but as a rescued queue
 *    page (9).
 * 6. Parking: with blocks still out the helper stops looking at the heap
 *    (no pass in a second), and a free that makes a page whole wakes it: the
 *    page is rescued.
 * 7. A busy owner: its full pages get blocks back every round (a hand-over
 *    each round) while it keeps allocating. Once the helper has seen it
 *    waiting, those hand-overs must not wake the helper for a pass each
 *    (purge delay 10 s: the helper looks a period, 10 s, apart; before the
 *    fix every round made a pass). With the rescue off, the same rounds must
 *    not wake an idle helper either.
 * 8. A purge delay lowered while a heap waits applies to it: armed with a
 *    10 s delay (idle in 50 s), then 20 ms, its pages are rescued within
 *    the test's 20 s wait (before, only 5 old delays after the first look).
 * 9. Queue pages: the owner fills small pages, then frees one block of each
 *    itself, so that none is full (each has a free block on its own list,
 *    in its queue); another thread frees the rest. Passes driven by hand
 *    rescue every such page but the heads, purged (none while the owner is
 *    marked as walking its blocks); the owner then allocates
 *    again (blocks intact) and retires them: after its malloc_trim its pages
 *    in use are back where they started.
 * 10. A double free into a rescued queue page aborts with the usual message,
 *    by another thread and by the owner.
 * 11. The owner frees the last live block of each of its queue pages (and
 *    checks its heap) while a driver runs passes without pause: a pass may
 *    claim a page while such a free is under way. Blocks stay intact, the
 *    heap consistent, and no page is lost.
 * 12. The idle wait adapts: an owner whose full pages were rescued (passes
 *    driven by hand, as in 2) and that comes back within eight of its idle
 *    waits of that gets a wait twice as long, up to eight purge delays; one
 *    that comes back after more than 64 gets one half as long
 *    (_ts_idle_shift_next's rule, checked on its own too).
 * core_rescue_tsan runs 2, 5, 9, 11 and 4 under ThreadSanitizer (tsan.cmake).
 */
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "core/internal.h"
#include "tsalloc.h"

#ifdef RESCUE_TSAN
/* Built with the core's sources under ThreadSanitizer (tsan.cmake), which
 * owns malloc: the core is reached through its ts_* names. */
int _ts_core_trim(size_t pad);
#define malloc(n)      ts_malloc(n)
#define calloc(n, s)   ts_calloc(n, s)
#define free(p)        ts_free(p)
#define malloc_trim(p) _ts_core_trim(p)
#endif

#define IDLE_SLOTS 4096
#include "idle_owner.h"

#define MB          ((size_t)1 << 20)
#define STRESS_SECS 2.0

/* Sizes over small (full 64 KiB pages), medium and big pages. */
static size_t size_at(size_t i) {
    static const size_t sizes[] = {48, 48, 48, 48, 200, 200, 1000, 20000, 150000};
    return sizes[i % (sizeof sizes / sizeof sizes[0])];
}

/* The owner's blocks: sized by size(i), each filled with its pattern. */
static void alloc_sized(owner_t *o, size_t (*size)(size_t)) {
    for (size_t i = 0; i < o->n; i++) {
        o->sizes[i] = size(i);
        o->blocks[i] = malloc(o->sizes[i]);
        CHECK(o->blocks[i] != NULL);
        fill(o->blocks[i], o->sizes[i], i * 2654435761u + 1);
    }
}
static void alloc_all(owner_t *o) {
    alloc_sized(o, size_at);
}
static void check_free_all(owner_t *o) {
    for (size_t i = 0; i < o->n; i++) {
        if (!o->blocks[i]) continue;
        CHECK_MSG(intact(o->blocks[i], o->sizes[i], i * 2654435761u + 1),
                  "block %zu (%zu B) lost its contents", i, o->sizes[i]);
        free(o->blocks[i]);
        o->blocks[i] = NULL;
    }
}
static void trim(owner_t *o) {
    (void)o;
    malloc_trim(0);
}

#define N1 8000

/* ---- 1 ---- */

static void *free_owner_blocks(void *arg) {
    owner_t *o = arg;
    for (size_t i = 0; i < o->n; i++) {
        if (!o->blocks[i]) continue; /* freed by the owner */
        CHECK(intact(o->blocks[i], o->sizes[i], i * 2654435761u + 1));
        free(o->blocks[i]);
        o->blocks[i] = NULL;
    }
    return NULL;
}

static void test_rescue(void) {
    owner_t o;
    pthread_t t = owner_start(&o, N1);
    owner_run(&o, trim);
    size_t pages0 = pages_in_use();
    size_t base = ts_rss_bytes();
    size_t committed0 = atomic_load(&_ts_stats.committed);
    owner_run(&o, alloc_all); /* the owner now waits at its barrier */
    size_t high = ts_rss_bytes();
    CHECK_MSG(high > base + 60 * MB, "allocation did not raise RSS (%zu -> %zu KB)", base >> 10,
              high >> 10);
    size_t rescued0 = atomic_load(&_ts_stats.rescued_pages);
    /* Another thread frees everything and exits (which pushes its batches);
     * from here on neither thread calls the allocator: only the hand-overs
     * tell the helper (no malloc_trim, whose pass would look by itself). */
    pthread_t freer;
    CHECK(pthread_create(&freer, NULL, free_owner_blocks, &o) == 0);
    CHECK(pthread_join(freer, NULL) == 0);
    /* RSS falls to 0.6 to 2.6 MiB above the base (measured) from 150 MB
     * above: 20 MB is 7x the most. */
    size_t limit = base + 20 * MB;
    double t0 = now_s(), took = -1;
    while (now_s() - t0 < 20.0) {
        /* The count is added when the pass ends: RSS may fall before. */
        if (ts_rss_bytes() <= limit && atomic_load(&_ts_stats.rescued_pages) >= rescued0 + 50) {
            took = now_s() - t0;
            break;
        }
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    size_t rescued = atomic_load(&_ts_stats.rescued_pages) - rescued0;
    CHECK_MSG(took >= 0, "RSS stayed at %zu KB while the owner waited (base %zu, peak %zu KB)",
              ts_rss_bytes() >> 10, base >> 10, high >> 10);
    CHECK_MSG(rescued >= 50, "only %zu pages rescued", rescued);
    printf("idle owner: rss %zu -> %zu KB, back under %zu KB after %.0f ms; %zu pages rescued\n",
           base >> 10, high >> 10, limit >> 10, took * 1000, rescued);
    /* Rescued pages are decommitted in the statistics as they are purged:
     * 5.5 MiB stay committed (measured), 30 MB is 5x that and far below the
     * 150 MB filled. */
    size_t committed = atomic_load(&_ts_stats.committed);
    CHECK_MSG(committed <= committed0 + 30 * MB, "committed %zu KB after the rescue, %zu before",
              committed >> 10, committed0 >> 10);
    /* The owner wakes: it reuses memory as usual, and retires the rescued pages. */
    owner_run(&o, alloc_all);
    owner_run(&o, check_free_all);
    owner_run(&o, trim);
    /* Two more than before (measured); 4 is 2x that, and the 93 rescued
     * pages, leaked, would be far more. */
    CHECK_MSG(pages_in_use() <= pages0 + 4, "pages in use %zu, %zu before (rescued ones leaked?)",
              pages_in_use(), pages0);
    /* Retired clean: counted neither as free resident nor decommitted twice.
     * Measured: 0 dirty (bound 4 MB) and 0.14 MiB more committed than before
     * the fill (bound 30 MB). */
    size_t dirty = atomic_load(&_ts_stats.dirty);
    committed = atomic_load(&_ts_stats.committed);
    CHECK_MSG(dirty <= 4 * MB, "%zu KB free resident after the owner's trim", dirty >> 10);
    CHECK_MSG(committed >= dirty && committed <= committed0 + 30 * MB,
              "committed %zu KB after the owner's trim (%zu before the fill)", committed >> 10,
              committed0 >> 10);
    owner_stop(&o, t);
}

/* ---- 2 ---- */

#define N2 4000

/* Two looks as far apart as a heap may have to stay idle (eight purge
 * delays, the longest idle wait), as the purge thread would make them. */
static void rescue_passes(void) {
    uint64_t t = _ts_os_now_ns();
    (void)_ts_heaps_rescue(t);
    (void)_ts_heaps_rescue(t + _ts_idle_ns(TS_IDLE_SHIFT_MAX) + 1);
}

static void test_blocks_out(void) {
    CHECK(ts_option_set("purge_delay_ms", 600000)); /* the helper's looks come too late */
    owner_t o;
    pthread_t t = owner_start(&o, N2);
    owner_run(&o, alloc_all);
    /* Keep one block of every page (the first seen of each). */
    ts_page_t **kept = calloc(N2, sizeof *kept);
    size_t nkept = 0;
    CHECK(kept != NULL);
    for (size_t i = 0; i < o.n; i++) {
        ts_page_t *page = NULL;
        CHECK(_ts_locate(o.blocks[i], &page) == TS_PTR_BLOCK);
        int seen = 0;
        for (size_t k = 0; k < nkept && !seen; k++) seen = kept[k] == page;
        if (!seen) {
            kept[nkept++] = page;
            continue;
        }
        free(o.blocks[i]);
        o.blocks[i] = NULL;
    }
    malloc_trim(0);
    /* TSALLOC_RESCUE=0 turns it off: passes do not even look at the heap. */
    ts_heap_t *owner_heap = (ts_heap_t *)(atomic_load(&kept[0]->owner) & ~TS_OWNER_FLAGS);
    CHECK(ts_option_set("rescue", 0));
    rescue_passes();
    CHECK_MSG(owner_heap->rescue_backoff == 0, "a pass looked at a heap with rescue off");
    CHECK(ts_option_set("rescue", 1));
    size_t rescued0 = atomic_load(&_ts_stats.rescued_pages);
    rescue_passes();
    CHECK(owner_heap->rescue_backoff == 1); /* now it looked, and found nothing */
    rescue_passes();
    CHECK_MSG(atomic_load(&_ts_stats.rescued_pages) == rescued0,
              "%zu pages rescued with a block still out",
              atomic_load(&_ts_stats.rescued_pages) - rescued0);
    owner_run(&o, check_free_all); /* the kept blocks: intact; the owner frees them */
    /* Now every block is free, and the owner has taken its hand-overs back:
     * nothing is left for a pass. */
    rescue_passes();
    owner_run(&o, alloc_all);
    owner_run(&o, check_free_all);
    printf("blocks still out: %zu pages kept one each, none rescued, contents intact\n", nkept);
    owner_stop(&o, t);
    CHECK(ts_option_set("purge_delay_ms", 100));
    free(kept);
}

/* ---- 3 ---- */

static void *fill_one_page(void *arg) {
    void **blocks = arg;
    for (int i = 0; i < 64; i++) blocks[i] = malloc(1024); /* one page of the 1 KiB class */
    blocks[64] = malloc(1024);                             /* the next page: the first is full */
    return NULL;
}
/* how & 3: 0, another thread frees a block of the rescued page; 1, its
 * owner does; 2, another thread reallocs it within its class (which would
 * otherwise keep it in place). HOW_QUEUE: the page is a queue page (10). */
#define HOW_QUEUE 4
/* blocks[66]: the barrier; blocks[67]: how. */
static void *owner_fill_then_wait(void *arg) {
    void **blocks = arg;
    uintptr_t how = (uintptr_t)blocks[67];
    fill_one_page(blocks);
    if (how & HOW_QUEUE) free(blocks[0]); /* out of the full list, into its queue */
    pthread_barrier_t *b = (pthread_barrier_t *)blocks[66];
    pthread_barrier_wait(b); /* filled */
    pthread_barrier_wait(b); /* main freed the page's blocks and it was rescued */
    if ((how & 3) == 1) free(blocks[5]);
    pthread_barrier_wait(b);
    return NULL;
}
static void double_free_into_rescued(void *arg) {
    uintptr_t how = (uintptr_t)arg;
    CHECK(ts_option_set("purge_delay_ms", 600000));
    void *blocks[68];
    pthread_barrier_t b;
    pthread_barrier_init(&b, NULL, 2);
    blocks[66] = &b;
    blocks[67] = arg;
    pthread_t t;
    CHECK(pthread_create(&t, NULL, owner_fill_then_wait, blocks) == 0);
    pthread_barrier_wait(&b);
    for (int i = how & HOW_QUEUE ? 1 : 0; i < 64; i++) free(blocks[i]);
    malloc_trim(0); /* pushes main's batches */
    size_t rescued0 = atomic_load(&_ts_stats.rescued_pages);
    rescue_passes();
    CHECK_MSG(atomic_load(&_ts_stats.rescued_pages) > rescued0, "the %s page was not rescued",
              how & HOW_QUEUE ? "queue" : "full");
    pthread_barrier_wait(&b);
    if ((how & 3) == 0) free(blocks[5]); /* every block of that page is free already */
    if ((how & 3) == 2) (void)!realloc(blocks[5], 1000);
    pthread_barrier_wait(&b);
}

/* ---- 4 ---- */

/* One owner thread's life: a few bursts, then it exits (while the driver
 * may be looking at its heap) and the next one takes its slot. */
static void *stress_owner_life(void *arg) {
    long id = (long)(intptr_t)arg;
    uint64_t rng = 77 + (uint64_t)id + atomic_load(&owner_tags[id]);
    uint64_t tag = atomic_load(&owner_tags[id]);
    long bursts = (long)ts_rand_range(&rng, 1, 40);
    slot_t mine[64] = {{0}}; /* a quarter of the blocks: freed by their owner */
    while (!atomic_load(&stop) && bursts-- > 0) {
        /* A burst: fill what the ring has room for. */
        long in = atomic_load(&ring_in[id]);
        while (in - atomic_load(&ring_out[id]) < IDLE_SLOTS && !atomic_load(&stop)) {
            size_t n = size_at(ts_rand_range(&rng, 0, 1000));
            void *p = malloc(n);
            CHECK(p != NULL);
            fill(p, n, ++tag);
            if (ts_rand_range(&rng, 0, 3) == 0) { /* into pages the driver may have claimed */
                slot_t *m = &mine[ts_rand_range(&rng, 0, 63)];
                if (m->p) CHECK_MSG(intact(m->p, m->n, m->tag), "an owner's block changed");
                free(m->p);
                *m = (slot_t){p, n, tag};
                continue;
            }
            slot_t *s = &ring[id][in % IDLE_SLOTS];
            s->p = p;
            s->n = n;
            s->tag = tag;
            atomic_store(&ring_in[id], ++in);
        }
        /* An idle spell: no allocator call while the freers catch up. */
        struct timespec ts = {0, (long)ts_rand_range(&rng, 0, 4) * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    for (int k = 0; k < 64; k++) free(mine[k].p);
    atomic_store(&owner_tags[id], tag);
    return NULL;
}

static void *stress_driver(void *arg) {
    (void)arg;
    /* Each look seen a long idle spell after the last: every heap whose slow
     * path did not run in between is looked at, whatever it is doing. */
    uint64_t t = _ts_os_now_ns();
    while (!atomic_load(&stop)) (void)_ts_heaps_rescue(t += (uint64_t)1 << 32);
    return NULL;
}

static void test_stress(void) {
    CHECK(ts_option_set("purge_delay_ms", 1));
    size_t rescued0 = atomic_load(&_ts_stats.rescued_pages);
    long bad = idle_stress_run(stress_owner_life, stress_driver, STRESS_SECS);
    CHECK_MSG(bad == 0, "%ld blocks lost their contents", bad);
    printf("stress: %ld + %ld blocks passed, %zu pages rescued on the way\n",
           atomic_load(&ring_in[0]), atomic_load(&ring_in[1]),
           atomic_load(&_ts_stats.rescued_pages) - rescued0);
    CHECK(ts_option_set("purge_delay_ms", 100));
}

/* ---- 5 ---- */

#define RACE_PAGES  100
#define RACE_N      (RACE_PAGES * 64)
#define RACE_ROUNDS 60
static void *race_blocks[RACE_N], *race_kept[RACE_PAGES + 1];
static size_t race_nkept;
static _Atomic int race_drive, race_stop;
static _Atomic long race_bad;

/* The owner's heap, for 11: each pass looks at its queue pages too (a page
 * its owner's own free completes asks for no look). */
static ts_heap_t *_Atomic race_heap;
static void *race_driver(void *arg) {
    (void)arg;
    uint64_t t = _ts_os_now_ns();
    while (!atomic_load(&race_stop)) {
        if (!atomic_load(&race_drive)) continue;
        ts_heap_t *h = atomic_load(&race_heap);
        if (h) { /* as a push that may complete a page does (free.c, queue_wake) */
            atomic_store(&h->rescue_queue, 1);
            atomic_store(&h->rescue_parked, 0);
        }
        (void)_ts_heaps_rescue(t += (uint64_t)1 << 32);
    }
    return NULL;
}

static void race_alloc(owner_t *o) {
    (void)o;
    for (size_t i = 0; i < RACE_N; i++) {
        race_blocks[i] = malloc(1024);
        CHECK(race_blocks[i] != NULL);
        fill(race_blocks[i], 1024, i + 7);
    }
}
/* The owner frees its kept blocks: each takes a full page off the full list.
 * A queue page may then be rescued as a queue page (thread_free RESCUED),
 * never left marked as a rescued full page. */
static void race_free_kept(owner_t *o) {
    (void)o;
    for (size_t k = 0; k < race_nkept; k++) free(race_kept[k]);
    ts_heap_t *h = _ts_tls_heap;
    for (unsigned c = 0; c < TS_CLASS_COUNT; c++)
        for (ts_page_t *p = h->queue[c].first; p; p = p->next) {
            bool as_queue_page = ts_tf_state(atomic_load(&p->thread_free)) == TS_TF_RESCUED;
            race_bad +=
                !as_queue_page && ((atomic_load(&p->owner) & TS_OWNER_FLAGS) == TS_OWNER_FULL ||
                                   atomic_load(&p->rescued));
        }
}

/* The first block of each page of race_blocks (in allocation order). */
static int race_page_first(size_t i) {
    ts_page_t *page = NULL, *prev = NULL;
    (void)_ts_locate(race_blocks[i], &page);
    if (i) (void)_ts_locate(race_blocks[i - 1], &prev);
    return !i || page != prev;
}
static void qrace_alloc(owner_t *o) {
    atomic_store(&race_heap, _ts_tls_heap);
    race_alloc(o);
    for (size_t i = 0; i < RACE_N; i++) /* out of the full list, into the queue */
        if (race_page_first(i)) {
            CHECK(intact(race_blocks[i], 1024, i + 7));
            free(race_blocks[i]);
        }
}
static void qrace_free_kept(owner_t *o) {
    (void)o;
    for (size_t k = 0; k < race_nkept; k++) {
        free(race_kept[k]); /* the last live block of its page */
        if (k % 16 == 0) ts_heap_check();
    }
    ts_heap_check();
}

/* A round of 5 (queue false) or 11: the owner allocates (for 11 it frees
 * the first block of each page itself), main frees every block but the last
 * of each page, and the owner frees those while the driver runs passes. */
static void race_round(owner_t *o, bool queue) {
    owner_run(o, queue ? qrace_alloc : race_alloc);
    race_nkept = 0;
    for (size_t i = 0; i < RACE_N; i++) {
        if (queue && race_page_first(i)) continue; /* the owner's */
        CHECK(intact(race_blocks[i], 1024, i + 7));
        if ((i + 1 == RACE_N || race_page_first(i + 1)) && race_nkept <= RACE_PAGES)
            race_kept[race_nkept++] = race_blocks[i]; /* the last block of its page */
        else
            free(race_blocks[i]);
    }
    malloc_trim(0); /* main's batches reach the pages */
    atomic_store(&race_drive, 1);
    owner_run(o, queue ? qrace_free_kept : race_free_kept);
    atomic_store(&race_drive, 0);
}

static void test_unfull_race(void) {
    CHECK(ts_option_set("purge_delay_ms", 1));
    owner_t o;
    pthread_t t = owner_start(&o, 0), d;
    CHECK(pthread_create(&d, NULL, race_driver, NULL) == 0);
    size_t rescued0 = atomic_load(&_ts_stats.rescued_pages);
    for (int r = 0; r < RACE_ROUNDS && !race_bad; r++) race_round(&o, false);
    atomic_store(&race_stop, 1);
    CHECK(pthread_join(d, NULL) == 0);
    CHECK_MSG(race_bad == 0, "%ld queued pages left marked full or rescued", race_bad);
    owner_run(&o, trim);
    owner_stop(&o, t);
    CHECK(ts_option_set("purge_delay_ms", 100));
    printf("owner frees into its full pages during passes: %d rounds, %zu pages rescued\n",
           RACE_ROUNDS, atomic_load(&_ts_stats.rescued_pages) - rescued0);
}

/* ---- 9 ---- */

#define N9 12000

static size_t small_size(size_t i) { /* 16 B .. 1000 B: small pages */
    return 16 + (i * 37) % 985;
}
static void alloc_small(owner_t *o) {
    alloc_sized(o, small_size);
}
/* The owner frees the first of its blocks on each page: no page stays full,
 * every page but the heads waits in a queue with a block on its own list. */
static size_t queue_pages;
static void free_one_per_page(owner_t *o) {
    ts_page_t **seen = calloc(o->n, sizeof *seen);
    CHECK(seen != NULL);
    size_t n = 0;
    for (size_t i = 0; i < o->n; i++) {
        ts_page_t *page = NULL;
        CHECK(_ts_locate(o->blocks[i], &page) == TS_PTR_BLOCK);
        size_t k = 0;
        while (k < n && seen[k] != page) k++;
        if (k < n) continue;
        seen[n++] = page;
        CHECK(intact(o->blocks[i], o->sizes[i], i * 2654435761u + 1));
        free(o->blocks[i]);
        o->blocks[i] = NULL;
    }
    queue_pages = n;
    free(seen);
}

static void walk_begin(owner_t *o) {
    (void)o;
    _ts_heap_walk_begin(_ts_tls_heap);
}
static void walk_end(owner_t *o) {
    (void)o;
    _ts_heap_walk_end(_ts_tls_heap);
}

static void test_queue_pages(void) {
    CHECK(ts_option_set("purge_delay_ms", 600000)); /* the helper's looks come too late */
    owner_t o;
    pthread_t t = owner_start(&o, N9);
    owner_run(&o, trim);
    size_t pages0 = pages_in_use();
    size_t committed0 = atomic_load(&_ts_stats.committed);
    owner_run(&o, alloc_small);
    owner_run(&o, free_one_per_page);
    size_t rescued0 = atomic_load(&_ts_stats.rescued_pages);
    pthread_t freer; /* frees the rest and exits, which pushes its batches */
    CHECK(pthread_create(&freer, NULL, free_owner_blocks, &o) == 0);
    CHECK(pthread_join(freer, NULL) == 0);
    size_t committed1 = atomic_load(&_ts_stats.committed);
    /* While the owner walks its blocks (heap check, visit), no page goes. */
    owner_run(&o, walk_begin);
    rescue_passes();
    CHECK_MSG(atomic_load(&_ts_stats.rescued_pages) == rescued0,
              "%zu pages rescued while their owner walked them",
              atomic_load(&_ts_stats.rescued_pages) - rescued0);
    owner_run(&o, walk_end);
    /* The look that found it walking asked for another, backed off by now. */
    (void)_ts_heaps_rescue(_ts_os_now_ns() + ((uint64_t)1 << 50));
    size_t rescued = atomic_load(&_ts_stats.rescued_pages) - rescued0;
    /* All but the heads: at most one a class (63 classes of small pages
     * here at most; measured: rescued = pages - 62). */
    CHECK_MSG(rescued + 64 >= queue_pages && queue_pages > 50, "%zu of %zu queue pages rescued",
              rescued, queue_pages);
    size_t committed2 = atomic_load(&_ts_stats.committed);
    CHECK_MSG(committed1 - committed2 >= rescued * 32 * 1024,
              "committed %zu -> %zu KB for %zu pages rescued", committed1 >> 10, committed2 >> 10,
              rescued);
    /* The owner wakes: it allocates as usual, its blocks intact, and retires
     * the rescued pages. */
    owner_run(&o, alloc_small);
    owner_run(&o, check_free_all);
    owner_run(&o, trim);
    CHECK_MSG(pages_in_use() <= pages0 + 4, "pages in use %zu, %zu before (rescued ones leaked?)",
              pages_in_use(), pages0);
    CHECK_MSG(atomic_load(&_ts_stats.committed) <= committed0 + 4 * MB,
              "committed %zu KB after the owner's trim, %zu before",
              atomic_load(&_ts_stats.committed) >> 10, committed0 >> 10);
    printf("queue pages: %zu of %zu rescued (the rest heads), committed %zu -> %zu KB\n", rescued,
           queue_pages, committed1 >> 10, committed2 >> 10);
    owner_stop(&o, t);
    CHECK(ts_option_set("purge_delay_ms", 100));
}

/* ---- 10 ---- */

/* double_free_into_rescued with HOW_QUEUE: the owner frees the page's first
 * block itself, which takes it off the full list into its queue. */

/* ---- 11 ---- */

static void test_queue_race(void) {
    CHECK(ts_option_set("purge_delay_ms", 1));
    owner_t o;
    pthread_t t = owner_start(&o, 0), d;
    owner_run(&o, trim);
    size_t pages0 = pages_in_use();
    atomic_store(&race_stop, 0);
    CHECK(pthread_create(&d, NULL, race_driver, NULL) == 0);
    size_t rescued0 = atomic_load(&_ts_stats.rescued_pages);
    for (int r = 0; r < RACE_ROUNDS; r++) race_round(&o, true);
    atomic_store(&race_stop, 1);
    CHECK(pthread_join(d, NULL) == 0);
    atomic_store(&race_heap, NULL);
    owner_run(&o, trim);
    CHECK_MSG(pages_in_use() <= pages0 + 4, "pages in use %zu, %zu before (pages lost?)",
              pages_in_use(), pages0);
    owner_stop(&o, t);
    CHECK(ts_option_set("purge_delay_ms", 100));
    printf("owner frees the last blocks of its queue pages during passes: %d rounds, %zu pages "
           "rescued\n",
           RACE_ROUNDS, atomic_load(&_ts_stats.rescued_pages) - rescued0);
}

/* ---- 6 ---- */

static int heap_parked(void *heap) {
    return atomic_load(&((ts_heap_t *)heap)->rescue_parked);
}
static size_t rescued_target;
static int rescued_reached(void *unused) {
    (void)unused;
    return atomic_load(&_ts_stats.rescued_pages) >= rescued_target;
}

static void test_parking(void) {
    CHECK(ts_option_set("purge_delay_ms", 0)); /* looks 10, 20, ... 640 ms apart */
    owner_t o;
    pthread_t t = owner_start(&o, 0);
    owner_run(&o, race_alloc);
    ts_page_t *page = NULL;
    CHECK(_ts_locate(race_blocks[0], &page) == TS_PTR_BLOCK);
    ts_heap_t *heap = (ts_heap_t *)(atomic_load(&page->owner) & ~TS_OWNER_FLAGS);
    race_nkept = 0;
    for (size_t i = 0; i < RACE_N; i++) { /* keep the first block of each page */
        ts_page_t *p = NULL, *prev = NULL;
        (void)_ts_locate(race_blocks[i], &p);
        if (i) (void)_ts_locate(race_blocks[i - 1], &prev);
        if (p != prev && race_nkept <= RACE_PAGES)
            race_kept[race_nkept++] = race_blocks[i];
        else
            free(race_blocks[i]);
    }
    malloc_trim(0);
    CHECK_MSG(wait_for(heap_parked, heap, 20.0), "the helper kept looking at an idle heap");
    size_t runs = atomic_load(&_ts_stats.purge_runs);
    struct timespec second = {1, 0};
    nanosleep(&second, NULL); /* parked: no pass should be needed */
    runs = atomic_load(&_ts_stats.purge_runs) - runs;
    /* 0 passes (measured); a helper that kept looking at the heap at its
     * first pace (10 ms) makes about 100. */
    CHECK_MSG(runs <= 3, "%zu purge passes in 1 s with the only waiting heap parked", runs);
    /* The kept block of a page in the full list: freeing it makes the page whole. */
    size_t k = 0;
    for (; k < race_nkept; k++) {
        ts_page_t *p = NULL;
        (void)_ts_locate(race_kept[k], &p);
        if ((atomic_load(&p->owner) & TS_OWNER_FLAGS) == TS_OWNER_FULL) break;
    }
    CHECK(k < race_nkept);
    rescued_target = atomic_load(&_ts_stats.rescued_pages) + 1;
    free(race_kept[k]);
    race_kept[k] = NULL;
    malloc_trim(0); /* pushes main's batch holding it */
    CHECK_MSG(wait_for(rescued_reached, NULL, 20.0), "the page made whole was not rescued");
    owner_run(&o, race_free_kept);
    owner_stop(&o, t);
    CHECK(ts_option_set("purge_delay_ms", 100));
    printf("parking: no pass while parked (%zu), woken by the free that made a page whole\n", runs);
}

/* ---- 7 ---- */

#define BUSY_BLOCKS 4096 /* 64 B: four full small pages a round */
#define BUSY_ROUNDS 200

static void busy_alloc(owner_t *o) {
    for (size_t i = 0; i < o->n; i++) {
        o->blocks[i] = malloc(64);
        CHECK(o->blocks[i] != NULL);
        fill(o->blocks[i], 64, i + 7);
    }
}
static void busy_free(owner_t *o) {
    for (size_t i = 0; i < o->n; i++) {
        CHECK(intact(o->blocks[i], 64, i + 7));
        free(o->blocks[i]); /* full batches go to full pages: hand-overs */
    }
}
static int heap_armed(void *heap) {
    return __atomic_load_n(&((ts_heap_t *)heap)->rescue_armed, __ATOMIC_RELAXED);
}

/* With a purge delay of 10 s (idle after 50 s), an owner that has filled
 * four pages and waits; returns its heap. */
static ts_heap_t *busy_owner_start(owner_t *o, pthread_t *t) {
    CHECK(ts_option_set("purge_delay_ms", 10000));
    CHECK(_ts_purge_thread_running());
    *t = owner_start(o, BUSY_BLOCKS);
    owner_run(o, busy_alloc);
    ts_page_t *page = NULL;
    CHECK(_ts_locate(o->blocks[0], &page) == TS_PTR_BLOCK);
    return (ts_heap_t *)(atomic_load(&page->owner) & ~TS_OWNER_FLAGS);
}

static void test_busy_owner(bool rescue) {
    if (!rescue) CHECK(ts_option_set("rescue", 0));
    owner_t o;
    pthread_t t;
    ts_heap_t *heap = busy_owner_start(&o, &t);
    busy_free(&o);
    if (rescue) /* the helper's first look at the waiting heap (woken by the hand-over) */
        CHECK_MSG(wait_for(heap_armed, heap, 20.0), "the helper never looked at the heap");
    else /* nothing for it to do: asleep with no deadline, any request would wake it */
        CHECK_MSG(wait_for(helper_idle, NULL, 20.0), "the helper never went idle");
    size_t runs = atomic_load(&_ts_stats.purge_runs);
    for (int r = 0; r < BUSY_ROUNDS; r++) {
        owner_run(&o, busy_alloc); /* its slow path takes the blocks handed over */
        busy_free(&o);
    }
    runs = atomic_load(&_ts_stats.purge_runs) - runs;
    owner_stop(&o, t);
    CHECK(ts_option_set("purge_delay_ms", 100));
    CHECK(ts_option_set("rescue", 1));
    /* 0 passes with rescue on and off (measured); a pass a round of
     * hand-overs, the behaviour guarded, makes 200. */
    CHECK_MSG(runs <= 10, "%zu purge passes in %d rounds of hand-overs (rescue %s)", runs,
              BUSY_ROUNDS, rescue ? "on" : "off");
    printf("busy owner: %zu passes in %d rounds, rescue %s\n", runs, BUSY_ROUNDS,
           rescue ? "on" : "off");
}

/* ---- 8 ---- */

static void *busy_free_and_exit(void *arg) {
    busy_free(arg); /* its exit pushes the last batches */
    return NULL;
}

static void test_delay_lowered(void) {
    owner_t o;
    pthread_t t;
    ts_heap_t *heap = busy_owner_start(&o, &t);
    rescued_target = atomic_load(&_ts_stats.rescued_pages) + 1;
    pthread_t freer;
    CHECK(pthread_create(&freer, NULL, busy_free_and_exit, &o) == 0);
    CHECK(pthread_join(freer, NULL) == 0);
    CHECK_MSG(wait_for(heap_armed, heap, 20.0), "the helper never looked at the heap");
    CHECK(ts_option_set("purge_delay_ms", 20)); /* idle after 100 ms now */
    CHECK_MSG(wait_for(rescued_reached, NULL, 20.0),
              "no page rescued in 20 s after the purge delay was lowered");
    owner_stop(&o, t);
    CHECK(ts_option_set("purge_delay_ms", 100));
    printf("purge delay lowered while a heap waited: its pages rescued\n");
}

/* ---- 12 ---- */

#define N12 4000

static ts_heap_t *owner_heap_of(owner_t *o) {
    ts_page_t *page = NULL;
    CHECK(_ts_locate(o->blocks[0], &page) == TS_PTR_BLOCK);
    return (ts_heap_t *)(atomic_load(&page->owner) & ~TS_OWNER_FLAGS);
}

static void test_idle_wait(void) {
    CHECK(ts_option_set("purge_delay_ms", 600000)); /* the helper's looks come too late */
    uint64_t d = _ts_idle_ns(0), at = (uint64_t)1 << 60;
    CHECK(d == 600000000000u && _ts_idle_ns(1) == 2 * d && _ts_idle_ns(3) == 8 * d);
    CHECK(_ts_idle_shift_next(0, at, at + d) == 1);        /* back soon: longer */
    CHECK(_ts_idle_shift_next(0, at, at - 1) == 1);        /* a pass's time ahead */
    CHECK(_ts_idle_shift_next(1, at, at + 15 * d) == 2);   /* within 8 waits of 2 d */
    CHECK(_ts_idle_shift_next(3, at, at) == 3);            /* at most 8 delays */
    CHECK(_ts_idle_shift_next(0, at, at + 9 * d) == 0);    /* back late: as it was */
    CHECK(_ts_idle_shift_next(2, at, at + 257 * d) == 1);  /* after 64 waits: shorter */
    CHECK(_ts_idle_shift_next(0, at, at + 1000 * d) == 0); /* at least one delay */

    owner_t o;
    pthread_t t = owner_start(&o, N12);
    for (unsigned round = 1; round <= 4; round++) {
        owner_run(&o, alloc_small); /* its pages go full */
        ts_heap_t *heap = owner_heap_of(&o);
        unsigned shift = round - 1 < TS_IDLE_SHIFT_MAX ? round - 1 : TS_IDLE_SHIFT_MAX;
        CHECK_MSG(atomic_load(&heap->idle_shift) == shift, "round %u: idle shift %u, not %u", round,
                  (unsigned)atomic_load(&heap->idle_shift), shift);
        CHECK(ts_heap_idle_ns(heap) == d << shift);
        size_t rescued0 = atomic_load(&_ts_stats.rescued_pages);
        pthread_t freer; /* frees everything and exits, which pushes its batches */
        CHECK(pthread_create(&freer, NULL, free_owner_blocks, &o) == 0);
        CHECK(pthread_join(freer, NULL) == 0);
        rescue_passes(); /* the rescue at a time ahead of the owner's clock */
        CHECK_MSG(atomic_load(&_ts_stats.rescued_pages) > rescued0, "round %u: nothing rescued",
                  round);
        CHECK(atomic_load(&heap->gave_back_at) != 0);
        owner_run(&o, trim); /* back: its slow path takes the note */
        CHECK(atomic_load(&heap->gave_back_at) == 0);
    }
    owner_run(&o, alloc_small);
    ts_heap_t *heap = owner_heap_of(&o);
    CHECK(atomic_load(&heap->idle_shift) == TS_IDLE_SHIFT_MAX);
    /* Back long after a give-back: with a 1 ms delay (waits of 10 ms), a
     * note from the clock's start is more than 64 waits old. */
    CHECK(ts_option_set("purge_delay_ms", 1));
    _ts_heap_note_give_back(heap, 1);
    owner_run(&o, trim);
    CHECK_MSG(atomic_load(&heap->idle_shift) == TS_IDLE_SHIFT_MAX - 1,
              "idle shift %u after a late return", (unsigned)atomic_load(&heap->idle_shift));
    owner_run(&o, check_free_all);
    printf("idle wait: 1, 2, 4, 8 purge delays after returns within 8 waits of a rescue\n");
    owner_stop(&o, t);
    CHECK(ts_option_set("purge_delay_ms", 100));
}

int main(void) {
    free(malloc(1));
#ifdef RESCUE_TSAN /* the races only: RSS, aborts and timing are core_rescue's */
    test_blocks_out();
    test_queue_pages();
    test_unfull_race();
    test_queue_race();
    test_stress();
    return 0;
#endif
    test_rescue();
    test_blocks_out();
    CHECK(ts_expect_abort(double_free_into_rescued, NULL, "tsalloc: free(): double free of 0x"));
    CHECK(ts_expect_abort(double_free_into_rescued, (void *)1,
                          "tsalloc: free(): double free of 0x")); /* by the owner */
    CHECK(ts_expect_abort(double_free_into_rescued, (void *)2,
                          "tsalloc: realloc(): double free of 0x"));
    test_queue_pages();
    CHECK(ts_expect_abort(double_free_into_rescued, (void *)HOW_QUEUE,
                          "tsalloc: free(): double free of 0x"));
    CHECK(ts_expect_abort(double_free_into_rescued, (void *)(HOW_QUEUE | 1),
                          "tsalloc: free(): double free of 0x")); /* by the owner */
    test_unfull_race();
    test_queue_race();
    test_parking();
    test_busy_owner(true);
    test_busy_owner(false);
    test_delay_lowered();
    test_idle_wait();
    test_stress();
    return 0;
}
