/* The option table: every TSALLOC_* environment variable of every design
 * (base/option_list.h), with its owner, type, default, range and a one-line
 * help, and the one reader the designs use.
 *
 * Invariants: a value read here always lies in [min, max] of its entry; a
 * value outside it, or one that does not parse, is ignored and the default
 * kept. Reading allocates nothing, so it is safe inside malloc. The table is
 * constant; where an owner keeps a value (the core's cached array, a design's
 * configuration) is the owner's business.
 */
#ifndef TS_BASE_OPTIONS_H
#define TS_BASE_OPTIONS_H

#include <stdbool.h>

#include "base/base.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TS_KB(n) ((long long)(n) << 10)
#define TS_MB(n) ((long long)(n) << 20)
#define TS_GB(n) ((long long)(n) << 30)

/* Who reads an option: a design (or the designs sharing a code base), the
 * override shim, the trace recorder, or the tests. */
typedef enum ts_option_owner {
    TS_OWNER_CORE,
    TS_OWNER_SECURE,
    TS_OWNER_PROF,
    TS_OWNER_BESTFIT,
    TS_OWNER_POW2,
    TS_OWNER_BINS,
    TS_OWNER_SEEDS,
    TS_OWNER_CLASSIC,
    TS_OWNER_SHIM,
    TS_OWNER_RECORD,
    TS_OWNER_TEST,
    TS_OWNER_COUNT
} ts_option_owner_t;

/* How a value is written. INT, CHOICE (a few numbered choices) and SIZE
 * (bytes, printed with a k/m/g suffix) all accept the suffixes k, m, g;
 * BOOL also accepts yes/no, true/false, on/off; TEXT is read by its owner
 * (a few fixed words through _ts_option_word, other text by itself). */
typedef enum ts_option_type {
    TS_OPTTYPE_INT,
    TS_OPTTYPE_BOOL,
    TS_OPTTYPE_CHOICE,
    TS_OPTTYPE_SIZE,
    TS_OPTTYPE_TEXT
} ts_option_type_t;

#define TS_OPTION(id, name, owner, type, def, min, max, help) TS_OPTID_##id,
typedef enum ts_option_id {
#include "base/option_list.h"
    TS_OPTID_COUNT
} ts_option_id_t;
#undef TS_OPTION

typedef struct ts_option_desc {
    const char *env; /* "TSALLOC_<NAME>"; env + 8 is the name */
    ts_option_owner_t owner;
    ts_option_type_t type;
    long long def, min, max;
    const char *help;
} ts_option_desc_t;

typedef struct ts_option_owner_desc {
    const char *name;    /* "core", "bestfit", ... */
    const char *title;   /* the heading of its section in docs/options.md */
    const char *designs; /* the designs that read its options, space-separated */
} ts_option_owner_desc_t;

TS_HIDDEN extern const ts_option_desc_t _ts_options[TS_OPTID_COUNT];
TS_HIDDEN extern const ts_option_owner_desc_t _ts_option_owners[TS_OWNER_COUNT];

/* Where a value read by _ts_option_env came from. */
typedef enum ts_option_origin {
    TS_OPTION_DEFAULT,  /* unset or empty */
    TS_OPTION_SET,      /* the environment's value, in range */
    TS_OPTION_REJECTED, /* set, but not a number or out of range: the default */
} ts_option_origin_t;

/* The value of option `id` from its environment variable, range-checked;
 * origin (may be NULL) tells where it came from. Not for TEXT options. */
TS_HIDDEN long long _ts_option_env(ts_option_id_t id, ts_option_origin_t *origin);

/* For a TEXT option that takes one of n words: the index of the word its
 * environment variable names (case insensitive), or -1 when it is unset or
 * names none of them (origin, may be NULL, tells which). */
TS_HIDDEN int _ts_option_word(ts_option_id_t id, const char *const *words, int n,
                              ts_option_origin_t *origin);

#ifdef __cplusplus
}
#endif

#endif
