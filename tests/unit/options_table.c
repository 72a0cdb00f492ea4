/* The option table (src/base/option_list.h) and its reader: every entry is
 * well formed (prefix, one-line help fit for a markdown cell, default in
 * range, the core's entries first and in enum order, no variable twice for
 * one owner), and _ts_option_env returns the default for an unset, empty,
 * unparsable or out-of-range value, says which, and parses valid ones as the
 * designs always did (k/m/g suffixes, -1, bool words). */
#include "check.h"

#include "base/options.h"

static long long read_as(ts_option_id_t id, const char *value, ts_option_origin_t *origin) {
    if (value)
        setenv(_ts_options[id].env, value, 1);
    else
        unsetenv(_ts_options[id].env);
    return _ts_option_env(id, origin);
}

#define EXPECT(id, value, want, want_origin)                                                       \
    do {                                                                                           \
        ts_option_origin_t o;                                                                      \
        long long v = read_as(id, value, &o);                                                      \
        CHECK_MSG(v == (want) && o == (want_origin), "%s=%s: %lld (origin %d)",                    \
                  _ts_options[id].env, value ? value : "(unset)", v, (int)o);                      \
    } while (0)

static void test_entries(void) {
    bool core_done = false;
    for (int i = 0; i < TS_OPTID_COUNT; i++) {
        const ts_option_desc_t *d = &_ts_options[i];
        CHECK_MSG(!strncmp(d->env, "TSALLOC_", 8) && d->env[8], "entry %d: %s", i, d->env);
        CHECK_MSG(d->owner < TS_OWNER_COUNT, "%s: owner %d", d->env, (int)d->owner);
        CHECK_MSG(d->min <= d->def && d->def <= d->max, "%s: default out of range", d->env);
        CHECK_MSG(d->help && *d->help && !strpbrk(d->help, "|\n"), "%s: help", d->env);
        if (d->owner != TS_OWNER_CORE) core_done = true;
        CHECK_MSG(!core_done || d->owner != TS_OWNER_CORE, "%s: core entry after others", d->env);
        for (int j = 0; j < i; j++)
            CHECK_MSG(strcmp(_ts_options[j].env, d->env) || _ts_options[j].owner != d->owner,
                      "%s twice", d->env);
    }
    for (int o = 0; o < TS_OWNER_COUNT; o++)
        CHECK(_ts_option_owners[o].name && _ts_option_owners[o].title);
    CHECK(TS_OPTID_PURGE_DELAY_MS == 0);
}

static void test_reader(void) {
    /* Unset, empty: the default, not a rejection. */
    EXPECT(TS_OPTID_BESTFIT_GROW_CHUNK, NULL, TS_KB(64), TS_OPTION_DEFAULT);
    EXPECT(TS_OPTID_BESTFIT_GROW_CHUNK, "", TS_KB(64), TS_OPTION_DEFAULT);
    /* Sizes with suffixes, and the bounds themselves. */
    EXPECT(TS_OPTID_BESTFIT_GROW_CHUNK, "4096", 4096, TS_OPTION_SET);
    EXPECT(TS_OPTID_BESTFIT_GROW_CHUNK, "1g", TS_GB(1), TS_OPTION_SET);
    EXPECT(TS_OPTID_BESTFIT_GROW_CHUNK, "256K", TS_KB(256), TS_OPTION_SET);
    EXPECT(TS_OPTID_POW2_GIVE_BACK, "256M", TS_MB(256), TS_OPTION_SET);
    EXPECT(TS_OPTID_BINS_CACHE, "0", 0, TS_OPTION_SET);
    EXPECT(TS_OPTID_BESTFIT_TRIM_THRESHOLD, "-1", -1, TS_OPTION_SET);
    EXPECT(TS_OPTID_BESTFIT_MIN_SPLIT, "100", 100, TS_OPTION_SET);
    /* Out of range, on either side: the default. */
    EXPECT(TS_OPTID_BESTFIT_GROW_CHUNK, "4095", TS_KB(64), TS_OPTION_REJECTED);
    EXPECT(TS_OPTID_BESTFIT_GROW_CHUNK, "2g", TS_KB(64), TS_OPTION_REJECTED);
    EXPECT(TS_OPTID_BESTFIT_TRIM_THRESHOLD, "-2", TS_KB(128), TS_OPTION_REJECTED);
    EXPECT(TS_OPTID_POW2_GIVE_BACK, "1m", TS_MB(2), TS_OPTION_REJECTED);
    EXPECT(TS_OPTID_POW2_PARTITIONS, "65", 0, TS_OPTION_REJECTED);
    EXPECT(TS_OPTID_POW2_LAZY, "-1", 8, TS_OPTION_REJECTED);
    EXPECT(TS_OPTID_BINS_KEEP_CHUNKS, "1025", 4, TS_OPTION_REJECTED);
    EXPECT(TS_OPTID_PURGE_DELAY_MS, "3600001", 100, TS_OPTION_REJECTED);
    /* Not a number, a number with junk after it, one that overflows. */
    EXPECT(TS_OPTID_POW2_LAZY, "many", 8, TS_OPTION_REJECTED);
    EXPECT(TS_OPTID_POW2_LAZY, "4x", 8, TS_OPTION_REJECTED);
    EXPECT(TS_OPTID_BINS_CACHE, "99999999999g", TS_MB(16), TS_OPTION_REJECTED);
    /* Booleans: numbers in range and words. */
    EXPECT(TS_OPTID_SHIM_STATS, "1", 1, TS_OPTION_SET);
    EXPECT(TS_OPTID_SHIM_STATS, "on", 1, TS_OPTION_SET);
    EXPECT(TS_OPTID_SHIM_STATS, "No", 0, TS_OPTION_SET);
    EXPECT(TS_OPTID_SHIM_STATS, "2", 0, TS_OPTION_REJECTED);
    EXPECT(TS_OPTID_PURGE_THREAD, "0", 0, TS_OPTION_SET);
    /* Choices: the core's statistics as JSON. */
    EXPECT(TS_OPTID_STATS, "2", 2, TS_OPTION_SET);
    EXPECT(TS_OPTID_STATS, "3", 0, TS_OPTION_REJECTED);
    /* No origin wanted. */
    setenv("TSALLOC_POW2_LAZY", "0", 1);
    CHECK(_ts_option_env(TS_OPTID_POW2_LAZY, NULL) == 0);
}

int main(void) {
    test_entries();
    test_reader();
    printf("options_table: ok (%d options)\n", (int)TS_OPTID_COUNT);
    return 0;
}
