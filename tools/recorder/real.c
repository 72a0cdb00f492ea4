/* The recorder's view of the real allocator: the next definition of each
 * function of the malloc family (dlsym RTLD_NEXT), found once, and the
 * bootstrap arena that serves dlsym's own allocations while they are looked
 * up.
 *
 * Invariants: _ts_rec_real is written once, by the one thread that moves
 * _ts_rec_real_state from NONE to RESOLVING, and read only after READY
 * (acquire). The arena's blocks are never reused or given back.
 */
#include "recorder.h"

#include <dlfcn.h>
#include <errno.h>
#include <string.h>

ts_rec_real_t _ts_rec_real;
atomic_int _ts_rec_real_state;
/* This thread runs dlsym for the real functions: its allocations use the arena. */
static TS_TLS int resolving_here;

_Alignas(4096) unsigned char _ts_rec_boot_arena[TS_REC_BOOT_BYTES];
static atomic_size_t boot_used;

void *_ts_rec_boot_alloc(size_t size, size_t align) {
    if (align < TS_MIN_ALIGN) align = TS_MIN_ALIGN;
    if (size > TS_REC_BOOT_BYTES || align > TS_REC_BOOT_BYTES / 4 || !ts_is_pow2(align)) {
        errno = ENOMEM;
        return NULL;
    }
    size_t need = sizeof(size_t) + align + size;
    size_t start = atomic_fetch_add(&boot_used, need);
    if (start + need > TS_REC_BOOT_BYTES) {
        errno = ENOMEM;
        return NULL;
    }
    uintptr_t p = ts_align_up_ptr((uintptr_t)_ts_rec_boot_arena + start + sizeof(size_t), align);
    ((size_t *)p)[-1] = size;
    return (void *)p;
}

/* Every function of the family must be found but reallocarray, which the
 * wrapper replaces by realloc where the C library has none. */
#define RESOLVE(name, ret, params, args)                                                           \
    _ts_rec_real.name = (__typeof__(_ts_rec_real.name))dlsym(RTLD_NEXT, #name);                   \
    if (!_ts_rec_real.name && strcmp(#name, "reallocarray") != 0) found_all = 0;

int _ts_rec_resolve_real(void) {
    int expected = TS_REC_REAL_NONE;
    if (atomic_compare_exchange_strong(&_ts_rec_real_state, &expected, TS_REC_REAL_RESOLVING)) {
        int found_all = 1;
        resolving_here = 1;
        TS_MALLOC_FAMILY(RESOLVE)
        _ts_rec_real.exit_now = (void (*)(int))dlsym(RTLD_NEXT, "_exit");
        resolving_here = 0;
        if (!found_all || !_ts_rec_real.exit_now)
            _ts_fatal("record: no allocator found after libtsalloc-record.so");
        atomic_store_explicit(&_ts_rec_real_state, TS_REC_REAL_READY, memory_order_release);
        return 1;
    }
    if (resolving_here) return 0;
    while (atomic_load_explicit(&_ts_rec_real_state, memory_order_acquire) != TS_REC_REAL_READY)
        _ts_os_yield();
    return 1;
}
