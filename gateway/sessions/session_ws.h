/*
 * session_ws.h - Piston's interactive WebSocket protocol (GET
 * /api/v2/connect) and moat's read-only watchers (GET /api/v2/watch), on
 * h2o's WebSocket support (libwslay).
 */
#ifndef GW_SESSION_WS_H
#define GW_SESSION_WS_H

#include "core/pipeline.h"
#include "session.h"

/* Step 7 of both routes: is this a WebSocket handshake h2o can take?  Sets
 * *key (h2o's pointer into the request) or refuses the request. */
enum gw_flow gw_ws_handshake(struct gw_request *r, const char **key);

/* Step 9 of GET /api/v2/connect: the upgrade, and a session behind it.
 * The request holds a count in the session registry, which the session
 * takes over.  GW_TAKEN, or a refusal. */
enum gw_flow gw_ws_connect(struct gw_request *r, const char *key);

/* Step 9 of GET /api/v2/watch: the upgrade of a watcher holding grant
 * (taken).  GW_TAKEN, or a refusal. */
enum gw_flow gw_ws_watch(struct gw_request *r, const char *key, struct gw_watch_grant *grant);

#endif /* GW_SESSION_WS_H */
