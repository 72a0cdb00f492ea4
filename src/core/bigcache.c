/* The big-block cache: blocks of the big classes (80-512 KiB) that a thread
 * frees into a page whose owner has exited wait here, one stack per class,
 * for the next thread that allocates the class and finds no block in its
 * own pages.
 *
 * Why: a big page is a whole segment of one class owned by one thread, and
 * only its owner takes blocks back into it. When threads come and go and
 * hand their blocks to each other (tsbench's `exchange`, mimalloc-bench's
 * mstress), the blocks freed to the pages of threads that have exited wait
 * there, until a thread adopts the page, while every other thread carves
 * fresh memory for the same class. A stack per class lets any thread reuse
 * such a block while it is still resident. A live owner's blocks go back to
 * its page: its next malloc of the class takes them without a lock, and a
 * producer handing big buffers to a consumer keeps reusing its own (with
 * every remote free through the stacks, 8 such pairs took 2.5x the time,
 * all on the class's lock).
 *
 * What: a remote free of a big block into an abandoned page (free.c,
 * free_remote) pushes it here, marked free as in any list, when its class
 * has room: up to TS_BIGCACHE_CLASS_BYTES of blocks, at least 2 and at most
 * TS_BIGCACHE_SLOTS. The allocation slow path of a big class (page.c) pops
 * one before its first page takes its remote frees or carves. A class whose
 * stack was not used for a purge delay gives its blocks back to their
 * pages, as a remote freer would (the purge thread; all of them on
 * malloc_trim), so that pages can empty and go back to the OS. Not in the
 * hardened build (its frees wait in the quarantine); never blocks of
 * ts_heap_new's heaps, whose pages are not abandoned.
 *
 * Invariants:
 * - A block here is out of every page list and counted in its page's `used`
 *   (it never went back to its page), so the page is not retired under it;
 *   its free mark is set, so freeing it again is a double free, as for any
 *   free block.
 * - stack[cls].n <= the class's capacity; blocks are popped LIFO (the block
 *   freed last, likely still in cache).
 *
 * Lock order: a class's lock is a leaf; the blocks given back are pushed
 * after it is released.
 */
#include "core/internal.h"

#include <string.h>

#define TS_BIGCACHE_SLOTS       32
#define TS_BIGCACHE_CLASS_BYTES ((size_t)2 << 20)

typedef struct {
    _Atomic unsigned n; /* under the lock; read without it as a hint */
    uint64_t used_at;   /* last push or pop (ns): the stack goes back a purge delay later */
    ts_block_t *block[TS_BIGCACHE_SLOTS];
} bigcache_stack_t;

static TS_FORK_LOCK pthread_mutex_t bigcache_lock[TS_CLASS_COUNT - TS_LIST_CLASS_LAST - 1] = {
    [0 ... TS_CLASS_COUNT - TS_LIST_CLASS_LAST - 2] = PTHREAD_MUTEX_INITIALIZER};
static bigcache_stack_t stack[TS_CLASS_COUNT - TS_LIST_CLASS_LAST - 1];

#define BIG_INDEX(cls) ((cls)-TS_LIST_CLASS_LAST - 1)

static unsigned capacity(unsigned cls) {
    size_t n = TS_BIGCACHE_CLASS_BYTES / _ts_classes[cls].size;
    return n < 2 ? 2 : n > TS_BIGCACHE_SLOTS ? TS_BIGCACHE_SLOTS : (unsigned)n;
}

bool _ts_bigcache_push(ts_page_t *page, ts_block_t *block) {
#if TS_SECURE
    (void)page;
    (void)block;
    return false; /* the hardened build: frees wait in the quarantine instead */
#endif
    /* Only an abandoned page's (owner 0; never a ts_heap_new heap's): a
     * live owner gets its block back in its page, where its next malloc of
     * the class finds it without a lock. */
    if (ts_page_owner(page) != 0) return false;
    unsigned cls = page->cls, i = BIG_INDEX(cls);
    ts_assert(_ts_classes[cls].kind == TS_KIND_BIG && ts_block_marked(page, block));
    uint64_t now = _ts_os_now_ns();
    pthread_mutex_lock(&bigcache_lock[i]);
    bigcache_stack_t *s = &stack[i];
    unsigned n = atomic_load_explicit(&s->n, memory_order_relaxed);
    bool room = n < capacity(cls), first = n == 0;
    if (room) {
        s->block[n] = block;
        atomic_store_explicit(&s->n, n + 1, memory_order_relaxed);
        s->used_at = now;
    }
    pthread_mutex_unlock(&bigcache_lock[i]);
    if (room && first) _ts_purge_schedule(); /* a pass gives it back if it stays unused */
    return room;
}

void *_ts_bigcache_pop(unsigned cls) {
    unsigned i = BIG_INDEX(cls);
    bigcache_stack_t *s = &stack[i];
    if (!atomic_load_explicit(&s->n, memory_order_relaxed)) return NULL; /* a hint */
    uint64_t now = _ts_os_now_ns();
    pthread_mutex_lock(&bigcache_lock[i]);
    unsigned n = atomic_load_explicit(&s->n, memory_order_relaxed);
    ts_block_t *block = n ? s->block[n - 1] : NULL;
    if (n) atomic_store_explicit(&s->n, n - 1, memory_order_relaxed);
    s->used_at = now;
    pthread_mutex_unlock(&bigcache_lock[i]);
    if (block) *ts_mark_word(block) = 0; /* handed out: no longer free */
    return block;
}

uint64_t _ts_bigcache_purge(uint64_t now, bool force) {
    uint64_t delay = _ts_purge_delay_ns(), next = UINT64_MAX;
    for (unsigned cls = TS_LIST_CLASS_LAST + 1; cls < TS_CLASS_COUNT; cls++) {
        unsigned i = BIG_INDEX(cls), n = 0;
        bigcache_stack_t *s = &stack[i];
        if (!atomic_load_explicit(&s->n, memory_order_relaxed)) continue;
        ts_block_t *back[TS_BIGCACHE_SLOTS];
        pthread_mutex_lock(&bigcache_lock[i]);
        unsigned held = atomic_load_explicit(&s->n, memory_order_relaxed);
        if (force || now >= s->used_at + delay) {
            n = held;
            memcpy(back, s->block, n * sizeof back[0]);
            atomic_store_explicit(&s->n, 0, memory_order_relaxed);
        } else if (held && s->used_at + delay < next) {
            next = s->used_at + delay;
        }
        pthread_mutex_unlock(&bigcache_lock[i]);
        for (unsigned k = 0; k < n; k++) {
            ts_page_t *page = NULL;
            (void)_ts_locate(back[k], &page);
            _ts_page_push_remote(page, back[k], back[k], 1);
        }
    }
    return next;
}

unsigned _ts_bigcache_kept(unsigned cls) {
    if (cls <= TS_LIST_CLASS_LAST) return 0;
    return atomic_load_explicit(&stack[BIG_INDEX(cls)].n, memory_order_relaxed);
}

void _ts_bigcache_atfork_prepare(void) {
    for (unsigned i = 0; i < TS_CLASS_COUNT - TS_LIST_CLASS_LAST - 1; i++)
        pthread_mutex_lock(&bigcache_lock[i]);
}
void _ts_bigcache_atfork_parent(void) {
    for (unsigned i = 0; i < TS_CLASS_COUNT - TS_LIST_CLASS_LAST - 1; i++)
        pthread_mutex_unlock(&bigcache_lock[i]);
}
void _ts_bigcache_atfork_child(void) {
    for (unsigned i = 0; i < TS_CLASS_COUNT - TS_LIST_CLASS_LAST - 1; i++)
        pthread_mutex_init(&bigcache_lock[i], NULL);
}
