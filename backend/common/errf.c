/*
 * errf.c - moat_errf (moat_errf.h): the message, truncated to errlen, and -1.
 */
#include "moat_errf.h"

#include <stdarg.h>
#include <stdio.h>

int moat_errf(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;

    if (err == NULL || errlen == 0)
        return -1;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return -1;
}
