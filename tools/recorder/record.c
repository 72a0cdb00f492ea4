/* libtsalloc-record.so: a preloadable trace recorder. Every heap operation of
 * the program goes on to the next allocator (glibc, or a tsalloc design
 * preloaded after this library) and is written to TSALLOC_RECORD_FILE as one
 * line of a `tstrace 1` trace (docs/trace-format.md) that tsb-memsim replays.
 *
 * Invariants:
 * - No heap use inside the recorder: the pointer table and the free-id heap
 *   are mapped through the OS layer, the line buffer is static, the file is
 *   written with write(2). Calls the real allocator makes back into these
 *   entry points (one TLS flag, in_wrapper) and dlsym's own allocations made
 *   before the real functions are known (a static bootstrap arena) are not
 *   recorded.
 * - An address is in the table exactly while its block is live in the trace:
 *   free takes it out before the real free, malloc puts it in after the real
 *   malloc, and realloc takes it out for the length of the real call while
 *   its slot id stays reserved. So an address the allocator hands out again
 *   is never still in the table, and the file is a valid trace at all times
 *   (it only ever holds whole lines).
 * - The trace is the global order of the recorded operations. It is written
 *   when the buffer fills, at exit (destructor, and _exit, which skips it)
 *   and, after that, line by line.
 * - Only the process that opened the file writes to it: a forked child drops
 *   the parent's unwritten lines (with %p in the name it starts its own).
 *
 * Lock order: one mutex, rec_lock, around the table, the ids and the buffer.
 * It is never held across a call into the real allocator, so the allocator's
 * own locks and fork handlers cannot deadlock with it (fork_prepare holds it
 * across fork itself, so the child finds the table whole).
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/base.h"

/* ---- the real allocator ---- */

static struct {
    void *(*malloc)(size_t);
    void (*free)(void *);
    void *(*calloc)(size_t, size_t);
    void *(*realloc)(void *, size_t);
    void *(*reallocarray)(void *, size_t, size_t);
    int (*posix_memalign)(void **, size_t, size_t);
    void *(*aligned_alloc)(size_t, size_t);
    void *(*memalign)(size_t, size_t);
    void *(*valloc)(size_t);
    void *(*pvalloc)(size_t);
    void (*exit_now)(int); /* _exit */
} real;

enum { REAL_NONE, REAL_RESOLVING, REAL_READY };
static atomic_int real_state;
/* This thread runs dlsym for the real functions: its allocations use the arena. */
static TS_TLS int resolving_here;
/* This thread is inside one of our entry points: nested calls are not recorded. */
static TS_TLS int in_wrapper;

/* dlsym may itself call calloc or malloc: those are served from here. The
 * arena is never reused, so its memory is always zero (calloc for free). */
#define BOOT_BYTES (256 * 1024)
static _Alignas(4096) unsigned char boot_arena[BOOT_BYTES];
static atomic_size_t boot_used;

static int is_boot(const void *p) {
    return (uintptr_t)p >= (uintptr_t)boot_arena &&
           (uintptr_t)p < (uintptr_t)boot_arena + BOOT_BYTES;
}

/* Each block is preceded by its size. */
static void *boot_alloc(size_t size, size_t align) {
    if (align < TS_MIN_ALIGN) align = TS_MIN_ALIGN;
    if (size > BOOT_BYTES || align > BOOT_BYTES / 4 || !ts_is_pow2(align)) {
        errno = ENOMEM;
        return NULL;
    }
    size_t need = sizeof(size_t) + align + size;
    size_t start = atomic_fetch_add(&boot_used, need);
    if (start + need > BOOT_BYTES) {
        errno = ENOMEM;
        return NULL;
    }
    uintptr_t p = ts_align_up_ptr((uintptr_t)boot_arena + start + sizeof(size_t), align);
    ((size_t *)p)[-1] = size;
    return (void *)p;
}

#define RESOLVE(name) real.name = (__typeof__(real.name))dlsym(RTLD_NEXT, #name)

/* Finds the real functions once. Returns 0 only to the resolving thread
 * itself (dlsym calling back), which then uses the arena. */
static TS_NOINLINE int resolve_real(void) {
    int expected = REAL_NONE;
    if (atomic_compare_exchange_strong(&real_state, &expected, REAL_RESOLVING)) {
        resolving_here = 1;
        RESOLVE(malloc);
        RESOLVE(free);
        RESOLVE(calloc);
        RESOLVE(realloc);
        RESOLVE(reallocarray);
        RESOLVE(posix_memalign);
        RESOLVE(aligned_alloc);
        RESOLVE(memalign);
        RESOLVE(valloc);
        RESOLVE(pvalloc);
        real.exit_now = (void (*)(int))dlsym(RTLD_NEXT, "_exit");
        resolving_here = 0;
        if (!real.malloc || !real.free || !real.calloc || !real.realloc || !real.posix_memalign ||
            !real.aligned_alloc || !real.memalign || !real.valloc || !real.pvalloc ||
            !real.exit_now)
            _ts_fatal("record: no allocator found after libtsalloc-record.so");
        atomic_store_explicit(&real_state, REAL_READY, memory_order_release);
        return 1;
    }
    if (resolving_here) return 0;
    while (atomic_load_explicit(&real_state, memory_order_acquire) != REAL_READY) _ts_os_yield();
    return 1;
}

static inline int real_ready(void) {
    if (ts_likely(atomic_load_explicit(&real_state, memory_order_acquire) == REAL_READY)) return 1;
    return resolve_real();
}

/* ---- recording state (all under rec_lock) ---- */

enum { REC_UNDECIDED, REC_ON, REC_OFF };
static atomic_int rec_mode;
static pthread_mutex_t rec_lock = PTHREAD_MUTEX_INITIALIZER;

#define MAX_SLOTS (1u << 26) /* the format's limit on slot ids */
#define NO_SLOT   UINT32_MAX

/* Open addressing, linear probing, deletion by backward shift (no tombstones).
 * Address 0 marks an empty entry. */
typedef struct {
    uintptr_t addr;
    uint32_t slot;
} entry_t;

static entry_t *table;
static size_t table_cap, table_used; /* cap: a power of two, or 0 before first use */
static unsigned table_bits;

/* Free slot ids as a binary min-heap, so the lowest free id is reused first and
 * the ids stay below the peak number of live blocks. Its capacity is kept at
 * least next_id, so a release never needs memory. */
static uint32_t *free_ids;
static size_t free_count, free_cap;
static uint32_t next_id; /* every id below it is live, reserved by a realloc, or free */

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

static uint64_t ops, live, peak, unknown_frees, unknown_reallocs, unseen_frees;

static void say(const char *msg) {
    char text[4400];
    int n = _ts_format(text, sizeof text, "tsalloc record: %s\n", msg);
    _ts_os_write_stderr(text, (size_t)n < sizeof text ? (size_t)n : sizeof text - 1);
}

static void release_memory(void) {
    if (table) _ts_os_unmap(table, table_cap * sizeof(entry_t));
    if (free_ids) _ts_os_unmap(free_ids, free_cap * sizeof(uint32_t));
    table = NULL, free_ids = NULL;
    table_cap = table_used = table_bits = 0;
    free_count = free_cap = 0;
    next_id = 0;
}

/* Recording ends for good (for this process); the trace so far stays valid. */
static void stop(const char *why, int fd_still_ours) {
    if (why) say(why);
    if (fd_still_ours && trace_fd >= 0) close(trace_fd);
    trace_fd = -1;
    line_len = 0;
    atomic_store(&rec_mode, REC_OFF);
}

static void flush(void) {
    if (!line_len || trace_fd < 0) return;
    /* A program that closes every descriptor may have reused ours. */
    struct stat st;
    if (fstat(trace_fd, &st) != 0 || st.st_dev != trace_dev || st.st_ino != trace_ino) {
        stop("the program closed the trace file; recording stopped", 0);
        return;
    }
    size_t done = 0;
    while (done < line_len) {
        ssize_t n = write(trace_fd, line_buf + done, line_len - done);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) { /* a full disk: keep the file to whole lines */
            if (ftruncate(trace_fd, trace_size) != 0) say("cannot truncate the trace file");
            stop("cannot write the trace file; recording stopped", 1);
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

/* One operation line: "<kind> <slot>[ <a>[ <b>]]". */
static void emit(char kind, uint32_t slot, int nargs, uint64_t a, uint64_t b) {
    char text[80], *at = text;
    *at++ = kind;
    *at++ = ' ';
    at = put_u64(at, slot);
    if (nargs >= 1) *at++ = ' ', at = put_u64(at, a);
    if (nargs >= 2) *at++ = ' ', at = put_u64(at, b);
    *at++ = '\n';
    put_text(text, (size_t)(at - text));
    ops++;
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

/* Under rec_lock, at the first operation (or at exit if there was none). */
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
    atomic_store(&rec_mode, REC_ON);
    return;
off:
    atomic_store(&rec_mode, REC_OFF);
}

/* Takes rec_lock; returns 1 with it held when this operation is recorded. */
static int lock_if_recording(void) {
    pthread_mutex_lock(&rec_lock);
    if (ts_unlikely(atomic_load(&rec_mode) == REC_UNDECIDED)) decide();
    if (ts_likely(atomic_load(&rec_mode) == REC_ON)) return 1;
    pthread_mutex_unlock(&rec_lock);
    return 0;
}

/* ---- slot ids ---- */

static int take_id(uint32_t *out) {
    if (free_count) {
        *out = free_ids[0];
        uint32_t last = free_ids[--free_count];
        size_t i = 0;
        for (;;) { /* sift the last id down from the root */
            size_t c = 2 * i + 1;
            if (c >= free_count) break;
            if (c + 1 < free_count && free_ids[c + 1] < free_ids[c]) c++;
            if (last <= free_ids[c]) break;
            free_ids[i] = free_ids[c];
            i = c;
        }
        if (free_count) free_ids[i] = last;
        return 1;
    }
    if (next_id >= MAX_SLOTS) {
        stop("more than 2^26 live blocks, the format's limit; recording stopped", 1);
        return 0;
    }
    if (next_id >= free_cap) {
        size_t cap = free_cap ? free_cap * 2 : 16384;
        uint32_t *grown = free_ids ? _ts_os_remap(free_ids, free_cap * sizeof(uint32_t),
                                                  cap * sizeof(uint32_t), true)
                                   : _ts_os_map(cap * sizeof(uint32_t));
        if (!grown) {
            stop("out of memory for the id table; recording stopped", 1);
            return 0;
        }
        free_ids = grown, free_cap = cap;
    }
    *out = next_id++;
    return 1;
}

static void release_id(uint32_t id) {
    size_t i = free_count++;
    while (i > 0 && free_ids[(i - 1) / 2] > id) { /* sift up */
        free_ids[i] = free_ids[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    free_ids[i] = id;
}

/* ---- the pointer table ---- */

static size_t home_of(uintptr_t addr) {
    return (size_t)(((uint64_t)addr * 0x9E3779B97F4A7C15ull) >> (64 - table_bits));
}

/* The index holding addr, or the empty entry where it would go. */
static size_t find(uintptr_t addr) {
    size_t mask = table_cap - 1, i = home_of(addr);
    while (table[i].addr && table[i].addr != addr) i = (i + 1) & mask;
    return i;
}

static void remove_at(size_t hole) {
    size_t mask = table_cap - 1;
    for (size_t j = (hole + 1) & mask; table[j].addr; j = (j + 1) & mask) {
        /* An entry may fill the hole when the hole lies between its home and it. */
        size_t home = home_of(table[j].addr);
        if (((j - home) & mask) >= ((j - hole) & mask)) {
            table[hole] = table[j];
            hole = j;
        }
    }
    table[hole].addr = 0;
    table_used--;
}

/* Keeps the table at most half full. */
static int table_room(void) {
    if (table && (table_used + 1) * 2 <= table_cap) return 1;
    unsigned bits = table ? table_bits + 1 : 16;
    size_t cap = (size_t)1 << bits;
    entry_t *grown = _ts_os_map(cap * sizeof(entry_t));
    if (!grown) {
        stop("out of memory for the pointer table; recording stopped", 1);
        return 0;
    }
    entry_t *old = table;
    size_t old_cap = table_cap;
    table = grown, table_cap = cap, table_bits = bits;
    for (size_t i = 0; i < old_cap; i++)
        if (old[i].addr) table[find(old[i].addr)] = old[i];
    if (old) _ts_os_unmap(old, old_cap * sizeof(entry_t));
    return 1;
}

/* Enters addr under slot. An entry already there means the block was freed
 * where the recorder could not see it: close it with an `f` first. */
static int enter_block(uintptr_t addr, uint32_t slot) {
    if (!table_room()) return 0;
    size_t i = find(addr);
    if (table[i].addr == addr) {
        emit('f', table[i].slot, 0, 0, 0);
        release_id(table[i].slot);
        live--;
        unseen_frees++;
    } else {
        table[i].addr = addr;
        table_used++;
    }
    table[i].slot = slot;
    return 1;
}

/* Removes addr; its slot id, or NO_SLOT when the recorder never saw it. */
static uint32_t take_block(uintptr_t addr) {
    if (!table) return NO_SLOT;
    size_t i = find(addr);
    if (table[i].addr != addr) return NO_SLOT;
    uint32_t slot = table[i].slot;
    remove_at(i);
    return slot;
}

/* ---- what each entry point records ---- */

/* A new block: `m SLOT SIZE`, or for calloc `c SLOT COUNT SIZE`. */
static void note_new(void *p, char kind, uint64_t count, uint64_t size) {
    int saved = errno;
    if (lock_if_recording()) {
        uint32_t slot;
        if (take_id(&slot) && enter_block((uintptr_t)p, slot)) {
            if (kind == 'c')
                emit('c', slot, 2, count, size);
            else
                emit('m', slot, 1, size, 0);
            if (++live > peak) peak = live;
        }
        pthread_mutex_unlock(&rec_lock);
    }
    errno = saved;
}

static void note_free(void *p) {
    int saved = errno;
    if (lock_if_recording()) {
        uint32_t slot = take_block((uintptr_t)p);
        if (slot == NO_SLOT) {
            unknown_frees++;
        } else {
            emit('f', slot, 0, 0, 0);
            release_id(slot);
            live--;
        }
        pthread_mutex_unlock(&rec_lock);
    }
    errno = saved;
}

/* Before a real realloc of p: takes p out of the table, keeping its slot. */
static uint32_t note_resize_start(void *p) {
    uint32_t slot = NO_SLOT;
    int saved = errno;
    if (lock_if_recording()) {
        slot = take_block((uintptr_t)p);
        if (slot == NO_SLOT) unknown_reallocs++;
        pthread_mutex_unlock(&rec_lock);
    }
    errno = saved;
    return slot;
}

/* After it: q is the result, slot what note_resize_start returned. */
static void note_resize_end(void *p, uint32_t slot, void *q, size_t size) {
    if (slot == NO_SLOT) { /* realloc(NULL, n), or of a block never seen: a new block */
        if (q) note_new(q, 'm', 0, size);
        return;
    }
    int saved = errno;
    if (lock_if_recording()) {
        if (q) {
            if (enter_block((uintptr_t)q, slot)) emit('r', slot, 1, size, 0);
        } else if (size == 0) { /* realloc(p, 0) freed p */
            emit('f', slot, 0, 0, 0);
            release_id(slot);
            live--;
        } else { /* failed: p is still live, unchanged */
            enter_block((uintptr_t)p, slot);
        }
        pthread_mutex_unlock(&rec_lock);
    }
    errno = saved;
}

/* ---- process life: start, fork, exit ---- */

static void fork_prepare(void) {
    pthread_mutex_lock(&rec_lock);
}

static void fork_parent(void) {
    pthread_mutex_unlock(&rec_lock);
}

/* The child holds the parent's unflushed lines and table: drop both. With %p
 * in the name it starts a trace of its own at its next operation. */
static void fork_child(void) {
    forked_child = 1;
    start_pid = getpid(), trace_pid = 0;
    if (trace_fd >= 0) close(trace_fd);
    trace_fd = -1;
    line_len = 0;
    if (atomic_load(&rec_mode) == REC_ON && per_process_name) {
        release_memory();
        ops = live = peak = unknown_frees = unknown_reallocs = unseen_frees = 0;
        atomic_store(&rec_mode, REC_UNDECIDED);
    } else if (atomic_load(&rec_mode) == REC_ON) {
        atomic_store(&rec_mode, REC_OFF);
    }
    pthread_mutex_unlock(&rec_lock);
}

__attribute__((constructor)) static void record_start(void) {
    start_pid = getpid();
    real_ready();
    in_wrapper = 1; /* what pthread_atfork allocates is libc's, not the program's */
    pthread_atfork(fork_prepare, fork_parent, fork_child);
    in_wrapper = 0;
}

/* Runs in exit() (also when the last thread ends the process) and _exit().
 * Operations after it (later destructors) are written one line at a time. */
__attribute__((destructor)) static void record_end(void) {
    int saved = errno;
    pthread_mutex_lock(&rec_lock);
    if (atomic_load(&rec_mode) == REC_UNDECIDED) decide();
    if (atomic_load(&rec_mode) == REC_ON && !after_exit && getpid() == trace_pid) {
        comment("# end: %lu operations, %lu blocks still live (left unfreed)\n", (unsigned long)ops,
                (unsigned long)live);
        comment("# slots %lu (highest slot id + 1; peak %lu live blocks)\n", (unsigned long)next_id,
                (unsigned long)peak);
        comment("# unknown: %lu frees and %lu reallocs of pointers the recorder never saw "
                "allocated were left out\n",
                (unsigned long)unknown_frees, (unsigned long)unknown_reallocs);
        if (unseen_frees)
            comment("# unseen: %lu blocks freed out of sight were closed with an f when their "
                    "address came back\n",
                    (unsigned long)unseen_frees);
        flush();
        after_exit = 1;
    }
    pthread_mutex_unlock(&rec_lock);
    errno = saved;
}

/* Programs that end with _exit (dash, forked children) skip the destructor.
 * A vfork child shares the parent's memory: it must leave the trace alone. */
TS_EXPORT void _exit(int status) {
    pid_t owner = trace_pid ? trace_pid : start_pid;
    if (real_ready() && atomic_load(&rec_mode) != REC_OFF && getpid() == owner) record_end();
    real.exit_now(status);
    __builtin_unreachable();
}

TS_EXPORT void _Exit(int status) {
    _exit(status);
}

/* ---- the C entry points ---- */

/* True (and in_wrapper set) when the caller should record this call. */
static inline int enter(void) {
    if (in_wrapper || atomic_load_explicit(&rec_mode, memory_order_relaxed) == REC_OFF) return 0;
    in_wrapper = 1;
    return 1;
}

static inline void *leave_new(void *p, char kind, uint64_t count, uint64_t size) {
    if (p) note_new(p, kind, count, size);
    in_wrapper = 0;
    return p;
}

TS_EXPORT void *malloc(size_t size) {
    if (ts_unlikely(!real_ready())) return boot_alloc(size, 0);
    if (!enter()) return real.malloc(size);
    return leave_new(real.malloc(size), 'm', 0, size);
}

TS_EXPORT void free(void *p) {
    if (!p || ts_unlikely(is_boot(p))) return;
    if (ts_unlikely(!real_ready())) return;
    if (!enter()) {
        real.free(p);
        return;
    }
    note_free(p);
    real.free(p);
    in_wrapper = 0;
}

TS_EXPORT void *calloc(size_t count, size_t size) {
    if (ts_unlikely(!real_ready())) {
        size_t total;
        if (__builtin_mul_overflow(count, size, &total)) {
            errno = ENOMEM;
            return NULL;
        }
        return boot_alloc(total, 0);
    }
    if (!enter()) return real.calloc(count, size);
    return leave_new(real.calloc(count, size), 'c', count, size);
}

/* A block from the bootstrap arena moves to the real allocator. */
static void *boot_resize(void *p, size_t size) {
    if (size == 0) return NULL;
    void *q = malloc(size);
    if (q) {
        size_t old = ((size_t *)p)[-1];
        memcpy(q, p, old < size ? old : size);
    }
    return q;
}

TS_EXPORT void *realloc(void *p, size_t size) {
    if (ts_unlikely(p && is_boot(p))) return boot_resize(p, size);
    if (ts_unlikely(!real_ready())) return p ? NULL : boot_alloc(size, 0);
    if (!enter()) return real.realloc(p, size);
    uint32_t slot = p ? note_resize_start(p) : NO_SLOT;
    void *q = real.realloc(p, size);
    note_resize_end(p, slot, q, size);
    in_wrapper = 0;
    return q;
}

TS_EXPORT void *reallocarray(void *p, size_t count, size_t size) {
    size_t total;
    if (__builtin_mul_overflow(count, size, &total)) {
        errno = ENOMEM;
        return NULL;
    }
    if (ts_unlikely(p && is_boot(p))) return boot_resize(p, total);
    if (ts_unlikely(!real_ready())) return p ? NULL : boot_alloc(total, 0);
    if (!enter())
        return real.reallocarray ? real.reallocarray(p, count, size) : real.realloc(p, total);
    uint32_t slot = p ? note_resize_start(p) : NO_SLOT;
    void *q = real.reallocarray ? real.reallocarray(p, count, size) : real.realloc(p, total);
    note_resize_end(p, slot, q, total);
    in_wrapper = 0;
    return q;
}

/* The aligned forms are recorded as `m` with the size asked for. */
TS_EXPORT int posix_memalign(void **out, size_t align, size_t size) {
    if (ts_unlikely(!real_ready())) {
        void *p = boot_alloc(size, align);
        if (!p) return ENOMEM;
        *out = p;
        return 0;
    }
    if (!enter()) return real.posix_memalign(out, align, size);
    int rc = real.posix_memalign(out, align, size);
    leave_new(rc == 0 ? *out : NULL, 'm', 0, size);
    return rc;
}

TS_EXPORT void *aligned_alloc(size_t align, size_t size) {
    if (ts_unlikely(!real_ready())) return boot_alloc(size, align);
    if (!enter()) return real.aligned_alloc(align, size);
    return leave_new(real.aligned_alloc(align, size), 'm', 0, size);
}

TS_EXPORT void *memalign(size_t align, size_t size) {
    if (ts_unlikely(!real_ready())) return boot_alloc(size, align);
    if (!enter()) return real.memalign(align, size);
    return leave_new(real.memalign(align, size), 'm', 0, size);
}

TS_EXPORT void *valloc(size_t size) {
    if (ts_unlikely(!real_ready())) return boot_alloc(size, 4096);
    if (!enter()) return real.valloc(size);
    return leave_new(real.valloc(size), 'm', 0, size);
}

/* pvalloc hands out whole pages: recorded with its size rounded up. */
TS_EXPORT void *pvalloc(size_t size) {
    size_t page = _ts_os_page_size();
    size_t rounded = size ? ts_align_up(size, page) : page;
    if (ts_unlikely(!real_ready())) return boot_alloc(rounded, page);
    if (!enter()) return real.pvalloc(size);
    return leave_new(real.pvalloc(size), 'm', 0, rounded < size ? size : rounded);
}

/* ---- C++ operator new and delete ----
 *
 * A tsalloc design preloaded after the recorder exports its own operators,
 * which never pass through malloc: the recorder wraps them too, forwarding to
 * the next definition (the design's, or libstdc++'s, whose calls back into
 * malloc are then not recorded twice). If the real operator new throws, the
 * cleanup below clears in_wrapper while the exception unwinds (-fexceptions).
 * When there is no next definition (a C program whose C++ plugin brought
 * libstdc++ with RTLD_LOCAL), the operators fall back on the recorded malloc
 * family: recording must not change what the program can do.
 */

static void *next_symbol(_Atomic(void *) *cache, const char *name) {
    void *fn = atomic_load_explicit(cache, memory_order_acquire);
    if (ts_likely(fn != NULL)) return fn;
    int was = in_wrapper;
    in_wrapper = 1; /* dlsym's own allocations are not the program's */
    real_ready();
    fn = dlsym(RTLD_NEXT, name);
    in_wrapper = was;
    if (fn) atomic_store_explicit(cache, fn, memory_order_release);
    return fn; /* NULL: looked up again next time (libstdc++ may come later) */
}

static void *new_fallback(void *p, size_t size) {
    if (!p) _ts_fatal("record: operator new(%zu): out of memory, no C++ runtime to throw", size);
    return p;
}

static void wrapper_done(int *unused) {
    (void)unused;
    in_wrapper = 0;
}

#define NEW_ENTRY(symbol, params, args, size, fallback)                                            \
    TS_EXPORT void *symbol params {                                                                \
        static _Atomic(void *) cache;                                                              \
        void *(*next)params = (void *(*)params)next_symbol(&cache, #symbol);                       \
        if (!next) return fallback;                                                                \
        if (!enter()) return next args;                                                            \
        int guard __attribute__((cleanup(wrapper_done))) = 1;                                      \
        (void)guard;                                                                               \
        return leave_new(next args, 'm', 0, size);                                                 \
    }

#define DELETE_ENTRY(symbol, params, args)                                                         \
    TS_EXPORT void symbol params {                                                                 \
        static _Atomic(void *) cache;                                                              \
        if (!p || is_boot(p)) return;                                                              \
        void(*next) params = (void(*) params)next_symbol(&cache, #symbol);                         \
        if (!next) {                                                                               \
            free(p);                                                                               \
            return;                                                                                \
        }                                                                                          \
        if (!enter()) {                                                                            \
            next args;                                                                             \
            return;                                                                                \
        }                                                                                          \
        note_free(p);                                                                              \
        next args;                                                                                 \
        in_wrapper = 0;                                                                            \
    }

/* size_t is 'm' in the mangled names; std::align_val_t is passed as a size_t
 * and std::nothrow_t by reference. */
NEW_ENTRY(_Znwm, (size_t n), (n), n, new_fallback(malloc(n), n))
NEW_ENTRY(_Znam, (size_t n), (n), n, new_fallback(malloc(n), n))
NEW_ENTRY(_ZnwmRKSt9nothrow_t, (size_t n, const void *nt), (n, nt), n, malloc(n))
NEW_ENTRY(_ZnamRKSt9nothrow_t, (size_t n, const void *nt), (n, nt), n, malloc(n))
NEW_ENTRY(_ZnwmSt11align_val_t, (size_t n, size_t al), (n, al), n, new_fallback(memalign(al, n), n))
NEW_ENTRY(_ZnamSt11align_val_t, (size_t n, size_t al), (n, al), n, new_fallback(memalign(al, n), n))
NEW_ENTRY(_ZnwmSt11align_val_tRKSt9nothrow_t, (size_t n, size_t al, const void *nt), (n, al, nt), n,
          memalign(al, n))
NEW_ENTRY(_ZnamSt11align_val_tRKSt9nothrow_t, (size_t n, size_t al, const void *nt), (n, al, nt), n,
          memalign(al, n))

DELETE_ENTRY(_ZdlPv, (void *p), (p))
DELETE_ENTRY(_ZdaPv, (void *p), (p))
DELETE_ENTRY(_ZdlPvm, (void *p, size_t n), (p, n))
DELETE_ENTRY(_ZdaPvm, (void *p, size_t n), (p, n))
DELETE_ENTRY(_ZdlPvRKSt9nothrow_t, (void *p, const void *nt), (p, nt))
DELETE_ENTRY(_ZdaPvRKSt9nothrow_t, (void *p, const void *nt), (p, nt))
DELETE_ENTRY(_ZdlPvSt11align_val_t, (void *p, size_t al), (p, al))
DELETE_ENTRY(_ZdaPvSt11align_val_t, (void *p, size_t al), (p, al))
DELETE_ENTRY(_ZdlPvmSt11align_val_t, (void *p, size_t n, size_t al), (p, n, al))
DELETE_ENTRY(_ZdaPvmSt11align_val_t, (void *p, size_t n, size_t al), (p, n, al))
DELETE_ENTRY(_ZdlPvSt11align_val_tRKSt9nothrow_t, (void *p, size_t al, const void *nt), (p, al, nt))
DELETE_ENTRY(_ZdaPvSt11align_val_tRKSt9nothrow_t, (void *p, size_t al, const void *nt), (p, al, nt))
