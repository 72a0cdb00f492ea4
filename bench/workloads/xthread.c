/* xthread: disjoint allocating and freeing threads. P producers only
 * malloc, C consumers only free. Producer p fills batches of B blocks (sizes
 * uniform in [min, max]) and sends batch k to consumer k % C through a
 * single-producer single-consumer ring (one per producer/consumer pair,
 * `depth` batches deep). A thread that finds its ring full or empty yields,
 * so the handoff itself makes no futex calls: those come from the allocator.
 *
 * Every block holds its tag (producer, index) and its size; the consumer
 * checks both before the free. check = total bytes, recomputed by the main
 * thread from the producers' random streams.
 */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>

#include "tsb.h"

static long opt_producers = 2, opt_consumers = 2, opt_blocks = 400000, opt_batch = 256,
            opt_depth = 8, opt_min = 16, opt_max = 2048;

typedef struct {
    _Alignas(64) atomic_long head; /* batches taken by the consumer */
    _Alignas(64) atomic_long tail; /* batches sent by the producer */
    void **slots;                  /* depth * batch pointers */
} ring_t;

static ring_t *rings; /* rings[p * C + c] */
static long batches_per_producer;

typedef struct {
    long id;
    uint64_t bytes;
    long bad;
} role_t;

static uint64_t producer_seed(long p) {
    return tsb_mix(0x5eed0000u + (uint64_t)p);
}
static uint64_t block_tag(long p, long i) {
    return ((uint64_t)p << 48) ^ (uint64_t)i ^ 0xa5;
}

/* Word 0: tag, word 1: size, last byte (past the two words): tag >> 3. */
static void write_block(void *p, size_t n, uint64_t tag) {
    volatile uint64_t *w = p;
    w[0] = tag;
    w[1] = n;
    if (n > 16) ((volatile unsigned char *)p)[n - 1] = (unsigned char)(tag >> 3);
}
static int block_ok(const void *p, size_t n, uint64_t tag) {
    const volatile uint64_t *w = p;
    if (w[0] != tag || w[1] != n) return 0;
    return n <= 16 || ((const volatile unsigned char *)p)[n - 1] == (unsigned char)(tag >> 3);
}

static void *produce(void *arg) {
    role_t *r = arg;
    uint64_t rng = producer_seed(r->id);
    long index = 0;
    for (long k = 0; k < batches_per_producer; k++) {
        ring_t *ring = &rings[r->id * opt_consumers + k % opt_consumers];
        long tail = atomic_load_explicit(&ring->tail, memory_order_relaxed);
        while (tail - atomic_load_explicit(&ring->head, memory_order_acquire) >= opt_depth)
            sched_yield();
        void **batch = ring->slots + (tail % opt_depth) * opt_batch;
        for (long j = 0; j < opt_batch; j++, index++) {
            size_t n = tsb_range(&rng, (size_t)opt_min, (size_t)opt_max);
            uint64_t *p = malloc(n);
            if (!p) tsb_fail("malloc(%zu) returned NULL", n);
            write_block(p, n, block_tag(r->id, index));
            batch[j] = p;
        }
        atomic_store_explicit(&ring->tail, tail + 1, memory_order_release);
    }
    return NULL;
}

static void *consume(void *arg) {
    role_t *r = arg;
    /* Batches this consumer gets from each producer: k % C == id. */
    long expected = 0;
    for (long k = 0; k < batches_per_producer; k++) expected += (k % opt_consumers) == r->id;
    expected *= opt_producers;
    long *next_index = tsb_pages(sizeof(long) * (size_t)opt_producers);
    for (long p = 0; p < opt_producers; p++) next_index[p] = r->id * opt_batch;
    long got = 0, idle = 0;
    while (got < expected) {
        int progressed = 0;
        for (long p = 0; p < opt_producers; p++) {
            ring_t *ring = &rings[p * opt_consumers + r->id];
            long head = atomic_load_explicit(&ring->head, memory_order_relaxed);
            if (head == atomic_load_explicit(&ring->tail, memory_order_acquire)) continue;
            void **batch = ring->slots + (head % opt_depth) * opt_batch;
            for (long j = 0; j < opt_batch; j++) {
                uint64_t *b = batch[j];
                size_t n = (size_t)((volatile uint64_t *)b)[1];
                if (n < (size_t)opt_min || n > (size_t)opt_max ||
                    !block_ok(b, n, block_tag(p, next_index[p] + j)))
                    r->bad++;
                else
                    r->bytes += n;
                free(b);
            }
            /* This consumer's next batch from p is C batches further on. */
            next_index[p] += opt_consumers * opt_batch;
            atomic_store_explicit(&ring->head, head + 1, memory_order_release);
            got++;
            progressed = 1;
        }
        if (!progressed && ++idle) sched_yield();
    }
    tsb_pages_free(next_index, sizeof(long) * (size_t)opt_producers);
    return NULL;
}

int main(int argc, char **argv) {
    static const tsb_opt_t opts[] = {
        {"producers", &opt_producers, NULL, "threads that only malloc"},
        {"consumers", &opt_consumers, NULL, "threads that only free"},
        {"blocks", &opt_blocks, NULL, "blocks per producer (rounded down to batches)"},
        {"batch", &opt_batch, NULL, "blocks per batch"},
        {"depth", &opt_depth, NULL, "batches in flight per ring"},
        {"min", &opt_min, NULL, "smallest block (>= 16)"},
        {"max", &opt_max, NULL, "largest block"},
        {0}};
    tsb_start("xthread");
    tsb_parse(argc, argv, opts);
    tsb_require(opt_producers >= 1 && opt_consumers >= 1 && opt_producers * opt_consumers <= 4096,
                "producers, consumers >= 1");
    tsb_require(opt_batch >= 1 && opt_depth >= 1 && opt_blocks >= opt_batch,
                "blocks >= batch >= 1");
    tsb_require(opt_min >= 16 && opt_max >= opt_min, "16 <= min <= max");
    batches_per_producer = opt_blocks / opt_batch;

    long nrings = opt_producers * opt_consumers;
    rings = tsb_pages(sizeof(ring_t) * (size_t)nrings);
    for (long i = 0; i < nrings; i++)
        rings[i].slots = tsb_pages(sizeof(void *) * (size_t)(opt_depth * opt_batch));
    long nthreads = opt_producers + opt_consumers;
    role_t *roles = tsb_pages(sizeof(role_t) * (size_t)nthreads);
    pthread_t *tid = tsb_pages(sizeof(pthread_t) * (size_t)nthreads);

    double t0 = tsb_now();
    for (long i = 0; i < nthreads; i++) {
        int consumer = i >= opt_producers;
        roles[i].id = consumer ? i - opt_producers : i;
        if (pthread_create(&tid[i], NULL, consumer ? consume : produce, &roles[i]))
            tsb_fail("pthread_create failed");
    }
    for (long i = 0; i < nthreads; i++) pthread_join(tid[i], NULL);
    double elapsed = tsb_now() - t0;

    uint64_t check = 0, expect = 0;
    for (long i = opt_producers; i < nthreads; i++) {
        if (roles[i].bad)
            tsb_fail("consumer %ld: %ld blocks arrived corrupted", roles[i].id, roles[i].bad);
        check += roles[i].bytes;
    }
    for (long p = 0; p < opt_producers; p++) {
        uint64_t rng = producer_seed(p);
        for (long i = 0; i < batches_per_producer * opt_batch; i++)
            expect += tsb_range(&rng, (size_t)opt_min, (size_t)opt_max);
    }
    if (check != expect) tsb_fail("check %" PRIu64 " != expected %" PRIu64, check, expect);
    tsb_kv("blocks", "%ld", batches_per_producer * opt_batch * opt_producers);
    return tsb_ok(elapsed, nthreads, check);
}
