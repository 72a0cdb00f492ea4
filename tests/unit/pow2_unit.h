/* Shared by the pow2 unit test files (pow2_unit.c and pow2_unit_*.c): one
 * program per design, each case in its own process (see pow2_unit.c).
 */
#ifndef TS_TESTS_POW2_UNIT_H
#define TS_TESTS_POW2_UNIT_H

#include "check.h"

#include <errno.h>
#include <malloc.h>

#include "designs/pow2/pow2.h"
#include "tsalloc/pow2.h"

#define CHUNK   ((size_t)1 << 20)
#define WHOLE   (CHUNK - 16) /* the largest request a chunk serves */
#define NAME    POW2_NAME
#define PRINT_F POW2_PUBLIC(print_freelist)
#define PRINT_B POW2_PUBLIC(print_block)

/* ---- free-list snapshots (pow2_unit.c) ---------------------------------- */

typedef struct {
    unsigned part, order, lazy; /* lazy: from a lazy list */
    uintptr_t addr;
} fb_t;

enum { MAX_FB = 1 << 16 };
typedef struct {
    fb_t v[MAX_FB];
    size_t n;
} snap_t;

extern snap_t s0, s1, s2, want;
/* The last block_line(). */
extern char line[512];

void check_heap(const char *where);
void snapshot(snap_t *s);
int same_snap(snap_t *a, snap_t *b);
void copy_without(snap_t *dst, const snap_t *src, const fb_t *drop);
/* Only the entries from free lists (lazy == 0) or from lazy lists. */
void copy_kind(snap_t *dst, const snap_t *src, unsigned lazy);
/* First listed (list head) free block of partition `part` with order >= k. */
int head_at_least(const snap_t *s, unsigned part, unsigned k, fb_t *out);
/* Head of partition `part`'s lazy list of order k. */
int lazy_head(const snap_t *s, unsigned part, unsigned k, fb_t *out);
size_t count_lazy(const snap_t *s, unsigned part, unsigned k);
unsigned order_for(size_t n);
/* The lazy watermark of order k: 0 when merging is eager. Valid once the
 * heap has its first chunk. */
unsigned lazy_cap(unsigned k);
pow2_counters_t counters(void);
/* The dump line of the block at p (in `line`). */
const char *block_line(const void *p);

/* ---- the cases ------------------------------------------------------------ */

void test_split(void);     /* pow2_unit_blocks.c */
void test_realloc(void);   /* pow2_unit_blocks.c */
void test_mremap(void);    /* pow2_unit_blocks.c */
void test_giveback(void);  /* pow2_unit_blocks.c */
void test_dump(void);      /* pow2_unit_dump.c */
void test_osfail(void);    /* pow2_unit_dump.c */
void test_gap(void);       /* pow2_unit_dump.c */
void test_misuse(void);    /* pow2_unit_dump.c */
void test_lazy(void);      /* pow2_unit_lazy.c */
void test_lazyflush(void); /* pow2_unit_lazy.c */
void test_trim(void);      /* pow2_unit_lazy.c */

#endif
