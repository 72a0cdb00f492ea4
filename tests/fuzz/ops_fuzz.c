/* Fuzzing the malloc family: the input bytes are a program of allocation
 * operations (malloc, calloc, realloc, aligned, free, usable_size) over 64
 * slots. Every live block carries a pattern that is verified before it is
 * resized or freed, and every returned pointer must be aligned and usable.
 *
 * A deterministic driver (ctest) that runs many pseudo-random programs
 * under LD_PRELOAD of each design, through the override shim's entry points.
 * The coverage-guided fuzzing with the model oracle is fuzz_harness.c.
 */
#include "check.h"

#include <malloc.h>

enum { SLOTS = 64 };

typedef struct {
    unsigned char *ptr;
    size_t size;
    uint64_t tag;
} slot_t;

static size_t take_size(const uint8_t **data, size_t *len) {
    if (*len < 3) return 0;
    /* One byte picks the scale, two bytes the value: sizes up to ~2 MiB. */
    unsigned scale = (*data)[0] % 6;
    size_t value = (size_t)(*data)[1] | ((size_t)(*data)[2] << 8);
    *data += 3;
    *len -= 3;
    switch (scale) {
    case 0:
        return value % 64;
    case 1:
        return value % 1024;
    case 2:
        return value % 16384;
    case 3:
        return value % 262144;
    case 4:
        return value * 32 % (2u << 20);
    default:
        return value;
    }
}

static void check_block(const slot_t *s) {
    size_t n = s->size < 4096 ? s->size : 4096;
    CHECK_MSG(ts_verify(s->ptr, n, s->tag), "block %p (%zu) corrupted", (void *)s->ptr, s->size);
}

static void adopt(slot_t *s, void *p, size_t size, uint64_t tag) {
    CHECK_MSG(p != NULL, "allocation of %zu failed", size);
    CHECK(((uintptr_t)p & 15) == 0);
    CHECK(malloc_usable_size(p) >= size);
    s->ptr = p;
    s->size = size;
    s->tag = tag;
    ts_fill(p, size < 4096 ? size : 4096, tag);
}

int run_ops(const uint8_t *data, size_t len) {
    slot_t slots[SLOTS] = {{0}};
    uint64_t tag = 1;
    while (len >= 2) {
        unsigned op = data[0] % 7;
        slot_t *s = &slots[data[1] % SLOTS];
        data += 2;
        len -= 2;
        size_t size = take_size(&data, &len);
        tag++;
        switch (op) {
        case 0:
        case 1:
            if (s->ptr) check_block(s), free(s->ptr);
            adopt(s, malloc(size), size, tag);
            break;
        case 2:
            if (s->ptr) check_block(s), free(s->ptr);
            s->ptr = calloc(1, size);
            CHECK(s->ptr);
            for (size_t i = 0; i < size && i < 4096; i++) CHECK(s->ptr[i] == 0);
            adopt(s, s->ptr, size, tag);
            break;
        case 3:
            if (!s->ptr || size == 0) break;
            check_block(s);
            {
                size_t keep = s->size < size ? s->size : size;
                keep = keep < 4096 ? keep : 4096;
                unsigned char *q = realloc(s->ptr, size);
                CHECK(q);
                CHECK(ts_verify(q, keep, s->tag));
                adopt(s, q, size, tag);
            }
            break;
        case 4: {
            if (s->ptr) check_block(s), free(s->ptr);
            size_t align = (size_t)16 << (size % 10);
            void *q = aligned_alloc(align, size);
            CHECK(q && ((uintptr_t)q & (align - 1)) == 0);
            adopt(s, q, size, tag);
            break;
        }
        default:
            if (s->ptr) check_block(s), free(s->ptr);
            s->ptr = NULL;
            break;
        }
    }
    for (int i = 0; i < SLOTS; i++)
        if (slots[i].ptr) check_block(&slots[i]), free(slots[i].ptr);
    return 0;
}

/* usage: ops_fuzz [programs=2000] [seed=1] */
int main(int argc, char **argv) {
    ts_require_preloaded();
    long programs = argc > 1 ? atol(argv[1]) : 2000;
    uint64_t rng = argc > 2 ? strtoull(argv[2], NULL, 0) : 1;
    static uint8_t buf[8192];
    for (long p = 0; p < programs; p++) {
        size_t len = ts_rand_range(&rng, 0, sizeof buf);
        for (size_t i = 0; i < len; i++) buf[i] = (uint8_t)ts_rand(&rng);
        run_ops(buf, len);
    }
    printf("ops_fuzz: ok (%ld programs)\n", programs);
    return 0;
}
