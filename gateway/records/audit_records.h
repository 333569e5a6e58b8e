/*
 * audit_records.h - building the gateway's audit record bodies and packets.
 */
#ifndef GW_AUDIT_RECORDS_H
#define GW_AUDIT_RECORDS_H

#include <stddef.h>

#include <jansson.h>

#include "auth/apikey.h"
#include "moat_proto.h"
#include "transcript.h"

/* Who asked, for every record. */
struct gw_audit_who {
    const char *request_id;
    const char *tenant; /* NULL before authentication */
    const char *key_id; /* "" before authentication */
    const char *client; /* peer address */
    const char *method;
    size_t method_len;
    const char *path;
    size_t path_len;
};

json_t *gw_audit_base(const struct gw_audit_who *who, const char *type);
void gw_audit_add_decision(json_t *b, const char *decision, const char *reason, const char *rule, int status, const char *message);
/* canonical: the encoded request frame the backend received */
void gw_audit_add_request(json_t *b, const struct moat_exec_request *q, const void *canonical, size_t canonical_len);
/* q: the request as sent (its limits applied are recorded too), or NULL.
 * Each stage's stdout_bytes and stdout_sha256 (stderr's too) are of the
 * output res holds. */
void gw_audit_add_result(json_t *b, const struct moat_exec_request *q, const struct moat_exec_result *res);

/* A stage's output as a result record states it: each stream's byte count
 * and the SHA-256 (hex) of its bytes. */
struct gw_audit_output {
    uint64_t stdout_bytes, stderr_bytes;
    char stdout_sha256[APIKEY_DIGEST_HEX + 1];
    char stderr_sha256[APIKEY_DIGEST_HEX + 1];
};
/* A session's output, which its result does not hold: out[0] the compile
 * stage's, out[1] the run's, from the chunks of t (each hashed where it
 * lies, none copied).  Call on the session's thread (no lock). */
void gw_audit_transcript_output(const struct gw_transcript *t, struct gw_audit_output out[2]);
/* gw_audit_add_result for a session: res's statuses, out's output. */
void gw_audit_add_session_result(json_t *b, const struct moat_exec_request *q, const struct moat_exec_result *res,
                                 const struct gw_audit_output out[2]);
/* The limits applied, after the policy's defaults: {run_timeout_ms, compile_timeout_ms, run_memory_bytes,
 * compile_memory_bytes, run_cpu_ms, compile_cpu_ms, run_stack_kib, run_processes, run_file_size_kib}, -1
 * for "the backend's own" (a CPU limit or rlimit the request and the tenant left to the language). */
json_t *gw_audit_limits(const struct moat_exec_request *q);
/* The full request, the request's metadata (metadata.c; NULL: none) and
 * the result (the Piston JSON sent to the client). */
char *gw_audit_packet(const struct gw_audit_who *who, const struct moat_exec_request *q, const json_t *metadata,
                      const char *result_json, size_t *len);
/*
 * A live session's packet: the request, its limits, every event of its
 * transcript in order, and the result.  It is not made here but planned
 * (the members before the transcript, and the whole length), then written
 * by gw_audit_session_packet_write straight into the audit client's queue
 * (as a struct gw_audit_filler's fill, with sp as its arg), so the output
 * is not copied whole on its way.  Call on the session's thread; t must
 * not change until the packet is written.  0, or -1 when memory ran out.
 */
struct gw_session_packet {
    char *head; /* the packet's JSON without the transcript */
    size_t head_len;
    const struct gw_transcript *t;
    size_t len; /* the whole packet */
};
int gw_audit_session_packet(struct gw_session_packet *sp, const struct gw_audit_who *who, const struct moat_exec_request *q,
                            const json_t *metadata, json_t *limits, const struct gw_transcript *t, const char *result_json);
/* Writes the packet's len bytes to dst: 0, or -1 (len is not sp->len, or
 * memory ran out). */
int gw_audit_session_packet_write(void *sp, uint8_t *dst, size_t len);
void gw_audit_session_packet_free(struct gw_session_packet *sp);
char *gw_audit_dump(json_t *body, size_t *len);

/* ---- reading an execution back, and reviews (audit/FORMAT.md "Reviews") ---- */

#define GW_AUDIT_REVIEW_MAX_NOTE 4096 /* bytes of a review's note; the writer refuses more */

/* The result record an execution's records (gw_audit_fetch's) hold, the
 * last one: its seq and the SHA-256 (hex) of its line, which a review names.
 * 0, or -1 when there is none (the execution has not ended). */
int gw_audit_result_of(const char *records, size_t len, uint64_t *seq, char sha256_hex[65]);

/* A review record body: of the execution request_id (of reviewer's tenant),
 * by reviewer (its key id and client; its request id goes in as
 * review_request_id), naming the result record result_seq whose line has
 * the SHA-256 result_sha256 (gw_audit_result_of).  verdict is approved,
 * rejected or needs_changes; note UTF-8 without NUL, at most
 * GW_AUDIT_REVIEW_MAX_NOTE bytes.  NULL with *why set: the client's 400
 * message, or "out of memory". */
json_t *gw_audit_review(const struct gw_audit_who *reviewer, const char *request_id, const char *verdict, const char *note,
                        size_t note_len, uint64_t result_seq, const char *result_sha256, const char **why);

/* An execution as its tenant reads it back (GET /api/v2/executions/{id}):
 * {"request_id", "packet": the packet's JSON or null, "records": [the
 * records], "reviews": [{"verdict","note","key_id","time","result_seq"},
 * oldest first]}, from gw_audit_fetch's answer.  NULL when a record or the
 * packet is not JSON (never expected: the writer checked them). */
json_t *gw_audit_execution(const char *request_id, const char *records, size_t len, const uint8_t *packet, size_t packet_len);
/* A decision record without jansson or an allocation, for the hot deny
 * path: the same fields and order as gw_audit_base + gw_audit_add_decision,
 * written NUL-terminated into buf.  -1 when a field is not plain ASCII or
 * the record does not fit: use those instead. */
#define GW_AUDIT_FAST_MAX 2048
int gw_audit_fast_decision(const struct gw_audit_who *who, const char *type, const char *decision, const char *reason,
                           const char *rule, int status, const char *message, char *buf, size_t size, size_t *len);

#endif
