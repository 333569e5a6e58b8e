/*
 * route_table.c - the one table of routes: every path the gateway
 * answers, its method, the endpoint a credential must allow, its flags
 * and its handler.  Adding a route is one row here and a handler (struct
 * gw_handler); routes.c matches requests against the table main.c
 * installs (gw_route_table_install) and knows no handler itself.
 */
#include "route_table.h"
#include "policy.h"

static const struct gw_route table[] = {
    /* path, method, endpoint (authorization; 0 public), flags, handler */
    {"/healthz", "GET", 0, GW_ROUTE_NO_AUDIT | GW_ROUTE_NO_ADMIT, &gw_handler_healthz},
    {"/readyz", "GET", 0, GW_ROUTE_NO_AUDIT | GW_ROUTE_NO_ADMIT, &gw_handler_readyz},
    {"/api/v2/runtimes", "GET", POLICY_EP_RUNTIMES, 0, &gw_handler_runtimes},
    {"/api/v2/execute", "POST", POLICY_EP_EXECUTE, GW_ROUTE_EXECUTION, &gw_handler_execute},
    {"/api/v2/connect", "GET", POLICY_EP_CONNECT, 0, &gw_handler_connect}, /* a live session: WebSocket */
    {"/api/v2/watch", "GET", POLICY_EP_WATCH, 0, &gw_handler_watch},
    /* Judge0 CE's API (judge0_handlers.c) */
    {"/languages", "GET", POLICY_EP_LANGUAGES, GW_ROUTE_X_AUTH_TOKEN, &gw_handler_judge0_languages},
    {"/languages/{id}", "GET", POLICY_EP_LANGUAGES, GW_ROUTE_X_AUTH_TOKEN, &gw_handler_judge0_language},
    {"/statuses", "GET", POLICY_EP_LANGUAGES, GW_ROUTE_X_AUTH_TOKEN, &gw_handler_judge0_statuses},
    {"/about", "GET", POLICY_EP_LANGUAGES, GW_ROUTE_X_AUTH_TOKEN, &gw_handler_judge0_about},
    {"/config_info", "GET", POLICY_EP_LANGUAGES, GW_ROUTE_X_AUTH_TOKEN, &gw_handler_judge0_config_info},
    {"/submissions", "POST", POLICY_EP_SUBMISSIONS, GW_ROUTE_EXECUTION | GW_ROUTE_X_AUTH_TOKEN, &gw_handler_judge0_submit},
    {"/submissions/batch", "GET", POLICY_EP_SUBMISSIONS, GW_ROUTE_X_AUTH_TOKEN, &gw_handler_judge0_batch},
    {"/submissions/batch", "POST", POLICY_EP_SUBMISSIONS, GW_ROUTE_EXECUTION | GW_ROUTE_X_AUTH_TOKEN,
     &gw_handler_judge0_batch_submit},
    {"/submissions/{token}", "GET", POLICY_EP_SUBMISSIONS, GW_ROUTE_X_AUTH_TOKEN, &gw_handler_judge0_submission},
    /* result packets and reviews (handler_executions.c) */
    {"/api/v2/executions/{id}", "GET", POLICY_EP_PACKETS, 0, &gw_handler_execution},
    {"/api/v2/executions/{id}/reviews", "POST", POLICY_EP_REVIEW, 0, &gw_handler_execution_review},
};

void gw_route_table_install(void)
{
    gw_routes_install(table, sizeof(table) / sizeof(table[0]));
}
