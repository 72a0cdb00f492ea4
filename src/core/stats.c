/* Statistics: process-wide counters (atomics, touched on slow paths only)
 * plus per-heap counters (plain integers the owner bumps on its fast path:
 * allocations per size slot), summed when asked. Frees are not counted: live
 * blocks per class are read from the pages in use, freed = allocated - live.
 *
 * Invariants: a heap's counters are folded into the global ones under the
 * heap pool lock just before the heap is recycled, so a sum over live heaps
 * plus the global counters counts every block once. Reads of other threads'
 * counters are racy by design (a snapshot may lag by a few blocks).
 * Printing never holds a lock while it writes (stdio may call malloc).
 */
#include "core/internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "base/counter.h"
#include "designs/design.h"
#include "tsalloc.h"

TS_HIDDEN int _ts_options_describe(int i, const char **name, long long *value, long long *def,
                                   const char **help);

ts_gstats_t _ts_stats;

size_t _ts_stat_used(void) {
    size_t c = atomic_load_explicit(&_ts_stats.committed, memory_order_relaxed);
    size_t u = atomic_load_explicit(&_ts_stats.untouched, memory_order_relaxed);
    return c > u ? c - u : 0;
}

/* True when the bytes in use just grew by `grew` past the purge thread's bound. */
static bool used_crossed(size_t grew) {
    size_t used = _ts_stat_used();
    return ts_unlikely(used >= TS_PURGE_THREAD_MIN_BYTES &&
                       used - TS_PURGE_THREAD_MIN_BYTES < grew);
}

static bool commit(size_t bytes, size_t used_grows) {
    size_t now =
        atomic_fetch_add_explicit(&_ts_stats.committed, bytes, memory_order_relaxed) + bytes;
    ts_peak_update(&_ts_stats.peak, now);
    return used_crossed(used_grows);
}

bool _ts_stat_commit_locked(size_t bytes) {
    return commit(bytes, bytes);
}

void _ts_stat_commit(size_t bytes) {
    if (_ts_stat_commit_locked(bytes)) _ts_purge_schedule(); /* big enough for the helper now */
}

void _ts_stat_decommit(size_t bytes) {
    atomic_fetch_sub_explicit(&_ts_stats.committed, bytes, memory_order_relaxed);
}

/* Untouched first, so that the bytes in use do not jump by the area meanwhile. */
bool _ts_stat_commit_page(size_t area, size_t touched) {
    ts_assert(touched <= area);
    atomic_fetch_add_explicit(&_ts_stats.untouched, area - touched, memory_order_relaxed);
    return commit(area, touched);
}

void _ts_stat_decommit_pages(size_t area, size_t untouched) {
    ts_assert(untouched <= area);
    _ts_stat_decommit(area);
    size_t was = atomic_fetch_sub_explicit(&_ts_stats.untouched, untouched, memory_order_relaxed);
    ts_assert(was >= untouched);
    (void)was;
}

void _ts_stat_untouch(size_t bytes) {
    atomic_fetch_add_explicit(&_ts_stats.untouched, bytes, memory_order_relaxed);
}

bool _ts_stat_touch_locked(size_t bytes) {
    size_t was = atomic_fetch_sub_explicit(&_ts_stats.untouched, bytes, memory_order_relaxed);
    ts_assert(was >= bytes);
    (void)was;
    return used_crossed(bytes);
}

void _ts_stat_touch(size_t bytes) {
    if (_ts_stat_touch_locked(bytes)) _ts_purge_schedule();
}

TS_RACY_READER static uint64_t rd(const uint64_t *p) {
    return *(const volatile uint64_t *)p;
}

static uint64_t heap_allocs(const ts_heap_t *heap, unsigned cls) {
    const ts_class_info_t *ci = &_ts_classes[cls];
    uint64_t n = rd(&heap->alloc_class[cls]);
    for (unsigned s = ci->direct_lo; s <= ci->direct_hi; s++) n += rd(&heap->alloc_slot[s]);
    return n;
}

void _ts_stats_fold_heap(const ts_heap_t *heap) {
    for (unsigned c = 0; c < TS_CLASS_COUNT; c++) {
        atomic_fetch_add_explicit(&_ts_stats.alloc[c], heap_allocs(heap, c), memory_order_relaxed);
    }
    atomic_fetch_add_explicit(&_ts_stats.remote_frees, heap->remote_frees, memory_order_relaxed);
    atomic_fetch_add_explicit(&_ts_stats.remote_pushes, heap->remote_pushes, memory_order_relaxed);
}

typedef struct snapshot {
    uint64_t alloc[TS_CLASS_COUNT], freed[TS_CLASS_COUNT], live[TS_CLASS_COUNT];
    uint64_t remote_frees, remote_pushes, large_allocs;
    size_t live_bytes; /* class blocks */
    size_t segments_total, segments_owned;
} snapshot_t;

/* Each live heap's counts, then (heap NULL) those of the heaps that exited. */
static void add_heap(const ts_heap_t *heap, void *arg) {
    snapshot_t *s = arg;
    if (!heap) {
        for (unsigned c = 0; c < TS_CLASS_COUNT; c++)
            s->alloc[c] += atomic_load(&_ts_stats.alloc[c]);
        s->remote_frees += atomic_load(&_ts_stats.remote_frees);
        s->remote_pushes += atomic_load(&_ts_stats.remote_pushes);
        return;
    }
    for (unsigned c = 0; c < TS_CLASS_COUNT; c++) {
        s->alloc[c] += heap_allocs(heap, c);
    }
    s->remote_frees += rd(&heap->remote_frees);
    s->remote_pushes += rd(&heap->remote_pushes);
}

static void take_snapshot(snapshot_t *s) {
    memset(s, 0, sizeof *s);
    _ts_process_init();
    _ts_heaps_visit(add_heap, s);
    _ts_segments_live(s->live);
    for (unsigned c = 0; c < TS_CLASS_COUNT; c++) {
        unsigned kept = _ts_bigcache_kept(c); /* free, though out of their pages */
        s->live[c] -= kept < s->live[c] ? kept : s->live[c];
        if (s->live[c] > s->alloc[c]) s->live[c] = s->alloc[c]; /* racy snapshot */
        s->freed[c] = s->alloc[c] - s->live[c];
        s->live_bytes += (size_t)s->live[c] * _ts_classes[c].size;
    }
    s->large_allocs = atomic_load(&_ts_stats.large_allocs);
    _ts_segments_count(&s->segments_total, &s->segments_owned);
}

TS_HIDDEN void _ts_core_info_fill(ts_heap_info_t *info);
void _ts_core_info_fill(ts_heap_info_t *info) {
    snapshot_t s;
    take_snapshot(&s);
    size_t large_bytes = atomic_load(&_ts_stats.large_bytes);
    size_t committed = atomic_load(&_ts_stats.committed);
    size_t dirty = atomic_load(&_ts_stats.dirty);
    size_t arena = committed > large_bytes ? committed - large_bytes : 0;
    memset(info, 0, sizeof *info);
    info->arena = arena;
    info->mmapped = large_bytes;
    info->mmapped_count = atomic_load(&_ts_stats.large_count);
    info->in_use = s.live_bytes;
    info->free = arena > s.live_bytes ? arena - s.live_bytes : 0;
    info->releasable = dirty;
    info->peak = atomic_load(&_ts_stats.peak);
}

/* ---- output ---------------------------------------------------------------------- */

typedef struct out {
    FILE *file; /* NULL: straight to fd 2 (used at exit, no stdio) */
    size_t n;
    char buf[4096];
} out_t;

static void out_flush(out_t *o) {
    if (o->file)
        fwrite(o->buf, 1, o->n, o->file);
    else
        _ts_os_write_stderr(o->buf, o->n);
    o->n = 0;
}

static void outf(out_t *o, const char *fmt, ...) {
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    int len = _ts_vformat(line, sizeof line, fmt, ap);
    va_end(ap);
    size_t n = (size_t)len < sizeof line ? (size_t)len : sizeof line - 1;
    if (o->n + n > sizeof o->buf) out_flush(o);
    memcpy(o->buf + o->n, line, n);
    o->n += n;
}

static const char *kind_names[TS_KIND_COUNT] = {"small", "medium", "big"};

static void print_text(out_t *o) {
    snapshot_t s;
    take_snapshot(&s);
    ts_gstats_t *g = &_ts_stats;
    outf(o, "tsalloc statistics\n");
    outf(o, "  memory     committed %zu B, peak %zu B, free resident %zu B\n",
         atomic_load(&g->committed), atomic_load(&g->peak), atomic_load(&g->dirty));
    outf(o, "             purged %zu B in total, unmapped %zu B in total, %zu purge runs\n",
         atomic_load(&g->purged), atomic_load(&g->unmapped), atomic_load(&g->purge_runs));
    outf(o, "             huge pages asked for %zu halves of 2 MiB, %zu of them split by a purge\n",
         atomic_load(&g->huge_halves), atomic_load(&g->huge_splits));
    outf(o, "  segments   %zu mapped (%zu owned by threads, %zu cached, %zu abandoned)\n",
         s.segments_total, s.segments_owned, atomic_load(&g->segments_cached),
         atomic_load(&g->segments_abandoned));
    outf(o,
         "  pages      in use: %zu small, %zu medium, %zu big; reclaimed from exited threads: %zu; "
         "rescued from idle ones: %zu\n",
         atomic_load(&g->pages[0]), atomic_load(&g->pages[1]), atomic_load(&g->pages[2]),
         atomic_load(&g->reclaimed_pages), atomic_load(&g->rescued_pages));
    outf(o, "             swept: %zu B inside %zu free blocks of idle threads\n",
         atomic_load(&g->swept_bytes), atomic_load(&g->swept_blocks));
    outf(o,
         "  large      %zu live (%zu B), %lu allocated; cache: %zu regions (%zu B), %zu hits, %zu "
         "remaps\n",
         atomic_load(&g->large_count), atomic_load(&g->large_bytes), (unsigned long)s.large_allocs,
         atomic_load(&g->large_cached_count), atomic_load(&g->large_cached_bytes),
         atomic_load(&g->large_cache_hits), atomic_load(&g->large_remaps));
    outf(o, "  heaps      %zu live, %zu created, %zu threads exited, %zu segments adopted\n",
         atomic_load(&g->heaps_live), atomic_load(&g->heaps_created),
         atomic_load(&g->threads_exited), atomic_load(&g->adopted));
    outf(o, "  frees      %lu from another thread, in %lu pushes\n", (unsigned long)s.remote_frees,
         (unsigned long)s.remote_pushes);
    outf(o, "  class       size   page       allocated           freed            live     live "
            "bytes\n");
    for (unsigned c = 0; c < TS_CLASS_COUNT; c++) {
        if (!s.alloc[c]) continue;
        uint64_t live = s.alloc[c] - s.freed[c];
        outf(o, "  %5u %10u %6s %15lu %15lu %15lu %14lu\n", c, _ts_classes[c].size,
             kind_names[_ts_classes[c].kind], (unsigned long)s.alloc[c], (unsigned long)s.freed[c],
             (unsigned long)live, (unsigned long)(live * _ts_classes[c].size));
    }
    out_flush(o);
}

static void print_json(out_t *o) {
    snapshot_t s;
    take_snapshot(&s);
    ts_gstats_t *g = &_ts_stats;
    outf(o,
         "{\"allocator\": \"tsalloc\", \"committed\": %zu, \"peak\": %zu, \"free_resident\": %zu, "
         "\"purged\": %zu, \"unmapped\": %zu, \"purge_runs\": %zu, \"huge_halves\": %zu, "
         "\"huge_splits\": %zu,\n",
         atomic_load(&g->committed), atomic_load(&g->peak), atomic_load(&g->dirty),
         atomic_load(&g->purged), atomic_load(&g->unmapped), atomic_load(&g->purge_runs),
         atomic_load(&g->huge_halves), atomic_load(&g->huge_splits));
    outf(o,
         " \"segments\": {\"mapped\": %zu, \"owned\": %zu, \"cached\": %zu, \"abandoned\": %zu, "
         "\"adopted\": %zu},\n",
         s.segments_total, s.segments_owned, atomic_load(&g->segments_cached),
         atomic_load(&g->segments_abandoned), atomic_load(&g->adopted));
    outf(o,
         " \"pages\": {\"small\": %zu, \"medium\": %zu, \"big\": %zu, \"reclaimed\": %zu, "
         "\"rescued\": %zu, \"swept_bytes\": %zu, \"swept_blocks\": %zu},\n",
         atomic_load(&g->pages[0]), atomic_load(&g->pages[1]), atomic_load(&g->pages[2]),
         atomic_load(&g->reclaimed_pages), atomic_load(&g->rescued_pages),
         atomic_load(&g->swept_bytes), atomic_load(&g->swept_blocks));
    outf(o,
         " \"large\": {\"live\": %zu, \"live_bytes\": %zu, \"allocated\": %lu, "
         "\"cached\": %zu, \"cached_bytes\": %zu, \"cache_hits\": %zu, \"remaps\": %zu},\n",
         atomic_load(&g->large_count), atomic_load(&g->large_bytes), (unsigned long)s.large_allocs,
         atomic_load(&g->large_cached_count), atomic_load(&g->large_cached_bytes),
         atomic_load(&g->large_cache_hits), atomic_load(&g->large_remaps));
    outf(o, " \"heaps\": {\"live\": %zu, \"created\": %zu, \"threads_exited\": %zu},\n",
         atomic_load(&g->heaps_live), atomic_load(&g->heaps_created),
         atomic_load(&g->threads_exited));
    outf(o, " \"remote_frees\": %lu, \"remote_pushes\": %lu,\n \"options\": {",
         (unsigned long)s.remote_frees, (unsigned long)s.remote_pushes);
    const char *name, *help;
    long long value, def;
    for (int i = 0; _ts_options_describe(i, &name, &value, &def, &help); i++)
        outf(o, "%s\"%s\": %ld", i ? ", " : "", name, (long)value);
    outf(o, "},\n \"classes\": [");
    bool first = true;
    for (unsigned c = 0; c < TS_CLASS_COUNT; c++) {
        if (!s.alloc[c]) continue;
        outf(o,
             "%s\n  {\"class\": %u, \"size\": %u, \"page\": \"%s\", \"allocated\": %lu, "
             "\"freed\": %lu, \"live\": %lu}",
             first ? "" : ",", c, _ts_classes[c].size, kind_names[_ts_classes[c].kind],
             (unsigned long)s.alloc[c], (unsigned long)s.freed[c],
             (unsigned long)(s.alloc[c] - s.freed[c]));
        first = false;
    }
    outf(o, "\n ]}\n");
    out_flush(o);
}

TS_EXPORT void ts_stats_print(FILE *out) {
    out_t o = {.file = out ? out : stderr};
    print_text(&o);
    fflush(o.file);
}

TS_EXPORT void ts_stats_print_json(FILE *out) {
    out_t o = {.file = out ? out : stderr};
    print_json(&o);
    fflush(o.file);
}

void _ts_stats_print_exit(void) {
    out_t o = {.file = NULL};
    if (_ts_option(TS_OPT_STATS) >= 2)
        print_json(&o);
    else
        print_text(&o);
}
