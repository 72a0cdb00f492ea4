/* Transparent huge pages (src/core/segpurge.c): a heap past 2 MiB resident asks
 * for huge pages in the 2 MiB halves of segments it enters untouched; light
 * heaps never do. Checks:
 *   - a growing heap asks (huge_halves), and where the kernel offers THP the
 *     memory is in huge pages (AnonHugePages of its mappings), unless the
 *     kernel says it found no free 2 MiB page (thp_fault_fallback);
 *   - a forced purge while every block is live gives nothing of them back
 *     (the pages the request made resident are free ones only) and every
 *     block keeps its contents;
 *   - freeing most blocks and purging splits the halves (huge_splits), marks
 *     them no-huge (VmFlags nh, so khugepaged cannot fill them again), RSS
 *     falls, and the live blocks keep their contents;
 *   - sixteen threads each touching one block of 40 classes ask for none;
 *   - ts_option_set("huge_pages", 0) stops the requests.
 */
#include <fcntl.h>
#include <malloc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "core/internal.h"
#include "tsalloc.h"

#define BLOCK  256
#define BLOCKS (48 * 1024) /* 12 MiB */
static char *blocks[BLOCKS];

static int thp_offered(void) {
    char buf[256] = {0};
    int fd = open("/sys/kernel/mm/transparent_hugepage/enabled", O_RDONLY);
    if (fd < 0) return 0; /* a kernel without THP */
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    return n > 0 && strstr(buf, "[never]") == NULL;
}

/* A counter of /proc/vmstat (0 if absent). */
static char vm[1 << 16];
static size_t vmstat(const char *name) {
    CHECK(ts_read_file("/proc/vmstat", vm, sizeof vm) > 0);
    char *p = strstr(vm, name);
    return p ? (size_t)strtoull(p + strlen(name), NULL, 10) : 0;
}

/* Sums a field of /proc/self/smaps over the mappings holding tsalloc's
 * segments (those of blocks[]); with want_flag, counts the 2 MiB halves
 * among them whose VmFlags carry it instead. */
static char smaps[8 << 20];
static size_t smaps_sum(const char *field, const char *want_flag) {
    CHECK(ts_read_file("/proc/self/smaps", smaps, sizeof smaps) > 0);
    size_t total = 0;
    uintptr_t lo = 0, hi = 0;
    int ours = 0;
    for (char *line = smaps; *line;) {
        char *nl = strchr(line, '\n');
        if (nl) *nl = 0;
        unsigned long long a, b;
        if (sscanf(line, "%llx-%llx ", &a, &b) == 2 && strchr(line, '-') < strchr(line, ' ')) {
            lo = (uintptr_t)a;
            hi = (uintptr_t)b;
            ours = 0;
            for (size_t i = 0; i < BLOCKS && !ours; i += 64)
                ours = blocks[i] && (uintptr_t)blocks[i] >= lo && (uintptr_t)blocks[i] < hi;
        } else if (ours && !want_flag && !strncmp(line, field, strlen(field))) {
            total += strtoull(line + strlen(field), NULL, 10) * 1024;
        } else if (ours && want_flag && !strncmp(line, "VmFlags:", 8) && strstr(line, want_flag)) {
            total += (hi - lo) / (TS_SEGMENT_SIZE / 2);
        }
        if (!nl) break;
        line = nl + 1;
    }
    return total;
}

static void *light_thread(void *arg) {
    (void)arg;
    for (size_t n = 16; n <= 16 * 40; n += 16) free(malloc(n));
    return NULL;
}

int main(void) {
    CHECK(ts_option_get("huge_pages") == 0); /* off by default: docs/core/huge-pages.md */
    CHECK(ts_option_set("huge_pages", 1));
    size_t asked = atomic_load(&_ts_stats.huge_halves);

    /* A growing heap asks. */
    size_t fallbacks = vmstat("thp_fault_fallback ");
    for (size_t i = 0; i < BLOCKS; i++) {
        blocks[i] = malloc(BLOCK);
        CHECK(blocks[i] != NULL);
        ts_fill(blocks[i], BLOCK, i);
    }
    size_t asked_now = atomic_load(&_ts_stats.huge_halves);
    /* Fresh segments (nothing was cached yet): both halves of each after the
     * first, whose second half the heap enters just short of 2 MiB: 5 for
     * the 12 MiB here (measured). 2 is under half that; a heap that never
     * asks gives 0. */
    CHECK_MSG(asked_now >= asked + 2, "asked for %zu halves", asked_now - asked);
    if (thp_offered()) /* unless the kernel found no free 2 MiB page */
        CHECK_MSG(smaps_sum("AnonHugePages:", NULL) >= ((size_t)2 << 20) ||
                      vmstat("thp_fault_fallback ") > fallbacks,
                  "huge: %zu B", smaps_sum("AnonHugePages:", NULL));
    else
        printf("THP is off in this kernel: only the bookkeeping is checked\n");

    /* A forced purge with every block live: contents stay. */
    malloc_trim(0);
    for (size_t i = 0; i < BLOCKS; i++) CHECK(ts_verify(blocks[i], BLOCK, i));

    /* Free seven eighths, in runs of whole pages, so that every half keeps
     * some live blocks; purge: halves split. */
    size_t rss_full = ts_rss_bytes(), split = atomic_load(&_ts_stats.huge_splits);
    for (size_t i = 0; i < BLOCKS; i++)
        if ((i / 256) % 8 != 0) {
            free(blocks[i]);
            blocks[i] = NULL;
        }
    malloc_trim(0);
    CHECK(atomic_load(&_ts_stats.huge_splits) > split);
    /* 10.5 MiB are freed and RSS falls 9.2 MiB (measured), over 2x the 4
     * MiB asked for; halves left whole keep every freed page resident. */
    CHECK_MSG(ts_rss_bytes() + ((size_t)4 << 20) < rss_full, "RSS %zu -> %zu", rss_full,
              ts_rss_bytes());
    if (thp_offered()) CHECK(smaps_sum(NULL, " nh") >= 1);
    for (size_t i = 0; i < BLOCKS; i++)
        if (blocks[i]) CHECK(ts_verify(blocks[i], BLOCK, i));

    /* Light heaps: no requests. */
    asked_now = atomic_load(&_ts_stats.huge_halves);
    pthread_t t[16];
    for (int i = 0; i < 16; i++) CHECK(pthread_create(&t[i], NULL, light_thread, NULL) == 0);
    for (int i = 0; i < 16; i++) CHECK(pthread_join(t[i], NULL) == 0);
    CHECK_EQ(atomic_load(&_ts_stats.huge_halves), asked_now);

    /* Switched off: a heap that grows asks for nothing. */
    CHECK(ts_option_set("huge_pages", 0));
    asked_now = atomic_load(&_ts_stats.huge_halves);
    static char *more[BLOCKS];
    for (size_t i = 0; i < BLOCKS; i++) CHECK((more[i] = malloc(BLOCK)) != NULL);
    CHECK_EQ(atomic_load(&_ts_stats.huge_halves), asked_now);
    for (size_t i = 0; i < BLOCKS; i++) free(more[i]);
    for (size_t i = 0; i < BLOCKS; i++) free(blocks[i]);
    printf("ok\n");
    return 0;
}
