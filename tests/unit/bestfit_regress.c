/* Regression tests for bugs of bestfit, bestfit-tls and
 * libtsalloc-classic. Usage: bestfit_regress lock|nolock CASE, where CASE is
 *   calloc         calloc over a reserve that a merge had put into the index
 *                  returned non-zero bytes (clean_from was stale). nolock: a
 *                  thread frees its neighbour's block that starts at its own
 *                  top; lock: two threads add their chunks in the opposite
 *                  order of their sbrk calls (forced by the hooks below).
 *   odd_break      after an 8-byte sbrk, a request above the grow chunk failed
 *                  with ENOMEM: every chunk lost its unaligned ends.
 *   fork           libtsalloc-classic registered no fork handlers: a child
 *                  forked while a design lock was held hung in its first call.
 *   glibc_sbrk     glibc's main arena and the designs moved one break with no
 *                  common lock: memory was handed out twice.
 *   private_break  the contract of the classic library's private break.
 *   brk_blocked    when the break could not grow (a mapping right above it),
 *                  malloc failed with ENOMEM although memory was available:
 *                  now the heap grows with mapped chunks. Threads, frees of
 *                  exited threads' blocks and a fork child on those chunks.
 *   untouched      growing the heap for large blocks touched the first 64 KiB
 *                  of every new chunk (and wrote a header into it), so blocks
 *                  the program never wrote still took resident memory: RSS
 *                  must grow by little more than the blocks' header pages.
 * Built twice: bestfit_regress links libtsalloc-classic.a (private break, fork
 * handlers), bestfit_regress_sysbrk the same objects on the real break. Both
 * link with --wrap=_ts_os_sbrk,--wrap=pthread_mutex_lock (the hooks). */
#include "bestfit_harness.h"

#include <malloc.h>
#include <poll.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- hooks: stop one thread between its sbrk and its next lock ------------
 * A thread marked hooked, once armed, stops at its first pthread_mutex_lock
 * after a successful growing sbrk (in bestfit: retaking heap_lock to add the
 * chunk, grow_lock already released) until the test lets it go. */
enum { HOOK_OFF, HOOK_ARMED, HOOK_GREW, HOOK_DONE };
static _Atomic int hook_state;
static __thread int hooked_thread;
static sem_t hook_paused, hook_resume;

void *__real__ts_os_sbrk(intptr_t increment);
void *__wrap__ts_os_sbrk(intptr_t increment);
int __real_pthread_mutex_lock(pthread_mutex_t *m);
int __wrap_pthread_mutex_lock(pthread_mutex_t *m);

void *__wrap__ts_os_sbrk(intptr_t increment) {
    void *old = __real__ts_os_sbrk(increment);
    int armed = HOOK_ARMED;
    if (hooked_thread && increment > 0 && old)
        atomic_compare_exchange_strong(&hook_state, &armed, HOOK_GREW);
    return old;
}

int __wrap_pthread_mutex_lock(pthread_mutex_t *m) {
    int grew = HOOK_GREW;
    if (hooked_thread && atomic_compare_exchange_strong(&hook_state, &grew, HOOK_DONE)) {
        sem_post(&hook_paused);
        while (sem_wait(&hook_resume) != 0) continue;
    }
    return __real_pthread_mutex_lock(m);
}

/* ---- calloc over a reserve that was indexed -------------------------------- */

static uintptr_t reserve_start;
static size_t reserve_size;
static void find_reserve(uintptr_t start, size_t size, int is_reserve, void *arg) {
    (void)arg;
    if (is_reserve) reserve_start = start, reserve_size = size;
}

/* calloc of the whole reserve, and of a few small blocks after it: all zeros. */
static void calloc_reads_zeros(const bf_api_t *api) {
    reserve_size = 0;
    api->walk(find_reserve, NULL);
    CHECK(reserve_size > 1000);
    size_t n = reserve_size - 16;
    unsigned char *c = api->calloc(n);
    CHECK(c);
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < n; i++)
        if (c[i] && !bad++) first = i;
    CHECK_MSG(bad == 0,
              "calloc(%zu) over the reserve at %#lx: %zu non-zero bytes, the first at +%zu", n,
              (unsigned long)reserve_start, bad, first);
    BF_CHECK_HEAP(api);
    api->free(c);
    for (int i = 0; i < 8; i++) {
        unsigned char *s = api->calloc(3000);
        CHECK(s);
        for (size_t k = 0; k < 3000; k++) CHECK(s[k] == 0);
        memset(s, 0xEE, 3000);
        api->free(s);
    }
    BF_CHECK_HEAP(api);
}

/* Frees block y of `size` bytes after dirtying it (so stale bytes show). */
static void dirty_free(const bf_api_t *api, void *y, size_t size) {
    memset(y, 0xAB, size);
    api->free(y);
}

static pthread_barrier_t b_alive;
/* Lives until main freed its block: a dead owner's block would go to the orphans. */
static void *thread_malloc_1000(void *arg) {
    void **out = arg;
    *out = ts_malloc_nolock(1000);
    pthread_barrier_wait(&b_alive); /* 1: allocated */
    pthread_barrier_wait(&b_alive); /* 2: main freed it */
    return NULL;
}

/* nolock: main's reserve ends where thread B's first chunk starts; main frees
 * B's first block while B lives, which merges with main's reserve across
 * main's top. */
static void calloc_nolock(const bf_api_t *api) {
    void *p0 = api->malloc(100); /* main's first chunk */
    CHECK(p0);
    reserve_size = 0;
    api->walk(find_reserve, NULL);
    uintptr_t top = reserve_start + reserve_size;
    pthread_t t;
    void *x;
    CHECK(pthread_barrier_init(&b_alive, NULL, 2) == 0);
    CHECK(pthread_create(&t, NULL, thread_malloc_1000, &x) == 0);
    pthread_barrier_wait(&b_alive);
    /* The private break moves only for the designs: B's chunk comes next. */
    CHECK_MSG(bf_block(x) == top, "B's block %p, main's top %#lx", x, (unsigned long)top);
    BF_CHECK_HEAP(api);
    api->free(x); /* main's reserve absorbs it: the merged block reaches past main's top */
    BF_CHECK_HEAP(api);
    void *x2 = api->malloc(1000); /* carved from the merged block's back: the rest ends at top */
    CHECK(x2 == x);
    BF_CHECK_HEAP(api);
    pthread_barrier_wait(&b_alive);
    CHECK(pthread_join(t, NULL) == 0);
    dirty_free(api, api->malloc(200), 200);
    BF_CHECK_HEAP(api);
    calloc_reads_zeros(api);
}

static void *hooked_malloc_60000(void *hooked) {
    hooked_thread = hooked != NULL;
    return ts_malloc_lock(60000);
}

/* lock: T1 obtains chunk C1, T2 obtains C2 above it and adds it first; T1
 * adds C1 last, so the heap's top is C1's end while C2's rest lies above. */
static void calloc_lock(const bf_api_t *api) {
    CHECK(sem_init(&hook_paused, 0, 0) == 0 && sem_init(&hook_resume, 0, 0) == 0);
    void *p0 = api->malloc(40000); /* the first chunk; 24 KiB stay in the reserve */
    CHECK(p0);
    atomic_store(&hook_state, HOOK_ARMED);
    pthread_t t1, t2;
    void *b1, *b2;
    CHECK(pthread_create(&t1, NULL, hooked_malloc_60000, (void *)api) == 0);
    while (sem_wait(&hook_paused) != 0) continue; /* T1 has C1, not yet added */
    CHECK(pthread_create(&t2, NULL, hooked_malloc_60000, NULL) == 0);
    CHECK(pthread_join(t2, &b2) == 0);
    sem_post(&hook_resume);
    CHECK(pthread_join(t1, &b1) == 0);
    CHECK_EQ(atomic_load(&hook_state), HOOK_DONE);
    CHECK(b1 && b2 && (uintptr_t)b1 < (uintptr_t)b2);
    BF_CHECK_HEAP(api);
    api->free(b2); /* merges with the reserve below it and C2's rest above */
    BF_CHECK_HEAP(api);
    void *big = api->malloc(65536 - 16); /* from the merged block's back: the rest ends at top */
    CHECK(big && bf_block(big) == bf_block(b2));
    BF_CHECK_HEAP(api);
    dirty_free(api, api->malloc(200), 200);
    BF_CHECK_HEAP(api);
    calloc_reads_zeros(api);
    api->free(big);
    api->free(b1);
    api->free(p0);
    BF_CHECK_HEAP(api);
}

/* ---- an odd-sized sbrk ---------------------------------------------------- */

static void odd_break(const bf_api_t *api) {
    void *first = api->malloc(100); /* set up; the reserve is smaller than 100000 */
    CHECK(first);
    CHECK(_ts_os_sbrk(8) != NULL); /* someone leaves the break the designs use unaligned */
    unsigned long segment0 = get_data_segment_size();
    size_t wasted0 = api->wasted();
    errno = 0;
    void *p = api->malloc(100000);
    CHECK_MSG(p, "malloc(100000) after an 8-byte sbrk: errno %d, data segment grew by %lu", errno,
              get_data_segment_size() - segment0);
    /* One chunk: the block, plus the 8 bytes that align its start. */
    CHECK_EQ(get_data_segment_size() - segment0, 100016 + 8);
    CHECK_EQ(api->wasted() - wasted0, 8);
    /* The break is aligned again: the next chunk follows the block, nothing lost. */
    void *q = api->malloc(200000);
    CHECK(q);
    CHECK_EQ(bf_block(q), bf_block(p) + 100016);
    CHECK_EQ(get_data_segment_size() - segment0, 100024 + 200016);
    CHECK_EQ(api->wasted() - wasted0, 8);
    ts_fill(p, 100000, 1);
    ts_fill(q, 200000, 2);
    CHECK(ts_verify(p, 100000, 1) && ts_verify(q, 200000, 2));
    api->free(q);
    api->free(p);
    api->free(first);
    BF_CHECK_HEAP(api);
}

/* ---- fork while a design lock is held -------------------------------------- */

static const bf_api_t *fork_api;
static sem_t holding;
static int alive_pipe[2];
static _Atomic int holder_calls;

/* Runs inside the design's walk, so with its lock held (bestfit: heap_lock;
 * bestfit-tls: orphan_lock). Holds it until the child reports it exists, or
 * for 1 s: with the fork handlers, fork() waits for this lock, so no child
 * can appear while it is held; without them the child appears at once and
 * inherits the lock held. The wait never decides a correct run's outcome. */
static void hold_lock(uintptr_t start, size_t size, int is_reserve, void *arg) {
    (void)start, (void)size, (void)is_reserve, (void)arg;
    if (atomic_fetch_add(&holder_calls, 1) != 0) return;
    sem_post(&holding);
    struct pollfd pfd = {alive_pipe[0], POLLIN, 0};
    (void)poll(&pfd, 1, 1000);
}

static void *holder(void *arg) {
    (void)arg;
    if (fork_api == &bf_apis[0])
        _ts_bestfit_debug_walk(hold_lock, NULL);
    else
        _ts_bestfit_tls_debug_walk_orphans(hold_lock, NULL);
    return NULL;
}

static void *leave_free_blocks(void *arg) {
    (void)arg;
    ts_free_nolock(ts_malloc_nolock(100)); /* the exiting thread hands its reserve over */
    return NULL;
}

/* In a child: the design must work (and its lock be free) within 3 s. */
static void child_uses_design(const bf_api_t *api) {
    alarm(3);
    api->free(api->malloc(300000)); /* grows: the design's locks and the sbrk lock */
    if (api->check()) _exit(3);     /* bestfit-tls: takes orphan_lock */
    _exit(0);
}

static void expect_child_ok(pid_t pid, int fork_no) {
    int status;
    CHECK(pid > 0);
    CHECK(waitpid(pid, &status, 0) == pid);
    CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0,
              "child of fork %d: %s %d (SIGALRM: it hung on a lock held at fork time)", fork_no,
              WIFSIGNALED(status) ? "killed by signal" : "exit status",
              WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
}

static _Atomic int churn_stop;
static void *churn(void *arg) {
    const bf_api_t *api = arg;
    void *slot[64] = {0};
    uint64_t rng = 99;
    while (!atomic_load(&churn_stop)) {
        int k = (int)ts_rand_range(&rng, 0, 63);
        api->free(slot[k]);
        /* large sizes too: growth and give-back keep grow_lock and the sbrk lock busy */
        slot[k] =
            api->malloc(ts_rand_range(&rng, 0, 7) == 0 ? 200000 : ts_rand_range(&rng, 16, 4000));
    }
    for (int k = 0; k < 64; k++) api->free(slot[k]);
    return NULL;
}

static void fork_with_lock_held(const bf_api_t *api) {
    fork_api = api;
    /* The lock's walk needs a free block to call us back on. */
    if (api == &bf_apis[0]) {
        api->free(api->malloc(100));
    } else {
        pthread_t t;
        CHECK(pthread_create(&t, NULL, leave_free_blocks, NULL) == 0);
        CHECK(pthread_join(t, NULL) == 0);
    }
    CHECK(sem_init(&holding, 0, 0) == 0);
    CHECK(pipe(alive_pipe) == 0);
    pthread_t h;
    CHECK(pthread_create(&h, NULL, holder, NULL) == 0);
    while (sem_wait(&holding) != 0) continue;
    pid_t pid = fork();
    if (pid == 0) {
        (void)!write(alive_pipe[1], "x", 1);
        child_uses_design(api);
    }
    expect_child_ok(pid, 0);
    CHECK(pthread_join(h, NULL) == 0);

    /* And forks while two threads churn (growth, give-back, all locks). */
    pthread_t t[2];
    for (int i = 0; i < 2; i++) CHECK(pthread_create(&t[i], NULL, churn, (void *)api) == 0);
    for (int i = 1; i <= 30; i++) {
        pid = fork();
        if (pid == 0) child_uses_design(api);
        expect_child_ok(pid, i);
    }
    atomic_store(&churn_stop, 1);
    for (int i = 0; i < 2; i++) CHECK(pthread_join(t[i], NULL) == 0);
    BF_CHECK_HEAP(api);
}

/* ---- glibc's sbrk beside the designs' ---------------------------------------
 * The main thread grows glibc's main arena one page at a time (M_TOP_PAD 0:
 * an sbrk per malloc) while two threads take and give back large blocks of a
 * design (an sbrk each way). Every block is filled and verified. */

#define RACE_GLIBC_BLOCKS 20000
#define RACE_ITERS        3000

static const bf_api_t *race_api;
static _Atomic int race_stop;
static _Atomic long race_bad;
static unsigned char *glibc_blocks[RACE_GLIBC_BLOCKS];

static void *race_worker(void *arg) {
    uint64_t tag = (uint64_t)(intptr_t)arg * 1000003;
    for (int i = 0; i < RACE_ITERS && !atomic_load(&race_stop); i++, tag++) {
        size_t n = 150000 + (size_t)(tag * 7919 % 100000);
        unsigned char *p = race_api->malloc(n);
        if (!p) continue;
        memset(p, (int)(tag & 0xff), n);
        sched_yield();
        for (size_t k = 0; k < n; k += 61)
            if (p[k] != (unsigned char)tag) {
                atomic_fetch_add(&race_bad, 1);
                break;
            }
        race_api->free(p);
    }
    return NULL;
}

static void glibc_sbrk(const bf_api_t *api) {
    race_api = api;
    char *brk0 = sbrk(0);
    CHECK(mallopt(M_TOP_PAD, 0) == 1);
    pthread_t t[2];
    for (intptr_t i = 0; i < 2; i++)
        CHECK(pthread_create(&t[i], NULL, race_worker, (void *)i) == 0);
    long n = 0, glibc_bad = 0;
    for (; n < RACE_GLIBC_BLOCKS; n++) {
        glibc_blocks[n] = malloc(4000);
        CHECK(glibc_blocks[n]);
        memset(glibc_blocks[n], (int)(n & 0xff), 4000);
    }
    for (long i = 0; i < n; i++)
        for (size_t k = 0; k < 4000; k += 61)
            if (glibc_blocks[i][k] != (unsigned char)i) {
                glibc_bad++;
                break;
            }
    atomic_store(&race_stop, 1);
    for (int i = 0; i < 2; i++) CHECK(pthread_join(t[i], NULL) == 0);
    CHECK_MSG(race_bad == 0 && glibc_bad == 0,
              "corrupted: %ld design blocks, %ld of %ld glibc blocks", (long)race_bad, glibc_bad,
              n);
    /* Deterministically: the designs' memory is not in glibc's data segment. */
    char *p = api->malloc(200000), *brk1 = sbrk(0);
    CHECK(p);
    CHECK_MSG(p + 200000 <= brk0 || p >= brk1, "block %p inside the data segment [%p, %p)",
              (void *)p, (void *)brk0, (void *)brk1);
    CHECK(_ts_os_brk_current() != (void *)brk1);
    api->free(p);
    for (long i = 0; i < n; i++) free(glibc_blocks[i]);
    BF_CHECK_HEAP(api);
}

/* ---- the private break ---------------------------------------------------- */

static uintptr_t page_up(uintptr_t a) {
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    return (a + page - 1) & ~(page - 1);
}

static void private_break(void) {
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    char *real0 = sbrk(0);
    char *b0 = _ts_os_brk_current();
    CHECK(b0 && b0 != (char *)-1 && b0 != real0);
    /* Contiguous growth by odd amounts; the memory reads as zeros and is writable. */
    CHECK(_ts_os_sbrk(100) == b0);
    CHECK(_ts_os_sbrk(3 * (intptr_t)page + 5) == b0 + 100);
    char *top = b0 + 100 + 3 * page + 5;
    CHECK(_ts_os_brk_current() == top);
    for (char *a = b0; a < top; a++) CHECK(*a == 0);
    memset(b0, 0x5A, (size_t)(top - b0));
    /* Give back all but 100 bytes, only if the top is still ours. */
    CHECK(!_ts_os_sbrk_shrink_if_top(top - 16, (size_t)(top - b0) - 100));
    CHECK(_ts_os_sbrk_shrink_if_top(top, (size_t)(top - b0) - 100));
    CHECK(_ts_os_brk_current() == b0 + 100);
    /* Above the break nothing is accessible: a child touching it dies of SIGSEGV. */
    pid_t pid = fork();
    if (pid == 0) {
        *(volatile char *)page_up((uintptr_t)b0 + 100) = 1;
        _exit(0);
    }
    int status;
    CHECK(pid > 0 && waitpid(pid, &status, 0) == pid);
    CHECK_MSG(WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV, "status %#x", status);
    /* Regrown: the page the break stayed in keeps its bytes, whole pages given back are zeros. */
    CHECK(_ts_os_sbrk(2 * (intptr_t)page) == b0 + 100);
    for (char *a = b0; a < b0 + 100; a++) CHECK(*a == 0x5A);
    for (char *a = (char *)page_up((uintptr_t)b0 + 100); a < b0 + 100 + 2 * page; a++)
        CHECK(*a == 0);
    /* Shrinking below the base fails; the real break never moved. */
    errno = 0;
    CHECK(_ts_os_sbrk(-(intptr_t)(100 + 2 * page) - 16) == NULL && errno == ENOMEM);
    CHECK(_ts_os_sbrk(-(intptr_t)(100 + 2 * page)) == b0 + 100 + 2 * page);
    CHECK(_ts_os_brk_current() == b0);
    CHECK((char *)sbrk(0) == real0);
}

/* ---- large blocks nobody writes ------------------------------------------- */

#define UNTOUCHED_BLOCKS 256
#define UNTOUCHED_SIZE   ((size_t)256 << 10)

static size_t resident_pages(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    unsigned long size = 0, resident = 0;
    CHECK(f && fscanf(f, "%lu %lu", &size, &resident) == 2);
    fclose(f);
    return resident;
}

/* Rounds of: 256 blocks of 256 KiB, every other one freed (index links go
 * into its first bytes), 128 blocks of 200 KiB carved from those holes, then
 * all freed. No payload byte is ever written, so only the pages of block
 * headers may become resident: 384 a round, about 1.6 MiB measured. When
 * growth touched the first 64 KiB of every chunk it was 18 MiB. The bound,
 * 4 MiB, leaves over 2x room above the headers' pages (the harness's own
 * pages, another page size) and is far below what a touched payload costs. */
static void untouched(const bf_api_t *api) {
    static void *p[UNTOUCHED_BLOCKS];
    size_t page = (size_t)sysconf(_SC_PAGESIZE), base = resident_pages(), peak = 0;
    for (int round = 0; round < 4; round++) {
        for (int i = 0; i < UNTOUCHED_BLOCKS; i++) CHECK((p[i] = api->malloc(UNTOUCHED_SIZE)));
        for (int i = 1; i < UNTOUCHED_BLOCKS; i += 2) api->free(p[i]);
        for (int i = 1; i < UNTOUCHED_BLOCKS; i += 2) CHECK((p[i] = api->malloc(200 << 10)));
        size_t now = resident_pages();
        if (now > peak) peak = now;
        for (int i = 0; i < UNTOUCHED_BLOCKS; i++) api->free(p[i]);
        BF_CHECK_HEAP(api);
    }
    size_t grown = peak > base ? (peak - base) * page : 0;
    printf("untouched %s: resident memory grew by %zu KiB for %zu KiB of blocks\n", api->name,
           grown >> 10, (UNTOUCHED_BLOCKS * UNTOUCHED_SIZE) >> 10);
    /* 1.6 MiB grows (measured): 4 MiB is 2.5x that; the 64 MiB of blocks
     * made resident by a clearing or splitting write would be far more. */
    CHECK_MSG(grown <= ((size_t)4 << 20), "resident memory grew by %zu bytes", grown);
}

/* ---- the break cannot grow ------------------------------------------------ */

#define BLOCKED_BLOCKS 300
static const bf_api_t *blocked_api;
static void *blocked_kept[2][BLOCKED_BLOCKS / 2];

static void *blocked_worker(void *arg) {
    uintptr_t id = (uintptr_t)arg;
    uint64_t rng = 31 + id;
    void *p[BLOCKED_BLOCKS];
    size_t n[BLOCKED_BLOCKS];
    bf_alloc_tagged(blocked_api, p, n, BLOCKED_BLOCKS, &rng, 1, 20000, id * 1000);
    for (int i = 0; i < BLOCKED_BLOCKS; i++) {
        CHECK(ts_verify(p[i], n[i], id * 1000 + (uint64_t)i));
        if (i % 2)
            blocked_api->free(p[i]);
        else
            blocked_kept[id][i / 2] = p[i];
    }
    return NULL;
}

static void brk_blocked(const bf_api_t *api) {
    blocked_api = api;
    void *first = api->malloc(100);
    CHECK(first);
    ts_os_test_fail(TS_OS_FAIL_SBRK, 0, -1);
    for (int round = 0; round < 3; round++) {
        pthread_t t[2];
        for (uintptr_t i = 0; i < 2; i++)
            CHECK(pthread_create(&t[i], NULL, blocked_worker, (void *)i) == 0);
        for (int i = 0; i < 2; i++) CHECK(pthread_join(t[i], NULL) == 0);
        for (int i = 0; i < 2; i++)
            for (int k = 0; k < BLOCKED_BLOCKS / 2; k++) api->free(blocked_kept[i][k]);
        BF_CHECK_HEAP(api);
    }
    CHECK(api->mapped() > 0);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        char *c = api->malloc(5 << 20);
        if (!c) _exit(1);
        ts_fill(c, 5 << 20, 4);
        if (!ts_verify(c, 5 << 20, 4)) _exit(2);
        api->free(c);
        _exit(api->check() ? 3 : 0);
    }
    int status;
    CHECK(waitpid(pid, &status, 0) == pid);
    CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0, "fork child status %d", status);
    ts_os_test_fail(0, 0, 0);
    api->free(first);
    BF_CHECK_HEAP(api);
}

int main(int argc, char **argv) {
    const bf_api_t *api = bf_api_from_args(argc, argv);
    const char *which = argc > 2 ? argv[2] : "";
    if (!strcmp(which, "calloc")) {
        if (api == &bf_apis[0])
            calloc_lock(api);
        else
            calloc_nolock(api);
    } else if (!strcmp(which, "odd_break")) {
        odd_break(api);
    } else if (!strcmp(which, "fork")) {
        fork_with_lock_held(api);
    } else if (!strcmp(which, "glibc_sbrk")) {
        glibc_sbrk(api);
    } else if (!strcmp(which, "private_break")) {
        private_break();
    } else if (!strcmp(which, "brk_blocked")) {
        brk_blocked(api);
    } else if (!strcmp(which, "untouched")) {
        untouched(api);
    } else {
        fprintf(stderr,
                "usage: %s lock|nolock "
                "calloc|odd_break|fork|glibc_sbrk|private_break|brk_blocked|untouched\n",
                argv[0]);
        return 2;
    }
    printf("bestfit_regress %s %s: ok\n", api->name, which);
    return 0;
}
