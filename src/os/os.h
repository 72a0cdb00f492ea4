/* The OS layer: the only code in tsalloc that asks the kernel for memory.
 *
 * Everything that maps, unmaps, purges, remaps or moves the program break goes
 * through here, so that tests can make the OS refuse (see the failure hook at
 * the end) and so that a newcomer finds every system call in one file.
 *
 * Invariants:
 * - Functions that return memory return NULL on failure with errno = ENOMEM;
 *   they never abort.
 * - Mapped memory is readable, writable, private, anonymous and zero-filled.
 * - sbrk calls are serialised by one internal lock (the program break is
 *   process-wide state); no allocator lock is ever taken while it is held.
 */
#ifndef TS_OS_OS_H
#define TS_OS_OS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TS_HIDDEN __attribute__((visibility("hidden")))
/* Small state that every process touches at start-up or at its first
 * allocation: placed in .data, whose few pages the loader writes anyway (the
 * relocations of the static heaps, the zeroed head of the bss), rather than
 * in bss pages scattered between large arrays, each a page fault of its own
 * (docs/core/threads-and-fork.md, tests/unit/core_startup.c). */
#define TS_STARTUP_DATA __attribute__((section(".data.tsalloc_startup")))
/* A lock the fork handlers take (or state they reset in the child): all of
 * them lie together in one section, a cache line each. After a fork the
 * parent's unlocks and the child's re-initialisations write every page they
 * lie on, each a copy-on-write fault in both processes; spread over the bss
 * they cost 13 such faults a fork, together one or two
 * (tests/unit/core_startup.c). */
#define TS_FORK_LOCK __attribute__((section("tsalloc_fork_locks"), aligned(64)))

/* The OS page size (4096 here) and the number of CPUs this process may run on. */
TS_HIDDEN size_t _ts_os_page_size(void);
TS_HIDDEN int _ts_os_cpu_count(void);

/* Anonymous mappings. `align` must be a power of two; a multiple of the page
 * size gives a region aligned to it (over-map and trim). */
TS_HIDDEN void *_ts_os_map(size_t size);
TS_HIDDEN void *_ts_os_map_aligned(size_t size, size_t align);
TS_HIDDEN bool _ts_os_unmap(void *addr, size_t size);
/* Address space only, aligned as _ts_os_map_aligned: any access faults, and
 * nothing of it counts against the kernel's commit limit until
 * _ts_os_commit makes a part of it readable and writable (zero-filled).
 * _ts_os_commit fails (false, ENOMEM) where the kernel refuses the memory:
 * under vm.overcommit_memory=2, when the commit limit is reached. */
TS_HIDDEN void *_ts_os_reserve_aligned(size_t size, size_t align);
TS_HIDDEN bool _ts_os_commit(void *addr, size_t size);
/* Replace the page-aligned range [addr, addr + size), which must hold only
 * zeros nothing else refers to yet, with fresh zero pages that the commit
 * limit does not count: for large, sparsely written arrays in the library's
 * bss. Writable, they are uncharged through MAP_NORESERVE, which the kernel
 * ignores under vm.overcommit_memory=2; read-only, they are uncharged in
 * every mode, and _ts_os_commit makes the pages to be written writable. */
TS_HIDDEN bool _ts_os_map_uncharged_at(void *addr, size_t size, bool writable);
/* True under vm.overcommit_memory=2 (the kernel refuses memory past its
 * commit limit), or when TSALLOC_TEST_STRICT_OVERCOMMIT=1 says to act so
 * (tests). Reads /proc; does not allocate. */
TS_HIDDEN bool _ts_os_overcommit_strict(void);
/* Resize a mapping; may move it when `may_move`. NULL on failure (the old
 * mapping is then untouched). */
TS_HIDDEN void *_ts_os_remap(void *addr, size_t old_size, size_t new_size, bool may_move);
/* Move a mapping onto [target, target + new_size), replacing whatever is
 * mapped there (MREMAP_FIXED): lets a design keep its alignment while the
 * kernel moves the pages instead of copying them. NULL with ENOMEM on
 * failure: the old mapping is then untouched, and the target is given up:
 * the kernel may have unmapped it before failing (mainline's mremap_to
 * unmaps the target before it checks the source; this machine's 6.18
 * kernel kept it for a source across two VMAs), and then another thread
 * may have mapped the range since, so
 * neither this function nor the caller may unmap it. Where the kernel left
 * it mapped, that untouched range stays mapped (address space, no memory). */
TS_HIDDEN void *_ts_os_remap_to(void *addr, size_t old_size, size_t new_size, void *target);
/* Give the physical pages back (MADV_DONTNEED): RSS falls at once, the range
 * stays mapped and reads back as zeros. */
TS_HIDDEN bool _ts_os_purge(void *addr, size_t size);
/* Make a page-aligned range inaccessible (any access faults), or readable
 * and writable again (mprotect). */
TS_HIDDEN bool _ts_os_protect(void *addr, size_t size, bool access);
/* Which pages of [addr, addr + size) are resident (mincore): bit 0 of
 * vec[i] for page i. A page that is not resident may still hold data (it
 * may be swapped out); only a purge makes it read as zeros. */
TS_HIDDEN bool _ts_os_resident(void *addr, size_t size, unsigned char *vec);
/* Ask for transparent huge pages in a range not yet touched (MADV_HUGEPAGE:
 * its first touch then maps a whole 2 MiB page), or stop asking
 * (MADV_NOHUGEPAGE: khugepaged will not fill purged holes back in). Best
 * effort: without THP in the kernel nothing changes. */
TS_HIDDEN bool _ts_os_huge_pages(void *addr, size_t size, bool on);
/* 64 random bits (getrandom; the clock and ASLR addresses if that fails).
 * No allocation. */
TS_HIDDEN uint64_t _ts_os_random(void);
/* Name a mapping in /proc/self/maps (PR_SET_VMA_ANON_NAME); best effort. */
TS_HIDDEN void _ts_os_name(void *addr, size_t size, const char *name);

/* The program break. Returns the old break, or NULL with errno = ENOMEM.
 * Built with TS_OS_PRIVATE_BREAK (libtsalloc-classic, where glibc's malloc
 * moves the real break unsynchronised), these three move a break private to
 * tsalloc, at the bottom of a large reserved region, with the same contract. */
TS_HIDDEN void *_ts_os_sbrk(intptr_t increment);
/* Current break, without moving it. */
TS_HIDDEN void *_ts_os_brk_current(void);
/* Move the break down by `size` only if it still ends at `expected_top` (so a
 * foreign sbrk in between is never undone). True when it was moved. */
TS_HIDDEN bool _ts_os_sbrk_shrink_if_top(void *expected_top, size_t size);
/* Around fork: hold the sbrk lock so the child gets it in a known state. */
TS_HIDDEN void _ts_os_atfork_prepare(void);
TS_HIDDEN void _ts_os_atfork_parent(void);
TS_HIDDEN void _ts_os_atfork_child(void);

/* Small services that must not allocate. */
TS_HIDDEN void _ts_os_write_stderr(const char *buf, size_t len);
/* Keep a private duplicate of stderr for _ts_os_write_stderr, so statistics
 * printed at exit survive programs (ls, echo) that close stderr first. */
TS_HIDDEN void _ts_os_keep_stderr(void);
TS_HIDDEN void _ts_os_yield(void);
/* Monotonic clock in nanoseconds. */
TS_HIDDEN uint64_t _ts_os_now_ns(void);
/* Resident set size of this process in bytes (from /proc/self/statm), 0 if unknown. */
TS_HIDDEN size_t _ts_os_rss_bytes(void);
/* 1 when the main thread has called pthread_exit and waits as a zombie for
 * the other threads (from /proc/self/stat), 0 when it runs, -1 if unknown. */
TS_HIDDEN int _ts_os_main_exited(void);
/* True on the process's main thread (its thread id is the process id). */
TS_HIDDEN bool _ts_os_is_main_thread(void);

/* Test-only failure hook: make the OS say no.
 * After `skip` more successful calls of the operations in `ops` (a mask of
 * TS_OS_FAIL_*), the next `count` calls fail with ENOMEM (count < 0: all of
 * them). _ts_os_test_fail(0, 0, 0) turns it off. Not for production use; also
 * settable from the environment as TSALLOC_TEST_OS_FAIL=<ops>:<skip>:<count>,
 * with <ops> a list like "sbrk,mmap" (names: mmap, sbrk, remap, purge,
 * resident, commit). */
enum {
    TS_OS_FAIL_MMAP = 1 << 0,     /* _ts_os_map, _ts_os_map_aligned */
    TS_OS_FAIL_SBRK = 1 << 1,     /* _ts_os_sbrk with a positive increment */
    TS_OS_FAIL_REMAP = 1 << 2,    /* _ts_os_remap, _ts_os_remap_to */
    TS_OS_FAIL_PURGE = 1 << 3,    /* _ts_os_purge (as madvise fails on locked memory) */
    TS_OS_FAIL_RESIDENT = 1 << 4, /* _ts_os_resident */
    TS_OS_FAIL_COMMIT = 1 << 5,   /* _ts_os_commit */
};
TS_HIDDEN void _ts_os_test_fail(unsigned ops, long skip, long count);
/* How many calls the hook has refused so far (for tests). */
TS_HIDDEN long _ts_os_test_failures(void);
/* Public, unprefixed alias for tests that reach the hook through a preloaded .so. */
void ts_os_test_fail(unsigned ops, long skip, long count);

#ifdef __cplusplus
}
#endif

#endif
