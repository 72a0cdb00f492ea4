/* libtsalloc-record.so: a preloadable trace recorder. Every heap operation of
 * the program goes on to the next allocator (glibc, or a tsalloc design
 * preloaded after this library) and is written to TSALLOC_RECORD_FILE as one
 * line of a `tstrace 1` trace (docs/trace-format.md) that tsb-memsim replays.
 *
 * Files: real.c finds the real allocator (and serves dlsym's own allocations
 * before it is known); trace.c decides whether to record, writes the trace
 * file and follows the process through fork and exit; blocks.c keeps the
 * live blocks (slot ids and the pointer table) and turns each operation into
 * its line; entry.c holds the entry points, the malloc family and C++
 * operator new and delete (the lists of base/malloc_family.h).
 *
 * Invariants:
 * - No heap use inside the recorder: the pointer table and the free-id heap
 *   are mapped through the OS layer, the line buffer is static, the file is
 *   written with write(2). Calls the real allocator makes back into these
 *   entry points (one TLS flag, _ts_rec_in_wrapper) and dlsym's own
 *   allocations made before the real functions are known (a static
 *   bootstrap arena) are not recorded.
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
 * Lock order: one mutex, _ts_rec_lock, around the table, the ids, the
 * counters and the buffer. It is never held across a call into the real
 * allocator, so the allocator's own locks and fork handlers cannot deadlock
 * with it (the fork handlers hold it across fork itself, so the child finds
 * the table whole).
 */
#ifndef TS_TOOLS_RECORDER_H
#define TS_TOOLS_RECORDER_H

#include <malloc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>

#include "base/base.h"
#include "base/malloc_family.h"

/* ---- the real allocator (real.c) ---- */

typedef struct ts_rec_real {
#define TS_REC_REAL_POINTER(name, ret, params, args) ret(*name) params;
    TS_MALLOC_FAMILY(TS_REC_REAL_POINTER)
#undef TS_REC_REAL_POINTER
    void (*exit_now)(int); /* _exit */
} ts_rec_real_t;

enum { TS_REC_REAL_NONE, TS_REC_REAL_RESOLVING, TS_REC_REAL_READY };

TS_HIDDEN extern ts_rec_real_t _ts_rec_real;
TS_HIDDEN extern atomic_int _ts_rec_real_state;
/* Finds the real functions once; see ts_rec_real_ready. */
TS_HIDDEN TS_NOINLINE int _ts_rec_resolve_real(void);

/* 1 once the real functions are known. 0 only to the thread looking them up
 * (dlsym calling back), which then takes memory from the bootstrap arena. */
static inline int ts_rec_real_ready(void) {
    if (ts_likely(atomic_load_explicit(&_ts_rec_real_state, memory_order_acquire) ==
                  TS_REC_REAL_READY))
        return 1;
    return _ts_rec_resolve_real();
}

/* The bootstrap arena: never reused, so its memory is always zero. */
#define TS_REC_BOOT_BYTES (256 * 1024)
TS_HIDDEN extern unsigned char _ts_rec_boot_arena[TS_REC_BOOT_BYTES];
/* A block of the arena, preceded by its size; NULL (ENOMEM) when full. */
TS_HIDDEN void *_ts_rec_boot_alloc(size_t size, size_t align);

static inline int ts_rec_is_boot(const void *p) {
    return (uintptr_t)p >= (uintptr_t)_ts_rec_boot_arena &&
           (uintptr_t)p < (uintptr_t)_ts_rec_boot_arena + TS_REC_BOOT_BYTES;
}

/* This thread is inside one of the entry points (entry.c): nested calls are
 * not recorded. */
TS_HIDDEN extern TS_TLS int _ts_rec_in_wrapper;

/* ---- the trace (trace.c) ---- */

enum { TS_REC_UNDECIDED, TS_REC_ON, TS_REC_OFF };
TS_HIDDEN extern atomic_int _ts_rec_mode;
TS_HIDDEN extern pthread_mutex_t _ts_rec_lock;

/* For the report at the end of the trace; under _ts_rec_lock. */
typedef struct ts_rec_counts {
    uint64_t ops, live, peak, unknown_frees, unknown_reallocs, unseen_frees;
} ts_rec_counts_t;
TS_HIDDEN extern ts_rec_counts_t _ts_rec_counts;

/* Takes _ts_rec_lock; returns 1 with it held when this operation is
 * recorded (deciding whether to record at the first one). */
TS_HIDDEN int _ts_rec_lock_if_recording(void);
/* One operation line: "<kind> <slot>[ <a>[ <b>]]" with nargs of a, b. */
TS_HIDDEN void _ts_rec_emit(char kind, uint32_t slot, int nargs, uint64_t a, uint64_t b);
/* Recording ends for good (for this process); the trace so far stays valid.
 * why: the message for stderr, or NULL. */
TS_HIDDEN void _ts_rec_stop(const char *why, int fd_still_ours);

/* ---- the live blocks (blocks.c), all under _ts_rec_lock ---- */

#define TS_REC_NO_SLOT UINT32_MAX

/* What each entry point records: a new block (`m SLOT SIZE`, or for calloc
 * `c SLOT COUNT SIZE`), a free, and a realloc around the real call. */
TS_HIDDEN void _ts_rec_note_new(void *p, char kind, uint64_t count, uint64_t size);
TS_HIDDEN void _ts_rec_note_free(void *p);
/* Before a real realloc of p: takes p out of the table, keeping its slot. */
TS_HIDDEN uint32_t _ts_rec_note_resize_start(void *p);
/* After it: q is the result, slot what _ts_rec_note_resize_start returned. */
TS_HIDDEN void _ts_rec_note_resize_end(void *p, uint32_t slot, void *q, size_t size);
/* Forgets every block and id and unmaps the tables (a fork child that
 * starts a trace of its own). */
TS_HIDDEN void _ts_rec_blocks_forget(void);
/* The highest slot id handed out + 1. */
TS_HIDDEN uint32_t _ts_rec_slots_used(void);

#endif
