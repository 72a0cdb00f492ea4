/* A program whose allocations are known, for the heap profiler's tests
 * (check_prof.py): each mode prints the truth on stdout as `key value`
 * lines, and the checker compares the profile or the leak report with it.
 *
 *   shares MIB [PEAK]  hold60/hold30/hold10 keep 60/30/10% of MIB MiB live
 *                at exit (hold30 on a second thread), after make_peak made
 *                a transient peak of PEAK MiB (default 1.5 x MIB); leak37
 *                keeps 37 blocks
 *   leaks        leak37 keeps 37 blocks of 1000 bytes; everything else freed
 *   clean        everything freed
 *   fork         fork_parent keeps blocks; a child (exit) keeps child_kept;
 *                a second child leaves with _exit
 *   signal       sig_kept keeps blocks; a handled SIGTERM calls exit(3)
 *   twins        via_a and via_b call twin_leaf at the same stack depth,
 *                1000 times each, keeping 1000 and 3000 bytes a call
 *   dump PATH    ts_prof_dump(PATH) with dumped_fn's blocks live
 *   grow OLD NEW ts_prof_dump(OLD) with dumped_fn's blocks live, then
 *                ts_prof_dump(NEW) once they are freed and grown_fn keeps
 *                2 MiB
 *   sigdump FIFO SIG  with dumped_fn's blocks live: raise(SIG) (the handler
 *                finds the profiler's lock free and writes a profile), then
 *                pthread_kill(SIG) to a thread blocked in ts_prof_dump(FIFO)'s
 *                open, that is inside the profiler's lock (the handler finds
 *                it held); main then reads the FIFO, which lets that thread
 *                finish and write the profile the signal asked for
 *   active       ts_prof_set_active: idle_kept's blocks are made while
 *                sampling is off, active_kept's while on (half of them freed
 *                once it is off again), late_kept's after
 *   dlopen LIB   plugin_alloc of LIB (prof_plugin.c), loaded with dlopen
 *   altstack     alt_kept allocates in a signal handler on a sigaltstack
 *                with unmapped memory above it (raised by the program
 *                itself: no allocator call is cut)
 *   reuse        reuse_churn frees and reallocates blocks of several sizes (the
 *                freed sampled blocks that the profiler keeps come back),
 *                counting calloc'ed blocks with a nonzero byte (dirty_calloc)
 *                and realloc'ed ones that lost bytes (bad_realloc); reuse_kept
 *                keeps blocks
 *   double_free  frees one block twice
 *   zero N       zero_kept keeps N blocks of malloc(0)
 *   prefixed     prefixed_kept keeps blocks of ts_malloc, ts_calloc,
 *                ts_realloc and ts_aligned_alloc (prefixed_bytes, _objects)
 *
 * Built with frame pointers and -rdynamic (symbols for dladdr).
 */
#include <dlfcn.h>
#include <fcntl.h>
#include <sched.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

int ts_prof_dump(const char *path) __attribute__((weak));
int ts_prof_set_active(int active) __attribute__((weak));
void *ts_malloc(size_t size) __attribute__((weak));
void *ts_calloc(size_t count, size_t size) __attribute__((weak));
void *ts_realloc(void *ptr, size_t size) __attribute__((weak));
void *ts_aligned_alloc(size_t align, size_t size) __attribute__((weak));

#define NOINLINE __attribute__((noinline))

/* The lists' pointer arrays are static, so that each function's live
 * bytes are exactly its blocks. */
#define LIST_CAP (1u << 20)
typedef struct list {
    void *v[LIST_CAP];
    size_t n, bytes;
} list_t;

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static size_t next_size(void) { /* 16 B .. 64 KiB, skewed small */
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    unsigned shift = (unsigned)(rng >> 60); /* 0..15 */
    size_t max = (size_t)16 << shift;
    if (max > 65536) max = 65536;
    return 16 + (size_t)((rng >> 20) % max);
}

static void keep(list_t *l, void *p, size_t n) {
    if (!p) abort();
    memset(p, 1, n < 64 ? n : 64);
    if (l->n == LIST_CAP) abort();
    l->v[l->n++] = p;
    l->bytes += n;
}

static void drop(list_t *l) {
    for (size_t i = 0; i < l->n; i++) free(l->v[i]);
    l->n = l->bytes = 0;
}

/* Allocates blocks until `target` bytes are live in l (the last block is cut
 * to make the total exact). */
static void fill(list_t *l, size_t target) {
    while (l->bytes < target) {
        size_t n = next_size();
        if (n > target - l->bytes) n = target - l->bytes;
        keep(l, malloc(n), n);
    }
}

static list_t l60, l30, l10, lpeak, lchild, ldump, la, lb;
static size_t total, peak;

NOINLINE void hold60(void) {
    fill(&l60, total / 10 * 6);
}
NOINLINE void hold10(void) {
    fill(&l10, total / 10);
}
NOINLINE void *hold30(void *arg) {
    (void)arg;
    fill(&l30, total / 10 * 3);
    return NULL;
}
NOINLINE void make_peak(void) {
    fill(&lpeak, peak);
    drop(&lpeak);
}
void *volatile leaked[37];
NOINLINE void leak37(void) {
    for (int i = 0; i < 37; i++) leaked[i] = malloc(1000);
    for (int i = 0; i < 37; i++) leaked[i] = NULL;
}
NOINLINE void churn(void) { /* allocated and freed: in the allocated totals only */
    for (int i = 0; i < 20000; i++) free(malloc(next_size()));
}

static void holds(void) {
    make_peak();
    churn();
    hold60();
    pthread_t t;
    if (pthread_create(&t, NULL, hold30, NULL) != 0) abort();
    pthread_join(t, NULL);
    hold10();
}

static void say(const char *key, unsigned long long v) {
    char line[128];
    int n = snprintf(line, sizeof line, "%s %llu\n", key, v);
    if (write(1, line, (size_t)n) != n) abort();
}

NOINLINE void fork_parent(void) {
    fill(&l60, 1 << 20);
}
NOINLINE void child_kept(void) {
    fill(&lchild, 2 << 20);
}
/* The same call site reached through two callers whose frames have the
 * same size: the stacks differ only in the return address into via_*. */
NOINLINE void twin_leaf(list_t *l, size_t n) {
    keep(l, malloc(n), n);
}
NOINLINE void via_a(void) {
    twin_leaf(&la, 1000);
}
NOINLINE void via_b(void) {
    twin_leaf(&lb, 3000);
}
static list_t lalt;
NOINLINE void alt_kept(void) {
    for (int i = 0; i < 16; i++) keep(&lalt, malloc(4000), 4000);
}
static void on_usr1(int sig) {
    (void)sig;
    alt_kept();
}
NOINLINE void sig_kept(void) {
    fill(&l10, 1 << 20);
}
static void on_term(int sig) {
    (void)sig;
    exit(3);
}
NOINLINE void dumped_fn(void) {
    fill(&ldump, 1 << 20);
}
static list_t lgrown;
NOINLINE void grown_fn(void) {
    fill(&lgrown, 2 << 20);
}

/* ---- sigdump ---- */
static const char *fifo_path;
static int fifo_result;
static void *dump_to_fifo(void *arg) {
    (void)arg;
    fifo_result = ts_prof_dump(fifo_path);
    return NULL;
}
/* The first line of /proc/self/task/TID/FILE, or "" . */
static void task_line(pid_t tid, const char *file, const char *key, char *out, size_t cap) {
    char path[128], buf[4096];
    snprintf(path, sizeof path, "/proc/self/task/%d/%s", (int)tid, file);
    out[0] = 0;
    int fd = open(path, O_RDONLY);
    if (fd < 0) return;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return;
    buf[n] = 0;
    char *at = key ? strstr(buf, key) : buf;
    if (!at) return;
    at += key ? strlen(key) : 0;
    size_t len = strcspn(at, "\n");
    if (len >= cap) len = cap - 1;
    memcpy(out, at, len);
    out[len] = 0;
}
static pid_t dump_tid;
static void *dump_to_fifo_tid(void *arg) {
    dump_tid = (pid_t)syscall(SYS_gettid);
    return dump_to_fifo(arg);
}
/* Whether thread tid is blocked in openat(2) (the FIFO's open, which only
 * returns once a reader comes) with signal sig no longer pending: its
 * handler, if sent, has run and the open was restarted. */
static int blocked_in_open(pid_t tid, int sig) {
    char sys[64], pend[64];
    task_line(tid, "syscall", NULL, sys, sizeof sys);
    char num[16];
    snprintf(num, sizeof num, "%d ", SYS_openat);
    if (strncmp(sys, num, strlen(num)) != 0) return 0;
    task_line(tid, "status", "SigPnd:", pend, sizeof pend);
    unsigned long long mask = strtoull(pend, NULL, 16);
    return !(mask >> (sig - 1) & 1);
}
static int sigdump(const char *fifo, int sig) {
    char probe[64];
    task_line((pid_t)syscall(SYS_gettid), "syscall", NULL, probe, sizeof probe);
    if (!probe[0]) { /* no /proc/.../syscall here: the held case cannot be reached */
        say("no_syscall_file", 1);
        return 0;
    }
    say("pid", (unsigned long long)getpid());
    dumped_fn();
    raise(sig); /* the lock is free: written at once, as <name>.0 */
    fifo_path = fifo;
    pthread_t t;
    if (pthread_create(&t, NULL, dump_to_fifo_tid, NULL) != 0) abort();
    while (!__atomic_load_n(&dump_tid, __ATOMIC_ACQUIRE) || !blocked_in_open(dump_tid, sig))
        sched_yield(); /* a state to reach, not a time to wait */
    pthread_kill(t, sig);
    while (!blocked_in_open(dump_tid, sig)) sched_yield();
    say("signal_handled", 1);
    int fd = open(fifo, O_RDONLY);
    if (fd < 0) abort();
    char buf[4096];
    unsigned long long bytes = 0;
    for (ssize_t n; (n = read(fd, buf, sizeof buf)) > 0;) bytes += (unsigned long long)n;
    close(fd);
    pthread_join(t, NULL);
    say("fifo_bytes", bytes);
    say("fifo_result", (unsigned long long)(fifo_result + 2)); /* 2: success */
    return 0;
}

/* ---- active ---- */
static list_t lidle, lactive, llate;
NOINLINE void idle_kept(void) {
    fill(&lidle, 1 << 20);
}
NOINLINE void active_kept(void) { /* 256 blocks of 8 KiB */
    for (int i = 0; i < 256; i++) keep(&lactive, malloc(8192), 8192);
}
NOINLINE void late_kept(void) {
    fill(&llate, 1 << 20);
}
static int active(void) {
    if (!ts_prof_set_active) return 2;
    say("state_at_start", (unsigned long long)(ts_prof_set_active(-1) + 1)); /* 0: no profiler */
    idle_kept();
    say("on_returns", (unsigned long long)(ts_prof_set_active(1) + 1));
    active_kept();
    say("off_returns", (unsigned long long)(ts_prof_set_active(0) + 1));
    for (size_t i = 0; i < 128; i++) free(lactive.v[i]); /* leave the profile though off */
    late_kept();
    say("state_at_end", (unsigned long long)(ts_prof_set_active(-1) + 1));
    return 0;
}

static list_t lreuse;
static unsigned long long dirty_calloc, bad_realloc;
NOINLINE void reuse_churn(void) {
    for (unsigned i = 0; i < 2000; i++) {
        size_t n = 100 + (i * 7919) % 40000;
        unsigned char *p = malloc(n);
        if (!p) abort();
        memset(p, 0xa5, n);
        if (i % 3 == 0) { /* grown or shrunk: the bytes kept stay */
            size_t m = 100 + (i * 104729) % 40000, k = n < m ? n : m;
            p = realloc(p, m);
            if (!p) abort();
            for (size_t j = 0; j < k; j++)
                if (p[j] != 0xa5) {
                    bad_realloc++;
                    break;
                }
        }
        free(p);
        unsigned char *q = calloc(1, n);
        if (!q) abort();
        for (size_t j = 0; j < n; j++)
            if (q[j]) {
                dirty_calloc++;
                break;
            }
        free(q);
    }
}
NOINLINE void reuse_kept(void) {
    for (unsigned i = 0; i < 50; i++) keep(&lreuse, malloc(5000 + i), 5000 + i);
}

static list_t lzero, lprefixed;
NOINLINE void zero_kept(size_t n) {
    for (size_t i = 0; i < n; i++) {
        void *p = malloc(0);
        if (!p) abort();
        if (lzero.n < LIST_CAP) lzero.v[lzero.n++] = p; /* the rest leak: live too */
    }
}
NOINLINE void prefixed_kept(void) {
    for (unsigned i = 0; i < 10; i++) {
        keep(&lprefixed, ts_malloc(1000), 1000);
        keep(&lprefixed, ts_calloc(10, 100), 1000);
        keep(&lprefixed, ts_realloc(ts_malloc(10), 2000), 2000);
        keep(&lprefixed, ts_aligned_alloc(64, 640), 640);
    }
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "shares";
    total = (size_t)(argc > 2 ? atol(argv[2]) : 64) << 20;
    peak = argc > 3 ? (size_t)atol(argv[3]) << 20 : total / 2 * 3;
    if (!strcmp(mode, "shares")) {
        holds();
        leak37();
        say("hold60", l60.bytes);
        say("hold30", l30.bytes);
        say("hold10", l10.bytes);
        say("make_peak", peak);
        return 0;
    }
    if (!strcmp(mode, "leaks") || !strcmp(mode, "clean")) {
        total = 4 << 20;
        peak = 6 << 20;
        holds();
        if (!strcmp(mode, "leaks")) leak37();
        drop(&l60);
        drop(&l30);
        drop(&l10);
        return 0;
    }
    if (!strcmp(mode, "fork")) {
        fork_parent();
        pid_t a = fork();
        if (a == 0) {
            child_kept();
            exit(0);
        }
        pid_t b = fork();
        if (b == 0) {
            child_kept();
            _exit(0);
        }
        int st;
        waitpid(a, &st, 0);
        waitpid(b, &st, 0);
        say("parent", (unsigned long long)getpid());
        say("child_exit", (unsigned long long)a);
        say("child_underscore_exit", (unsigned long long)b);
        return 0;
    }
    if (!strcmp(mode, "twins")) {
        for (int i = 0; i < 1000; i++) {
            via_a();
            via_b();
        }
        say("via_a", la.bytes);
        say("via_b", lb.bytes);
        return 0;
    }
    if (!strcmp(mode, "altstack")) {
        /* A stack with unmapped memory right above it. */
        size_t size = 1 << 16;
        char *alt =
            mmap(NULL, size + 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (alt == MAP_FAILED || munmap(alt + size, 4096) != 0) return 2;
        stack_t ss = {.ss_sp = alt, .ss_size = size};
        struct sigaction sa = {.sa_handler = on_usr1, .sa_flags = SA_ONSTACK};
        if (sigaltstack(&ss, NULL) != 0 || sigaction(SIGUSR1, &sa, NULL) != 0) return 2;
        for (int i = 0; i < 4; i++) raise(SIGUSR1);
        say("alt_kept", lalt.bytes);
        return 0;
    }
    if (!strcmp(mode, "signal")) {
        sig_kept();
        signal(SIGTERM, on_term);
        raise(SIGTERM);
        return 0;
    }
    if (!strcmp(mode, "dlopen")) {
        void *lib = argc > 2 ? dlopen(argv[2], RTLD_NOW | RTLD_LOCAL) : NULL;
        size_t (*fn)(void) = lib ? (size_t(*)(void))dlsym(lib, "plugin_alloc") : NULL;
        if (!fn) return 2;
        say("plugin_alloc", fn());
        return 0;
    }
    if (!strcmp(mode, "reuse")) {
        reuse_churn();
        reuse_kept();
        reuse_churn();
        say("reuse_kept", lreuse.bytes);
        say("dirty_calloc", dirty_calloc);
        say("bad_realloc", bad_realloc);
        return 0;
    }
    if (!strcmp(mode, "double_free")) {
        void *volatile p = malloc(3000);
        free(p);
        free(p);
        return 0;
    }
    if (!strcmp(mode, "zero")) {
        size_t n = argc > 2 ? (size_t)atol(argv[2]) : 100000;
        zero_kept(n);
        say("zero_kept", n);
        return 0;
    }
    if (!strcmp(mode, "prefixed")) {
        if (!ts_malloc || !ts_calloc || !ts_realloc || !ts_aligned_alloc) return 2;
        prefixed_kept();
        say("prefixed_bytes", lprefixed.bytes);
        say("prefixed_objects", lprefixed.n);
        return 0;
    }
    if (!strcmp(mode, "sigdump") && argc > 3) return sigdump(argv[2], atoi(argv[3]));
    if (!strcmp(mode, "active")) return active();
    if (!strcmp(mode, "grow") && argc > 3) {
        dumped_fn();
        int r = ts_prof_dump ? ts_prof_dump(argv[2]) : -2;
        drop(&ldump);
        grown_fn();
        if (r == 0 && ts_prof_dump) r = ts_prof_dump(argv[3]);
        say("dump_result", (unsigned long long)(r + 2)); /* 2: success */
        return 0;
    }
    if (!strcmp(mode, "dump")) {
        dumped_fn();
        int r = ts_prof_dump ? ts_prof_dump(argv[2]) : -2;
        say("dump_result", (unsigned long long)(r + 2)); /* 2: success */
        return 0;
    }
    return 2;
}
