/* Size classes: the table is generated at start-up from one rule, never typed.
 *
 * Rule: classes every 16 bytes up to 128 B (16, 32, ..., 128), then four per
 * doubling: for 2^b < size <= 2^(b+1) the classes are 2^b + k * 2^(b-2),
 * k = 1..4, up to 512 KiB. That gives 56 classes. The worst-case waste of a
 * request is one step (under 25% of the request, e.g. 129 B -> 160 B); the
 * average waste over the sizes of a doubling stays under 12.5%.
 * ts_class_of() (internal.h) computes the class arithmetically; the tables
 * here add what the other paths need (page kind, direct slots, the class of
 * sizes above the direct table, the block-boundary test's inverse).
 *
 * Invariants: _ts_classes[] is strictly increasing; every size maps to the
 * smallest class that holds it; a class >= 4 * align is a multiple of align
 * for any power-of-two align, so aligned requests can use ordinary classes.
 */
#include "core/internal.h"

ts_class_info_t _ts_classes[TS_CLASS_COUNT];
uint8_t _ts_class_by_256[TS_CLASS_BY_256_MAX / 256];
uint8_t _ts_class_by_16k[TS_CLASS_MAX_SIZE >> 14];

_Static_assert(TS_LIST_CLASS_LAST + 1 < TS_CLASS_COUNT, "big classes follow the list classes");

/* The inverse of an odd number modulo 2^64 (Newton's iteration doubles the
 * correct low bits each step: 3, 6, 12, 24, 48, 96). */
static uint64_t inverse_of_odd(uint64_t odd) {
    uint64_t x = odd; /* correct to 3 bits: odd * odd = 1 mod 8 */
    for (int i = 0; i < 5; i++) x *= 2 - odd * x;
    return x;
}

static size_t class_size_by_rule(unsigned cls) {
    if (cls < 8) return (size_t)16 * (cls + 1);
    unsigned doubling = (cls - 8) / 4, k = (cls - 8) % 4 + 1;
    size_t base = (size_t)TS_CLASS_STEP_LIMIT << doubling;
    return base + k * (base / 4);
}

void _ts_sizeclass_init(void) {
    for (unsigned c = 0; c < TS_CLASS_COUNT; c++) {
        size_t size = class_size_by_rule(c);
        ts_class_info_t *ci = &_ts_classes[c];
        ci->size = (uint32_t)size;
        ci->kind = size <= TS_SMALL_PAGE_MAX    ? TS_KIND_SMALL
                   : size <= TS_MEDIUM_PAGE_MAX ? TS_KIND_MEDIUM
                                                : TS_KIND_BIG;
        ci->tz = (uint8_t)__builtin_ctzl(size);
        ci->inv = inverse_of_odd(size >> ci->tz);
        ci->direct_lo = 1;
        ci->direct_hi = 0;
    }
    for (size_t i = TS_DIRECT_MAX / 256; i < TS_CLASS_BY_256_MAX / 256; i++)
        _ts_class_by_256[i] = (uint8_t)ts_class_of(i * 256 + 256);
    for (size_t i = TS_CLASS_BY_256_MAX >> 14; i < (TS_CLASS_MAX_SIZE >> 14); i++)
        _ts_class_by_16k[i] = (uint8_t)ts_class_of((i + 1) << 14);
    /* Direct slot i serves sizes 16*(i-1)+1 .. 16*i (slot 0: size 0). */
    for (unsigned slot = 0; slot < TS_DIRECT_SLOTS; slot++) {
        unsigned c = ts_class_of((size_t)slot * 16);
        ts_class_info_t *ci = &_ts_classes[c];
        if (ci->direct_lo > ci->direct_hi) ci->direct_lo = (uint8_t)slot;
        ci->direct_hi = (uint8_t)slot;
    }
}

unsigned _ts_class_aligned(size_t size, size_t align) {
    if (size > TS_CLASS_MAX_SIZE || align > TS_MEDIUM_PAGE_MAX) return TS_CLASS_COUNT;
    /* Page starts are 64 KiB aligned, so a block size that is a multiple of
     * align gives aligned blocks. At most four steps: powers of two are classes. */
    for (unsigned c = ts_class_of(size < align ? align : size); c < TS_CLASS_COUNT; c++)
        if (_ts_classes[c].size % align == 0) return c;
    return TS_CLASS_COUNT;
}
