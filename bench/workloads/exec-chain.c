/* exec-chain: pipelines of short processes. Each of R repetitions starts K
 * processes (fork, then exec of /proc/self/exe with --stage) joined by
 * pipes, as a shell pipeline: stage 0 makes `records` records of 16 B -
 * 4 KiB, each in a block of its own, writes them and frees them; every
 * later stage reads each record into a fresh block (malloc, and a pointer
 * table grown by realloc), then transforms and writes them all and frees
 * them; the parent reads what the last stage writes. Timed as a whole:
 * process start, the allocator's set-up and exit, and a few hundred blocks
 * per process.
 *
 * Each stage checks that malloc comes from the same object as in the
 * parent (the environment, LD_PRELOAD with it, passes to the children).
 * The parent computes, without the children, what the last stage must
 * write, and compares it record by record (length and every byte), so a
 * stage that lost or damaged a block fails the run. check is a checksum of
 * that output: a function of the arguments.
 */
#include <sys/wait.h>

#include "tsb.h"

static long opt_stages = 8, opt_reps = 20, opt_records = 300, opt_stage = -1;
static const char *opt_malloc_from = NULL;

/* Record k's length and its byte i after stage s (stage 0 wrote it). */
static uint32_t record_len(long k) {
    uint64_t s = tsb_mix((uint64_t)k + 77);
    return (uint32_t)tsb_range(&s, 16, 4096);
}
static unsigned char record_byte(long k, size_t i, long s) {
    unsigned char b = (unsigned char)(tsb_mix((uint64_t)k << 20 ^ (uint64_t)i) >> 56);
    for (long j = 1; j <= s; j++) b = (unsigned char)(b * 5 + (unsigned char)j);
    return b;
}

static void write_all(int fd, const void *p, size_t n) {
    const char *c = p;
    while (n) {
        ssize_t w = write(fd, c, n);
        if (w <= 0) _exit(6);
        c += w;
        n -= (size_t)w;
    }
}
static int read_all(int fd, void *p, size_t n) {
    char *c = p;
    while (n) {
        ssize_t r = read(fd, c, n);
        if (r <= 0) return 0;
        c += r;
        n -= (size_t)r;
    }
    return 1;
}

/* One stage: stdin to stdout. Returns the exit status. */
static int stage(long s) {
    if (opt_malloc_from && strcmp(opt_malloc_from, tsb_malloc_from()) != 0) return 3;
    if (s == 0) {
        for (long k = 0; k < opt_records; k++) {
            uint32_t n = record_len(k);
            unsigned char *b = malloc(n);
            if (!b) return 4;
            for (size_t i = 0; i < n; i++) b[i] = record_byte(k, i, 0);
            write_all(1, &n, sizeof n);
            write_all(1, b, n);
            free(b);
        }
        return 0;
    }
    unsigned char **recs = NULL;
    uint32_t *lens = NULL;
    long have = 0, cap = 0;
    uint32_t n;
    while (read_all(0, &n, sizeof n)) {
        if (n > 65536) return 5;
        if (have == cap) {
            cap = cap ? cap * 2 : 16;
            unsigned char **r2 = realloc(recs, sizeof *recs * (size_t)cap);
            if (!r2) return 4;
            recs = r2;
            uint32_t *l2 = realloc(lens, sizeof *lens * (size_t)cap);
            if (!l2) return 4;
            lens = l2;
        }
        unsigned char *b = malloc(n);
        if (!b || !read_all(0, b, n)) return 4;
        recs[have] = b;
        lens[have++] = n;
    }
    for (long k = 0; k < have; k++) {
        for (size_t i = 0; i < lens[k]; i++) recs[k][i] = (unsigned char)(recs[k][i] * 5 + s);
        write_all(1, &lens[k], sizeof lens[k]);
        write_all(1, recs[k], lens[k]);
        free(recs[k]);
    }
    free(recs);
    free(lens);
    return 0;
}

int main(int argc, char **argv) {
    static const tsb_opt_t opts[] = {
        {"stages", &opt_stages, NULL, "processes in the pipeline"},
        {"reps", &opt_reps, NULL, "pipelines run, one after the other"},
        {"records", &opt_records, NULL, "records (blocks) passed along"},
        {"stage", &opt_stage, NULL, "be this stage (internal)"},
        {"malloc-from", NULL, &opt_malloc_from, "the parent's malloc object (internal)"},
        {0}};
    tsb_start("exec-chain");
    tsb_parse(argc, argv, opts);
    if (opt_stage >= 0) return stage(opt_stage);
    tsb_require(opt_stages >= 1 && opt_stages <= 64, "1 <= stages <= 64");
    tsb_require(opt_reps >= 1 && opt_records >= 1 && opt_records < (1L << 20),
                "reps >= 1, 1 <= records < 2^20");

    /* The expected output of the last stage, in harness memory. */
    size_t total = 0;
    for (long k = 0; k < opt_records; k++) total += sizeof(uint32_t) + record_len(k);
    unsigned char *want = tsb_pages(total), *got = tsb_pages(total + 1);
    uint64_t sum = 0;
    for (long k = 0, at = 0; k < opt_records; k++) {
        uint32_t n = record_len(k);
        memcpy(want + at, &n, sizeof n);
        at += (long)sizeof n;
        for (size_t i = 0; i < n; i++) {
            want[at] = record_byte(k, i, opt_stages - 1);
            sum = sum * 31 + want[at++];
        }
    }
    char records[32], stage_arg[32];
    const char *from = tsb_malloc_from();
    snprintf(records, sizeof records, "%ld", opt_records);
    static pid_t pids[64];
    uint64_t check = 0;
    double t0 = tsb_now();
    for (long r = 0; r < opt_reps; r++) {
        int in = -1; /* the read end of the previous stage's pipe */
        for (long s = 0; s < opt_stages; s++) {
            int fds[2];
            if (pipe(fds)) tsb_fail("pipe: %s", strerror(errno));
            snprintf(stage_arg, sizeof stage_arg, "%ld", s);
            pids[s] = fork();
            if (pids[s] < 0) tsb_fail("fork: %s", strerror(errno));
            if (pids[s] == 0) {
                if (in >= 0) dup2(in, 0), close(in);
                dup2(fds[1], 1);
                close(fds[0]);
                close(fds[1]);
                char *args[] = {argv[0], "--stage",       stage_arg,    "--records",
                                records, "--malloc-from", (char *)from, NULL};
                execv("/proc/self/exe", args);
                _exit(127);
            }
            if (in >= 0) close(in);
            close(fds[1]);
            in = fds[0];
        }
        size_t len = 0;
        for (ssize_t n; (n = read(in, got + len, total + 1 - len)) > 0;) len += (size_t)n;
        close(in);
        for (long s = 0; s < opt_stages; s++) {
            int status;
            if (waitpid(pids[s], &status, 0) != pids[s]) tsb_fail("waitpid: %s", strerror(errno));
            if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
                tsb_fail("stage %ld: %s %d (3: other malloc, 4: NULL or short read, 5: bad "
                         "record, 6: write, 127: exec)",
                         s, WIFEXITED(status) ? "exit" : "signal",
                         WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
        }
        if (len != total || memcmp(got, want, total) != 0)
            tsb_fail("repetition %ld: the last stage wrote %zu bytes that differ from the %zu "
                     "expected",
                     r, len, total);
        check += sum;
    }
    double elapsed = tsb_now() - t0;
    tsb_kv("processes", "%ld", opt_reps * opt_stages);
    tsb_kv("us_per_process", "%.1f", elapsed * 1e6 / (double)(opt_reps * opt_stages));
    return tsb_ok(elapsed, 1, check);
}
