/*
 * log.c - stderr logging for moat-backend.  One line per message, prefixed
 * with the program name; safe to call from several threads (one write(2)
 * per line).
 */
#include "log.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *log_progname = "moat-backend";
static int log_verbose;

void log_init(const char *progname, int verbose)
{
    log_progname = progname;
    log_verbose = verbose;
}

static void vlog(const char *level, int with_errno, int saved_errno, const char *fmt, va_list ap)
{
    char line[1024];
    int n = snprintf(line, sizeof(line), "%s: %s", log_progname, level);
    if (n < 0 || (size_t)n >= sizeof(line))
        n = 0;
    int m = vsnprintf(line + n, sizeof(line) - (size_t)n, fmt, ap);
    size_t len = m < 0 ? (size_t)n : (size_t)n + (size_t)m;
    if (len >= sizeof(line) - 1)
        len = sizeof(line) - 2;
    if (with_errno) {
        int k = snprintf(line + len, sizeof(line) - len, ": %s", strerror(saved_errno));
        if (k > 0)
            len += (size_t)k;
        if (len >= sizeof(line) - 1)
            len = sizeof(line) - 2;
    }
    line[len++] = '\n';
    ssize_t w = write(STDERR_FILENO, line, len);
    (void)w;
}

#define LOGFN(name, level, with_errno, cond)                                                                                       \
    void name(const char *fmt, ...)                                                                                                \
    {                                                                                                                              \
        int saved = errno;                                                                                                         \
        va_list ap;                                                                                                                \
        if (!(cond))                                                                                                               \
            return;                                                                                                                \
        va_start(ap, fmt);                                                                                                         \
        vlog(level, with_errno, saved, fmt, ap);                                                                                   \
        va_end(ap);                                                                                                                \
        errno = saved;                                                                                                             \
    }

LOGFN(log_warn, "", 1, 1)
LOGFN(log_warnx, "", 0, 1)
LOGFN(log_info, "", 0, 1)
LOGFN(log_debug, "debug: ", 0, log_verbose)

void fatal(const char *fmt, ...)
{
    int saved = errno;
    va_list ap;
    va_start(ap, fmt);
    vlog("fatal: ", 1, saved, fmt, ap);
    va_end(ap);
    exit(1);
}

void fatalx(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vlog("fatal: ", 0, 0, fmt, ap);
    va_end(ap);
    exit(1);
}
