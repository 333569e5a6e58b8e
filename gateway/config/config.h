/*
 * config.h - moat-gateway's YAML configuration (see gateway.conf.example).
 *
 * Parsed once in the main thread before any worker starts; read-only after.
 */
#ifndef GW_CONFIG_H
#define GW_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#include <time.h>

#include "auth/apikey.h"
#include "net/callback_policy.h"
#include "config_index.h"
#include "auth/jwt_auth.h"
#include "config_audit.h"
#include "policy.h"
#include "net/proxies.h"

/* A tenant's Judge0 callbacks (config_callbacks.c): off when nallow is 0. */
struct gw_tenant_callbacks {
    struct cb_url *allow; /* the allowed URL prefixes, parsed */
    size_t nallow;
    int allow_private; /* loopback, private, link-local, CGNAT addresses allowed */
    uint8_t *secret;   /* the signing secret (secret_file's bytes, a final newline dropped) */
    size_t secret_len;
};

struct gw_tenant {
    char *name;
    struct tenant_policy policy; /* policy.tenant points at name */
    struct gw_tenant_callbacks callbacks;
};

/* The tenant's callback rules for cb_check_url(). */
static inline struct cb_tenant_rules gw_tenant_callback_rules(const struct gw_tenant *t)
{
    struct cb_tenant_rules r = {t->callbacks.allow, t->callbacks.nallow, t->callbacks.allow_private};
    return r;
}

/* The top-level callbacks section: the callback sender's settings
 * (callback_sender.c); enabled when the section is present. */
struct gw_callback_config {
    int enabled;
    char *sender;  /* path of moat-callback-sender */
    char *user;    /* the sender's user; NULL: the gateway's */
    char *ca_file; /* CAs that receivers' certificates must chain to; NULL: the system's */
    uint64_t connect_timeout_ms, timeout_ms, retry_ms;
    uint64_t max_tries, max_queue, max_in_flight;
};

struct gw_key {
    char id[APIKEY_ID_LEN + 1];
    uint8_t sha256[APIKEY_DIGEST_LEN];
    size_t tenant;   /* index into gw_config.tenants */
    time_t expires;  /* 0 = never */
    unsigned scopes; /* POLICY_EP_* this key may call (within the tenant's endpoints) */
};

/* The top-level sessions section: the gateway's own session settings (each
 * tenant's ceilings are tenant_policy.sessions). */
struct gw_session_config {
    uint64_t init_timeout_ms;   /* how long a WebSocket may wait before its init */
    unsigned max_sessions;      /* the gateway's sessions at once, all tenants together */
    unsigned watch_token_ttl_s; /* a watch token's lifetime */
    unsigned max_watchers;      /* watchers per session; 0: watching is off */
};

/* The top-level submissions section: where Judge0 results are kept
 * (judge0_store.h: in memory, lost on restart; a directory; or the
 * limiter's Redis, shared by several gateways), and the queue of those
 * waiting for a run. */
enum gw_submissions_store { GW_SUBMISSIONS_MEMORY, GW_SUBMISSIONS_DIR, GW_SUBMISSIONS_REDIS };

struct gw_submissions_config {
    enum gw_submissions_store store; /* store: (store_dir alone means dir) */
    char *store_dir;                 /* a directory of one file per record, or NULL */
    uint64_t ttl_s;                  /* a record's life */
    uint64_t max_per_tenant;         /* records per tenant */
    uint64_t max_records;            /* records, all tenants together */
    uint64_t max_bytes;              /* bytes of records, all tenants together */
    /* the queue of submissions waiting for a run (judge0_queue.h) */
    uint64_t max_running;          /* runs at once, all tenants */
    uint64_t queue_max;            /* submissions waiting, all tenants */
    uint64_t queue_max_per_tenant; /* submissions waiting, one tenant */
    /* queue: redis - the waiting submissions live in Redis Streams (store/queue_redis.c),
     * claimed by every gateway for its own backend while it has a free slot */
    int queue_redis;
    uint64_t queue_max_bytes_per_tenant; /* bytes of entries waiting, one tenant */
    uint64_t max_attempts;               /* runs of one submission (a dead gateway's taken over) */
    int replicated;                      /* durability: replicated - a 201 once a replica has the entry (WAIT) */
};

/* The control section (config_control.c): the supervisor's control socket
 * for moatctl and the admin store.  socket NULL: no control section, no
 * store (only the configuration file's tenants and keys). */
struct gw_control_config {
    char *socket;  /* absolute path of the Unix socket */
    unsigned mode; /* its permission bits */
    char *group;   /* its group, or NULL (root's) */
    char **users;  /* user names allowed besides root */
    size_t nusers;
    char *store;                /* the admin store's file (default: GW_STORE_FILE beside the configuration); with
                                 * store_backend: redis, this gateway's copy of the store kept in Redis */
    int redis_store;            /* store_backend: redis (the connection: the limiter's redis section) */
    unsigned last_used_every_s; /* how often the supervisor writes keys' last use into the store */
};

/* The top-level limiter section (config_limiter.c): where tenants' limits
 * are kept.  redis 0: in this process's memory. */
struct gw_limiter_config {
    int redis;     /* store: redis */
    char *socket;  /* redis.socket, or NULL */
    char *host;    /* redis.host (numeric), or NULL */
    unsigned port; /* redis.port */
    /* or redis.sentinels (numeric "host:port" each) and redis.master */
    struct {
        char *host;
        unsigned port;
    } sentinels[GW_REDIS_MAX_SENTINELS];
    size_t nsentinels;
    char *master;
    char *sentinel_password; /* the sentinel_password_file's secret, or NULL */
    char *password;          /* the password_file's secret, or NULL */
    unsigned db;             /* redis.db */
    char *prefix;            /* redis.prefix */
    uint64_t connect_timeout_ms, timeout_ms, lease_ms;
    int local_fallback; /* on_unavailable: local */
    unsigned gateways;  /* the local fallback's divisor */
};

/* The metrics section (config_observe.c): the Prometheus listener, off
 * when the section is absent (address NULL). */
struct gw_metrics_config {
    char *address;               /* numeric; loopback unless allow_non_loopback */
    uint16_t port;               /* never the public listener's */
    int allow_non_loopback;      /* the operator says another address is private */
    uint64_t backend_timeout_ms; /* a scrape's wait for the backend's load; a reload applies it */
};

struct gw_config {
    char *listen_address;
    uint16_t listen_port;
    char *tls_certificate;
    char *tls_key;
    char *backend_socket;
    uint64_t backend_timeout_ms;
    char *user;
    unsigned workers; /* 0 = one per CPU, resolved by gw_config_load */
    size_t max_request_entity_size;
    struct gw_tenant *tenants;
    size_t ntenants;
    struct gw_key *keys;
    size_t nkeys;
    size_t keys_cap;              /* keys' room (it grows by doubling) */
    struct gw_index key_index;    /* key id -> keys[] (config_index.h) */
    struct gw_index tenant_index; /* tenant name -> tenants[] */
    struct jwt_issuer *issuers;   /* JWT issuers; tenants come from their tenant claim */
    size_t nissuers;

    /* TLS client certificates (tls.client_ca, tls.require_client_certificate) */
    char *tls_client_ca; /* NULL: none asked for */
    int tls_require_client_cert;
    /* timeouts: (ms) */
    uint64_t header_timeout_ms; /* TLS handshake; first byte of a request to the end of its headers */
    uint64_t body_timeout_ms;   /* end of the headers to the end of the body */
    uint64_t idle_timeout_ms;   /* no request in progress */
    uint64_t send_timeout_ms;   /* a response's pending output making no progress */
    /* http2: */
    unsigned http2_max_streams;         /* requests handled at once per connection */
    unsigned http2_reset_budget;        /* streams a connection may abandon beyond those it completed; 0 = unchecked */
    size_t http2_max_header_list_bytes; /* a header block decoded: names + values + 32 per field */
    unsigned http2_max_headers;         /* header fields per block */
    /* connection limits, counted at accept */
    unsigned max_connections;
    unsigned max_connections_per_address; /* IPv6: per /64 */
    /* load balancers (proxies.c): peers that may name the client */
    struct gw_cidr trusted_proxies[GW_MAX_TRUSTED_PROXIES];
    size_t ntrusted_proxies;
    int proxy_protocol; /* trusted peers start each connection with a PROXY v2 header */
    /* unauthenticated: refusals before authentication, per client address (IPv6 /64; denials.c) */
    double unauth_per_second;
    uint32_t unauth_burst;
    uint64_t unauth_summary_ms; /* a summary record of what went past the rate, at most this often */
    /* sessions: the gateway's session capacity, init deadline and watchers */
    struct gw_session_config sessions;
    /* submissions: where Judge0 results are kept, and for how long */
    struct gw_submissions_config submissions;
    /* callbacks: the callback sender (Judge0 callback_url); off unless the section is present */
    struct gw_callback_config callbacks;
    /* limiter: tenants' limits in memory or in a shared Redis */
    struct gw_limiter_config limiter;
    /* audit: the trail's directory and writer; off when audit_enabled is 0 */
    int audit_enabled;
    struct gw_audit_config audit;
    /* metrics: the Prometheus listener (read at start only) */
    struct gw_metrics_config metrics;
    /* log: format json (1) or text (0, the default); a reload applies it */
    int log_json;
    /* control: the control socket and the admin store (read at start; a reload reads the store again) */
    struct gw_control_config control;
    size_t nstore_tenants; /* the last nstore_tenants of tenants came from the store */
    size_t nstore_keys;    /* likewise the last keys */
    size_t nstore_issuers; /* likewise the last issuers */
};

/* The tenant called name, or NULL. */
const struct gw_tenant *gw_config_find_tenant(const struct gw_config *cfg, const char *name);

/*
 * Read and check path.  Returns 0, or -1 with err holding "PATH:LINE: reason"
 * (or "PATH: reason" when no line applies).  Refuses a file that group or
 * others can write.  Applies MOAT_PORT from the environment when set.  On
 * failure cfg is left empty (safe to gw_config_free).
 */
int gw_config_load(const char *path, struct gw_config *cfg, char *err, size_t errlen);

/*
 * The same, with the admin store read from store_path instead of the one
 * the control section names (the supervisor checks a candidate store this
 * way before it becomes the store).  store_path NULL: gw_config_load.
 */
int gw_config_load_with_store(const char *path, const char *store_path, struct gw_config *cfg, char *err, size_t errlen);

void gw_config_free(struct gw_config *cfg);

/* t as "2027-01-31T00:00:00Z" (UTC), the form a key's expires takes. */
#define GW_TIME_LEN 20
void gw_time_format(time_t t, char out[GW_TIME_LEN + 1]);

/* The key entry for id, or NULL. */
const struct gw_key *gw_config_find_key(const struct gw_config *cfg, const char *id);

/*
 * check_file_secrecy: refuse anything but a regular file, or one that group
 * or others may write.  fd is an open descriptor for path.  0 or -1 with err
 * set.
 */
int gw_check_file_secrecy(int fd, const char *path, char *err, size_t errlen);

#endif /* GW_CONFIG_H */
