/* A DWARF call-frame unwinder for the heap profiler (x86-64, glibc 2.35+):
 * the stacks that glibc's backtrace() gives, without loading libgcc_s.
 *
 * Why: backtrace() loads libgcc_s on its first call (0.3-0.6 MiB of RSS a
 * process, counting the pages of libc it reads to bind the library, and
 * about 80000 instructions), and that load allocates, so it had to happen in
 * the constructor of every profiled process. This walker reads the same
 * `.eh_frame` tables, found with _dl_find_object (no lock, no allocation),
 * and follows only what a return address needs: the CFA rule (from %rsp or
 * %rbp plus an offset) and where %rbp and the return address were saved.
 * A frame whose rules it does not know (an expression, a signal frame's
 * trampoline, code without tables) ends the stack there.
 *
 * Invariants: it allocates nothing and takes no lock; it reads the unwind
 * tables of loaded objects, and stack memory only in [lo, hi), the part of
 * the calling thread's stack above the walker's own frame.
 * Lock order: none (runs outside the profiler's lock).
 */
#include "core/prof_internal.h"

#include <dlfcn.h>
#include <string.h>

#if defined(__x86_64__) && defined(DLFO_STRUCT_HAS_EH_DBASE) && !DLFO_STRUCT_HAS_EH_DBASE
#define TS_HAVE_UNWIND 1
/* Weak: a glibc older than 2.35 leaves it NULL, and backtrace() is used. */
extern int _dl_find_object(void *address, struct dl_find_object *result) __attribute__((weak));
#else
#define TS_HAVE_UNWIND 0
#endif

bool _ts_prof_unwind_ok(void) {
#if TS_HAVE_UNWIND
    return _dl_find_object != NULL;
#else
    return false;
#endif
}

#if TS_HAVE_UNWIND

enum { REG_RBP = 6, REG_RSP = 7, REG_RA = 16 };
enum { RULE_SAME, RULE_OFFSET, RULE_UNDEF, RULE_BAD };

typedef struct rules {
    unsigned cfa_reg;
    int64_t cfa_off;
    unsigned char rbp, ra; /* RULE_* */
    int64_t rbp_off, ra_off;
} rules_t;

typedef struct cie {
    const uint8_t *insns, *end;
    uint64_t code_align;
    int64_t data_align;
    uint64_t ra_reg;
    uint8_t fde_enc;
    bool z, signal; /* 'z': FDEs carry augmentation data; 'S': a signal frame */
} cie_t;

static uint64_t uleb(const uint8_t **p, const uint8_t *end) {
    uint64_t v = 0;
    unsigned shift = 0;
    while (*p < end) {
        uint8_t b = *(*p)++;
        if (shift < 64) v |= (uint64_t)(b & 0x7f) << shift;
        shift += 7;
        if (!(b & 0x80)) break;
    }
    return v;
}

static int64_t sleb(const uint8_t **p, const uint8_t *end) {
    uint64_t v = 0;
    unsigned shift = 0;
    uint8_t b = 0;
    while (*p < end) {
        b = *(*p)++;
        if (shift < 64) v |= (uint64_t)(b & 0x7f) << shift;
        shift += 7;
        if (!(b & 0x80)) break;
    }
    if (shift < 64 && (b & 0x40)) v |= ~(uint64_t)0 << shift;
    return (int64_t)v;
}

/* A pointer in DW_EH_PE encoding `enc` at *p; false for one not handled. */
static bool encoded(const uint8_t **p, const uint8_t *end, uint8_t enc, uintptr_t data,
                    uintptr_t *out) {
    const uint8_t *at = *p;
    uintptr_t v;
    if (enc == 0xff) return false; /* omitted */
    switch (enc & 0x0f) {
    case 0x00: /* absptr */
    case 0x04: /* udata8 */
    case 0x0c: /* sdata8 */
        if (end - at < 8) return false;
        memcpy(&v, at, 8);
        *p = at + 8;
        break;
    case 0x03: { /* udata4 */
        uint32_t u;
        if (end - at < 4) return false;
        memcpy(&u, at, 4);
        v = u;
        *p = at + 4;
        break;
    }
    case 0x0b: { /* sdata4 */
        int32_t s;
        if (end - at < 4) return false;
        memcpy(&s, at, 4);
        v = (uintptr_t)(intptr_t)s;
        *p = at + 4;
        break;
    }
    case 0x01:
        v = (uintptr_t)uleb(p, end);
        break;
    case 0x09:
        v = (uintptr_t)sleb(p, end);
        break;
    default:
        return false;
    }
    switch (enc & 0x70) {
    case 0x00:
        break;
    case 0x10:
        v += (uintptr_t)at;
        break; /* pcrel */
    case 0x30:
        v += data;
        break; /* datarel: from .eh_frame_hdr */
    default:
        return false;
    }
    if (enc & 0x80) return false; /* indirect: not in the tables walked here */
    *out = v;
    return true;
}

static bool parse_cie(const uint8_t *p, cie_t *c) {
    uint32_t len;
    memcpy(&len, p, 4);
    if (len == 0 || len == 0xffffffffu) return false;
    const uint8_t *end = p + 4 + len;
    p += 8; /* length, CIE id */
    uint8_t version = *p++;
    const char *aug = (const char *)p;
    size_t aug_len = strnlen(aug, (size_t)(end - p));
    p += aug_len + 1;
    if (aug[0] && aug[0] != 'z') return false;
    c->code_align = uleb(&p, end);
    c->data_align = sleb(&p, end);
    c->ra_reg = version == 1 ? *p++ : uleb(&p, end);
    c->fde_enc = 0; /* absptr */
    c->signal = false;
    c->z = aug[0] == 'z';
    if (c->z) {
        uint64_t n = uleb(&p, end);
        const uint8_t *data_end = p + n;
        for (const char *a = aug + 1; *a && p < data_end; a++) {
            uintptr_t ignored;
            if (*a == 'R')
                c->fde_enc = *p++;
            else if (*a == 'L')
                p++;
            else if (*a == 'P') {
                uint8_t enc = *p++;
                if (!encoded(&p, data_end, enc & 0x7f, 0, &ignored)) return false;
            } else if (*a == 'S')
                c->signal = true;
            else
                break; /* unknown: the length skips its data */
        }
        p = data_end;
    }
    if (p > end || c->ra_reg != REG_RA) return false;
    c->insns = p;
    c->end = end;
    return true;
}

#define STATES 8 /* DW_CFA_remember_state depth */

/* Runs the instructions [p, end) while the location stays at or below pc. */
static bool run_cfa(const uint8_t *p, const uint8_t *end, const cie_t *c, uintptr_t loc,
                    uintptr_t pc, rules_t *r, const rules_t *initial) {
    rules_t saved[STATES];
    unsigned depth = 0;
    while (p < end) {
        uint8_t op = *p++;
        uint64_t reg, delta = 0;
        int64_t off;
        switch (op >> 6) {
        case 1:
            delta = (op & 0x3f);
            goto advance;
        case 2:
            reg = op & 0x3f;
            off = (int64_t)uleb(&p, end) * c->data_align;
            goto set_offset;
        case 3:
            reg = op & 0x3f;
            goto restore;
        default:
            break;
        }
        switch (op) {
        case 0x00:
            continue; /* nop */
        case 0x01: {  /* set_loc */
            uintptr_t to;
            if (!encoded(&p, end, c->fde_enc, 0, &to)) return false;
            if (to > pc) return true;
            loc = to;
            continue;
        }
        case 0x02: /* advance_loc1, 2, 4: a 1-, 2- or 4-byte delta */
        case 0x03:
        case 0x04: {
            unsigned n = op == 0x02 ? 1 : op == 0x03 ? 2 : 4;
            if (end - p < (ptrdiff_t)n) return false;
            delta = 0;
            memcpy(&delta, p, n); /* little-endian: x86-64 only */
            p += n;
            goto advance;
        }
        case 0x05: /* offset_extended */
            reg = uleb(&p, end);
            off = (int64_t)uleb(&p, end) * c->data_align;
            goto set_offset;
        case 0x06:
            reg = uleb(&p, end);
            goto restore;
        case 0x07: /* undefined */
        case 0x08: /* same_value */
            reg = uleb(&p, end);
            if (reg == REG_RBP) r->rbp = op == 0x07 ? RULE_UNDEF : RULE_SAME;
            if (reg == REG_RA) r->ra = op == 0x07 ? RULE_UNDEF : RULE_SAME;
            continue;
        case 0x09: /* register */
            reg = uleb(&p, end);
            (void)uleb(&p, end);
            if (reg == REG_RBP) r->rbp = RULE_BAD;
            if (reg == REG_RA) r->ra = RULE_BAD;
            continue;
        case 0x0a: /* remember_state */
            if (depth == STATES) return false;
            saved[depth++] = *r;
            continue;
        case 0x0b: /* restore_state */
            if (!depth) return false;
            *r = saved[--depth];
            continue;
        case 0x0c: /* def_cfa */
            r->cfa_reg = (unsigned)uleb(&p, end);
            r->cfa_off = (int64_t)uleb(&p, end);
            continue;
        case 0x0d:
            r->cfa_reg = (unsigned)uleb(&p, end);
            continue;
        case 0x0e:
            r->cfa_off = (int64_t)uleb(&p, end);
            continue;
        case 0x0f: /* def_cfa_expression */
            r->cfa_reg = ~0u;
            p += uleb(&p, end);
            continue;
        case 0x10: /* expression */
        case 0x16: /* val_expression */
            reg = uleb(&p, end);
            p += uleb(&p, end);
            if (reg == REG_RBP) r->rbp = RULE_BAD;
            if (reg == REG_RA) r->ra = RULE_BAD;
            continue;
        case 0x11: /* offset_extended_sf */
            reg = uleb(&p, end);
            off = sleb(&p, end) * c->data_align;
            goto set_offset;
        case 0x12: /* def_cfa_sf */
            r->cfa_reg = (unsigned)uleb(&p, end);
            r->cfa_off = sleb(&p, end) * c->data_align;
            continue;
        case 0x13:
            r->cfa_off = sleb(&p, end) * c->data_align;
            continue;
        case 0x14: /* val_offset */
        case 0x15: /* val_offset_sf */
            reg = uleb(&p, end);
            if (op == 0x14)
                (void)uleb(&p, end);
            else
                (void)sleb(&p, end);
            if (reg == REG_RBP) r->rbp = RULE_BAD;
            if (reg == REG_RA) r->ra = RULE_BAD;
            continue;
        case 0x2e:
            (void)uleb(&p, end);
            continue; /* GNU_args_size */
        case 0x2f:    /* GNU_negative_offset_extended */
            reg = uleb(&p, end);
            off = -(int64_t)uleb(&p, end) * c->data_align;
            goto set_offset;
        default:
            return false;
        }
    advance:
        loc += delta * c->code_align;
        if (loc > pc) return true;
        continue;
    set_offset:
        if (reg == REG_RBP) {
            r->rbp = RULE_OFFSET;
            r->rbp_off = off;
        } else if (reg == REG_RA) {
            r->ra = RULE_OFFSET;
            r->ra_off = off;
        }
        continue;
    restore:
        if (!initial) return false; /* in the CIE itself */
        if (reg == REG_RBP) {
            r->rbp = initial->rbp;
            r->rbp_off = initial->rbp_off;
        } else if (reg == REG_RA) {
            r->ra = initial->ra;
            r->ra_off = initial->ra_off;
        }
        continue;
    }
    return true;
}

/* The rules at pc, from the FDE that covers it; false when none is known. */
static bool rules_at(uintptr_t pc, rules_t *r) {
    struct dl_find_object obj;
    if (_dl_find_object((void *)pc, &obj) != 0 || !obj.dlfo_eh_frame) return false;
    const uint8_t *hdr = obj.dlfo_eh_frame, *p = hdr + 4;
    /* .eh_frame_hdr: version 1, then a sorted table of (start, FDE) pairs,
     * each a 4-byte offset from the header (the layout every linker writes). */
    if (hdr[0] != 1 || hdr[3] != 0x3b) return false;
    uintptr_t ignored, count;
    if (!encoded(&p, p + 8, hdr[1], (uintptr_t)hdr, &ignored) ||
        !encoded(&p, p + 8, hdr[2], (uintptr_t)hdr, &count) || !count)
        return false;
    const int32_t *table = (const int32_t *)p;
    size_t lo = 0, hi = count;
    while (hi - lo > 1) { /* the last entry that starts at or below pc */
        size_t mid = lo + (hi - lo) / 2;
        if ((uintptr_t)hdr + (uintptr_t)(intptr_t)table[2 * mid] <= pc)
            lo = mid;
        else
            hi = mid;
    }
    if ((uintptr_t)hdr + (uintptr_t)(intptr_t)table[2 * lo] > pc) return false;
    const uint8_t *fde = hdr + table[2 * lo + 1];
    uint32_t len;
    int32_t cie_off;
    memcpy(&len, fde, 4);
    if (len == 0 || len == 0xffffffffu) return false;
    const uint8_t *fend = fde + 4 + len;
    memcpy(&cie_off, fde + 4, 4);
    cie_t c;
    if (!parse_cie(fde + 4 - cie_off, &c) || c.signal) return false;
    p = fde + 8;
    uintptr_t start, range;
    if (!encoded(&p, fend, c.fde_enc, 0, &start) ||
        !encoded(&p, fend, c.fde_enc & 0x0f, 0, &range) || pc < start || pc >= start + range)
        return false;
    if (c.z) p += uleb(&p, fend); /* the FDE's augmentation data */
    *r = (rules_t){REG_RSP, 8, RULE_SAME, RULE_SAME, 0, 0};
    if (!run_cfa(c.insns, c.end, &c, start, pc, r, NULL)) return false;
    rules_t initial = *r;
    return run_cfa(p, fend, &c, start, pc, r, &initial);
}

/* One frame up: from (pc, sp, bp) to the caller's. Reads the stack only in
 * [sp, hi), the part above the frame being left. */
static bool step(uintptr_t *pc, uintptr_t *sp, uintptr_t *bp, uintptr_t hi) {
    rules_t r;
    /* A return address points after its call: look up the call itself. */
    if (!rules_at(*pc - 1, &r)) return false;
    if (r.ra != RULE_OFFSET) return false; /* undefined: the outermost frame */
    uintptr_t cfa;
    if (r.cfa_reg == REG_RSP)
        cfa = *sp + (uintptr_t)r.cfa_off;
    else if (r.cfa_reg == REG_RBP)
        cfa = *bp + (uintptr_t)r.cfa_off;
    else
        return false;
    if (cfa <= *sp || cfa > hi || (cfa & 7)) return false;
    uintptr_t ra_at = cfa + (uintptr_t)r.ra_off, bp_at = cfa + (uintptr_t)r.rbp_off;
    if (ra_at < *sp || ra_at + 8 > hi || (ra_at & 7)) return false;
    if (r.rbp == RULE_OFFSET) {
        if (bp_at < *sp || bp_at + 8 > hi || (bp_at & 7)) return false;
        *bp = *(const uintptr_t *)bp_at;
    } else if (r.rbp != RULE_SAME) {
        *bp = 0;
    }
    *pc = *(const uintptr_t *)ra_at;
    *sp = cfa;
    return *pc >= 4096;
}

/* Starts from its caller's frame: pc, sp and bp as they will be once this
 * function has returned. */
static TS_NOINLINE unsigned unwind_here(void **out, unsigned max, void *ra, uintptr_t hi) {
    uintptr_t *frame = __builtin_frame_address(0);
    uintptr_t pc = frame[1], sp = (uintptr_t)(frame + 2), bp = frame[0];
    unsigned depth = 0;
    bool found = false;
    /* Our own frames first (a dozen at most), until the entry's return
     * address: the program's stack starts there. */
    for (unsigned n = 0; n < max + 16; n++) {
        if (!found && pc == (uintptr_t)ra) found = true;
        if (found) {
            out[depth++] = (void *)pc;
            if (depth == max) break;
        }
        if (!step(&pc, &sp, &bp, hi)) break;
    }
    return found ? depth : 0;
}

unsigned _ts_prof_unwind(void **out, unsigned max, void *ra, uintptr_t stack_hi) {
    if (!_ts_prof_unwind_ok() || !stack_hi) return 0;
    return unwind_here(out, max, ra, stack_hi);
}

#else

unsigned _ts_prof_unwind(void **out, unsigned max, void *ra, uintptr_t stack_hi) {
    (void)out;
    (void)max;
    (void)ra;
    (void)stack_hi;
    return 0;
}

#endif
