/* pow2 and pow2-partitioned under threads, linked with the design's static
 * library (compiled once per design, as pow2_unit.c):
 *   pow2_threads stress [threads] [ops]: random malloc/calloc/realloc/memalign
 *       and free with every block's contents verified, blocks handed between
 *       threads so most frees are cross-thread, two rounds of threads (the
 *       second frees what the first left); then no overlap, and the heap
 *       passes the full consistency check.
 *   pow2_threads owner: blocks a thread allocates belong to its partition
 *       (threads take partitions round-robin), go back to that partition when
 *       another thread frees them, and whole free chunks are reused by other
 *       partitions through the pool (run with TSALLOC_POW2_PARTITIONS=3).
 */
#include "check.h"

#include <malloc.h>
#include <pthread.h>

#include "designs/pow2/pow2.h"

#define CHUNK ((size_t)1 << 20)
#define WHOLE (CHUNK - 16)

static void check_heap(const char *where) {
    char why[256];
    int problems = P2(check_heap)(why, sizeof why);
    CHECK_MSG(problems == 0, "%s: %d heap problems, first: %s", where, problems, why);
}

/* ---- stress ----------------------------------------------------------------- */

typedef struct {
    unsigned char *ptr;
    size_t size;
    uint64_t tag;
} block_t;

enum { SLOTS = 192, EXCHANGE = 256, MAX_THREADS = 16 };

static int nthreads = 8;
static long ops = 12000;
static block_t local[MAX_THREADS][SLOTS];
static block_t exchange[EXCHANGE];
static pthread_mutex_t exchange_lock = PTHREAD_MUTEX_INITIALIZER;
static atomic_ulong next_tag = 1;

static size_t pick_size(uint64_t *rng) {
    unsigned r = (unsigned)(ts_rand(rng) % 1000);
    if (r < 650) return ts_rand_range(rng, 0, 300);
    if (r < 930) return ts_rand_range(rng, 301, 9000);
    if (r < 995) return ts_rand_range(rng, 9001, 200000);
    return ts_rand_range(rng, 900000, 1600000); /* both sides of the mmap threshold */
}

/* Big blocks: pattern on the first and last 4 KiB only, to stay quick. */
static void fill(block_t *b) {
    if (b->size <= 16384) {
        ts_fill(b->ptr, b->size, b->tag);
        return;
    }
    ts_fill(b->ptr, 4096, b->tag);
    ts_fill(b->ptr + b->size - 4096, 4096, b->tag + 1);
}

static void verify(const block_t *b, size_t upto) {
    size_t n = b->size < upto ? b->size : upto;
    int ok;
    if (b->size <= 16384)
        ok = ts_verify(b->ptr, n, b->tag);
    else
        ok = ts_verify(b->ptr, n < 4096 ? n : 4096, b->tag) &&
             (n < b->size || ts_verify(b->ptr + b->size - 4096, 4096, b->tag + 1));
    CHECK_MSG(ok, "block %p (%zu bytes, tag %lu) corrupted", (void *)b->ptr, b->size,
              (unsigned long)b->tag);
}

static void release(block_t *b) {
    if (!b->ptr) return;
    verify(b, b->size);
    free(b->ptr);
    b->ptr = NULL;
}

static void *stress_thread(void *arg) {
    long id = (long)(intptr_t)arg;
    uint64_t rng = 0x1234567ull * (uint64_t)(id + 1);
    block_t *mine = local[id];
    for (long i = 0; i < ops; i++) {
        block_t *b = &mine[ts_rand(&rng) % SLOTS];
        unsigned op = (unsigned)(ts_rand(&rng) % 100);
        if (op < 40) {
            release(b);
            b->size = pick_size(&rng);
            b->tag = atomic_fetch_add(&next_tag, 2);
            b->ptr = op < 30 ? malloc(b->size) : calloc(1, b->size);
            CHECK(b->ptr);
            if (op >= 30)
                for (size_t j = 0; j < b->size; j += 61) CHECK(b->ptr[j] == 0);
            CHECK(((uintptr_t)b->ptr & 15) == 0 && malloc_usable_size(b->ptr) >= b->size);
            fill(b);
        } else if (op < 60) {
            if (!b->ptr) continue;
            size_t n = pick_size(&rng);
            if (!n) n = 1;
            verify(b, b->size);
            unsigned char *q = realloc(b->ptr, n);
            CHECK(q);
            block_t nb = {q, n, b->tag};
            size_t keep = n < b->size ? n : b->size;
            if (b->size <= 16384 && n <= 16384)
                verify(&nb, keep);
            else
                CHECK(ts_verify(q, keep < 4096 ? keep : 4096, b->tag));
            nb.tag = atomic_fetch_add(&next_tag, 2);
            *b = nb;
            fill(b);
        } else if (op < 85) {
            /* Swap with the exchange: the block is freed by whoever takes it. */
            pthread_mutex_lock(&exchange_lock);
            block_t *x = &exchange[ts_rand(&rng) % EXCHANGE];
            block_t t = *x;
            *x = *b;
            *b = t;
            pthread_mutex_unlock(&exchange_lock);
            if (b->ptr) verify(b, b->size);
        } else {
            release(b);
            size_t align = (size_t)16 << (ts_rand(&rng) % 9);
            b->size = ts_rand_range(&rng, 1, 5000);
            b->tag = atomic_fetch_add(&next_tag, 2);
            void *q = NULL;
            CHECK(posix_memalign(&q, align, b->size) == 0);
            b->ptr = q;
            CHECK(((uintptr_t)b->ptr & (align - 1)) == 0);
            fill(b);
        }
    }
    return NULL;
}

static void check_no_overlap(void) {
    size_t n = 0, cap = (size_t)nthreads * SLOTS + EXCHANGE;
    ts_range_t *r = malloc(cap * sizeof *r);
    CHECK(r);
    for (int t = 0; t < nthreads; t++)
        for (int i = 0; i < SLOTS; i++)
            if (local[t][i].ptr)
                r[n++] =
                    (ts_range_t){(uintptr_t)local[t][i].ptr, malloc_usable_size(local[t][i].ptr)};
    for (int i = 0; i < EXCHANGE; i++)
        if (exchange[i].ptr)
            r[n++] = (ts_range_t){(uintptr_t)exchange[i].ptr, malloc_usable_size(exchange[i].ptr)};
    long at = ts_find_overlap(r, n);
    CHECK_MSG(at < 0, "live blocks overlap: %#lx+%zu and %#lx", (unsigned long)r[at - 1].start,
              r[at - 1].len, (unsigned long)r[at].start);
    free(r);
}

static void run_stress(void) {
    for (int round = 0; round < 2; round++) {
        pthread_t th[MAX_THREADS];
        for (long i = 0; i < nthreads; i++)
            CHECK(pthread_create(&th[i], NULL, stress_thread, (void *)(intptr_t)i) == 0);
        for (int i = 0; i < nthreads; i++) CHECK(pthread_join(th[i], NULL) == 0);
        check_no_overlap();
        check_heap("after a round");
    }
    for (int t = 0; t < nthreads; t++)
        for (int i = 0; i < SLOTS; i++) release(&local[t][i]);
    for (int i = 0; i < EXCHANGE; i++) release(&exchange[i]);
    check_heap("after freeing everything");
    printf("stress: ok (%d threads, %ld ops each, 2 rounds, partitions %u)\n", nthreads, ops,
           pow2_nparts());
}

/* ---- partition ownership ------------------------------------------------------------ */

static char text[1 << 16];

static unsigned block_partition(const void *p) {
    size_t n = P2(dump_block)(p, text, sizeof text);
    CHECK(n < sizeof text);
    const char *at = strstr(text, " partition=");
    CHECK_MSG(at, "no partition in: %s", text);
    return (unsigned)strtoul(at + 11, NULL, 10);
}

/* used_blocks of every partition, from the free-list dump. */
static void used_blocks(size_t *out, unsigned n) {
    static char dump[8 << 20];
    P2(dump_freelist)(dump, sizeof dump);
    for (unsigned i = 0; i < n; i++) {
        char key[32];
        snprintf(key, sizeof key, "\npartition %u: ", i);
        const char *line = strstr(dump, key);
        CHECK(line);
        const char *u = strstr(line, " used_blocks=");
        CHECK(u);
        out[i] = strtoul(u + 13, NULL, 10);
    }
}

enum { OWN_N = 200, OWN_CHUNKS = 8 };
static void *owned[OWN_N];
static int owned_n;
static unsigned owner_part;

static void *alloc_thread(void *arg) {
    (void)arg;
    for (int i = 0; i < OWN_N; i++) {
        owned[i] = malloc((size_t)(i * 37) % 20000);
        CHECK(owned[i]);
        unsigned p = block_partition(owned[i]);
        if (i == 0) owner_part = p;
        CHECK_MSG(p == owner_part, "block %d in partition %u, not %u", i, p, owner_part);
    }
    owned_n = OWN_N;
    return NULL;
}

static void *free_thread(void *arg) {
    (void)arg;
    for (int i = 0; i < owned_n; i++) free(owned[i]);
    owned_n = 0;
    return NULL;
}

static void *chunks_thread(void *arg) {
    (void)arg;
    for (int i = 0; i < OWN_CHUNKS; i++) {
        owned[i] = malloc(WHOLE);
        CHECK(owned[i]);
        memset(owned[i], i, 4096);
        if (i == 0) owner_part = block_partition(owned[i]);
        CHECK_EQ(block_partition(owned[i]), owner_part);
    }
    owned_n = OWN_CHUNKS;
    return NULL;
}

static void run_in_thread(void *(*fn)(void *)) {
    pthread_t t;
    CHECK(pthread_create(&t, NULL, fn, NULL) == 0);
    CHECK(pthread_join(t, NULL) == 0);
}

static void *noop_thread(void *arg) {
    return arg;
}

static void run_owner(void) {
    free(malloc(1)); /* the main thread takes its partition first: 0 */
    /* pthread_create allocates in the creating thread, and glibc keeps some
     * of it with the cached stack: one thread first, so the counts below
     * change only by what the test threads do. */
    run_in_thread(noop_thread);
    unsigned n = pow2_nparts();
    if (pow2_partitioned) CHECK_MSG(n == 3, "TSALLOC_POW2_PARTITIONS=3 gave %u partitions", n);
    size_t before[POW2_PART_SLOTS], after[POW2_PART_SLOTS], freed[POW2_PART_SLOTS];
    used_blocks(before, n);
    run_in_thread(alloc_thread); /* second thread: partition 1 */
    unsigned a = owner_part;
    CHECK_EQ(a, pow2_partitioned ? 1 : 0);
    used_blocks(after, n);
    CHECK_EQ(after[a], before[a] + OWN_N);
    run_in_thread(free_thread); /* frees them; it never allocates, so takes no partition */
    used_blocks(freed, n);
    for (unsigned i = 0; i < n; i++)
        CHECK_MSG(freed[i] == before[i], "partition %u: %zu used blocks, %zu before", i, freed[i],
                  before[i]);
    check_heap("cross-thread frees");

    /* Whole chunks freed by another thread go to the pool (one stays as the
     * owner's spare); a thread of another partition reuses them. */
    run_in_thread(chunks_thread); /* the next partition round-robin: 2 */
    unsigned first = owner_part;
    run_in_thread(free_thread);
    size_t arena = mallinfo2().arena;
    run_in_thread(chunks_thread); /* and the next: 0 */
    CHECK_EQ(first, pow2_partitioned ? 2 : 0);
    CHECK_EQ(owner_part, 0);
    /* Exact: the new partition's spare chunk is the only growth (measured:
     * 0 for pow2, one chunk for pow2-partitioned). */
    CHECK_MSG(mallinfo2().arena <= arena + (pow2_partitioned ? CHUNK : 0),
              "arena grew from %zu to %zu: pool chunks not reused", arena, mallinfo2().arena);
    run_in_thread(free_thread);
    check_heap("pool reuse");
    printf("owner: ok (partitions %u)\n", n);
}

int main(int argc, char **argv) {
    CHECK(argc >= 2);
    if (!strcmp(argv[1], "stress")) {
        if (argc > 2) nthreads = atoi(argv[2]);
        if (argc > 3) ops = atol(argv[3]);
        CHECK(nthreads >= 1 && nthreads <= MAX_THREADS);
        run_stress();
    } else if (!strcmp(argv[1], "owner")) {
        run_owner();
    } else {
        CHECK_MSG(0, "unknown case %s", argv[1]);
    }
    return 0;
}
