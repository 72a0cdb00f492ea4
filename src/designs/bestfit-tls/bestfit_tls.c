/* The bestfit-tls design, the seeds' no-lock version (ts_malloc_nolock /
 * ts_free_nolock): each thread has its own best-fit heap (fitheap.h) in
 * thread-local storage, searched and changed without any lock.
 *
 * - Each live thread has an owner id (1..FIT_OWNER_MAX), stamped in the header
 *   of every block it allocates (fitheap.h); ids are handed out round-robin,
 *   so one is reused only after ~65 000 other threads started.
 * - A block goes to the heap of the thread that frees it, whoever allocated
 *   it, as long as its owner lives: the own-block path takes no lock, and
 *   blocks are not reused or coalesced across live threads (docs/bestfit.md
 *   measures the cost). A block whose owner has exited goes to the orphan
 *   heap instead, under orphan_lock: otherwise blocks of short-lived threads
 *   freed by a long-lived one pile up in its heap, unused, and the data
 *   segment grows with every generation of threads. So does a block of
 *   FIT_SHARED_MIN bytes or more freed by a thread other than its owner:
 *   otherwise small requests of the freeing thread carve it, and large
 *   requests of every thread grow the data segment.
 * - A thread about to grow its heap that has freed FIT_SPILL_MIN bytes of
 *   other live threads' blocks since its last spill hands its free blocks to
 *   the orphan heap first (spill), where they coalesce with their neighbours.
 * - Heaps grow with sbrk (mmap when the break cannot grow) under grow_lock,
 *   which also guards the segment table that validates pointers (read
 *   lock-free).
 * - When a thread exits (pthread key destructor), its free blocks go to the
 *   orphan heap, under orphan_lock, and its id dies. A thread whose own heap
 *   has no fit takes its best fit from the orphan heap before growing, with
 *   owner 0 (never alive): whoever frees it returns it to the orphan heap,
 *   where it coalesces again, instead of scattering the orphans' large free
 *   blocks over the heaps of whoever frees their pieces. A thread that
 *   allocates or frees after its destructor ran works on the orphan heap
 *   directly, also with owner 0.
 * - registry lists the live threads' heaps, so that statistics can add up
 *   their free bytes; live_ids marks the live owner ids.
 *
 * Invariants: a thread's heap is touched by that thread only (statistics read
 * its atomic free_bytes); the orphan heap only under orphan_lock; segs is
 * written only under grow_lock; live_ids only under registry_lock (read
 * without). In a fork child the other threads' heaps are lost (they may have
 * been mid-update): their free blocks are leaked; their ids die.
 * Lock order: registry_lock, orphan_lock, grow_lock, then the OS sbrk lock.
 *
 * Exported from here: ts_malloc_nolock, ts_free_nolock, and the weak
 * get_data_segment_size / get_data_segment_free_space_size that bestfit
 * defines identically (FIT_DEFINE_DATA_SEGMENT_API in fit_segments.h explains).
 */
#include "base/valgrind.h"
#include "base/lock.h"
#include "base/thread_exit.h"
#include "designs/bestfit/debug.h"
#include "designs/bestfit/fitheap.h"
#include "designs/design.h"
#include "tsalloc/classic.h"

#include <pthread.h>

TS_DESIGN_DECLARE(bestfit_tls)
TS_HIDDEN size_t _ts_bestfit_tls_segment_bytes(void);
TS_HIDDEN size_t _ts_bestfit_tls_free_space_bytes(void);

enum { THREAD_FRESH = 0, THREAD_LIVE, THREAD_DEAD };

typedef struct ts_fit_thread {
    ts_fit_heap_t heap;
    struct ts_fit_thread *prev, *next; /* registry links, under registry_lock */
    int state;
    unsigned id;          /* owner id of the blocks this thread allocates; 0 once dead */
    size_t foreign_bytes; /* freed into heap since its last spill: other live threads' */
} ts_fit_thread_t;

static TS_TLS ts_fit_thread_t self;

static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t orphan_lock = PTHREAD_MUTEX_INITIALIZER;
/* The sbrk lock: a pthread mutex, or the kind TSALLOC_LOCK names (base/lock.h). */
static ts_lock_t grow_lock = TS_LOCK_INIT(TS_LOCK_PTHREAD);
static ts_fit_thread_t *registry; /* under registry_lock */
static ts_fit_heap_t orphans;     /* under orphan_lock */
static ts_fit_segs_t segs;        /* written under grow_lock */
/* Bit i: owner id i belongs to a live thread. Written under registry_lock. */
static _Atomic uint64_t live_ids[(FIT_OWNER_MAX + 1) / 64];
static unsigned last_id; /* the id handed out last, under registry_lock */
/* Loaded under registry_lock before any thread's first use (thread_start). */
static ts_fit_config_t config;
static bool config_loaded;
static ts_thread_exit_t exit_hook;

static void thread_exit(void *arg);

/* Blocks of at least this size that a thread frees for another live thread go
 * to the orphan heap, where any thread's large request finds them: kept in the
 * freeing thread's heap, small requests carve them and no heap holds a large
 * fit again (docs/bestfit.md, "Large blocks under churn"). */
#define FIT_SHARED_MIN ((size_t)128 << 10)

static inline bool id_alive(unsigned id) {
    return (atomic_load_explicit(&live_ids[id / 64], memory_order_relaxed) >> (id % 64)) & 1;
}

static inline void id_mark(unsigned id, bool alive) {
    uint64_t bit = (uint64_t)1 << (id % 64);
    if (alive)
        atomic_fetch_or_explicit(&live_ids[id / 64], bit, memory_order_relaxed);
    else
        atomic_fetch_and_explicit(&live_ids[id / 64], ~bit, memory_order_relaxed);
}

/* The next id no live thread holds, round-robin; 0 (treated as dead by other
 * threads: they free its blocks into the orphan heap) if all are taken.
 * Under registry_lock. */
static unsigned id_take(void) {
    for (unsigned tries = 0; tries < FIT_OWNER_MAX; tries++) {
        last_id = last_id % FIT_OWNER_MAX + 1;
        if (!id_alive(last_id)) {
            id_mark(last_id, true);
            return last_id;
        }
    }
    return 0;
}

/* First call of this thread: register its heap and the exit hook. */
static TS_NOINLINE void thread_start(void) {
    pthread_mutex_lock(&registry_lock);
    if (!config_loaded) {
        fit_config_load(&config);
        config_loaded = true;
        /* Without a key (the process used them all up) exiting threads'
         * free blocks are leaked. */
        _ts_thread_exit_init(&exit_hook, thread_exit);
    }
    self.prev = NULL;
    self.next = registry;
    if (registry) registry->prev = &self;
    registry = &self;
    self.id = id_take();
    self.state = THREAD_LIVE;
    pthread_mutex_unlock(&registry_lock);
    /* May allocate (key index >= 32): we are live, so that recursion works. */
    _ts_thread_exit_arm(&exit_hook, &self);
}

/* The owner stamped on blocks taken for heap h's user: this thread, or 0 on
 * the orphan heap (a thread past its exit hook). */
static inline unsigned owner_of(const ts_fit_heap_t *h) {
    return h == &orphans ? 0 : self.id;
}

static ts_fit_block_t *grow_and_take(ts_fit_heap_t *h, size_t need, bool *clean) {
    for (int i = 0; i < FIT_GROW_TRIES; i++) {
        size_t inc = fit_grow_size(&config, need);
        ts_lock(&grow_lock);
        void *old = fit_segs_obtain(&segs, &inc);
        ts_unlock(&grow_lock);
        if (!old) return NULL;
        fit_add_chunk(h, old, inc);
        ts_fit_block_t *b = fit_take(h, &config, need, owner_of(h), clean);
        if (b) return b;
    }
    return NULL;
}

/* Gives the top back when free block f of heap h ends at the break and is
 * over the threshold. The caller owns h. */
static inline void maybe_trim(ts_fit_heap_t *h, ts_fit_free_t *f) {
    if (f && ts_unlikely(f->size > config.trim_threshold) &&
        fit_end(f) == FIT_LOAD(segs.last_end)) {
        ts_lock(&grow_lock);
        fit_give_back(h, &segs, f, 0);
        ts_unlock(&grow_lock);
    }
}

static inline void release(ts_fit_heap_t *h, ts_fit_block_t *b) {
    ts_fit_free_t *f = (ts_fit_free_t *)b;
    fit_set_free(f, fit_used_size(b));
    maybe_trim(h, fit_put(h, f));
}

/* The calling thread's heap, or NULL when its exit hook already ran (then the
 * caller works on the orphan heap under orphan_lock). */
static inline ts_fit_heap_t *my_heap(void) {
    if (ts_likely(self.state == THREAD_LIVE)) return &self.heap;
    if (self.state == THREAD_DEAD) return NULL;
    thread_start();
    return &self.heap;
}

/* Lock the heap to work on: ours (nothing to lock) or the orphans'. */
static inline ts_fit_heap_t *enter(void) {
    ts_fit_heap_t *h = my_heap();
    if (h) return h;
    pthread_mutex_lock(&orphan_lock);
    return &orphans;
}

static inline void leave(ts_fit_heap_t *h) {
    if (h == &orphans) pthread_mutex_unlock(&orphan_lock);
}

/* Enter the heap that in-use block b goes back to: ours when we own it
 * (no lock), or when its owner still lives and it is below FIT_SHARED_MIN;
 * the orphans' when its owner exited or it is another thread's large block.
 * freeing: b is being freed, so a live owner's block counts toward a spill. */
static inline ts_fit_heap_t *enter_for(const ts_fit_block_t *b, bool freeing) {
    ts_fit_heap_t *h = my_heap();
    unsigned owner = fit_owner(b);
    if (ts_likely(h != NULL)) {
        if (ts_likely(owner == self.id)) return h;
        size_t size = fit_used_size(b);
        if (size < FIT_SHARED_MIN && id_alive(owner)) {
            if (freeing) self.foreign_bytes += size; /* see spill */
            return h;
        }
    }
    pthread_mutex_lock(&orphan_lock);
    return &orphans;
}

/* Blocks of other live threads that a thread frees stay in its heap (the
 * seed design), among the free blocks their neighbours left in the orphan
 * heap or in other heaps, and no heap can coalesce them: a long-lived thread
 * that frees blocks of short-lived ones while they live splits the free
 * space for good, and large requests grow the data segment (the fuzzing
 * harness's main thread: about 3 MB a program, without bound). So a thread
 * about to grow the data segment with at least FIT_SPILL_MIN of such bytes
 * freed since its last spill hands its whole heap to the orphans first, as
 * an exiting thread does, where they coalesce. A thread that frees only its
 * own blocks never spills. */
#define FIT_SPILL_MIN ((size_t)128 << 10)

/* Every free block of h into the orphan heap (held), coalescing there. */
static void hand_to_orphans(ts_fit_heap_t *h) {
    ts_fit_free_t *f;
    while ((f = fit_pop(h)) != NULL) maybe_trim(&orphans, fit_put(&orphans, f));
}

static void spill(ts_fit_heap_t *h) {
    pthread_mutex_lock(&orphan_lock);
    hand_to_orphans(h);
    pthread_mutex_unlock(&orphan_lock);
    self.foreign_bytes = 0;
}

static ts_fit_block_t *take_orphan(size_t need, bool *clean) {
    if (FIT_LOAD(orphans.free_bytes) < need) return NULL;
    pthread_mutex_lock(&orphan_lock);
    ts_fit_block_t *b = fit_take(&orphans, &config, need, 0, clean);
    pthread_mutex_unlock(&orphan_lock);
    return b;
}

/* Own heap missed: the orphans' best fit (owner 0: it goes back to them when
 * freed), again after a spill, else new memory for h. */
static TS_NOINLINE ts_fit_block_t *take_slow(ts_fit_heap_t *h, size_t need, bool *clean) {
    if (h != &orphans) {
        ts_fit_block_t *b = take_orphan(need, clean);
        if (b) return b;
        if (self.foreign_bytes >= FIT_SPILL_MIN) {
            spill(h);
            if ((b = take_orphan(need, clean)) != NULL) return b;
        }
    }
    return grow_and_take(h, need, clean);
}

/* Best fit in h (entered), then in the orphan heap, then from new memory.
 * *clean: see fit_take. */
static inline ts_fit_block_t *take(ts_fit_heap_t *h, size_t need, bool *clean) {
    ts_fit_block_t *b = fit_take(h, &config, need, owner_of(h), clean);
    return ts_likely(b != NULL) ? b : take_slow(h, need, clean);
}

void *_ts_bestfit_tls_malloc(size_t size) {
    size_t need = fit_block_size(size);
    ts_fit_block_t *b = NULL;
    if (ts_likely(need)) {
        ts_fit_heap_t *h = enter();
        b = take(h, need, NULL);
        leave(h);
    }
    if (ts_unlikely(!b)) {
        errno = ENOMEM;
        return NULL;
    }
    return fit_payload(b);
}

void _ts_bestfit_tls_free(void *ptr) {
    if (!ptr) return;
    ts_fit_block_t *b = fit_checked_block(&segs, ptr, "free", true);
    ts_fit_heap_t *h = enter_for(b, true);
    release(h, b);
    leave(h);
}

/* Memory carved from the never-written part of a top needs no clearing. */
void *_ts_bestfit_tls_calloc(size_t total) {
    size_t need = fit_block_size(total);
    ts_fit_block_t *b = NULL;
    bool clean = false;
    if (ts_likely(need)) {
        ts_fit_heap_t *h = enter();
        b = take(h, need, &clean);
        leave(h);
    }
    if (ts_unlikely(!b)) {
        errno = ENOMEM;
        return NULL;
    }
    if (!clean) memset(fit_payload(b), 0, total);
    return fit_payload(b);
}

void *_ts_bestfit_tls_realloc(void *ptr, size_t size) {
    ts_fit_block_t *b = fit_checked_block(&segs, ptr, "realloc", false);
    size_t need = fit_block_size(size), old_payload = fit_used_size(b) - FIT_HEADER;
    if (ts_unlikely(!need)) {
        errno = ENOMEM;
        return NULL;
    }
    /* In place with the heap b would be freed into; else a block of our own. */
    ts_fit_heap_t *h = enter_for(b, false);
    ts_fit_free_t *freed;
    if (fit_resize(h, &config, b, need, &freed)) {
        maybe_trim(h, freed);
        leave(h);
        return ptr;
    }
    leave(h);
    h = enter();
    ts_fit_block_t *nb = take(h, need, NULL);
    leave(h);
    if (!nb) {
        errno = ENOMEM;
        return NULL;
    }
    memcpy(fit_payload(nb), ptr, old_payload);
    h = enter_for(b, true);
    release(h, b);
    leave(h);
    return fit_payload(nb);
}

void *_ts_bestfit_tls_memalign(size_t align, size_t size) {
    size_t need = fit_block_size(size);
    ts_fit_block_t *b = NULL;
    if (ts_likely(need && align <= FIT_MAX_REQUEST)) {
        ts_fit_heap_t *h = enter();
        b = take(h, need + align + FIT_MIN_BLOCK, NULL);
        if (b) {
            ts_fit_free_t *freed;
            b = fit_align(h, &config, b, align, need, &freed);
            maybe_trim(h, freed);
        }
        leave(h);
    }
    if (!b) {
        errno = ENOMEM;
        return NULL;
    }
    return fit_payload(b);
}

size_t _ts_bestfit_tls_usable_size(const void *ptr) {
    return fit_used_size(fit_checked_block(&segs, ptr, "malloc_usable_size", false)) - FIT_HEADER;
}

static bool trim_heap(ts_fit_heap_t *h, size_t pad) {
    ts_fit_free_t *top = fit_break_top(h, &segs);
    if (!top) return false;
    ts_lock(&grow_lock);
    bool released = fit_give_back(h, &segs, top, pad);
    ts_unlock(&grow_lock);
    return released;
}

int _ts_bestfit_tls_trim(size_t pad) {
    ts_fit_heap_t *h = my_heap();
    bool released = h && trim_heap(h, pad);
    pthread_mutex_lock(&orphan_lock);
    released |= trim_heap(&orphans, pad);
    pthread_mutex_unlock(&orphan_lock);
    return released;
}

void _ts_bestfit_tls_info(ts_heap_info_t *info) {
    info->arena = FIT_LOAD(segs.obtained);
    info->mmapped = 0;
    info->mmapped_count = 0;
    info->free = _ts_bestfit_tls_free_space_bytes();
    size_t used = FIT_LOAD(segs.wasted) + info->free;
    info->in_use = info->arena > used ? info->arena - used : 0;
    info->releasable = 0; /* the top may belong to any thread: not known without locking all */
    info->peak = FIT_LOAD(segs.peak);
}

/* Thread exit: hand every free block of the dying thread to the orphan heap,
 * where they coalesce with what other exited threads left. */
static void thread_exit_heap(void *arg) {
    ts_fit_thread_t *t = arg;
    if (t != &self || t->state != THREAD_LIVE) return;
    pthread_mutex_lock(&registry_lock);
    pthread_mutex_lock(&orphan_lock);
    hand_to_orphans(&t->heap);
    pthread_mutex_unlock(&orphan_lock);
    if (t->id) id_mark(t->id, false); /* its blocks now go to the orphans when freed */
    t->id = 0;
    if (t->prev)
        t->prev->next = t->next;
    else
        registry = t->next;
    if (t->next) t->next->prev = t->prev;
    t->state = THREAD_DEAD;
    pthread_mutex_unlock(&registry_lock);
}

/* It walks free blocks, which memcheck sees as NOACCESS (base/valgrind.h). */
static void thread_exit(void *arg) {
    _ts_vg_quiet(true);
    thread_exit_heap(arg);
    _ts_vg_quiet(false);
}

void _ts_bestfit_tls_atfork_prepare(void) {
    pthread_mutex_lock(&registry_lock);
    pthread_mutex_lock(&orphan_lock);
    ts_lock(&grow_lock);
}

void _ts_bestfit_tls_atfork_parent(void) {
    ts_unlock(&grow_lock);
    pthread_mutex_unlock(&orphan_lock);
    pthread_mutex_unlock(&registry_lock);
}

void _ts_bestfit_tls_atfork_child(void) {
    _ts_lock_reinit(&grow_lock);
    pthread_mutex_init(&orphan_lock, NULL);
    pthread_mutex_init(&registry_lock, NULL);
    /* Only this thread survives; the others' heaps (and free blocks) are lost,
     * and their ids die: the child's frees of their blocks go to the orphans. */
    registry = NULL;
    for (size_t i = 0; i < sizeof live_ids / sizeof live_ids[0]; i++)
        atomic_store_explicit(&live_ids[i], 0, memory_order_relaxed);
    if (self.state == THREAD_LIVE) {
        self.prev = self.next = NULL;
        registry = &self;
        if (self.id) id_mark(self.id, true);
    }
}

/* ---- the seed API --------------------------------------------------------- */

TS_EXPORT void *ts_malloc_nolock(size_t size) {
    return _ts_bestfit_tls_malloc(size);
}
TS_EXPORT void ts_free_nolock(void *ptr) {
    _ts_bestfit_tls_free(ptr);
}

size_t _ts_bestfit_tls_segment_bytes(void) {
    return FIT_LOAD(segs.obtained);
}

/* A sum of values other threads are changing: exact only when they are idle. */
size_t _ts_bestfit_tls_free_space_bytes(void) {
    pthread_mutex_lock(&registry_lock);
    size_t total = FIT_LOAD(orphans.free_bytes);
    for (ts_fit_thread_t *t = registry; t; t = t->next) total += FIT_LOAD(t->heap.free_bytes);
    pthread_mutex_unlock(&registry_lock);
    return total;
}

FIT_DEFINE_DATA_SEGMENT_API(_ts_bestfit_tls, _ts_bestfit)

/* ---- debug hooks (debug.h) ------------------------------------------------ */

void _ts_bestfit_tls_debug_walk(ts_bestfit_walk_fn fn, void *arg) {
    ts_fit_heap_t *h = my_heap();
    if (h) fit_walk(h, fn, arg);
}

void _ts_bestfit_tls_debug_walk_orphans(ts_bestfit_walk_fn fn, void *arg) {
    pthread_mutex_lock(&orphan_lock);
    fit_walk(&orphans, fn, arg);
    pthread_mutex_unlock(&orphan_lock);
}

const char *_ts_bestfit_tls_debug_check(void) {
    ts_fit_heap_t *h = my_heap();
    const char *err = h ? fit_check(h, &segs) : NULL;
    pthread_mutex_lock(&orphan_lock);
    if (!err) err = fit_check(&orphans, &segs);
    pthread_mutex_unlock(&orphan_lock);
    return err;
}

size_t _ts_bestfit_tls_debug_block_size(size_t request) {
    return fit_block_size(request);
}

void _ts_bestfit_tls_debug_tunables(ts_bestfit_tunables_t *out) {
    my_heap(); /* loads the configuration */
    out->min_split = config.min_split;
    out->trim_threshold = config.trim_threshold;
    out->grow_chunk = config.grow_chunk;
}

size_t _ts_bestfit_tls_debug_wasted(void) {
    return FIT_LOAD(segs.wasted);
}

size_t _ts_bestfit_tls_debug_mapped(void) {
    return FIT_LOAD(segs.mapped);
}

size_t _ts_bestfit_tls_debug_thread_free(void) {
    ts_fit_heap_t *h = my_heap();
    return h ? FIT_LOAD(h->free_bytes) : 0;
}

size_t _ts_bestfit_tls_debug_orphan_free(void) {
    return FIT_LOAD(orphans.free_bytes);
}
