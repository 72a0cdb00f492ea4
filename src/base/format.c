/* A small printf for places where stdio may allocate or is not yet safe:
 * inside malloc, in fatal messages and in statistics output. */
#include "base/base.h"

static size_t put(char *buf, size_t cap, size_t at, char c) {
    if (at + 1 < cap) buf[at] = c;
    return at + 1;
}

static size_t put_num(char *buf, size_t cap, size_t at, unsigned long long v, unsigned base,
                      bool negative, int width, char pad) {
    char tmp[32];
    int n = 0;
    do {
        tmp[n++] = "0123456789abcdef"[v % base];
        v /= base;
    } while (v);
    if (negative) tmp[n++] = '-';
    for (int i = n; i < width; i++) at = put(buf, cap, at, pad);
    while (n) at = put(buf, cap, at, tmp[--n]);
    return at;
}

int _ts_vformat(char *buf, size_t cap, const char *fmt, va_list ap) {
    size_t at = 0;
    for (const char *f = fmt; *f; f++) {
        if (*f != '%') {
            at = put(buf, cap, at, *f);
            continue;
        }
        f++;
        char pad = ' ';
        if (*f == '0') pad = '0', f++;
        int width = 0;
        while (*f >= '0' && *f <= '9') width = width * 10 + (*f++ - '0');
        int longs = 0;
        bool size_arg = false;
        while (*f == 'l') longs++, f++;
        if (*f == 'z') size_arg = true, f++;
        switch (*f) {
        case 'd': {
            long long v = size_arg ? (long long)va_arg(ap, ptrdiff_t)
                          : longs  ? va_arg(ap, long)
                                   : va_arg(ap, int);
            at = put_num(buf, cap, at, v < 0 ? -(unsigned long long)v : (unsigned long long)v, 10,
                         v < 0, width, pad);
            break;
        }
        case 'u':
        case 'x': {
            unsigned long long v = size_arg ? va_arg(ap, size_t)
                                   : longs  ? va_arg(ap, unsigned long)
                                            : va_arg(ap, unsigned);
            at = put_num(buf, cap, at, v, *f == 'x' ? 16 : 10, false, width, pad);
            break;
        }
        case 'p':
            at = put(buf, cap, at, '0');
            at = put(buf, cap, at, 'x');
            at = put_num(buf, cap, at, (uintptr_t)va_arg(ap, void *), 16, false, 0, ' ');
            break;
        case 's': {
            const char *s = va_arg(ap, const char *);
            if (!s) s = "(null)";
            int len = 0;
            while (s[len]) len++;
            for (int i = len; i < width; i++) at = put(buf, cap, at, ' ');
            for (int i = 0; i < len; i++) at = put(buf, cap, at, s[i]);
            break;
        }
        case 'c':
            at = put(buf, cap, at, (char)va_arg(ap, int));
            break;
        case '%':
            at = put(buf, cap, at, '%');
            break;
        case 0:
            f--;
            break;
        default:
            at = put(buf, cap, at, *f);
            break;
        }
    }
    if (cap) buf[at < cap ? at : cap - 1] = 0;
    return (int)at;
}

int _ts_format(char *buf, size_t cap, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = _ts_vformat(buf, cap, fmt, ap);
    va_end(ap);
    return n;
}
