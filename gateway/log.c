/*
 * log.c - stderr logging shared by every worker thread.
 */
#include "log.h"
#include "gw_limits.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *log_progname = "moat-gateway";
static int log_debug_enabled;

void log_init(const char *progname, int debug)
{
    if (progname != NULL)
        log_progname = progname;
    log_debug_enabled = debug;
}

/*
 * Worker threads buffer their info lines (one per request) and write them
 * once per event-loop turn (log_flush): one write(2) for many requests
 * instead of one each.  Warnings flush first and are written at once.
 */
static __thread char tbuf[16384];
static __thread size_t tlen;
static __thread int tbuffered;

void log_buffer_thread(void)
{
    tbuffered = 1;
}

void log_flush(void)
{
    size_t off = 0;
    while (off < tlen) {
        ssize_t n = write(STDERR_FILENO, tbuf + off, tlen - off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        off += (size_t)n;
    }
    tlen = 0;
}

static void emit(const char *line, size_t len, int buffer)
{
    if (buffer && tbuffered) {
        if (tlen + len > sizeof(tbuf))
            log_flush();
        if (len <= sizeof(tbuf)) {
            memcpy(tbuf + tlen, line, len);
            tlen += len;
            return;
        }
    }
    if (tlen)
        log_flush();
    while (write(STDERR_FILENO, line, len) == -1 && errno == EINTR)
        ;
}

void log_info_raw(const char *text, size_t len)
{
    char line[GW_LOG_LINE_MAX];
    size_t p = strlen(log_progname);
    if (p + 2 + len + 1 > sizeof(line))
        len = sizeof(line) - p - 3;
    memcpy(line, log_progname, p);
    line[p++] = ':';
    line[p++] = ' ';
    memcpy(line + p, text, len);
    p += len;
    line[p++] = '\n';
    emit(line, p, 1);
}

/* Format one line and emit it with a single write so threads never interleave. */
__attribute__((format(printf, 4, 0))) static void log_vline_to(const char *level, int errnum, int buffer, const char *fmt,
                                                               va_list ap)
{
    char line[GW_LOG_LINE_MAX];
    size_t off;
    int n;

    n = snprintf(line, sizeof(line), "%s: %s", log_progname, level);
    off = n < 0 ? 0 : (size_t)n;
    if (off >= sizeof(line))
        off = sizeof(line) - 1;
    n = vsnprintf(line + off, sizeof(line) - off, fmt, ap);
    if (n > 0)
        off += (size_t)n;
    if (off >= sizeof(line))
        off = sizeof(line) - 1;
    if (errnum != 0) {
        n = snprintf(line + off, sizeof(line) - off, ": %s", strerror(errnum));
        if (n > 0)
            off += (size_t)n;
        if (off >= sizeof(line))
            off = sizeof(line) - 1;
    }
    /* Leave room for the newline even when the message was truncated. */
    if (off >= sizeof(line) - 1)
        off = sizeof(line) - 2;
    line[off++] = '\n';
    emit(line, off, buffer);
}

__attribute__((format(printf, 3, 0))) static void log_vline(const char *level, int errnum, const char *fmt, va_list ap)
{
    log_vline_to(level, errnum, 0, fmt, ap);
}

void log_warn(const char *fmt, ...)
{
    int saved = errno;
    va_list ap;

    va_start(ap, fmt);
    log_vline("", saved, fmt, ap);
    va_end(ap);
    errno = saved;
}

void log_warnx(const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    log_vline("", 0, fmt, ap);
    va_end(ap);
}

void log_info(const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    log_vline_to("", 0, 1, fmt, ap);
    va_end(ap);
}

void log_debug(const char *fmt, ...)
{
    va_list ap;

    if (!log_debug_enabled)
        return;
    va_start(ap, fmt);
    log_vline("debug: ", 0, fmt, ap);
    va_end(ap);
}

void fatal(const char *fmt, ...)
{
    int saved = errno;
    va_list ap;

    va_start(ap, fmt);
    log_vline("fatal: ", saved, fmt, ap);
    va_end(ap);
    exit(1);
}

void fatalx(const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    log_vline("fatal: ", 0, fmt, ap);
    va_end(ap);
    exit(1);
}

void log_escape(char *dst, size_t dstlen, const char *src, size_t srclen, size_t max)
{
    static const char hex[] = "0123456789abcdef";
    size_t i, o = 0;

    if (dstlen == 0)
        return;
    if (srclen > max)
        srclen = max;
    for (i = 0; i < srclen; i++) {
        unsigned char c = (unsigned char)src[i];
        if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\') {
            if (o + 1 >= dstlen)
                break;
            dst[o++] = (char)c;
        } else {
            if (o + 4 >= dstlen)
                break;
            dst[o++] = '\\';
            dst[o++] = 'x';
            dst[o++] = hex[c >> 4];
            dst[o++] = hex[c & 0xf];
        }
    }
    dst[o] = '\0';
}
