/* libtsalloc-classic only: the fork handlers of the two seed designs and of
 * the OS layer. The per-design libraries get theirs from the override shim;
 * the classic library has no shim, so without these a child forked while
 * another thread holds a design lock (or the sbrk lock) hangs in its first
 * call. Registered once, from a constructor.
 *
 * The designs' handlers are weak references: a program linked with
 * libtsalloc-classic.a that uses one API still links only that design.
 *
 * Lock order (prepare): bestfit's locks, then bestfit-tls's, then the OS
 * layer's sbrk lock; parent and child release in the reverse order.
 */
#include <pthread.h>

#include "os/os.h"

#define CLASSIC_DESIGN_HOOKS(d)                                                                    \
    extern TS_HIDDEN void _ts_##d##_atfork_prepare(void) __attribute__((weak));                    \
    extern TS_HIDDEN void _ts_##d##_atfork_parent(void) __attribute__((weak));                     \
    extern TS_HIDDEN void _ts_##d##_atfork_child(void) __attribute__((weak));
CLASSIC_DESIGN_HOOKS(bestfit)
CLASSIC_DESIGN_HOOKS(bestfit_tls)

static void prepare(void) {
    if (_ts_bestfit_atfork_prepare) _ts_bestfit_atfork_prepare();
    if (_ts_bestfit_tls_atfork_prepare) _ts_bestfit_tls_atfork_prepare();
    _ts_os_atfork_prepare();
}

static void parent(void) {
    _ts_os_atfork_parent();
    if (_ts_bestfit_tls_atfork_parent) _ts_bestfit_tls_atfork_parent();
    if (_ts_bestfit_atfork_parent) _ts_bestfit_atfork_parent();
}

static void child(void) {
    _ts_os_atfork_child();
    if (_ts_bestfit_tls_atfork_child) _ts_bestfit_tls_atfork_child();
    if (_ts_bestfit_atfork_child) _ts_bestfit_atfork_child();
}

/* Named with -u by the static library's users (see CMakeLists.txt), so that
 * the linker takes this member, and its constructor, out of the archive. */
TS_HIDDEN int _ts_classic_fork_anchor;

__attribute__((constructor)) static void register_fork_handlers(void) {
    pthread_atfork(prepare, parent, child);
}
