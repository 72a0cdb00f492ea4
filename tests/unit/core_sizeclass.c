/* Size classes of the fast allocator: the generated table against its rule.
 * - every size maps to the smallest class that holds it;
 * - the table is strictly increasing: 16-byte steps to 128 B, then exactly
 *   four classes per doubling ending on the power of two, up to 512 KiB;
 * - waste: below one step (under 25% of the request) for every size above
 *   128 B, and on average under 12.5% over the sizes of each doubling;
 * - page kinds, blocks per page, the direct table, the block-boundary test, and
 *   the classes chosen for aligned requests.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "core/internal.h"

static void test_mapping(void) {
    for (size_t size = 0; size <= TS_CLASS_MAX_SIZE; size++) {
        unsigned c = ts_class_of(size);
        CHECK_MSG(c < TS_CLASS_COUNT, "size %zu: class %u", size, c);
        CHECK_MSG(_ts_classes[c].size >= size, "size %zu in class %u of %u bytes", size, c,
                  _ts_classes[c].size);
        CHECK_MSG(c == 0 || _ts_classes[c - 1].size < size,
                  "size %zu: class %u is not the smallest", size, c);
    }
    CHECK_EQ(ts_class_of(TS_CLASS_MAX_SIZE), TS_CLASS_COUNT - 1);
}

static void test_table(void) {
    for (unsigned c = 0; c < 8; c++) CHECK_EQ(_ts_classes[c].size, 16 * (c + 1));
    for (unsigned c = 1; c < TS_CLASS_COUNT; c++)
        CHECK_MSG(_ts_classes[c].size > _ts_classes[c - 1].size, "not increasing at %u", c);
    for (unsigned c = 0; c < TS_CLASS_COUNT; c++) CHECK_EQ(_ts_classes[c].size % 16, 0);
    /* Four per doubling above 128: classes 8+4k .. 11+4k lie in (2^(7+k), 2^(8+k)]. */
    for (unsigned c = 8; c < TS_CLASS_COUNT; c++) {
        unsigned k = (c - 8) / 4;
        size_t lo = (size_t)128 << k, hi = lo * 2;
        CHECK_MSG(_ts_classes[c].size > lo && _ts_classes[c].size <= hi, "class %u = %u", c,
                  _ts_classes[c].size);
        if ((c - 8) % 4 == 3) CHECK_EQ(_ts_classes[c].size, hi);
    }
    CHECK_EQ(_ts_classes[TS_CLASS_COUNT - 1].size, TS_CLASS_MAX_SIZE);
}

static void test_waste(void) {
    for (unsigned k = 0; 8 + 4 * k < TS_CLASS_COUNT; k++) {
        size_t lo = (size_t)128 << k, hi = lo * 2, step = lo / 4;
        double sum = 0;
        for (size_t size = lo + 1; size <= hi; size++) {
            size_t block = _ts_classes[ts_class_of(size)].size;
            CHECK_MSG(block - size < step, "size %zu wastes %zu", size, block - size);
            CHECK_MSG((double)(block - size) < 0.25 * (double)size, "size %zu wastes %zu", size,
                      block - size);
            sum += (double)(block - size) / (double)size;
        }
        double mean = sum / (double)(hi - lo);
        CHECK_MSG(mean <= 0.125, "doubling (%zu, %zu]: mean waste %.3f", lo, hi, mean);
    }
}

/* Blocks per page and the waste at the end of a page, for every class and
 * both page sizes of its kind (the page that shares the 64 KiB header region
 * of its segment, and the others). */
static void test_pages(void) {
    static const size_t page[TS_KIND_COUNT] = {64 * 1024, 512 * 1024, 4 * 1024 * 1024};
    for (unsigned c = 0; c < TS_CLASS_COUNT; c++) {
        const ts_class_info_t *ci = &_ts_classes[c];
        size_t expect = ci->size <= TS_SMALL_PAGE_MAX    ? TS_KIND_SMALL
                        : ci->size <= TS_MEDIUM_PAGE_MAX ? TS_KIND_MEDIUM
                                                         : TS_KIND_BIG;
        CHECK_EQ(ci->kind, expect);
        CHECK_EQ(ts_class_is_list(c), ci->kind != TS_KIND_BIG); /* heads without counting */
        size_t areas[2] = {page[ci->kind], page[ci->kind] - TS_SEGMENT_HEADER};
        for (int k = 0; k < 2; k++) {
            size_t a = areas[k];
            if (ci->kind == TS_KIND_SMALL && k == 1) continue; /* small page 0 is the header */
            if (ci->kind == TS_KIND_BIG && k == 0) continue;   /* the one big page shares it */
            size_t blocks = a / ci->size;
            CHECK_MSG(blocks >= 7, "class %u (%u B): %zu blocks per page", c, ci->size, blocks);
            double tail = (double)(a - blocks * ci->size) / (double)a;
            CHECK_MSG(tail < 0.125, "class %u: %.3f of a %zu-byte page unused", c, tail, a);
        }
    }
}

static void test_class_table(void) {
    for (size_t size = TS_DIRECT_MAX + 1; size <= TS_CLASS_BY_256_MAX; size++)
        CHECK_MSG(_ts_class_by_256[(size - 1) >> 8] == ts_class_of(size), "size %zu", size);
    for (size_t size = TS_CLASS_BY_256_MAX + 1; size <= TS_CLASS_MAX_SIZE; size++)
        CHECK_MSG(_ts_class_by_16k[(size - 1) >> 14] == ts_class_of(size), "size %zu", size);
}

static void test_direct(void) {
    for (size_t size = 0; size <= TS_DIRECT_MAX; size++) {
        unsigned slot = (unsigned)((size + 15) / 16), c = ts_class_of(size);
        CHECK_MSG(_ts_classes[c].direct_lo <= slot && slot <= _ts_classes[c].direct_hi,
                  "size %zu: slot %u outside class %u's %u..%u", size, slot, c,
                  _ts_classes[c].direct_lo, _ts_classes[c].direct_hi);
    }
    unsigned covered = 0;
    for (unsigned c = 0; c < TS_CLASS_COUNT; c++)
        if (_ts_classes[c].direct_lo <= _ts_classes[c].direct_hi)
            covered += _ts_classes[c].direct_hi - _ts_classes[c].direct_lo + 1u;
    CHECK_EQ(covered, TS_DIRECT_SLOTS);
}

/* The block-boundary test (multiply by the inverse, rotate, compare with the
 * carved count) agrees with % and the carved range for every offset in a
 * page, and rejects offsets below the page start and far beyond it. */
static bool boundary_by_division(uint64_t off, uint64_t size, uint64_t carved) {
    return off % size == 0 && off / size < carved;
}

static void test_block_boundary(void) {
    uint64_t rng = 1;
    for (unsigned c = 0; c < TS_CLASS_COUNT; c++) {
        const ts_class_info_t *ci = &_ts_classes[c];
        uint64_t size = ci->size;
        CHECK_EQ((size >> ci->tz) & 1, 1);
        CHECK_EQ((size >> ci->tz) * ci->inv, 1); /* the inverse, modulo 2^64 */
        ts_page_t page;
        memset(&page, 0, sizeof page);
        page.start = (uintptr_t)1 << 40;
        page.inv = ci->inv;
        page.tz = ci->tz;
        uint64_t area = (uint64_t)4 << 20;
        uint64_t carveds[] = {0, 1, 7, area / size / 2, area / size};
        for (unsigned k = 0; k < sizeof carveds / sizeof carveds[0]; k++) {
            uint64_t carved = carveds[k];
            atomic_store(&page.carved, carved);
            for (uint64_t off = 0; k == 4 && off < area; off += 16)
                CHECK_MSG(ts_page_block_ok(&page, page.start + off) ==
                              boundary_by_division(off, size, carved),
                          "class %u carved %llu offset %llu", c, (unsigned long long)carved,
                          (unsigned long long)off);
            for (int i = 0; i < 10000; i++) {
                uint64_t off = ts_rand(&rng) % (area + 4096);
                CHECK(ts_page_block_ok(&page, page.start + off) ==
                      boundary_by_division(off, size, carved));
                /* Below the start (a header), and anywhere in the address space. */
                CHECK(!ts_page_block_ok(&page, page.start - 1 - ts_rand(&rng) % area));
                uint64_t any = ts_rand(&rng);
                CHECK(ts_page_block_ok(&page, page.start + any) ==
                      boundary_by_division(any, size, carved));
            }
        }
    }
}

static void test_aligned(void) {
    uint64_t rng = 7;
    for (size_t align = 32; align <= 65536; align *= 2) {
        for (int i = 0; i < 20000; i++) {
            size_t size = ts_rand_range(&rng, 0, i % 2 ? 4096 : TS_CLASS_MAX_SIZE);
            unsigned c = _ts_class_aligned(size, align);
            if (c == TS_CLASS_COUNT) {
                for (unsigned d = ts_class_of(size); d < TS_CLASS_COUNT; d++)
                    CHECK(_ts_classes[d].size % align != 0);
                continue;
            }
            CHECK(_ts_classes[c].size >= size && _ts_classes[c].size % align == 0);
            for (unsigned d = ts_class_of(size); d < c; d++)
                CHECK(_ts_classes[d].size % align != 0);
        }
    }
    CHECK_EQ(_ts_class_aligned(100, 1 << 17), TS_CLASS_COUNT);
}

int main(void) {
    free(malloc(1)); /* initialise (builds the table) */
    test_mapping();
    test_table();
    test_waste();
    test_pages();
    test_direct();
    test_class_table();
    test_block_boundary();
    test_aligned();
    printf("ok: %d classes, %u .. %u bytes\n", TS_CLASS_COUNT, _ts_classes[0].size,
           _ts_classes[TS_CLASS_COUNT - 1].size);
    return 0;
}
