/* A program with planted heap bugs for memcheck (valgrind_memcheck.sh).
 *
 *   vg_program bugs    3 leaked blocks of 100 bytes, a read after free, a
 *                      write one byte past a block, a branch on
 *                      uninitialised heap bytes: each reported once
 *   vg_program clean   every entry point, a second thread freeing the first
 *                      one's blocks, large and aligned blocks: nothing to
 *                      report
 */
#include <malloc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static volatile char sink;

static __attribute__((noinline)) void leak_one(void) {
    char *volatile p = malloc(100);
    memset(p, 1, 100);
}

static __attribute__((noinline)) void use_after_free(void) {
    char *volatile p = malloc(64);
    memset(p, 0, 64);
    free(p);
    sink = p[10];
}

static __attribute__((noinline)) void overflow(void) {
    char *volatile p = malloc(40);
    char *volatile q = malloc(40);
    memset(p, 0, 40);
    p[40] = 1; /* past p's last byte */
    free(q);
    free(p);
}

static __attribute__((noinline)) void uninitialised(void) {
    int *volatile p = malloc(64);
    if (p[3] == 42) sink = 1;
    free(p);
}

static void *worker(void *arg) {
    char **blocks = arg;
    for (int i = 0; i < 64; i++) {
        if (blocks[i][0] != (char)i) abort();
        free(blocks[i]); /* blocks of the main thread's heap */
    }
    char *mine = malloc(300);
    memset(mine, 3, 300);
    free(mine);
    return NULL;
}

static int clean(void) {
    char *blocks[64];
    for (int i = 0; i < 64; i++) {
        blocks[i] = malloc((size_t)i * 50 + 1);
        memset(blocks[i], i, (size_t)i * 50 + 1);
    }
    pthread_t t;
    if (pthread_create(&t, NULL, worker, blocks) || pthread_join(t, NULL)) return 1;
    char *c = calloc(100, 10);
    for (int i = 0; i < 1000; i++)
        if (c[i]) return 2; /* calloc's bytes are defined */
    char *r = malloc(10);
    memcpy(r, "0123456789", 10);
    r = realloc(r, 100000); /* grows: the first 10 bytes are defined */
    if (memcmp(r, "0123456789", 10) || malloc_usable_size(r) < 100000) return 3;
    r = realloc(r, 5);
    if (memcmp(r, "01234", 5)) return 4;
    void *a = NULL;
    if (posix_memalign(&a, 4096, 5000) || (size_t)a % 4096) return 5;
    memset(a, 0, 5000);
    void *big = calloc(1, 3 << 20);
    if (((char *)big)[(3 << 20) - 1]) return 6;
    big = realloc(big, 5 << 20);
    char *s = strdup("text");
    free(s);
    free(big);
    free(a);
    free(r);
    free(c);
    return 0;
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "bugs")) {
        for (int i = 0; i < 3; i++) leak_one();
        use_after_free();
        overflow();
        uninitialised();
        return 0;
    }
    return clean();
}
