/* memsim: replays an allocation trace (docs/trace-format.md; gentrace makes
 * random ones) with T threads, each replaying the whole trace R times on its
 * own slot table (seed 003's memsim -t T -r R).
 *
 * The driver uses no heap while it replays: the trace is parsed before the
 * clock starts into an operation array, and every table (operations, slots)
 * comes from mmap. So the allocator under test sees the trace's calls only.
 *
 * Every block carries a tag (head word, last byte) checked before realloc and
 * free; realloc must keep the head, calloc must return zeros. A broken
 * allocator fails; a malformed trace is an error with its line number.
 * check = operations replayed + bytes requested, a function of the trace.
 */
#include <pthread.h>
#include <sys/stat.h>

#include "tsb.h"

static long opt_threads = 4, opt_repeats = 20;
static const char *opt_trace = NULL;

enum { OP_MALLOC, OP_CALLOC, OP_REALLOC, OP_FREE };

typedef struct {
    uint32_t kind;
    uint32_t slot;
    uint64_t count; /* calloc's element count, else 1 */
    uint64_t size;  /* bytes (calloc: element size) */
} op_t;

typedef struct {
    void *ptr;
    size_t size;
    uint64_t tag;
} slot_t;

static op_t *ops;
static size_t nops, nslots;
static pthread_barrier_t start_line;

typedef struct {
    long id;
    uint64_t check;
    long bad;
    const char *why;
    size_t bad_op;
    tsb_span_t span; /* the replays */
} worker_t;

/* ---- parsing (before the clock) ---- */

static const char *skip_blank(const char *p, const char *end) {
    while (p < end && (*p == ' ' || *p == '\t' || *p == '\r')) p++;
    return p;
}

static int read_number(const char **pp, const char *end, uint64_t *out) {
    const char *p = skip_blank(*pp, end);
    uint64_t v = 0;
    const char *start = p;
    while (p < end && *p >= '0' && *p <= '9') {
        if (v > (UINT64_MAX - 9) / 10) return 0;
        v = v * 10 + (uint64_t)(*p++ - '0');
    }
    if (p == start) return 0;
    *out = v;
    *pp = p;
    return 1;
}

/* Two passes over the mapped file: count, then fill. Returns number of ops. */
static size_t parse(const char *text, size_t len, op_t *out, unsigned char *live, size_t *slots) {
    const char *p = text, *end = text + len;
    size_t n = 0, line = 0, max_slot = 0;
    int header = 0;
    while (p < end) {
        const char *eol = memchr(p, '\n', (size_t)(end - p));
        if (!eol) eol = end;
        line++;
        const char *q = skip_blank(p, eol);
        if (q == eol || *q == '#') goto next;
        if (!header) {
            if (eol - q < 9 || memcmp(q, "tstrace 1", 9) != 0)
                tsb_fail("%s:%zu: not a trace (expected 'tstrace 1')", opt_trace, line);
            header = 1;
            goto next;
        }
        char kind = *q++;
        uint64_t slot = 0, a = 0, b = 0;
        if (kind == 's' && eol - q >= 4 && !memcmp(q, "lots", 4)) {
            q += 4;
            if (!read_number(&q, eol, &a)) goto bad;
            goto next; /* a hint only; the table is sized from the slots used */
        }
        if (!read_number(&q, eol, &slot) || slot >= (1u << 26)) goto bad;
        op_t op = {0, (uint32_t)slot, 1, 0};
        switch (kind) {
        case 'm':
            if (!read_number(&q, eol, &a)) goto bad;
            op.kind = OP_MALLOC, op.size = a;
            break;
        case 'c':
            if (!read_number(&q, eol, &a) || !read_number(&q, eol, &b)) goto bad;
            if (b && a > (1ull << 40) / b) goto bad;
            op.kind = OP_CALLOC, op.count = a, op.size = b;
            break;
        case 'r':
            if (!read_number(&q, eol, &a)) goto bad;
            op.kind = OP_REALLOC, op.size = a;
            break;
        case 'f':
            op.kind = OP_FREE;
            break;
        default:
            goto bad;
        }
        if (op.size > (1ull << 40)) goto bad;
        if (skip_blank(q, eol) != eol && *skip_blank(q, eol) != '#') goto bad;
        if (slot > max_slot) max_slot = slot;
        if (out) {
            /* Liveness: m/c need an empty slot, f a live one; r works on both. */
            if ((op.kind == OP_MALLOC || op.kind == OP_CALLOC) && live[slot])
                tsb_fail("%s:%zu: slot %" PRIu64 " is already live", opt_trace, line, slot);
            if (op.kind == OP_FREE && !live[slot])
                tsb_fail("%s:%zu: free of empty slot %" PRIu64, opt_trace, line, slot);
            live[slot] = op.kind != OP_FREE;
            out[n] = op;
        }
        n++;
        goto next;
    bad:
        tsb_fail("%s:%zu: malformed line", opt_trace, line);
    next:
        p = eol + 1;
    }
    if (!header) tsb_fail("%s: empty trace", opt_trace);
    *slots = n ? max_slot + 1 : 1;
    return n;
}

/* ---- replay (timed; no heap use except the trace's own calls) ---- */

static int head_ok(const void *p, size_t n, uint64_t tag) {
    if (n >= 8) return *(const volatile uint64_t *)p == tag;
    return n == 0 || *(const volatile unsigned char *)p == (unsigned char)tag;
}

static void *worker(void *arg) {
    worker_t *w = arg;
    size_t table_bytes = sizeof(slot_t) * nslots;
    slot_t *slots = tsb_pages(table_bytes);
    pthread_barrier_wait(&start_line);
    w->span.start = tsb_now();
    uint64_t check = 0;
    for (long rep = 0; rep < opt_repeats && !w->bad; rep++) {
        for (size_t i = 0; i < nops; i++) {
            const op_t *op = &ops[i];
            slot_t *s = &slots[op->slot];
            uint64_t tag = ((uint64_t)w->id << 56) ^ ((uint64_t)rep << 36) ^ (uint64_t)i;
            size_t n = (size_t)(op->count * op->size);
            switch (op->kind) {
            case OP_MALLOC:
                s->ptr = malloc(n);
                if (!s->ptr && n) goto oom;
                break;
            case OP_CALLOC:
                s->ptr = calloc((size_t)op->count, (size_t)op->size);
                if (!s->ptr && n) goto oom;
                for (size_t k = 0; k < n && k < 64; k++)
                    if (((volatile unsigned char *)s->ptr)[k]) goto not_zero;
                if (n && ((volatile unsigned char *)s->ptr)[n - 1]) goto not_zero;
                break;
            case OP_REALLOC: {
                if (s->ptr && !tsb_tag_ok(s->ptr, s->size, s->tag)) goto corrupt;
                size_t keep = s->size < n ? s->size : n;
                void *q = realloc(s->ptr, n);
                if (!q && n) goto oom;
                if (q && s->ptr && !head_ok(q, keep, s->tag)) goto lost;
                s->ptr = q;
                break;
            }
            case OP_FREE:
                if (!tsb_tag_ok(s->ptr, s->size, s->tag)) goto corrupt;
                free(s->ptr);
                s->ptr = NULL;
                n = 0;
                break;
            }
            s->size = n;
            s->tag = tag;
            if (s->ptr) tsb_tag(s->ptr, n, tag);
            check += 1 + n;
            continue;
        oom:
            w->why = "allocation returned NULL";
            goto fail;
        not_zero:
            w->why = "calloc returned non-zero memory";
            goto fail;
        corrupt:
            w->why = "block corrupted before realloc/free";
            goto fail;
        lost:
            w->why = "realloc lost the block's contents";
        fail:
            w->bad = 1;
            w->bad_op = i;
            break;
        }
        /* Blocks the trace leaves live are freed between repetitions. */
        for (size_t k = 0; k < nslots; k++) {
            if (!slots[k].ptr) continue;
            if (!w->bad && !tsb_tag_ok(slots[k].ptr, slots[k].size, slots[k].tag)) {
                w->bad = 1;
                w->why = "block corrupted at end of trace";
                w->bad_op = nops;
            }
            free(slots[k].ptr);
            slots[k].ptr = NULL;
        }
    }
    w->span.end = tsb_now();
    w->check = check;
    tsb_pages_free(slots, table_bytes);
    return NULL;
}

int main(int argc, char **argv) {
    static const tsb_opt_t opts[] = {
        {"trace", NULL, &opt_trace, "trace file (gentrace makes one)"},
        {"threads", &opt_threads, NULL, "threads, each replaying the whole trace"},
        {"repeats", &opt_repeats, NULL, "replays per thread"},
        {0}};
    tsb_start("memsim");
    tsb_parse(argc, argv, opts);
    tsb_require(opt_trace != NULL, "--trace FILE is required");
    tsb_require(opt_threads >= 1 && opt_threads <= 4096 && opt_repeats >= 1,
                "1 <= threads <= 4096, repeats >= 1");

    int fd = open(opt_trace, O_RDONLY | O_CLOEXEC);
    if (fd < 0) tsb_fail("cannot open %s: %s", opt_trace, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) tsb_fail("cannot stat %s", opt_trace);
    size_t len = (size_t)st.st_size;
    const char *text = len ? mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0) : "";
    if (text == MAP_FAILED) tsb_fail("cannot map %s: %s", opt_trace, strerror(errno));
    close(fd);

    size_t counted_slots;
    nops = parse(text, len, NULL, NULL, &counted_slots);
    ops = tsb_pages(sizeof(op_t) * (nops ? nops : 1));
    unsigned char *live = tsb_pages(counted_slots);
    parse(text, len, ops, live, &nslots);
    tsb_pages_free(live, counted_slots);
    if (len) munmap((void *)text, len);

    uint64_t per_replay = 0;
    for (size_t i = 0; i < nops; i++)
        per_replay += 1 + (ops[i].kind == OP_FREE ? 0 : ops[i].count * ops[i].size);

    worker_t *w = tsb_pages(sizeof(worker_t) * (size_t)opt_threads);
    pthread_barrier_init(&start_line, NULL, (unsigned)opt_threads + 1);
    for (long t = 0; t < opt_threads; t++) w[t].id = t;
    tsb_run_threads(opt_threads, worker, w, sizeof *w, &start_line);
    double elapsed = tsb_spans_elapsed(&w[0].span, opt_threads, sizeof *w);

    uint64_t check = 0;
    for (long t = 0; t < opt_threads; t++) {
        if (w[t].bad) tsb_fail("thread %ld, operation %zu: %s", t, w[t].bad_op, w[t].why);
        check += w[t].check;
    }
    uint64_t expect = per_replay * (uint64_t)opt_repeats * (uint64_t)opt_threads;
    if (check != expect) tsb_fail("check %" PRIu64 " != expected %" PRIu64, check, expect);
    tsb_kv("ops", "%zu", nops);
    tsb_kv("repeats", "%ld", opt_repeats);
    tsb_kv("slots", "%zu", nslots);
    return tsb_ok(elapsed, opt_threads, check);
}
