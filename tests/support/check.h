/* Test support: assertions that fail loudly, a deterministic PRNG, block
 * patterns, an overlap checker, and "this must abort with that message".
 * Header-only so every test is one self-contained program. */
#ifndef TS_TEST_CHECK_H
#define TS_TEST_CHECK_H

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);               \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

#define CHECK_MSG(cond, ...)                                                                       \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond);               \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

#define CHECK_EQ(a, b)                                                                             \
    do {                                                                                           \
        unsigned long long _a = (unsigned long long)(a), _b = (unsigned long long)(b);             \
        CHECK_MSG(_a == _b, "%llu != %llu", _a, _b);                                               \
    } while (0)

/* Hides a value from the optimiser, so tests can pass impossible sizes
 * without compile-time warnings about them. */
static inline size_t ts_opaque(size_t x) {
    __asm__ volatile("" : "+r"(x));
    return x;
}

/* xorshift64*: deterministic, thread-private when each thread has its own state. */
static inline uint64_t ts_rand(uint64_t *state) {
    uint64_t x = *state ? *state : 0x9e3779b97f4a7c15ull;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *state = x;
    return x * 0x2545f4914f6cdd1dull;
}
static inline size_t ts_rand_range(uint64_t *state, size_t lo, size_t hi) {
    return lo + (size_t)(ts_rand(state) % (hi - lo + 1));
}

/* A whole file (/proc/self/...) into buf, NUL-terminated, without stdio or
 * malloc (the allocator under test must not be disturbed); returns its length. */
static inline size_t ts_read_file(const char *path, char *buf, size_t size) {
    int fd = open(path, O_RDONLY);
    CHECK_MSG(fd >= 0, "cannot open %s", path);
    size_t len = 0;
    ssize_t n;
    while (len + 1 < size && (n = read(fd, buf + len, size - 1 - len)) > 0) len += (size_t)n;
    close(fd);
    buf[len] = 0;
    return len;
}

/* Resident bytes (second field of /proc/self/statm), without allocating. */
static inline size_t ts_rss_bytes(void) {
    char buf[256];
    CHECK(ts_read_file("/proc/self/statm", buf, sizeof buf) > 0);
    char *p = strchr(buf, ' ');
    CHECK(p != NULL);
    return (size_t)strtoull(p + 1, NULL, 10) * (size_t)sysconf(_SC_PAGESIZE);
}

/* The mapping of this process that holds addr (from /proc/self/maps, read
 * without allocating): 1 with [*lo, *hi) set, 0 when none does. */
static inline int ts_find_mapping(uintptr_t addr, uintptr_t *lo, uintptr_t *hi) {
    static char maps[1 << 20];
    ts_read_file("/proc/self/maps", maps, sizeof maps);
    for (char *line = maps; *line;) {
        char *dash;
        uintptr_t start = (uintptr_t)strtoull(line, &dash, 16);
        uintptr_t stop = (uintptr_t)strtoull(dash + 1, NULL, 16);
        if (start <= addr && addr < stop) {
            *lo = start;
            *hi = stop;
            return 1;
        }
        char *nl = strchr(line, '\n');
        if (!nl) break;
        line = nl + 1;
    }
    return 0;
}

/* Threads of this process (the Threads: line of /proc/self/status; a main
 * thread that called pthread_exit still counts there). */
static inline int ts_thread_count(void) {
    char buf[4096];
    CHECK(ts_read_file("/proc/self/status", buf, sizeof buf) > 0);
    char *line = strstr(buf, "\nThreads:");
    CHECK(line != NULL);
    return atoi(line + strlen("\nThreads:"));
}

/* Fill a block with a pattern derived from its tag, and verify it later. */
static inline void ts_fill(void *p, size_t n, uint64_t tag) {
    unsigned char *b = (unsigned char *)p;
    for (size_t i = 0; i < n; i++) b[i] = (unsigned char)(tag * 31 + i * 7 + (i >> 8));
}
static inline int ts_verify(const void *p, size_t n, uint64_t tag) {
    const unsigned char *b = (const unsigned char *)p;
    for (size_t i = 0; i < n; i++)
        if (b[i] != (unsigned char)(tag * 31 + i * 7 + (i >> 8))) return 0;
    return 1;
}

/* Blocks of `size` bytes, filled (tag: their index), until malloc gives
 * NULL or `max` are held; returns how many. errno is malloc's last. */
static inline size_t ts_fill_until_null(void **blocks, size_t max, size_t size) {
    size_t n;
    for (n = 0; n < max; n++) {
        errno = 0;
        blocks[n] = malloc(size);
        if (!blocks[n]) break;
        ts_fill(blocks[n], size, n);
    }
    return n;
}

/* Overlap check: sort [start, start+len) ranges and compare neighbours. */
typedef struct {
    uintptr_t start;
    size_t len;
} ts_range_t;
static int ts_range_cmp(const void *a, const void *b) {
    uintptr_t x = ((const ts_range_t *)a)->start, y = ((const ts_range_t *)b)->start;
    return x < y ? -1 : x > y;
}
/* Returns the index of the first overlapping pair after sorting, or -1. */
static inline long ts_find_overlap(ts_range_t *r, size_t n) {
    qsort(r, n, sizeof *r, ts_range_cmp);
    for (size_t i = 1; i < n; i++)
        if (r[i - 1].start + r[i - 1].len > r[i].start) return (long)i;
    return -1;
}

/* Run fn(arg) in a forked child and capture its stderr into out. Returns 1
 * when the child died of SIGABRT, else prints its status and returns 0. */
static inline int ts_run_expect_sigabrt(void (*fn)(void *), void *arg, char *out, size_t cap) {
    int fds[2];
    if (pipe(fds) != 0) return 0;
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fds[1], 2);
        close(fds[0]);
        fn(arg);
        _exit(0); /* should not get here */
    }
    close(fds[1]);
    size_t len = 0;
    ssize_t n;
    while (len + 1 < cap && (n = read(fds[0], out + len, cap - 1 - len)) > 0) len += (size_t)n;
    out[len] = 0;
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    if (!WIFSIGNALED(status) || WTERMSIG(status) != SIGABRT) {
        fprintf(stderr, "expected SIGABRT; exit status %d, stderr: %s\n", status, out);
        return 0;
    }
    return 1;
}

/* Require that fn(arg) aborts and that its stderr contains `expected`. */
static inline int ts_expect_abort(void (*fn)(void *), void *arg, const char *expected) {
    char out[4096];
    if (!ts_run_expect_sigabrt(fn, arg, out, sizeof out)) return 0;
    if (!strstr(out, expected)) {
        fprintf(stderr, "expected message \"%s\", got: %s\n", expected, out);
        return 0;
    }
    return 1;
}

/* ts_expect_abort with the message made from fmt and ptr (one %p); on a
 * failure, also names the case. */
static inline int ts_expect_abort_at(void (*fn)(void *), void *arg, const char *fmt,
                                     const void *ptr, const char *what) {
    char want[160];
    snprintf(want, sizeof want, fmt, ptr);
    if (ts_expect_abort(fn, arg, want)) return 1;
    fprintf(stderr, "  case: %s\n", what);
    return 0;
}

/* ---- a child that must end (core_exit, core_exit_dlopen) ----------------- */

#define TS_EXIT_MARK "exit handlers ran"

/* The pipe between the parent and the child of ts_fork_exit_reported: the
 * write end in the child, the read end in the parent. */
static inline int *ts_exit_pipe_fd(void) {
    static int fd = -1;
    return &fd;
}
static inline void ts_report_exit(void) {
    int fd = *ts_exit_pipe_fd();
    CHECK(write(fd, TS_EXIT_MARK, sizeof TS_EXIT_MARK - 1) == (ssize_t)(sizeof TS_EXIT_MARK - 1));
}

/* fork(), with the child's exit handlers made to tell the parent that they
 * ran (an atexit handler registered here). 0 in the child, its pid in the
 * parent, which then calls ts_expect_clean_exit. */
static inline pid_t ts_fork_exit_reported(void) {
    int fds[2];
    CHECK(pipe(fds) == 0);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        close(fds[0]);
        *ts_exit_pipe_fd() = fds[1];
        CHECK(atexit(ts_report_exit) == 0);
    } else {
        close(fds[1]);
        *ts_exit_pipe_fd() = fds[0];
    }
    return pid;
}

static inline pid_t *ts_awaited_child(void) {
    static pid_t pid;
    return &pid;
}
static inline void ts_child_hangs(int sig) {
    (void)sig;
    kill(*ts_awaited_child(), SIGKILL);
    static const char msg[] = "the child outlived its last thread by 20 s\n";
    (void)!write(2, msg, sizeof msg - 1);
    _exit(1);
}

/* In the parent: the child of ts_fork_exit_reported must exit with status 0
 * within 20 s (a process kept alive by a thread of ours fails here), after
 * its exit handlers ran. */
static inline void ts_expect_clean_exit(pid_t pid) {
    *ts_awaited_child() = pid;
    signal(SIGALRM, ts_child_hangs);
    alarm(20);
    int status = 0;
    CHECK(waitpid(pid, &status, 0) == pid);
    alarm(0);
    CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status %#x", status);
    int fd = *ts_exit_pipe_fd();
    char buf[64] = {0};
    CHECK(read(fd, buf, sizeof buf - 1) == (ssize_t)(sizeof TS_EXIT_MARK - 1));
    CHECK(strcmp(buf, TS_EXIT_MARK) == 0);
    close(fd);
}

/* Under ts_preload_test, the design the test must be running on (or NULL). */
static inline const char *ts_expected_design(void) {
    return getenv("TSALLOC_EXPECT_DESIGN");
}

/* Fails the test when it is meant to run on a tsalloc design but malloc is
 * not ours (a broken LD_PRELOAD would otherwise test glibc and pass). */
/* Whether a sanitizer's runtime (gcc's libubsan or libasan) is in the
 * process, as in a build with -fsanitize=undefined (docs/testing.md): it
 * brings libstdc++ and allocates at start-up, which a test of a process
 * without C++ or of a fresh heap cannot tell from its own doing. */
static inline int ts_sanitizer_phdr(struct dl_phdr_info *info, size_t size, void *found) {
    (void)size;
    if (info->dlpi_name &&
        (strstr(info->dlpi_name, "libubsan") || strstr(info->dlpi_name, "libasan")))
        *(int *)found = 1;
    return 0;
}
static inline int ts_sanitizer_loaded(void) {
    int found = 0;
    dl_iterate_phdr(ts_sanitizer_phdr, &found);
    return found;
}

static inline void ts_require_preloaded(void) {
    if (!ts_expected_design()) return;
    void *own = dlsym(RTLD_DEFAULT, "ts_os_test_fail");
    CHECK_MSG(own != NULL, "LD_PRELOAD of tsalloc-%s is not in effect", ts_expected_design());
}

#endif
