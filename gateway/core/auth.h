/*
 * auth.h - step 4 of the request path: who is asking.
 */
#ifndef GW_AUTH_H
#define GW_AUTH_H

#include <stddef.h>

#include "config/config.h"
#include "request.h"

/*
 * The one parser of "Bearer <token>" (RFC 6750 2.1, RFC 9110 11.4): the
 * scheme name in any case, one or more spaces, then the token, which must
 * not be empty; trailing white space is not part of the field value.
 * 0 with *token and *toklen set, or -1.
 */
int auth_bearer_token(const char *value, size_t len, const char **token, size_t *toklen);

/*
 * Check an Authorization header value against the key table.  value may be
 * NULL (header missing).  Returns the matching key, or NULL with *why set
 * to a static reason for the log (never containing token bytes).  The token
 * shape and checksum are verified before any lookup; digests are compared
 * in constant time.
 */
const struct gw_key *auth_bearer(const struct gw_config *cfg, const char *value, size_t len, const char **why);

/* The same for a token alone (no scheme: Judge0's X-Auth-Token). */
const struct gw_key *auth_key(const struct gw_config *cfg, const char *token, size_t len, const char **why);

/*
 * Step 4: authenticate r from its Authorization header (or, on a route
 * with GW_ROUTE_X_AUTH_TOKEN, Judge0's X-Auth-Token), an API key or a JWT
 * from a configured issuer.  GW_NEXT with r->tenant, r->tenant_cfg,
 * r->scopes and r->key_id set, or GW_DENY (401 with WWW-Authenticate).
 */
enum gw_flow gw_authenticate(struct gw_request *r);

/* Refuse r as unauthenticated: 401 with a WWW-Authenticate challenge; why is
 * the log's note, message the client's.  For the credential steps of
 * handlers with their own (the session watcher's, sessions/handler_session.c). */
enum gw_flow gw_unauthorized(struct gw_request *r, const char *why, const char *challenge, const char *message);

#endif /* GW_AUTH_H */
