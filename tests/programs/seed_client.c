/* A program written for the seed assignment, unchanged: it includes
 * "my_malloc.h" and uses both classic APIs. Built against an installed
 * tsalloc by tests/programs/install_check.sh. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include "my_malloc.h"
static void *f(void *a) {
    for (int i = 0; i < 10000; i++) {
        char *p = ts_malloc_nolock(100 + i % 500);
        memset(p, 1, 100);
        ts_free_nolock(p);
    }
    return a;
}
int main(void) {
    pthread_t t[4];
    for (int i = 0; i < 4; i++) pthread_create(&t[i], 0, f, 0);
    for (int i = 0; i < 4; i++) pthread_join(t[i], 0);
    void *p = ts_malloc_lock(1000);
    ts_free_lock(p);
    printf("data segment %lu, free %lu\n", get_data_segment_size(),
           get_data_segment_free_space_size());
    return 0;
}
