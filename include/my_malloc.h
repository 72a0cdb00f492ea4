/* Compatibility header: the name the seeds' assignment uses, so that its test
 * programs compile unchanged against tsalloc:
 *   cc -O2 -pthread -I<prefix>/include thread_test.c -L<prefix>/lib -ltsalloc-classic
 */
#ifndef MY_MALLOC_H
#define MY_MALLOC_H

#include <tsalloc/classic.h>

#endif
