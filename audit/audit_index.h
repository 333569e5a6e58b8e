/*
 * audit_index.h - the writer's index of executions: request id and tenant
 * -> where their records are, so that a worker can read one execution back
 * (its records and its packet) and a review can be checked against the
 * result it names, without scanning the log.  See audit_index.c and
 * FORMAT.md ("Reading an execution back", "Reviews").
 *
 * Single-threaded: only the audit writer process uses it.
 */
#ifndef MOAT_AUDIT_INDEX_H
#define MOAT_AUDIT_INDEX_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "audit_log.h"

#define AUDIT_INDEX_RECORDS     65536                /* records kept (the newest): about 7 MiB */
#define AUDIT_INDEX_SCAN_BYTES  (256ull << 20)       /* of the newest log files, indexed at open */
#define AUDIT_INDEX_MAX_RECORDS 64                   /* records of one execution served (and kept) */
#define AUDIT_INDEX_MAX_REVIEWS 32                   /* reviews one execution may have */
#define AUDIT_INDEX_MAX_ID      256                  /* a longer request id or tenant is not indexed */
#define AUDIT_REVIEW_MAX_NOTE   4096                 /* bytes of a review's note (UTF-8) */
#define AUDIT_FOUND_MAX_RECORDS (4u * 1024u * 1024u) /* bytes of records one answer holds */

/* What the index needs of a record: its type and whose it is. */
struct audit_index_fields {
    char type[16]; /* "" when absent or not a short plain string */
    char request_id[AUDIT_INDEX_MAX_ID + 1];
    char tenant[AUDIT_INDEX_MAX_ID + 1];
    int allowed;                  /* decision is "allowed" */
    char prev[AUDIT_HEX_LEN + 1]; /* a whole line's prev ("" in a body) */
    uint64_t seq;                 /* a whole line's seq (0 in a body) */
};

/* One execution read back: its records as JSON lines ('\n' after each), in
 * log order, and its packet (NULL when it has none).  Both malloc'd. */
struct audit_found {
    char *records;
    size_t records_len;
    uint8_t *packet;
    size_t packet_len;
};

struct audit_index;

struct audit_index *audit_index_new(void);
void audit_index_free(struct audit_index *ix);

/* The fields of a record body or a whole line (JSON text); 0, or -1 when it
 * is not a JSON object. */
int audit_index_fields(const char *json, size_t len, struct audit_index_fields *f);

/* Notes a record written at ref (a durable line) when it belongs to an
 * execution: an allowed request, a result or a review, with a tenant and a
 * request id.  The oldest entry goes when the index is full. */
void audit_index_note(struct audit_index *ix, const struct audit_index_fields *f, const struct audit_line_ref *ref);

/* At open: indexes the newest AUDIT_INDEX_SCAN_BYTES of the log files in
 * dirfd (whole files, oldest first), checking each line's prev against the
 * line before it.  0, or -1 with err set (the index is then left empty:
 * nothing is found, nothing wrong is served). */
int audit_index_load(struct audit_index *ix, int dirfd, char *err, size_t errlen);

/* Reads one execution back: 1 found (*out filled), 0 not found (no record
 * of that request id for that tenant in the index), -1 with err set (a line
 * or the packet does not match what was written: never served). */
int audit_index_find(const struct audit_index *ix, int dirfd, const char *tenant, const char *request_id, struct audit_found *out,
                     char *err, size_t errlen);
void audit_found_free(struct audit_found *f);

/* A review body (FORMAT.md) checked before it is written: well formed, and
 * naming the result record of an execution of its tenant by seq and line
 * SHA-256.  0, or -1 with err set and errno EINVAL (malformed), ENOENT (no
 * such result for that tenant) or EMLINK (AUDIT_INDEX_MAX_REVIEWS reached). */
int audit_index_check_review(const struct audit_index *ix, const char *body, size_t len, char *err, size_t errlen);

#endif
