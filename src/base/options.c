/* The option table (entries in base/option_list.h) and its reader.
 *
 * Invariants: every entry has min <= def <= max (checked at compile time); a
 * value returned by _ts_option_env lies in [min, max].
 */
#include "base/options.h"

#include <strings.h>

#define TS_OPTION(id, name, owner, type, def, min, max, help)                                      \
    [TS_OPTID_##id] = {"TSALLOC_" name, TS_OWNER_##owner, TS_OPTTYPE_##type, def, min, max, help},
const ts_option_desc_t _ts_options[TS_OPTID_COUNT] = {
#include "base/option_list.h"
};
#undef TS_OPTION

#define TS_OPTION(id, name, owner, type, def, min, max, help)                                      \
    _Static_assert((min) <= (def) && (def) <= (max), "TSALLOC_" name ": default out of range");
#include "base/option_list.h"
#undef TS_OPTION

const ts_option_owner_desc_t _ts_option_owners[TS_OWNER_COUNT] = {
    [TS_OWNER_CORE] = {"core", "tsalloc, the fast allocator", "tsalloc"},
    [TS_OWNER_SECURE] = {"secure", "tsalloc-secure, the hardened build", "secure"},
    [TS_OWNER_PROF] = {"prof", "The heap profiler of tsalloc", "tsalloc"},
    [TS_OWNER_BESTFIT] = {"bestfit", "bestfit and bestfit-tls", "bestfit bestfit-tls"},
    [TS_OWNER_POW2] = {"pow2", "pow2 and pow2-partitioned", "pow2 pow2-partitioned"},
    [TS_OWNER_BINS] = {"bins", "bins", "bins"},
    [TS_OWNER_SEEDS] = {"seeds", "The seed designs' locks",
                        "bestfit bestfit-tls pow2 pow2-partitioned"},
    [TS_OWNER_CLASSIC] = {"classic", "libtsalloc-classic", "bestfit bestfit-tls"},
    [TS_OWNER_SHIM] = {"shim", "Every design but tsalloc (the override shim)",
                       "bestfit bestfit-tls pow2 pow2-partitioned bins"},
    [TS_OWNER_RECORD] = {"record", "The trace recorder", ""},
    [TS_OWNER_TEST] = {"test", "Test hooks", ""},
};

long long _ts_option_env(ts_option_id_t id, ts_option_origin_t *origin) {
    const ts_option_desc_t *d = &_ts_options[id];
    ts_option_origin_t from = TS_OPTION_DEFAULT;
    long long v = d->def;
    const char *s = d->type == TS_OPTTYPE_TEXT ? NULL : _ts_env(d->env);
    if (s) {
        bool b;
        long long n;
        from = TS_OPTION_REJECTED;
        if (d->type == TS_OPTTYPE_BOOL && _ts_parse_bool(s, &b)) {
            v = b;
            from = TS_OPTION_SET;
        } else if (_ts_parse_long(s, &n) && n >= d->min && n <= d->max) {
            v = n;
            from = TS_OPTION_SET;
        }
    }
    if (origin) *origin = from;
    return v;
}

int _ts_option_word(ts_option_id_t id, const char *const *words, int n,
                    ts_option_origin_t *origin) {
    const char *s = _ts_env(_ts_options[id].env);
    ts_option_origin_t from = s ? TS_OPTION_REJECTED : TS_OPTION_DEFAULT;
    int found = -1;
    for (int i = 0; s && i < n && found < 0; i++)
        if (!strcasecmp(s, words[i])) found = i;
    if (found >= 0) from = TS_OPTION_SET;
    if (origin) *origin = from;
    return found;
}
