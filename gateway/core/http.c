/*
 * http.c - step 11 of the request path: response helpers and the request's
 * one log line (text, or JSON with log: {format: json}), where the request
 * is also counted (metrics.c).  Error bodies and the log line are built
 * without printf or an allocation: the deny path is the hot path under
 * attack.
 */
#include "http.h"
#include "common/gw_clock.h"
#include "log.h"
#include "common/metrics.h"
#include "moat_json_escape.h"
#include "json/piston_json.h"
#include "request.h"
#include "routes.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static const char *reason_phrase(int status)
{
    switch (status) {
    case 200:
        return "OK";
    case 201:
        return "Created";
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

void gw_add_retry_after(struct gw_request *r, uint64_t ms)
{
    add_number_header(r, NULL, 0, H2O_TOKEN_RETRY_AFTER, (ms + 999) / 1000);
}

void gw_add_ratelimit_headers(struct gw_request *r, const struct rl_decision *d)
{
    add_number_header(r, H2O_STRLIT("ratelimit-limit"), NULL, d->limit);
    add_number_header(r, H2O_STRLIT("ratelimit-remaining"), NULL, d->remaining);
    add_number_header(r, H2O_STRLIT("ratelimit-reset"), NULL, (d->reset_ms + 999) / 1000);
    if (!d->allowed && d->retry_after_ms != RL_RETRY_NEVER)
        add_number_header(r, NULL, 0, H2O_TOKEN_RETRY_AFTER, (d->retry_after_ms + 999) / 1000);
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
    char buf[MOAT_LOG_LINE_MAX - 64];
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

/* a string literal: its length known at compile time */
#define put_lit(l, lit) put((l), (lit), sizeof(lit) - 1)

/* The path as the log may show it: a query string keeps its names, never
 * its values ("?access_token=*&lang=*"), since clients put credentials
 * there. */
static void put_path(struct line *l, const h2o_req_t *req)
{
    char esc[GW_LOG_PATH_MAX * 4 + 1];
    size_t plen = req->query_at != SIZE_MAX && req->query_at < req->path.len ? req->query_at : req->path.len;

    log_escape(esc, sizeof(esc), req->path.base, plen, GW_LOG_PATH_MAX);
    puts_(l, esc);
    if (plen == req->path.len)
        return;
    const char *q = req->path.base + plen + 1, *end = req->path.base + req->path.len;
    put(l, "?", 1);
    while (q < end) {
        const char *name = q;
        while (q < end && *q != '=' && *q != '&')
            q++;
        log_escape(esc, sizeof(esc), name, (size_t)(q - name), 64);
        puts_(l, esc);
        if (q < end && *q == '=') {
            put(l, "=*", 2);
            while (q < end && *q != '&')
                q++;
        }
        if (q < end) {
            put(l, "&", 1);
            q++;
        }
    }
}

/* Decimal digits of v, at least min of them, without printf. */
static void put_uint(struct line *l, uint64_t v, int min)
{
    char d[24];
    int n = 0;

    do { /* right to left, then one copy */
        d[sizeof(d) - 1 - n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v != 0 || n < min);
    put(l, d + sizeof(d) - n, (size_t)n);
}

/* "ms=" of the text line and duration_ms of the JSON one: 1.234 */
static void put_ms(struct line *l, uint64_t us)
{
    put_uint(l, us / 1000, 1);
    put(l, ".", 1);
    put_uint(l, us % 1000, 3);
}

/* ,"name":"value" with value JSON-escaped (ASCII: what the text line holds
 * is already log_escape'd); a value that does not fit is left empty. */
static void put_json(struct line *l, const char *name, const char *v, size_t len)
{
    size_t off;

    put_lit(l, ",\"");
    puts_(l, name);
    put_lit(l, "\":\"");
    off = l->len;
    if (moat_json_escape(l->buf, sizeof(l->buf) - 8, &off, v, len, MOAT_JSON_ASCII_ONLY) == 0)
        l->len = off;
    put(l, "\"", 1);
}

/* The JSON access line: log: {format: json}. */
static void log_request_json(const struct gw_request *r, int status, uint64_t us, const char *method)
{
    const char *reason = status >= 400 ? gw_reason_name(r->reason) : NULL;
    struct line l, path;

    l.len = path.len = 0;
    put_path(&path, r->req);
    put_lit(&l, "\"msg\":\"request\"");
    put_json(&l, "request_id", r->request_id, strlen(r->request_id));
    put_json(&l, "tenant", r->tenant != NULL ? r->tenant : "", r->tenant != NULL ? strlen(r->tenant) : 0);
    put_json(&l, "route", r->route != NULL ? r->route->path : "other", strlen(r->route != NULL ? r->route->path : "other"));
    put_json(&l, "method", method, strlen(method));
    put_json(&l, "path", path.buf, path.len);
    put_lit(&l, ",\"status\":");
    put_uint(&l, (uint64_t)status, 1);
    put_lit(&l, ",\"duration_ms\":");
    put_ms(&l, us);
    put_json(&l, "client", r->client[0] != '\0' ? r->client : "?", r->client[0] != '\0' ? strlen(r->client) : 1);
    put_json(&l, "key", r->key_id, strlen(r->key_id));
    if (reason != NULL)
        put_json(&l, "reason", reason, strlen(reason));
    if (r->note != NULL)
        put_json(&l, "note", r->note, strlen(r->note));
    log_info_json(l.buf, l.len);
}

/* The request's one log line, assembled without printf: this runs for
 * every request, denials under attack included.  It is also where the
 * request is counted (metrics.c). */
void gw_metrics_request(const struct gw_request *r, int status, uint64_t us)
{
    gw_metrics_count(r->tenant, gw_route_row(r->route), status, us);
}

void gw_log_request(const struct gw_request *r, int status)
{
    char method[32], st[4] = {(char)('0' + status / 100 % 10), (char)('0' + status / 10 % 10), (char)('0' + status % 10), 0};
    const h2o_req_t *req = r->req;
    uint64_t us = (gw_monotonic_ns() - r->started_ns) / 1000;
    struct line l;

    gw_metrics_request(r, status, us);
    log_escape(method, sizeof(method), req->method.base, req->method.len, 16);
    if (log_is_json()) {
        log_request_json(r, status, us, method);
        return;
    }
    l.len = 0;
    put_lit(&l, "request: ");
    puts_(&l, method);
    put_lit(&l, " ");
    put_path(&l, req);
    put_lit(&l, " ");
    puts_(&l, st);
    put_lit(&l, " ms=");
    put_ms(&l, us);
    put_lit(&l, " id=");
    puts_(&l, r->request_id);
    put_lit(&l, " tenant=");
    puts_(&l, r->tenant != NULL ? r->tenant : "-");
    put_lit(&l, " key=");
    puts_(&l, r->key_id[0] != '\0' ? r->key_id : "-");
    put_lit(&l, " client=");
    puts_(&l, r->client[0] != '\0' ? r->client : "?");
    if (status >= 400 && gw_reason_name(r->reason) != NULL) {
        put_lit(&l, " reason=");
        puts_(&l, gw_reason_name(r->reason));
    }
    if (r->note) {
        put_lit(&l, ": ");
        puts_(&l, r->note);
    }
    log_info_raw(l.buf, l.len);
}

void gw_respond(struct gw_request *r, int status, const char *body)
{
    h2o_req_t *req = r->req;
    size_t len = strlen(body);

    gw_log_request(r, status);
    req->res.status = status;
    req->res.reason = reason_phrase(status);
    req->res.content_length = len;
    h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CONTENT_TYPE, NULL, H2O_STRLIT("application/json"));
    h2o_add_header_by_str(&req->pool, &req->res.headers, H2O_STRLIT("x-request-id"), 0, NULL, r->request_id, strlen(r->request_id));
    h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CACHE_CONTROL, NULL, H2O_STRLIT("no-store"));
    h2o_send_inline(req, body, len); /* copies body into req->pool */
}

void gw_respond_error(struct gw_request *r, int status, const char *code, const char *message)
{
    char body[2048];
    static const char head[] = "{\"message\":\"", mid1[] = "\",\"code\":\"", mid2[] = "\",\"request_id\":\"";
    size_t off = sizeof(head) - 1, clen = strlen(code), idlen = strlen(r->request_id);

    /* every 503 says when to come back */
    if (status == 503 && h2o_find_header(&r->req->res.headers, H2O_TOKEN_RETRY_AFTER, -1) == -1)
        h2o_add_header(&r->req->pool, &r->req->res.headers, H2O_TOKEN_RETRY_AFTER, NULL, H2O_STRLIT(GW_RETRY_AFTER_503_S));
    /* the error body is built here without an allocation: the deny path
     * is the hot path under attack; UTF-8 goes out as it is (valid only);
     * code is one of ours (audit_reason.c), plain ASCII */
    memcpy(body, head, off);
    if (moat_json_escape(body, sizeof(body) - 128, &off, message, strlen(message), MOAT_JSON_UTF8_RAW) != 0 || clen > 48) {
        char *slow = piston_error_json(message, code, r->request_id);
        if (slow == NULL) {
            gw_respond(r, 500, "{\"message\":\"out of memory\",\"code\":\"internal_error\"}");
            return;
        }
        gw_respond(r, status, slow);
        free(slow);
        return;
    }
    memcpy(body + off, mid1, sizeof(mid1) - 1);
    off += sizeof(mid1) - 1;
    memcpy(body + off, code, clen);
    off += clen;
    memcpy(body + off, mid2, sizeof(mid2) - 1);
    off += sizeof(mid2) - 1;
    memcpy(body + off, r->request_id, idlen);
    off += idlen;
    memcpy(body + off, "\"}", 3);
    gw_respond(r, status, body);
}

/*
 * "application/json", optionally with parameters (RFC 9110 8.3.1).  JSON is
 * UTF-8 (RFC 8259 8.1): a charset parameter must say so, any other charset
 * is refused rather than parsed as UTF-8.
 */
int gw_is_json_content_type(h2o_req_t *req)
{
    static const char want[] = "application/json";
    const size_t wlen = sizeof(want) - 1;
    ssize_t i = h2o_find_header(&req->headers, H2O_TOKEN_CONTENT_TYPE, -1);
    const char *p, *end;

    if (i == -1)
        return 0;
    p = req->headers.entries[i].value.base;
    end = p + req->headers.entries[i].value.len;
    if ((size_t)(end - p) < wlen || strncasecmp(p, want, wlen) != 0)
        return 0;
    for (p += wlen;;) {
        const char *name, *val;
        size_t nlen, vlen;
        while (p < end && (*p == ' ' || *p == '\t'))
            p++;
        if (p == end)
            return 1;
        if (*p++ != ';')
            return 0;
        while (p < end && (*p == ' ' || *p == '\t'))
            p++;
        for (name = p; p < end && *p != '=' && *p != ';' && *p != ' '; p++)
            ;
        nlen = (size_t)(p - name);
        if (p == end || *p != '=')
            return 0;
        p++;
        if (p < end && *p == '"') {
            for (val = ++p; p < end && *p != '"'; p++)
                ;
            if (p == end)
                return 0;
            vlen = (size_t)(p++ - val);
        } else {
            for (val = p; p < end && *p != ';' && *p != ' ' && *p != '\t'; p++)
                ;
            vlen = (size_t)(p - val);
        }
        if (nlen == 7 && strncasecmp(name, "charset", 7) == 0 && !(vlen == 5 && strncasecmp(val, "utf-8", 5) == 0))
            return 0;
    }
}
