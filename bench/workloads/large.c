/* large: big blocks, where the OS does most of the work.
 *   realloc phase: one block grows from 1 MiB by step-pct percent per
 *     realloc up to max-mb; every page written so far must survive each move
 *     (an mremap-based realloc moves nothing, a copying one copies it all);
 *   blocks phase: `blocks` allocations of a random min-mb..max-block-mb MiB
 *     (plus a few odd bytes), at most `live` alive at once, oldest freed
 *     first; every page of each is written and checked before its free.
 * One word per 4 KiB page is written, so time includes the page faults an
 * allocator causes by returning memory and asking again.
 * check = pages verified, a function of the arguments.
 */
#include "tsb.h"

static long opt_max_mb = 200, opt_step_pct = 25, opt_blocks = 16, opt_min_mb = 1,
            opt_max_block_mb = 32, opt_live = 8;

#define PAGE 4096
#define MIB  (1024 * 1024)

static uint64_t page_word(uint64_t salt, size_t page) {
    return tsb_mix(salt ^ (page * 0x9e37u));
}

static void write_pages(char *p, size_t from, size_t to, uint64_t salt) {
    for (size_t off = from / PAGE * PAGE; off + 8 <= to; off += PAGE)
        if (off >= from) *(volatile uint64_t *)(p + off) = page_word(salt, off / PAGE);
}

/* Returns the pages checked; counts mismatches into *bad. */
static uint64_t check_pages(const char *p, size_t to, uint64_t salt, long *bad) {
    uint64_t n = 0;
    for (size_t off = 0; off + 8 <= to; off += PAGE, n++)
        if (*(const volatile uint64_t *)(p + off) != page_word(salt, off / PAGE)) (*bad)++;
    return n;
}

int main(int argc, char **argv) {
    static const tsb_opt_t opts[] = {
        {"max-mb", &opt_max_mb, NULL, "realloc growth target in MiB"},
        {"step-pct", &opt_step_pct, NULL, "growth per realloc in percent"},
        {"blocks", &opt_blocks, NULL, "allocations in the blocks phase"},
        {"min-mb", &opt_min_mb, NULL, "smallest block in MiB"},
        {"max-block-mb", &opt_max_block_mb, NULL, "largest block in MiB"},
        {"live", &opt_live, NULL, "blocks alive at once"},
        {0}};
    tsb_start("large");
    tsb_parse(argc, argv, opts);
    tsb_require(opt_max_mb >= 1 && opt_max_mb <= 65536 && opt_step_pct >= 1,
                "1 <= max-mb, step-pct");
    tsb_require(opt_min_mb >= 1 && opt_max_block_mb >= opt_min_mb && opt_max_block_mb <= 65536,
                "1 <= min-mb <= max-block-mb");
    tsb_require(opt_blocks >= 0 && opt_live >= 1 && opt_live <= 4096, "blocks >= 0, live >= 1");

    uint64_t check = 0;
    long bad = 0, reallocs = 0;
    const uint64_t salt = 0x1a26e;
    double t0 = tsb_now();

    /* realloc phase */
    size_t size = MIB, target = (size_t)opt_max_mb * MIB;
    char *p = malloc(size);
    if (!p) tsb_fail("malloc(%zu) returned NULL", size);
    write_pages(p, 0, size, salt);
    while (size < target) {
        size_t grown = size + size / 100 * (size_t)opt_step_pct;
        if (grown > target) grown = target;
        char *q = realloc(p, grown);
        if (!q) tsb_fail("realloc(%zu) returned NULL", grown);
        p = q;
        check += check_pages(p, size, salt, &bad);
        if (bad) tsb_fail("realloc to %zu bytes lost the block's contents", grown);
        write_pages(p, size, grown, salt);
        size = grown;
        reallocs++;
    }
    check += check_pages(p, size, salt, &bad);
    free(p);
    double t1 = tsb_now();

    /* blocks phase: a FIFO window of `live` blocks */
    char **ring = tsb_pages(sizeof(char *) * (size_t)opt_live);
    size_t *ring_size = tsb_pages(sizeof(size_t) * (size_t)opt_live);
    uint64_t rng = tsb_mix(0xb10c5);
    for (long k = 0; k < opt_blocks + opt_live; k++) {
        long slot = k % opt_live;
        if (ring[slot]) {
            check +=
                check_pages(ring[slot], ring_size[slot], salt + (uint64_t)(k - opt_live), &bad);
            if (bad) tsb_fail("block %ld of %zu bytes corrupted", k - opt_live, ring_size[slot]);
            free(ring[slot]);
            ring[slot] = NULL;
        }
        if (k >= opt_blocks) continue;
        size_t n = tsb_range(&rng, (size_t)opt_min_mb * MIB, (size_t)opt_max_block_mb * MIB) +
                   tsb_range(&rng, 0, 64);
        ring[slot] = malloc(n);
        if (!ring[slot]) tsb_fail("malloc(%zu) returned NULL", n);
        ring_size[slot] = n;
        write_pages(ring[slot], 0, n, salt + (uint64_t)k);
    }
    double t2 = tsb_now();
    tsb_kv("reallocs", "%ld", reallocs);
    tsb_kv("realloc_s", "%.6f", t1 - t0);
    tsb_kv("blocks_s", "%.6f", t2 - t1);
    return tsb_ok(t2 - t0, 1, check);
}
