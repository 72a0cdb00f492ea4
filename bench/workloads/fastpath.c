/* fastpath: the single-thread cost of one malloc/free pair, for each size in
 * --sizes, as ns per pair (and, under callgrind, instructions per pair:
 * tsbench --callgrind collects only inside tsb_pair_loop and dumps after each
 * call, one dump per size, in --sizes order).
 *
 * Each pair writes one byte of the block and reads it back, so the pair can
 * neither be deleted by the compiler nor skip touching the memory; the
 * read-back sum is the check (iters * sizes, a function of the arguments).
 * A warm-up loop (tsb_pair_warm, not collected) runs first for each size.
 */
#include "tsb.h"

static long opt_iters = 1500000, opt_warmup = 10000;
static const char *opt_sizes = "16,64,256,1024,4096,32768";

/* One malloc/free pair per iteration. noinline and named: callgrind's
 * --toggle-collect=tsb_pair_loop counts only what happens in here. */
__attribute__((noinline)) uint64_t tsb_pair_loop(size_t size, long iters) {
    uint64_t sum = 0;
    for (long i = 0; i < iters; i++) {
        volatile unsigned char *p = malloc(size);
        if (!p) tsb_fail("malloc(%zu) returned NULL", size);
        p[0] = (unsigned char)(i | 1);
        sum += p[0] != 0;
        free((void *)p);
    }
    return sum;
}

__attribute__((noinline)) uint64_t tsb_pair_warm(size_t size, long iters) {
    uint64_t sum = 0;
    for (long i = 0; i < iters; i++) {
        volatile unsigned char *p = malloc(size);
        if (!p) tsb_fail("malloc(%zu) returned NULL", size);
        p[0] = 1;
        sum += p[0];
        free((void *)p);
    }
    return sum;
}

int main(int argc, char **argv) {
    static const tsb_opt_t opts[] = {
        {"iters", &opt_iters, NULL, "pairs per size"},
        {"warmup", &opt_warmup, NULL, "uncounted pairs per size first"},
        {"sizes", NULL, &opt_sizes, "comma-separated block sizes"},
        {0}};
    tsb_start("fastpath");
    tsb_parse(argc, argv, opts);
    tsb_require(opt_iters >= 1 && opt_warmup >= 0, "iters >= 1, warmup >= 0");

    size_t sizes[32];
    int nsizes = 0;
    for (const char *s = opt_sizes; *s;) {
        char *end;
        unsigned long v = strtoul(s, &end, 10);
        tsb_require(end != s && v <= (1ul << 30) && nsizes < 32,
                    "--sizes: up to 32 sizes <= 1 GiB");
        sizes[nsizes++] = (size_t)v;
        s = *end == ',' ? end + 1 : end;
        tsb_require(*end == ',' || *end == 0, "--sizes: comma-separated numbers");
    }
    tsb_require(nsizes > 0, "--sizes: at least one size");

    char key[32];
    double total = 0;
    uint64_t check = 0;
    for (int k = 0; k < nsizes; k++) {
        tsb_pair_warm(sizes[k], opt_warmup);
        double t0 = tsb_now();
        check += tsb_pair_loop(sizes[k], opt_iters);
        double dt = tsb_now() - t0;
        total += dt;
        snprintf(key, sizeof key, "ns_%zu", sizes[k]);
        tsb_kv(key, "%.2f", dt * 1e9 / (double)opt_iters);
    }
    uint64_t expect = (uint64_t)opt_iters * (uint64_t)nsizes;
    if (check != expect) tsb_fail("check %" PRIu64 " != expected %" PRIu64, check, expect);
    tsb_kv("iters", "%ld", opt_iters);
    tsb_kv("sizes", "%s", opt_sizes);
    return tsb_ok(total, 1, check);
}
