/* The core's runtime options: its entries of the option table
 * (base/option_list.h), each read once from TSALLOC_<NAME> at start-up and
 * changeable later with ts_option_set(). docs/options.md describes them.
 *
 * Invariants: values always lie in [min, max] of their entry (an
 * out-of-range environment value is ignored, the default kept, with a
 * verbose note); readers use relaxed atomic loads, so a change takes effect
 * at the next slow path that reads it. The core's enum ts_option indexes both
 * the table and the cached values: its options come first in the table.
 */
#include "core/internal.h"

#include <stdarg.h>
#include <strings.h>

#include "base/options.h"
#include "tsalloc.h"

_Static_assert(TS_OPT_PURGE_DELAY_MS == (int)TS_OPTID_PURGE_DELAY_MS &&
                   TS_OPT_PURGE_THREAD == (int)TS_OPTID_PURGE_THREAD &&
                   TS_OPT_SEGMENT_CACHE == (int)TS_OPTID_SEGMENT_CACHE &&
                   TS_OPT_LARGE_CACHE_MB == (int)TS_OPTID_LARGE_CACHE_MB &&
                   TS_OPT_HUGE_PAGES == (int)TS_OPTID_HUGE_PAGES &&
                   TS_OPT_RESCUE == (int)TS_OPTID_RESCUE && TS_OPT_STATS == (int)TS_OPTID_STATS &&
                   TS_OPT_VERBOSE == (int)TS_OPTID_VERBOSE &&
                   TS_OPT_SHARED_START == (int)TS_OPTID_SHARED_START &&
                   TS_OPT_ZERO_ON_FREE == (int)TS_OPTID_CORE_ZERO_ON_FREE,
               "the core's options lead the option table, in enum ts_option's order");
#define TS_OPTION(id, name, owner, type, def, min, max, help) +(TS_OWNER_##owner == TS_OWNER_CORE)
enum {
    CORE_TABLE_ENTRIES = 0
#include "base/option_list.h"
};
#undef TS_OPTION
_Static_assert((int)CORE_TABLE_ENTRIES == (int)TS_OPT_COUNT,
               "every core entry of the table has its enum ts_option value");

static _Atomic long long values[TS_OPT_COUNT];

/* The names as ts_option_get takes them and the statistics print them:
 * lower case, no prefix. Filled by _ts_options_init. */
static char names[TS_OPT_COUNT][32];

void _ts_options_init(void) {
    bool rejected[TS_OPT_COUNT];
    for (int i = 0; i < TS_OPT_COUNT; i++) {
        const char *s = _ts_options[i].env + 8;
        size_t n = 0;
        for (; *s && n + 1 < sizeof names[i]; s++)
            names[i][n++] = (char)(*s >= 'A' && *s <= 'Z' ? *s - 'A' + 'a' : *s);
        names[i][n] = 0;
        ts_option_origin_t origin;
        long long v = _ts_option_env((ts_option_id_t)i, &origin);
        rejected[i] = origin == TS_OPTION_REJECTED;
        atomic_store_explicit(&values[i], v, memory_order_relaxed);
    }
    if (_ts_option(TS_OPT_VERBOSE)) {
        for (int i = 0; i < TS_OPT_COUNT; i++) {
            const ts_option_desc_t *d = &_ts_options[i];
            if (rejected[i])
                _ts_verbose(1, "%s=%s ignored: not in %ld .. %ld", d->env, _ts_env(d->env),
                            (long)d->min, (long)d->max);
            _ts_verbose(1, "option %s = %ld", names[i], (long)_ts_option((enum ts_option)i));
        }
    }
}

long long _ts_option(enum ts_option opt) {
    return atomic_load_explicit(&values[opt], memory_order_relaxed);
}

uint64_t _ts_purge_delay_ns(void) {
    return (uint64_t)_ts_option(TS_OPT_PURGE_DELAY_MS) * 1000000u;
}

/* How long a thread must make no allocator slow path before the purge
 * thread gives back memory its pages hold for it (rescue.c, sweep.c): the
 * purge delay << shift, at least 10 ms. The shift is the heap's own
 * (idle_shift, from 0 to TS_IDLE_SHIFT_MAX): that memory is in use (its
 * pages are), so a thread that comes back soon after a give-back faults it
 * all in again, and its next wait must be longer (_ts_idle_shift_next). */
uint64_t _ts_idle_ns(unsigned shift) {
    uint64_t idle = _ts_purge_delay_ns() << shift;
    return idle > 10000000u ? idle : 10000000u;
}

/* A heap's shift once its owner is back at `now` from a wait in which the
 * purge thread first gave back its memory at `at`. Back within 8 idle waits
 * of that: one step up, so that a thread that pauses between bursts stops
 * faulting in at each burst what its pause gave back (200 blocks of 256 KiB
 * a burst: 28 ms against 8 ms; pauses of 150 and 400 ms stop paying after
 * one and two bursts, pauses of 1 s pay at every burst, as with a fixed
 * wait of five delays). Back after more than 64: one step down. */
unsigned _ts_idle_shift_next(unsigned shift, uint64_t at, uint64_t now) {
    uint64_t idle = _ts_idle_ns(shift), away = now > at ? now - at : 0;
    if (away < 8 * idle) return shift < TS_IDLE_SHIFT_MAX ? shift + 1 : shift;
    if (away > 64 * idle && shift > 0) return shift - 1;
    return shift;
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
        if (!strcasecmp(name, _ts_options[i].env + 8)) return i;
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
    if (i < 0 || value < _ts_options[i].min || value > _ts_options[i].max) return false;
    if (i == TS_OPT_ZERO_ON_FREE) return value == _ts_option(TS_OPT_ZERO_ON_FREE); /* start-up */
    atomic_store_explicit(&values[i], value, memory_order_relaxed);
    if (i == TS_OPT_PURGE_DELAY_MS) { /* re-evaluate deadlines */
        _ts_abandoned_delay_changed(_ts_os_now_ns());
        _ts_purge_delay_changed();
    }
    if (i == TS_OPT_RESCUE && value) _ts_sweep_rescue_on();
    return true;
}

/* For the statistics printer: name, value, default, help. */
TS_HIDDEN int _ts_options_describe(int i, const char **name, long long *value, long long *def,
                                   const char **help);
int _ts_options_describe(int i, const char **name, long long *value, long long *def,
                         const char **help) {
    if (i < 0 || i >= TS_OPT_COUNT) return 0;
    *name = names[i];
    *value = _ts_option((enum ts_option)i);
    *def = _ts_options[i].def;
    *help = _ts_options[i].help;
    return 1;
}
