/* A hook that runs when a thread exits: a pthread key whose destructor is
 * the hook, shared by the designs that keep per-thread state (the core's
 * heaps, bestfit-tls's heaps, bins' arenas).
 *
 * Use: _ts_thread_exit_init once per process (the caller serialises it),
 * then _ts_thread_exit_arm in each thread that has state to give back, with
 * that state as the value. At the thread's exit glibc calls on_thread_exit(value).
 *
 * Invariants every on_thread_exit relies on:
 * - init does not allocate, so it may run inside the first malloc. When it
 *   fails (the process used up its keys) arm does nothing and exits go
 *   unseen; each design says what it then leaks or keeps.
 * - arm may allocate (glibc takes the data of keys past the first 32 from
 *   calloc): the thread's state must be published (in its TLS) before, so
 *   that the allocation finds it instead of arming again.
 * - on_thread_exit runs in one of glibc's destructor rounds, and not at all for a
 *   thread that arms after its last round (its first allocation came from a
 *   late destructor of another key) or that ends the process.
 * - The value reaching on_thread_exit may belong to another thread: one armed after
 *   glibc cleared the thread's keys stays in the thread data of its cached
 *   stack, which a later thread reuses. on_thread_exit compares the value with the
 *   calling thread's own state and ignores any other.
 * - The key is never deleted: on_thread_exit stays registered for the life of the
 *   process, across fork (the child's thread keeps its value), so its code
 *   must stay loaded.
 */
#ifndef TS_BASE_THREAD_EXIT_H
#define TS_BASE_THREAD_EXIT_H

#include <pthread.h>
#include <stdbool.h>

#include "base/base.h"

typedef struct ts_thread_exit {
    pthread_key_t key;
    bool made; /* the key exists */
} ts_thread_exit_t;

/* Creates the hook's key. False when no key is left. */
TS_HIDDEN bool _ts_thread_exit_init(ts_thread_exit_t *hook, void (*on_thread_exit)(void *value));

/* Arms the hook for the calling thread with a non-NULL value. */
TS_HIDDEN void _ts_thread_exit_arm(ts_thread_exit_t *hook, void *value);

#endif
