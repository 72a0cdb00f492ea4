/* The thread-exit hook (thread_exit.h): a pthread key and its destructor.
 *
 * Invariant: hook->made is written once, by init, before any thread arms
 * the hook (the caller's serialisation publishes it).
 */
#include "base/thread_exit.h"

bool _ts_thread_exit_init(ts_thread_exit_t *hook, void (*on_thread_exit)(void *value)) {
    hook->made = pthread_key_create(&hook->key, on_thread_exit) == 0;
    return hook->made;
}

void _ts_thread_exit_arm(ts_thread_exit_t *hook, void *value) {
    if (hook->made) pthread_setspecific(hook->key, value);
}
