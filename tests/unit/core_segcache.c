/* Wholly free segments keep their memory resident for the purge delay
 * (src/core/segment.c), wherever they wait:
 * - laid out again for pages of another kind, a segment keeps the old
 *   layout's dirty pages resident: blocks of a big class written over
 *   memory that small blocks wrote and freed take no page faults, and
 *   nothing is purged;
 * - over TSALLOC_SEGMENT_CACHE, a segment with dirty pages stays cached
 *   until they are purged, and the purge pass then unmaps it.
 * Run with a purge delay of an hour and no purge thread (core.cmake), so
 * that no purge comes before the test asks for one.
 */
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "check.h"
#include "core/internal.h"

#define SMALL   ((size_t)1000)       /* a small-page class */
#define NSMALL  20000                /* about 5 segments of small pages */
#define BIG     ((size_t)400 * 1024) /* a big class: 10 blocks a segment */
#define NBIG    20                   /* 2 segments of big pages */
#define LIMIT   1                    /* TSALLOC_SEGMENT_CACHE (core.cmake) */
#define OSPAGES ((size_t)NBIG * BIG / 4096)

static void *small[NSMALL], *big[NBIG];

static long minor_faults(void) {
    struct rusage ru;
    CHECK(getrusage(RUSAGE_SELF, &ru) == 0);
    return ru.ru_minflt;
}

static size_t cached(void) {
    return atomic_load(&_ts_stats.segments_cached);
}

int main(void) {
    for (size_t i = 0; i < NSMALL; i++) {
        small[i] = malloc(SMALL);
        CHECK(small[i] != NULL);
        memset(small[i], 0x5a, SMALL);
    }
    for (size_t i = 0; i < NSMALL; i++) free(small[i]);
    /* One segment is the heap's spare; the others wait in the cache, dirty,
     * past its limit. */
    CHECK_MSG(cached() > LIMIT, "%zu segments cached", cached());

    uint64_t purged = atomic_load(&_ts_stats.purged);
    long faults = minor_faults();
    for (size_t i = 0; i < NBIG; i++) {
        big[i] = malloc(BIG);
        CHECK(big[i] != NULL);
        memset(big[i], 0xa5, BIG);
    }
    faults = minor_faults() - faults;
    CHECK_MSG(atomic_load(&_ts_stats.purged) == purged, "%llu bytes purged for the new layout",
              (unsigned long long)(atomic_load(&_ts_stats.purged) - purged));
    CHECK_MSG((size_t)faults < OSPAGES / 8, "%ld page faults writing %zu OS pages", faults,
              (size_t)OSPAGES);
    for (size_t i = 0; i < NBIG; i++) free(big[i]);

    /* Purged, the segments over the limit go. */
    size_t segments = atomic_load(&_ts_stats.segments);
    _ts_purge_run(_ts_os_now_ns(), true);
    CHECK_MSG(cached() <= LIMIT, "%zu segments cached after the purge", cached());
    CHECK(atomic_load(&_ts_stats.segments) < segments);
    return 0;
}
