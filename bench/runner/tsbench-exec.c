/* tsbench-exec: runs one benchmark process for tsbench and reports what the
 * kernel measured about it, free of the runner's own footprint.
 *
 *   tsbench-exec --report FILE [--preload LIB] -- PROGRAM [ARGS...]
 *
 * Why it exists: ru_maxrss survives execve, so a process started from the
 * Python runner inherits Python's ~20 MB as its "peak RSS". This helper is
 * small; the child it forks starts from the helper's few hundred KiB.
 *
 * FILE gets "pid N" as soon as the child runs (so the runner can sample
 * /proc/N), then one line
 *   "status S wall_s W user_s U sys_s Y maxrss_kb M"
 * with S the raw wait status. LD_PRELOAD is set in the child only, so a
 * broken allocator cannot take the helper down. Exit status: 0 when FILE
 * holds the result line, 2 on bad usage, 127 when PROGRAM could not start.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void put(int fd, const char *text) {
    size_t len = strlen(text);
    while (len > 0) {
        ssize_t n = write(fd, text, len);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return;
        text += n;
        len -= (size_t)n;
    }
}

int main(int argc, char **argv) {
    const char *report = NULL, *preload = NULL;
    int i = 1;
    for (; i < argc; i++) {
        if (!strcmp(argv[i], "--report") && i + 1 < argc)
            report = argv[++i];
        else if (!strcmp(argv[i], "--preload") && i + 1 < argc)
            preload = argv[++i];
        else if (!strcmp(argv[i], "--")) {
            i++;
            break;
        } else
            break;
    }
    if (!report || i >= argc) {
        fprintf(stderr, "usage: tsbench-exec --report FILE [--preload LIB] -- PROGRAM [ARGS]\n");
        return 2;
    }
    int fd = open(report, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        fprintf(stderr, "tsbench-exec: %s: %s\n", report, strerror(errno));
        return 2;
    }
    double t0 = now();
    pid_t pid = fork();
    if (pid < 0) {
        fprintf(stderr, "tsbench-exec: fork: %s\n", strerror(errno));
        return 127;
    }
    if (pid == 0) {
        if (preload) setenv("LD_PRELOAD", preload, 1);
        execvp(argv[i], argv + i);
        fprintf(stderr, "tsbench-exec: cannot run %s: %s\n", argv[i], strerror(errno));
        _exit(127);
    }
    char line[256];
    snprintf(line, sizeof line, "pid %d\n", (int)pid);
    put(fd, line);
    int status;
    struct rusage ru;
    while (wait4(pid, &status, 0, &ru) < 0)
        if (errno != EINTR) {
            fprintf(stderr, "tsbench-exec: wait4: %s\n", strerror(errno));
            return 127;
        }
    double wall = now() - t0;
    snprintf(line, sizeof line, "status %d wall_s %.6f user_s %.6f sys_s %.6f maxrss_kb %ld\n",
             status, wall, (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec * 1e-6,
             (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec * 1e-6, ru.ru_maxrss);
    put(fd, line);
    close(fd);
    return 0;
}
