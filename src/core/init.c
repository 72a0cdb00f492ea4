/* Start-up and thread lifetime.
 *
 * Initialisation is lazy: the first allocation of the process (which under
 * LD_PRELOAD may come from the dynamic loader, before main and before any
 * constructor) builds the size-class table, reads the options and creates the
 * pthread key whose destructor abandons a thread's heap. None of that
 * allocates. A thread's heap is made on its first allocation.
 *
 * TLS: one pointer (_ts_tls_heap, initial-exec, so the fast path reads it
 * with one instruction and no __tls_get_addr call) and a new thread's count
 * of calls on the shared heap (heap.c). Twelve bytes of static TLS fit in the
 * surplus glibc reserves for libraries loaded with dlopen, so the library
 * still works when it is dlopen'ed (it then only serves the callers that
 * reach it through the ts_* API).
 *
 * Invariant: process_state goes 0 -> 1 (one thread initialising; others
 * yield) -> 2, and nothing during 1 allocates or waits for another thread.
 */
#include "core/internal.h"
#include "core/valgrind.h"

#include "base/thread_exit.h"

static TS_STARTUP_DATA _Atomic int process_state;
/* Random, set before the first page exists (internal.h: free marks). */
static uint64_t mark_secret = 0xd6e8feb86659fd93ull;
static TS_STARTUP_DATA _Atomic uint64_t mark_pages;

uint64_t _ts_new_mark_key(void) {
    uint64_t n = atomic_fetch_add_explicit(&mark_pages, 1, memory_order_relaxed) + 1;
    uint64_t x = mark_secret ^ n * 0x9e3779b97f4a7c15ull;
    x ^= x >> 29; /* mixed, so that keys of successive pages share no pattern */
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 32;
    return x | (uint64_t)1 << 63;
}
static TS_STARTUP_DATA _Atomic int ctor_done;
static TS_STARTUP_DATA ts_thread_exit_t heap_exit;

static void thread_exit_heap(ts_heap_t *heap) {
    /* A heap made after glibc cleared this thread's keys (its first allocator
     * call came from glibc's stack cache, after the destructors) stays in the
     * thread-specific data of the cached stack and reaches the next thread
     * that reuses that stack. Only this thread's own heap is abandoned here;
     * heaps of dead threads are found through their robust mutex. */
    if (heap != _ts_tls_heap) return;
    _ts_tls_heap = &_ts_heap_dead; /* later allocations: the shared heap */
    if (TS_CHECKED && heap) _ts_check_heap(heap, "thread exit");
    if (heap && heap->state == TS_HEAP_ACTIVE) _ts_heap_thread_exit(heap);
    ts_purge_safe_point();
}

static void thread_exit(void *arg) {
    bool vg = _ts_vg_core_enter(); /* under Valgrind the real heap is set aside */
    thread_exit_heap(arg);
    if (vg) _ts_vg_core_leave();
}

static TS_NOINLINE void process_init_slow(void) {
    int expect = 0;
    if (atomic_compare_exchange_strong(&process_state, &expect, 1)) {
        _ts_sizeclass_init();
        _ts_options_init();
        _ts_zero_free_init();
        mark_secret = _ts_os_random();
        (void)_ts_os_page_size(); /* the OS layer caches it: once, before other threads */
        _ts_segmap_init();        /* before the first segment sets an entry */
        if (!_ts_thread_exit_init(&heap_exit, thread_exit))
            _ts_verbose(1, "no pthread key: heaps of exiting threads are not reused");
        atomic_store_explicit(&process_state, 2, memory_order_release);
        _ts_verbose(2, "initialised");
        return;
    }
    while (atomic_load_explicit(&process_state, memory_order_acquire) != 2) _ts_os_yield();
}

void _ts_process_init(void) {
    if (ts_unlikely(atomic_load_explicit(&process_state, memory_order_acquire) != 2))
        process_init_slow();
}

bool _ts_process_ready(void) {
    return atomic_load_explicit(&ctor_done, memory_order_acquire);
}

ts_heap_t *_ts_thread_init(void) {
    _ts_process_init();
    ts_heap_t *heap = _ts_heap_new(true, 0);
    if (!heap) return NULL;
    /* Publish first: arming may itself call calloc. */
    _ts_tls_heap = heap;
    _ts_thread_exit_arm(&heap_exit, heap);
    return heap;
}

/* Runs once libc is fully initialised: from here on the purge thread may be
 * started. Also makes sure the process is initialised even if it never
 * allocates before main. */
__attribute__((constructor)) static void core_constructor(void) {
    _ts_process_init();
    if (_ts_option(TS_OPT_STATS)) _ts_os_keep_stderr(); /* printed at exit, stderr or not */
    atomic_store_explicit(&ctor_done, 1, memory_order_release);
}

__attribute__((destructor)) static void core_destructor(void) {
    if (_ts_option(TS_OPT_STATS)) _ts_stats_print_exit();
}
