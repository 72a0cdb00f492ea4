/* startup: many short processes. The workload starts itself M times as a
 * child (fork, then exec of /proc/self/exe with --child), one after the
 * other, and times the whole. A child is a short program: a few hundred
 * blocks of 16 B - 64 KiB (log-uniform), a third of them freed, a realloc
 * chain from 16 B to 64 KiB with its contents checked at each step, the
 * rest checked, then exit without freeing them. So the figure is the
 * allocator's start-up and exit cost (library load, first-call setup, exit
 * handlers) next to a little real work.
 *
 * The environment, LD_PRELOAD with it, passes to the children; each child
 * checks that malloc comes from the same object as in the parent and
 * reports its bytes through a pipe, so check (the children's bytes summed)
 * is a function of the arguments and a child that did not run, failed or
 * ran on another malloc fails the run.
 */
#include <sys/wait.h>

#include "tsb.h"

static long opt_runs = 200, opt_blocks = 300, opt_child = 0, opt_report_fd = -1;
static const char *opt_malloc_from = NULL;

#define MAX_BLOCKS 4096

/* The child: returns its exit status, writes its bytes to the report fd. */
static int child(void) {
    if (opt_malloc_from && strcmp(opt_malloc_from, tsb_malloc_from()) != 0) return 3;
    static void *ptr[MAX_BLOCKS];
    static size_t size[MAX_BLOCKS];
    uint64_t rng = tsb_mix((uint64_t)opt_blocks), bytes = 0;
    for (long k = 0; k < opt_blocks; k++) {
        size_t n = (size_t)16 << tsb_range(&rng, 0, 12); /* 16 B .. 64 KiB */
        n = tsb_range(&rng, n, n + n / 2 > 65536 ? 65536 : n + n / 2);
        ptr[k] = malloc(n);
        if (!ptr[k]) return 4;
        size[k] = n;
        bytes += n;
        tsb_tag(ptr[k], n, tsb_mix((uint64_t)k));
        if (k % 3 == 2) { /* free one of the last three */
            long j = k - (long)tsb_range(&rng, 0, 2);
            if (ptr[j]) {
                if (!tsb_tag_ok(ptr[j], size[j], tsb_mix((uint64_t)j))) return 5;
                free(ptr[j]);
                ptr[j] = NULL;
            }
        }
    }
    unsigned char *chain = NULL;
    size_t have = 0;
    for (size_t n = 16; n <= 65536; n *= 2) {
        unsigned char *g = realloc(chain, n);
        if (!g) return 4;
        for (size_t i = 0; i < have; i++)
            if (g[i] != (unsigned char)(i * 7 + 1)) return 5;
        for (size_t i = have; i < n; i++) g[i] = (unsigned char)(i * 7 + 1);
        chain = g;
        have = n;
        bytes += n;
    }
    for (long k = 0; k < opt_blocks; k++)
        if (ptr[k] && !tsb_tag_ok(ptr[k], size[k], tsb_mix((uint64_t)k))) return 5;
    if (write(opt_report_fd, &bytes, sizeof bytes) != (ssize_t)sizeof bytes) return 6;
    return 0; /* the rest stays allocated until exit, as in a short program */
}

int main(int argc, char **argv) {
    static const tsb_opt_t opts[] = {
        {"runs", &opt_runs, NULL, "child processes, one after the other"},
        {"blocks", &opt_blocks, NULL, "blocks each child allocates"},
        {"child", &opt_child, NULL, "1: be the child (internal)"},
        {"report-fd", &opt_report_fd, NULL, "the child's pipe to its parent (internal)"},
        {"malloc-from", NULL, &opt_malloc_from, "the parent's malloc object (internal)"},
        {0}};
    tsb_start("startup");
    tsb_parse(argc, argv, opts);
    if (opt_child) return child();
    tsb_require(opt_runs >= 1, "runs >= 1");
    tsb_require(opt_blocks >= 1 && opt_blocks <= MAX_BLOCKS, "1 <= blocks <= 4096");

    char blocks[32], fd_arg[32];
    const char *from = tsb_malloc_from();
    snprintf(blocks, sizeof blocks, "%ld", opt_blocks);
    uint64_t check = 0;
    double t0 = tsb_now();
    for (long r = 0; r < opt_runs; r++) {
        int fds[2];
        if (pipe(fds)) tsb_fail("pipe: %s", strerror(errno));
        snprintf(fd_arg, sizeof fd_arg, "%d", fds[1]);
        pid_t pid = fork();
        if (pid < 0) tsb_fail("fork: %s", strerror(errno));
        if (pid == 0) {
            close(fds[0]);
            char *args[] = {argv[0],      "--child",     "1",    "--blocks",
                            blocks,       "--report-fd", fd_arg, "--malloc-from",
                            (char *)from, NULL};
            execv("/proc/self/exe", args);
            _exit(127);
        }
        close(fds[1]);
        uint64_t bytes = 0;
        ssize_t got = read(fds[0], &bytes, sizeof bytes);
        close(fds[0]);
        int status;
        if (waitpid(pid, &status, 0) != pid) tsb_fail("waitpid: %s", strerror(errno));
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
            tsb_fail("child %ld: %s %d (3: other malloc, 4: NULL, 5: corrupted, 127: exec)", r,
                     WIFEXITED(status) ? "exit" : "signal",
                     WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
        if (got != (ssize_t)sizeof bytes) tsb_fail("child %ld reported nothing", r);
        check += bytes;
    }
    double elapsed = tsb_now() - t0;
    tsb_kv("runs", "%ld", opt_runs);
    tsb_kv("us_per_run", "%.1f", elapsed * 1e6 / (double)opt_runs);
    return tsb_ok(elapsed, 1, check);
}
