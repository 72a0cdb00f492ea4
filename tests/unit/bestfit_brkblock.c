/* Under LD_PRELOAD of bestfit or bestfit-tls: a mapping 1 MiB above the
 * program break stops it from growing, as a library's mmap can. malloc must
 * go on from mapped memory, as glibc's does, instead of failing with ENOMEM
 * after the first megabyte; contents intact, freed memory reused. */
#include "check.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#define BLOCKS 16000 /* of 1000 bytes: 16 MB, well past the blocker */

static char *blk[BLOCKS];

/* The process's mapped size in pages (first field of /proc/self/statm). */
static unsigned long vm_pages(void) {
    char buf[256];
    CHECK(ts_read_file("/proc/self/statm", buf, sizeof buf) > 0);
    return strtoul(buf, NULL, 10);
}

int main(void) {
    ts_require_preloaded();
    free(malloc(10));
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t brk = (uintptr_t)sbrk(0);
    uintptr_t at = ((brk + page - 1) & ~(page - 1)) + (1u << 20);
    void *blocker =
        mmap((void *)at, page, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    CHECK_MSG(blocker == (void *)at, "could not map the blocker at %#lx", (unsigned long)at);
    unsigned long vm_after[2];
    for (int round = 0; round < 2; round++) {
        for (int i = 0; i < BLOCKS; i++) {
            blk[i] = malloc(1000);
            CHECK_MSG(blk[i] != NULL, "round %d: malloc failed after %d KB", round,
                      i * 1000 / 1024);
            ts_fill(blk[i], 1000, (uint64_t)i);
        }
        CHECK((uintptr_t)sbrk(0) <= at); /* the blocker stayed */
        vm_after[round] = vm_pages();
        for (int i = 0; i < BLOCKS; i++) {
            CHECK(ts_verify(blk[i], 1000, (uint64_t)i));
            free(blk[i]);
        }
    }
    /* Round 2 ran in the memory round 1 freed: no more than 1 MiB was mapped
     * (1 page measured, 256 allowed; round 1's blocks mapped anew would be
     * far more). */
    CHECK_MSG(vm_after[1] <= vm_after[0] + (1u << 20) / page, "mapped %lu pages, then %lu",
              vm_after[0], vm_after[1]);
    printf("bestfit_brkblock: ok (break %#lx, blocker %#lx)\n", (unsigned long)brk,
           (unsigned long)at);
    return 0;
}
