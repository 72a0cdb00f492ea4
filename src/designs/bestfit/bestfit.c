/* The bestfit design, the seeds' locking version (ts_malloc_lock /
 * ts_free_lock): one heap of best-fit free blocks (fitheap.h) grown with sbrk
 * (or with mmap when the break cannot grow), and one lock (an adaptive pthread
 * mutex, or the kind TSALLOC_LOCK names) held across every call that touches
 * it. Blocks carry owner 0.
 *
 * Invariants: heap and config are read and written only with heap_lock held
 * (config is loaded under it on first use). segs is written under grow_lock
 * and read without a lock (fitheap.h). Free blocks are coalesced at once, so
 * the heap never holds two adjacent free blocks.
 * Growing happens outside heap_lock, under grow_lock only, and touches the
 * new pages there: first-touch page faults would otherwise be taken inside
 * heap_lock, one per page, and serialise every thread behind them.
 * Lock order: heap_lock, grow_lock, then the OS layer's sbrk lock.
 *
 * Exported from here: ts_malloc_lock, ts_free_lock, and the weak
 * get_data_segment_size / get_data_segment_free_space_size that bestfit-tls
 * defines identically (FIT_DEFINE_DATA_SEGMENT_API in fit_segments.h explains).
 */
#include "designs/bestfit/debug.h"
#include "designs/bestfit/fitheap.h"
#include "designs/design.h"
#include "tsalloc/classic.h"

#include "base/lock.h"

TS_DESIGN_DECLARE(bestfit)
TS_HIDDEN size_t _ts_bestfit_segment_bytes(void);
TS_HIDDEN size_t _ts_bestfit_free_space_bytes(void);

/* Adaptive: spins briefly before sleeping, as critical sections are short.
 * TSALLOC_LOCK may make both locks futex mutexes or spin locks (base/lock.h). */
static ts_lock_t heap_lock = TS_LOCK_INIT_ADAPTIVE;
static ts_lock_t grow_lock = TS_LOCK_INIT(TS_LOCK_PTHREAD); /* segs writes */
static ts_fit_heap_t heap;
static ts_fit_segs_t segs;
static ts_fit_config_t config;
static bool config_loaded;

static inline void lock(void) {
    ts_lock(&heap_lock);
    if (ts_unlikely(!config_loaded)) {
        fit_config_load(&config);
        config_loaded = true;
    }
}

static inline void unlock(void) {
    ts_unlock(&heap_lock);
}

/* Best fit, growing the heap when nothing fits. Called with heap_lock held;
 * drops it while growing. *clean: see fit_take. */
static ts_fit_block_t *take(size_t need, bool *clean) {
    ts_fit_block_t *b = fit_take(&heap, &config, need, 0, clean);
    for (int i = 0; !b && i < FIT_GROW_TRIES; i++) {
        size_t inc = fit_grow_size(&config, need);
        unlock();
        ts_lock(&grow_lock);
        void *old = fit_segs_obtain(&segs, &inc);
        ts_unlock(&grow_lock);
        if (old) fit_prefault(old, inc, need, config.grow_chunk);
        lock();
        if (!old)
            return fit_take(&heap, &config, need, 0, clean); /* another thread may have grown */
        fit_add_chunk(&heap, old, inc);
        b = fit_take(&heap, &config, need, 0, clean);
    }
    return b;
}

/* Gives the top back when free block f ends at the break and is over the
 * threshold. Under heap_lock. */
static inline void give_back(ts_fit_free_t *f, size_t keep) {
    ts_lock(&grow_lock);
    fit_give_back(&heap, &segs, f, keep);
    ts_unlock(&grow_lock);
}

static inline void maybe_trim(ts_fit_free_t *f) {
    if (f && ts_unlikely(f->size > config.trim_threshold) && fit_end(f) == FIT_LOAD(segs.last_end))
        give_back(f, 0);
}

/* Frees in-use block b. Under heap_lock. */
static inline void release(ts_fit_block_t *b) {
    ts_fit_free_t *f = (ts_fit_free_t *)b;
    fit_set_free(f, fit_used_size(b));
    maybe_trim(fit_put(&heap, f));
}

void *_ts_bestfit_malloc(size_t size) {
    size_t need = fit_block_size(size);
    ts_fit_block_t *b = NULL;
    if (ts_likely(need)) {
        lock();
        b = take(need, NULL);
        unlock();
    }
    if (ts_unlikely(!b)) {
        errno = ENOMEM;
        return NULL;
    }
    return fit_payload(b);
}

void _ts_bestfit_free(void *ptr) {
    if (!ptr) return;
    lock();
    release(fit_checked_block(&segs, ptr, "free", true));
    unlock();
}

/* Memory carved from the never-written part of the top needs no clearing. */
void *_ts_bestfit_calloc(size_t total) {
    size_t need = fit_block_size(total);
    ts_fit_block_t *b = NULL;
    bool clean = false;
    if (ts_likely(need)) {
        lock();
        b = take(need, &clean);
        unlock();
    }
    if (ts_unlikely(!b)) {
        errno = ENOMEM;
        return NULL;
    }
    if (!clean) memset(fit_payload(b), 0, total);
    return fit_payload(b);
}

void *_ts_bestfit_realloc(void *ptr, size_t size) {
    size_t need = fit_block_size(size);
    lock();
    ts_fit_block_t *b = fit_checked_block(&segs, ptr, "realloc", false);
    size_t old_payload = fit_used_size(b) - FIT_HEADER;
    ts_fit_free_t *freed;
    if (ts_unlikely(!need)) {
        unlock();
        errno = ENOMEM;
        return NULL;
    }
    if (fit_resize(&heap, &config, b, need, &freed)) {
        maybe_trim(freed);
        unlock();
        return ptr;
    }
    ts_fit_block_t *nb = take(need, NULL);
    unlock();
    if (!nb) {
        errno = ENOMEM;
        return NULL;
    }
    memcpy(fit_payload(nb), ptr, old_payload);
    lock();
    release(b);
    unlock();
    return fit_payload(nb);
}

void *_ts_bestfit_memalign(size_t align, size_t size) {
    size_t need = fit_block_size(size);
    ts_fit_block_t *b = NULL;
    if (ts_likely(need && align <= FIT_MAX_REQUEST)) {
        lock();
        b = take(need + align + FIT_MIN_BLOCK, NULL);
        if (b) {
            ts_fit_free_t *freed;
            b = fit_align(&heap, &config, b, align, need, &freed);
            maybe_trim(freed);
        }
        unlock();
    }
    if (!b) {
        errno = ENOMEM;
        return NULL;
    }
    return fit_payload(b);
}

size_t _ts_bestfit_usable_size(const void *ptr) {
    lock();
    ts_fit_block_t *b = fit_checked_block(&segs, ptr, "malloc_usable_size", false);
    unlock();
    return fit_used_size(b) - FIT_HEADER;
}

int _ts_bestfit_trim(size_t pad) {
    lock();
    ts_fit_free_t *top = fit_break_top(&heap, &segs);
    bool released = false;
    if (top) {
        ts_lock(&grow_lock);
        released = fit_give_back(&heap, &segs, top, pad);
        ts_unlock(&grow_lock);
    }
    unlock();
    return released;
}

void _ts_bestfit_info(ts_heap_info_t *info) {
    lock();
    ts_fit_free_t *top = fit_break_top(&heap, &segs);
    info->mmapped = 0;
    info->mmapped_count = 0;
    info->free = FIT_LOAD(heap.free_bytes);
    info->releasable = top ? top->size - FIT_MIN_BLOCK : 0;
    ts_lock(&grow_lock); /* obtained and wasted of one moment */
    info->arena = FIT_LOAD(segs.obtained);
    info->in_use = info->arena - FIT_LOAD(segs.wasted) - info->free;
    info->peak = FIT_LOAD(segs.peak);
    ts_unlock(&grow_lock);
    unlock();
}

void _ts_bestfit_atfork_prepare(void) {
    ts_lock(&heap_lock);
    ts_lock(&grow_lock);
}

void _ts_bestfit_atfork_parent(void) {
    ts_unlock(&grow_lock);
    ts_unlock(&heap_lock);
}

void _ts_bestfit_atfork_child(void) {
    _ts_lock_reinit(&grow_lock);
    _ts_lock_reinit(&heap_lock);
}

/* ---- the seed API --------------------------------------------------------- */

TS_EXPORT void *ts_malloc_lock(size_t size) {
    return _ts_bestfit_malloc(size);
}
TS_EXPORT void ts_free_lock(void *ptr) {
    _ts_bestfit_free(ptr);
}

size_t _ts_bestfit_segment_bytes(void) {
    return FIT_LOAD(segs.obtained);
}
size_t _ts_bestfit_free_space_bytes(void) {
    return FIT_LOAD(heap.free_bytes);
}

FIT_DEFINE_DATA_SEGMENT_API(_ts_bestfit, _ts_bestfit_tls)

/* ---- debug hooks (debug.h) ------------------------------------------------ */

void _ts_bestfit_debug_walk(ts_bestfit_walk_fn fn, void *arg) {
    lock();
    fit_walk(&heap, fn, arg);
    unlock();
}

const char *_ts_bestfit_debug_check(void) {
    lock();
    const char *err = fit_check(&heap, &segs);
    unlock();
    return err;
}

size_t _ts_bestfit_debug_block_size(size_t request) {
    return fit_block_size(request);
}

void _ts_bestfit_debug_tunables(ts_bestfit_tunables_t *out) {
    lock();
    out->min_split = config.min_split;
    out->trim_threshold = config.trim_threshold;
    out->grow_chunk = config.grow_chunk;
    unlock();
}

size_t _ts_bestfit_debug_wasted(void) {
    return FIT_LOAD(segs.wasted);
}

size_t _ts_bestfit_debug_mapped(void) {
    return FIT_LOAD(segs.mapped);
}
