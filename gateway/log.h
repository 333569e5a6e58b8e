/*
 * log.h - one-line diagnostics on stderr, OpenBSD style: callers start each
 * message with __func__; *_warn appends strerror(errno), *_warnx does not;
 * fatal/fatalx exit(1).  Thread safe: each line is a single write(2).
 */
#ifndef GW_LOG_H
#define GW_LOG_H

#include <stddef.h>

void log_init(const char *progname, int debug);
/* Called by a worker thread at start: its info lines are buffered until
 * log_flush(), which it calls once per event-loop turn. */
void log_buffer_thread(void);
void log_flush(void);
/* An info line already assembled (no format): "progname: " + text. */
void log_info_raw(const char *text, size_t len);
void log_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void log_warnx(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void log_info(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void log_debug(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void fatal(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
void fatalx(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

/*
 * Copy at most max bytes of untrusted src into dst (dstlen bytes, always
 * terminated), escaping anything outside printable ASCII, '"' and '\' as \xHH
 * so a client cannot forge or break log lines.
 */
void log_escape(char *dst, size_t dstlen, const char *src, size_t srclen, size_t max);

#endif /* GW_LOG_H */
