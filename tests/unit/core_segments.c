/* Segment reservations (src/core/registry.c): segments come out of one
 * aligned mapping of several at a time. Checks that more segments than one
 * reservation holds are each 4 MiB aligned, distinct and usable, and that a
 * refused reservation falls back to mapping a single segment.
 *
 * Also the segment-lock gate of the fork handlers, step by step: while it
 * is closed no segment lock can be taken (a taker lets it go at once), the
 * prepare handler writes no segment lock, the parent's handler opens it,
 * and the child's frees a lock found held.
 */
#include <errno.h>
#include <stdint.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "check.h"
#include "core/internal.h"
#include "os/os.h"

#define BLOCK ((size_t)400 * 1024) /* a big-page class: 10 blocks per segment */
#define MAXB  1000
static void *blocks[MAXB];

static void check_segment_of(const void *p) {
    uintptr_t seg = (uintptr_t)p & ~(uintptr_t)TS_SEGMENT_MASK;
    CHECK(seg % TS_SEGMENT_SIZE == 0);
    CHECK_EQ(atomic_load(&_ts_segmap[seg >> TS_SEGMENT_SHIFT]), TS_SHIFT_BIG);
}

static void fork_gate(void) {
    void *p = malloc(100);
    ts_segment_t *seg = ts_segment_of(p);
    _ts_registry_atfork_prepare();
    CHECK(atomic_load(&_ts_seg_gate) == 1);
    CHECK(atomic_load(&seg->lock.held) == 0); /* not written: no copy-on-write */
    CHECK(!ts_seg_trylock(seg));              /* the gate turns a taker away ... */
    CHECK(atomic_load(&seg->lock.held) == 0); /* ... and it let the lock go */
    _ts_registry_atfork_parent();
    CHECK(atomic_load(&_ts_seg_gate) == 0);
    CHECK(ts_seg_trylock(seg));
    ts_seg_unlock(seg);
    /* A fork child finds a taker's lock held (the taker is not there). */
    _ts_registry_atfork_prepare();
    atomic_store(&seg->lock.held, 1);
    _ts_registry_atfork_child();
    CHECK(atomic_load(&seg->lock.held) == 0 && atomic_load(&_ts_seg_gate) == 0);
    ts_seg_lock(seg);
    ts_seg_unlock(seg);
    free(p);
}

int main(void) {
    free(malloc(1));
    fork_gate();
    size_t segments_before = atomic_load(&_ts_stats.segments);
    /* Use up the current reservation and more than a whole second one. */
    size_t n = 0;
    while (n < MAXB && atomic_load(&_ts_stats.segments) < segments_before + 40) {
        blocks[n] = malloc(BLOCK);
        CHECK(blocks[n] != NULL);
        ts_fill(blocks[n], BLOCK, n);
        check_segment_of(blocks[n]);
        n++;
    }
    CHECK(atomic_load(&_ts_stats.segments) >= segments_before + 40);
    for (size_t i = 0; i < n; i++) CHECK(ts_verify(blocks[i], BLOCK, i));

    /* Empty the reservation, then refuse the next mmap (the new reservation):
     * the segment after it must still come, mapped alone. */
    while (n < MAXB && _ts_segments_reserved() > 0) {
        blocks[n] = malloc(BLOCK);
        CHECK(blocks[n] != NULL);
        n++;
    }
    CHECK_EQ(_ts_segments_reserved(), 0);
    size_t segments = atomic_load(&_ts_stats.segments);
    long failures = _ts_os_test_failures();
    _ts_os_test_fail(TS_OS_FAIL_MMAP, 0, 1);
    while (n < MAXB && atomic_load(&_ts_stats.segments) == segments) {
        errno = 0;
        blocks[n] = malloc(BLOCK);
        CHECK_MSG(blocks[n] != NULL, "errno %d", errno);
        ts_fill(blocks[n], BLOCK, n);
        check_segment_of(blocks[n]);
        n++;
    }
    _ts_os_test_fail(0, 0, 0);
    CHECK_EQ(_ts_os_test_failures() - failures, 1);           /* the reservation was refused */
    CHECK_EQ(atomic_load(&_ts_stats.segments), segments + 1); /* and one segment came alone */
    CHECK_EQ(_ts_segments_reserved(), 0);

    static ts_range_t ranges[MAXB];
    for (size_t i = 0; i < n; i++) ranges[i] = (ts_range_t){(uintptr_t)blocks[i], BLOCK};
    CHECK_EQ(ts_find_overlap(ranges, n), -1);
    for (size_t i = 0; i < n; i++) free(blocks[i]);
    return 0;
}
