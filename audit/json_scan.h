/*
 * json_scan.h - a strict single-pass check of a record body, so the writer
 * can splice the gateway's bytes into a line without parsing and
 * re-encoding them (see json_scan.c for exactly what is accepted).
 *
 * It only ever says "fast path" or "not fast path": a body it does not
 * accept is not thereby refused, it goes through jansson as before.
 */
#ifndef MOAT_AUDIT_JSON_SCAN_H
#define MOAT_AUDIT_JSON_SCAN_H

#include <stddef.h>

#define AUDIT_JSON_SCAN_MAX_DEPTH 32  /* nesting of objects and arrays */
#define AUDIT_JSON_SCAN_MAX_KEYS  256 /* keys of the open objects, for duplicates */

/*
 * Called for each member of the top-level object, with the raw key (no
 * quotes; never holds a backslash) and the raw value text (a string's
 * value keeps its quotes and escapes).  Returns 0 to go on, -1 to decline
 * the fast path.
 */
typedef int (*audit_json_member_cb)(void *arg, const char *key, size_t key_len, const char *value, size_t value_len);

/* 0 when body[0..len) is a JSON object the fast path may splice as is (and
 * top accepted every top-level member), -1 otherwise. */
int audit_json_scan(const char *body, size_t len, audit_json_member_cb top, void *arg);

#endif
