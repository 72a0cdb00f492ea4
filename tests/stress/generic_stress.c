/* Multi-threaded stress for every design: random sizes from tiny to a few
 * MiB, malloc/calloc/realloc/posix_memalign, blocks handed between threads
 * (so most frees happen in a thread other than the allocating one), and
 * threads that exit leaving their blocks behind for the next round's threads.
 * After each round every live block's contents are verified and no two live
 * blocks may overlap.
 *
 * usage: generic_stress [threads=4] [rounds=5] [ops per thread per round=20000]
 *                       [max size=4194304]
 */
#include "check.h"

#include <errno.h>
#include <malloc.h>
#include <pthread.h>

typedef struct {
    unsigned char *ptr;
    size_t size;
    uint64_t tag;
} block_t;

enum { SLOTS_PER_THREAD = 512, EXCHANGE_SLOTS = 1024, EXCHANGE_LOCKS = 16 };

static int nthreads = 4, rounds = 5;
static long ops = 20000;
static size_t max_size = 4u << 20;

static block_t *local; /* nthreads * SLOTS_PER_THREAD, inherited across rounds */
static block_t exchange[EXCHANGE_SLOTS];
static pthread_mutex_t exchange_lock[EXCHANGE_LOCKS];
static uint64_t next_tag_base;

/* Large blocks: fill a sample (head, tail, every 4 KiB) to keep the test quick. */
static void fill(block_t *b) {
    if (b->size <= 65536) {
        ts_fill(b->ptr, b->size, b->tag);
        return;
    }
    ts_fill(b->ptr, 4096, b->tag);
    ts_fill(b->ptr + b->size - 4096, 4096, b->tag + 1);
    for (size_t i = 4096; i + 8 < b->size - 4096; i += 4096) memcpy(b->ptr + i, &b->tag, 8);
}

static int verify(const block_t *b, size_t upto) {
    size_t n = b->size < upto ? b->size : upto;
    if (b->size <= 65536) return ts_verify(b->ptr, n, b->tag);
    if (!ts_verify(b->ptr, n < 4096 ? n : 4096, b->tag)) return 0;
    if (n == b->size && !ts_verify(b->ptr + b->size - 4096, 4096, b->tag + 1)) return 0;
    for (size_t i = 4096; i + 8 < n - 4096 && i + 8 < b->size - 4096; i += 4096)
        if (memcmp(b->ptr + i, &b->tag, 8) != 0) return 0;
    return 1;
}

static size_t random_size(uint64_t *rng) {
    unsigned r = (unsigned)(ts_rand(rng) % 1000);
    size_t n;
    if (r < 700)
        n = ts_rand_range(rng, 0, 256);
    else if (r < 900)
        n = ts_rand_range(rng, 257, 8192);
    else if (r < 985)
        n = ts_rand_range(rng, 8193, 262144);
    else
        n = ts_rand_range(rng, 262145, max_size);
    return n > max_size ? max_size : n;
}

static void release(block_t *b) {
    if (!b->ptr) return;
    CHECK_MSG(verify(b, b->size), "block %p (%zu bytes, tag %llu) corrupted", (void *)b->ptr,
              b->size, (unsigned long long)b->tag);
    free(b->ptr);
    b->ptr = NULL;
}

typedef struct {
    int id;
    int round;
} worker_arg_t;

static void *worker(void *argp) {
    worker_arg_t *arg = argp;
    uint64_t rng = 0x1234567ull * (uint64_t)(arg->id + 1) + (uint64_t)arg->round * 7919;
    block_t *mine = &local[(size_t)arg->id * SLOTS_PER_THREAD];
    uint64_t tag = next_tag_base + ((uint64_t)arg->id << 40);
    for (long i = 0; i < ops; i++) {
        block_t *b = &mine[ts_rand(&rng) % SLOTS_PER_THREAD];
        unsigned op = (unsigned)(ts_rand(&rng) % 100);
        if (op < 40) { /* malloc */
            release(b);
            b->size = random_size(&rng);
            b->ptr = malloc(b->size);
            CHECK(b->ptr && ((uintptr_t)b->ptr & 15) == 0);
            CHECK(malloc_usable_size(b->ptr) >= b->size);
            b->tag = ++tag;
            fill(b);
        } else if (op < 65) {
            release(b);
        } else if (op < 75) { /* realloc keeps the common prefix */
            if (!b->ptr) continue;
            size_t n = random_size(&rng);
            if (n == 0) n = 1;
            CHECK(verify(b, b->size));
            unsigned char *q = realloc(b->ptr, n);
            CHECK(q && ((uintptr_t)q & 15) == 0);
            size_t keep = n < b->size ? n : b->size;
            b->ptr = q;
            if (b->size <= 65536 && keep) CHECK(ts_verify(q, keep, b->tag));
            b->size = n;
            b->tag = ++tag;
            fill(b);
        } else if (op < 80) { /* calloc must be zero */
            release(b);
            b->size = random_size(&rng);
            b->ptr = calloc(1, b->size);
            CHECK(b->ptr);
            for (size_t k = 0; k < b->size; k += (b->size > 65536 ? 4093 : 1))
                CHECK_MSG(b->ptr[k] == 0, "calloc(%zu)[%zu] = %d", b->size, k, b->ptr[k]);
            b->tag = ++tag;
            fill(b);
        } else if (op < 85) { /* aligned */
            release(b);
            size_t align = (size_t)16 << (ts_rand(&rng) % 9);
            b->size = random_size(&rng) % 20000;
            void *q = NULL;
            CHECK(posix_memalign(&q, align, b->size) == 0);
            CHECK_MSG(((uintptr_t)q & (align - 1)) == 0, "%p not aligned to %zu", q, align);
            b->ptr = q;
            b->tag = ++tag;
            fill(b);
        } else { /* swap with the exchange: another thread will free it */
            size_t e = ts_rand(&rng) % EXCHANGE_SLOTS;
            pthread_mutex_t *l = &exchange_lock[e % EXCHANGE_LOCKS];
            pthread_mutex_lock(l);
            block_t t = exchange[e];
            exchange[e] = *b;
            pthread_mutex_unlock(l);
            *b = t;
        }
    }
    return NULL;
}

static void check_all_live(void) {
    size_t n = (size_t)nthreads * SLOTS_PER_THREAD + EXCHANGE_SLOTS, k = 0;
    ts_range_t *r = malloc(n * sizeof *r);
    CHECK(r);
    for (size_t i = 0; i < (size_t)nthreads * SLOTS_PER_THREAD; i++)
        if (local[i].ptr) {
            CHECK(verify(&local[i], local[i].size));
            r[k++] = (ts_range_t){(uintptr_t)local[i].ptr, local[i].size ? local[i].size : 1};
        }
    for (size_t i = 0; i < EXCHANGE_SLOTS; i++)
        if (exchange[i].ptr) {
            CHECK(verify(&exchange[i], exchange[i].size));
            r[k++] =
                (ts_range_t){(uintptr_t)exchange[i].ptr, exchange[i].size ? exchange[i].size : 1};
        }
    long bad = ts_find_overlap(r, k);
    CHECK_MSG(bad < 0, "live blocks overlap: [%p,+%zu) and [%p,+%zu)", (void *)r[bad - 1].start,
              r[bad - 1].len, (void *)r[bad].start, r[bad].len);
    free(r);
}

int main(int argc, char **argv) {
    ts_require_preloaded();
    if (argc > 1) nthreads = atoi(argv[1]);
    if (argc > 2) rounds = atoi(argv[2]);
    if (argc > 3) ops = atol(argv[3]);
    if (argc > 4) max_size = (size_t)atol(argv[4]);
    local = calloc((size_t)nthreads * SLOTS_PER_THREAD, sizeof *local);
    CHECK(local);
    for (int i = 0; i < EXCHANGE_LOCKS; i++) pthread_mutex_init(&exchange_lock[i], NULL);
    pthread_t *tids = calloc((size_t)nthreads, sizeof *tids);
    worker_arg_t *args = calloc((size_t)nthreads, sizeof *args);
    for (int round = 0; round < rounds; round++) {
        next_tag_base = (uint64_t)round << 32;
        for (int t = 0; t < nthreads; t++) {
            args[t] = (worker_arg_t){t, round};
            CHECK(pthread_create(&tids[t], NULL, worker, &args[t]) == 0);
        }
        for (int t = 0; t < nthreads; t++) pthread_join(tids[t], NULL);
        check_all_live();
    }
    for (size_t i = 0; i < (size_t)nthreads * SLOTS_PER_THREAD; i++) release(&local[i]);
    for (size_t i = 0; i < EXCHANGE_SLOTS; i++) release(&exchange[i]);
    free(local);
    free(tids);
    free(args);
    printf("generic_stress: ok (%d threads x %d rounds x %ld ops)\n", nthreads, rounds, ops);
    return 0;
}
