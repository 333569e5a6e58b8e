/*
 * audit_reason.h - the one vocabulary for why a request was refused.
 *
 * Every denial and failure the gateway records carries one of these; the
 * strings are what audit records, log lines and `moat-audit stats` show
 * (audit/FORMAT.md lists them).  Adding a reason is adding a row to
 * GW_REASONS, nowhere else.
 */
#ifndef GW_AUDIT_REASON_H
#define GW_AUDIT_REASON_H

#include "policy.h"
#include "limits/ratelimit.h"

/* X(enum suffix, audit string, what it means) */
#define GW_REASONS(X)                                                                                                              \
    X(NONE, NULL, "allowed: no reason")                                                                                            \
    X(AUTH, "auth", "missing or invalid credentials")                                                                              \
    X(ENDPOINT, "endpoint", "unknown route, wrong method, or endpoint not allowed")                                                \
    X(LANGUAGE, "language", "language or version not allowed")                                                                     \
    X(LIMIT, "limit", "a limit above the ceiling")                                                                                 \
    X(FILTER, "filter", "bad input or framing")                                                                                    \
    X(CONTENT, "content", "a content rule matched")                                                                                \
    X(RATE, "rate", "the rate limit")                                                                                              \
    X(CONCURRENCY, "concurrency", "too many executions in flight")                                                                 \
    X(QUOTA, "quota", "the CPU budget is used up")                                                                                 \
    X(LIMITER, "limiter", "the limiter could not decide (fail closed)")                                                            \
    X(BACKEND, "backend", "the backend refused or failed")                                                                         \
    X(QUEUE, "queue", "the submissions queue is full (all tenants: 503, the tenant's share: 429)")                                 \
    X(AUDIT, "audit", "the audit trail could not record the request (fail closed)")                                                \
    X(STORE, "store", "the shared results store (Redis) could not be reached (fail closed)")

enum gw_reason {
#define GW_REASON_ENUM(name, str, what) GW_REASON_##name,
    GW_REASONS(GW_REASON_ENUM)
#undef GW_REASON_ENUM
};

/* The audit string of a reason; NULL for GW_REASON_NONE. */
const char *gw_reason_name(enum gw_reason r);

/*
 * The stable, machine-readable `code` of an error body for a refusal with
 * this reason and HTTP status ("rate_limited", "invalid_token", ...): the
 * moat-gateway(8) lists them; clients and agents act on them.  Never NULL.
 */
const char *gw_error_code(enum gw_reason r, int status);

/* The codes a step names itself, where status and reason alone would say
 * less (an expired key is a 401 like any bad credential): one row each in
 * audit_reason.c's named[], beside the table gw_error_code reads.  Every
 * `code` an answer carries is in one of the two (test_man_pages checks
 * both against moat-gateway(8)'s list). */
enum gw_code {
    GW_CODE_TOKEN_EXPIRED,
    GW_CODE_TOO_MANY_FAILED_REQUESTS,
    GW_CODE_TOO_MANY_SESSIONS,
    GW_CODE_SESSIONS_FULL,
    GW_CODE_SESSIONS_UNAVAILABLE,
    GW_CODE_BACKEND_BUSY,
    GW_CODE_ISOLATION_UNAVAILABLE,
    GW_CODE_SESSION_BAD_REQUEST,
    GW_CODE_SESSION_BACKEND_FAILED,
    GW_NCODES
};
const char *gw_code(enum gw_code c);

/* The reason a policy verdict gives. */
enum gw_reason gw_reason_of_policy(enum policy_reason r);

/* The reason a limiter refusal gives. */
enum gw_reason gw_reason_of_limiter(enum rl_reason r);

#endif /* GW_AUDIT_REASON_H */
