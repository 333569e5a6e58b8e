/*
 * log.h - one-line diagnostics on stderr in the relayd style, the one copy
 * for moat-backend, moat-gateway and their tools.
 *
 * Callers start each message with __func__.  log_warn and fatal append
 * ": strerror(errno)" (when errno is set), log_warnx and fatalx do not;
 * fatal and fatalx exit(1).  Every line is "TIME progname: [level: ]message\n"
 * (TIME: RFC 3339 UTC with milliseconds, "2026-12-01T02:50:00.123Z"),
 * at most MOAT_LOG_LINE_MAX bytes (longer messages are cut), written with
 * one write(2) so threads never interleave.  errno is preserved.
 *
 * The gateway's worker threads call log_buffer_thread() once: their info
 * lines (one per request) then gather in a per-thread buffer that the
 * worker writes with log_flush() once per event-loop turn.  Warnings and
 * fatal errors flush that buffer first and are written at once.
 */
#ifndef MOAT_LOG_H
#define MOAT_LOG_H

#include <stddef.h>

#define MOAT_LOG_LINE_MAX 2048

/* progname NULL keeps the current one (at first the program's file name);
 * debug > 0 turns log_debug on. */
void log_init(const char *progname, int debug);

/* This thread's info lines are buffered until log_flush(). */
void log_buffer_thread(void);
void log_flush(void);

/* An info line already assembled (no format): "TIME progname: " + text. */
void log_info_raw(const char *text, size_t len);

/*
 * JSON lines instead of text (the gateway's log: {format: json}): every
 * line is one object {"ts","program","level","msg"}; log_info_json writes
 * {"ts","program","level":"info", + fields + "}" (fields: valid JSON
 * members without braces, e.g. "\"msg\":\"request\",\"status\":200").
 */
void log_set_json(int on);
int log_is_json(void);
void log_info_json(const char *fields, size_t len);

void log_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void log_warnx(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void log_info(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void log_debug(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void fatal(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
void fatalx(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

/*
 * Copies at most max bytes of untrusted src into dst (dstlen bytes, always
 * terminated), escaping anything outside printable ASCII, '"' and '\' as
 * \xHH so a client cannot forge or break log lines.  Stops early rather
 * than cut an escape in two when dst is full.
 */
void log_escape(char *dst, size_t dstlen, const char *src, size_t srclen, size_t max);

#endif /* MOAT_LOG_H */
