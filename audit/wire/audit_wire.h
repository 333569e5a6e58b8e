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
 *
 * Reading an execution back (AUDIT_WIRE_QUERY): the body is
 * {"tenant":"...","request_id":"..."} and packet_len is 0.  Its ack comes in
 * order like any other, after the batch it came with is durable, with
 * seq 0 and err 0 (found), ENOENT (no such execution for that tenant, or
 * older than the writer's index), or another errno (a record or the packet
 * did not match what was written: nothing is served).  When found, len
 * bytes follow the ack: struct audit_wire_found, then records_len bytes of
 * the execution's records (JSON lines, each ending in '\n', in log order),
 * then packet_len bytes of its packet (0: none, or removed by retention).
 * Every other ack has len 0.
 * Integers in host byte order: both ends are the same program.
 */
#ifndef MOAT_AUDIT_WIRE_H
#define MOAT_AUDIT_WIRE_H

#include <stdint.h>

#define AUDIT_WIRE_MAGIC      0x4d415544u /* "MAUD" */
#define AUDIT_WIRE_MAX_BODY   (64u * 1024u)
#define AUDIT_WIRE_MAX_PACKET (16u * 1024u * 1024u)

#define AUDIT_WIRE_NOACK 1u
#define AUDIT_WIRE_QUERY 2u /* read one execution back (above) */

/* The most an answer to a query holds after its ack. */
#define AUDIT_WIRE_MAX_RECORDS (4u * 1024u * 1024u)
#define AUDIT_WIRE_MAX_ANSWER  (8u + AUDIT_WIRE_MAX_RECORDS + AUDIT_WIRE_MAX_PACKET)

struct audit_wire_req {
    uint32_t magic;
    uint32_t body_len;
    uint32_t packet_len;
    uint32_t flags; /* AUDIT_WIRE_NOACK, AUDIT_WIRE_QUERY or 0; other bits are a protocol error */
    uint64_t tag;   /* echoed in the ack */
};

struct audit_wire_ack {
    uint64_t tag;
    uint64_t seq; /* 0: not recorded */
    uint32_t err;
    uint32_t len; /* bytes of answer after the ack: a query's when found, else 0 */
};

struct audit_wire_found {
    uint32_t records_len;
    uint32_t packet_len;
};

#endif
