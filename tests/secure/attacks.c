/* Heap attacks, one small function each, run under LD_PRELOAD of an
 * allocator, each attack and size in a fresh process (this program again,
 * forked and exec'd, so that options read at start-up apply).
 *
 *   attacks --check secure   every attack must end as the hardened build
 *                            promises: abort with its exact message (or a
 *                            fault, for accesses to inaccessible memory)
 *   attacks --check tsalloc  the plain build catches what it caught before
 *                            and, where it does not, the attack goes unseen
 *   attacks --report         one line per probe: "<attack> <size> caught|missed"
 *                            (tests/secure/secure_report.sh, make secure-report)
 *
 * A child that is killed by a signal caught the attack; one that gets to the
 * end did not (a hijacked allocation counts as missed too). Impossible sizes
 * are caught when the call returns NULL with ENOMEM. A child still running
 * after PROBE_LIMIT seconds (an unseen overflow that spins on a lock it
 * overwrote) is killed by its alarm and counts as missed: a watchdog, not a
 * measurement, for probes that take milliseconds.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <errno.h>
#include <malloc.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

enum outcome { ABORTED, FAULTED, EXITED, HUNG };

#define PROBE_LIMIT 30

/* What the child must say: written to stdout before the attack, before
 * anything is freed (stdio's first output allocates its buffer). */
static char expect_msg[256];
static void expect(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void expect(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(expect_msg, sizeof expect_msg, fmt, ap);
    va_end(ap);
    printf("%s\n", expect_msg);
    fflush(stdout);
}

static void *volatile sink;

/* Hides from the compiler that the pointer is freed twice, or not a block. */
static void *launder(void *p) {
    void *volatile v = p;
    return v;
}
#define FREE(p) free(launder(p))
static char global_area[256] __attribute__((aligned(64)));

/* Blocks of other sizes freed in between: a quarantine or a LIFO list is
 * churned, but `n`'s own list is not. */
static void churn(size_t n) {
    void *v[64];
    size_t other = n == 48 ? 80 : 48;
    for (int r = 0; r < 4; r++) {
        for (int i = 0; i < 64; i++) v[i] = malloc(other);
        for (int i = 0; i < 64; i++) free(v[i]);
    }
}

/* ---- the attacks: each gets the size and aborts, faults or returns ---------- */

static void overflow_byte(size_t n) {
    unsigned char *p = malloc(n);
    memset(p, 1, n);
    expect("tsalloc: free(): heap overflow after block %p (size %zu)", (void *)p, n);
    ((volatile unsigned char *)p)[n] ^= 0x5a; /* one byte past the end */
    FREE(p);
}

static void overflow_word(size_t n) {
    unsigned char *p = malloc(n);
    expect("tsalloc: realloc(): heap overflow after block %p (size %zu)", (void *)p, n);
    memset(p, 0x41, n + 8);
    sink = realloc(launder(p), n + 1);
}

/* A linear overflow of 4 KiB + 64 bytes: over the slack and into whatever
 * follows the block. The size in the message is the block's capacity when the
 * overflow reached its trailer: only the prefix is compared. */
static void overflow_next(size_t n) {
    unsigned char *p = malloc(n);
    void *q = malloc(n); /* a neighbour, on most allocators */
    expect("tsalloc: free(): heap overflow after block %p (size ", (void *)p);
    memset(p + n, 0x41, 4096 + 64);
    sink = q;
    FREE(p);
}

/* A linear overflow from the block that lies closest below a 4 MiB
 * boundary (the end of a tsalloc segment) across that boundary. */
static void overflow_segment_end(size_t n) {
    enum { N = 40 };
    const uintptr_t seg = (uintptr_t)4 << 20;
    unsigned char *v[N], *p = NULL;
    for (int i = 0; i < N; i++) {
        v[i] = malloc(n);
        if (!p || ((uintptr_t)v[i] + n) % seg > ((uintptr_t)p + n) % seg) p = v[i];
    }
    expect("SIGSEGV");
    uintptr_t end = ((uintptr_t)p + n + seg - 1) & ~(seg - 1);
    memset(p + n, 0x41, end - ((uintptr_t)p + n) + 64);
    for (int i = 0; i < N; i++) FREE(v[i]);
}

/* Eight bytes before a block whose lower neighbour is live (the pair of the
 * blocks asked for that lie closest together): on that neighbour's end. */
static void underflow(size_t n) {
    /* Enough small blocks to fill a whole run of a page (random order) */
    enum { MAX = 600 };
    unsigned char *v[MAX];
    int N = n <= 1024 ? MAX : 16;
    for (int i = 0; i < N; i++) v[i] = malloc(n);
    unsigned char *p = NULL, *prev = NULL;
    for (int i = 0; i < N; i++)
        for (int j = 0; j < N; j++)
            if (v[j] < v[i] && (!p || (size_t)(v[i] - v[j]) < (size_t)(p - prev))) {
                p = v[i];
                prev = v[j];
            }
    if (!p) return;
    expect("tsalloc: free(): heap overflow after block %p (size ", (void *)prev);
    memset(p - 8, 0x41, 8);
    for (int i = 0; i < N; i++)
        if (v[i] != p) FREE(v[i]);
    FREE(p);
}

static void uaf_write(size_t n) {
    unsigned char *p = malloc(n);
    expect("tsalloc: use after free: block %p written after free", (void *)p);
    memset(p, 1, n);
    FREE(p);
    ((volatile unsigned char *)p)[n / 2 < 1024 ? n / 2 : 1024] = 0x41;
    churn(n);
    malloc_trim(0);
    void *v[8];
    for (int i = 0; i < 8; i++) v[i] = malloc(n); /* the next owners */
    for (int i = 0; i < 8; i++) FREE(v[i]);
    malloc_trim(0);
}

/* A use after free that plants a pointer in the freed block's first word
 * (where most free lists keep their link): does malloc hand it out? */
static void freelist_poison(size_t n) {
    unsigned char *p = malloc(n);
    expect("tsalloc: use after free: block %p written after free", (void *)p);
    FREE(p);
    *(void *volatile *)p = global_area;
    for (int i = 0; i < 4; i++) {
        void *q = launder(malloc(n));
        if (q == (void *)global_area) {
            printf("hijacked\n");
            _exit(0);
        }
    }
    malloc_trim(0);
}

/* The same with the quarantine off (TSALLOC_QUARANTINE=0): the link itself. */
static void freelist_link(size_t n) {
    unsigned char *p = malloc(n);
    expect("tsalloc: malloc(): corrupted free list at block %p", (void *)p);
    FREE(p);
    *(void *volatile *)p = global_area;
    for (int i = 0; i < 4; i++)
        if (launder(malloc(n)) == (void *)global_area) {
            printf("hijacked\n");
            _exit(0);
        }
}

static void double_free(size_t n) {
    void *p = malloc(n);
    expect("tsalloc: free(): double free of %p", p);
    FREE(p);
    FREE(p);
}

static void double_free_delayed(size_t n) {
    void *p = malloc(n);
    expect("tsalloc: free(): double free of %p", p);
    FREE(p);
    churn(n);
    FREE(p);
}

static void double_free_interleaved(size_t n) {
    void *p = malloc(n), *q = malloc(n);
    expect("tsalloc: free(): double free of %p", p);
    FREE(p);
    FREE(q);
    FREE(p);
}

/* Freed, then its size asked again (a LIFO allocator hands p back): the
 * second free of p then frees someone else's block. */
static void double_free_reused(size_t n) {
    void *p = malloc(n);
    expect("tsalloc: free(): double free of %p", p);
    FREE(p);
    void *q = malloc(n);
    FREE(p);
    sink = q;
}

static void invalid_free(size_t n) {
    (void)n;
    void *p = global_area + 64;
    expect("tsalloc: free(): invalid pointer %p", p);
    FREE(p);
}

static void stack_free(size_t n) {
    (void)n;
    char local[128] __attribute__((aligned(64)));
    void *volatile p = local + 64;
    memset(local, 0, sizeof local);
    expect("tsalloc: free(): invalid pointer %p", (void *)p);
    FREE(p);
}

static void interior_free(size_t n) {
    char *p = malloc(n);
    char *volatile inside = p + 8;
    expect("tsalloc: free(): invalid pointer %p", (void *)inside);
    FREE(inside);
}

static void zero_size_write(size_t n) {
    (void)n;
    char *volatile p = malloc(0);
    expect("SIGSEGV");
    p[0] = 1;
    sink = p;
    FREE(p);
}

static void *cxx_symbol(const char *name) {
    void *f = dlsym(RTLD_DEFAULT, name);
    if (!f && dlopen("libstdc++.so.6", RTLD_NOW | RTLD_GLOBAL)) f = dlsym(RTLD_DEFAULT, name);
    return f;
}

typedef void delete_fn(void *);
/* A block of operator new ("_Znwm") or new[] ("_Znam"); NULL where the
 * program has no libstdc++ to find them in. */
static void *cxx_new(const char *name, size_t n) {
    void *(*op_new)(size_t) = (void *(*)(size_t))cxx_symbol(name);
    return op_new ? op_new(n) : NULL;
}

/* operator delete(void *, size_t) told a size the block was not made with. */
static void sized_delete(size_t n) {
    void (*op_delete)(void *, size_t) = (void (*)(void *, size_t))cxx_symbol("_ZdlPvm");
    void *p = op_delete ? cxx_new("_Znwm", n) : NULL;
    if (!p) return;
    expect("tsalloc: operator delete(): size %zu does not match block %p (size %zu)", n + 16, p, n);
    op_delete(p, n + 16);
}

/* An array of new[] given to delete (the element destructors of all but
 * the first are skipped; with a cookie, the pointer is not the block). */
static void new_array_delete(size_t n) {
    delete_fn *op_delete = (delete_fn *)cxx_symbol("_ZdlPv");
    void *p = op_delete ? cxx_new("_Znam", n) : NULL;
    if (!p) return;
    expect("tsalloc: operator delete(): block %p was allocated by new[]", p);
    op_delete(p);
}

/* A block of new given to delete[]. */
static void new_delete_array(size_t n) {
    delete_fn *op_delete = (delete_fn *)cxx_symbol("_ZdaPv");
    void *p = op_delete ? cxx_new("_Znwm", n) : NULL;
    if (!p) return;
    expect("tsalloc: operator delete[](): block %p was not allocated by new[]", p);
    op_delete(p);
}

/* Blocks given to a deallocating function of another family
 * (TSALLOC_DEALLOC_MISMATCH, on by default in the hardened build): */
static void new_free(size_t n) { /* new, then free */
    void *p = cxx_new("_Znwm", n);
    if (!p) return;
    expect("tsalloc: free(): block %p was allocated by new", p);
    FREE(p);
}

static void new_array_free(size_t n) { /* new[], then free */
    void *p = cxx_new("_Znam", n);
    if (!p) return;
    expect("tsalloc: free(): block %p was allocated by new[]", p);
    FREE(p);
}

static void new_realloc(size_t n) { /* new, then realloc */
    void *p = cxx_new("_Znwm", n);
    if (!p) return;
    expect("tsalloc: realloc(): block %p was allocated by new", p);
    sink = realloc(launder(p), 2 * n);
}

static void malloc_delete(size_t n) { /* malloc, then delete */
    delete_fn *op_delete = (delete_fn *)cxx_symbol("_ZdlPv");
    if (!op_delete) return;
    void *p = malloc(n);
    expect("tsalloc: operator delete(): block %p was not allocated by new", p);
    op_delete(launder(p));
}

/* Sizes no allocator can give: NULL with ENOMEM is the right answer. */
static void huge_size(size_t n) {
    (void)n;
    expect("NULL");
    size_t sizes[] = {SIZE_MAX, SIZE_MAX - 4096, (size_t)PTRDIFF_MAX + 1, (size_t)PTRDIFF_MAX};
    for (unsigned i = 0; i < sizeof sizes / sizeof *sizes; i++) {
        errno = 0;
        void *p = malloc(sizes[i]);
        if (p || errno != ENOMEM) _exit(0);
        void *q = malloc(16);
        if (realloc(q, sizes[i]) || errno != ENOMEM) _exit(0);
        FREE(q);
        if (calloc(sizes[i] / 2 + 1, 2)) _exit(0);
        if (memalign(64, sizes[i])) _exit(0);
    }
    _exit(3); /* every call refused */
}

/* ---- the table ------------------------------------------------------------------ */

#define SMALL   (1u << 0) /* 8 B */
#define MEDIUM  (1u << 1) /* 4 KiB */
#define BIG     (1u << 2) /* 256 KiB */
#define LARGE   (1u << 3) /* 1 MiB */
#define ANYSIZE (SMALL | MEDIUM | BIG | LARGE)

typedef struct attack {
    const char *name;
    void (*fn)(size_t);
    unsigned sizes;  /* where it applies */
    unsigned plain;  /* sizes the plain tsalloc catches */
    unsigned secure; /* sizes the secure build catches */
    const char *env; /* run with this variable set ("" none) */
    unsigned faults; /* sizes where the secure build stops it by a fault */
} attack_t;

static const attack_t attacks[] = {
    {"overflow-byte", overflow_byte, ANYSIZE, 0, ANYSIZE, "", 0},
    {"overflow-word", overflow_word, ANYSIZE, 0, ANYSIZE, "", 0},
    {"overflow-next", overflow_next, ANYSIZE, 0, ANYSIZE, "", LARGE},
    {"overflow-segment-end", overflow_segment_end, BIG, 0, BIG, "", BIG},
    {"underflow", underflow, SMALL | MEDIUM | BIG, 0, SMALL | MEDIUM | BIG, "", 0},
    {"uaf-write", uaf_write, ANYSIZE, 0, ANYSIZE, "", LARGE},
    {"freelist-poison", freelist_poison, SMALL | MEDIUM | BIG, 0, SMALL | MEDIUM | BIG, "", 0},
    {"freelist-link", freelist_link, SMALL | MEDIUM | BIG, 0, SMALL | MEDIUM | BIG,
     "TSALLOC_QUARANTINE=0", 0},
    {"double-free", double_free, ANYSIZE, ANYSIZE, ANYSIZE, "", 0},
    {"double-free-delayed", double_free_delayed, ANYSIZE, ANYSIZE, ANYSIZE, "", 0},
    {"double-free-interleaved", double_free_interleaved, ANYSIZE, ANYSIZE, ANYSIZE, "", 0},
    {"double-free-reused", double_free_reused, ANYSIZE, 0, ANYSIZE, "", 0},
    {"invalid-free", invalid_free, SMALL, SMALL, SMALL, "", 0},
    {"stack-free", stack_free, SMALL, SMALL, SMALL, "", 0},
    {"interior-free", interior_free, ANYSIZE, ANYSIZE, ANYSIZE, "", 0},
    {"zero-size-write", zero_size_write, SMALL, 0, SMALL, "", SMALL},
    {"sized-delete", sized_delete, ANYSIZE, 0, ANYSIZE, "", 0},
    {"new-array-delete", new_array_delete, ANYSIZE, 0, ANYSIZE, "", 0},
    {"new-delete-array", new_delete_array, ANYSIZE, 0, ANYSIZE, "", 0},
    {"new-free", new_free, ANYSIZE, 0, ANYSIZE, "", 0},
    {"new-array-free", new_array_free, ANYSIZE, 0, ANYSIZE, "", 0},
    {"new-realloc", new_realloc, ANYSIZE, 0, ANYSIZE, "", 0},
    {"malloc-delete", malloc_delete, ANYSIZE, 0, ANYSIZE, "", 0},
    {"huge-size", huge_size, SMALL, SMALL, SMALL, "", 0},
};

static const size_t size_of[] = {8, 4096, 256 * 1024, 1024 * 1024};

/* ---- the driver ------------------------------------------------------------------ */

static const attack_t *find(const char *name) {
    for (unsigned i = 0; i < sizeof attacks / sizeof *attacks; i++)
        if (!strcmp(attacks[i].name, name)) return &attacks[i];
    return NULL;
}

static size_t read_all(int fd, char *buf, size_t cap) {
    size_t len = 0;
    ssize_t n;
    while (len + 1 < cap && (n = read(fd, buf + len, cap - 1 - len)) > 0) len += (size_t)n;
    buf[len] = 0;
    return len;
}

/* Runs one probe in a fresh process (this program again, so that options
 * read at start-up apply); fills the expected line and the child's stderr. */
static enum outcome run_probe(const attack_t *a, size_t n, char *want, size_t want_cap, char *err,
                              size_t err_cap, int *sig) {
    int out[2], errp[2];
    if (pipe(out) || pipe(errp)) {
        perror("pipe");
        exit(2);
    }
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(out[1], 1);
        dup2(errp[1], 2);
        close(out[0]);
        close(errp[0]);
        if (*a->env) putenv((char *)a->env);
        alarm(PROBE_LIMIT); /* kept across exec */
        char size[32];
        snprintf(size, sizeof size, "%zu", n);
        execl("/proc/self/exe", "attacks", "--one", a->name, size, (char *)NULL);
        _exit(127);
    }
    close(out[1]);
    close(errp[1]);
    read_all(out[0], want, want_cap);
    read_all(errp[0], err, err_cap);
    close(out[0]);
    close(errp[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    char *nl = strchr(want, '\n');
    if (nl) *nl = 0;
    *sig = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
    if (*sig == SIGALRM) return HUNG;
    if (WIFSIGNALED(status)) return WTERMSIG(status) == SIGABRT ? ABORTED : FAULTED;
    if (WIFEXITED(status) && WEXITSTATUS(status) == 3) return ABORTED; /* refused: caught */
    return EXITED;
}

static int check(const char *build) {
    int secure = !strcmp(build, "secure");
    int failures = 0, probes = 0;
    for (unsigned i = 0; i < sizeof attacks / sizeof *attacks; i++) {
        const attack_t *a = &attacks[i];
        if (!secure && *a->env) continue; /* an option of the secure build */
        for (unsigned s = 0; s < 4; s++) {
            if (!(a->sizes & 1u << s)) continue;
            char want[256], err[4096];
            int sig;
            enum outcome o = run_probe(a, size_of[s], want, sizeof want, err, sizeof err, &sig);
            unsigned catches = secure ? a->secure : a->plain;
            int ok;
            probes++;
            if (!(catches & 1u << s)) {
                /* not caught: the attack went unseen (the plain build may
                 * crash or spin later on what it corrupted: no message of
                 * ours, but for an assertion of the checked build) */
                ok = o == EXITED ||
                     (!secure &&
                      (o == FAULTED || o == HUNG ||
                       (o == ABORTED && strstr(err, "tsalloc: assertion failed: ") == err)));
            } else if (!strcmp(want, "NULL")) {
                ok = o == ABORTED && sig == 0;
            } else if (!secure) {
                /* caught with the message it gives, or by a fault */
                ok = (o == ABORTED && strstr(err, want) == err) || o == FAULTED;
            } else if (!(a->faults & 1u << s)) {
                /* plain: caught with the message it gives (double free, invalid pointer) */
                ok = o == ABORTED && sig == SIGABRT && strstr(err, want) == err;
            } else {
                ok = o == FAULTED && sig == SIGSEGV;
            }
            if (!ok) {
                failures++;
                fprintf(stderr, "FAIL %s %zu on %s: %s (signal %d), wanted \"%s\", stderr: %s\n",
                        a->name, size_of[s], build,
                        o == EXITED    ? "not caught"
                        : o == HUNG    ? "hung"
                        : o == ABORTED ? "aborted"
                                       : "faulted",
                        sig, want, err);
            }
        }
    }
    printf("attacks --check %s: %d probes, %d failed\n", build, probes, failures);
    return failures ? 1 : 0;
}

static int report(void) {
    int caught = 0, probes = 0;
    for (unsigned i = 0; i < sizeof attacks / sizeof *attacks; i++) {
        const attack_t *a = &attacks[i];
        for (unsigned s = 0; s < 4; s++) {
            if (!(a->sizes & 1u << s)) continue;
            char want[256], err[4096];
            int sig;
            enum outcome o = run_probe(a, size_of[s], want, sizeof want, err, sizeof err, &sig);
            probes++;
            int seen = o == ABORTED || o == FAULTED;
            caught += seen;
            printf("%s %zu %s\n", a->name, size_of[s], seen ? "caught" : "missed");
        }
    }
    printf("total %d %d\n", caught, probes);
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 4 && !strcmp(argv[1], "--one")) {
        const attack_t *a = find(argv[2]);
        if (!a) return 2;
        a->fn(strtoull(argv[3], NULL, 10));
        return 0; /* the attack went unseen */
    }
    if (argc == 3 && !strcmp(argv[1], "--check")) return check(argv[2]);
    if (argc == 2 && !strcmp(argv[1], "--report")) return report();
    fprintf(stderr, "usage: attacks --check secure|tsalloc | --report | --one NAME SIZE\n");
    return 2;
}
