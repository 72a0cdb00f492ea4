/* bins: arenas, their threads, and the process-wide operations (trim, info,
 * fork).
 *
 * Each thread takes an arena on its first malloc: a free one if any (an
 * arena whose thread exited), else a new one. A pthread key destructor gives
 * the arena back when the thread exits, after draining it and returning its
 * empty chunks and cached blocks to the OS. Arenas are never unmapped, so a
 * pointer to one (in a chunk header, or on another thread's stack while it
 * pushes a remote free) stays valid for the life of the process; the number
 * of arenas is the peak number of threads that allocated at the same time.
 *
 * Arena states: FREE -> OWNED (a thread adopts it, CAS) -> FREE (thread exit);
 * FREE -> BUSY -> FREE (trim tidies an unowned arena, CAS); OWNED/BUSY ->
 * ORPHAN in a fork child (their threads do not exist there; their data may
 * be mid-update, so they are never adopted; remote frees into them are safe).
 *
 * Lock order: arenas_lock only (creating an arena, and fork). It is never held
 * while an arena's data is touched.
 */
#include "base/valgrind.h"
#include "base/thread_exit.h"
#include "designs/bins/bins.h"

#include <errno.h>
#include <pthread.h>

#include "base/options.h"

TS_DESIGN_DECLARE(bins)

TS_TLS ts_bins_arena_t *_ts_bins_tls_arena;
static TS_TLS bool thread_exited; /* the key destructor ran in this thread */

uintptr_t _ts_bins_cookie;
size_t _ts_bins_cache_limit;
unsigned _ts_bins_keep_chunks;

static pthread_mutex_t arenas_lock = PTHREAD_MUTEX_INITIALIZER;
static _Atomic(ts_bins_arena_t *) arenas; /* newest first, linked by next_all */
static _Atomic size_t arena_total;
static _Atomic bool initialised;
static ts_thread_exit_t exit_hook;

static void thread_exit(void *value);

static void init_once(void) {
    if (ts_likely(atomic_load_explicit(&initialised, memory_order_acquire))) return;
    pthread_mutex_lock(&arenas_lock);
    if (!atomic_load_explicit(&initialised, BINS_RELAXED)) {
        _ts_bins_cookie = (uintptr_t)(_ts_os_random() | 1); /* the free-block mark's secret */
        /* Through the option table (base/options.h): values in range. */
        _ts_bins_cache_limit = (size_t)_ts_option_env(TS_OPTID_BINS_CACHE, NULL);
        _ts_bins_keep_chunks = (unsigned)_ts_option_env(TS_OPTID_BINS_KEEP_CHUNKS, NULL);
        _ts_thread_exit_init(&exit_hook, thread_exit);
        atomic_store_explicit(&initialised, true, memory_order_release);
    }
    pthread_mutex_unlock(&arenas_lock);
}

static ts_bins_arena_t *arena_new(void) {
    size_t size = ts_align_up(sizeof(ts_bins_arena_t), _ts_os_page_size());
    ts_bins_arena_t *a = _ts_os_map(size);
    if (!a) return NULL;
    for (unsigned bin = 0; bin <= BINS_CHUNK_MAX_BIN; bin++) a->bins[bin] = &_ts_bins_empty_page;
    atomic_store_explicit(&a->state, BINS_ARENA_OWNED, BINS_RELAXED);
    return a;
}

ts_bins_arena_t *_ts_bins_arena_acquire(void) {
    init_once();
    for (ts_bins_arena_t *a = atomic_load_explicit(&arenas, memory_order_acquire); a;
         a = a->next_all) {
        int expected = BINS_ARENA_FREE;
        if (atomic_load_explicit(&a->state, BINS_RELAXED) == BINS_ARENA_FREE &&
            atomic_compare_exchange_strong_explicit(&a->state, &expected, BINS_ARENA_OWNED,
                                                    memory_order_acquire, BINS_RELAXED))
            return a;
    }
    pthread_mutex_lock(&arenas_lock);
    ts_bins_arena_t *a = arena_new();
    if (a) {
        a->id = (unsigned)atomic_load_explicit(&arena_total, BINS_RELAXED);
        a->next_all = atomic_load_explicit(&arenas, BINS_RELAXED);
        atomic_store_explicit(&arenas, a, memory_order_release);
        atomic_fetch_add_explicit(&arena_total, 1, BINS_RELAXED);
    }
    pthread_mutex_unlock(&arenas_lock);
    return a;
}

void _ts_bins_arena_release(ts_bins_arena_t *a) {
    atomic_store_explicit(&a->state, BINS_ARENA_FREE, memory_order_release);
}

ts_bins_arena_t *_ts_bins_attach(bool *exited) {
    ts_bins_arena_t *a = _ts_bins_tls_arena;
    if (a) return a;
    if (thread_exited) {
        *exited = true;
        return NULL;
    }
    a = _ts_bins_arena_acquire();
    if (!a) return NULL;
    _ts_bins_tls_arena = a;
    /* May allocate (keys past the first 32): our arena is already in place. */
    _ts_thread_exit_arm(&exit_hook, a);
    return a;
}

bool _ts_bins_arena_tidy(ts_bins_arena_t *a, bool purge) {
    _ts_bins_drain(a);
    bool released = _ts_bins_cache_flush(a);
    released |= _ts_bins_release_empty(a, purge);
    return released;
}

/* The key destructor: the thread is exiting; give its arena back. Later
 * frees from this thread are remote frees; later mallocs borrow an arena. */
static void thread_exit_heap(void *value) {
    ts_bins_arena_t *a = value;
    if (a != _ts_bins_tls_arena) return;
    _ts_bins_tls_arena = NULL;
    thread_exited = true;
    _ts_bins_arena_tidy(a, false);
    _ts_bins_arena_release(a);
}

/* It walks free blocks, which memcheck sees as NOACCESS (base/valgrind.h). */
static void thread_exit(void *value) {
    _ts_vg_quiet(true);
    thread_exit_heap(value);
    _ts_vg_quiet(false);
}

/* ---- process-wide operations --------------------------------------------- */

/* Gives back empty chunks, cached blocks and the memory of free pages, in
 * the caller's arena and in every unowned one. `pad` is ignored. */
int _ts_bins_trim(size_t pad) {
    (void)pad;
    bool released = false;
    ts_bins_arena_t *self = _ts_bins_tls_arena;
    for (ts_bins_arena_t *a = atomic_load_explicit(&arenas, memory_order_acquire); a;
         a = a->next_all) {
        if (a == self) {
            released |= _ts_bins_arena_tidy(a, true);
            continue;
        }
        int expected = BINS_ARENA_FREE;
        if (atomic_compare_exchange_strong_explicit(&a->state, &expected, BINS_ARENA_BUSY,
                                                    memory_order_acquire, BINS_RELAXED)) {
            released |= _ts_bins_arena_tidy(a, true);
            _ts_bins_arena_release(a);
        }
    }
    return released ? 1 : 0;
}

void _ts_bins_info(ts_heap_info_t *info) {
    size_t live = 0, cached = 0, empty = 0;
    for (ts_bins_arena_t *a = atomic_load_explicit(&arenas, memory_order_acquire); a;
         a = a->next_all) {
        live += atomic_load_explicit(&a->live_bytes, BINS_RELAXED);
        cached += atomic_load_explicit(&a->cached_bytes, BINS_RELAXED);
        empty += atomic_load_explicit(&a->empty_bytes, BINS_RELAXED);
    }
    size_t chunks = atomic_load_explicit(&_ts_bins_stats.chunk_bytes, BINS_RELAXED);
    info->arena = chunks;
    info->mmapped = atomic_load_explicit(&_ts_bins_stats.mapped_bytes, BINS_RELAXED);
    info->mmapped_count = atomic_load_explicit(&_ts_bins_stats.mapped_count, BINS_RELAXED);
    info->in_use = live;
    info->free = chunks > live ? chunks - live : 0;
    info->releasable = empty + cached;
    info->peak = atomic_load_explicit(&_ts_bins_stats.peak, BINS_RELAXED);
}

void _ts_bins_atfork_prepare(void) {
    pthread_mutex_lock(&arenas_lock);
}

void _ts_bins_atfork_parent(void) {
    pthread_mutex_unlock(&arenas_lock);
}

void _ts_bins_atfork_child(void) {
    pthread_mutex_init(&arenas_lock, NULL);
    ts_bins_arena_t *self = _ts_bins_tls_arena;
    for (ts_bins_arena_t *a = atomic_load_explicit(&arenas, BINS_RELAXED); a; a = a->next_all) {
        int state = atomic_load_explicit(&a->state, BINS_RELAXED);
        if (a != self && (state == BINS_ARENA_OWNED || state == BINS_ARENA_BUSY))
            atomic_store_explicit(&a->state, BINS_ARENA_ORPHAN, BINS_RELAXED);
    }
}

/* ---- introspection for the unit tests ------------------------------------ */

const void *_ts_bins_thread_arena(void) {
    return _ts_bins_tls_arena;
}

size_t _ts_bins_arena_count(void) {
    return atomic_load_explicit(&arena_total, BINS_RELAXED);
}

size_t _ts_bins_free_arena_count(void) {
    size_t n = 0;
    for (ts_bins_arena_t *a = atomic_load_explicit(&arenas, memory_order_acquire); a;
         a = a->next_all)
        n += atomic_load_explicit(&a->state, BINS_RELAXED) == BINS_ARENA_FREE;
    return n;
}

size_t _ts_bins_chunk_count(void) {
    return atomic_load_explicit(&_ts_bins_stats.chunk_bytes, BINS_RELAXED) / BINS_CHUNK_SIZE;
}
