/* gentrace: writes a random allocation trace for memsim (seed 003's
 * genrandms), in the text format of docs/trace-format.md:
 *   tstrace 1          header (format version)
 *   slots S            highest slot id + 1 (lets the replayer size its table)
 *   m ID SIZE          malloc into empty slot ID
 *   c ID COUNT SIZE    calloc(COUNT, SIZE) into empty slot ID
 *   r ID SIZE          realloc live slot ID
 *   f ID               free live slot ID
 * Every block the trace allocates is freed by the trace's end.
 *
 * The model: each allocation draws a size from --size and a lifetime (in
 * operations) from --life; when its time comes it is freed, or with
 * --realloc-pct percent chance reallocated to a new size and a new lifetime.
 * When all --slots are live the block due first is freed early. Output is a
 * function of the arguments (the seed fixes every draw).
 *
 * Distributions: size  fixed:N | uniform:LO:HI | log:LO:HI | mix
 *                life  exp:MEAN | uniform:LO:HI | fixed:N | lifo:PCT
 * (log draws the exponent uniformly: as many 16-31 B as 1-2 KiB blocks;
 * mix is 80% log:16:256, 18% log:256:4096, 2% log:4096:131072; lifo frees the
 * newest live block with PCT percent chance at each step.)
 */
#include "tsb.h"

#include <math.h>

static long opt_ops = 100000, opt_slots = 2000, opt_seed = 1, opt_realloc = 5, opt_calloc = 5;
static const char *opt_size = "mix", *opt_life = "exp:1000", *opt_out = "-";

typedef struct {
    char kind; /* f u l m (fixed, uniform, log, mix) / e u f s (exp, uniform, fixed, lifo) */
    double a, b;
} dist_t;

static dist_t parse_dist(const char *spec, int is_life) {
    dist_t d = {0, 0, 0};
    char name[16] = {0};
    const char *colon = strchr(spec, ':');
    size_t len = colon ? (size_t)(colon - spec) : strlen(spec);
    if (len >= sizeof name) goto bad;
    memcpy(name, spec, len);
    int args = colon ? sscanf(colon + 1, "%lf:%lf", &d.a, &d.b) : 0;
    if (!is_life && !strcmp(name, "mix") && args == 0)
        d.kind = 'm';
    else if (!strcmp(name, "fixed") && args == 1)
        d.kind = 'f';
    else if (!strcmp(name, "uniform") && args == 2 && d.a <= d.b)
        d.kind = 'u';
    else if (!is_life && !strcmp(name, "log") && args == 2 && d.a >= 1 && d.a <= d.b)
        d.kind = 'l';
    else if (is_life && !strcmp(name, "exp") && args == 1 && d.a > 0)
        d.kind = 'e';
    else if (is_life && !strcmp(name, "lifo") && args == 1 && d.a > 0 && d.a < 100)
        d.kind = 's';
    else
        goto bad;
    if (d.a < 0 || d.b < 0) goto bad;
    return d;
bad:
    fprintf(stderr, "tsb-gentrace: bad %s distribution '%s'\n", is_life ? "--life" : "--size",
            spec);
    exit(2);
}

static double unit(uint64_t *rng) {
    return (double)(tsb_rand(rng) >> 11) * 0x1.0p-53;
}

static size_t log_uniform(uint64_t *rng, double lo, double hi) {
    double x = exp(log(lo) + unit(rng) * (log(hi + 1) - log(lo)));
    size_t n = (size_t)x;
    return n < (size_t)lo ? (size_t)lo : n > (size_t)hi ? (size_t)hi : n;
}

static size_t draw_size(const dist_t *d, uint64_t *rng) {
    switch (d->kind) {
    case 'f':
        return (size_t)d->a;
    case 'u':
        return tsb_range(rng, (size_t)d->a, (size_t)d->b);
    case 'l':
        return log_uniform(rng, d->a, d->b);
    default: {
        double u = unit(rng);
        if (u < 0.80) return log_uniform(rng, 16, 256);
        if (u < 0.98) return log_uniform(rng, 256, 4096);
        return log_uniform(rng, 4096, 131072);
    }
    }
}

static long draw_life(const dist_t *d, uint64_t *rng) {
    switch (d->kind) {
    case 'f':
        return (long)d->a;
    case 'u':
        return (long)tsb_range(rng, (size_t)d->a, (size_t)d->b);
    case 'e':
        return (long)(-log(1.0 - unit(rng)) * d->a);
    default:
        return 0; /* lifo: not scheduled by time */
    }
}

/* Min-heap of (death time, slot) for the live blocks. */
typedef struct {
    long due;
    long slot;
} death_t;
static death_t *heap;
static long heap_len;

static void heap_push(long due, long slot) {
    long i = heap_len++;
    while (i > 0 && heap[(i - 1) / 2].due > due) {
        heap[i] = heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    heap[i] = (death_t){due, slot};
}

static death_t heap_pop(void) {
    death_t top = heap[0], last = heap[--heap_len];
    long i = 0;
    for (;;) {
        long c = 2 * i + 1;
        if (c >= heap_len) break;
        if (c + 1 < heap_len && heap[c + 1].due < heap[c].due) c++;
        if (heap[c].due >= last.due) break;
        heap[i] = heap[c];
        i = c;
    }
    if (heap_len) heap[i] = last;
    return top;
}

int main(int argc, char **argv) {
    static const tsb_opt_t opts[] = {
        {"ops", &opt_ops, NULL, "operations before the final frees"},
        {"slots", &opt_slots, NULL, "most blocks live at once"},
        {"seed", &opt_seed, NULL, "random seed"},
        {"realloc-pct", &opt_realloc, NULL, "percent of due blocks reallocated, not freed"},
        {"calloc-pct", &opt_calloc, NULL, "percent of allocations made with calloc"},
        {"size", NULL, &opt_size, "size distribution"},
        {"life", NULL, &opt_life, "lifetime distribution"},
        {"out", NULL, &opt_out, "output file, - for stdout"},
        {0}};
    tsb_start("gentrace");
    tsb_parse(argc, argv, opts);
    tsb_require(opt_ops >= 1 && opt_slots >= 1 && opt_slots <= (1L << 26), "ops, slots >= 1");
    tsb_require(opt_realloc >= 0 && opt_realloc <= 100 && opt_calloc >= 0 && opt_calloc <= 100,
                "percentages in 0..100");
    dist_t size = parse_dist(opt_size, 0), life = parse_dist(opt_life, 1);

    FILE *out = strcmp(opt_out, "-") ? fopen(opt_out, "w") : stdout;
    if (!out) tsb_fail("cannot write %s: %s", opt_out, strerror(errno));
    uint64_t rng = tsb_mix((uint64_t)opt_seed);

    heap = malloc(sizeof(death_t) * (size_t)opt_slots);
    long *free_slots = malloc(sizeof(long) * (size_t)opt_slots);
    long *stack = malloc(sizeof(long) * (size_t)opt_slots); /* lifo: live slots, newest last */
    if (!heap || !free_slots || !stack) tsb_fail("out of memory");
    long nfree = 0, nstack = 0;
    for (long s = opt_slots - 1; s >= 0; s--) free_slots[nfree++] = s;

    fprintf(out,
            "tstrace 1\n# gentrace --ops %ld --slots %ld --seed %ld --size %s --life %s "
            "--realloc-pct %ld --calloc-pct %ld\nslots %ld\n",
            opt_ops, opt_slots, opt_seed, opt_size, opt_life, opt_realloc, opt_calloc, opt_slots);
    long emitted = 0, mallocs = 0, frees = 0, reallocs = 0;
    uint64_t bytes = 0;
    for (long now = 0; emitted < opt_ops; now++) {
        long live = opt_slots - nfree;
        int lifo = life.kind == 's';
        int release = live == opt_slots ||
                      (live > 0 && (lifo ? unit(&rng) * 100 < life.a : heap[0].due <= now));
        if (release) {
            long slot = lifo ? stack[--nstack] : heap_pop().slot;
            if (tsb_range(&rng, 1, 100) <= (size_t)opt_realloc) {
                size_t n = draw_size(&size, &rng);
                fprintf(out, "r %ld %zu\n", slot, n);
                bytes += n;
                reallocs++;
                if (lifo)
                    stack[nstack++] = slot;
                else
                    heap_push(now + 1 + draw_life(&life, &rng), slot);
            } else {
                fprintf(out, "f %ld\n", slot);
                free_slots[nfree++] = slot;
                frees++;
            }
        } else {
            long slot = free_slots[--nfree];
            size_t n = draw_size(&size, &rng);
            if (tsb_range(&rng, 1, 100) <= (size_t)opt_calloc) {
                size_t elem = n >= 64 ? 16 : 1;
                fprintf(out, "c %ld %zu %zu\n", slot, (n + elem - 1) / elem, elem);
                bytes += (n + elem - 1) / elem * elem;
            } else {
                fprintf(out, "m %ld %zu\n", slot, n);
                bytes += n;
            }
            mallocs++;
            if (lifo)
                stack[nstack++] = slot;
            else
                heap_push(now + 1 + draw_life(&life, &rng), slot);
        }
        emitted++;
    }
    /* Drain: free what is still live, in the order it would have died. */
    while (life.kind == 's' ? nstack > 0 : heap_len > 0) {
        long slot = life.kind == 's' ? stack[--nstack] : heap_pop().slot;
        fprintf(out, "f %ld\n", slot);
        frees++;
        emitted++;
    }
    if (fflush(out) != 0 || ferror(out)) tsb_fail("write error on %s", opt_out);
    if (out != stdout) fclose(out);
    /* The summary goes to stdout only when stdout is not the trace. */
    fprintf(out == stdout ? stderr : stdout,
            "gentrace: ops=%ld allocs=%ld reallocs=%ld frees=%ld bytes=%" PRIu64 " ok\n", emitted,
            mallocs, reallocs, frees, bytes);
    free(heap);
    free(free_slots);
    free(stack);
    return 0;
}
