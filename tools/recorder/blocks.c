/* The live blocks of the trace: a slot id for each, and a table from
 * address to slot; and what each entry point records with them.
 *
 * Invariants (all under _ts_rec_lock):
 * - An address is in the table exactly while its block is live in the
 *   trace (recorder.h says in which order the entry points keep that).
 * - Slot ids are below MAX_SLOTS, the format's limit; a free id is reused
 *   lowest first, so the ids stay below the peak number of live blocks.
 * - Both tables are mapped through the OS layer, never taken from the heap.
 */
#include "recorder.h"

#include <errno.h>

#define MAX_SLOTS (1u << 26) /* the format's limit on slot ids */

/* Open addressing, linear probing, deletion by backward shift (no tombstones).
 * Address 0 marks an empty entry. */
typedef struct {
    uintptr_t addr;
    uint32_t slot;
} entry_t;

static entry_t *table;
static size_t table_cap, table_used; /* cap: a power of two, or 0 before first use */
static unsigned table_bits;

/* Free slot ids as a binary min-heap, so the lowest free id is reused first and
 * the ids stay below the peak number of live blocks. Its capacity is kept at
 * least next_id, so a release never needs memory. */
static uint32_t *free_ids;
static size_t free_count, free_cap;
static uint32_t next_id; /* every id below it is live, reserved by a realloc, or free */

void _ts_rec_blocks_forget(void) {
    if (table) _ts_os_unmap(table, table_cap * sizeof(entry_t));
    if (free_ids) _ts_os_unmap(free_ids, free_cap * sizeof(uint32_t));
    table = NULL, free_ids = NULL;
    table_cap = table_used = table_bits = 0;
    free_count = free_cap = 0;
    next_id = 0;
}

uint32_t _ts_rec_slots_used(void) {
    return next_id;
}

/* ---- slot ids ---- */

static int take_id(uint32_t *out) {
    if (free_count) {
        *out = free_ids[0];
        uint32_t last = free_ids[--free_count];
        size_t i = 0;
        for (;;) { /* sift the last id down from the root */
            size_t c = 2 * i + 1;
            if (c >= free_count) break;
            if (c + 1 < free_count && free_ids[c + 1] < free_ids[c]) c++;
            if (last <= free_ids[c]) break;
            free_ids[i] = free_ids[c];
            i = c;
        }
        if (free_count) free_ids[i] = last;
        return 1;
    }
    if (next_id >= MAX_SLOTS) {
        _ts_rec_stop("more than 2^26 live blocks, the format's limit; recording stopped", 1);
        return 0;
    }
    if (next_id >= free_cap) {
        size_t cap = free_cap ? free_cap * 2 : 16384;
        uint32_t *grown = free_ids ? _ts_os_remap(free_ids, free_cap * sizeof(uint32_t),
                                                  cap * sizeof(uint32_t), true)
                                   : _ts_os_map(cap * sizeof(uint32_t));
        if (!grown) {
            _ts_rec_stop("out of memory for the id table; recording stopped", 1);
            return 0;
        }
        free_ids = grown, free_cap = cap;
    }
    *out = next_id++;
    return 1;
}

static void release_id(uint32_t id) {
    size_t i = free_count++;
    while (i > 0 && free_ids[(i - 1) / 2] > id) { /* sift up */
        free_ids[i] = free_ids[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    free_ids[i] = id;
}

/* ---- the pointer table ---- */

static size_t home_of(uintptr_t addr) {
    return (size_t)(((uint64_t)addr * 0x9E3779B97F4A7C15ull) >> (64 - table_bits));
}

/* The index holding addr, or the empty entry where it would go. */
static size_t find(uintptr_t addr) {
    size_t mask = table_cap - 1, i = home_of(addr);
    while (table[i].addr && table[i].addr != addr) i = (i + 1) & mask;
    return i;
}

static void remove_at(size_t hole) {
    size_t mask = table_cap - 1;
    for (size_t j = (hole + 1) & mask; table[j].addr; j = (j + 1) & mask) {
        /* An entry may fill the hole when the hole lies between its home and it. */
        size_t home = home_of(table[j].addr);
        if (((j - home) & mask) >= ((j - hole) & mask)) {
            table[hole] = table[j];
            hole = j;
        }
    }
    table[hole].addr = 0;
    table_used--;
}

/* Keeps the table at most half full. */
static int table_room(void) {
    if (table && (table_used + 1) * 2 <= table_cap) return 1;
    unsigned bits = table ? table_bits + 1 : 16;
    size_t cap = (size_t)1 << bits;
    entry_t *grown = _ts_os_map(cap * sizeof(entry_t));
    if (!grown) {
        _ts_rec_stop("out of memory for the pointer table; recording stopped", 1);
        return 0;
    }
    entry_t *old = table;
    size_t old_cap = table_cap;
    table = grown, table_cap = cap, table_bits = bits;
    for (size_t i = 0; i < old_cap; i++)
        if (old[i].addr) table[find(old[i].addr)] = old[i];
    if (old) _ts_os_unmap(old, old_cap * sizeof(entry_t));
    return 1;
}

/* Enters addr under slot. An entry already there means the block was freed
 * where the recorder could not see it: close it with an `f` first. */
static int enter_block(uintptr_t addr, uint32_t slot) {
    if (!table_room()) return 0;
    size_t i = find(addr);
    if (table[i].addr == addr) {
        _ts_rec_emit('f', table[i].slot, 0, 0, 0);
        release_id(table[i].slot);
        _ts_rec_counts.live--;
        _ts_rec_counts.unseen_frees++;
    } else {
        table[i].addr = addr;
        table_used++;
    }
    table[i].slot = slot;
    return 1;
}

/* Removes addr; its slot id, or TS_REC_NO_SLOT when the recorder never saw it. */
static uint32_t take_block(uintptr_t addr) {
    if (!table) return TS_REC_NO_SLOT;
    size_t i = find(addr);
    if (table[i].addr != addr) return TS_REC_NO_SLOT;
    uint32_t slot = table[i].slot;
    remove_at(i);
    return slot;
}

/* ---- what each entry point records ---- */

void _ts_rec_note_new(void *p, char kind, uint64_t count, uint64_t size) {
    int saved = errno;
    if (_ts_rec_lock_if_recording()) {
        uint32_t slot;
        if (take_id(&slot) && enter_block((uintptr_t)p, slot)) {
            if (kind == 'c')
                _ts_rec_emit('c', slot, 2, count, size);
            else
                _ts_rec_emit('m', slot, 1, size, 0);
            ts_rec_counts_t *c = &_ts_rec_counts;
            if (++c->live > c->peak) c->peak = c->live;
        }
        pthread_mutex_unlock(&_ts_rec_lock);
    }
    errno = saved;
}

void _ts_rec_note_free(void *p) {
    int saved = errno;
    if (_ts_rec_lock_if_recording()) {
        uint32_t slot = take_block((uintptr_t)p);
        if (slot == TS_REC_NO_SLOT) {
            _ts_rec_counts.unknown_frees++;
        } else {
            _ts_rec_emit('f', slot, 0, 0, 0);
            release_id(slot);
            _ts_rec_counts.live--;
        }
        pthread_mutex_unlock(&_ts_rec_lock);
    }
    errno = saved;
}

uint32_t _ts_rec_note_resize_start(void *p) {
    uint32_t slot = TS_REC_NO_SLOT;
    int saved = errno;
    if (_ts_rec_lock_if_recording()) {
        slot = take_block((uintptr_t)p);
        if (slot == TS_REC_NO_SLOT) _ts_rec_counts.unknown_reallocs++;
        pthread_mutex_unlock(&_ts_rec_lock);
    }
    errno = saved;
    return slot;
}

void _ts_rec_note_resize_end(void *p, uint32_t slot, void *q, size_t size) {
    if (slot == TS_REC_NO_SLOT) { /* realloc(NULL, n), or of a block never seen: a new block */
        if (q) _ts_rec_note_new(q, 'm', 0, size);
        return;
    }
    int saved = errno;
    if (_ts_rec_lock_if_recording()) {
        if (q) {
            if (enter_block((uintptr_t)q, slot)) _ts_rec_emit('r', slot, 1, size, 0);
        } else if (size == 0) { /* realloc(p, 0) freed p */
            _ts_rec_emit('f', slot, 0, 0, 0);
            release_id(slot);
            _ts_rec_counts.live--;
        } else { /* failed: p is still live, unchanged */
            enter_block((uintptr_t)p, slot);
        }
        pthread_mutex_unlock(&_ts_rec_lock);
    }
    errno = saved;
}
