/* Shared harness of the seed thread tests (seed 001's thread_test,
 * thread_test_malloc_free, thread_test_malloc_free_change_thread and
 * thread_test_measurement), written for tsalloc: argv[1] picks the version
 * (lock: ts_malloc_lock/ts_free_lock, nolock: ts_malloc_nolock/ts_free_nolock),
 * argv[2] the thread count. Linked with libtsalloc-classic.a, glibc being the
 * process malloc, as in the seeds' setup: the designs grow a private break,
 * which get_data_segment_size measures.
 *
 * Every block is filled with a per-block pattern when allocated and verified
 * before it is freed; live blocks are checked for overlap. */
#ifndef TS_TEST_SEED_HARNESS_H
#define TS_TEST_SEED_HARNESS_H

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "designs/bestfit/debug.h"
#include "tsalloc/classic.h"

typedef struct {
    const char *name;
    void *(*malloc)(size_t);
    void (*free)(void *);
    const char *(*check)(void); /* heap invariants: global (lock) or the caller's (nolock) */
} seed_api_t;

static const seed_api_t seed_apis[] = {
    {"lock", ts_malloc_lock, ts_free_lock, _ts_bestfit_debug_check},
    {"nolock", ts_malloc_nolock, ts_free_nolock, _ts_bestfit_tls_debug_check},
};

static const seed_api_t *seed_api;
static int seed_threads;

static inline void seed_args(int argc, char **argv) {
    seed_api = NULL;
    for (size_t i = 0; argc > 1 && i < sizeof seed_apis / sizeof seed_apis[0]; i++)
        if (!strcmp(argv[1], seed_apis[i].name)) seed_api = &seed_apis[i];
    seed_threads = argc > 2 ? atoi(argv[2]) : 4;
    if (!seed_api || seed_threads < 1 || seed_threads > 64) {
        fprintf(stderr, "usage: %s lock|nolock threads\n", argv[0]);
        exit(2);
    }
}

#define SEED_CHECK_HEAP()                                                                          \
    do {                                                                                           \
        const char *_err = seed_api->check();                                                      \
        CHECK_MSG(_err == NULL, "%s heap: %s", seed_api->name, _err);                              \
    } while (0)

/* A live block: its payload, requested size and pattern tag. */
typedef struct {
    void *ptr;
    size_t size;
    uint64_t tag;
} seed_block_t;

static inline seed_block_t seed_alloc(size_t size, uint64_t tag) {
    seed_block_t b = {seed_api->malloc(size), size, tag};
    CHECK_MSG(b.ptr != NULL, "malloc(%zu) failed", size);
    CHECK(((uintptr_t)b.ptr & 15) == 0);
    ts_fill(b.ptr, size, tag);
    return b;
}

static inline void seed_release(seed_block_t *b) {
    CHECK_MSG(ts_verify(b->ptr, b->size, b->tag), "block %p (%zu bytes) corrupted", b->ptr,
              b->size);
    seed_api->free(b->ptr);
    b->ptr = NULL;
}

/* Checks that no two of the n live blocks (NULL entries skipped) overlap and
 * that their patterns are intact. */
static inline void seed_check_live(seed_block_t *blocks, size_t n) {
    ts_range_t *r = calloc(n ? n : 1, sizeof *r);
    CHECK(r);
    size_t count = 0;
    for (size_t i = 0; i < n; i++) {
        if (!blocks[i].ptr) continue;
        CHECK_MSG(ts_verify(blocks[i].ptr, blocks[i].size, blocks[i].tag), "block %zu corrupted",
                  i);
        r[count].start = (uintptr_t)blocks[i].ptr;
        r[count].len = blocks[i].size ? blocks[i].size : 1;
        count++;
    }
    long bad = ts_find_overlap(r, count);
    CHECK_MSG(bad < 0, "live blocks %#lx and %#lx overlap", (unsigned long)r[bad - 1].start,
              (unsigned long)r[bad].start);
    free(r);
}

/* Live blocks are checked while every worker holds them: a worker calls
 * seed_hold_for_check() once its live blocks are final, and goes on when the
 * main thread has run `check`. */
static pthread_barrier_t seed_all_done, seed_checked;
static inline void seed_hold_for_check(void) {
    pthread_barrier_wait(&seed_all_done);
    pthread_barrier_wait(&seed_checked);
}

/* Runs fn on seed_threads threads (argument: the thread's index); with a
 * `check`, runs it while they hold in seed_hold_for_check(). */
static inline void seed_run_threads(void *(*fn)(void *), void (*check)(void)) {
    pthread_barrier_init(&seed_all_done, NULL, (unsigned)seed_threads + 1);
    pthread_barrier_init(&seed_checked, NULL, (unsigned)seed_threads + 1);
    pthread_t tid[64];
    for (int t = 0; t < seed_threads; t++)
        CHECK(pthread_create(&tid[t], NULL, fn, (void *)(intptr_t)t) == 0);
    if (check) {
        pthread_barrier_wait(&seed_all_done);
        check();
        pthread_barrier_wait(&seed_checked);
    }
    for (int t = 0; t < seed_threads; t++) pthread_join(tid[t], NULL);
}

#endif
