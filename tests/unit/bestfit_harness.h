/* Shared harness of the bestfit unit tests: one table per design (bestfit =
 * "lock", bestfit-tls = "nolock") with its design functions and debug hooks,
 * picked by argv[1], and helpers to snapshot the free blocks.
 *
 * Most tests link the objects of libtsalloc-classic with the real break's OS
 * layer: glibc stays the process malloc and moves the same break, which the
 * designs must survive (bestfit_tls_handover and bestfit_regress link
 * libtsalloc-classic.a itself, whose break is private). The designs are
 * reached through their hidden functions and debug hooks (designs/bestfit/debug.h).
 */
#ifndef TS_TEST_BESTFIT_HARNESS_H
#define TS_TEST_BESTFIT_HARNESS_H

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "designs/bestfit/debug.h"
#include "designs/design.h"
#include "tsalloc/classic.h"

TS_DESIGN_DECLARE(bestfit)
TS_DESIGN_DECLARE(bestfit_tls)

typedef struct {
    const char *name; /* "lock" or "nolock" */
    void *(*malloc)(size_t);
    void (*free)(void *);
    void *(*calloc)(size_t);
    void *(*realloc)(void *, size_t);
    void *(*memalign)(size_t, size_t);
    size_t (*usable)(const void *);
    int (*trim)(size_t);
    void (*walk)(ts_bestfit_walk_fn, void *);
    const char *(*check)(void);
    size_t (*block_size)(size_t);
    void (*tunables)(ts_bestfit_tunables_t *);
    size_t (*wasted)(void);
    size_t (*mapped)(void); /* bytes of chunks mapped because sbrk refused */
} bf_api_t;

static const bf_api_t bf_apis[] = {
    {"lock", ts_malloc_lock, ts_free_lock, _ts_bestfit_calloc, _ts_bestfit_realloc,
     _ts_bestfit_memalign, _ts_bestfit_usable_size, _ts_bestfit_trim, _ts_bestfit_debug_walk,
     _ts_bestfit_debug_check, _ts_bestfit_debug_block_size, _ts_bestfit_debug_tunables,
     _ts_bestfit_debug_wasted, _ts_bestfit_debug_mapped},
    {"nolock", ts_malloc_nolock, ts_free_nolock, _ts_bestfit_tls_calloc, _ts_bestfit_tls_realloc,
     _ts_bestfit_tls_memalign, _ts_bestfit_tls_usable_size, _ts_bestfit_tls_trim,
     _ts_bestfit_tls_debug_walk, _ts_bestfit_tls_debug_check, _ts_bestfit_tls_debug_block_size,
     _ts_bestfit_tls_debug_tunables, _ts_bestfit_tls_debug_wasted, _ts_bestfit_tls_debug_mapped},
};

/* argv[1] names the design: "lock" (bestfit) or "nolock" (bestfit-tls). */
static inline const bf_api_t *bf_api_from_args(int argc, char **argv) {
    const char *want = argc > 1 ? argv[1] : "lock";
    for (size_t i = 0; i < sizeof bf_apis / sizeof bf_apis[0]; i++)
        if (!strcmp(bf_apis[i].name, want)) return &bf_apis[i];
    fprintf(stderr, "usage: %s lock|nolock\n", argv[0]);
    exit(2);
}

#define BF_CHECK_HEAP(api)                                                                         \
    do {                                                                                           \
        const char *_err = (api)->check();                                                         \
        CHECK_MSG(_err == NULL, "%s heap: %s", (api)->name, _err);                                 \
    } while (0)

/* A snapshot of the free blocks, in address order. */
typedef struct {
    uintptr_t start;
    size_t size;
    int is_reserve;
} bf_free_t;

typedef struct {
    bf_free_t *blocks;
    size_t count, cap, bytes;
} bf_snapshot_t;

static inline void bf_snapshot_add(uintptr_t start, size_t size, int is_reserve, void *arg) {
    bf_snapshot_t *s = (bf_snapshot_t *)arg;
    if (s->count == s->cap) {
        s->cap = s->cap ? s->cap * 2 : 256;
        s->blocks = (bf_free_t *)realloc(s->blocks, s->cap * sizeof *s->blocks);
        CHECK(s->blocks != NULL);
    }
    s->blocks[s->count].start = start;
    s->blocks[s->count].size = size;
    s->blocks[s->count].is_reserve = is_reserve;
    s->count++;
    s->bytes += size;
}

/* Replaces *s with the current free blocks of api's heap (the caller's, for nolock). */
static inline void bf_snapshot(const bf_api_t *api, bf_snapshot_t *s) {
    s->count = 0;
    s->bytes = 0;
    api->walk(bf_snapshot_add, s);
}

static inline void bf_snapshot_free(bf_snapshot_t *s) {
    free(s->blocks);
    memset(s, 0, sizeof *s);
}

/* The free block starting at `start`, or NULL. */
static inline const bf_free_t *bf_find(const bf_snapshot_t *s, uintptr_t start) {
    for (size_t i = 0; i < s->count; i++)
        if (s->blocks[i].start == start) return &s->blocks[i];
    return NULL;
}

/* The free block containing address a, or NULL. */
static inline const bf_free_t *bf_containing(const bf_snapshot_t *s, uintptr_t a) {
    for (size_t i = 0; i < s->count; i++)
        if (a >= s->blocks[i].start && a < s->blocks[i].start + s->blocks[i].size)
            return &s->blocks[i];
    return NULL;
}

/* What a full linear best-fit scan picks: the smallest block of at least
 * `need` bytes, the lowest address among equal sizes; NULL when none fits. */
static inline const bf_free_t *bf_reference_fit(const bf_snapshot_t *s, size_t need) {
    const bf_free_t *best = NULL;
    for (size_t i = 0; i < s->count; i++) {
        const bf_free_t *b = &s->blocks[i];
        if (b->size >= need &&
            (!best || b->size < best->size || (b->size == best->size && b->start < best->start)))
            best = b;
    }
    return best;
}

/* realloc of a filled slot to n bytes: the kept prefix must survive, then
 * the slot is filled again for its new length. */
static inline void bf_realloc_slot(const bf_api_t *api, void **slot, size_t *len, uint64_t tag,
                                   size_t n) {
    void *p = api->realloc(*slot, n);
    CHECK(p);
    CHECK(ts_verify(p, *len < n ? *len : n, tag));
    *slot = p;
    *len = n;
    ts_fill(p, n, tag);
}

/* count blocks of lo..hi bytes (sizes from rng) into p[] and n[], block i
 * filled with tag0 + i. */
static inline void bf_alloc_tagged(const bf_api_t *api, void **p, size_t *n, int count,
                                   uint64_t *rng, size_t lo, size_t hi, uint64_t tag0) {
    for (int i = 0; i < count; i++) {
        n[i] = ts_rand_range(rng, lo, hi);
        p[i] = api->malloc(n[i]);
        CHECK_MSG(p[i] != NULL, "malloc(%zu) returned NULL", n[i]);
        ts_fill(p[i], n[i], tag0 + (uint64_t)i);
    }
}

/* The block (header included) behind payload p. */
static inline uintptr_t bf_block(const void *p) {
    return (uintptr_t)p - 16;
}
static inline size_t bf_block_size_of(const bf_api_t *api, const void *p) {
    return api->usable(p) + 16;
}

#endif
