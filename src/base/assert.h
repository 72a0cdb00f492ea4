/* ts_assert: invariant checks that a checked build (TS_CHECKED=1) compiles
 * in and a release build compiles out completely.
 *
 * TS_CHECKED is a 0/1 constant read in a plain `if`, so the condition still
 * compiles (and stays type-checked) in release builds, where the optimiser
 * drops it without evaluating it. A failed check prints one line,
 * "tsalloc: assertion failed: <condition> (<file>:<line>, <function>())",
 * and aborts; the message is formatted without allocation.
 */
#ifndef TS_BASE_ASSERT_H
#define TS_BASE_ASSERT_H

#include "base/base.h"

#ifndef TS_CHECKED
#define TS_CHECKED 0
#endif

#ifdef __cplusplus
extern "C" {
#endif

TS_HIDDEN TS_NORETURN void _ts_assert_fail(const char *cond, const char *file, int line,
                                           const char *func);

#define ts_assert(c)                                                                               \
    do {                                                                                           \
        if (TS_CHECKED && !(c)) _ts_assert_fail(#c, __FILE__, __LINE__, __func__);                 \
    } while (0)

#ifdef __cplusplus
}
#endif

#endif
