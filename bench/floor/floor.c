/* libtsb-floor.so: not an allocator to use, a yardstick. It is the cheapest
 * malloc/free that a workload can run on: per-thread LIFO lists, one per
 * 16-byte size, no checks, no statistics, memory never given back. Run a
 * workload under it (tsbench --allocator floor=build/lib/libtsb-floor.so) to
 * see how much of the workload's time is its own loop, which no allocator can
 * take away: a real allocator's ratio to a peer cannot go far below the
 * floor's.
 *
 * Layout: every block has a 16-byte header in front of it. Blocks up to
 * FLOOR_LIST_MAX bytes: header word 0 is the size slot (1..64: 16-byte steps
 * up to 1 KiB, then powers of two), carved from per-thread 4 MiB chunks and
 * kept on the slot's list once freed, by whichever thread frees them. Larger
 * or over-aligned blocks: word 0 is 0, word 1 the start of their own mapping,
 * whose first word is its length.
 *
 * Invariants: a free list only holds blocks of its slot's size; a block is on
 * at most one list (callers never free twice: no check is made).
 */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>

#define FLOOR_EXPORT   __attribute__((visibility("default")))
#define FLOOR_HEADER   16
#define FLOOR_STEP_MAX 1024                 /* 16-byte steps up to here */
#define FLOOR_LIST_MAX ((size_t)512 * 1024) /* then powers of two up to here */
#define FLOOR_SLOTS    (FLOOR_STEP_MAX / 16 + 10 + 1)
#define FLOOR_CHUNK    ((size_t)4 << 20)

typedef struct floor_block {
    struct floor_block *next;
} floor_block_t;

static __thread floor_block_t *floor_lists[FLOOR_SLOTS] __attribute__((tls_model("initial-exec")));
static __thread char *floor_bump __attribute__((tls_model("initial-exec")));
static __thread char *floor_end __attribute__((tls_model("initial-exec")));

static size_t *header_of(void *p) {
    return (size_t *)((char *)p - FLOOR_HEADER);
}

/* Its own mapping, with `align` (a power of two >= 16) for the block. */
static void *floor_map(size_t size, size_t align) {
    if (size > ((size_t)1 << 46) || align > ((size_t)1 << 30)) {
        errno = ENOMEM;
        return NULL;
    }
    size_t length = (size + FLOOR_HEADER + align + 4095) & ~(size_t)4095;
    char *base = mmap(NULL, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED) {
        errno = ENOMEM;
        return NULL;
    }
    *(size_t *)base = length;
    uintptr_t p = ((uintptr_t)base + sizeof(size_t) + FLOOR_HEADER + align - 1) & ~(align - 1);
    header_of((void *)p)[0] = 0;
    header_of((void *)p)[1] = (size_t)base;
    return (void *)p;
}

static size_t slot_size(size_t slot) {
    return slot <= FLOOR_STEP_MAX / 16 ? slot * 16 : (size_t)FLOOR_STEP_MAX << (slot - 64);
}

__attribute__((noinline)) static void *floor_carve(size_t slot) {
    size_t bytes = FLOOR_HEADER + slot_size(slot);
    if (floor_bump == NULL || (size_t)(floor_end - floor_bump) < bytes) {
        char *chunk =
            mmap(NULL, FLOOR_CHUNK, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (chunk == MAP_FAILED) {
            errno = ENOMEM;
            return NULL;
        }
        floor_bump = chunk;
        floor_end = chunk + FLOOR_CHUNK;
    }
    char *p = floor_bump + FLOOR_HEADER;
    floor_bump += bytes;
    header_of(p)[0] = slot;
    return p;
}

FLOOR_EXPORT void *malloc(size_t size) {
    size_t slot = (size + 15) >> 4;
    if (__builtin_expect(size > FLOOR_STEP_MAX, 0)) {
        if (size > FLOOR_LIST_MAX) return floor_map(size, 16);
        slot = 64 + (64 - (size_t)__builtin_clzl((size - 1) >> 10)); /* 2 KiB: 65 */
    }
    if (slot == 0) slot = 1;
    floor_block_t *b = floor_lists[slot];
    if (__builtin_expect(b != NULL, 1)) {
        floor_lists[slot] = b->next;
        return b;
    }
    return floor_carve(slot);
}

FLOOR_EXPORT void free(void *p) {
    if (p == NULL) return;
    size_t *h = header_of(p);
    if (__builtin_expect(h[0] != 0, 1)) {
        floor_block_t *b = p;
        b->next = floor_lists[h[0]];
        floor_lists[h[0]] = b;
        return;
    }
    char *base = (char *)h[1];
    munmap(base, *(size_t *)base);
}

static size_t usable(void *p) {
    size_t *h = header_of(p);
    if (h[0] != 0) return slot_size(h[0]);
    char *base = (char *)h[1];
    return (size_t)(base + *(size_t *)base - (char *)p);
}

FLOOR_EXPORT size_t malloc_usable_size(void *p) {
    return p ? usable(p) : 0;
}

FLOOR_EXPORT void *calloc(size_t n, size_t size) {
    size_t bytes;
    if (__builtin_mul_overflow(n, size, &bytes)) {
        errno = ENOMEM;
        return NULL;
    }
    void *p = malloc(bytes);
    if (p) memset(p, 0, bytes);
    return p;
}

FLOOR_EXPORT void *realloc(void *p, size_t size) {
    if (p == NULL) return malloc(size);
    size_t have = usable(p);
    if (size <= have && size + 16 > have) return p;
    void *q = malloc(size);
    if (q == NULL) return NULL;
    memcpy(q, p, have < size ? have : size);
    free(p);
    return q;
}

static void *floor_aligned(size_t align, size_t size) {
    if (align <= 16) return malloc(size);
    return floor_map(size, align);
}

FLOOR_EXPORT int posix_memalign(void **out, size_t align, size_t size) {
    if (align < sizeof(void *) || (align & (align - 1))) return EINVAL;
    void *p = floor_aligned(align, size);
    if (p == NULL) return ENOMEM;
    *out = p;
    return 0;
}

FLOOR_EXPORT void *aligned_alloc(size_t align, size_t size) {
    if (align == 0 || (align & (align - 1))) {
        errno = EINVAL;
        return NULL;
    }
    return floor_aligned(align, size);
}

FLOOR_EXPORT void *memalign(size_t align, size_t size) {
    return aligned_alloc(align, size);
}

FLOOR_EXPORT void *valloc(size_t size) {
    return floor_aligned(4096, size);
}
