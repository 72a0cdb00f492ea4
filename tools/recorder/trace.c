/* The trace file: whether this process records (TSALLOC_RECORD_FILE,
 * TSALLOC_RECORD_PID), opening the file, the line buffer and its writes, and
 * the process's life: the fork handlers, the constructor, and the report at
 * exit (destructor, _exit).
 *
 * Invariants: the buffer holds only whole lines and the file only what was
 * flushed from it, so the file is a valid trace at all times; a write that
 * fails truncates the file back to whole lines and stops recording. All of
 * it is under _ts_rec_lock but the mode, which the entry points read
 * without the lock (relaxed) to skip a process that does not record.
 */
#include "recorder.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

atomic_int _ts_rec_mode;
pthread_mutex_t _ts_rec_lock = PTHREAD_MUTEX_INITIALIZER;
ts_rec_counts_t _ts_rec_counts;

/* ---- the line buffer and the file ---- */

static char line_buf[1 << 16];
static size_t line_len;
static int trace_fd = -1;
static off_t trace_size; /* bytes of whole lines written */
/* The process writing the trace, or before it is open the one that loaded the
 * recorder: a vfork child shares our memory and must leave it alone. */
static pid_t trace_pid, start_pid;
static dev_t trace_dev;
static ino_t trace_ino;
static char trace_path[4096];
static int per_process_name; /* the name had %p: every process writes its own trace */
static int forked_child;     /* this process is a fork of a recording one */
static int after_exit;       /* the exit report is written: write each later line at once */

static void say(const char *msg) {
    char text[4400];
    int n = _ts_format(text, sizeof text, "tsalloc record: %s\n", msg);
    _ts_os_write_stderr(text, (size_t)n < sizeof text ? (size_t)n : sizeof text - 1);
}

void _ts_rec_stop(const char *why, int fd_still_ours) {
    if (why) say(why);
    if (fd_still_ours && trace_fd >= 0) close(trace_fd);
    trace_fd = -1;
    line_len = 0;
    atomic_store(&_ts_rec_mode, TS_REC_OFF);
}

static void flush(void) {
    if (!line_len || trace_fd < 0) return;
    /* A program that closes every descriptor may have reused ours. */
    struct stat st;
    if (fstat(trace_fd, &st) != 0 || st.st_dev != trace_dev || st.st_ino != trace_ino) {
        _ts_rec_stop("the program closed the trace file; recording stopped", 0);
        return;
    }
    size_t done = 0;
    while (done < line_len) {
        ssize_t n = write(trace_fd, line_buf + done, line_len - done);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) { /* a full disk: keep the file to whole lines */
            if (ftruncate(trace_fd, trace_size) != 0) say("cannot truncate the trace file");
            _ts_rec_stop("cannot write the trace file; recording stopped", 1);
            return;
        }
        done += (size_t)n;
    }
    trace_size += (off_t)line_len;
    line_len = 0;
}

static void put_text(const char *text, size_t len) {
    if (line_len + len > sizeof line_buf) flush();
    if (len > sizeof line_buf) len = sizeof line_buf;
    memcpy(line_buf + line_len, text, len);
    line_len += len;
}

static char *put_u64(char *at, uint64_t v) {
    char digits[24];
    int n = 0;
    do {
        digits[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    while (n) *at++ = digits[--n];
    return at;
}

void _ts_rec_emit(char kind, uint32_t slot, int nargs, uint64_t a, uint64_t b) {
    char text[80], *at = text;
    *at++ = kind;
    *at++ = ' ';
    at = put_u64(at, slot);
    if (nargs >= 1) *at++ = ' ', at = put_u64(at, a);
    if (nargs >= 2) *at++ = ' ', at = put_u64(at, b);
    *at++ = '\n';
    put_text(text, (size_t)(at - text));
    _ts_rec_counts.ops++;
    if (after_exit) flush();
}

static void comment(const char *fmt, ...) {
    char text[512];
    va_list ap;
    va_start(ap, fmt);
    int n = _ts_vformat(text, sizeof text, fmt, ap);
    va_end(ap);
    put_text(text, (size_t)n < sizeof text ? (size_t)n : sizeof text - 1);
}

/* ---- choosing to record, opening the file ---- */

/* The file name with %p replaced by the process id (%% gives %). */
static int expand_name(const char *name) {
    size_t at = 0;
    char pid[24];
    *put_u64(pid, (uint64_t)getpid()) = 0;
    per_process_name = 0;
    for (const char *s = name; *s; s++) {
        const char *piece = s;
        size_t len = 1;
        if (s[0] == '%' && s[1] == 'p') {
            piece = pid, len = strlen(pid), s++;
            per_process_name = 1;
        } else if (s[0] == '%' && s[1] == '%') {
            s++;
        }
        if (at + len >= sizeof trace_path) return 0;
        memcpy(trace_path + at, piece, len);
        at += len;
    }
    trace_path[at] = 0;
    return at > 0;
}

/* The command line, for a comment in the header (spaces for NULs). */
static void header(void) {
    char cmd[200];
    ssize_t n = 0;
    int fd = open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        n = read(fd, cmd, sizeof cmd - 1);
        close(fd);
    }
    if (n < 0) n = 0;
    while (n > 0 && cmd[n - 1] == 0) n--;
    for (ssize_t i = 0; i < n; i++)
        if ((unsigned char)cmd[i] < ' ' || cmd[i] == 127) cmd[i] = ' ';
    cmd[n] = 0;
    comment("tstrace 1\n# recorded by libtsalloc-record.so, pid %d: %s\n", (int)getpid(), cmd);
}

/* Under _ts_rec_lock, at the first operation (or at exit if there was none). */
static void decide(void) {
    /* Before libc has set up the environment (the dynamic loader's own early
     * calls) nothing can be decided: those calls go unrecorded. */
    if (!environ) return;
    const char *name = getenv("TSALLOC_RECORD_FILE");
    if (!name || !*name || !expand_name(name)) goto off;
    if (!per_process_name) {
        /* One trace per file: a forked child, or a program the recorded one
         * ran (TSALLOC_RECORD_PID names the process to record), stays out. */
        if (forked_child) goto off;
        const char *only = getenv("TSALLOC_RECORD_PID");
        if (only && *only && atol(only) != (long)getpid()) goto off;
    }
    int fd = open(trace_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        char msg[4200];
        _ts_format(msg, sizeof msg, "cannot open %s (errno %d); not recording", trace_path, errno);
        say(msg);
        goto off;
    }
    /* Out of the way of programs that expect the low descriptors free. */
    int high = fcntl(fd, F_DUPFD_CLOEXEC, 256);
    if (high >= 0) {
        close(fd);
        fd = high;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        close(fd);
        goto off;
    }
    trace_fd = fd, trace_dev = st.st_dev, trace_ino = st.st_ino, trace_pid = getpid();
    trace_size = 0;
    line_len = 0;
    header();
    atomic_store(&_ts_rec_mode, TS_REC_ON);
    return;
off:
    atomic_store(&_ts_rec_mode, TS_REC_OFF);
}

int _ts_rec_lock_if_recording(void) {
    pthread_mutex_lock(&_ts_rec_lock);
    if (ts_unlikely(atomic_load(&_ts_rec_mode) == TS_REC_UNDECIDED)) decide();
    if (ts_likely(atomic_load(&_ts_rec_mode) == TS_REC_ON)) return 1;
    pthread_mutex_unlock(&_ts_rec_lock);
    return 0;
}

/* ---- process life: start, fork, exit ---- */

static void fork_prepare(void) {
    pthread_mutex_lock(&_ts_rec_lock);
}

static void fork_parent(void) {
    pthread_mutex_unlock(&_ts_rec_lock);
}

/* The child holds the parent's unflushed lines and table: drop both. With %p
 * in the name it starts a trace of its own at its next operation. */
static void fork_child(void) {
    forked_child = 1;
    start_pid = getpid(), trace_pid = 0;
    if (trace_fd >= 0) close(trace_fd);
    trace_fd = -1;
    line_len = 0;
    if (atomic_load(&_ts_rec_mode) == TS_REC_ON && per_process_name) {
        _ts_rec_blocks_forget();
        _ts_rec_counts = (ts_rec_counts_t){0};
        atomic_store(&_ts_rec_mode, TS_REC_UNDECIDED);
    } else if (atomic_load(&_ts_rec_mode) == TS_REC_ON) {
        atomic_store(&_ts_rec_mode, TS_REC_OFF);
    }
    pthread_mutex_unlock(&_ts_rec_lock);
}

__attribute__((constructor)) static void record_start(void) {
    start_pid = getpid();
    ts_rec_real_ready();
    _ts_rec_in_wrapper = 1; /* what pthread_atfork allocates is libc's, not the program's */
    pthread_atfork(fork_prepare, fork_parent, fork_child);
    _ts_rec_in_wrapper = 0;
}

/* Runs in exit() (also when the last thread ends the process) and _exit().
 * Operations after it (later destructors) are written one line at a time. */
__attribute__((destructor)) static void record_end(void) {
    int saved = errno;
    pthread_mutex_lock(&_ts_rec_lock);
    if (atomic_load(&_ts_rec_mode) == TS_REC_UNDECIDED) decide();
    if (atomic_load(&_ts_rec_mode) == TS_REC_ON && !after_exit && getpid() == trace_pid) {
        const ts_rec_counts_t *c = &_ts_rec_counts;
        comment("# end: %lu operations, %lu blocks still live (left unfreed)\n",
                (unsigned long)c->ops, (unsigned long)c->live);
        comment("# slots %lu (highest slot id + 1; peak %lu live blocks)\n",
                (unsigned long)_ts_rec_slots_used(), (unsigned long)c->peak);
        comment("# unknown: %lu frees and %lu reallocs of pointers the recorder never saw "
                "allocated were left out\n",
                (unsigned long)c->unknown_frees, (unsigned long)c->unknown_reallocs);
        if (c->unseen_frees)
            comment("# unseen: %lu blocks freed out of sight were closed with an f when their "
                    "address came back\n",
                    (unsigned long)c->unseen_frees);
        flush();
        after_exit = 1;
    }
    pthread_mutex_unlock(&_ts_rec_lock);
    errno = saved;
}

/* Programs that end with _exit (dash, forked children) skip the destructor.
 * A vfork child shares the parent's memory: it must leave the trace alone. */
TS_EXPORT void _exit(int status) {
    pid_t owner = trace_pid ? trace_pid : start_pid;
    if (ts_rec_real_ready() && atomic_load(&_ts_rec_mode) != TS_REC_OFF && getpid() == owner)
        record_end();
    _ts_rec_real.exit_now(status);
    __builtin_unreachable();
}

TS_EXPORT void _Exit(int status) {
    _exit(status);
}

