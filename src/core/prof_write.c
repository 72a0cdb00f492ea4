/* The heap profiler's output: profiles in the gperftools heap-profile text
 * format (read by `go tool pprof`, google-pprof and `tsalloc prof`), their
 * file names, and the leak report at exit.
 *
 * A profile is a header with the totals, one line per call stack:
 *   <live objects>: <live bytes> [<allocated objects>: <allocated bytes>] @ 0x.. 0x..
 * (estimates, already scaled, so the header says `heapprofile`: no rate for
 * the reader to apply), then `MAPPED_LIBRARIES:` and /proc/self/maps, which
 * lets the reader symbolise the addresses offline.
 *
 * Invariants: everything here runs with the profiler's lock held and never
 * allocates: output goes through one static buffer and write(2); the leak
 * report's sorting space is mapped. File names: TSALLOC_PROF_FILE with %p
 * the process id and %n the sequence number; without %n, a peak profile is
 * <name>.peak (the highest peak so far: rewritten at each new one) and a
 * numbered one <name>.<n>.
 */
#include "core/prof_internal.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <string.h>
#include <unistd.h>

#include "core/internal.h"

static char wbuf[1 << 14]; /* touched only by a write, but counted in the peak RSS after */

typedef struct writer {
    int fd;
    size_t n;
    bool failed;
} writer_t;

static void w_flush(writer_t *w) {
    size_t at = 0;
    while (at < w->n && !w->failed) {
        ssize_t k = write(w->fd, wbuf + at, w->n - at);
        if (k > 0)
            at += (size_t)k;
        else if (k < 0 && errno != EINTR)
            w->failed = true;
    }
    w->n = 0;
}

static void w_put(writer_t *w, const char *s, size_t len) {
    while (len) {
        if (w->n == sizeof wbuf) w_flush(w);
        size_t k = sizeof wbuf - w->n < len ? sizeof wbuf - w->n : len;
        memcpy(wbuf + w->n, s, k);
        w->n += k;
        s += k;
        len -= k;
    }
}

static void w_fmt(writer_t *w, const char *fmt, unsigned long long a, unsigned long long b,
                  unsigned long long c, unsigned long long d) {
    char line[128];
    int n = _ts_format(line, sizeof line, fmt, a, b, c, d);
    w_put(w, line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1);
}

static unsigned long long rounded(double x) {
    return x > 0.5 ? (unsigned long long)(x + 0.5) : 0;
}

/* The file name of a profile of `kind` from the template. */
static bool expand(char *out, size_t cap, enum ts_prof_dump_kind kind) {
    const char *t = _ts_prof.file;
    bool numbered = strstr(t, "%n") != NULL;
    unsigned seq = _ts_prof.seq;
    if (numbered || kind == TS_PROF_INTERVAL) _ts_prof.seq++;
    size_t at = 0;
    char num[32];
    for (; *t; t++) {
        const char *piece = t;
        size_t len = 1;
        if (t[0] == '%' && (t[1] == 'p' || t[1] == 'n' || t[1] == '%')) {
            t++;
            if (*t == '%') {
                piece = "%";
            } else {
                _ts_format(num, sizeof num, "%u", *t == 'p' ? (unsigned)getpid() : seq);
                piece = num;
                len = strlen(num);
            }
        }
        if (at + len >= cap) return false;
        memcpy(out + at, piece, len);
        at += len;
    }
    if (!numbered && kind != TS_PROF_FINAL) {
        if (kind == TS_PROF_PEAK)
            strcpy(num, ".peak");
        else
            _ts_format(num, sizeof num, ".%u", seq);
        if (at + strlen(num) >= cap) return false;
        memcpy(out + at, num, strlen(num));
        at += strlen(num);
    }
    out[at] = 0;
    return true;
}

int _ts_prof_dump_locked(enum ts_prof_dump_kind kind, const char *path) {
    char name[1024];
    if (!path) {
        if (!expand(name, sizeof name, kind)) {
            errno = ENAMETOOLONG;
            return -1;
        }
        path = name;
    }
    int saved = errno;
    writer_t w = {open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644), 0, false};
    if (w.fd < 0) return -1;
    double sum[4] = {0, 0, 0, 0};
    for (ts_prof_stack_t *s = _ts_prof.stacks; s; s = s->next) {
        sum[0] += s->live_objs;
        sum[1] += s->live_bytes;
        sum[2] += s->alloc_objs;
        sum[3] += s->alloc_bytes;
    }
    w_fmt(&w, "heap profile: %llu: %llu [ %llu: %llu] @ heapprofile\n", rounded(sum[0]),
          rounded(sum[1]), rounded(sum[2]), rounded(sum[3]));
    for (ts_prof_stack_t *s = _ts_prof.stacks; s; s = s->next) {
        w_fmt(&w, "%llu: %llu [%llu: %llu] @", rounded(s->live_objs), rounded(s->live_bytes),
              rounded(s->alloc_objs), rounded(s->alloc_bytes));
        for (uint32_t i = 0; i < s->depth; i++)
            w_fmt(&w, " 0x%llx", (uintptr_t)s->frames[i], 0, 0, 0);
        w_put(&w, "\n", 1);
    }
    w_put(&w, "\nMAPPED_LIBRARIES:\n", 19);
    int maps = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
    if (maps >= 0) {
        for (;;) {
            if (w.n == sizeof wbuf) w_flush(&w);
            ssize_t k = read(maps, wbuf + w.n, sizeof wbuf - w.n);
            if (k < 0 && errno == EINTR) continue;
            if (k <= 0) break;
            w.n += (size_t)k;
        }
        close(maps);
    }
    w_flush(&w);
    bool failed = close(w.fd) != 0 || w.failed;
    if (!failed) errno = saved;
    return failed ? -1 : 0;
}

/* ---- the leak report ---- */

static void say(const char *fmt, ...) {
    char line[1536];
    va_list ap;
    va_start(ap, fmt);
    int n = _ts_vformat(line, sizeof line, fmt, ap);
    va_end(ap);
    _ts_os_write_stderr(line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1);
}

/* Blocks the C runtime keeps for the whole run (stdio buffers, the
 * loader's own): not the program's leaks. */
static bool runtime_owned(void *frame) {
    Dl_info info;
    if (!dladdr((char *)frame - 1, &info) || !info.dli_fname) return false;
    if (strstr(info.dli_fname, "/ld-linux")) return true;
    return strstr(info.dli_fname, "/libc.so") && info.dli_sname &&
           strncmp(info.dli_sname, "_IO_", 4) == 0;
}

static void print_frame(unsigned i, void *frame) {
    Dl_info info;
    if (dladdr((char *)frame - 1, &info) && info.dli_fname) {
        uintptr_t rel = (uintptr_t)frame - (uintptr_t)info.dli_fbase;
        if (info.dli_sname)
            say("    #%u %p in %s+0x%zx (%s+0x%zx)\n", i, frame, info.dli_sname,
                (size_t)((uintptr_t)frame - (uintptr_t)info.dli_saddr), info.dli_fname,
                (size_t)rel);
        else
            say("    #%u %p (%s+0x%zx)\n", i, frame, info.dli_fname, (size_t)rel);
    } else {
        say("    #%u %p\n", i, frame);
    }
}

bool _ts_prof_leaks_locked(void) {
    size_t n = 0, cap = _ts_prof.stack_count;
    ts_prof_stack_t **v = cap ? _ts_os_map(cap * sizeof *v) : NULL;
    if (cap && !v) return false;
    unsigned long long objs = 0, bytes = 0;
    for (ts_prof_stack_t *s = _ts_prof.stacks; s; s = s->next) {
        if (!rounded(s->live_objs) || runtime_owned(s->frames[0])) continue;
        v[n++] = s;
        objs += rounded(s->live_objs);
        bytes += rounded(s->live_bytes);
    }
    /* Largest first: a shell sort (qsort may allocate). */
    for (size_t gap = n / 2; gap; gap /= 2)
        for (size_t i = gap; i < n; i++)
            for (size_t j = i; j >= gap && v[j - gap]->live_bytes < v[j]->live_bytes; j -= gap) {
                ts_prof_stack_t *t = v[j];
                v[j] = v[j - gap];
                v[j - gap] = t;
            }
    if (n) {
        int pid = (int)getpid();
        say("\n=================================================================\n");
        say("==%d==ERROR: tsalloc: detected memory leaks\n", pid);
        if (_ts_prof.rate > 1)
            say("==%d==(estimated from samples taken every %llu bytes on average; "
                "TSALLOC_PROF_SAMPLE=1 reports every block)\n",
                pid, (unsigned long long)_ts_prof.rate);
        for (size_t i = 0; i < n; i++) {
            say("\nLeak of %llu byte(s) in %llu object(s) allocated from:\n",
                rounded(v[i]->live_bytes), rounded(v[i]->live_objs));
            for (uint32_t f = 0; f < v[i]->depth; f++) print_frame(f, v[i]->frames[f]);
        }
        say("\nSUMMARY: tsalloc: %llu byte(s) leaked in %llu allocation(s).\n", bytes, objs);
    }
    if (v) _ts_os_unmap(v, cap * sizeof *v);
    return n != 0;
}
