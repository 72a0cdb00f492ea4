/* Producer/consumer pairs (the lecture's second program, with checks): every
 * block is allocated by one thread and freed by another. Producers write a
 * pattern, consumers verify it, sometimes resize the block first, then free
 * it. Sizes cycle through small classes and now and then a medium, big-page
 * or large block, so pages fill up, go to the full list and come back through
 * the notification path.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

#define PAIRS 4
#define RING  2048
#define ITEMS 150000

typedef struct ring {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    void *item[RING];
    size_t size[RING];
    unsigned head, tail; /* head: next to fill; tail: next to take */
} ring_t;

static ring_t rings[PAIRS];

static size_t size_of(long i) {
    if (i % 997 == 0) return 600000 + (size_t)(i % 7) * 100000; /* large */
    if (i % 101 == 0) return 70000 + (size_t)(i % 5) * 60000;   /* big pages */
    if (i % 29 == 0) return 2000 + (size_t)(i % 13) * 3000;     /* medium */
    return 4 * (size_t)((i % 64) + 1);                          /* the lecture's sizes */
}

static void *producer(void *arg) {
    ring_t *r = arg;
    for (long i = 0; i < ITEMS; i++) {
        size_t n = size_of(i);
        unsigned char *p = malloc(n);
        CHECK(p != NULL);
        ts_fill(p, n < 512 ? n : 512, (uint64_t)i);
        pthread_mutex_lock(&r->lock);
        while (r->head - r->tail == RING) pthread_cond_wait(&r->cond, &r->lock);
        r->item[r->head % RING] = p;
        r->size[r->head % RING] = n;
        r->head++;
        pthread_cond_broadcast(&r->cond);
        pthread_mutex_unlock(&r->lock);
    }
    return NULL;
}

static void *consumer(void *arg) {
    ring_t *r = arg;
    for (long i = 0; i < ITEMS; i++) {
        pthread_mutex_lock(&r->lock);
        while (r->head == r->tail) pthread_cond_wait(&r->cond, &r->lock);
        unsigned char *p = r->item[r->tail % RING];
        size_t n = r->size[r->tail % RING];
        r->tail++;
        pthread_cond_broadcast(&r->cond);
        pthread_mutex_unlock(&r->lock);
        size_t check = n < 512 ? n : 512;
        CHECK_MSG(ts_verify(p, check, (uint64_t)i), "item %ld (%zu bytes) corrupted", i, n);
        if (i % 13 == 0) { /* grow it: the old block goes back remotely, or moves */
            p = realloc(p, n + 100);
            CHECK(p != NULL);
            CHECK(ts_verify(p, check, (uint64_t)i));
        }
        free(p);
    }
    return NULL;
}

int main(void) {
    pthread_t t[2 * PAIRS];
    for (int i = 0; i < PAIRS; i++) {
        pthread_mutex_init(&rings[i].lock, NULL);
        pthread_cond_init(&rings[i].cond, NULL);
        CHECK(pthread_create(&t[2 * i], NULL, producer, &rings[i]) == 0);
        CHECK(pthread_create(&t[2 * i + 1], NULL, consumer, &rings[i]) == 0);
    }
    for (int i = 0; i < 2 * PAIRS; i++) CHECK(pthread_join(t[i], NULL) == 0);
    printf("ok: %d pairs x %d blocks, each freed by the other thread\n", PAIRS, ITEMS);
    return 0;
}
