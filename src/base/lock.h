/* The lock of the seed designs (bestfit, bestfit-tls's sbrk lock, pow2,
 * pow2-partitioned), of a kind chosen at run time: a pthread mutex (plain or
 * adaptive), the three-state futex mutex (futex_mutex.h) or the spin lock
 * (spinlock.h). TSALLOC_LOCK=pthread|futex|spin picks one kind for every
 * such lock of the process; unset, each lock keeps its design's own kind.
 *
 * The kind is resolved on a lock's first use and never changes; each lock
 * and unlock then costs one predictable branch on it (the seed designs are
 * not the fast allocator). Every thread resolves to the same kind (the
 * environment is read once), so a race on the first use is harmless.
 *
 * Invariants: a lock is held in exactly one of its three members, the one of
 * its kind; the others stay unlocked. Zeroed memory is an unlocked lock whose
 * own kind is the spin lock. Only a fork child may reset a lock
 * held at fork (_ts_lock_reinit). Nothing here allocates.
 */
#ifndef TS_BASE_LOCK_H
#define TS_BASE_LOCK_H

#include <pthread.h>
#include <stdatomic.h>

#include "base/base.h"
#include "base/futex_mutex.h"
#include "base/spinlock.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ts_lock_kind {
    TS_LOCK_UNRESOLVED = 0,
    TS_LOCK_PTHREAD = 1, /* pthread_mutex_t (adaptive where the lock says so) */
    TS_LOCK_FUTEX = 2,   /* ts_futex_mutex_t */
    TS_LOCK_SPIN = 3,    /* ts_spinlock_t */
} ts_lock_kind_t;

typedef struct ts_lock {
    _Atomic unsigned char kind; /* TS_LOCK_UNRESOLVED until first used */
    unsigned char own;          /* the design's kind when TSALLOC_LOCK is unset (0: spin) */
    unsigned char adaptive;     /* as a pthread mutex: PTHREAD_MUTEX_ADAPTIVE_NP */
    ts_futex_mutex_t futex;
    ts_spinlock_t spin;
    pthread_mutex_t mutex;
} ts_lock_t;

#define TS_LOCK_INIT(own_kind)                                                                     \
    {                                                                                              \
        TS_LOCK_UNRESOLVED, own_kind, 0, TS_FUTEX_MUTEX_INIT, TS_SPINLOCK_INIT,                    \
            PTHREAD_MUTEX_INITIALIZER                                                              \
    }
/* A pthread mutex that spins briefly before sleeping, unless TSALLOC_LOCK says otherwise. */
#define TS_LOCK_INIT_ADAPTIVE                                                                      \
    {                                                                                              \
        TS_LOCK_UNRESOLVED, TS_LOCK_PTHREAD, 1, TS_FUTEX_MUTEX_INIT, TS_SPINLOCK_INIT,             \
            PTHREAD_ADAPTIVE_MUTEX_INITIALIZER_NP                                                  \
    }

/* Initialises a lock in memory the design obtained itself (or, in a fork
 * child, a lock that may have been held at fork), keeping its kind. */
TS_HIDDEN void _ts_lock_init(ts_lock_t *l, ts_lock_kind_t own, bool adaptive);
TS_HIDDEN void _ts_lock_reinit(ts_lock_t *l);

/* The kind of l, resolved now from TSALLOC_LOCK or l->own (lock.c). */
TS_HIDDEN ts_lock_kind_t _ts_lock_resolve(ts_lock_t *l);
/* The kind TSALLOC_LOCK names for every seed design's lock, or
 * TS_LOCK_UNRESOLVED when it is unset (or names no kind). */
TS_HIDDEN ts_lock_kind_t _ts_lock_chosen(void);
/* The name of a kind: "pthread", "futex", "spin". */
TS_HIDDEN const char *_ts_lock_kind_name(ts_lock_kind_t kind);

TS_INLINE ts_lock_kind_t ts_lock_kind(ts_lock_t *l) {
    ts_lock_kind_t k = (ts_lock_kind_t)atomic_load_explicit(&l->kind, memory_order_relaxed);
    return ts_likely(k != TS_LOCK_UNRESOLVED) ? k : _ts_lock_resolve(l);
}

TS_INLINE void ts_lock(ts_lock_t *l) {
    ts_lock_kind_t k = ts_lock_kind(l);
    if (k == TS_LOCK_FUTEX)
        ts_futex_lock(&l->futex);
    else if (k == TS_LOCK_SPIN)
        ts_spin_lock(&l->spin);
    else
        pthread_mutex_lock(&l->mutex);
}

TS_INLINE void ts_unlock(ts_lock_t *l) {
    ts_lock_kind_t k = (ts_lock_kind_t)atomic_load_explicit(&l->kind, memory_order_relaxed);
    if (k == TS_LOCK_FUTEX)
        ts_futex_unlock(&l->futex);
    else if (k == TS_LOCK_SPIN)
        ts_spin_unlock(&l->spin);
    else
        pthread_mutex_unlock(&l->mutex);
}

#ifdef __cplusplus
}
#endif

#endif
