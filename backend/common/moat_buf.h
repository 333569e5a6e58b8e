/*
 * moat_buf.h - a growable byte buffer, the one copy: the codec's encoders
 * (struct moat_buf is part of moat_proto.h's API), the gateway's audit
 * client.  Zero-initialise one ({0}) to start; moat_buf_free to end.
 *
 * Capacity doubles from 256 bytes, so a buffer reused for messages of
 * similar size stops reallocating; moat_buf_reserve can size the first
 * allocation (the audit client starts batches at 4 KiB).
 */
#ifndef MOAT_BUF_H
#define MOAT_BUF_H

#include <stddef.h>
#include <stdint.h>

struct moat_buf {
    uint8_t *data;
    size_t len;
    size_t cap;
};

/* Makes room for extra more bytes after len: 0, or -1 (out of memory or
 * size overflow; the buffer is unchanged). */
int moat_buf_reserve(struct moat_buf *b, size_t extra);

/* Appends data[0..len): 0, or -1 with the buffer unchanged. */
int moat_buf_append(struct moat_buf *b, const void *data, size_t len);

/* Frees the memory; the buffer is empty ({0}) again. */
void moat_buf_free(struct moat_buf *b);

/* A malloc'ed copy of data[0..len) with a NUL after it (the bytes may hold
 * NULs of their own), or NULL when memory ran out. */
void *moat_memdup0(const void *data, size_t len);

#endif /* MOAT_BUF_H */
