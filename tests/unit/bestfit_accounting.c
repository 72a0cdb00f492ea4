/* Free-space accounting: after every operation, get_data_segment_free_space_size
 * equals the bytes of the walked free blocks (headers included), and
 * get_data_segment_size equals free bytes + in-use blocks + chunk slack: no
 * byte is lost or counted twice, also while the other design and glibc move
 * the break in between. With both designs in use, the two functions add up
 * what each design reports.
 * Usage: bestfit_accounting lock|nolock */
#include "bestfit_harness.h"

#include <unistd.h>

TS_HIDDEN size_t _ts_bestfit_segment_bytes(void);
TS_HIDDEN size_t _ts_bestfit_tls_segment_bytes(void);
TS_HIDDEN size_t _ts_bestfit_free_space_bytes(void);
TS_HIDDEN size_t _ts_bestfit_tls_free_space_bytes(void);

#define SLOTS 300
#define OPS   6000

static void *slot[SLOTS];
static size_t len[SLOTS];

static size_t live_block_bytes(const bf_api_t *api) {
    size_t total = 0;
    for (int i = 0; i < SLOTS; i++)
        if (slot[i]) total += bf_block_size_of(api, slot[i]);
    return total;
}

int main(int argc, char **argv) {
    const bf_api_t *api = bf_api_from_args(argc, argv);
    const bf_api_t *other = api == &bf_apis[0] ? &bf_apis[1] : &bf_apis[0];
    bf_snapshot_t s = {0};
    uint64_t rng = 777;
    void *other_blocks[64] = {0};

    for (int op = 0; op < OPS; op++) {
        int i = (int)ts_rand_range(&rng, 0, SLOTS - 1);
        unsigned kind = (unsigned)ts_rand_range(&rng, 0, 99);
        size_t n = ts_rand_range(&rng, 0, 100) < 90 ? ts_rand_range(&rng, 0, 2000)
                                                    : ts_rand_range(&rng, 2000, 200000);
        if (slot[i] && kind < 60) {
            CHECK(ts_verify(slot[i], len[i], (uint64_t)i));
            api->free(slot[i]);
            slot[i] = NULL;
        } else if (slot[i] && kind < 80) {
            bf_realloc_slot(api, &slot[i], &len[i], (uint64_t)i, n);
        } else if (!slot[i]) {
            void *p = kind < 10   ? api->memalign((size_t)64 << (kind % 6), n)
                      : kind < 20 ? api->calloc(n)
                                  : api->malloc(n);
            CHECK(p);
            slot[i] = p;
            len[i] = n;
            ts_fill(p, n, (uint64_t)i);
        }
        if (op % 97 == 0) { /* the other design and glibc move the break too */
            int k = (op / 97) % 64;
            if (other_blocks[k]) other->free(other_blocks[k]);
            other_blocks[k] = other->malloc(ts_rand_range(&rng, 1, 70000));
            free(malloc(ts_rand_range(&rng, 1, 5000)));
        }
        bf_snapshot(api, &s);
        size_t own_free = api == &bf_apis[0] ? _ts_bestfit_free_space_bytes()
                                             : _ts_bestfit_tls_free_space_bytes();
        size_t own_segment =
            api == &bf_apis[0] ? _ts_bestfit_segment_bytes() : _ts_bestfit_tls_segment_bytes();
        CHECK_EQ(own_free, s.bytes);
        CHECK_EQ(own_segment, s.bytes + live_block_bytes(api) + api->wasted());
        CHECK_EQ(get_data_segment_size(),
                 _ts_bestfit_segment_bytes() + _ts_bestfit_tls_segment_bytes());
        CHECK_EQ(get_data_segment_free_space_size(),
                 _ts_bestfit_free_space_bytes() + _ts_bestfit_tls_free_space_bytes());
        if (op % 500 == 0) BF_CHECK_HEAP(api);
    }
    BF_CHECK_HEAP(api);
    BF_CHECK_HEAP(other);
    printf("bestfit_accounting %s: ok (data segment %lu, free %lu)\n", api->name,
           get_data_segment_size(), get_data_segment_free_space_size());
    for (int i = 0; i < SLOTS; i++) api->free(slot[i]);
    for (int k = 0; k < 64; k++) other->free(other_blocks[k]);
    BF_CHECK_HEAP(api);
    bf_snapshot_free(&s);
    return 0;
}
