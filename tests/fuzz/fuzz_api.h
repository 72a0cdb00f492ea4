/* The allocator a fuzz run drives: the malloc family as function pointers,
 * so the one harness (fuzz_harness.h) runs the same program on a design's
 * entry points (fuzz_design.c) and on the process's own malloc (glibc, or
 * ASan's in a sanitized fuzz target) for the differential comparison. */
#ifndef TS_FUZZ_API_H
#define TS_FUZZ_API_H

#include <stddef.h>

typedef struct fz_api {
    const char *name;
    size_t min_align; /* what malloc promises: 16 on x86-64 */
    void *(*malloc)(size_t size);
    void (*free)(void *ptr);
    void *(*calloc)(size_t count, size_t size);
    void *(*realloc)(void *ptr, size_t size);
    void *(*memalign)(size_t align, size_t size);
    void *(*aligned_alloc)(size_t align, size_t size);
    int (*posix_memalign)(void **out, size_t align, size_t size);
    size_t (*usable_size)(void *ptr);
    int (*trim)(size_t pad);
    size_t (*footprint)(void); /* memory from the OS: mallinfo2's arena + hblkhd */
    /* The design's own consistency check, where it has one: NULL when its
     * structures hold every invariant, else what is broken. */
    const char *(*check)(void);
} fz_api_t;

/* The design the program is linked with (fuzz_design.c, one per design). */
extern const fz_api_t fz_design;

#endif
