/*
 * audit_records.h - building the gateway's audit record bodies and packets.
 */
#ifndef GW_AUDIT_RECORDS_H
#define GW_AUDIT_RECORDS_H

#include <stddef.h>

#include <jansson.h>

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
void gw_audit_add_result(json_t *b, const struct moat_exec_result *res);
/* The full request and result (the Piston JSON sent to the client). */
char *gw_audit_packet(const struct gw_audit_who *who, const struct moat_exec_request *q, const char *result_json, size_t *len);
/* A live session's packet: the request, its limits, every event of its
 * transcript in order, and the result.  Call on the session's thread. */
char *gw_audit_session_packet(const struct gw_audit_who *who, const struct moat_exec_request *q, json_t *limits,
                              const struct gw_transcript *t, const char *result_json, size_t *len);
char *gw_audit_dump(json_t *body, size_t *len);
/* A decision record without jansson or an allocation, for the hot deny
 * path: the same fields and order as gw_audit_base + gw_audit_add_decision,
 * written NUL-terminated into buf.  -1 when a field is not plain ASCII or
 * the record does not fit: use those instead. */
#define GW_AUDIT_FAST_MAX 2048
int gw_audit_fast_decision(const struct gw_audit_who *who, const char *type, const char *decision, const char *reason,
                           const char *rule, int status, const char *message, char *buf, size_t size, size_t *len);

#endif
