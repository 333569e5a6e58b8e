/*
 * errbuf.h - errors as values: a function that fails fills an errbuf with
 * one human readable line and returns -1; the caller at the top reports it
 * once.
 */
#ifndef MOAT_ERRBUF_H
#define MOAT_ERRBUF_H

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

struct errbuf {
    char msg[256];
};

__attribute__((format(printf, 2, 3))) static inline int errf(struct errbuf *e, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof(e->msg), fmt, ap);
    va_end(ap);
    return -1;
}

/* Like errf() and appends ": strerror(errno)". */
__attribute__((format(printf, 2, 3))) static inline int errf_errno(struct errbuf *e, const char *fmt, ...)
{
    int saved = errno;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(e->msg, sizeof(e->msg), fmt, ap);
    va_end(ap);
    if (n >= 0 && (size_t)n < sizeof(e->msg))
        snprintf(e->msg + n, sizeof(e->msg) - (size_t)n, ": %s", strerror(saved));
    errno = saved;
    return -1;
}

#endif
