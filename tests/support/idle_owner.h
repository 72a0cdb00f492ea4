/* Test harness shared by the idle-thread tests of the fast allocator
 * (tests/stress/core_rescue.c, core_sweep.c):
 * - blocks written whole with a tag, and checked (every 512th byte, the
 *   first word and the last byte);
 * - an owner thread that allocates on request and otherwise waits;
 * - a stress run: owner threads alternate bursts of allocation with idle
 *   spells and exit after a few, a new thread taking over, while freer
 *   threads check and free the blocks handed to them and a driver thread
 *   runs the purge thread's passes without pause.
 * Include it after any redefinition of malloc and free (the TSan builds).
 * IDLE_SLOTS (blocks in flight per owner) may be defined first.
 */
#ifndef TS_TEST_IDLE_OWNER_H
#define TS_TEST_IDLE_OWNER_H

#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "core/internal.h"

static inline double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Polls cond(arg) every 10 ms for up to `seconds` (a bound, not a timing
 * assertion); returns whether it came to hold. */
static inline int wait_for(int (*cond)(void *), void *arg, double seconds) {
    double t0 = now_s();
    while (now_s() - t0 < seconds) {
        if (cond(arg)) return 1;
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    return 0;
}
/* The purge helper sleeps with nothing to do (any request would wake it). */
static inline int helper_idle(void *unused) {
    (void)unused;
    return _ts_purge_helper_idle();
}
/* RSS is at most *(size_t *)limit bytes. */
static inline int rss_at_most(void *limit) {
    return ts_rss_bytes() <= *(const size_t *)limit;
}

static inline size_t pages_in_use(void) {
    return atomic_load(&_ts_stats.pages[0]) + atomic_load(&_ts_stats.pages[1]) +
           atomic_load(&_ts_stats.pages[2]);
}

static inline void fill(void *p, size_t n, uint64_t tag) {
    memset(p, (int)(tag & 0xff), n);
    memcpy(p, &tag, sizeof tag);
}
/* The whole block: a purged block must read back what was written. */
static inline int intact(const void *p, size_t n, uint64_t tag) {
    const unsigned char *b = p;
    uint64_t t;
    memcpy(&t, p, sizeof t);
    if (t != tag) return 0;
    for (size_t i = sizeof t; i < n; i += 512)
        if (b[i] != (unsigned char)(tag & 0xff)) return 0;
    return b[n - 1] == (unsigned char)(tag & 0xff);
}

/* ---- an owner thread that allocates on request and otherwise waits ---- */

typedef struct owner {
    pthread_barrier_t step;
    void (*work)(struct owner *);
    void **blocks;
    size_t *sizes;
    size_t n;
    int quit;
} owner_t;

static inline void *owner_main(void *arg) {
    owner_t *o = arg;
    for (;;) {
        pthread_barrier_wait(&o->step); /* main says: go */
        if (o->quit) return NULL;
        o->work(o);
        pthread_barrier_wait(&o->step); /* done */
    }
}
static inline void owner_run(owner_t *o, void (*work)(owner_t *)) {
    o->work = work;
    pthread_barrier_wait(&o->step);
    pthread_barrier_wait(&o->step);
}
static inline pthread_t owner_start(owner_t *o, size_t n) {
    *o = (owner_t){.n = n};
    o->blocks = calloc(n, sizeof *o->blocks);
    o->sizes = calloc(n, sizeof *o->sizes);
    CHECK(o->blocks && o->sizes);
    pthread_barrier_init(&o->step, NULL, 2);
    pthread_t t;
    CHECK(pthread_create(&t, NULL, owner_main, o) == 0);
    return t;
}
static inline void owner_stop(owner_t *o, pthread_t t) {
    o->quit = 1;
    pthread_barrier_wait(&o->step);
    CHECK(pthread_join(t, NULL) == 0);
    pthread_barrier_destroy(&o->step);
    free(o->blocks);
    free(o->sizes);
}

/* ---- the stress run ---- */

#define OWNERS 2
#ifndef IDLE_SLOTS
#define IDLE_SLOTS 1024
#endif

typedef struct slot {
    void *p;
    size_t n;
    uint64_t tag;
} slot_t;

/* Owner i hands its blocks to freer i through ring[i]. */
static slot_t ring[OWNERS][IDLE_SLOTS];
static _Atomic long ring_in[OWNERS], ring_out[OWNERS];
static _Atomic int stop;
static _Atomic uint64_t owner_tags[OWNERS]; /* the last tag, for the next thread */
static void *(*stress_life)(void *);        /* one owner thread's life (the test's) */

static inline void *stress_owner(void *arg) {
    while (!atomic_load(&stop)) {
        pthread_t t;
        CHECK(pthread_create(&t, NULL, stress_life, arg) == 0);
        CHECK(pthread_join(t, NULL) == 0);
    }
    return NULL;
}

static inline void *stress_freer(void *arg) {
    long id = (long)(intptr_t)arg;
    long bad = 0;
    for (;;) {
        long out = atomic_load(&ring_out[id]);
        if (out == atomic_load(&ring_in[id])) {
            if (atomic_load(&stop)) break;
            sched_yield();
            continue;
        }
        slot_t *s = &ring[id][out % IDLE_SLOTS];
        bad += !intact(s->p, s->n, s->tag);
        free(s->p);
        atomic_store(&ring_out[id], out + 1);
    }
    return (void *)(intptr_t)bad;
}

/* Run OWNERS owners living `life`, their freers and `driver` for `secs`;
 * returns how many blocks the freers found changed. */
static inline long idle_stress_run(void *(*life)(void *), void *(*driver)(void *), double secs) {
    stress_life = life;
    pthread_t owners[OWNERS], freers[OWNERS], drv;
    for (long i = 0; i < OWNERS; i++) {
        CHECK(pthread_create(&owners[i], NULL, stress_owner, (void *)(intptr_t)i) == 0);
        CHECK(pthread_create(&freers[i], NULL, stress_freer, (void *)(intptr_t)i) == 0);
    }
    CHECK(pthread_create(&drv, NULL, driver, NULL) == 0);
    double t0 = now_s();
    while (now_s() - t0 < secs) {
        struct timespec ts = {0, 50 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    atomic_store(&stop, 1);
    long bad = 0;
    for (int i = 0; i < OWNERS; i++) {
        CHECK(pthread_join(owners[i], NULL) == 0);
        void *r;
        CHECK(pthread_join(freers[i], &r) == 0);
        bad += (long)(intptr_t)r;
    }
    CHECK(pthread_join(drv, NULL) == 0);
    return bad;
}

#endif
