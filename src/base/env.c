/* Reading TSALLOC_* settings from the environment without allocating. */
#include "base/base.h"

#include <stdlib.h>
#include <strings.h>

const char *_ts_env(const char *name) {
    const char *v = getenv(name);
    return (v && *v) ? v : NULL;
}

long long _ts_env_long(const char *name, long long fallback) {
    const char *v = _ts_env(name);
    if (!v) return fallback;
    char *end;
    long long n = strtoll(v, &end, 0);
    if (end == v) return fallback;
    switch (*end) {
    case 'k':
    case 'K':
        n <<= 10;
        end++;
        break;
    case 'm':
    case 'M':
        n <<= 20;
        end++;
        break;
    case 'g':
    case 'G':
        n <<= 30;
        end++;
        break;
    default:
        break;
    }
    if (*end == 'b' || *end == 'B') end++;
    return *end ? fallback : n;
}

bool _ts_env_bool(const char *name, bool fallback) {
    const char *v = _ts_env(name);
    if (!v) return fallback;
    if (!strcasecmp(v, "1") || !strcasecmp(v, "yes") || !strcasecmp(v, "true") ||
        !strcasecmp(v, "on"))
        return true;
    if (!strcasecmp(v, "0") || !strcasecmp(v, "no") || !strcasecmp(v, "false") ||
        !strcasecmp(v, "off"))
        return false;
    return fallback;
}
