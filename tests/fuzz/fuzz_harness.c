/* The fuzz harness: the input bytes are a program of malloc-family
 * operations over 64 shared slots, run by 1 to 4 threads, checked against a
 * model of what the API promises, and run twice: on the design and on the
 * process's own malloc; the two runs must give the same visible outcomes.
 *
 * Input: byte 0 picks the thread count (1 + b % 4); then each operation is
 * 5 bytes: the operation, the slot (low 6 bits) and thread (high 2 bits),
 * and 3 bytes of size. Missing bytes read as 0, so every input is valid.
 *
 * The model (checked on every run, each allocator on its own):
 * - a block is aligned (16, or the alignment asked), its usable size is at
 *   least the request, and that usable size stays the same while it lives;
 * - live blocks never overlap (over their usable sizes), and the last usable
 *   byte is writable;
 * - calloc's memory reads as zero; realloc keeps the contents up to the
 *   smaller size; every block's pattern is intact when it is next touched;
 * - the allocator's statistics (mallinfo2's arena + hblkhd) cover the live
 *   requested bytes, and the design's own consistency check (fz_api_t's
 *   check, where it has one) finds nothing: at one in 16 of those
 *   operations and at the end of the program;
 * - impossible requests (sizes near SIZE_MAX, calloc overflow) give NULL and
 *   errno = ENOMEM, and a failed realloc leaves the block as it was;
 *   posix_memalign rejects a bad alignment with EINVAL.
 * Differential: each operation's outcome (done, NULL+ENOMEM, EINVAL) goes
 * into a trace; the design's trace must equal the reference's. Usable sizes,
 * addresses and trim's answer legitimately differ and are not compared.
 *
 * Threads: an operation runs on the thread the input names, one at a time,
 * the baton passed with a mutex and condition variable, so a run is a
 * function of the input alone. Blocks move between threads through the
 * shared slots (freed, resized by another thread), and an "exit" operation
 * ends a thread with its blocks still live (the next operation for it starts
 * a new thread). The slots are only touched by the thread holding the baton. */
#include "fuzz_harness.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { SLOTS = 64, MAX_THREADS = 4, EDGE = 256, MAX_OPS = 4096 };

enum { OUT_DONE = 'd', OUT_ENOMEM = 'm', OUT_EINVAL = 'i', OUT_SKIP = '-' };

typedef struct {
    unsigned char *ptr;
    size_t size;   /* requested */
    size_t usable; /* usable size when it was allocated or resized */
    uint64_t tag;
} fz_slot_t;

typedef struct {
    unsigned op, slot, thread;
    size_t a, b; /* op-dependent: size, count, alignment */
} fz_op_t;

static struct {
    const fz_api_t *api;
    fz_slot_t slots[SLOTS];
    char trace[MAX_OPS + 1];
    size_t nops;
    uint64_t tag;
    /* The baton. */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int turn; /* -1: the caller's thread, else the worker that runs `cmd` */
    int quit;
    fz_op_t cmd;
    pthread_t workers[MAX_THREADS];
    int alive[MAX_THREADS];
} fz = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

#define FZ_FAIL(...)                                                                               \
    do {                                                                                           \
        fprintf(stderr, "fuzz[%s] op %zu: ", fz.api->name, fz.nops);                               \
        fprintf(stderr, __VA_ARGS__);                                                              \
        fputc('\n', stderr);                                                                       \
        abort();                                                                                   \
    } while (0)
#define FZ_CHECK(cond, ...)                                                                        \
    do {                                                                                           \
        if (!(cond)) FZ_FAIL(__VA_ARGS__);                                                         \
    } while (0)

static unsigned char pattern(uint64_t tag, size_t i) {
    return (unsigned char)(tag * 131 + i * 7 + (i >> 9));
}

/* The pattern covers the first and the last EDGE bytes of the request: enough
 * to see a block that moved without its contents or overlaps a neighbour,
 * at a cost that does not grow with the size. */
static void fill(fz_slot_t *s) {
    size_t n = s->size;
    for (size_t i = 0; i < n && i < EDGE; i++) s->ptr[i] = pattern(s->tag, i);
    for (size_t i = n > EDGE ? n - EDGE : EDGE; i < n; i++) s->ptr[i] = pattern(s->tag, i);
}

/* Verifies the pattern over the first `upto` bytes of the block. */
static void verify(const fz_slot_t *s, size_t upto, const char *when) {
    size_t n = s->size < upto ? s->size : upto;
    for (size_t i = 0; i < n && i < EDGE; i++)
        FZ_CHECK(s->ptr[i] == pattern(s->tag, i), "%s: block %p (%zu bytes) byte %zu changed", when,
                 (void *)s->ptr, s->size, i);
    for (size_t i = s->size > EDGE ? s->size - EDGE : EDGE; i < n; i++)
        FZ_CHECK(s->ptr[i] == pattern(s->tag, i), "%s: block %p (%zu bytes) byte %zu changed", when,
                 (void *)s->ptr, s->size, i);
}

static void check_live(const fz_slot_t *s, const char *when) {
    verify(s, s->size, when);
    size_t u = fz.api->usable_size(s->ptr);
    FZ_CHECK(u == s->usable, "%s: usable size of %p went from %zu to %zu", when, (void *)s->ptr,
             s->usable, u);
}

/* A new block in slot s: aligned, usable, apart from every live block. */
static void adopt(fz_slot_t *s, void *p, size_t size, size_t align) {
    FZ_CHECK(p != NULL, "allocation of %zu failed", size);
    if (align < fz.api->min_align) align = fz.api->min_align;
    FZ_CHECK((uintptr_t)p % align == 0, "%p is not %zu-aligned", p, align);
    size_t u = fz.api->usable_size(p);
    FZ_CHECK(u >= size, "usable size %zu of %p under the %zu asked", u, p, size);
    uintptr_t lo = (uintptr_t)p, hi = lo + (u ? u : 1);
    for (int i = 0; i < SLOTS; i++) {
        const fz_slot_t *o = &fz.slots[i];
        if (!o->ptr || o == s) continue;
        uintptr_t olo = (uintptr_t)o->ptr, ohi = olo + (o->usable ? o->usable : 1);
        FZ_CHECK(hi <= olo || ohi <= lo, "%p (+%zu) overlaps live %p (+%zu)", p, u, (void *)o->ptr,
                 o->usable);
    }
    s->ptr = p;
    s->size = size;
    s->usable = u;
    s->tag = ++fz.tag;
    if (u > size) ((unsigned char *)p)[u - 1] = 0x5a; /* the API promises all u bytes */
    fill(s);
}

static void release(fz_slot_t *s) {
    if (!s->ptr) return;
    check_live(s, "free");
    fz.api->free(s->ptr);
    s->ptr = NULL;
}

/* Sizes up to 8 MiB, most small: every size-class path of every design
 * (small, medium, page-sized, large, mapped on their own). */
static size_t decode_size(unsigned scale, size_t v) {
    switch (scale % 8) {
    case 0:
        return v % 64;
    case 1:
        return v % 1024;
    case 2:
        return v % 16384;
    case 3:
        return v % 262144;
    case 4:
        return v * 32 % (2u << 20);
    case 5:
        return v * 128 % (8u << 20);
    case 6:
        return v % 4096 + 4096 * (v % 3); /* around page multiples */
    default:
        return v;
    }
}

/* Requests no allocator can satisfy. */
static size_t impossible_size(size_t v) {
    switch (v % 4) {
    case 0:
        return SIZE_MAX - v % 4096;
    case 1:
        return (size_t)PTRDIFF_MAX + 1 + v;
    case 2:
        return SIZE_MAX / 2 + (v << 12);
    default:
        return SIZE_MAX - (v << 20);
    }
}

enum {
    OP_MALLOC,
    OP_CALLOC,
    OP_REALLOC,
    OP_MEMALIGN,
    OP_ALIGNED_ALLOC,
    OP_POSIX_MEMALIGN,
    OP_FREE,
    OP_IMPOSSIBLE,
    OP_REALLOC_EDGE, /* realloc(NULL, n) and realloc(p, 0) */
    OP_TOUCH,        /* write the whole usable size, check usable_size */
    OP_TRIM,
    OP_EXIT, /* the thread ends, its blocks stay live */
    OP_MALLOC2,
    OP_FREE2,
    OP_FOOTPRINT, /* the allocator's statistics cover the live blocks */
    NOPS
};

static void check_design(void) {
    if (!fz.api->check) return;
    const char *why = fz.api->check();
    FZ_CHECK(why == NULL, "the design's consistency check: %s", why);
}

static char run_op(const fz_op_t *op) {
    fz_slot_t *s = &fz.slots[op->slot];
    switch (op->op) {
    case OP_MALLOC:
    case OP_MALLOC2:
        release(s);
        adopt(s, fz.api->malloc(op->a), op->a, 0);
        return OUT_DONE;
    case OP_CALLOC: {
        release(s);
        size_t count = op->b % 8 + 1, each = op->a / count;
        unsigned char *p = fz.api->calloc(count, each);
        FZ_CHECK(p, "calloc(%zu, %zu) failed", count, each);
        size_t n = count * each;
        /* All of a small block, the edges and a sample of a big one. */
        for (size_t i = 0; i < n; i += (i < 8192 || n - i < 8192) ? 1 : 61)
            FZ_CHECK(p[i] == 0, "calloc(%zu, %zu) byte %zu is %d", count, each, i, p[i]);
        adopt(s, p, n, 0);
        return OUT_DONE;
    }
    case OP_REALLOC: {
        if (!s->ptr || op->a == 0) return OUT_SKIP;
        check_live(s, "realloc");
        unsigned char *q = fz.api->realloc(s->ptr, op->a);
        FZ_CHECK(q, "realloc(%p, %zu) failed", (void *)s->ptr, op->a);
        fz_slot_t moved = *s;
        moved.ptr = q;
        verify(&moved, op->a, "realloc kept");
        s->ptr = NULL;
        uint64_t tag = s->tag;
        adopt(s, q, op->a, 0);
        /* adopt gave a new tag: the kept bytes carry the old one. */
        s->tag = tag;
        fill(s);
        return OUT_DONE;
    }
    case OP_MEMALIGN:
    case OP_ALIGNED_ALLOC:
    case OP_POSIX_MEMALIGN: {
        release(s);
        size_t align = (size_t)1 << (op->b % 21); /* 1 .. 1 MiB */
        void *p = NULL;
        if (op->op == OP_MEMALIGN) {
            p = fz.api->memalign(align, op->a);
        } else if (op->op == OP_ALIGNED_ALLOC) {
            /* C11's rule, which ASan enforces: the size a multiple of align. */
            size_t n = (op->a + align - 1) & ~(align - 1);
            adopt(s, fz.api->aligned_alloc(align, n), n, align);
            return OUT_DONE;
        } else {
            /* Every 4th one asks a bad alignment: not a power of two, or
             * below sizeof(void *). */
            if (op->b % 4 == 3) {
                size_t bad = op->b % 8 == 3 ? align * 3 : 4;
                void *untouched = (void *)0x1;
                int rc = fz.api->posix_memalign(&untouched, bad, op->a);
                FZ_CHECK(rc == EINVAL && untouched == (void *)0x1,
                         "posix_memalign(%zu) gave %d, not EINVAL", bad, rc);
                return OUT_EINVAL;
            }
            if (align < sizeof(void *)) align = sizeof(void *);
            int rc = fz.api->posix_memalign(&p, align, op->a);
            FZ_CHECK(rc == 0, "posix_memalign(%zu, %zu) gave %d", align, op->a, rc);
        }
        adopt(s, p, op->a, align);
        return OUT_DONE;
    }
    case OP_FREE:
    case OP_FREE2:
        if (!s->ptr) return OUT_SKIP;
        release(s);
        return OUT_DONE;
    case OP_IMPOSSIBLE: {
        size_t huge = impossible_size(op->a);
        void *p = (void *)0x1;
        errno = 0;
        switch (op->b % 5) {
        case 0:
            p = fz.api->malloc(huge);
            break;
        case 1:
            p = fz.api->calloc(huge / 2 + 2, 3);
            break;
        case 2:
            p = fz.api->memalign((size_t)64 << (op->a % 8), huge);
            break;
        case 3:
            p = fz.api->calloc(huge, 1);
            break;
        default:
            if (!s->ptr) return OUT_SKIP;
            check_live(s, "before realloc to the impossible");
            p = fz.api->realloc(s->ptr, huge);
            FZ_CHECK(p == NULL, "realloc(%p, %zu) did not fail", (void *)s->ptr, huge);
            check_live(s, "after realloc to the impossible");
            break;
        }
        FZ_CHECK(p == NULL && errno == ENOMEM, "request of %zu: %p, errno %d", huge, p, errno);
        return OUT_ENOMEM;
    }
    case OP_REALLOC_EDGE:
        if (s->ptr) { /* realloc(p, 0): frees, returns NULL */
            check_live(s, "realloc to 0");
            void *q = fz.api->realloc(s->ptr, 0);
            FZ_CHECK(q == NULL, "realloc(p, 0) returned %p", q);
            s->ptr = NULL;
            return OUT_DONE;
        }
        adopt(s, fz.api->realloc(NULL, op->a), op->a, 0);
        return OUT_DONE;
    case OP_TOUCH:
        if (!s->ptr) return OUT_SKIP;
        check_live(s, "touch");
        memset(s->ptr, 0xa5, s->usable < (64u << 10) ? s->usable : (64u << 10));
        memset(s->ptr + s->usable - (s->usable < 4096 ? s->usable : 4096), 0xa5,
               s->usable < 4096 ? s->usable : 4096);
        fill(s);
        return OUT_DONE;
    case OP_TRIM:
        fz.api->trim(op->a % 4 == 0 ? 0 : op->a); /* the answer may differ */
        return OUT_DONE;
    case OP_FOOTPRINT: {
        size_t live = 0;
        for (int i = 0; i < SLOTS; i++)
            if (fz.slots[i].ptr) live += fz.slots[i].size;
        size_t have = fz.api->footprint();
        FZ_CHECK(have >= live, "statistics: %zu bytes from the OS, %zu bytes live", have, live);
        if (op->b % 16 == 0) check_design(); /* a walk of the whole heap: not each time */
        return OUT_DONE;
    }
    default:
        return OUT_SKIP;
    }
}

static void *worker(void *arg) {
    int me = (int)(intptr_t)arg;
    pthread_mutex_lock(&fz.mu);
    for (;;) {
        while (fz.turn != me) pthread_cond_wait(&fz.cv, &fz.mu);
        int quit = fz.quit || fz.cmd.op == OP_EXIT;
        if (!quit) fz.trace[fz.nops] = run_op(&fz.cmd);
        fz.turn = -1;
        pthread_cond_broadcast(&fz.cv);
        if (quit) break;
    }
    pthread_mutex_unlock(&fz.mu);
    return NULL;
}

/* Runs op on thread t (0: the caller's), starting it if needed. */
static void dispatch(const fz_op_t *op) {
    int t = (int)op->thread;
    if (t == 0) {
        fz.trace[fz.nops] = op->op == OP_EXIT ? OUT_SKIP : run_op(op);
        return;
    }
    if (!fz.alive[t]) {
        if (op->op == OP_EXIT) {
            fz.trace[fz.nops] = OUT_SKIP;
            return;
        }
        FZ_CHECK(pthread_create(&fz.workers[t], NULL, worker, (void *)(intptr_t)t) == 0,
                 "pthread_create failed");
        fz.alive[t] = 1;
    }
    pthread_mutex_lock(&fz.mu);
    fz.cmd = *op;
    fz.turn = t;
    pthread_cond_broadcast(&fz.cv);
    while (fz.turn != -1) pthread_cond_wait(&fz.cv, &fz.mu);
    pthread_mutex_unlock(&fz.mu);
    if (op->op == OP_EXIT) {
        fz.trace[fz.nops] = OUT_DONE;
        pthread_join(fz.workers[t], NULL);
        fz.alive[t] = 0;
    }
}

static void stop_workers(void) {
    for (int t = 1; t < MAX_THREADS; t++) {
        if (!fz.alive[t]) continue;
        pthread_mutex_lock(&fz.mu);
        fz.quit = 1;
        fz.turn = t;
        pthread_cond_broadcast(&fz.cv);
        while (fz.turn != -1) pthread_cond_wait(&fz.cv, &fz.mu);
        fz.quit = 0;
        pthread_mutex_unlock(&fz.mu);
        pthread_join(fz.workers[t], NULL);
        fz.alive[t] = 0;
    }
}

static uint8_t byte_at(const uint8_t *data, size_t len, size_t i) {
    return i < len ? data[i] : 0;
}

const char *fz_run(const fz_api_t *api, const uint8_t *data, size_t len) {
    fz.api = api;
    fz.nops = 0;
    fz.tag = 0;
    fz.turn = -1;
    memset(fz.slots, 0, sizeof fz.slots);
    unsigned nthreads = len ? data[0] % MAX_THREADS + 1 : 1;
    for (size_t at = 1; at < len && fz.nops < MAX_OPS; at += 5, fz.nops++) {
        fz_op_t op;
        op.op = byte_at(data, len, at) % NOPS;
        uint8_t where = byte_at(data, len, at + 1);
        op.slot = where % SLOTS;
        op.thread = (unsigned)(where >> 6) % nthreads;
        uint8_t scale = byte_at(data, len, at + 2);
        size_t v = byte_at(data, len, at + 3) | (size_t)byte_at(data, len, at + 4) << 8;
        op.a = decode_size(scale, v);
        op.b = (size_t)scale >> 3 | v << 5;
        dispatch(&op);
    }
    stop_workers();
    check_design();
    for (int i = 0; i < SLOTS; i++) release(&fz.slots[i]);
    fz.trace[fz.nops] = '\0';
    return fz.trace;
}

void fz_differential(const fz_api_t *design, const fz_api_t *reference, const uint8_t *data,
                     size_t len) {
    static char design_trace[MAX_OPS + 1];
    strcpy(design_trace, fz_run(design, data, len));
    const char *ref = fz_run(reference, data, len);
    if (strcmp(design_trace, ref) == 0) return;
    size_t i = 0;
    while (design_trace[i] == ref[i]) i++;
    fprintf(stderr, "fuzz: %s and %s differ at op %zu: '%c' against '%c'\n", design->name,
            reference->name, i, design_trace[i], ref[i]);
    abort();
}

static void *ref_memalign(size_t align, size_t size) {
    return memalign(align, size);
}
static int ref_trim(size_t pad) {
    return malloc_trim(pad);
}
static size_t ref_footprint(void) {
#if defined(__SANITIZE_ADDRESS__) /* gcc's ASan */
    return SIZE_MAX;
#endif
#if defined(__has_feature)
#if __has_feature(address_sanitizer)
    return SIZE_MAX; /* ASan's mallinfo2 is all zeros */
#endif
#endif
    struct mallinfo2 mi = mallinfo2();
    return mi.arena + mi.hblkhd;
}

const fz_api_t fz_libc = {"libc",
                          16,
                          malloc,
                          free,
                          calloc,
                          realloc,
                          ref_memalign,
                          aligned_alloc,
                          posix_memalign,
                          malloc_usable_size,
                          ref_trim,
                          ref_footprint,
                          NULL};
