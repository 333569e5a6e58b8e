/*
 * http.c - request context, response helpers and the access log line.
 */
#include "http.h"
#include "conn.h"
#include "log.h"
#include "piston_json.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/rand.h>

#include <arpa/inet.h>
#include <netinet/in.h>

static const char *reason_phrase(int status)
{
    switch (status) {
    case 200:
        return "OK";
    case 400:
        return "Bad Request";
    case 401:
        return "Unauthorized";
    case 403:
        return "Forbidden";
    case 404:
        return "Not Found";
    case 405:
        return "Method Not Allowed";
    case 413:
        return "Payload Too Large";
    case 415:
        return "Unsupported Media Type";
    case 422:
        return "Unprocessable Content";
    case 429:
        return "Too Many Requests";
    case 500:
        return "Internal Server Error";
    case 502:
        return "Bad Gateway";
    case 503:
        return "Service Unavailable";
    case 504:
        return "Gateway Timeout";
    default:
        return "Error";
    }
}

void gw_request_release(struct gw_request *r, uint64_t cpu_ms)
{
    if (!r->admitted)
        return;
    r->admitted = 0;
    rl_release(r->worker->server->limiter, r->tenant, cpu_ms, rl_monotonic_ms());
}

/* A header whose name is a literal and whose value is formatted into the
 * request's pool: no copies of the name, one small allocation for the value. */
static void add_number_header(struct gw_request *r, const char *name, size_t name_len, const h2o_token_t *token,
                              unsigned long long value)
{
    h2o_req_t *req = r->req;
    char digits[24], *v;
    int n = 0;
    do { /* decimal without printf: four of these per 429 */
        digits[n++] = (char)('0' + value % 10);
        value /= 10;
    } while (value != 0);
    v = h2o_mem_alloc_pool(&req->pool, (size_t)n);
    for (int i = 0; i < n; i++)
        v[i] = digits[n - 1 - i];
    if (token != NULL)
        h2o_add_header(&req->pool, &req->res.headers, token, NULL, v, (size_t)n);
    else
        h2o_add_header_by_str(&req->pool, &req->res.headers, name, name_len, 0, NULL, v, (size_t)n);
}

void gw_add_ratelimit_headers(struct gw_request *r, const struct rl_decision *d)
{
    add_number_header(r, H2O_STRLIT("ratelimit-limit"), NULL, d->limit);
    add_number_header(r, H2O_STRLIT("ratelimit-remaining"), NULL, d->remaining);
    add_number_header(r, H2O_STRLIT("ratelimit-reset"), NULL, (d->reset_ms + 999) / 1000);
    if (!d->allowed && d->retry_after_ms != RL_RETRY_NEVER)
        add_number_header(r, NULL, 0, H2O_TOKEN_RETRY_AFTER, (d->retry_after_ms + 999) / 1000);
}

static const char *reason_for_status(int status)
{
    switch (status) {
    case 401:
        return "auth";
    case 403:
    case 404:
    case 405:
        return "endpoint";
    case 422:
        return "content";
    case 429:
        return "rate";
    default:
        return status >= 500 ? "backend" : "filter";
    }
}

void gw_audit_who(struct gw_request *r, struct gw_audit_who *who, char *client, size_t clientlen)
{
    const struct gw_conn *gc = gw_conn_of(r->req);

    client[0] = '\0';
    if (gc != NULL) {
        /* taken once, at accept */
        const char *peer = gw_conn_peer(gc);
        size_t n = strlen(peer);
        if (n < clientlen)
            memcpy(client, peer, n + 1);
    } else {
        struct sockaddr_storage ss;
        socklen_t len = r->req->conn->callbacks->get_peername(r->req->conn, (struct sockaddr *)&ss);
        if (len > 0 && ss.ss_family == AF_INET)
            inet_ntop(AF_INET, &((struct sockaddr_in *)&ss)->sin_addr, client, (socklen_t)clientlen);
        else if (len > 0 && ss.ss_family == AF_INET6)
            inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&ss)->sin6_addr, client, (socklen_t)clientlen);
    }
    who->request_id = r->request_id;
    who->tenant = r->tenant;
    who->key_id = r->key_id;
    who->client = client;
    who->method = r->req->method.base;
    who->method_len = r->req->method.len;
    who->path = r->req->path_normalized.base;
    who->path_len = r->req->path_normalized.len;
}

void gw_audit_decision(struct gw_request *r, int status, const char *message)
{
    struct gw_audit_who who;
    char client[INET6_ADDRSTRLEN], fast[GW_AUDIT_FAST_MAX];
    size_t len;
    const char *type, *decision, *reason = NULL;

    if (!r->worker->audit.enabled || r->audit_skip || (r->audited && !r->executing))
        return;
    gw_audit_who(r, &who, client, sizeof(client));
    type = r->executing ? "result" : "request";
    if (status < 400) {
        decision = "allowed";
        message = NULL;
    } else {
        decision = r->executing ? "failed" : "denied";
        reason = r->reason ? r->reason : reason_for_status(status);
    }
    /* the common case, every denial under attack included: no jansson, no
     * allocation; a record is sent and not waited for (the request is
     * refused either way) */
    if (gw_audit_fast_decision(&who, type, decision, reason, status < 400 ? NULL : r->rule, status, message, fast, sizeof(fast),
                               &len) == 0) {
        gw_audit_submit(&r->worker->audit, fast, len, NULL, 0, NULL, NULL);
    } else {
        json_t *b = gw_audit_base(&who, type);
        if (b == NULL)
            return;
        if (status < 400)
            gw_audit_add_decision(b, decision, NULL, NULL, status, NULL);
        else
            gw_audit_add_decision(b, decision, reason, r->rule, status, message);
        char *text = gw_audit_dump(b, &len);
        json_decref(b);
        if (text != NULL)
            gw_audit_submit(&r->worker->audit, text, len, NULL, 0, NULL, NULL);
        free(text);
    }
    r->audited = 1;
    r->executing = 0;
}

static void on_request_dispose(void *p)
{
    struct gw_request *r = p;

    if (r->audit_entry != NULL) {
        gw_audit_cancel(r->audit_entry); /* its callback must not touch r */
        r->audit_entry = NULL;
    }
    /* a client that went away mid-run, or any path that did not release */
    gw_request_release(r, 0);
    if (r->worker->inflight > 0)
        r->worker->inflight--;
}

/* Request ids from a per-thread pool refilled 4 KiB at a time: one
 * RAND_bytes call per 512 requests instead of one each. */
static void random_bytes(uint8_t *out, size_t n)
{
    static __thread uint8_t pool[4096];
    static __thread size_t left;
    if (left < n) {
        if (RAND_bytes(pool, sizeof(pool)) != 1) {
            log_warnx("%s: RAND_bytes failed, request id is zero", __func__);
            memset(out, 0, n);
            return;
        }
        left = sizeof(pool);
    }
    memcpy(out, pool + sizeof(pool) - left, n);
    left -= n;
}

struct gw_request *gw_request_new(h2o_req_t *req)
{
    struct gw_request *r = h2o_mem_alloc_shared(&req->pool, sizeof(*r), on_request_dispose);
    uint8_t rnd[GW_REQUEST_ID_LEN / 2];

    if (r == NULL)
        return NULL;
    memset(r, 0, sizeof(*r));
    r->req = req;
    r->worker = gw_worker_of(req->conn->ctx);
    r->cfg = r->worker->cfg;
    r->worker->inflight++;
    /* room for every header a response of ours carries, in one allocation */
    h2o_vector_reserve(&req->pool, &req->res.headers, 8);
    random_bytes(rnd, sizeof(rnd));
    hex_encode(rnd, sizeof(rnd), r->request_id);
    return r;
}

void gw_add_header(struct gw_request *r, const char *name, const char *value)
{
    h2o_req_t *req = r->req;
    size_t nlen = strlen(name);
    const h2o_token_t *token = h2o_lookup_token(name, nlen);

    /* name and value are literals (static): h2o may keep the pointers */
    if (token != NULL)
        h2o_add_header(&req->pool, &req->res.headers, token, NULL, value, strlen(value));
    else
        h2o_add_header_by_str(&req->pool, &req->res.headers, name, nlen, 0, NULL, value, strlen(value));
}

struct line {
    char buf[GW_LOG_LINE_MAX - 64];
    size_t len;
};

static void put(struct line *l, const char *s, size_t n)
{
    if (n > sizeof(l->buf) - l->len)
        n = sizeof(l->buf) - l->len;
    memcpy(l->buf + l->len, s, n);
    l->len += n;
}

static void puts_(struct line *l, const char *s)
{
    put(l, s, strlen(s));
}

/* The request's one log line, assembled without printf: this runs for
 * every request, denials under attack included. */
static void log_request(const struct gw_request *r, int status)
{
    char method[32], path[GW_LOG_PATH_MAX * 4 + 1],
        st[4] = {(char)('0' + status / 100 % 10), (char)('0' + status / 10 % 10), (char)('0' + status % 10), 0};
    const h2o_req_t *req = r->req;
    struct line l;

    l.len = 0;
    log_escape(method, sizeof(method), req->method.base, req->method.len, 16);
    log_escape(path, sizeof(path), req->path.base, req->path.len, GW_LOG_PATH_MAX);
    puts_(&l, "request: ");
    puts_(&l, method);
    puts_(&l, " ");
    puts_(&l, path);
    puts_(&l, " ");
    puts_(&l, st);
    puts_(&l, " id=");
    puts_(&l, r->request_id);
    puts_(&l, " tenant=");
    puts_(&l, r->tenant != NULL ? r->tenant : "-");
    puts_(&l, " key=");
    puts_(&l, r->key_id[0] != '\0' ? r->key_id : "-");
    if (r->reason) {
        puts_(&l, " reason=");
        puts_(&l, r->reason);
    }
    if (r->note) {
        puts_(&l, ": ");
        puts_(&l, r->note);
    }
    log_info_raw(l.buf, l.len);
}

void gw_respond(struct gw_request *r, int status, const char *body)
{
    h2o_req_t *req = r->req;
    size_t len = strlen(body);

    if (status < 400)
        gw_audit_decision(r, status, NULL); /* allowed requests that are not executions */
    log_request(r, status);
    req->res.status = status;
    req->res.reason = reason_phrase(status);
    req->res.content_length = len;
    h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CONTENT_TYPE, NULL, H2O_STRLIT("application/json"));
    h2o_add_header_by_str(&req->pool, &req->res.headers, H2O_STRLIT("x-request-id"), 0, NULL, r->request_id, strlen(r->request_id));
    h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CACHE_CONTROL, NULL, H2O_STRLIT("no-store"));
    h2o_send_inline(req, body, len); /* copies body into req->pool */
}

/* Appends s as the inside of a JSON string (ASCII; \uXXXX for control
 * characters, quotes and backslashes escaped; other bytes as they are, and
 * *high set: the caller checks that such a message is valid UTF-8).
 * Returns the new length or -1 if full. */
static int json_escape_into(char *out, size_t size, size_t off, const char *s, int *high)
{
    static const char hex[] = "0123456789abcdef";
    *high = 0;
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        *high |= c >= 0x80;
        if (off + 7 >= size)
            return -1;
        if (c == '"' || c == '\\') {
            out[off++] = '\\';
            out[off++] = (char)c;
        } else if (c < 0x20 || c == 0x7f) {
            out[off++] = '\\';
            out[off++] = 'u';
            out[off++] = '0';
            out[off++] = '0';
            out[off++] = hex[c >> 4];
            out[off++] = hex[c & 15];
        } else {
            out[off++] = (char)c;
        }
    }
    return (int)off;
}

void gw_respond_error(struct gw_request *r, int status, const char *message)
{
    char body[2048];
    static const char head[] = "{\"message\":\"";
    int off, high;

    gw_audit_decision(r, status, message);
    /* the error body is built here without an allocation: the deny path
     * is the hot path under attack */
    memcpy(body, head, sizeof(head) - 1);
    off = json_escape_into(body, sizeof(body) - 64, sizeof(head) - 1, message, &high);
    if (off < 0 || (high && !moat_utf8_valid((const uint8_t *)message, strlen(message)))) {
        char *slow = piston_error_json(message, r->request_id);
        if (slow == NULL) {
            gw_respond(r, 500, "{\"message\":\"out of memory\"}");
            return;
        }
        gw_respond(r, status, slow);
        free(slow);
        return;
    }
    static const char mid[] = "\",\"request_id\":\"";
    size_t idlen = strlen(r->request_id);
    memcpy(body + off, mid, sizeof(mid) - 1);
    off += (int)(sizeof(mid) - 1);
    memcpy(body + off, r->request_id, idlen);
    off += (int)idlen;
    memcpy(body + off, "\"}", 3);
    gw_respond(r, status, body);
}
