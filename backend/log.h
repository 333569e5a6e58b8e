/*
 * log.h - backend logging in the relayd style: messages start with the
 * function name; *_warn appends strerror(errno), *_warnx does not; fatal*
 * log and exit.
 */
#ifndef MOAT_BACKEND_LOG_H
#define MOAT_BACKEND_LOG_H

#include <stdarg.h>

void log_init(const char *progname, int verbose);
void log_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void log_warnx(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void log_info(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void log_debug(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void fatal(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
void fatalx(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

#endif
