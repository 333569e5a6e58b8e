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
