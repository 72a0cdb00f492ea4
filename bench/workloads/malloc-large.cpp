/* malloc-large: big zero-filled buffers through C++ new. 20 buffers of
 * 5-25 MB are made with `new char[n]()` (value-initialised: the compiler
 * zero-fills them, touching every page), then `iters` times a random one is
 * deleted and replaced by a new one of random size. An allocator pays here
 * for mapping and unmapping big blocks (or for keeping them), and for the
 * page faults of memory it hands out fresh.
 *
 * Each new buffer is checked for zeros (one byte per 4 KiB page and its
 * last byte) and tagged in its first word, one byte per page and its last
 * byte; the tags are checked before the delete. check (bytes allocated)
 * comes from the seeded stream: a function of the arguments.
 */
#include <new>

#include "tsb.h"

static long opt_buffers = 20, opt_iters = 2000, opt_min_mb = 5, opt_max_mb = 25;

#define PAGE 4096

struct buffer {
    char *p;
    size_t n;
    uint64_t tag;
};

static bool fresh_ok(const char *p, size_t n) {
    const volatile char *v = p;
    for (size_t i = 0; i < n; i += PAGE)
        if (v[i] != 0) return false;
    return v[n - 1] == 0;
}
static void put_tags(char *p, size_t n, uint64_t tag) {
    volatile char *v = p;
    for (size_t i = PAGE; i < n - 1; i += PAGE) v[i] = (char)(tag >> (i / PAGE % 8 * 8));
    tsb_tag(p, n, tag); /* first word and last byte */
}
static bool tags_ok(const char *p, size_t n, uint64_t tag) {
    const volatile char *v = p;
    for (size_t i = PAGE; i < n - 1; i += PAGE)
        if (v[i] != (char)(tag >> (i / PAGE % 8 * 8))) return false;
    return tsb_tag_ok(p, n, tag);
}

int main(int argc, char **argv) {
    static const tsb_opt_t opts[] = {
        {"buffers", &opt_buffers, NULL, "buffers alive at once"},
        {"iters", &opt_iters, NULL, "replacements"},
        {"min-mb", &opt_min_mb, NULL, "smallest buffer in MB (10^6 bytes)"},
        {"max-mb", &opt_max_mb, NULL, "largest buffer in MB"},
        {nullptr, nullptr, nullptr, nullptr}};
    tsb_start("malloc-large");
    tsb_parse(argc, argv, opts);
    tsb_require(opt_buffers >= 1 && opt_buffers <= 4096, "1 <= buffers <= 4096");
    tsb_require(opt_iters >= 0, "iters >= 0");
    tsb_require(opt_min_mb >= 1 && opt_max_mb >= opt_min_mb && opt_max_mb <= 4096,
                "1 <= min-mb <= max-mb <= 4096");

    buffer *bufs = static_cast<buffer *>(tsb_pages(sizeof(buffer) * (size_t)opt_buffers));
    uint64_t rng = tsb_mix(42), check = 0;
    long bad = 0;
    auto make = [&](buffer &b, uint64_t id) {
        size_t n = tsb_range(&rng, (size_t)opt_min_mb * 1000000, (size_t)opt_max_mb * 1000000);
        char *p = new char[n]();
        if (!fresh_ok(p, n)) bad++;
        b.p = p;
        b.n = n;
        b.tag = tsb_mix(id);
        put_tags(p, n, b.tag);
        check += n;
    };
    auto drop = [&](buffer &b) {
        if (!tags_ok(b.p, b.n, b.tag)) bad++;
        delete[] b.p;
        b.p = nullptr;
    };
    double t0 = tsb_now();
    for (long i = 0; i < opt_buffers; i++) make(bufs[i], (uint64_t)i);
    for (long i = 0; i < opt_iters; i++) {
        buffer &b = bufs[tsb_range(&rng, 0, (size_t)opt_buffers - 1)];
        drop(b);
        make(b, (uint64_t)(opt_buffers + i));
    }
    for (long i = 0; i < opt_buffers; i++) drop(bufs[i]);
    double elapsed = tsb_now() - t0;
    if (bad) tsb_fail("%ld buffers not zero-filled or corrupted", bad);
    tsb_kv("iters", "%ld", opt_iters);
    tsb_kv("peak_rss_kb", "%ld", tsb_peak_rss_kb());
    return tsb_ok(elapsed, 1, check);
}
