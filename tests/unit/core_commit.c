/* What a process commits: the kernel counts private writable mappings
 * against its commit limit (Committed_AS; enforced with
 * vm.overcommit_memory=2), and tsalloc's address space (a 32 MiB segment
 * map in its bss, reservations of 16 segments) must not count there until
 * it holds memory. Checks the mappings' flags in /proc/self/smaps ("ac":
 * accounted), that reserved segments are inaccessible until handed out, and
 * that a refused commit gives NULL with ENOMEM, nothing lost, and works
 * again once the kernel agrees. With TSALLOC_TEST_STRICT_OVERCOMMIT=1 (as
 * under vm.overcommit_memory=2) the segment map is read-only but for the
 * pages opened for entries, and large blocks grow by copying.
 */
#include <errno.h>
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "core/internal.h"
#include "os/os.h"

#define MAXB 100000
static void *blocks[MAXB];

/* The permissions and VmFlags of the mapping holding `addr`; false if none. */
static bool mapping_of(uintptr_t addr, char perms[8], char *flags, size_t cap) {
    FILE *f = fopen("/proc/self/smaps", "r");
    CHECK(f != NULL);
    char line[512];
    bool inside = false, found = false;
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        char p[8];
        if (sscanf(line, "%lx-%lx %7s", &lo, &hi, p) == 3 &&
            strchr(line, '-') < strchr(line, ' ')) {
            inside = addr >= lo && addr < hi;
            if (inside) memcpy(perms, p, sizeof p);
        } else if (inside && strncmp(line, "VmFlags:", 8) == 0) {
            size_t n = strlen(line + 8);
            if (n >= cap) n = cap - 1;
            memcpy(flags, line + 8, n);
            flags[n] = 0;
            found = true;
            break;
        }
    }
    fclose(f);
    return found;
}

static bool accounted(const char *flags) {
    return strstr(flags, " ac") != NULL;
}

static int overcommit_mode(void) {
    FILE *f = fopen("/proc/sys/vm/overcommit_memory", "r");
    int mode = -1;
    if (f) {
        if (fscanf(f, "%d", &mode) != 1) mode = -1;
        fclose(f);
    }
    return mode;
}

/* The map read-only but where entries are set; a page opens for a range
 * far from everything only when the kernel agrees; large blocks still grow
 * with their contents. */
static void strict_map(uintptr_t seg) {
    char perms[8], flags[512];
    uintptr_t entry = (uintptr_t)&_ts_segmap[seg >> TS_SEGMENT_SHIFT];
    CHECK(mapping_of(entry, perms, flags, sizeof flags));
    CHECK_MSG(strncmp(perms, "rw", 2) == 0, "map page of a segment: %s", perms);
    CHECK(mapping_of((uintptr_t)_ts_segmap, perms, flags, sizeof flags));
    CHECK_MSG(strncmp(perms, "r-", 2) == 0, "map page of the lowest 16 GiB: %s", perms);
    uintptr_t far = (uintptr_t)1 << 45; /* 32 TiB: no mapping of this process */
    uintptr_t far_entry = (uintptr_t)&_ts_segmap[far >> TS_SEGMENT_SHIFT];
    CHECK(mapping_of(far_entry, perms, flags, sizeof flags) && strncmp(perms, "r-", 2) == 0);
    _ts_os_test_fail(TS_OS_FAIL_COMMIT, 0, -1);
    CHECK(!_ts_segmap_prepare(far, TS_SEGMENT_SIZE));
    _ts_os_test_fail(0, 0, 0);
    CHECK(_ts_segmap_prepare(far, TS_SEGMENT_SIZE));
    CHECK(mapping_of(far_entry, perms, flags, sizeof flags) && strncmp(perms, "rw", 2) == 0);
    CHECK(atomic_load(&_ts_segmap[far >> TS_SEGMENT_SHIFT]) == TS_MAP_NONE);
    unsigned char *p = malloc(1 << 20);
    CHECK(p != NULL);
    ts_fill(p, 1 << 20, 7);
    for (size_t size = 2 << 20; size <= (64 << 20); size *= 2) {
        p = realloc(p, size);
        CHECK(p != NULL && malloc_usable_size(p) >= size);
        p[size - 1] = 1;
    }
    CHECK(ts_verify(p, 1 << 20, 7));
    free(p);
}

int main(void) {
    void *first = malloc(100);
    CHECK(first != NULL);
    uintptr_t seg = (uintptr_t)first & ~(uintptr_t)TS_SEGMENT_MASK;
    char perms[8], flags[512];
    int mode = overcommit_mode();

    /* The segment map: mapped again, uncharged (not under mode 2, where the
     * kernel ignores MAP_NORESERVE). */
    CHECK(mapping_of((uintptr_t)_ts_segmap, perms, flags, sizeof flags));
    if (mode != 2) CHECK_MSG(!accounted(flags), "segment map accounted:%s", flags);

    /* A segment in use is readable and writable; the reserved ones after it
     * are address space only. */
    CHECK(mapping_of(seg, perms, flags, sizeof flags));
    CHECK_MSG(strncmp(perms, "rw", 2) == 0, "segment in use: %s", perms);
    if (mode != 2) CHECK_MSG(!accounted(flags), "segment accounted:%s", flags);
    size_t reserved = _ts_segments_reserved();
    CHECK_MSG(reserved > 0, "no reserved segments");
    size_t untouched = 0;
    for (uintptr_t s = seg + TS_SEGMENT_SIZE; s < seg + 17 * TS_SEGMENT_SIZE; s += TS_SEGMENT_SIZE)
        if (mapping_of(s, perms, flags, sizeof flags) && strncmp(perms, "---", 3) == 0) {
            CHECK_MSG(!accounted(flags), "reserved segment accounted:%s", flags);
            untouched++;
        }
    CHECK_MSG(untouched > 0, "no inaccessible reserved segment after %#lx (%zu reserved)",
              (unsigned long)seg, reserved);

    if (_ts_segmap_strict()) strict_map(seg);

    /* The kernel refuses every commit: blocks until the segments in hand are
     * full, then NULL with ENOMEM, and the refused segments are not kept. */
    malloc_trim(0);
    _ts_os_test_fail(TS_OS_FAIL_COMMIT, 0, -1);
    size_t nb = ts_fill_until_null(blocks, MAXB, 4000);
    CHECK_MSG(nb < MAXB && errno == ENOMEM, "%zu blocks, errno %d", nb, errno);
    CHECK(_ts_os_test_failures() > 0);
    errno = 0;
    CHECK(malloc(4000) == NULL && errno == ENOMEM);
    size_t segments = atomic_load(&_ts_stats.segments);

    /* It agrees again: old blocks intact, new segments come. */
    _ts_os_test_fail(0, 0, 0);
    void *more = malloc(4000);
    CHECK(more != NULL);
    CHECK_MSG(atomic_load(&_ts_stats.segments) == segments + 1, "%zu segments, then %zu", segments,
              (size_t)atomic_load(&_ts_stats.segments));
    for (size_t i = 0; i < nb; i++) {
        CHECK_MSG(ts_verify(blocks[i], 4000, i), "block %zu", i);
        free(blocks[i]);
    }
    free(more);
    free(first);
    printf("ok: %zu blocks before the commit was refused; overcommit mode %d%s\n", nb, mode,
           _ts_segmap_strict() ? ", strict map" : "");
    return 0;
}
