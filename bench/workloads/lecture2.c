/* lecture2: the seed lecture's second program. P producer/consumer pairs
 * share a ring of pointers; the producer mallocs a batch of blocks of
 * 4 * ((j % N) + 1) bytes, the consumer frees them, so every block is freed
 * by a thread other than the one that allocated it (tcmalloc lost 3x to
 * ptmalloc here in the lecture, with 185731 futex calls vs 53653).
 *
 * The producer tags each block with its sequence number; the consumer reads
 * the blocks in ring order and checks each tag before the free.
 * check = total bytes consumed, which the arguments alone determine.
 * Semaphores: each pair has `empty` (free batch slots) and `occupied`.
 */
#include <pthread.h>
#include <sched.h>
#include <semaphore.h>
#include <stdatomic.h>

#include "tsb.h"

static long opt_pairs = 16, opt_batches = 200, opt_batch = 1024, opt_ring = 10240, opt_classes = 64;
static const char *opt_pin = "none";

/* --pin: where the scheduler may run each thread. "none" leaves it free (the
 * seed's program); "pair" puts both threads of pair i on the i-th allowed CPU
 * (a block is freed on the CPU that wrote it); "split" puts a pair's producer
 * and consumer on different CPUs (every block crosses between caches). Free
 * placement mixes the two in proportions the scheduler decides, which moves
 * the time more than the allocator does. */
static cpu_set_t allowed;
static int allowed_count;
static atomic_long threads_pinned; /* reported, so a test sees the pinning happen */
static void pin_to(long which) {
    if (allowed_count == 0) return;
    long n = which % allowed_count;
    for (int cpu = 0; cpu < CPU_SETSIZE; cpu++) {
        if (!CPU_ISSET(cpu, &allowed) || n-- > 0) continue;
        cpu_set_t one;
        CPU_ZERO(&one);
        CPU_SET(cpu, &one);
        if (pthread_setaffinity_np(pthread_self(), sizeof one, &one))
            tsb_fail("pthread_setaffinity_np(cpu %d) failed", cpu);
        if (sched_getcpu() != cpu) tsb_fail("pinned to cpu %d, running on %d", cpu, sched_getcpu());
        atomic_fetch_add(&threads_pinned, 1);
        return;
    }
}
static void pin_thread(long pair, int consumer) {
    if (!strcmp(opt_pin, "pair")) pin_to(pair);
    if (!strcmp(opt_pin, "split")) pin_to(2 * pair + consumer);
}

typedef struct {
    void **ring;
    long next_in, next_out;
    sem_t empty, occupied;
    pthread_t producer, consumer;
    uint64_t bytes;
    long bad;
    long id;
} pair_t;

/* Block j of a batch has 4 * ((j % classes) + 1) bytes; *k walks j % classes
 * without a division per block (the seed's N is a constant, a mask). */
static size_t next_block_size(long *k) {
    size_t n = sizeof(int) * (size_t)(*k + 1);
    if (++*k == opt_classes) *k = 0;
    return n;
}
static uint64_t block_tag(const pair_t *b, long seq) {
    return ((uint64_t)b->id << 40) ^ (uint64_t)seq;
}

static void *produce(void *arg) {
    pair_t *b = arg;
    long seq = 0;
    pin_thread(b->id, 0);
    for (long i = 0; i < opt_batches; i++) {
        sem_wait(&b->empty);
        long k = 0;
        for (long j = 0; j < opt_batch; j++, seq++) {
            size_t n = next_block_size(&k);
            void *p = malloc(n);
            if (!p) tsb_fail("malloc(%zu) returned NULL", n);
            tsb_tag(p, n, block_tag(b, seq));
            b->ring[b->next_in] = p;
            if (++b->next_in >= opt_ring) b->next_in = 0;
        }
        sem_post(&b->occupied);
    }
    return NULL;
}

static void *consume(void *arg) {
    pair_t *b = arg;
    long seq = 0, bad = 0;
    uint64_t bytes = 0;
    pin_thread(b->id, 1);
    for (long i = 0; i < opt_batches; i++) {
        sem_wait(&b->occupied);
        long k = 0;
        for (long j = 0; j < opt_batch; j++, seq++) {
            size_t n = next_block_size(&k);
            void *p = b->ring[b->next_out];
            bad += !tsb_tag_ok(p, n, block_tag(b, seq));
            bytes += n;
            free(p);
            if (++b->next_out >= opt_ring) b->next_out = 0;
        }
        sem_post(&b->empty);
    }
    b->bytes = bytes;
    b->bad = bad;
    return NULL;
}

int main(int argc, char **argv) {
    static const tsb_opt_t opts[] = {
        {"pairs", &opt_pairs, NULL, "producer/consumer pairs (2 threads each)"},
        {"batches", &opt_batches, NULL, "batches each producer sends"},
        {"batch", &opt_batch, NULL, "blocks per batch"},
        {"ring", &opt_ring, NULL, "ring slots per pair (a multiple of batch)"},
        {"classes", &opt_classes, NULL, "sizes 4, 8, ... 4*classes bytes"},
        {"pin", NULL, &opt_pin, "none, pair (a pair on one CPU) or split (on two)"},
        {0}};
    tsb_start("lecture2");
    tsb_parse(argc, argv, opts);
    tsb_require(opt_pairs >= 1 && opt_pairs <= 2048, "1 <= pairs <= 2048");
    tsb_require(opt_batch >= 1 && opt_batches >= 1 && opt_classes >= 1, "sizes >= 1");
    tsb_require(opt_ring >= opt_batch && opt_ring % opt_batch == 0, "ring is a multiple of batch");
    tsb_require(!strcmp(opt_pin, "none") || !strcmp(opt_pin, "pair") || !strcmp(opt_pin, "split"),
                "pin is none, pair or split");
    if (strcmp(opt_pin, "none") && sched_getaffinity(0, sizeof allowed, &allowed) == 0)
        allowed_count = CPU_COUNT(&allowed);

    pair_t *pairs = tsb_pages(sizeof(pair_t) * (size_t)opt_pairs);
    for (long i = 0; i < opt_pairs; i++) {
        pair_t *b = &pairs[i];
        b->id = i;
        b->ring = tsb_pages(sizeof(void *) * (size_t)opt_ring);
        sem_init(&b->empty, 0, (unsigned)(opt_ring / opt_batch));
        sem_init(&b->occupied, 0, 0);
    }
    double t0 = tsb_now();
    for (long i = 0; i < opt_pairs; i++) {
        if (pthread_create(&pairs[i].producer, NULL, produce, &pairs[i]) ||
            pthread_create(&pairs[i].consumer, NULL, consume, &pairs[i]))
            tsb_fail("pthread_create failed");
    }
    for (long i = 0; i < opt_pairs; i++) {
        pthread_join(pairs[i].producer, NULL);
        pthread_join(pairs[i].consumer, NULL);
    }
    double elapsed = tsb_now() - t0;

    uint64_t expect = 0, got = 0;
    long k = 0;
    for (long j = 0; j < opt_batch; j++) expect += next_block_size(&k);
    expect *= (uint64_t)opt_batches * (uint64_t)opt_pairs;
    for (long i = 0; i < opt_pairs; i++) {
        if (pairs[i].bad) tsb_fail("pair %ld: %ld blocks arrived corrupted", i, pairs[i].bad);
        got += pairs[i].bytes;
    }
    if (got != expect) tsb_fail("check %" PRIu64 " != expected %" PRIu64, got, expect);
    tsb_kv("pairs", "%ld", opt_pairs);
    tsb_kv("pinned", "%ld", atomic_load(&threads_pinned));
    tsb_kv("blocks", "%ld", opt_pairs * opt_batches * opt_batch);
    return tsb_ok(elapsed, 2 * opt_pairs, got);
}
