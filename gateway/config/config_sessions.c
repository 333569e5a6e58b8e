/*
 * config_sessions.c - sessions (GET /api/v2/connect) in the configuration:
 * the gateway's own settings, and each tenant's ceilings.
 *
 * Two mappings, both optional, both strict (unknown keys and values out of
 * range stop the load with PATH:LINE, like every other section):
 *
 *   sessions:                  # top level: struct gw_session_config
 *     init_timeout_ms: 5000    # a WebSocket's wait for its init message
 *     max_sessions: 256        # the gateway's sessions at once, all tenants
 *     watch_token_ttl_s: 300   # a watch token's lifetime
 *     max_watchers: 8          # watchers per session; 0 turns watching off
 *
 *   tenants:
 *     - name: exam
 *       sessions:              # the tenant's ceilings: tenant_policy.sessions
 *         {max_concurrent: 10, wall_ms: 900000, idle_ms: 60000, cpu_ms: 30000,
 *          stdin_bytes: 1048576, output_bytes: 1048576}
 *
 * Defaults come from gw_limits.h (set_defaults in config.c, default_policy
 * in config_tenants.c).  A tenant's ranges are policy.h's
 * POLICY_SESSION_MAX_* bounds, the same ones policy_validate() checks, so
 * the parser and the policy engine cannot disagree: every clock and size is
 * at least 1 (an idle clock cannot be turned off).
 */
#include "config_parse.h"
#include "common/gw_limits.h"

#include <stddef.h>

static int sessions_field(struct parse_ctx *pc, const char *key, yaml_node_t *v, void *arg)
{
#define FIELD(field, min, max) CFG_UINT_SPEC(struct gw_session_config, field, (min), (max))
    static const struct cfg_uint_spec fields[] = {
        FIELD(init_timeout_ms, 1, GW_MAX_SESSION_INIT_TIMEOUT_MS),
        FIELD(max_sessions, 1, GW_MAX_SESSIONS),
        FIELD(watch_token_ttl_s, 1, GW_MAX_WATCH_TOKEN_TTL_S),
        FIELD(max_watchers, 0, GW_MAX_WATCHERS),
    };
#undef FIELD
    (void)arg;
    return cfg_uint_table(pc, fields, sizeof(fields) / sizeof(fields[0]), "sessions", key, v, &pc->cfg->sessions);
}

int cfg_parse_sessions(struct parse_ctx *pc, yaml_node_t *v)
{
    return cfg_walk_mapping(pc, v, "sessions", sessions_field, NULL);
}

static int tenant_sessions_field(struct parse_ctx *pc, const char *key, yaml_node_t *v, void *arg)
{
#define FIELD(field, max) CFG_UINT_SPEC(struct policy_session_limits, field, 1, (max))
    static const struct cfg_uint_spec fields[] = {
        FIELD(max_concurrent, POLICY_SESSION_MAX_CONCURRENT),
        FIELD(wall_ms, POLICY_SESSION_MAX_MS),
        FIELD(idle_ms, POLICY_SESSION_MAX_MS),
        FIELD(cpu_ms, POLICY_SESSION_MAX_MS),
        FIELD(stdin_bytes, POLICY_SESSION_MAX_BYTES),
        FIELD(output_bytes, POLICY_SESSION_MAX_BYTES),
    };
#undef FIELD
    return cfg_uint_table(pc, fields, sizeof(fields) / sizeof(fields[0]), "sessions", key, v, arg);
}

int cfg_parse_tenant_sessions(struct parse_ctx *pc, yaml_node_t *v, struct policy_session_limits *s)
{
    return cfg_walk_mapping(pc, v, "tenant sessions", tenant_sessions_field, s);
}
