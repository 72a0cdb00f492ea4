/* The purge helper thread is started only when it is worth a thread: a
 * single-threaded program with a small heap stays single-threaded (some
 * system calls, unshare(CLONE_NEWUSER) and setns() into a mount namespace,
 * refuse multithreaded callers); past TS_PURGE_THREAD_MIN_BYTES, or once a
 * second thread allocates, it runs, so that freed memory goes back without
 * further allocator calls.
 */
#include <fcntl.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "core/internal.h"

static int threads(void) {
    char buf[4096];
    int fd = open("/proc/self/status", O_RDONLY);
    CHECK(fd >= 0);
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    CHECK(n > 0);
    buf[n] = 0;
    char *line = strstr(buf, "\nThreads:");
    CHECK(line != NULL);
    return atoi(line + strlen("\nThreads:"));
}

int main(void) {
    /* A small program: many small blocks, medium and big-page ones, one
     * large block, all freed, some twice over. */
    for (int round = 0; round < 3; round++) {
        static void *p[3000];
        for (int i = 0; i < 3000; i++) p[i] = malloc((size_t)(i % 700) + 1);
        void *medium = malloc(40000), *big = malloc(300000), *large = malloc(1u << 20);
        CHECK(medium && big && large);
        for (int i = 0; i < 3000; i++) free(p[i]);
        free(medium);
        free(big);
        free(large);
    }
    CHECK(atomic_load(&_ts_stats.committed) < TS_PURGE_THREAD_MIN_BYTES);
    CHECK_EQ(threads(), 1);

    /* A bigger heap: the helper starts (at the allocation that crossed). */
    enum { N = 12 };
    void *blocks[N];
    for (int i = 0; i < N; i++) {
        blocks[i] = malloc(1u << 20);
        CHECK(blocks[i] != NULL);
        memset(blocks[i], 1, 1u << 20);
    }
    CHECK(atomic_load(&_ts_stats.committed) >= TS_PURGE_THREAD_MIN_BYTES);
    CHECK_EQ(threads(), 2);
    for (int i = 0; i < N; i++) free(blocks[i]);
    return 0;
}
