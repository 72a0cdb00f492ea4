/* The program the gdb commands are tested on (gdb_commands.sh): linked with
 * libtsalloc.a, it leaves known blocks (a live one of 100 bytes, a freed one,
 * a large one) in globals and a second thread's heap in place, then stops in
 * gdb_stop_here(), where gdb looks (and writes a core file).
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

void *gdb_live, *gdb_freed, *gdb_large;
static pthread_mutex_t hold = PTHREAD_MUTEX_INITIALIZER;
static pthread_barrier_t ready;

__attribute__((noinline)) void gdb_stop_here(void) {
    __asm__ volatile("" ::: "memory");
}

static void *second(void *arg) {
    (void)arg;
    void *volatile p = malloc(5000); /* a heap of its own, one block live */
    memset(p, 1, 5000);
    pthread_barrier_wait(&ready);
    pthread_mutex_lock(&hold); /* alive while gdb looks */
    pthread_mutex_unlock(&hold);
    free(p);
    return NULL;
}

int main(void) {
    gdb_live = malloc(100);
    gdb_freed = malloc(100);
    free(gdb_freed);
    gdb_large = malloc(3 << 20);
    memset(gdb_live, 0, 100);
    pthread_t t;
    pthread_barrier_init(&ready, NULL, 2);
    pthread_mutex_lock(&hold);
    if (pthread_create(&t, NULL, second, NULL)) return 1;
    pthread_barrier_wait(&ready);
    gdb_stop_here();
    pthread_mutex_unlock(&hold);
    pthread_join(t, NULL);
    free(gdb_large);
    free(gdb_live);
    return 0;
}
