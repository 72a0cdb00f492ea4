/* A library prof_program loads with dlopen (mode dlopen): its allocations
 * must be profiled and named like the program's own. */
#include <stdlib.h>
#include <string.h>

static void *kept[64];

__attribute__((visibility("default"), noinline)) size_t plugin_alloc(void) {
    for (int i = 0; i < 64; i++) {
        kept[i] = malloc(16384);
        if (kept[i]) memset(kept[i], 7, 64);
    }
    return 64 * 16384;
}
