/*
 * moat_json_escape.h - bytes into the inside of a JSON string, written into
 * a caller's buffer: no allocation, no printf.  For the hot paths (the
 * gateway's error bodies and denial audit records); anything that fails
 * here (too long, bytes a mode refuses) is the caller's cue to take the
 * jansson path instead.
 *
 * Always escaped: '"' and '\' as \" and \\, the control characters
 * U+0000..U+001F and DEL as \u00xx (lowercase, as the deny path has always
 * written them; jansson writes \n, \t ... and leaves DEL as it is).  Other
 * printable ASCII is copied.  Bytes >= 0x80 depend on flags:
 *   0                     well-formed UTF-8 becomes \uXXXX (a surrogate pair
 *                         past U+FFFF): the output is ASCII, and for text
 *                         without control characters it is byte for byte
 *                         jansson's json_dumps(JSON_ENSURE_ASCII)
 *   MOAT_JSON_UTF8_RAW    well-formed UTF-8 is copied as it is
 *   MOAT_JSON_ASCII_ONLY  any byte >= 0x80 fails
 * Ill-formed UTF-8 always fails (jansson refuses it too).
 */
#ifndef MOAT_JSON_ESCAPE_H
#define MOAT_JSON_ESCAPE_H

#include <stddef.h>

#define MOAT_JSON_UTF8_RAW   0x1u
#define MOAT_JSON_ASCII_ONLY 0x2u

/* The most one input byte can become (a control character: \u00xx). */
#define MOAT_JSON_ESCAPE_MAX_PER_BYTE 6

/*
 * Appends src[0..len) escaped (without quotes) to buf at *off: 0 with *off
 * advanced, or -1 with *off unchanged when src has bytes the flags refuse
 * or the result would not leave at least one byte free in buf[0..size)
 * (room for the caller's NUL).  Writes no NUL itself.
 */
int moat_json_escape(char *buf, size_t size, size_t *off, const char *src, size_t len, unsigned flags);

#endif /* MOAT_JSON_ESCAPE_H */
