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

/* Connections: timeouts (ms), limits counted at accept, HTTP/2. */
#define GW_DEFAULT_HEADER_TIMEOUT_MS  10000
#define GW_DEFAULT_BODY_TIMEOUT_MS    30000
#define GW_DEFAULT_IDLE_TIMEOUT_MS    60000
#define GW_DEFAULT_SEND_TIMEOUT_MS    30000 /* pending output that makes no progress */
#define GW_MAX_TIMEOUT_MS             3600000
#define GW_DEFAULT_MAX_CONNECTIONS    4096
#define GW_MAX_CONNECTIONS            1000000
#define GW_DEFAULT_MAX_CONN_PER_ADDR  64
#define GW_DEFAULT_H2_MAX_STREAMS     100
#define GW_MAX_H2_MAX_STREAMS         100 /* libh2o 2.2.5 advertises 100 and refuses streams beyond it */
#define GW_DEFAULT_H2_RESET_BUDGET    100
#define GW_MAX_H2_RESET_BUDGET        1000000
#define GW_DEFAULT_H2_MAX_HEADER_LIST 65536 /* a header block decoded: names + values + 32 per field */
#define GW_MIN_H2_MAX_HEADER_LIST     1024
#define GW_MAX_H2_MAX_HEADER_LIST     1048576
#define GW_DEFAULT_H2_MAX_HEADERS     100 /* header fields per block, as h2o's HTTP/1 parser allows */
#define GW_MAX_H2_MAX_HEADERS         1000
#define GW_WATCHDOG_MS                250  /* each worker checks its connections' clocks this often */
#define GW_ADDR_BUCKETS               4096 /* per-address connection table */
#define GW_CONDEMNED_GRACE_MS         2000 /* after GOAWAY, before the descriptor is shut */

#define GW_MAX_WORKERS     256
#define GW_MAX_TENANTS     4096
#define GW_MAX_KEYS        16384
#define GW_MAX_TENANT_NAME 64
#define GW_MAX_PATH_LEN    4096 /* file paths in the configuration */

#define GW_REQUEST_ID_LEN 16 /* hex characters */
/* live sessions (session.c, session_ws.c) */
#define GW_SESSION_TICK_MS   100   /* how often init deadlines and close graces are checked */
#define GW_WATCH_POLL_MS     20    /* how often a watcher reads its session's transcript */
#define GW_WS_CLOSE_GRACE_MS 2000  /* a close frame's answer waited for, then the socket closes */
#define GW_DRAIN_MS          10000 /* how long SIGTERM waits for requests in flight */
#define GW_LOOP_WAKE_MS      250   /* loops poll the stop flag this often */

/* Tenant policy defaults (each is also the tenant's ceiling unless the
 * configuration says otherwise). */
#define GW_DEFAULT_RUN_TIMEOUT_MS     3000
#define GW_DEFAULT_COMPILE_TIMEOUT_MS 10000
#define GW_DEFAULT_RUN_MEMORY         (256LL * 1024 * 1024)
#define GW_DEFAULT_COMPILE_MEMORY     (1024LL * 1024 * 1024)
#define GW_DEFAULT_MAX_FILES          32
#define GW_DEFAULT_MAX_FILE_NAME      255
#define GW_DEFAULT_MAX_ARGS           64
#define GW_DEFAULT_MAX_ARG_LEN        4096
#define GW_DEFAULT_MAX_CODE_BYTES     (1024 * 1024)
#define GW_DEFAULT_MAX_STDIN_BYTES    (1024 * 1024)
#define GW_DEFAULT_RATE_PER_SECOND    10.0
#define GW_DEFAULT_BURST              20
#define GW_DEFAULT_MAX_IN_FLIGHT      4
#define GW_DEFAULT_CPU_MS_PER_MINUTE  60000
#define GW_MAX_RATE_PER_SECOND        100000.0
#define GW_MAX_LANG_RULES             256
#define GW_MAX_CONTENT_RULES          64

/* What a tenant that lists no endpoints may call: batch execution and the
 * runtime list.  Sessions (connect, watch) hold boxes for minutes, so a
 * tenant gets them only when its configuration names them. */
#define GW_DEFAULT_TENANT_ENDPOINTS (POLICY_EP_EXECUTE | POLICY_EP_RUNTIMES)

/* Judge0's API (submissions, languages) is opt-in likewise.  Finished
 * submissions are kept (judge0_store.c: in memory, or in the submissions
 * section's store_dir) for ttl_s, and at most this many (per tenant,
 * overall) and bytes of them; the submissions section may change each
 * within its GW_MAX_JUDGE0_* bound. */
#define GW_DEFAULT_JUDGE0_TTL_S          3600u
#define GW_DEFAULT_JUDGE0_MAX_PER_TENANT 1000u
#define GW_DEFAULT_JUDGE0_MAX_RECORDS    20000u
#define GW_DEFAULT_JUDGE0_MAX_BYTES      (256u * 1024u * 1024u)
#define GW_MAX_JUDGE0_TTL_S              (30u * 86400u)
#define GW_MAX_JUDGE0_STORE_RECORDS      10000000u
#define GW_MAX_JUDGE0_STORE_BYTES        (64ull << 30)
/* The directory store: a record file is at most this large (the gateway
 * reads one whole), and each put or get sweeps at most this many entries
 * for expired records. */
#define GW_JUDGE0_RECORD_MAX_BYTES (64u * 1024u * 1024u)
#define GW_JUDGE0_SWEEP_PER_TICK   32
/* The Redis store: puts Redis did not take, kept to be written again after its outage */
#define GW_JUDGE0_REDIS_RETRY_MAX      1024u
#define GW_JUDGE0_STORE_RETRY_AFTER_MS 1000u /* Retry-After of a 503 store_unavailable */
#define GW_JUDGE0_REDIS_RETRY_MS       500u  /* how often puts Redis did not take are tried again */
/* The queue of submissions waiting for a run (wait=false and batches;
 * judge0_queue.c).  max_running: runs at once against the backend, all
 * tenants; with queue: memory the gateway cannot know the backend's slot
 * count (its -j, default 2 x CPUs), so the default is 4 and a deployment
 * with more slots raises it (queue: redis uses the backend's own count).  queue_max / queue_max_per_tenant: submissions
 * waiting, all tenants / one tenant (each holds its request in memory:
 * at most max_request_entity_size, usually far less).  Past a cap the
 * POST is refused with this Retry-After. */
#define GW_DEFAULT_JUDGE0_MAX_RUNNING      4u
#define GW_MAX_JUDGE0_MAX_RUNNING          1024u
#define GW_DEFAULT_JUDGE0_QUEUE_MAX        2000u
#define GW_DEFAULT_JUDGE0_QUEUE_PER_TENANT 500u
#define GW_MAX_JUDGE0_QUEUE                1000000u
#define GW_JUDGE0_QUEUE_RETRY_AFTER_MS     2000u
/* queue: redis (store/queue_redis.c): bytes of entries one tenant may have
 * waiting, how many times an entry runs before it ends as an Internal
 * Error, and the dead letter list's length. */
#define GW_DEFAULT_QUEUE_MAX_BYTES_PER_TENANT (256ull << 20)
#define GW_MAX_QUEUE_MAX_BYTES_PER_TENANT     (64ull << 30)
#define GW_DEFAULT_QUEUE_MAX_ATTEMPTS         3u
#define GW_MAX_QUEUE_MAX_ATTEMPTS             100u
#define GW_QUEUE_DEAD_MAX                     10000u
#define GW_QUEUE_SWEEP_MS                     1000u /* a dispatcher looks for a dead gateway's entries this often */
#define GW_QUEUE_POLL_MS                      500u  /* and claims without a wake-up this often (one may be lost) */
#define GW_QUEUE_STATS_MS                     2000u /* and counts the whole queue this often (moatctl queue, metrics) */
/* A submission's additional_files (a zip) unpacks to at most this much
 * (the tenant's max_code_bytes then applies to all its files together). */
#define GW_JUDGE0_ZIP_MAX_BYTES (16u * 1024u * 1024u)
/* Entries of a batch compiled once (judge0_handlers.c): each case's wall
 * limit plus this much (its box's start and end) must fit in the cases'
 * wall budget, or a new group starts. */
#define GW_JUDGE0_GROUP_CASE_MARGIN_MS 1000u
/* A submission's number_of_runs: at most this many runs of one compile
 * (test cases of the exec request, each in a fresh box; at most MOAT_MAX_TESTS). */
#define GW_JUDGE0_MAX_RUNS 20

/* A request's metadata (metadata.c): the whole object as compact JSON, a
 * purpose, a dependency or a label's value, a label's name, and how many
 * dependencies and labels. */
#define GW_METADATA_MAX_BYTES        (64 * 1024)
#define GW_METADATA_SHORT_MAX        1024
#define GW_METADATA_LABEL_NAME_MAX   64
#define GW_METADATA_DEPENDENCIES_MAX 256
#define GW_METADATA_LABELS_MAX       64

/* ---- Judge0 callbacks (callback_url; callback_policy.c, callback_sender.c)
 * A callback URL is at most GW_CALLBACK_URL_MAX bytes; a tenant lists at
 * most GW_MAX_CALLBACK_PREFIXES allowed prefixes; its signing secret is
 * GW_CALLBACK_SECRET_MIN..MAX bytes.  One message from a worker to the
 * sender (tenant, token, url, body) is at most GW_CALLBACK_MESSAGE_MAX
 * bytes (a larger result is not called back: logged and counted), and the
 * socket between them holds GW_CALLBACK_SOCKET_BYTES of messages before a
 * worker's send fails (dropped, never waited for).  The sender's own
 * defaults and bounds follow (the callbacks section may change them). */
#define GW_CALLBACK_URL_MAX                    2048
#define GW_MAX_CALLBACK_PREFIXES               32
#define GW_CALLBACK_SECRET_MIN                 16
#define GW_CALLBACK_SECRET_MAX                 1024
#define GW_CALLBACK_MESSAGE_MAX                (4u * 1024u * 1024u)
#define GW_CALLBACK_SOCKET_BYTES               (16 * 1024 * 1024)
#define GW_CALLBACK_RESPONSE_MAX               65536 /* bytes of a receiver's answer read, the rest refused */
#define GW_DEFAULT_CALLBACK_CONNECT_TIMEOUT_MS 5000u
#define GW_DEFAULT_CALLBACK_TIMEOUT_MS         10000u
#define GW_MAX_CALLBACK_TIMEOUT_MS             300000u
#define GW_DEFAULT_CALLBACK_MAX_TRIES          3u /* Judge0's callbacks_max_tries */
#define GW_MAX_CALLBACK_TRIES                  10u
#define GW_DEFAULT_CALLBACK_RETRY_MS           1000u /* first retry; each next one waits twice as long */
#define GW_MAX_CALLBACK_RETRY_MS               600000u
#define GW_DEFAULT_CALLBACK_MAX_QUEUE          1000u
#define GW_MAX_CALLBACK_QUEUE                  100000u
#define GW_DEFAULT_CALLBACK_MAX_IN_FLIGHT      16u
#define GW_MAX_CALLBACK_IN_FLIGHT              1024u
#define GW_CALLBACK_DRAIN_MS                   5000 /* at the gateway's exit, callbacks in flight get this long */
#define GW_CALLBACK_RESTART_BACKOFF_MS         500
#ifndef GW_DEFAULT_CALLBACK_SENDER
#define GW_DEFAULT_CALLBACK_SENDER "/usr/local/libexec/moat/moat-callback-sender"
#endif

/* Sessions (connect): each tenant's ceilings (sessions: in a tenant; bounds
 * POLICY_SESSION_MAX_* in policy.h), and the gateway's own (the top-level
 * sessions: section). */
#define GW_DEFAULT_SESSION_MAX_CONCURRENT  10
#define GW_DEFAULT_SESSION_WALL_MS         900000 /* 15 minutes */
#define GW_DEFAULT_SESSION_IDLE_MS         60000
#define GW_DEFAULT_SESSION_CPU_MS          30000
#define GW_DEFAULT_SESSION_STDIN_BYTES     (1024 * 1024)
#define GW_DEFAULT_SESSION_OUTPUT_BYTES    (1024 * 1024)
#define GW_DEFAULT_SESSION_INIT_TIMEOUT_MS 5000 /* a WebSocket's wait for its init (Piston: 1000) */
#define GW_MAX_SESSION_INIT_TIMEOUT_MS     60000
#define GW_DEFAULT_MAX_SESSIONS            256 /* the gateway's sessions at once, all tenants */
#define GW_MAX_SESSIONS                    65536
#define GW_DEFAULT_WATCH_TOKEN_TTL_S       300
#define GW_MAX_WATCH_TOKEN_TTL_S           86400
#define GW_DEFAULT_MAX_WATCHERS            8 /* per session; 0 turns watching off */
#define GW_MAX_WATCHERS                    256

/* Shared limits in Redis (the limiter section, store: redis; ratelimit_redis.c) */
#define GW_REDIS_DEFAULT_PORT               6379
#define GW_REDIS_DEFAULT_PREFIX             "moat:"
#define GW_REDIS_MAX_PREFIX                 64 /* bytes, printable ASCII without spaces */
#define GW_REDIS_MAX_DB                     1023
#define GW_REDIS_MAX_PASSWORD               512 /* bytes of password_file */
#define GW_REDIS_DEFAULT_TIMEOUT_MS         200 /* a decision's answer */
#define GW_REDIS_DEFAULT_CONNECT_TIMEOUT_MS 1000
#define GW_REDIS_MAX_TIMEOUT_MS             10000
#define GW_REDIS_DEFAULT_LEASE_MS           30000 /* a dead gateway's in-flight slots come back after this */
#define GW_REDIS_MIN_LEASE_MS               500
#define GW_REDIS_MAX_LEASE_MS               3600000
#define GW_REDIS_DEFAULT_GATEWAYS           1 /* on_unavailable: local divides each limit by this */
#define GW_REDIS_MAX_GATEWAYS               1024
#define GW_REDIS_MAX_SENTINELS              16   /* limiter.redis.sentinels */
#define GW_REDIS_MAX_MASTER_NAME            64   /* limiter.redis.master */
#define GW_REDIS_TICK_MS                    100  /* reconnects, connect deadlines and heartbeats are checked this often */
#define GW_REDIS_BACKOFF_MIN_MS             100  /* the first reconnect after a loss */
#define GW_REDIS_BACKOFF_MAX_MS             2000 /* reconnects, doubling up to this */
/* Beside the heartbeat keys (<prefix>g:<name>, names are hex): the time of
 * any process's last beat, and the grace after Redis was away (redis_beat.c). */
#define GW_REDIS_BEAT_LAST  "~last"
#define GW_REDIS_BEAT_GRACE "~grace"

#define GW_DEFAULT_AUDIT_USER "moat-audit"

/* The control socket (control.c) and the admin store beside the
 * configuration (config_store.c, admin_store.c). */
#define GW_DEFAULT_CONTROL_SOCKET    "/run/moat/control.sock" /* moatctl's default; MOAT_CONTROL overrides */
#define GW_DEFAULT_CONTROL_MODE      0660
#define GW_DEFAULT_LAST_USED_EVERY_S 60 /* control.last_used_every_s */
#define GW_LAST_USED_EVERY_MAX_S     3600
#define GW_STORE_FILE                "moat-store.json" /* beside the configuration unless control.store says */
#define GW_STORE_VERSION             1
#define GW_STORE_MAX_BYTES           (16u * 1024u * 1024u)
#define GW_STORE_MAX_NOTE            256
#define GW_CONTROL_MAX_USERS         32    /* control.users */
#define GW_CONTROL_MAX_REQUEST       65536 /* one request line from moatctl */
#define GW_CONTROL_MAX_REPLY         (32u * 1024u * 1024u)
#define GW_CONTROL_MAX_CLIENTS       16                    /* connections read at once; more wait in the backlog */
#define GW_CONTROL_CLIENT_MS         5000                  /* a client's whole exchange: its request in, its reply out */
#define GW_CONTROL_AUDIT_MS          5000                  /* the writer's acknowledgement of an admin record */
#define GW_CONTROL_RELOAD_MS         30000                 /* the gateway's acknowledgement of a reload or a status */
#define GW_CONTROL_MSG_MAX           16384                 /* one message on the supervisor's ctl socketpair */
#define GW_CONTROL_MAX_DURATION_S    (10ull * 366 * 86400) /* --expires, --grace */
#define GW_DEFAULT_ROTATE_GRACE_S    86400                 /* key rotate without --grace */
#define GW_KEYUSE_SLOTS              (2 * GW_MAX_KEYS)     /* last-used table (keyuse.c) */
#define GW_WORKER_ALIVE_MS           2000                  /* a worker whose watchdog ran this recently is alive */
/* The admin store in Redis (control.store_backend: redis; admin_store_redis.c) */
#define GW_ADMIN_REDIS_LOCK_MS      10000 /* the store's lock in Redis: its holder's change (audit ack included) fits */
#define GW_ADMIN_REDIS_LOCK_WAIT_MS 5000  /* a change waits this long for another gateway's to finish */
#define GW_ADMIN_REDIS_LOCK_POLL_MS 10    /* ... asking again this often */
#define GW_ADMIN_REDIS_RESYNC_MS    5000  /* each supervisor compares versions this often (a missed message heals) */
#ifndef GW_DEFAULT_AUDIT_WRITER
#define GW_DEFAULT_AUDIT_WRITER "/usr/local/libexec/moat/moat-audit-writer"
#endif

/* unauthenticated and failed requests per client address (IPv6 /64) */
#define GW_DEFAULT_UNAUTH_PER_SECOND 20.0
#define GW_DEFAULT_UNAUTH_BURST      200
#define GW_DEFAULT_UNAUTH_SUMMARY_MS 10000
#define GW_RETRY_AFTER_503_S         "1" /* seconds, on a 503 that names no better time */
#define GW_LOG_PATH_MAX              256 /* request path bytes written to the log */
#define GW_ERR_MSG_MAX               256 /* 400 messages built by the JSON parser */

/* a /metrics scrape waits this long for the backend's load (metrics.backend_timeout_ms), then answers without it */
#define GW_DEFAULT_METRICS_BACKEND_TIMEOUT_MS 1000
#define GW_MAX_METRICS_BACKEND_TIMEOUT_MS     60000

#endif /* GW_LIMITS_H */
