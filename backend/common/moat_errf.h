/*
 * moat_errf.h - errors as values, the one copy for code that reports into
 * a caller's (char *err, size_t errlen): format one line there and return
 * -1, so a step can `return moat_errf(err, errlen, "...", ...)`.
 * (backend/errbuf.h is the same habit around a struct errbuf.)
 */
#ifndef MOAT_ERRF_H
#define MOAT_ERRF_H

#include <stddef.h>

__attribute__((format(printf, 3, 4))) int moat_errf(char *err, size_t errlen, const char *fmt, ...);

#endif
