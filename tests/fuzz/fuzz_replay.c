/* Replays fuzz inputs on one design linked in (fuzz_design.c) and on glibc,
 * through the harness of the libFuzzer targets, built with the normal
 * compiler: every input of tests/fuzz/corpus (each crash ever found is kept
 * there) runs in make test, and then pseudo-random programs.
 *
 * With --max-footprint-mb, the design's memory from the OS after each random
 * program (all its blocks free again) must stay within the bound.
 * usage: fuzz_replay_<design> [file|directory]... [--random N SEED] [--max-footprint-mb M] */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_harness.h"

static long inputs;

static void replay_file(const char *path) {
    static uint8_t buf[1 << 16];
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        exit(1);
    }
    size_t len = fread(buf, 1, sizeof buf, f);
    fclose(f);
    fz_differential(&fz_design, &fz_libc, buf, len);
    inputs++;
}

static int by_name(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void replay_dir(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) {
        replay_file(dir);
        return;
    }
    char **names = NULL;
    size_t n = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        if (e->d_name[0] == '.') continue;
        names = realloc(names, (n + 1) * sizeof *names);
        names[n] = malloc(strlen(dir) + strlen(e->d_name) + 2);
        sprintf(names[n++], "%s/%s", dir, e->d_name);
    }
    closedir(d);
    qsort(names, n, sizeof *names, by_name);
    for (size_t i = 0; i < n; i++) replay_file(names[i]), free(names[i]);
    free(names);
}

int main(int argc, char **argv) {
    long programs = 0;
    uint64_t rng = 1;
    size_t max_footprint = 0, high = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--random") == 0 && i + 2 < argc) {
            programs = atol(argv[i + 1]);
            rng = strtoull(argv[i + 2], NULL, 0);
            i += 2;
        } else if (strcmp(argv[i], "--max-footprint-mb") == 0 && i + 1 < argc) {
            max_footprint = (size_t)atol(argv[++i]) << 20;
        } else {
            replay_dir(argv[i]);
        }
    }
    long files = inputs;
    static uint8_t buf[4096];
    for (long p = 0; p < programs; p++) {
        size_t len = (size_t)(rng % sizeof buf);
        for (size_t i = 0; i < len; i++) {
            rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
            buf[i] = (uint8_t)(rng >> 24);
        }
        rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
        fz_differential(&fz_design, &fz_libc, buf, len);
        size_t now = fz_design.footprint(); /* every block is free again */
        if (now > high) high = now;
        if (max_footprint && now > max_footprint) {
            fprintf(stderr, "fuzz_replay[%s]: %zu bytes from the OS after %ld programs, over %zu\n",
                    fz_design.name, now, p + 1, max_footprint);
            return 1;
        }
    }
    printf("fuzz_replay[%s]: ok (%ld corpus inputs, %ld random programs, at most %zu bytes from "
           "the OS after one)\n",
           fz_design.name, files, programs, high);
    return files == 0 && programs == 0;
}
