/* Runtime options: one table, each read once from TSALLOC_<NAME> at start-up
 * and changeable later with ts_option_set(). docs/options.md describes them.
 *
 * Invariants: values always lie in [min, max] (an out-of-range environment
 * value is ignored with a verbose note); readers use relaxed atomic loads, so
 * a change takes effect at the next slow path that reads it.
 */
#include "core/internal.h"

#include <stdarg.h>
#include <strings.h>

#include "tsalloc.h"

typedef struct ts_option_desc {
    const char *name; /* lower case, without the TSALLOC_ prefix */
    long long def, min, max;
    const char *help;
} ts_option_desc_t;

static const ts_option_desc_t options[TS_OPT_COUNT] = {
    [TS_OPT_PURGE_DELAY_MS] = {"purge_delay_ms", 100, 0, 3600 * 1000,
                               "ms a freed page or cached region stays resident before purge"},
    [TS_OPT_PURGE_THREAD] = {"purge_thread", 1, 0, 1,
                             "purge from a lazily started helper thread (0: on allocator calls)"},
    [TS_OPT_SEGMENT_CACHE] = {"segment_cache", 16, 0, 4096,
                              "free 4 MiB segments kept mapped (purged) for reuse"},
    [TS_OPT_LARGE_CACHE_MB] = {"large_cache_mb", 256, 0, 1 << 20,
                               "MiB of freed large blocks kept resident for reuse"},
    [TS_OPT_HUGE_PAGES] = {"huge_pages", 0, 0, 1,
                           "back the segments of heaps past 2 MiB with transparent huge pages"},
    [TS_OPT_RESCUE] = {"rescue", 1, 0, 1,
                       "give back full pages of idle threads that other threads freed"},
    [TS_OPT_STATS] = {"stats", 0, 0, 2, "print statistics at exit (1: text, 2: JSON)"},
    [TS_OPT_VERBOSE] = {"verbose", 0, 0, 2, "report options and OS refusals on stderr"},
};

static _Atomic long long values[TS_OPT_COUNT];

void _ts_options_init(void) {
    for (int i = 0; i < TS_OPT_COUNT; i++) {
        const ts_option_desc_t *d = &options[i];
        char env[64];
        char *w = env;
        for (const char *s = "TSALLOC_"; *s; s++) *w++ = *s;
        for (const char *s = d->name; *s && w < env + sizeof env - 1; s++)
            *w++ = (char)(*s >= 'a' && *s <= 'z' ? *s - 'a' + 'A' : *s);
        *w = 0;
        long long v = _ts_env_long(env, d->def);
        if (v < d->min || v > d->max) v = d->def;
        atomic_store_explicit(&values[i], v, memory_order_relaxed);
    }
    if (_ts_option(TS_OPT_VERBOSE)) {
        for (int i = 0; i < TS_OPT_COUNT; i++)
            _ts_verbose(1, "option %s = %ld", options[i].name, (long)_ts_option((enum ts_option)i));
    }
}

long long _ts_option(enum ts_option opt) {
    return atomic_load_explicit(&values[opt], memory_order_relaxed);
}

uint64_t _ts_purge_delay_ns(void) {
    return (uint64_t)_ts_option(TS_OPT_PURGE_DELAY_MS) * 1000000u;
}

/* How long a thread must make no allocator slow path before the purge
 * thread gives back memory its pages hold for it (rescue.c, sweep.c): five
 * purge delays, at least 10 ms. Longer than a purge delay, because that
 * memory is in use (its pages are): a thread that allocates in bursts a few
 * purge delays apart would otherwise fault it all in again at each burst
 * (4x the allocation time in a burst program with 150 ms pauses). */
uint64_t _ts_idle_min_ns(void) {
    uint64_t idle = _ts_purge_delay_ns() * 5;
    return idle > 10000000u ? idle : 10000000u;
}

/* How far apart the purge thread looks at idle threads' memory (rescue.c,
 * sweep.c): the purge delay, at least 10 ms, so that a short delay does not
 * make it look at every thread's heap a thousand times a second. */
uint64_t _ts_look_period_ns(void) {
    uint64_t delay = _ts_purge_delay_ns();
    return delay > 10000000u ? delay : 10000000u;
}

/* When to try again a purge the OS refused (locked memory) after `refusals`
 * in a row (at least 1): a look period, doubled at each further refusal up to
 * 32 periods, so that memory locked for good costs one call in 3.2 s
 * (segment.c's pages, sweep.c's blocks). */
uint64_t _ts_refused_retry_ns(unsigned refusals) {
    unsigned n = refusals < TS_REFUSED_RETRY_MAX ? refusals : TS_REFUSED_RETRY_MAX;
    return _ts_look_period_ns() << (n - 1);
}

void _ts_verbose(int level, const char *fmt, ...) {
    if (_ts_option(TS_OPT_VERBOSE) < level) return;
    va_list ap;
    va_start(ap, fmt);
    _ts_vmessage(fmt, ap);
    va_end(ap);
}

static int find_option(const char *name) {
    if (!name) return -1;
    if (!strncasecmp(name, "TSALLOC_", 8)) name += 8;
    for (int i = 0; i < TS_OPT_COUNT; i++)
        if (!strcasecmp(name, options[i].name)) return i;
    return -1;
}

TS_EXPORT long long ts_option_get(const char *name) {
    _ts_process_init();
    int i = find_option(name);
    return i < 0 ? -1 : _ts_option((enum ts_option)i);
}

TS_EXPORT bool ts_option_set(const char *name, long long value) {
    _ts_process_init();
    int i = find_option(name);
    if (i < 0 || value < options[i].min || value > options[i].max) return false;
    atomic_store_explicit(&values[i], value, memory_order_relaxed);
    if (i == TS_OPT_PURGE_DELAY_MS) { /* re-evaluate deadlines */
        _ts_abandoned_delay_changed(_ts_os_now_ns());
        _ts_purge_delay_changed();
    }
    if (i == TS_OPT_RESCUE && value) _ts_sweep_rescue_on();
    return true;
}

/* For the statistics printer and docs: name, value, default, help. */
TS_HIDDEN int _ts_options_describe(int i, const char **name, long long *value, long long *def,
                                   const char **help);
int _ts_options_describe(int i, const char **name, long long *value, long long *def,
                         const char **help) {
    if (i < 0 || i >= TS_OPT_COUNT) return 0;
    *name = options[i].name;
    *value = _ts_option((enum ts_option)i);
    *def = options[i].def;
    *help = options[i].help;
    return 1;
}
