/* tsalloc-options: prints the option table of every design
 * (src/base/option_list.h) as text or markdown, and checks that
 * docs/options.md lists exactly its options, with their defaults and ranges.
 *
 *   tsalloc-options [--design NAME] [--markdown]   the table, by owner
 *   tsalloc-options --names                        one variable a line
 *   tsalloc-options --check-doc FILE               exit 1 when FILE differs
 *
 * Behind `tsalloc options` and `tsalloc run --help-options`; the ctest
 * options_doc runs the check. Invariant: the text, the markdown and the check
 * format defaults and ranges the same way (fmt_value, fmt_range), so the
 * doc's columns are what the table says.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/options.h"

static void fmt_value(const ts_option_desc_t *d, long long v, char *buf, size_t cap) {
    if (d->type == TS_OPTTYPE_TEXT) {
        snprintf(buf, cap, "unset");
    } else if (d->type == TS_OPTTYPE_SIZE && v > 0 && v % TS_GB(1) == 0) {
        snprintf(buf, cap, "%lldg", v / TS_GB(1));
    } else if (d->type == TS_OPTTYPE_SIZE && v > 0 && v % TS_MB(1) == 0) {
        snprintf(buf, cap, "%lldm", v / TS_MB(1));
    } else if (d->type == TS_OPTTYPE_SIZE && v > 0 && v % TS_KB(1) == 0) {
        snprintf(buf, cap, "%lldk", v / TS_KB(1));
    } else {
        snprintf(buf, cap, "%lld", v);
    }
}

static void fmt_range(const ts_option_desc_t *d, char *buf, size_t cap) {
    char lo[32], hi[32];
    if (d->type == TS_OPTTYPE_TEXT) {
        snprintf(buf, cap, "text");
    } else if (d->type == TS_OPTTYPE_BOOL) {
        snprintf(buf, cap, "0, 1");
    } else {
        fmt_value(d, d->min, lo, sizeof lo);
        fmt_value(d, d->max, hi, sizeof hi);
        snprintf(buf, cap, "%s .. %s", lo, hi);
    }
}

/* Whether owner o's options concern design `design` (NULL: every owner). */
static bool owner_matches(int o, const char *design) {
    if (!design) return true;
    const char *s = _ts_option_owners[o].designs;
    size_t n = strlen(design);
    for (const char *p = strstr(s, design); p; p = strstr(p + 1, design))
        if ((p == s || p[-1] == ' ') && (p[n] == ' ' || p[n] == 0)) return true;
    return false;
}

static void print_table(const char *design, bool markdown) {
    bool first = true;
    for (int o = 0; o < TS_OWNER_COUNT; o++) {
        if (!owner_matches(o, design)) continue;
        const ts_option_owner_desc_t *w = &_ts_option_owners[o];
        if (markdown) {
            printf("%s## %s\n\n| variable | default | range | meaning |\n|---|---|---|---|\n",
                   first ? "" : "\n", w->title);
        } else {
            printf("%s%s", first ? "" : "\n", w->title);
            if (*w->designs && strcmp(w->title, w->designs)) printf(" [%s]", w->designs);
            printf("\n");
        }
        first = false;
        for (int i = 0; i < TS_OPTID_COUNT; i++) {
            const ts_option_desc_t *d = &_ts_options[i];
            if ((int)d->owner != o) continue;
            char def[32], range[80];
            fmt_value(d, d->def, def, sizeof def);
            fmt_range(d, range, sizeof range);
            if (markdown)
                printf("| `%s` | %s | %s | %s |\n", d->env, def, range, d->help);
            else
                printf("  %-32s default %-7s range %s\n      %s\n", d->env, def, range, d->help);
        }
    }
    if (!markdown && !design)
        printf("\nNumbers take the suffixes k, m, g; a value out of range is ignored.\n");
}

static void print_names(void) {
    for (int i = 0; i < TS_OPTID_COUNT; i++) {
        bool seen = false;
        for (int j = 0; j < i; j++) seen |= !strcmp(_ts_options[j].env, _ts_options[i].env);
        if (!seen) printf("%s\n", _ts_options[i].env);
    }
}

/* The n-th cell (1-based) of a markdown table row, trimmed, backticks off. */
static bool row_cell(const char *line, int n, char *out, size_t cap) {
    const char *p = line;
    for (int k = 0; k < n; k++) {
        p = strchr(p, '|');
        if (!p) return false;
        p++;
    }
    const char *end = strchr(p, '|');
    if (!end) return false;
    while (p < end && (*p == ' ' || *p == '`')) p++;
    while (end > p && (end[-1] == ' ' || end[-1] == '`')) end--;
    size_t len = (size_t)(end - p);
    if (len >= cap) len = cap - 1;
    memcpy(out, p, len);
    out[len] = 0;
    return true;
}

static int check_doc(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) {
        perror(path);
        return 2;
    }
    bool seen[TS_OPTID_COUNT] = {false};
    int owner = -1, errors = 0, lineno = 0;
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    while ((len = getline(&line, &cap, f)) >= 0) {
        lineno++;
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = 0;
        if (!strncmp(line, "## ", 3)) {
            owner = -1;
            for (int o = 0; o < TS_OWNER_COUNT; o++)
                if (!strcmp(line + 3, _ts_option_owners[o].title)) owner = o;
            continue;
        }
        if (strncmp(line, "| `TSALLOC_", 11)) continue;
        char name[128], def[64], range[128];
        if (!row_cell(line, 1, name, sizeof name) || !row_cell(line, 2, def, sizeof def) ||
            !row_cell(line, 3, range, sizeof range)) {
            printf("%s:%d: not a row of four columns\n", path, lineno);
            errors++;
            continue;
        }
        if (owner < 0) {
            printf("%s:%d: %s listed outside the section of its owner\n", path, lineno, name);
            errors++;
            continue;
        }
        int id = -1;
        for (int i = 0; i < TS_OPTID_COUNT; i++)
            if ((int)_ts_options[i].owner == owner && !strcmp(_ts_options[i].env, name)) id = i;
        if (id < 0) {
            printf("%s:%d: %s is not an option of \"%s\" in src/base/option_list.h\n", path,
                   lineno, name, _ts_option_owners[owner].title);
            errors++;
            continue;
        }
        const ts_option_desc_t *d = &_ts_options[id];
        char want_def[32], want_range[80];
        fmt_value(d, d->def, want_def, sizeof want_def);
        fmt_range(d, want_range, sizeof want_range);
        if (seen[id]) {
            printf("%s:%d: %s listed twice\n", path, lineno, name);
            errors++;
        }
        seen[id] = true;
        if (strcmp(def, want_def)) {
            printf("%s:%d: %s: default %s, the table says %s\n", path, lineno, name, def, want_def);
            errors++;
        }
        if (strcmp(range, want_range)) {
            printf("%s:%d: %s: range %s, the table says %s\n", path, lineno, name, range,
                   want_range);
            errors++;
        }
    }
    free(line);
    fclose(f);
    for (int i = 0; i < TS_OPTID_COUNT; i++) {
        if (seen[i]) continue;
        printf("%s: %s (%s) is missing from section \"%s\"\n", path, _ts_options[i].env,
               _ts_option_owners[_ts_options[i].owner].name,
               _ts_option_owners[_ts_options[i].owner].title);
        errors++;
    }
    if (errors) {
        printf("%s: %d difference(s) from src/base/option_list.h\n", path, errors);
        return 1;
    }
    printf("%s: all %d options match the table\n", path, (int)TS_OPTID_COUNT);
    return 0;
}

static int usage(int rc) {
    fprintf(rc ? stderr : stdout,
            "usage: tsalloc-options [--design NAME] [--markdown]\n"
            "       tsalloc-options --names\n"
            "       tsalloc-options --check-doc FILE\n");
    return rc;
}

int main(int argc, char **argv) {
    const char *design = NULL;
    bool markdown = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--markdown")) {
            markdown = true;
        } else if (!strcmp(argv[i], "--design") && i + 1 < argc) {
            design = argv[++i];
        } else if (!strncmp(argv[i], "--design=", 9)) {
            design = argv[i] + 9;
        } else if (!strcmp(argv[i], "--names")) {
            print_names();
            return 0;
        } else if (!strcmp(argv[i], "--check-doc") && i + 1 < argc) {
            return check_doc(argv[i + 1]);
        } else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            return usage(0);
        } else {
            return usage(2);
        }
    }
    if (design && !strcmp(design, "fast")) design = "tsalloc";
    bool known = !design;
    for (int o = 0; o < TS_OWNER_COUNT; o++) known |= owner_matches(o, design);
    if (!known) {
        fprintf(stderr, "tsalloc-options: no design '%s'\n", design);
        return 2;
    }
    print_table(design, markdown);
    return 0;
}
