/* Linux implementation of the OS layer (see os.h for the contract).
 *
 * Invariants: nothing here allocates from the heap; errno is ENOMEM after any
 * failed memory request. Lock order: sbrk_lock is a leaf (nothing is locked
 * while it is held). Built with TS_OS_PRIVATE_BREAK (libtsalloc-classic
 * only), the break functions move a private break instead of the process's.
 */
#include "os/os.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#ifndef PR_SET_VMA
#define PR_SET_VMA           0x53564d41
#define PR_SET_VMA_ANON_NAME 0
#endif

static TS_FORK_LOCK pthread_mutex_t sbrk_lock = PTHREAD_MUTEX_INITIALIZER;

/* ---- failure hook ------------------------------------------------------ */

static TS_STARTUP_DATA _Atomic unsigned fail_ops;
static TS_STARTUP_DATA _Atomic long fail_skip;
static TS_STARTUP_DATA _Atomic long fail_count;
static TS_STARTUP_DATA _Atomic long fail_total;
static TS_STARTUP_DATA _Atomic int fail_env_read;

static unsigned parse_ops(const char *s, const char **end) {
    unsigned ops = 0;
    while (*s && *s != ':') {
        if (strncmp(s, "mmap", 4) == 0)
            ops |= TS_OS_FAIL_MMAP, s += 4;
        else if (strncmp(s, "sbrk", 4) == 0)
            ops |= TS_OS_FAIL_SBRK, s += 4;
        else if (strncmp(s, "remap", 5) == 0)
            ops |= TS_OS_FAIL_REMAP, s += 5;
        else if (strncmp(s, "purge", 5) == 0)
            ops |= TS_OS_FAIL_PURGE, s += 5;
        else if (strncmp(s, "resident", 8) == 0)
            ops |= TS_OS_FAIL_RESIDENT, s += 8;
        else if (strncmp(s, "commit", 6) == 0)
            ops |= TS_OS_FAIL_COMMIT, s += 6;
        else
            s++;
    }
    *end = s;
    return ops;
}

static void read_fail_env(void) {
    if (atomic_exchange(&fail_env_read, 1)) return;
    const char *v = getenv("TSALLOC_TEST_OS_FAIL");
    if (!v || !*v) return;
    const char *p;
    unsigned ops = parse_ops(v, &p);
    long skip = 0, count = -1;
    if (*p == ':') skip = strtol(p + 1, (char **)&p, 10);
    if (*p == ':') count = strtol(p + 1, NULL, 10);
    _ts_os_test_fail(ops, skip, count);
}

void _ts_os_test_fail(unsigned ops, long skip, long count) {
    atomic_store(&fail_env_read, 1);
    atomic_store(&fail_skip, skip);
    atomic_store(&fail_count, count);
    atomic_store(&fail_ops, ops);
}

__attribute__((visibility("default"))) void ts_os_test_fail(unsigned ops, long skip, long count) {
    _ts_os_test_fail(ops, skip, count);
}

long _ts_os_test_failures(void) {
    return atomic_load(&fail_total);
}

/* True when this call of `op` must fail. Costs one relaxed load when off. */
static bool should_fail(unsigned op) {
    if (__builtin_expect(!atomic_load_explicit(&fail_env_read, memory_order_relaxed), 0))
        read_fail_env();
    if (__builtin_expect(!(atomic_load_explicit(&fail_ops, memory_order_relaxed) & op), 1))
        return false;
    if (atomic_fetch_sub(&fail_skip, 1) > 0) return false;
    atomic_store(&fail_skip, 0);
    long left = atomic_load(&fail_count);
    if (left == 0) return false;
    if (left > 0) atomic_fetch_sub(&fail_count, 1);
    atomic_fetch_add(&fail_total, 1);
    return true;
}

/* ---- facts about the machine ------------------------------------------ */

size_t _ts_os_page_size(void) {
    static TS_STARTUP_DATA _Atomic size_t page; /* racing first calls store the same value */
    size_t p = atomic_load_explicit(&page, memory_order_relaxed);
    if (!p) {
        p = (size_t)sysconf(_SC_PAGESIZE);
        atomic_store_explicit(&page, p, memory_order_relaxed);
    }
    return p;
}

int _ts_os_cpu_count(void) {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) {
        int n = CPU_COUNT(&set);
        if (n > 0) return n;
    }
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

/* ---- mappings ----------------------------------------------------------- */

/* The failure hook, then a private anonymous mapping; NULL with ENOMEM. */
static void *map_with(size_t size, int prot, int flags) {
    if (should_fail(TS_OS_FAIL_MMAP)) {
        errno = ENOMEM;
        return NULL;
    }
    void *p = mmap(NULL, size, prot, MAP_PRIVATE | MAP_ANONYMOUS | flags, -1, 0);
    if (p == MAP_FAILED) {
        errno = ENOMEM;
        return NULL;
    }
    return p;
}

/* Over-map by `align`, then cut off the unaligned head and the tail. */
static void *map_aligned_with(size_t size, size_t align, int prot, int flags) {
    if (align <= _ts_os_page_size()) return map_with(size, prot, flags);
    if (size + align < size) {
        errno = ENOMEM;
        return NULL;
    }
    char *raw = map_with(size + align, prot, flags);
    if (!raw) return NULL;
    uintptr_t start = ((uintptr_t)raw + align - 1) & ~(uintptr_t)(align - 1);
    size_t head = start - (uintptr_t)raw;
    size_t tail = align - head;
    if (head) munmap(raw, head);
    if (tail) munmap((char *)start + size, tail);
    return (void *)start;
}

void *_ts_os_map(size_t size) {
    return map_with(size, PROT_READ | PROT_WRITE, 0);
}

void *_ts_os_map_aligned(size_t size, size_t align) {
    return map_aligned_with(size, align, PROT_READ | PROT_WRITE, 0);
}

/* PROT_NONE and MAP_NORESERVE: a private mapping that no access can write is
 * not charged against the commit limit (vm.overcommit_memory=2), and
 * MAP_NORESERVE keeps what _ts_os_commit opens in it uncharged under the
 * default heuristic modes too. */
void *_ts_os_reserve_aligned(size_t size, size_t align) {
    return map_aligned_with(size, align, PROT_NONE, MAP_NORESERVE);
}

bool _ts_os_commit(void *addr, size_t size) {
    if (should_fail(TS_OS_FAIL_COMMIT) || !_ts_os_protect(addr, size, true)) {
        errno = ENOMEM;
        return false;
    }
    return true;
}

bool _ts_os_map_uncharged_at(void *addr, size_t size, bool writable) {
    return mmap(addr, size, writable ? PROT_READ | PROT_WRITE : PROT_READ,
                MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0) == addr;
}

bool _ts_os_unmap(void *addr, size_t size) {
    return munmap(addr, size) == 0;
}

void *_ts_os_remap(void *addr, size_t old_size, size_t new_size, bool may_move) {
    if (should_fail(TS_OS_FAIL_REMAP)) {
        errno = ENOMEM;
        return NULL;
    }
    void *p = mremap(addr, old_size, new_size, may_move ? MREMAP_MAYMOVE : 0);
    if (p == MAP_FAILED) {
        errno = ENOMEM;
        return NULL;
    }
    return p;
}

void *_ts_os_remap_to(void *addr, size_t old_size, size_t new_size, void *target) {
    if (should_fail(TS_OS_FAIL_REMAP)) {
        munmap(target, new_size); /* as a failed move leaves it */
        errno = ENOMEM;
        return NULL;
    }
    void *p = mremap(addr, old_size, new_size, MREMAP_MAYMOVE | MREMAP_FIXED, target);
    if (p == MAP_FAILED) {
        /* The target is left as the kernel left it (os.h). Unmapping it here
         * after the kernel had done so, once another thread got the range,
         * took that thread's memory: a large block with a hole in it, under
         * realloc from several threads. */
        errno = ENOMEM;
        return NULL;
    }
    return p;
}

bool _ts_os_purge(void *addr, size_t size) {
    if (should_fail(TS_OS_FAIL_PURGE)) return false;
    return madvise(addr, size, MADV_DONTNEED) == 0;
}

bool _ts_os_protect(void *addr, size_t size, bool access) {
    return mprotect(addr, size, access ? PROT_READ | PROT_WRITE : PROT_NONE) == 0;
}

bool _ts_os_resident(void *addr, size_t size, unsigned char *vec) {
    if (should_fail(TS_OS_FAIL_RESIDENT)) return false;
    return mincore(addr, size, vec) == 0;
}

bool _ts_os_huge_pages(void *addr, size_t size, bool on) {
    return madvise(addr, size, on ? MADV_HUGEPAGE : MADV_NOHUGEPAGE) == 0;
}

uint64_t _ts_os_random(void) {
    uint64_t r = 0;
    /* The system call itself, not libc's wrapper, which a sanitizer's
     * runtime intercepts and may not be ready for when malloc first runs. */
    if (syscall(SYS_getrandom, &r, sizeof r, GRND_NONBLOCK) == (long)sizeof r) return r;
    /* No entropy yet (early boot) or no getrandom: the clock and addresses
     * ASLR placed, never AT_RANDOM's first bytes (glibc's stack canary). */
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    r = (uint64_t)ts.tv_nsec ^ (uint64_t)ts.tv_sec << 32 ^ (uint64_t)(uintptr_t)&r ^
        (uint64_t)(uintptr_t)&_ts_os_random << 17;
    r ^= r >> 31;
    r *= 0x94d049bb133111ebull;
    return r ^ r >> 29;
}

/* The kernel cannot name mappings (EINVAL: no CONFIG_ANON_VMA_NAME): no more
 * calls. Any other failure is that call's own. */
static TS_STARTUP_DATA _Atomic bool naming_unsupported;

void _ts_os_name(void *addr, size_t size, const char *name) {
    if (atomic_load_explicit(&naming_unsupported, memory_order_relaxed)) return;
    int saved = errno;
    if (prctl(PR_SET_VMA, PR_SET_VMA_ANON_NAME, (unsigned long)addr, size, (unsigned long)name) !=
            0 &&
        errno == EINVAL)
        atomic_store_explicit(&naming_unsupported, true, memory_order_relaxed);
    errno = saved;
}

/* ---- the program break ------------------------------------------------ */

#ifdef TS_OS_PRIVATE_BREAK
/* libtsalloc-classic leaves glibc as the process malloc, and glibc's main
 * arena moves the real break with its own sbrk calls, which sbrk_lock cannot
 * serialise: two threads could be handed the same memory. So the designs get
 * a break of their own, the bottom of a large PROT_NONE reservation (address
 * space only) made readable and writable as it grows. Same contract as the
 * real break: contiguous, grows up from a fixed base, pages given back read
 * as zeros when obtained again, access above the break faults. Everything
 * below runs with sbrk_lock held. */
#define PRIVATE_BREAK_MAX_SPAN ((size_t)1 << 40) /* 1 TiB, halved until the kernel agrees */
#define PRIVATE_BREAK_MIN_SPAN ((size_t)1 << 26)
static char *private_base, *private_brk, *private_limit;

/* TSALLOC_CLASSIC_BREAK=sbrk: the designs grow the real program break after
 * all, so that the program's own sbrk(0) sees the data segment, as the seed
 * assignment measures it. Read once, under sbrk_lock (-1: not yet). The risk:
 * glibc's main arena moves the same break under its own lock, not sbrk_lock,
 * and sbrk() itself reads and sets the break in two steps; two overlapping
 * growths can return the same memory. Shrinking is guarded on both sides,
 * but only against calls that do not overlap: _ts_os_sbrk_shrink_if_top
 * shrinks only if sbrk(0) is still the top it expects, and glibc's trim only
 * if sbrk(0) is still its own top. See docs/designs-sbrk.md. */
static int real_break = -1;

static bool use_real_break(void) {
    if (real_break < 0) {
        const char *v = getenv("TSALLOC_CLASSIC_BREAK");
        real_break = v && !strcasecmp(v, "sbrk");
    }
    return real_break;
}

static uintptr_t page_up(uintptr_t a) {
    uintptr_t page = _ts_os_page_size();
    return (a + page - 1) & ~(page - 1);
}

static bool private_reserve(void) {
    int saved = errno; /* refused spans must not leak an errno into a successful malloc */
    for (size_t span = PRIVATE_BREAK_MAX_SPAN; span >= PRIVATE_BREAK_MIN_SPAN; span /= 2) {
        void *p = mmap(NULL, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (p == MAP_FAILED) continue;
        private_base = private_brk = p;
        private_limit = private_base + span;
        _ts_os_name(p, span, "tsalloc break");
        errno = saved;
        return true;
    }
    return false;
}

/* sbrk on the private break (or the real one, see use_real_break): the old
 * break, or (void *)-1. */
static void *break_move(intptr_t increment) {
    if (use_real_break()) return sbrk(increment);
    if (!private_base && !private_reserve()) return (void *)-1;
    char *old = private_brk;
    if (increment > 0) {
        if ((uintptr_t)increment > (uintptr_t)(private_limit - old)) return (void *)-1;
        uintptr_t lo = page_up((uintptr_t)old), hi = page_up((uintptr_t)old + (uintptr_t)increment);
        if (hi > lo && mprotect((void *)lo, hi - lo, PROT_READ | PROT_WRITE) != 0)
            return (void *)-1;
    } else if (increment < 0) {
        uintptr_t down = (uintptr_t)0 - (uintptr_t)increment;
        if (down > (uintptr_t)(old - private_base)) return (void *)-1;
        /* Whole pages above the new break: dropped (zeros when regrown) and sealed. */
        uintptr_t lo = page_up((uintptr_t)old - down), hi = page_up((uintptr_t)old);
        if (hi > lo) {
            (void)madvise((void *)lo, hi - lo, MADV_DONTNEED);
            (void)mprotect((void *)lo, hi - lo, PROT_NONE);
        }
    }
    private_brk = old + increment;
    return old;
}
#else
static void *break_move(intptr_t increment) {
    return sbrk(increment);
}
#endif

void *_ts_os_sbrk(intptr_t increment) {
    if (increment > 0 && should_fail(TS_OS_FAIL_SBRK)) {
        errno = ENOMEM;
        return NULL;
    }
    pthread_mutex_lock(&sbrk_lock);
    void *old = break_move(increment);
    pthread_mutex_unlock(&sbrk_lock);
    if (old == (void *)-1) {
        errno = ENOMEM;
        return NULL;
    }
    return old;
}

void *_ts_os_brk_current(void) {
    pthread_mutex_lock(&sbrk_lock);
    void *cur = break_move(0);
    pthread_mutex_unlock(&sbrk_lock);
    return cur;
}

bool _ts_os_sbrk_shrink_if_top(void *expected_top, size_t size) {
    bool moved = false;
    pthread_mutex_lock(&sbrk_lock);
    if (break_move(0) == expected_top && break_move(-(intptr_t)size) != (void *)-1) moved = true;
    pthread_mutex_unlock(&sbrk_lock);
    return moved;
}

void _ts_os_atfork_prepare(void) {
    pthread_mutex_lock(&sbrk_lock);
}
void _ts_os_atfork_parent(void) {
    pthread_mutex_unlock(&sbrk_lock);
}
void _ts_os_atfork_child(void) {
    pthread_mutex_init(&sbrk_lock, NULL);
}

/* ---- small services ----------------------------------------------------- */

static int stderr_fd = STDERR_FILENO;

void _ts_os_keep_stderr(void) {
    int saved = errno;
    int fd = fcntl(STDERR_FILENO, F_DUPFD_CLOEXEC, 10);
    if (fd >= 0) stderr_fd = fd;
    errno = saved;
}

void _ts_os_write_stderr(const char *buf, size_t len) {
    while (len) {
        ssize_t n = write(stderr_fd, buf, len);
        if (n < 0) {
            if (errno == EINTR) continue;
            return;
        }
        buf += n;
        len -= (size_t)n;
    }
}

void _ts_os_yield(void) {
    sched_yield();
}

uint64_t _ts_os_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* A small /proc/self file into buf, NUL-terminated; its length, or -1.
 * errno is left as it was. */
static ssize_t read_proc_self(const char *path, char *buf, size_t size) {
    int saved = errno;
    ssize_t n = -1;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        n = read(fd, buf, size - 1);
        close(fd);
    }
    errno = saved;
    if (n < 0) return -1;
    buf[n] = 0;
    return n;
}

bool _ts_os_overcommit_strict(void) {
    const char *test = getenv("TSALLOC_TEST_STRICT_OVERCOMMIT");
    if (test && *test) return *test != '0';
    char buf[16];
    return read_proc_self("/proc/sys/vm/overcommit_memory", buf, sizeof buf) > 0 && buf[0] == '2';
}

size_t _ts_os_rss_bytes(void) {
    char buf[128];
    if (read_proc_self("/proc/self/statm", buf, sizeof buf) <= 0) return 0;
    char *p = buf;
    while (*p && *p != ' ') p++; /* skip total size */
    return (size_t)strtoul(p, NULL, 10) * _ts_os_page_size();
}

bool _ts_os_is_main_thread(void) {
    return syscall(SYS_gettid) == getpid();
}

int _ts_os_main_exited(void) {
    char buf[1024];
    if (read_proc_self("/proc/self/stat", buf, sizeof buf) <= 0) return -1;
    /* The state (field 3, after the command name, which ends at the last
     * ')') is the main thread's: Z once it has called pthread_exit while
     * other threads run. */
    char *p = strrchr(buf, ')');
    if (!p || p[1] != ' ' || !p[2]) return -1;
    return p[2] == 'Z';
}
