/*
 * auth.h - turn an Authorization header into an authenticated key.
 */
#ifndef GW_AUTH_H
#define GW_AUTH_H

#include <stddef.h>

#include "config.h"

/*
 * Check "Bearer <token>" against the key table.  value may be NULL (header
 * missing).  Returns the matching key, or NULL with *why set to a static
 * reason for the log (never containing token bytes).  The token shape and
 * checksum are verified before any lookup; digests are compared in constant
 * time.
 */
const struct gw_key *auth_bearer(const struct gw_config *cfg, const char *value, size_t len, const char **why);

#endif /* GW_AUTH_H */
