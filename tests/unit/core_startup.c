/* What a short process pays for the fast allocator at start-up, counted, not
 * timed: the page faults before main (loading libtsalloc.so and its
 * constructor), the page faults of a short program's allocations, and its
 * threads. The program runs itself twice as a child, under glibc and with
 * libtsalloc.so preloaded (the path is the first argument), and compares.
 *
 * A short program: 200 blocks of 16 B - 192 KiB (log-uniform, the same
 * sequence every run), each written at both ends, a third freed, a realloc
 * chain from 16 B to 64 KiB, exit with the rest live. Its blocks take about
 * five big pages, each a whole 4 MiB segment committed for a block or two:
 * a purge thread started for them (an 8 MiB stack, a clone, a second thread
 * at exit) cost git log --oneline -50 2% of its time.
 *
 * Bounds, each twice what the allocator needs now (Linux 6.18, x86-64, glibc
 * 2.36; glibc's own figures for the same program in brackets):
 * - faults before main beyond glibc's: 23 measured (libtsalloc.so's headers,
 *   text and rodata, its .data pages, the constructor's pthread key, the
 *   loader's bookkeeping for one more object), bound 46;
 * - faults of the program: 182 measured [glibc 102], bound 364: an OS page
 *   or two for each class's first blocks, both ends of the big blocks, a
 *   page or two of descriptors per segment; crossing it means something
 *   touches memory the program did not ask for (pages carved or formatted
 *   whole, a big first mapping written, state spread over bss pages);
 * - threads: 1. The purge thread is for processes that use 8 MiB or more;
 * - the parent's faults over 10 forks beyond glibc's: 8-9 measured, bound 20.
 *   Each page the fork handlers write after the fork is a copy-on-write
 *   fault: now the page of the locks (TS_FORK_LOCK) alone, and glibc's own
 *   pages that a program with fork handlers writes. It was 221 with the
 *   locks spread over the bss, and 70-90 while the handlers still wrote
 *   each segment's spin lock.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"

#define START_EXTRA_BOUND 46
#define WORK_BOUND        364
#define FORK_EXTRA_BOUND  20

static long minflt(void) {
    struct rusage ru;
    CHECK(getrusage(RUSAGE_SELF, &ru) == 0);
    return ru.ru_minflt;
}

static unsigned long rng_next(unsigned long *s) {
    *s = *s * 6364136223846793005ul + 1442695040888963407ul;
    return *s >> 33;
}

/* The short program; returns its page faults. */
static long short_program(void) {
    static unsigned char *ptr[200];
    static size_t size[200];
    unsigned long rng = 12345;
    long before = minflt();
    for (int k = 0; k < 200; k++) {
        size_t n = (size_t)16 << (rng_next(&rng) % 14); /* 16 B .. 128 KiB */
        n += rng_next(&rng) % (n / 2 + 1);
        ptr[k] = malloc(n);
        CHECK(ptr[k] != NULL);
        size[k] = n;
        ptr[k][0] = (unsigned char)k;
        ptr[k][n - 1] = (unsigned char)k;
        if (k % 3 == 2) { /* free one of the last three */
            int j = k - (int)(rng_next(&rng) % 3);
            if (ptr[j]) {
                CHECK(ptr[j][0] == (unsigned char)j && ptr[j][size[j] - 1] == (unsigned char)j);
                free(ptr[j]);
                ptr[j] = NULL;
            }
        }
    }
    unsigned char *chain = NULL;
    for (size_t n = 16; n <= 65536; n *= 2) {
        chain = realloc(chain, n);
        CHECK(chain != NULL);
        memset(chain + n / 2, 1, n / 2);
    }
    return minflt() - before;
}

/* The parent's page faults per fork, ten times over, in tenths: each page
 * the parent writes after a fork is a copy-on-write fault. */
static long fork_faults(void) {
    long before = minflt();
    for (int k = 0; k < 10; k++) {
        pid_t pid = fork();
        CHECK(pid >= 0);
        if (pid == 0) _exit(0);
        int status;
        CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
    return minflt() - before;
}

static int child(void) {
    long start = minflt();
    long work = short_program();
    long forks = fork_faults();
    printf("%d %ld %ld %d %ld\n", dlsym(RTLD_DEFAULT, "ts_version") != NULL, start, work,
           ts_thread_count(), forks);
    return 0;
}

typedef struct run {
    int tsalloc;
    long start, work;
    int threads;
    long forks;
} run_t;

static run_t run_child(const char *self, const char *preload) {
    int fds[2];
    CHECK(pipe(fds) == 0);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        dup2(fds[1], 1);
        close(fds[0]);
        if (preload)
            setenv("LD_PRELOAD", preload, 1);
        else
            unsetenv("LD_PRELOAD");
        execl(self, self, "--child", (char *)NULL);
        _exit(127);
    }
    close(fds[1]);
    char buf[256] = {0};
    ssize_t got = 0, n;
    while ((n = read(fds[0], buf + got, sizeof buf - 1 - (size_t)got)) > 0) got += n;
    close(fds[0]);
    int status = 0;
    CHECK(waitpid(pid, &status, 0) == pid);
    CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child: status %#x", status);
    run_t r;
    CHECK(sscanf(buf, "%d %ld %ld %d %ld", &r.tsalloc, &r.start, &r.work, &r.threads, &r.forks) ==
          5);
    return r;
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "--child")) return child();
    CHECK_MSG(argc == 2, "usage: %s LIBTSALLOC.so", argv[0]);
    run_t g = run_child("/proc/self/exe", NULL);
    run_t t = run_child("/proc/self/exe", argv[1]);
    printf("faults before main: glibc %ld, tsalloc %ld; of the program: glibc %ld, tsalloc "
           "%ld; threads: tsalloc %d; of 10 forks: glibc %ld, tsalloc %ld\n",
           g.start, t.start, g.work, t.work, t.threads, g.forks, t.forks);
    CHECK_MSG(!g.tsalloc && t.tsalloc, "the children's malloc: %d %d", g.tsalloc, t.tsalloc);
    CHECK_MSG(t.threads == 1, "a short program has %d threads under tsalloc", t.threads);
    CHECK_MSG(t.start - g.start <= START_EXTRA_BOUND,
              "%ld page faults before main beyond glibc's, bound %d", t.start - g.start,
              START_EXTRA_BOUND);
    CHECK_MSG(t.forks - g.forks <= FORK_EXTRA_BOUND,
              "10 forks take %ld page faults beyond glibc's, bound %d", t.forks - g.forks,
              FORK_EXTRA_BOUND);
    CHECK_MSG(t.work <= WORK_BOUND, "a short program takes %ld page faults, bound %d", t.work,
              WORK_BOUND);
    return 0;
}
