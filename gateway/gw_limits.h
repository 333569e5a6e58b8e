/*
 * gw_limits.h - every numeric limit and default of moat-gateway in one place.
 */
#ifndef GW_LIMITS_H
#define GW_LIMITS_H

#define GW_DEFAULT_ADDRESS            "127.0.0.1"
#define GW_DEFAULT_PORT               8443
#define GW_DEFAULT_BACKEND_SOCKET     "/run/moat/backend.sock"
#define GW_DEFAULT_BACKEND_TIMEOUT_MS 60000
#define GW_MAX_BACKEND_TIMEOUT_MS     3600000
#define GW_DEFAULT_USER               "moat"
#define GW_DEFAULT_MAX_ENTITY         1048576
#define GW_MAX_ENTITY                 (64u * 1024u * 1024u)
#define GW_ENTITY_HARD_CAP_FACTOR     2 /* h2o's own cap, times max_request_entity_size */

#define GW_MAX_WORKERS     256
#define GW_MAX_TENANTS     4096
#define GW_MAX_KEYS        16384
#define GW_MAX_TENANT_NAME 64
#define GW_MAX_PATH_LEN    4096 /* file paths in the configuration */

#define GW_REQUEST_ID_LEN 16    /* hex characters */
#define GW_DRAIN_MS       10000 /* how long SIGTERM waits for requests in flight */
#define GW_LOOP_WAKE_MS   250   /* loops poll the stop flag this often */

#define GW_LOG_LINE_MAX 2048
#define GW_LOG_PATH_MAX 256 /* request path bytes written to the log */
#define GW_ERR_MSG_MAX  256 /* 400 messages built by the JSON parser */

#endif /* GW_LIMITS_H */
