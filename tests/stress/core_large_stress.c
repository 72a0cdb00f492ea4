/* Large blocks (512 KiB - 8 MiB) from several threads at once: malloc,
 * calloc, aligned_alloc, realloc (in place, moved, shrunk) and free, blocks
 * handed between threads, malloc_trim. Every block describes itself (size,
 * tag) and is checked before each realloc and free.
 *
 * The test also defines mmap, munmap and mremap, so the allocator's calls
 * come here: each one that unmaps, moves onto, or newly maps a range that
 * overlaps a block the test holds live aborts at once. That is the failure
 * this guards against (a realloc race left a live block with a hole in it;
 * docs/core/large-blocks.md, "Moves"), caught where it happens rather than at
 * the next touch of the hole.
 *
 * Usage: core_large_stress [threads] [operations per thread]
 */
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "check.h"

#define MAX_THREADS 16
#define SLOTS       12 /* blocks a thread holds */
#define EXCHANGE    8  /* blocks in transit between threads */
#define STRIDE      512
#define MAGIC       0x6c61726765626c6bull
#define MIN_SIZE    (512 * 1024 + 1)
#define MAX_SIZE    ((size_t)8 << 20)

/* ---- the ranges the test holds live, and the mapping calls ---- */

static _Atomic uintptr_t live_lo[MAX_THREADS * SLOTS], live_hi[MAX_THREADS * SLOTS];
static _Atomic int watching;

static void overlap_check(const char *what, uintptr_t a, size_t n) {
    if (!atomic_load_explicit(&watching, memory_order_relaxed)) return;
    for (int i = 0; i < MAX_THREADS * SLOTS; i++) {
        uintptr_t lo = atomic_load(&live_lo[i]), hi = atomic_load(&live_hi[i]);
        if (lo && a < hi && lo < a + n) {
            char msg[200];
            int k = snprintf(msg, sizeof msg, "%s [%#lx, %#lx) overlaps live block [%#lx, %#lx)\n",
                             what, (unsigned long)a, (unsigned long)(a + n), (unsigned long)lo,
                             (unsigned long)hi);
            (void)!write(2, msg, (size_t)k);
            abort();
        }
    }
}

void *mremap(void *old, size_t old_size, size_t new_size, int flags, ...) {
    void *target = NULL;
    if (flags & MREMAP_FIXED) {
        va_list ap;
        va_start(ap, flags);
        target = va_arg(ap, void *);
        va_end(ap);
        overlap_check("mremap target", (uintptr_t)target, new_size);
    }
    if (new_size < old_size)
        overlap_check("mremap's cut tail", (uintptr_t)old + new_size, old_size - new_size);
    long r = syscall(SYS_mremap, old, old_size, new_size, flags, target);
    if (r < 0 && r > -4096) {
        errno = (int)-r;
        return MAP_FAILED;
    }
    if ((uintptr_t)r != (uintptr_t)old) overlap_check("mremap's new place", (uintptr_t)r, new_size);
    return (void *)r;
}

int munmap(void *addr, size_t size) {
    overlap_check("munmap", (uintptr_t)addr, size);
    long r = syscall(SYS_munmap, addr, size);
    if (r < 0) {
        errno = (int)-r;
        return -1;
    }
    return 0;
}

void *mmap(void *addr, size_t size, int prot, int flags, int fd, off_t offset) {
    long r = syscall(SYS_mmap, addr, size, prot, flags, fd, offset);
    if (r < 0 && r > -4096) {
        errno = (int)-r;
        return MAP_FAILED;
    }
    overlap_check("mmap", (uintptr_t)r, size);
    return (void *)r;
}

/* ---- self-describing blocks ---- */

typedef struct {
    uint64_t magic, size, tag, pad;
} header_t;

static void fill(unsigned char *p, size_t n, uint64_t tag) {
    header_t *h = (header_t *)p;
    h->magic = MAGIC;
    h->size = n;
    h->tag = tag;
    for (size_t o = STRIDE; o + 8 <= n; o += STRIDE) memcpy(p + o, &(uint64_t){tag ^ o}, 8);
    memcpy(p + n - 8, &tag, 8);
}

/* The first `upto` bytes of a block filled by fill() are intact. */
static void verify(const unsigned char *p, size_t upto, const char *when) {
    const header_t *h = (const header_t *)p;
    CHECK_MSG(h->magic == MAGIC, "%s: block %p lost its header", when, (const void *)p);
    size_t n = h->size;
    uint64_t tag = h->tag, v;
    if (upto > n) upto = n;
    for (size_t o = STRIDE; o + 8 <= upto && o + 8 <= n - 8; o += STRIDE) {
        memcpy(&v, p + o, 8);
        CHECK_MSG(v == (tag ^ o), "%s: block %p (%zu B) changed at %zu", when, (const void *)p, n,
                  o);
    }
    if (upto == n) {
        memcpy(&v, p + n - 8, 8);
        CHECK_MSG(v == tag, "%s: block %p lost its last word", when, (const void *)p);
    }
}

static size_t block_size(uint64_t *rng) {
    uint64_t r = ts_rand(rng);
    size_t n;
    switch (r & 3) {
    case 0:
        n = MIN_SIZE + (size_t)(r >> 8) % ((size_t)1 << 20);
        break; /* near the threshold */
    case 1:
        n = ((size_t)(r >> 8) % (MAX_SIZE / 4096) + 128) * 4096;
        break; /* page multiples */
    default:
        n = MIN_SIZE + (size_t)(r >> 8) % (MAX_SIZE - MIN_SIZE);
    }
    return n < MIN_SIZE ? MIN_SIZE : n > MAX_SIZE ? MAX_SIZE : n;
}

/* ---- the threads ---- */

static _Atomic uintptr_t exchange[EXCHANGE];
static long ops_per_thread = 3000;

static void hold(int slot, const void *p, size_t n) {
    overlap_check("a new block", (uintptr_t)p, n);
    atomic_store(&live_hi[slot], (uintptr_t)p + n);
    atomic_store(&live_lo[slot], (uintptr_t)p);
}
static void release(int slot) {
    atomic_store(&live_lo[slot], 0);
    atomic_store(&live_hi[slot], 0);
}

static void *worker(void *arg) {
    int id = (int)(intptr_t)arg;
    uint64_t rng = 0x9e3779b97f4a7c15ull * (uint64_t)(id + 1), tag = (uint64_t)id << 48;
    unsigned char *blocks[SLOTS] = {0};
    for (long op = 0; op < ops_per_thread; op++) {
        int i = (int)(ts_rand(&rng) % SLOTS), slot = id * SLOTS + i;
        unsigned r = (unsigned)(ts_rand(&rng) % 100);
        unsigned char *p = blocks[i];
        if (!p) {
            size_t n = block_size(&rng);
            if (r < 15) {
                p = calloc(1, n);
                CHECK(p != NULL);
                for (size_t o = 0; o + 8 <= n; o += 4096)
                    CHECK_MSG(!*(uint64_t *)(p + o), "calloc");
                CHECK(!p[n - 1]);
            } else if (r < 22) {
                size_t align = (size_t)1 << (13 + ts_rand(&rng) % 10); /* 8 KiB - 4 MiB */
                p = aligned_alloc(align, n);
                CHECK(p != NULL && (uintptr_t)p % align == 0);
            } else {
                p = malloc(n);
                CHECK(p != NULL);
            }
            fill(p, n, ++tag);
            blocks[i] = p;
            hold(slot, p, n);
        } else if (r < 50) {
            size_t old = ((header_t *)p)->size, n = block_size(&rng);
            verify(p, old, "before realloc");
            release(slot);
            unsigned char *q = realloc(p, n);
            CHECK(q != NULL);
            verify(q, n < old ? n : old, "after realloc");
            fill(q, n, ++tag);
            blocks[i] = q;
            hold(slot, q, n);
        } else if (r < 85) {
            verify(p, SIZE_MAX, "before free");
            release(slot);
            free(p);
            blocks[i] = NULL;
        } else if (r < 99) { /* trade it for whatever another thread left */
            verify(p, SIZE_MAX, "before the hand-over");
            release(slot);
            unsigned char *got =
                (unsigned char *)atomic_exchange(&exchange[ts_rand(&rng) % EXCHANGE], (uintptr_t)p);
            blocks[i] = got;
            if (got) {
                verify(got, SIZE_MAX, "after the hand-over");
                hold(slot, got, ((header_t *)got)->size);
            }
        } else {
            malloc_trim(0);
        }
    }
    for (int i = 0; i < SLOTS; i++) {
        if (!blocks[i]) continue;
        verify(blocks[i], SIZE_MAX, "at the end");
        release(id * SLOTS + i);
        free(blocks[i]);
    }
    return NULL;
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 4;
    if (argc > 2) ops_per_thread = atol(argv[2]);
    CHECK(threads >= 1 && threads <= MAX_THREADS && ops_per_thread >= 1);
    free(malloc(1 << 20));
    atomic_store(&watching, 1);
    pthread_t t[MAX_THREADS];
    for (int i = 0; i < threads; i++)
        CHECK(pthread_create(&t[i], NULL, worker, (void *)(intptr_t)i) == 0);
    for (int i = 0; i < threads; i++) CHECK(pthread_join(t[i], NULL) == 0);
    for (int x = 0; x < EXCHANGE; x++) {
        unsigned char *g = (unsigned char *)atomic_exchange(&exchange[x], 0);
        if (!g) continue;
        verify(g, SIZE_MAX, "left in the exchange");
        free(g);
    }
    atomic_store(&watching, 0);
    printf("ok: %d threads, %ld operations each\n", threads, ops_per_thread);
    return 0;
}
