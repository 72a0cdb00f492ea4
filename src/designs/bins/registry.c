/* bins: the registry of our regions, and the process-wide counters.
 *
 * The registry is one bit per 2 MiB of the 48-bit address space (16 MiB of
 * zero-filled .bss, of which only the words for addresses we use are ever
 * touched). A bit is set while a region header lives at that 2 MiB boundary,
 * so free() can tell our pointers from foreign ones with one load before it
 * reads any header.
 *
 * Invariants: a bit is set after its header is written and cleared before the
 * region is unmapped. Bits change with atomic RMW (regions come and go in many
 * threads at once) and are read relaxed: a thread that frees a block got it
 * through some synchronisation that also ordered the header and the bit.
 */
#include "base/counter.h"
#include "designs/bins/bins.h"

#define REGISTRY_WORDS (((size_t)1 << (BINS_ADDRESS_BITS - BINS_CHUNK_SHIFT)) / 64)

_Atomic uint64_t _ts_bins_registry[REGISTRY_WORDS];
ts_bins_stats_t _ts_bins_stats;

void _ts_bins_registry_add(uintptr_t header) {
    uintptr_t slot = header >> BINS_CHUNK_SHIFT;
    atomic_fetch_or_explicit(&_ts_bins_registry[slot >> 6], (uint64_t)1 << (slot & 63),
                             memory_order_release);
}

void _ts_bins_registry_remove(uintptr_t header) {
    uintptr_t slot = header >> BINS_CHUNK_SHIFT;
    atomic_fetch_and_explicit(&_ts_bins_registry[slot >> 6], ~((uint64_t)1 << (slot & 63)),
                              memory_order_release);
}

/* Raise the peak to the current chunk + mapped total. */
void _ts_bins_note_mapped_total(void) {
    size_t now = atomic_load_explicit(&_ts_bins_stats.chunk_bytes, BINS_RELAXED) +
                 atomic_load_explicit(&_ts_bins_stats.mapped_bytes, BINS_RELAXED);
    ts_peak_update(&_ts_bins_stats.peak, now);
}
