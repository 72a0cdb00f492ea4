/* Choosing the kind of the seed designs' locks (lock.h): TSALLOC_LOCK, read
 * once for the process, or each lock's own kind.
 *
 * Invariant: `chosen` goes from -1 (not read yet) to one value and stays;
 * every thread computes the same value, so no lock guards it.
 */
#include "base/lock.h"

#include "base/options.h"

static const char *const kind_names[] = {"pthread", "futex", "spin"};
static _Atomic int chosen = -1;

ts_lock_kind_t _ts_lock_chosen(void) {
    int c = atomic_load_explicit(&chosen, memory_order_relaxed);
    if (ts_unlikely(c < 0)) {
        int word = _ts_option_word(TS_OPTID_LOCK, kind_names, 3, NULL);
        c = word < 0 ? TS_LOCK_UNRESOLVED : TS_LOCK_PTHREAD + word;
        atomic_store_explicit(&chosen, c, memory_order_relaxed);
    }
    return (ts_lock_kind_t)c;
}

const char *_ts_lock_kind_name(ts_lock_kind_t kind) {
    return kind >= TS_LOCK_PTHREAD && kind <= TS_LOCK_SPIN ? kind_names[kind - TS_LOCK_PTHREAD]
                                                           : "unresolved";
}

ts_lock_kind_t _ts_lock_resolve(ts_lock_t *l) {
    ts_lock_kind_t k = _ts_lock_chosen();
    if (k == TS_LOCK_UNRESOLVED) k = l->own ? (ts_lock_kind_t)l->own : TS_LOCK_SPIN;
    atomic_store_explicit(&l->kind, (unsigned char)k, memory_order_relaxed);
    return k;
}

void _ts_lock_init(ts_lock_t *l, ts_lock_kind_t own, bool adaptive) {
    l->own = (unsigned char)own;
    l->adaptive = adaptive;
    atomic_store_explicit(&l->kind, TS_LOCK_UNRESOLVED, memory_order_relaxed);
    _ts_lock_reinit(l);
}

void _ts_lock_reinit(ts_lock_t *l) {
    ts_futex_init(&l->futex);
    ts_spin_init(&l->spin);
    pthread_mutexattr_t attr;
    pthread_mutexattr_init(&attr);
    if (l->adaptive) pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_ADAPTIVE_NP);
    pthread_mutex_init(&l->mutex, &attr);
    pthread_mutexattr_destroy(&attr);
}
