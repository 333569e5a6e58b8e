/*
 * log.c - stderr logging shared by every thread of every moat program (see
 * log.h).  Formatting happens in a stack buffer and each line leaves in one
 * write(2); the only per-thread state is the optional info-line buffer.
 */
#include "log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "moat_io.h"
#include "moat_json_escape.h"

#define LOG_THREAD_BUF 16384
#define LOG_STAMP_LEN  25 /* "2026-12-01T02:50:00.123Z " */

static const char *log_progname;
static int log_debug_level;
static int log_json; /* __atomic: a reload may switch it while workers log */

void log_set_json(int on)
{
    __atomic_store_n(&log_json, on != 0, __ATOMIC_RELAXED);
}

int log_is_json(void)
{
    return __atomic_load_n(&log_json, __ATOMIC_RELAXED);
}

void log_init(const char *progname, int debug)
{
    if (progname != NULL)
        log_progname = progname;
    log_debug_level = debug;
}

static const char *progname(void)
{
    /* before log_init: the program's file name (moat-backend, moatctl, ...) */
    return log_progname != NULL ? log_progname : program_invocation_short_name;
}

/*
 * Every line starts with its time, RFC 3339 in UTC with milliseconds
 * ("2026-12-01T02:50:00.123Z "), so lines from the backend, the gateway
 * and the writer interleave in order.  The date part is formatted once per
 * second per thread (gmtime_r), the rest by hand: the request log line of
 * the deny path pays two clock reads, not a strftime.
 */
static __thread time_t stamp_sec = (time_t)-1;
static __thread char stamp_day[20]; /* "YYYY-MM-DDTHH:MM:SS" */

static size_t stamp(char out[LOG_STAMP_LEN])
{
    struct timespec ts;
    struct tm tm;
    unsigned ms;

    if (clock_gettime(CLOCK_REALTIME, &ts) != 0)
        ts.tv_sec = 0, ts.tv_nsec = 0;
    if (ts.tv_sec != stamp_sec) {
        if (gmtime_r(&ts.tv_sec, &tm) == NULL || strftime(stamp_day, sizeof(stamp_day), "%Y-%m-%dT%H:%M:%S", &tm) != 19)
            memcpy(stamp_day, "0000-00-00T00:00:00", 20);
        stamp_sec = ts.tv_sec;
    }
    ms = (unsigned)(ts.tv_nsec / 1000000);
    memcpy(out, stamp_day, 19);
    out[19] = '.';
    out[20] = (char)('0' + ms / 100);
    out[21] = (char)('0' + ms / 10 % 10);
    out[22] = (char)('0' + ms % 10);
    out[23] = 'Z';
    out[24] = ' ';
    return LOG_STAMP_LEN;
}

/*
 * Worker threads buffer their info lines and write them once per event-loop
 * turn: one write(2) for many requests instead of one each.
 */
static __thread char tbuf[LOG_THREAD_BUF];
static __thread size_t tlen;
static __thread int tbuffered;

void log_buffer_thread(void)
{
    tbuffered = 1;
}

void log_flush(void)
{
    if (tlen > 0)
        (void)moat_write_full(STDERR_FILENO, tbuf, tlen, NULL);
    tlen = 0;
}

/* One whole line (with its newline): into this thread's buffer when it
 * buffers and the line is an info line, else out at once. */
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
    (void)moat_write_full(STDERR_FILENO, line, len, NULL);
}

/*
 * JSON lines: {"ts":"...","program":"...","level":"...", then either the
 * caller's fields (log_info_json) or "msg":"..."}.  A message is escaped
 * as it is when it is valid UTF-8, else after log_escape (\xHH), so a line
 * always parses.
 */
static size_t json_head(char *line, size_t size, const char *level)
{
    char ts[LOG_STAMP_LEN];
    size_t off = 0, n;
    const char *name = progname();

    stamp(ts);
    n = (size_t)snprintf(line, size, "{\"ts\":\"%.24s\",\"program\":\"", ts);
    off = n < size ? n : size - 1;
    (void)moat_json_escape(line, size, &off, name, strnlen(name, 64), MOAT_JSON_ASCII_ONLY); /* a program name: ASCII */
    n = (size_t)snprintf(line + off, size - off, "\",\"level\":\"%s\",", level);
    off += n < size - off ? n : size - off - 1;
    return off;
}

static void json_msg_line(const char *level, const char *msg, size_t len, int buffer)
{
    char line[MOAT_LOG_LINE_MAX * 2], esc[MOAT_LOG_LINE_MAX * 4 + 1];
    size_t off = json_head(line, sizeof(line) - 3, level);

    memcpy(line + off, "\"msg\":\"", 7);
    off += 7;
    if (moat_json_escape(line, sizeof(line) - 3, &off, msg, len, MOAT_JSON_UTF8_RAW) != 0) {
        log_escape(esc, sizeof(esc), msg, len, len);
        if (moat_json_escape(line, sizeof(line) - 3, &off, esc, strlen(esc), MOAT_JSON_ASCII_ONLY) != 0)
            (void)moat_json_escape(line, sizeof(line) - 3, &off, "(message too long)", 18, 0);
    }
    memcpy(line + off, "\"}\n", 3);
    emit(line, off + 3, buffer);
}

void log_info_json(const char *fields, size_t len)
{
    char line[MOAT_LOG_LINE_MAX * 2];
    size_t off = json_head(line, sizeof(line), "info");

    if (len > sizeof(line) - off - 2)
        return; /* never a cut (unparsable) line; callers stay well below */
    memcpy(line + off, fields, len);
    off += len;
    line[off++] = '}';
    line[off++] = '\n';
    emit(line, off, 1);
}

void log_info_raw(const char *text, size_t len)
{
    if (log_is_json()) {
        json_msg_line("info", text, len, 1);
        return;
    }
    char line[MOAT_LOG_LINE_MAX];
    const char *name = progname();
    size_t n = strlen(name), p = stamp(line);

    if (n > sizeof(line) / 2)
        n = sizeof(line) / 2;
    if (p + n + 2 + len + 1 > sizeof(line))
        len = sizeof(line) - p - n - 3;
    memcpy(line + p, name, n);
    p += n;
    line[p++] = ':';
    line[p++] = ' ';
    memcpy(line + p, text, len);
    p += len;
    line[p++] = '\n';
    emit(line, p, 1);
}

/* The JSON form of vline: the message formatted, then one JSON line. */
__attribute__((format(printf, 4, 0))) static void json_vline(const char *level, int errnum, int buffer, const char *fmt, va_list ap)
{
    char msg[MOAT_LOG_LINE_MAX];
    int n = vsnprintf(msg, sizeof(msg), fmt, ap);
    size_t off = n < 0 ? 0 : (size_t)n < sizeof(msg) ? (size_t)n : sizeof(msg) - 1;

    if (errnum != 0 && off < sizeof(msg) - 1) {
        n = snprintf(msg + off, sizeof(msg) - off, ": %s", strerror(errnum));
        off = n < 0 ? off : off + (size_t)n < sizeof(msg) ? off + (size_t)n : sizeof(msg) - 1;
    }
    /* text levels are prefixes ("debug: "); JSON has names */
    json_msg_line(level[0] == '\0' ? (buffer ? "info" : "warning") : level[0] == 'd' ? "debug" : "fatal", msg, off, buffer);
}

/* Formats one line: time "progname: level" fmt [": " strerror(errnum)] "\n". */
__attribute__((format(printf, 4, 0))) static void vline(const char *level, int errnum, int buffer, const char *fmt, va_list ap)
{
    char line[MOAT_LOG_LINE_MAX];
    size_t off;
    int n;

    if (log_is_json()) {
        json_vline(level, errnum, buffer, fmt, ap);
        return;
    }
    off = stamp(line);
    n = snprintf(line + off, sizeof(line) - off, "%s: %s", progname(), level);
    off += n < 0 ? 0 : (size_t)n;
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
    /* room for the newline even when the message was cut */
    if (off >= sizeof(line) - 1)
        off = sizeof(line) - 2;
    line[off++] = '\n';
    emit(line, off, buffer);
}

void log_warn(const char *fmt, ...)
{
    int saved = errno;
    va_list ap;

    va_start(ap, fmt);
    vline("", saved, 0, fmt, ap);
    va_end(ap);
    errno = saved;
}

void log_warnx(const char *fmt, ...)
{
    int saved = errno;
    va_list ap;

    va_start(ap, fmt);
    vline("", 0, 0, fmt, ap);
    va_end(ap);
    errno = saved;
}

void log_info(const char *fmt, ...)
{
    int saved = errno;
    va_list ap;

    va_start(ap, fmt);
    vline("", 0, 1, fmt, ap);
    va_end(ap);
    errno = saved;
}

void log_debug(const char *fmt, ...)
{
    int saved = errno;
    va_list ap;

    if (log_debug_level <= 0)
        return;
    va_start(ap, fmt);
    vline("debug: ", 0, 0, fmt, ap);
    va_end(ap);
    errno = saved;
}

void fatal(const char *fmt, ...)
{
    int saved = errno;
    va_list ap;

    va_start(ap, fmt);
    vline("fatal: ", saved, 0, fmt, ap);
    va_end(ap);
    exit(1);
}

void fatalx(const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vline("fatal: ", 0, 0, fmt, ap);
    va_end(ap);
    exit(1);
}

static int plain(unsigned char c)
{
    return c >= 0x20 && c < 0x7f && c != '"' && c != '\\';
}

void log_escape(char *dst, size_t dstlen, const char *src, size_t srclen, size_t max)
{
    static const char hex[] = "0123456789abcdef";
    size_t o = 0;

    if (dstlen == 0)
        return;
    if (srclen > max)
        srclen = max;
    /* the common case first: a run that needs no escape, copied at once */
    while (o < srclen && o + 1 < dstlen && plain((unsigned char)src[o]))
        o++;
    memcpy(dst, src, o);
    for (size_t i = o; i < srclen; i++) {
        unsigned char c = (unsigned char)src[i];
        if (plain(c)) {
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
