/*
 * audit_reason.c - the strings of enum gw_reason, and the mappings from the
 * policy engine's and the limiter's reasons into it.
 */
#include "audit_reason.h"

#include <stddef.h>

static const char *const names[] = {
#define GW_REASON_NAME(name, str, what) [GW_REASON_##name] = str,
    GW_REASONS(GW_REASON_NAME)
#undef GW_REASON_NAME
};

const char *gw_reason_name(enum gw_reason r)
{
    if ((size_t)r >= sizeof(names) / sizeof(names[0]))
        return "unknown";
    return names[r];
}

/* First matching row wins: a status with a reason, then the status alone
 * (GW_REASON_NONE matches any reason). */
static const struct {
    int status;
    enum gw_reason reason;
    const char *code;
} codes[] = {
    {400, GW_REASON_LIMIT, "limit_exceeded"},
    {400, GW_REASON_NONE, "invalid_request"},
    {401, GW_REASON_NONE, "invalid_token"},
    {403, GW_REASON_LANGUAGE, "language_not_allowed"},
    {403, GW_REASON_NONE, "endpoint_not_allowed"},
    {404, GW_REASON_NONE, "not_found"},
    {405, GW_REASON_NONE, "method_not_allowed"},
    {413, GW_REASON_NONE, "body_too_large"},
    {415, GW_REASON_NONE, "unsupported_media_type"},
    {422, GW_REASON_NONE, "content_rejected"},
    {429, GW_REASON_CONCURRENCY, "too_many_in_flight"},
    {429, GW_REASON_QUEUE, "tenant_queue_full"},
    {503, GW_REASON_QUEUE, "queue_full"},
    {429, GW_REASON_QUOTA, "cpu_quota_exhausted"},
    {429, GW_REASON_FILTER, "connection_closing"},
    {429, GW_REASON_NONE, "rate_limited"},
    {500, GW_REASON_NONE, "internal_error"},
    {502, GW_REASON_NONE, "bad_backend_reply"},
    {503, GW_REASON_LIMITER, "limiter_unavailable"},
    {503, GW_REASON_AUDIT, "audit_unavailable"},
    {503, GW_REASON_STORE, "store_unavailable"},
    {503, GW_REASON_NONE, "backend_unavailable"},
    {504, GW_REASON_NONE, "backend_timeout"},
};

const char *gw_error_code(enum gw_reason r, int status)
{
    for (size_t i = 0; i < sizeof(codes) / sizeof(codes[0]); i++)
        if (codes[i].status == status && (codes[i].reason == r || codes[i].reason == GW_REASON_NONE))
            return codes[i].code;
    return status >= 500 ? "internal_error" : "invalid_request";
}

/* The status each is sent with, for the docs' list (the step sets both). */
static const struct {
    int status;
    const char *code;
} named[GW_NCODES] = {
    [GW_CODE_TOKEN_EXPIRED] = {401, "token_expired"},
    [GW_CODE_TOO_MANY_FAILED_REQUESTS] = {429, "too_many_failed_requests"},
    [GW_CODE_TOO_MANY_SESSIONS] = {429, "too_many_sessions"},
    [GW_CODE_SESSIONS_FULL] = {503, "sessions_full"},
    [GW_CODE_SESSIONS_UNAVAILABLE] = {503, "sessions_unavailable"},
    [GW_CODE_BACKEND_BUSY] = {503, "backend_busy"},
    [GW_CODE_ISOLATION_UNAVAILABLE] = {503, "isolation_unavailable"},
    /* a live session's error event (sessions/session.c): the backend refused the init */
    [GW_CODE_SESSION_BAD_REQUEST] = {400, "bad_request"},
    [GW_CODE_SESSION_BACKEND_FAILED] = {502, "backend_failed"},
};

const char *gw_code(enum gw_code c)
{
    return (size_t)c < GW_NCODES && named[c].code != NULL ? named[c].code : "internal_error";
}

enum gw_reason gw_reason_of_policy(enum policy_reason r)
{
    switch (r) {
    case POLICY_OK:
        return GW_REASON_NONE;
    case POLICY_DENY_LANGUAGE:
        return GW_REASON_LANGUAGE;
    case POLICY_DENY_LIMIT:
        return GW_REASON_LIMIT;
    case POLICY_DENY_INPUT:
        return GW_REASON_FILTER;
    case POLICY_DENY_CONTENT:
        return GW_REASON_CONTENT;
    case POLICY_DENY_ENDPOINT:
    case POLICY_DENY_NO_POLICY:
        break;
    }
    return GW_REASON_ENDPOINT; /* no policy, or the endpoint: fail closed as "not allowed" */
}

enum gw_reason gw_reason_of_limiter(enum rl_reason r)
{
    switch (r) {
    case RL_OK:
        return GW_REASON_NONE;
    case RL_RATE:
        return GW_REASON_RATE;
    case RL_CONCURRENCY:
        return GW_REASON_CONCURRENCY;
    case RL_QUOTA:
        return GW_REASON_QUOTA;
    case RL_BACKEND_ERROR:
        break;
    }
    return GW_REASON_LIMITER;
}
