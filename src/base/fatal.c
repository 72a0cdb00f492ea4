/* Messages on stderr, and the one way out for misuse and broken invariants:
 * a message naming the function and the pointer, then abort(). Never
 * allocates. */
#include "base/assert.h"
#include "base/base.h"

#include <stdlib.h>

void _ts_vmessage(const char *fmt, va_list ap) {
    char buf[512];
    int n = _ts_format(buf, sizeof buf, "tsalloc: ");
    int m = _ts_vformat(buf + n, sizeof buf - (size_t)n - 1, fmt, ap);
    size_t len = (size_t)n + (size_t)m;
    if (len > sizeof buf - 2) len = sizeof buf - 2;
    buf[len++] = '\n';
    _ts_os_write_stderr(buf, len);
}

void _ts_message(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    _ts_vmessage(fmt, ap);
    va_end(ap);
}

void _ts_fatal(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    _ts_vmessage(fmt, ap);
    va_end(ap);
    abort();
}

void _ts_invalid_pointer(const char *func, const void *ptr) {
    _ts_fatal("%s(): invalid pointer %p", func, ptr);
}

void _ts_double_free(const char *func, const void *ptr) {
    _ts_fatal("%s(): double free of %p", func, ptr);
}

void _ts_assert_fail(const char *cond, const char *file, int line, const char *func) {
    _ts_fatal("assertion failed: %s (%s:%d, %s())", cond, file, line, func);
}
