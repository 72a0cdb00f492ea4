/* Which break libtsalloc-classic grows: the seeds' own measurement reads
 * sbrk(0) before and after its threads allocate. Threads allocate blocks of
 * 128..1024 bytes through the seed API and keep them; then, with the blocks
 * still live:
 *   private  (TSALLOC_CLASSIC_BREAK unset or "private") the program break
 *            moved by less than half the data segment the library reports:
 *            the designs grew their private break (glibc's own growth, for
 *            stdio and thread start-up, is far smaller);
 *   sbrk     (TSALLOC_CLASSIC_BREAK=sbrk) it moved by at least the data
 *            segment the library reports.
 * Usage: seed_classic_break lock|nolock threads private|sbrk */
#include "seed_harness.h"

#include <unistd.h>

#define PER_THREAD 8000

static seed_block_t blocks[64][PER_THREAD];

static void *worker(void *arg) {
    int t = (int)(intptr_t)arg;
    uint64_t rng = 650 + (uint64_t)t;
    for (int i = 0; i < PER_THREAD; i++)
        blocks[t][i] = seed_alloc(128 + 32 * ts_rand_range(&rng, 0, 28), ((uint64_t)t << 32) | i);
    return NULL;
}

int main(int argc, char **argv) {
    const char *mode = argc > 3 ? argv[3] : "";
    seed_args(argc, argv);
    if (strcmp(mode, "private") && strcmp(mode, "sbrk")) {
        fprintf(stderr, "usage: %s lock|nolock threads private|sbrk\n", argv[0]);
        return 2;
    }
    printf("seed_classic_break: start\n"); /* stdio's buffer comes from glibc before the threads */
    char *brk0 = sbrk(0);
    unsigned long segment0 = get_data_segment_size();
    seed_run_threads(worker, NULL);
    long moved = (char *)sbrk(0) - brk0;
    unsigned long segment = get_data_segment_size() - segment0;
    size_t n = (size_t)seed_threads * PER_THREAD;
    seed_check_live(&blocks[0][0], n);
    /* Exact: every live block is in the segment. The break moves by the
     * whole segment with sbrk and by 0 otherwise (measured: 18.1 MiB and 0):
     * half the segment tells them apart. */
    CHECK(segment >= n * 128);
    if (!strcmp(mode, "sbrk"))
        CHECK_MSG(moved >= 0 && (unsigned long)moved >= segment,
                  "the break moved by %ld bytes, the data segment is %lu", moved, segment);
    else
        CHECK_MSG(moved < 0 || (unsigned long)moved < segment / 2,
                  "the break moved by %ld bytes, the data segment is %lu", moved, segment);
    for (size_t i = 0; i < n; i++) seed_release(&(&blocks[0][0])[i]);
    SEED_CHECK_HEAP();
    printf("seed_classic_break %s %d threads %s: ok (sbrk(0) moved by %ld bytes, data segment %lu "
           "bytes)\n",
           seed_api->name, seed_threads, mode, moved, segment);
    return 0;
}
