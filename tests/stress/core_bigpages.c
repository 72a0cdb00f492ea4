/* Big pages (64-512 KiB classes, one per segment) under random operations:
 * malloc/free, loops over one size (the lingering page, on malloc's inline
 * path), calloc, realloc, posix_memalign, frees by a partner thread, threads
 * that exit with big blocks live (their segments adopted later), malloc_trim
 * and fork. After every operation the owner checks its heap: head[] is the
 * first page of each queue, `used` is exact on every big page, an empty
 * queued big page is the lingering one and first in its queue, at most one
 * kept empty big page has more than TS_EMPTY_BIG_EXTRA_BYTES touched, the
 * dummy page _ts_page_empty is untouched; and every block keeps its contents.
 *
 * Usage: core_bigpages [operations] [seed]
 */
#include <malloc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "core/internal.h"

static uint32_t chain(const ts_page_t *p) {
    uint32_t n = 0;
    for (const ts_block_t *b = p->free; b; b = b->next) {
        n++;
        CHECK_MSG(n <= p->capacity, "free list loops");
    }
    return n;
}

static int in_queue(const ts_heap_t *h, const ts_page_t *pg) {
    for (unsigned c = 0; c < TS_CLASS_COUNT; c++)
        for (ts_page_t *p = h->queue[c].first; p; p = p->next)
            if (p == pg) return 1;
    return 0;
}

static unsigned long checks;

static void check_heap(const char *where) {
    ts_heap_t *h = _ts_tls_heap;
    checks++;
    CHECK_MSG(_ts_page_empty.free == NULL && _ts_page_empty.used == 0 &&
                  _ts_page_empty.capacity == 0 && !_ts_page_empty.next,
              "%s: _ts_page_empty written", where);
    if (h->state != TS_HEAP_ACTIVE) return;
    for (unsigned c = 0; c < TS_CLASS_COUNT; c++) {
        ts_page_t *first = h->queue[c].first;
        CHECK_MSG(h->head[c] == (first ? first : &_ts_page_empty),
                  "%s: class %u: head %p, queue first %p", where, c, (void *)h->head[c],
                  (void *)first);
        if (ts_class_is_list(c)) continue;
        for (ts_page_t *p = first; p; p = p->next) {
            CHECK_MSG(!p->is_head && !p->in_full && !p->cached && p->cls == c, "%s: big page flags",
                      where);
            CHECK_MSG(ts_page_owner(p) == (uintptr_t)h, "%s: big queued page owner %lx", where,
                      (unsigned long)ts_page_owner(p));
            uint32_t exact = p->capacity - chain(p);
            CHECK_MSG(p->used == exact, "%s: class %u page %p used %u, exact %u", where, c,
                      (void *)p, p->used, exact);
            CHECK_MSG(p->used != 0 || p == h->big_linger,
                      "%s: class %u: empty big page %p kept in its queue but not lingering", where,
                      c, (void *)p);
        }
    }
    for (ts_page_t *p = h->full.first; p; p = p->next) {
        if (ts_class_is_list(p->cls)) continue;
        uint32_t exact = p->capacity - chain(p);
        CHECK_MSG(p->used == exact, "%s: full big page used %u, exact %u", where, p->used, exact);
    }
    CHECK_MSG(!h->big_linger || in_queue(h, h->big_linger), "%s: big_linger not queued", where);
    unsigned fat = 0;
    if (h->big_linger && h->big_linger->used == 0) {
        CHECK_MSG(h->queue[h->big_linger->cls].first == h->big_linger,
                  "%s: empty lingering page not first", where);
        fat += h->big_linger->touched > TS_EMPTY_BIG_EXTRA_BYTES;
    }
    for (unsigned i = 0; i < TS_EMPTY_BIG_KEEP; i++) {
        ts_page_t *p = h->empty_big[i];
        if (!p) continue;
        CHECK_MSG(p->cached && p->used == 0 && !in_queue(h, p), "%s: slot page state", where);
        fat += p->touched > TS_EMPTY_BIG_EXTRA_BYTES;
    }
    /* Exact: the keep rule (page.c) lets only one kept page exceed it. */
    CHECK_MSG(fat <= 1, "%s: %u kept empty big pages with more than 1 MiB touched", where, fat);
}

/* ---- blocks with contents ---- */
typedef struct {
    unsigned char *p;
    size_t n;
    uint64_t tag;
} blk_t;

static void fill(blk_t *b) {
    for (size_t i = 0; i < b->n; i += 509) b->p[i] = (unsigned char)(b->tag + i);
    b->p[b->n - 1] = (unsigned char)(b->tag * 3);
}
static void verify(const blk_t *b, const char *what) {
    for (size_t i = 0; i < b->n - 1; i += 509)
        CHECK_MSG(b->p[i] == (unsigned char)(b->tag + i), "%s: block %p (%zu) corrupted at %zu",
                  what, (void *)b->p, b->n, i);
    CHECK_MSG(b->p[b->n - 1] == (unsigned char)(b->tag * 3), "%s: block end corrupted", what);
}

/* ---- partner: remote frees ---- */
#define RING 64
static blk_t ring[RING];
static _Atomic int ring_head, ring_tail; /* single producer, single consumer */
static _Atomic int stop;

static void *partner(void *arg) {
    (void)arg;
    while (!atomic_load(&stop) || atomic_load(&ring_tail) != atomic_load(&ring_head)) {
        int t = atomic_load(&ring_tail);
        if (t == atomic_load_explicit(&ring_head, memory_order_acquire)) {
            sched_yield();
            continue;
        }
        blk_t b = ring[t % RING];
        verify(&b, "partner");
        free(b.p);
        atomic_store_explicit(&ring_tail, t + 1, memory_order_release);
    }
    return NULL;
}
static int give_away(blk_t b) {
    int h = atomic_load(&ring_head);
    if (h - atomic_load(&ring_tail) >= RING) return 0;
    ring[h % RING] = b;
    atomic_store_explicit(&ring_head, h + 1, memory_order_release);
    return 1;
}

/* ---- short-lived threads: leave big blocks live, exit ---- */
#define ORPHANS 16
static blk_t orphans[ORPHANS];
static int norphans;
static uint64_t orphan_seed;
static void *leaver(void *arg) {
    uint64_t *s = arg;
    int n = (int)ts_rand_range(s, 1, 4);
    blk_t keep[4];
    int k = 0;
    for (int i = 0; i < n; i++) {
        size_t sz = ts_rand_range(s, 65537, 512 * 1024);
        void *x = malloc(sz);
        void *y = malloc(sz);
        CHECK(x && y);
        free(x);
        keep[k++] = (blk_t){y, sz, ts_rand(s)};
        fill(&keep[k - 1]);
    }
    check_heap("leaver");
    for (int i = 0; i < k; i++) orphans[i] = keep[i];
    norphans = k;
    return NULL;
}

static size_t big_size(uint64_t *s) {
    switch (ts_rand(s) % 4) {
    case 0:
        return ts_rand_range(s, 65537, 131072);
    case 1:
        return 256 * 1024;
    case 2:
        return ts_rand_range(s, 65537, 512 * 1024);
    default:
        return (size_t)(ts_rand_range(s, 5, 32)) << 14; /* class boundaries */
    }
}

#define LIVE 48
int main(int argc, char **argv) {
    unsigned long limit = argc > 1 ? strtoul(argv[1], 0, 10) : 15000;
    uint64_t seed = argc > 2 ? strtoull(argv[2], 0, 10) : 1;
    free(malloc(1));
    pthread_t pt;
    CHECK(pthread_create(&pt, NULL, partner, NULL) == 0);
    blk_t live[LIVE] = {{0}};
    uint64_t tag = 1;
    unsigned long ops = 0;
    while (ops < limit) {
        ops++;
        unsigned r = (unsigned)(ts_rand(&seed) % 1000);
        int i = (int)(ts_rand(&seed) % LIVE);
        blk_t *b = &live[i];
        if (r < 300) { /* malloc/free toggle */
            if (b->p) {
                verify(b, "free");
                free(b->p);
                b->p = NULL;
            } else {
                b->n = big_size(&seed);
                /* A block on the first page of the class's queue: malloc takes it. */
                ts_page_t *first = _ts_tls_heap->queue[ts_class_of(b->n)].first, *got = NULL;
                bool ready = _ts_tls_heap->state == TS_HEAP_ACTIVE && first && first->free;
                b->p = malloc(b->n);
                CHECK(_ts_locate(b->p, &got) == TS_PTR_BLOCK);
                CHECK_MSG(!ready || got == first, "malloc(%zu) passed over the queue's first page",
                          b->n);
                CHECK(b->p);
                CHECK(malloc_usable_size(b->p) >= b->n);
                b->tag = tag++;
                fill(b);
            }
        } else if (r < 550) { /* tight loop of one size (the lingering page) */
            size_t n = big_size(&seed);
            for (int k = 0; k < 5; k++) {
                void *x = malloc(n);
                CHECK(x);
                memset(x, 0x5a, 64);
                free(x);
            }
        } else if (r < 650) { /* calloc */
            if (b->p) {
                verify(b, "free");
                free(b->p);
            }
            b->n = big_size(&seed);
            b->p = calloc(1, b->n);
            CHECK(b->p);
            for (size_t k = 0; k < b->n; k += 4093) CHECK_MSG(b->p[k] == 0, "calloc not zero");
            CHECK(b->p[b->n - 1] == 0);
            b->tag = tag++;
            fill(b);
        } else if (r < 750) { /* realloc */
            if (!b->p) continue;
            verify(b, "realloc");
            size_t n = ts_rand(&seed) % 8 ? big_size(&seed) : ts_rand_range(&seed, 1, 70000);
            unsigned char *q = realloc(b->p, n);
            CHECK(q);
            size_t keep = n < b->n ? n : b->n; /* the sampled bytes of the prefix survive */
            for (size_t k = 0; k + 1 < keep; k += 509)
                CHECK_MSG(q[k] == (unsigned char)(b->tag + k), "realloc lost contents");
            b->p = q;
            b->n = n;
            b->tag = tag++;
            fill(b);
        } else if (r < 830) { /* aligned */
            if (b->p) {
                verify(b, "free");
                free(b->p);
            }
            size_t align = (size_t)1 << ts_rand_range(&seed, 5, 16);
            b->n = big_size(&seed);
            void *x = NULL;
            CHECK(posix_memalign(&x, align, b->n) == 0);
            CHECK(((uintptr_t)x & (align - 1)) == 0);
            b->p = x;
            b->tag = tag++;
            fill(b);
        } else if (r < 900) { /* remote free */
            if (b->p && give_away(*b)) b->p = NULL;
        } else if (r < 930) { /* a thread that leaves blocks behind */
            orphan_seed = seed + ops;
            pthread_t t;
            CHECK(pthread_create(&t, NULL, leaver, &orphan_seed) == 0);
            CHECK(pthread_join(t, NULL) == 0);
            for (int k = 0; k < norphans; k++) {
                verify(&orphans[k], "orphan");
                if (ts_rand(&seed) % 2) {
                    free(orphans[k].p); /* remote free into an abandoned page */
                } else {                /* keep it as ours */
                    int j = (int)(ts_rand(&seed) % LIVE);
                    if (live[j].p) {
                        verify(&live[j], "free");
                        free(live[j].p);
                    }
                    live[j] = orphans[k];
                }
            }
            norphans = 0;
        } else if (r < 940) {
            malloc_trim(0);
        } else if (r < 945) { /* fork: the child checks and uses its copy */
            pid_t pid = fork();
            CHECK(pid >= 0);
            if (pid == 0) {
                check_heap("child");
                for (int k = 0; k < LIVE; k++)
                    if (live[k].p) {
                        verify(&live[k], "child");
                        free(live[k].p);
                        check_heap("child free");
                    }
                for (int k = 0; k < 100; k++) {
                    void *x = malloc(big_size(&seed));
                    CHECK(x);
                    free(x);
                    check_heap("child loop");
                }
                _exit(0);
            }
            int st;
            CHECK(waitpid(pid, &st, 0) == pid);
            CHECK_MSG(WIFEXITED(st) && WEXITSTATUS(st) == 0, "fork child failed (%d)", st);
        } else { /* free all live */
            for (int k = 0; k < LIVE; k++)
                if (live[k].p && ts_rand(&seed) % 2) {
                    verify(&live[k], "free");
                    free(live[k].p);
                    live[k].p = NULL;
                }
        }
        check_heap("op");
    }
    atomic_store(&stop, 1);
    pthread_join(pt, NULL);
    for (int k = 0; k < LIVE; k++)
        if (live[k].p) {
            verify(&live[k], "end");
            free(live[k].p);
        }
    check_heap("end");
    printf("ok: %lu ops, %lu checks\n", ops, checks);
    return 0;
}
