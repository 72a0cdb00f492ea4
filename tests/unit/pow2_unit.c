/* pow2 and pow2-partitioned, single-threaded unit tests. Linked with the
 * design's static library (it is malloc here) and compiled once per design
 * (POW2_PARTITIONED=1 for the partitioned one), so the hidden dump, check
 * and counters are callable. Each case runs in its own process:
 *   pow2_unit <split|realloc|mremap|giveback|dump|osfail|gap|misuse|
 *              lazy|lazyflush|trim>
 * Cases whose expectations depend on the merge policy read the lazy
 * watermark and also run with TSALLOC_POW2_LAZY=0 (eager merging).
 *
 * The cases are in pow2_unit_blocks.c (split, realloc, mremap, giveback),
 * pow2_unit_dump.c (dump, osfail, gap, misuse) and pow2_unit_lazy.c (lazy,
 * lazyflush, trim); this file holds the free-list snapshots they share and
 * main.
 *
 * Free-list snapshots are taken with the non-allocating dump into static
 * buffers, so the only heap operations between two snapshots are the ones
 * under test.
 */
#include "pow2_unit.h"

void check_heap(const char *where) {
    char why[256];
    int problems = P2(check_heap)(why, sizeof why);
    CHECK_MSG(problems == 0, "%s: %d heap problems, first: %s", where, problems, why);
}

/* ---- free-list snapshots ------------------------------------------------ */

static char dump_buf[8 << 20];
snap_t s0, s1, s2, want;

void snapshot(snap_t *s) {
    size_t len = P2(dump_freelist)(dump_buf, sizeof dump_buf);
    CHECK(len < sizeof dump_buf);
    s->n = 0;
    unsigned part = 0;
    for (char *line = dump_buf; *line;) {
        char *end = strchr(line, '\n');
        CHECK(end);
        *end = 0;
        if (strncmp(line, "partition ", 10) == 0) {
            part = (unsigned)strtoul(line + 10, NULL, 10);
        } else if (strncmp(line, "  order ", 8) == 0 || strncmp(line, "  lazy ", 7) == 0) {
            unsigned lazy = line[2] == 'l';
            char *p;
            unsigned order = (unsigned)strtoul(line + (lazy ? 7 : 8), &p, 10);
            p = strchr(p, ':');
            CHECK(p);
            p++;
            while (*p == ' ') {
                char *q;
                uintptr_t a = (uintptr_t)strtoull(p + 1, &q, 16);
                CHECK(q > p + 1 && s->n < MAX_FB);
                s->v[s->n++] = (fb_t){part, order, lazy, a};
                p = q;
            }
        }
        line = end + 1;
    }
}

static int fb_less(const fb_t *a, const fb_t *b) {
    if (a->part != b->part) return a->part < b->part;
    if (a->lazy != b->lazy) return a->lazy < b->lazy;
    if (a->order != b->order) return a->order < b->order;
    return a->addr < b->addr;
}

/* Shell sort: qsort may allocate. */
static void sort_snap(snap_t *s) {
    for (size_t gap = s->n / 2; gap; gap /= 2)
        for (size_t i = gap; i < s->n; i++)
            for (size_t j = i; j >= gap && fb_less(&s->v[j], &s->v[j - gap]); j -= gap) {
                fb_t t = s->v[j];
                s->v[j] = s->v[j - gap];
                s->v[j - gap] = t;
            }
}

int same_snap(snap_t *a, snap_t *b) {
    sort_snap(a);
    sort_snap(b);
    if (a->n != b->n) return 0;
    for (size_t i = 0; i < a->n; i++)
        if (a->v[i].part != b->v[i].part || a->v[i].order != b->v[i].order ||
            a->v[i].lazy != b->v[i].lazy || a->v[i].addr != b->v[i].addr)
            return 0;
    return 1;
}

void copy_without(snap_t *dst, const snap_t *src, const fb_t *drop) {
    dst->n = 0;
    for (size_t i = 0; i < src->n; i++)
        if (!(src->v[i].part == drop->part && src->v[i].order == drop->order &&
              src->v[i].lazy == drop->lazy && src->v[i].addr == drop->addr))
            dst->v[dst->n++] = src->v[i];
}

/* Only the entries from free lists (lazy == 0) or from lazy lists. */
void copy_kind(snap_t *dst, const snap_t *src, unsigned lazy) {
    dst->n = 0;
    for (size_t i = 0; i < src->n; i++)
        if (src->v[i].lazy == lazy) dst->v[dst->n++] = src->v[i];
}

/* First listed (list head) free block of partition `part` with order >= k. */
int head_at_least(const snap_t *s, unsigned part, unsigned k, fb_t *out) {
    int found = 0;
    for (size_t i = 0; i < s->n; i++) { /* listed in dump order: heads first */
        const fb_t *f = &s->v[i];
        if (f->part != part || f->order < k || f->lazy) continue;
        if (!found || f->order < out->order) {
            *out = *f;
            found = 1;
        }
    }
    return found;
}

/* Head of partition `part`'s lazy list of order k. */
int lazy_head(const snap_t *s, unsigned part, unsigned k, fb_t *out) {
    for (size_t i = 0; i < s->n; i++)
        if (s->v[i].part == part && s->v[i].order == k && s->v[i].lazy) {
            *out = s->v[i];
            return 1;
        }
    return 0;
}

size_t count_lazy(const snap_t *s, unsigned part, unsigned k) {
    size_t n = 0;
    for (size_t i = 0; i < s->n; i++)
        n += s->v[i].part == part && s->v[i].order == k && s->v[i].lazy;
    return n;
}

unsigned order_for(size_t n) {
    unsigned k = 5;
    while (((size_t)1 << k) < n + 16) k++;
    return k;
}

/* The lazy watermark of order k: 0 when merging is eager. Valid once the
 * heap has its first chunk. */
unsigned lazy_cap(unsigned k) {
    return k < 20 ? atomic_load(&P2(lazy_cap)[k - 5]) : 0;
}

pow2_counters_t counters(void) {
    pow2_counters_t c;
    P2(counters)(&c);
    return c;
}

char line[512];

const char *block_line(const void *p) {
    size_t n = P2(dump_block)(p, line, sizeof line);
    CHECK(n < sizeof line);
    return line;
}

int main(int argc, char **argv) {
    CHECK(argc == 2);
    const char *t = argv[1];
    if (!strcmp(t, "split"))
        test_split();
    else if (!strcmp(t, "realloc"))
        test_realloc();
    else if (!strcmp(t, "mremap"))
        test_mremap();
    else if (!strcmp(t, "giveback"))
        test_giveback();
    else if (!strcmp(t, "dump"))
        test_dump();
    else if (!strcmp(t, "osfail"))
        test_osfail();
    else if (!strcmp(t, "gap"))
        test_gap();
    else if (!strcmp(t, "misuse"))
        test_misuse();
    else if (!strcmp(t, "lazy"))
        test_lazy();
    else if (!strcmp(t, "lazyflush"))
        test_lazyflush();
    else if (!strcmp(t, "trim"))
        test_trim();
    else
        CHECK_MSG(0, "unknown case %s", t);
    return 0;
}
