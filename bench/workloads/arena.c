/* arena: objects that all die together. Each round builds a parse tree of
 * `objects` nodes of mixed sizes (mostly 24-256 B, a few up to 4 KiB), each
 * hung under one of the 64 nodes made before it, walks it, then drops it:
 *   --api malloc  every node freed one by one with free(), in the order
 *                 they were made (the cheapest order for most allocators);
 *   --api heap    the nodes come from a heap of the preloaded allocator's
 *                 own, made for the round and destroyed whole: tsalloc's
 *                 ts_heap_new/ts_heap_malloc/ts_heap_destroy, or mimalloc's
 *                 mi_heap_new/mi_heap_malloc/mi_heap_destroy (built in only
 *                 when <mimalloc.h> is found). An allocator with neither
 *                 fails the run ("no heap API").
 * TSB_ARENA_API=heap in the environment does what --api heap does, so that
 * tsbench can run both ways as two allocators of one workload, interleaved
 * and paired (--allocator tsalloc-heap=PATH:TSB_ARENA_API=heap).
 * time_s is the drops only; build_s the builds (heap creation included),
 * walk checks every node's tag. check: nodes and bytes over all rounds, a
 * function of the arguments. peak_rss_kb is the process's peak.
 */
#include "tsb.h"

#if defined(__has_include)
#if __has_include(<mimalloc.h>)
#include <mimalloc.h>
#define ARENA_MIMALLOC 1
#endif
#endif

static long opt_objects = 200000, opt_rounds = 30;
static const char *opt_api = "malloc";

typedef struct node {
    struct node *child, *sibling;
    uint32_t size, index;
} node_t;

/* The heap API found in the process, by dlsym (the workload links only
 * against libc; the allocator is preloaded). */
static void *(*heap_new)(void);
static void *(*heap_malloc)(void *heap, size_t size);
static void (*heap_destroy)(void *heap);
static const char *heap_api = "none";

static int find_sym(void *fnptr, const char *name) {
    void *sym = dlsym(RTLD_DEFAULT, name);
    memcpy(fnptr, &sym, sizeof sym); /* object to function pointer, without a cast */
    return sym != NULL;
}

static int find_heap_api(void) {
    if (find_sym(&heap_new, "ts_heap_new") && find_sym(&heap_malloc, "ts_heap_malloc") &&
        find_sym(&heap_destroy, "ts_heap_destroy")) {
        heap_api = "ts_heap";
        return 1;
    }
#ifdef ARENA_MIMALLOC
    /* The header's types, checked against the pointers used. */
    __typeof__(&mi_heap_new) mi_new;
    __typeof__(&mi_heap_malloc) mi_malloc;
    __typeof__(&mi_heap_destroy) mi_destroy;
    if (find_sym(&mi_new, "mi_heap_new") && find_sym(&mi_malloc, "mi_heap_malloc") &&
        find_sym(&mi_destroy, "mi_heap_destroy")) {
        find_sym(&heap_new, "mi_heap_new");
        find_sym(&heap_malloc, "mi_heap_malloc");
        find_sym(&heap_destroy, "mi_heap_destroy");
        heap_api = "mi_heap";
        return 1;
    }
#endif
    return 0;
}

/* Mostly small, as the nodes and strings of a parser. */
static size_t node_size(uint64_t *rng) {
    uint64_t r = tsb_rand(rng) & 1023;
    if (r < 560) return tsb_range(rng, sizeof(node_t), 64);
    if (r < 920) return tsb_range(rng, 65, 256);
    if (r < 1013) return tsb_range(rng, 257, 1024);
    return tsb_range(rng, 1025, 4096);
}

int main(int argc, char **argv) {
    tsb_opt_t opts[] = {
        {"objects", &opt_objects, NULL, "nodes per round"},
        {"rounds", &opt_rounds, NULL, "rounds"},
        {"api", NULL, &opt_api, "malloc (free each node) or heap (destroy a heap)"},
        {NULL, NULL, NULL, NULL},
    };
    tsb_start("arena");
    const char *env_api = getenv("TSB_ARENA_API");
    if (env_api && *env_api) opt_api = env_api;
    tsb_parse(argc, argv, opts);
    tsb_require(opt_objects >= 2 && opt_rounds >= 1, "--objects >= 2, --rounds >= 1");
    int use_heap = !strcmp(opt_api, "heap");
    tsb_require(use_heap || !strcmp(opt_api, "malloc"), "--api malloc or heap");
    if (use_heap && !find_heap_api())
        tsb_fail("no heap API in this allocator (ts_heap_* or mi_heap_*)");

    size_t n = (size_t)opt_objects;
    node_t **nodes = tsb_pages(n * sizeof *nodes);
    node_t **stack = tsb_pages(n * sizeof *stack);
    double build_s = 0, drop_s = 0;
    uint64_t check = 0, bad = 0;
    for (long round = 0; round < opt_rounds; round++) {
        uint64_t rng = tsb_mix(0xa7e4au + (uint64_t)round);
        double t0 = tsb_now();
        void *heap = use_heap ? heap_new() : NULL;
        if (use_heap && !heap) tsb_fail("%s_new returned NULL", heap_api);
        for (size_t i = 0; i < n; i++) {
            size_t size = node_size(&rng);
            node_t *p = use_heap ? heap_malloc(heap, size) : malloc(size);
            if (!p) tsb_fail("allocation of %zu bytes returned NULL", size);
            p->child = p->sibling = NULL;
            p->size = (uint32_t)size;
            p->index = (uint32_t)i;
            tsb_tag((char *)p + sizeof *p, size - sizeof *p, (uint64_t)i * 2654435761u);
            nodes[i] = p;
            if (i) { /* under one of the 64 nodes before it */
                node_t *parent = nodes[i - 1 - tsb_range(&rng, 0, i < 64 ? i - 1 : 63)];
                p->sibling = parent->child;
                parent->child = p;
            }
        }
        double t1 = tsb_now();
        /* The walk: every node once, tags intact (not timed). */
        size_t depth = 0, seen = 0;
        uint64_t bytes = 0;
        stack[depth++] = nodes[0];
        while (depth) {
            node_t *p = stack[--depth];
            seen++;
            bytes += p->size;
            if (!tsb_tag_ok((char *)p + sizeof *p, p->size - sizeof *p,
                            (uint64_t)p->index * 2654435761u))
                bad++;
            for (node_t *c = p->child; c; c = c->sibling) stack[depth++] = c;
        }
        if (seen != n) tsb_fail("round %ld: the walk saw %zu nodes of %zu", round, seen, n);
        check += seen * 1000003u + bytes;
        double t2 = tsb_now();
        if (use_heap)
            heap_destroy(heap);
        else
            for (size_t i = 0; i < n; i++) free(nodes[i]);
        double t3 = tsb_now();
        build_s += t1 - t0;
        drop_s += t3 - t2;
    }
    if (bad) tsb_fail("%" PRIu64 " nodes lost their tags", bad);
    tsb_kv("api", "%s", use_heap ? heap_api : "malloc");
    tsb_kv("objects", "%ld", opt_objects);
    tsb_kv("rounds", "%ld", opt_rounds);
    tsb_kv("build_s", "%.6f", build_s);
    tsb_kv("drop_ns_per_object", "%.3f", drop_s * 1e9 / ((double)n * (double)opt_rounds));
    tsb_kv("peak_rss_kb", "%ld", tsb_peak_rss_kb());
    return tsb_ok(drop_s, 1, check);
}
