/* The big-block cache (src/core/bigcache.c), through the fast allocator's
 * internals. The purge delay is ten minutes, so no pass of the purge thread
 * gives the stacks back while a check runs; the checks drive those passes.
 *
 * 1. Blocks of a big class that a thread mallocs and, once it exited,
 *    another frees are kept, up to the class's capacity (the rest go to
 *    their page, as remote frees), and a third thread's mallocs of the class
 *    get them back, the block freed last first, whole and writable.
 * 1b. Blocks that another thread frees while their maker lives go back to
 *    their pages, none kept, and the maker's next mallocs of the class are
 *    served from those pages (a producer handing big buffers to a
 *    consumer).
 * 2. A pass gives the stack back to the blocks' pages only once it went
 *    unused for a purge delay; malloc_trim gives it back at once.
 * 3. Freeing a kept block again aborts as a double free.
 * 4. Blocks of a ts_heap_new heap are never kept, and such a heap does not
 *    take kept blocks.
 * 5. A fork child allocates and frees blocks of the class (its locks are
 *    free) and finds the parent's kept blocks.
 */
#include "core_pages.h"
#include "tsalloc.h"

#define SIZE 200000 /* a big class: 224 KiB blocks */
#define N    32

static void *blocks[N];
static unsigned cls_of_size;

static void *alloc_all(void *arg) {
    (void)arg;
    for (int i = 0; i < N; i++) {
        CHECK((blocks[i] = malloc(SIZE)) != NULL);
        memset(blocks[i], i + 1, SIZE);
    }
    return NULL;
}
static void *free_all(void *arg) {
    (void)arg;
    for (int i = 0; i < N; i++) free(blocks[i]);
    return NULL;
}

static unsigned capacity(void) { /* TS_BIGCACHE_CLASS_BYTES (2 MiB) of blocks, 2 to 32 */
    unsigned n = (unsigned)((2u << 20) / _ts_classes[cls_of_size].size);
    return n < 2 ? 2 : n > 32 ? 32 : n;
}

/* How many blocks the stack holds: popped, then pushed back in order. */
static unsigned kept(void) {
    void *got[64];
    unsigned n = 0;
    while (n < 64 && (got[n] = _ts_bigcache_pop(cls_of_size)) != NULL) n++;
    for (unsigned k = n; k-- > 0;) {
        ts_page_t *page = page_of(got[k]);
        ts_block_mark(page, got[k]);
        CHECK(_ts_bigcache_push(page, got[k]));
    }
    return n;
}

static void *take_kept(void *arg) {
    unsigned cap = *(unsigned *)arg;
    void *got[N];
    for (unsigned k = 0; k < cap; k++) {
        got[k] = malloc(SIZE);
        CHECK(got[k] != NULL);
        /* The block freed last first: free_all freed blocks[0..N-1] in order,
         * and the first cap of them were kept. */
        CHECK_MSG(got[k] == blocks[cap - 1 - k], "malloc %u: %p, not the kept %p", k, got[k],
                  blocks[cap - 1 - k]);
        memset(got[k], 0x5a, SIZE);
    }
    CHECK_MSG(kept() == 0, "%u blocks still kept", kept());
    for (unsigned k = 0; k < cap; k++) free(got[k]); /* kept again: not this thread's pages */
    CHECK(kept() == cap);
    return NULL;
}

static void test_reuse(void) {
    run(alloc_all);
    ts_page_t *page = page_of(blocks[0]);
    uint32_t used0 = page->used;
    run(free_all);
    unsigned cap = capacity();
    CHECK_MSG(kept() == cap, "%u blocks kept, capacity %u", kept(), cap);
    /* The others went back to their page: the owner exited, its page waits
     * with them in thread_free, and counts the kept ones as out. */
    uint64_t w = atomic_load(&page->thread_free);
    CHECK_MSG(ts_tf_count(w) + cap >= (uint64_t)N - (N - used0),
              "%u in thread_free, %u kept, %u were out", (unsigned)ts_tf_count(w), cap, used0);
    pthread_t t;
    CHECK(pthread_create(&t, NULL, take_kept, &cap) == 0);
    CHECK(pthread_join(t, NULL) == 0);
    printf("reuse: %u of %d blocks kept (capacity), handed out again last-freed first\n", cap, N);
    malloc_trim(0);
}

/* The maker stays alive while another thread frees its blocks. */
static void *maker_alive(void *arg) {
    (void)arg;
    alloc_all(NULL);
    pthread_t t;
    CHECK(pthread_create(&t, NULL, free_all, NULL) == 0);
    CHECK(pthread_join(t, NULL) == 0);
    CHECK_MSG(kept() == 0, "%u blocks of a live owner kept", kept());
    void *got[N];
    for (int i = 0; i < N; i++) {
        got[i] = malloc(SIZE);
        int mine = 0;
        for (int j = 0; j < N; j++) mine |= page_of(got[i]) == page_of(blocks[j]);
        CHECK_MSG(mine, "malloc %d: %p, not from the pages its blocks went back to", i, got[i]);
    }
    for (int i = 0; i < N; i++) free(got[i]);
    return NULL;
}

static void test_live_owner(void) {
    run(maker_alive);
    CHECK(kept() == 0);
    printf("live owner: its blocks go back to its page, which serves its next mallocs\n");
    malloc_trim(0);
}

static void test_purge(void) {
    run(alloc_all);
    run(free_all);
    CHECK(kept() == capacity());
    uint64_t now = _ts_os_now_ns(), delay = _ts_purge_delay_ns();
    uint64_t due = _ts_bigcache_purge(now, false);
    CHECK_MSG(kept() == capacity() && due > now && due <= now + delay + 1000000000u,
              "a pass within the purge delay gave the stack back (due %llu ns ahead)",
              (unsigned long long)(due - now));
    (void)_ts_bigcache_purge(now + 2 * delay, false);
    CHECK_MSG(kept() == 0, "%u blocks kept after a pass a purge delay later", kept());
    run(alloc_all);
    run(free_all);
    CHECK(kept() == capacity());
    malloc_trim(0);
    CHECK_MSG(kept() == 0, "%u blocks kept after malloc_trim", kept());
    printf("purge: kept until unused for a purge delay, or malloc_trim\n");
}

static void double_free_kept(void *arg) {
    (void)arg;
    run(alloc_all);
    run(free_all); /* blocks[0] is kept */
    free(blocks[0]);
}

static ts_heap_t *user_heap;
static void *user_alloc(void *arg) {
    (void)arg;
    for (int i = 0; i < N; i++) CHECK((blocks[i] = ts_heap_malloc(user_heap, SIZE)) != NULL);
    return NULL;
}
static void *user_take(void *arg) {
    (void)arg;
    void *p = ts_heap_malloc(user_heap, SIZE);
    CHECK(p != NULL && kept() == capacity()); /* the kept blocks stay */
    ts_free(p);
    return NULL;
}

static void test_user_heap(void) {
    CHECK((user_heap = ts_heap_new()) != NULL);
    run(user_alloc);
    run(free_all);
    CHECK_MSG(kept() == 0, "%u blocks of a ts_heap_new heap kept", kept());
    run(alloc_all);
    run(free_all);
    run(user_take);
    malloc_trim(0);
    ts_heap_destroy(user_heap);
    printf("ts_heap_new heaps: their blocks not kept, kept blocks not taken\n");
}

static void test_fork(void) {
    run(alloc_all);
    run(free_all);
    unsigned cap = capacity();
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        if (kept() != cap) _exit(2);
        void *p = malloc(SIZE);
        if (p != blocks[cap - 1]) _exit(3);
        memset(p, 1, SIZE);
        free(p);
        malloc_trim(0);
        _exit(kept() == 0 ? 0 : 4);
    }
    int status;
    CHECK(waitpid(pid, &status, 0) == pid);
    CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0, "fork child: status %d", status);
    malloc_trim(0);
    printf("fork: the child finds the kept blocks and its locks free\n");
}

int main(void) {
    CHECK(ts_option_set("purge_delay_ms", 600000));
    cls_of_size = ts_class_of(SIZE);
    CHECK(_ts_classes[cls_of_size].kind == TS_KIND_BIG);
    test_reuse();
    test_live_owner();
    test_purge();
    CHECK(ts_expect_abort(double_free_kept, NULL, "tsalloc: free(): double free of 0x"));
    test_user_heap();
    test_fork();
    return 0;
}
