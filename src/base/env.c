/* Reading TSALLOC_* settings from the environment without allocating.
 * base/options.c reads the option table through the parsers here. */
#include "base/base.h"

#include <limits.h>
#include <stdlib.h>
#include <strings.h>

const char *_ts_env(const char *name) {
    const char *v = getenv(name);
    return (v && *v) ? v : NULL;
}

bool _ts_parse_long(const char *v, long long *out) {
    char *end;
    long long n = strtoll(v, &end, 0);
    if (end == v) return false;
    int shift = 0;
    switch (*end) {
    case 'k':
    case 'K':
        shift = 10;
        break;
    case 'm':
    case 'M':
        shift = 20;
        break;
    case 'g':
    case 'G':
        shift = 30;
        break;
    default:
        break;
    }
    if (shift) {
        end++;
        if (n > (LLONG_MAX >> shift) || n < (LLONG_MIN >> shift)) return false;
        n = (long long)((unsigned long long)n << shift);
    }
    if (*end == 'b' || *end == 'B') end++;
    if (*end) return false;
    *out = n;
    return true;
}

bool _ts_parse_bool(const char *v, bool *out) {
    if (!strcasecmp(v, "1") || !strcasecmp(v, "yes") || !strcasecmp(v, "true") ||
        !strcasecmp(v, "on")) {
        *out = true;
        return true;
    }
    if (!strcasecmp(v, "0") || !strcasecmp(v, "no") || !strcasecmp(v, "false") ||
        !strcasecmp(v, "off")) {
        *out = false;
        return true;
    }
    return false;
}
