/*
 * audit_wire.h - the socket protocol between the gateway's workers and the
 * audit writer (one stream socketpair per worker).
 *
 * worker -> writer:  struct audit_wire_req, then body_len bytes of JSON (a
 *                    record body, see FORMAT.md), then packet_len bytes.
 * writer -> worker:  struct audit_wire_ack per request, in order, sent only
 *                    once the record is durable (seq != 0) or has failed
 *                    (seq == 0, err = errno-style code); none for a request
 *                    with AUDIT_WIRE_NOACK (a denial's record: the worker
 *                    does not wait for it, so it need not be woken for it;
 *                    the writer still makes it durable with its batch).
 * Integers in host byte order: both ends are the same program.
 */
#ifndef MOAT_AUDIT_WIRE_H
#define MOAT_AUDIT_WIRE_H

#include <stdint.h>

#define AUDIT_WIRE_MAGIC      0x4d415544u /* "MAUD" */
#define AUDIT_WIRE_MAX_BODY   (64u * 1024u)
#define AUDIT_WIRE_MAX_PACKET (16u * 1024u * 1024u)

#define AUDIT_WIRE_NOACK 1u

struct audit_wire_req {
    uint32_t magic;
    uint32_t body_len;
    uint32_t packet_len;
    uint32_t flags; /* AUDIT_WIRE_NOACK or 0; other bits are a protocol error */
    uint64_t tag;   /* echoed in the ack */
};

struct audit_wire_ack {
    uint64_t tag;
    uint64_t seq; /* 0: not recorded */
    uint32_t err;
    uint32_t reserved;
};

#endif
