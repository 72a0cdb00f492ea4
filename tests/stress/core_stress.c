/* Stress test of the fast allocator: worker threads allocate blocks of random
 * sizes over every class and large blocks, check their contents, resize them,
 * hand them to each other through a shared table (so most frees are remote),
 * and exit after a while, replaced by new threads (so heaps are abandoned and
 * adopted while their blocks are still live). At the end every live block is
 * verified, checked for overlap, freed, and (when linked with libtsalloc.a)
 * the pages in use must come back to where they started: no block lost.
 *
 * usage: core_stress [workers] [generations] [ops-per-worker]
 */
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "check.h"

#ifdef CORE_STRESS_INTERNAL
#include "core/internal.h"
#endif

typedef struct slot {
    unsigned char *p;
    size_t size;
    uint64_t tag;
} slot_t;

#define SHARED  4096
#define LOCAL   384
#define STRIPES 64

static slot_t shared[SHARED];
static pthread_mutex_t stripe[STRIPES];
static uint64_t next_tag = 1;
static pthread_mutex_t tag_lock = PTHREAD_MUTEX_INITIALIZER;
static long ops_per_worker = 20000;

/* Contents: a pattern from the tag over the whole block when small, else the
 * first and last 4 KiB and one byte per 4 KiB (large blocks stay cheap).
 * covered(i, n): whether byte i of an n-byte block carries the pattern. */
static unsigned char pat(uint64_t tag, size_t i) {
    return (unsigned char)(tag * 131 + i * 7 + (i >> 9));
}
static int covered(size_t i, size_t n) {
    return n <= 65536 || i < 4096 || i >= n - 4096 || i % 4096 == 0;
}
static void fill(unsigned char *p, size_t n, uint64_t tag) {
    for (size_t i = 0; i < n; i += (covered(i, n) ? 1 : 4096 - i % 4096))
        if (covered(i, n)) p[i] = pat(tag, i);
}
/* Check the first `keep` bytes of what was filled as an n-byte block. */
static int verify_prefix(const unsigned char *p, size_t keep, size_t n, uint64_t tag) {
    for (size_t i = 0; i < keep; i += (covered(i, n) ? 1 : 4096 - i % 4096))
        if (covered(i, n) && p[i] != pat(tag, i)) return 0;
    return 1;
}
static int verify(const unsigned char *p, size_t n, uint64_t tag) {
    return verify_prefix(p, n, n, tag);
}

static uint64_t new_tag(void) {
    pthread_mutex_lock(&tag_lock);
    uint64_t t = next_tag++;
    pthread_mutex_unlock(&tag_lock);
    return t;
}

/* Sizes over every class: mostly small, some medium, big-page and large. */
static size_t rand_size(uint64_t *rng) {
    unsigned r = (unsigned)(ts_rand(rng) % 1000);
    if (r < 700) return ts_rand_range(rng, 0, 1024);
    if (r < 900) return ts_rand_range(rng, 1025, 65536);
    if (r < 985) return ts_rand_range(rng, 65537, 512 * 1024);
    return ts_rand_range(rng, 512 * 1024 + 1, 6 * 1024 * 1024);
}

static void check_slot(const slot_t *s, const char *where) {
    if (!s->p) return;
    CHECK_MSG(verify(s->p, s->size, s->tag), "%s: block %p (%zu bytes, tag %llu) corrupted", where,
              (void *)s->p, s->size, (unsigned long long)s->tag);
    CHECK_MSG(malloc_usable_size(s->p) >= s->size, "%s: usable size %zu < %zu", where,
              malloc_usable_size(s->p), s->size);
}

static void release(slot_t *s, const char *where) {
    check_slot(s, where);
    free(s->p);
    s->p = NULL;
}

static void *worker(void *arg) {
    uint64_t rng = (uint64_t)(uintptr_t)arg * 0x9E3779B97F4A7C15ull + 1;
    slot_t local[LOCAL];
    memset(local, 0, sizeof local);
    for (long op = 0; op < ops_per_worker; op++) {
        unsigned r = (unsigned)(ts_rand(&rng) % 100);
        slot_t *s = &local[ts_rand(&rng) % LOCAL];
        if (r < 38) { /* malloc */
            release(s, "malloc-replace");
            size_t n = rand_size(&rng);
            s->p = malloc(n);
            CHECK_MSG(s->p != NULL, "malloc(%zu) failed", n);
            CHECK((uintptr_t)s->p % 16 == 0);
            s->size = n;
            s->tag = new_tag();
            fill(s->p, n, s->tag);
        } else if (r < 52) { /* free */
            release(s, "free");
        } else if (r < 72) { /* hand over: swap with a shared slot */
            unsigned i = (unsigned)(ts_rand(&rng) % SHARED);
            pthread_mutex_lock(&stripe[i % STRIPES]);
            slot_t tmp = shared[i];
            shared[i] = *s;
            *s = tmp;
            pthread_mutex_unlock(&stripe[i % STRIPES]);
            check_slot(s, "received");
        } else if (r < 80) { /* realloc */
            if (!s->p) continue;
            check_slot(s, "realloc-before");
            size_t n = ts_rand(&rng) % 4 ? rand_size(&rng) : s->size + 1 + ts_rand(&rng) % 64;
            if (n == 0) n = 1;
            unsigned char *q = realloc(s->p, n);
            CHECK_MSG(q != NULL, "realloc(%zu) failed", n);
            size_t keep = n < s->size ? n : s->size;
            CHECK_MSG(verify_prefix(q, keep, s->size, s->tag), "realloc %zu -> %zu lost contents",
                      s->size, n);
            s->p = q;
            s->size = n;
            s->tag = new_tag();
            fill(q, n, s->tag);
        } else if (r < 86) { /* calloc */
            release(s, "calloc-replace");
            size_t n = rand_size(&rng);
            s->p = calloc(1, n);
            CHECK(s->p != NULL);
            for (size_t i = 0; i < n; i += (n > 65536 ? 4093 : 1))
                CHECK_MSG(s->p[i] == 0, "calloc(%zu) byte %zu not zero", n, i);
            s->size = n;
            s->tag = new_tag();
            fill(s->p, n, s->tag);
        } else if (r < 90) { /* aligned */
            release(s, "memalign-replace");
            size_t align = (size_t)32 << (ts_rand(&rng) % 16); /* 32 B .. 1 MiB */
            size_t n = rand_size(&rng) / 2;
            void *p = NULL;
            CHECK(posix_memalign(&p, align, n) == 0);
            CHECK_MSG((uintptr_t)p % align == 0, "posix_memalign(%zu) gave %p", align, p);
            s->p = p;
            s->size = n;
            s->tag = new_tag();
            fill(s->p, n, s->tag);
        } else {
            check_slot(s, "verify");
        }
    }
    /* Leave: free half, hand the rest over (freed later by other threads). */
    for (unsigned k = 0; k < LOCAL; k++) {
        slot_t *s = &local[k];
        if (!s->p) continue;
        if (k % 2) {
            release(s, "exit-free");
            continue;
        }
        unsigned i = (unsigned)(ts_rand(&rng) % SHARED);
        pthread_mutex_lock(&stripe[i % STRIPES]);
        slot_t old = shared[i];
        shared[i] = *s;
        pthread_mutex_unlock(&stripe[i % STRIPES]);
        release(&old, "exit-replace");
    }
    return NULL;
}

#ifdef CORE_STRESS_INTERNAL
static size_t pages_in_use(void) {
    size_t n = 0;
    for (int k = 0; k < TS_KIND_COUNT; k++) n += atomic_load(&_ts_stats.pages[k]);
    return n;
}
#endif

int main(int argc, char **argv) {
    int workers = argc > 1 ? atoi(argv[1]) : 4;
    int generations = argc > 2 ? atoi(argv[2]) : 6;
    if (argc > 3) ops_per_worker = atol(argv[3]);
    ts_require_preloaded();
    for (int i = 0; i < STRIPES; i++) pthread_mutex_init(&stripe[i], NULL);
    free(malloc(1)); /* initialise before taking the baseline */
#ifdef CORE_STRESS_INTERNAL
    malloc_trim(0);
    size_t pages_before = pages_in_use();
#endif
    /* Generations of workers, overlapping: each wave starts while the last
     * one's threads are still running, so heaps die and are adopted mid-run. */
    pthread_t *t = calloc((size_t)workers * (size_t)generations, sizeof *t);
    CHECK(t != NULL);
    long seed = 1;
    for (int g = 0; g < generations; g++) {
        for (int w = 0; w < workers; w++)
            CHECK(pthread_create(&t[g * workers + w], NULL, worker, (void *)seed++) == 0);
        if (g > 0)
            for (int w = 0; w < workers; w++)
                CHECK(pthread_join(t[(g - 1) * workers + w], NULL) == 0);
    }
    for (int w = 0; w < workers; w++)
        CHECK(pthread_join(t[(generations - 1) * workers + w], NULL) == 0);
    free(t);

    /* Every block still live: intact and disjoint. */
    ts_range_t *ranges = mmap(NULL, SHARED * sizeof *ranges, PROT_READ | PROT_WRITE,
                              MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(ranges != MAP_FAILED);
    size_t n = 0;
    for (int i = 0; i < SHARED; i++) {
        if (!shared[i].p) continue;
        check_slot(&shared[i], "final");
        ranges[n].start = (uintptr_t)shared[i].p;
        ranges[n].len = shared[i].size ? shared[i].size : 1;
        n++;
    }
    long bad = ts_find_overlap(ranges, n);
    CHECK_MSG(bad < 0, "blocks overlap: %#lx+%zu and %#lx", (unsigned long)ranges[bad - 1].start,
              ranges[bad - 1].len, (unsigned long)ranges[bad].start);
    munmap(ranges, SHARED * sizeof *ranges);
    for (int i = 0; i < SHARED; i++) release(&shared[i], "final-free");

#ifdef CORE_STRESS_INTERNAL
    /* No block lost: once everything is freed, every page of the exited
     * threads goes back (their frees may still be on their way through the
     * purge thread, hence the deadline). */
    size_t pages_after = 0;
    for (int tries = 0; tries < 200; tries++) {
        malloc_trim(0);
        pages_after = pages_in_use();
        if (pages_after <= pages_before + 8) break;
        usleep(50 * 1000);
    }
    /* 2 more pages than before (measured): 8 is 4x that; the threads'
     * pages kept would be hundreds. */
    CHECK_MSG(pages_after <= pages_before + 8, "pages in use: %zu before, %zu after", pages_before,
              pages_after);
    printf("ok: %d workers x %d generations x %ld ops; pages in use %zu -> %zu\n", workers,
           generations, ops_per_worker, pages_before, pages_after);
#else
    printf("ok: %d workers x %d generations x %ld ops\n", workers, generations, ops_per_worker);
#endif
    return 0;
}
