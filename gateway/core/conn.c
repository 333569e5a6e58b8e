/*
 * conn.c - what the gateway knows about each client connection.
 *
 * Theory of operation
 * -------------------
 * libh2o 2.2.5 has one timer per HTTP/1 request (from "ready for a request"
 * until the body has arrived), an HTTP/2 idle timer that any frame re-arms,
 * no connection limits and no defence against HTTP/2 rapid reset.  So the
 * gateway keeps a small struct gw_conn beside every socket h2o owns:
 *
 *   accept   -> count the client address (shared table, one mutex) and the
 *               total; over max_connections_per_address or max_connections
 *               the socket is closed before the TLS handshake.  The state is
 *               hung on h2o's sock->on_close hook, which h2o calls when it
 *               frees the socket: that uncounts the address.  A trusted
 *               proxy's connection (proxy_protocol: true; proxies.c) first
 *               sends a PROXY v2 header naming the client: the count moves
 *               from the proxy (uncapped per address) to that client.
 *   requests -> the pipeline (step 1) reports each request's start and end: requests in
 *               flight, requests whose whole response was sent, activity.
 *   watchdog -> every GW_WATCHDOG_MS each worker walks its connections:
 *               HTTP/1 between requests: idle (idle_ms), request headers
 *               (header_ms from the first byte), body (body_ms from the end
 *               of the headers), judged from the socket's input buffer;
 *               HTTP/2: a stream still being received while no request
 *               completes (body_ms), no stream open (idle_ms), and the reset
 *               budget below;
 *               both: a response that does not leave (send_ms, below).
 *               A connection upgraded to a WebSocket keeps only the send
 *               clock (its session has clocks of its own).
 *
 * Rapid reset: a client opens streams and cancels them at once, so h2o's
 * cap on requests in flight never bites.  Every stream a client opens
 * raises h2o's pull_stream_ids.max_open; streams that ended without a
 * complete response are (opened - completed - still open).  When that
 * exceeds http2.reset_budget plus the number of completed requests, the
 * connection gets GOAWAY(ENHANCE_YOUR_CALM) and h2o stops parsing new
 * streams on it (state HALF_CLOSED, as after its own GOAWAY), so h2o closes
 * it.  The check runs at each request start and in the
 * watchdog; never while h2o frees a request, because that may happen inside
 * h2o's own connection teardown.
 *
 * Sending: a client that does not read (a TCP peer whose window stays
 * shut, or an HTTP/2 client that grants no flow-control window) would hold
 * its response, its request's memory and its connection forever: h2o
 * 2.2.5 has no send timeout, and no receive clock runs while a response is
 * out.  Output is pending while h2o waits for the socket to take a write
 * (h2o_socket_is_writing), or, on HTTP/2, while a stream's response has
 * started and is not all written (flow control).  It moves on when the peer
 * acknowledges more bytes of a pending write (TCP_INFO's tcpi_bytes_acked;
 * kernels before 4.2 lack it, and then only a completed write counts; a
 * receiver reopens its window in steps of about a segment, so a client
 * must take that much, 1,460 octets on Ethernet, per send_ms), when
 * h2o starts another write (HTTP/1), when more response body leaves a
 * stream (HTTP/2: PINGs and other frames do not count) or when a response
 * completes.  Output pending with none of these for send_ms aborts the
 * connection: linger 0 and shutdown(2), so the kernel drops what is queued
 * and sends RST, and h2o's pending write fails and it closes the
 * connection.  A GOAWAY would only queue behind what is stuck.
 *
 * Closing is GOAWAY (HTTP/2) or shutdown(2) on the descriptor (HTTP/1, and
 * HTTP/2 connections still open GW_CONDEMNED_GRACE_MS after their GOAWAY):
 * h2o then closes the connection by its normal path, so nothing here frees
 * anything h2o still uses.
 *
 * All of it runs on the owning worker's thread except the address table.
 */
#include "conn.h"
#include "auth/apikey.h"
#include "common/gw_limits.h"
#include "log.h"
#include "common/metrics.h"

#include <arpa/inet.h>
#include <linux/tcp.h> /* struct tcp_info with tcpi_bytes_acked (glibc's lacks it) */
#include <netinet/in.h>
#include <limits.h>
#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <openssl/crypto.h>
#include <openssl/rand.h>

#include "h2o_compat.h"
#include <h2o/http2.h> /* H2O_HTTP2_ERROR_* (public) */

#if H2O_VERSION_MAJOR != 2 || H2O_VERSION_MINOR != 2
#error "conn.c reads libh2o 2.2's HTTP/2 connection state: check it against this version"
#endif

struct addr_entry {
    struct addr_entry *next;
    uint8_t key[16];
    unsigned count;
};

struct gw_conn_table {
    pthread_mutex_t lock;
    uint64_t seed[2];
    unsigned total;
    uint64_t last_refusal_log_ms;
    unsigned refused_since_log;
    struct addr_entry *buckets[GW_ADDR_BUCKETS];
};

struct gw_conn {
    h2o_linklist_t link; /* gw_worker.conns */
    struct gw_worker *worker;
    h2o_socket_t *sock; /* NULL once h2o closed it */
    int fd;
    uint8_t key[16];
    char peer[INET6_ADDRSTRLEN];
    struct gw_addr addr;       /* the client (the peer, or who its PROXY header named) */
    int trusted;               /* addr is a trusted proxy: its X-Forwarded-For counts */
    int uncounted;             /* refused after its PROXY header: in no count of the table */
    gw_conn_ready_cb on_ready; /* waiting for a PROXY header, then this */
    int condemned;             /* being closed; further requests are refused */
    uint64_t condemned_ms;     /* since; the descriptor is shut if h2o has not closed it in time */
    int shut;
    int is_h2;
    int upgraded;           /* a WebSocket now: no HTTP/1 request clocks, only the send clock */
    unsigned inflight;      /* requests started and not yet freed */
    uint64_t completed;     /* requests whose whole response was sent */
    uint64_t last_activity; /* ms: accept, or a request's start or end */
    /* HTTP/1: the request being read (between two requests) */
    uint64_t boundary_ms; /* ready for the next request since */
    size_t bytes_at_boundary;
    uint64_t first_byte_ms, head_done_ms;
    size_t head_scanned;
    /* HTTP/2 */
    uint64_t recv_since_ms;    /* some stream is being received since */
    uint64_t last_progress_ms; /* a request reached the handlers */
    /* sending: output pending without progress since (0: none pending), and the progress then */
    uint64_t send_stall_ms;
    struct send_progress {
        uint64_t acked, written, body, completed;
    } send_seen;
    /* the API key this connection last authenticated with (auth.c) */
    char auth_token[APIKEY_TOKEN_LEN];
    unsigned auth_serial; /* the config generation it was checked against (serials never repeat) */
    const void *auth_key; /* its entry in that config */
};

/* ---------------------------------------------------------------- addresses */

struct gw_conn_table *gw_conn_table_new(void)
{
    struct gw_conn_table *t = calloc(1, sizeof(*t));

    if (t == NULL)
        return NULL;
    if (pthread_mutex_init(&t->lock, NULL) != 0 || RAND_bytes((unsigned char *)t->seed, sizeof(t->seed)) != 1) {
        free(t);
        return NULL;
    }
    return t;
}

/* Keyed with a random seed so clients cannot aim at one bucket. */
static size_t addr_bucket(const struct gw_conn_table *t, const uint8_t key[16])
{
    uint64_t a, b, h;

    memcpy(&a, key, 8);
    memcpy(&b, key + 8, 8);
    h = (a ^ t->seed[0]) * 0x9e3779b97f4a7c15ULL;
    h ^= h >> 31;
    h = (h ^ b ^ t->seed[1]) * 0xbf58476d1ce4e5b9ULL;
    h ^= h >> 29;
    h *= 0x94d049bb133111ebULL;
    h ^= h >> 32;
    return (size_t)(h % GW_ADDR_BUCKETS);
}

/* Count one more connection from key.  NULL, or why not (nothing counted). */
static const char *table_acquire(struct gw_conn_table *t, const uint8_t key[16], unsigned max_total, unsigned max_per_addr)
{
    struct addr_entry *e;
    const char *why = NULL;
    size_t b = addr_bucket(t, key);

    pthread_mutex_lock(&t->lock);
    for (e = t->buckets[b]; e != NULL && memcmp(e->key, key, 16) != 0; e = e->next)
        ;
    if (t->total >= max_total) {
        why = "max_connections";
    } else if (e != NULL && e->count >= max_per_addr) {
        why = "max_connections_per_address";
    } else if (e == NULL && (e = calloc(1, sizeof(*e))) == NULL) {
        why = "out of memory";
    } else {
        if (e->count == 0) {
            memcpy(e->key, key, 16);
            e->next = t->buckets[b];
            t->buckets[b] = e;
        }
        e->count++;
        t->total++;
    }
    pthread_mutex_unlock(&t->lock);
    return why;
}

static void table_release(struct gw_conn_table *t, const uint8_t key[16])
{
    struct addr_entry **pp, *e;

    pthread_mutex_lock(&t->lock);
    for (pp = &t->buckets[addr_bucket(t, key)]; (e = *pp) != NULL; pp = &e->next) {
        if (memcmp(e->key, key, 16) != 0)
            continue;
        t->total--;
        if (--e->count == 0) {
            *pp = e->next;
            free(e);
        }
        break;
    }
    pthread_mutex_unlock(&t->lock);
}

/* At most one line a second about refused connections, however many there are. */
static void log_refusal(struct gw_conn_table *t, uint64_t now, const char *peer, const char *why)
{
    unsigned n = 0;

    pthread_mutex_lock(&t->lock);
    t->refused_since_log++;
    if (now >= t->last_refusal_log_ms + 1000) {
        n = t->refused_since_log;
        t->refused_since_log = 0;
        t->last_refusal_log_ms = now;
    }
    pthread_mutex_unlock(&t->lock);
    if (n != 0)
        log_warnx("accept: refused a connection from %s: %s reached (%u refused in the last second or more)", peer, why, n);
}

/* ---------------------------------------------------------------- lifetime */

static void free_if_done(struct gw_conn *gc)
{
    if (gc->sock == NULL && gc->inflight == 0) {
        OPENSSL_cleanse(gc->auth_token, sizeof(gc->auth_token));
        free(gc);
    }
}

/* h2o's sock->on_close hook: the socket is gone (requests on it were freed first). */
static void on_sock_close(void *data)
{
    struct gw_conn *gc = data;

    if (!gc->uncounted)
        table_release(gc->worker->server->conns, gc->key);
    h2o_linklist_unlink(&gc->link);
    gc->sock = NULL;
    free_if_done(gc);
}

static struct gw_conn *conn_of_sock(h2o_socket_t *sock)
{
    return sock != NULL && sock->on_close.cb == on_sock_close ? sock->on_close.data : NULL;
}

/* The connection's client is a: its key, text, and whether it is a trusted proxy. */
static void set_client(struct gw_conn *gc, const struct gw_config *cfg, const struct gw_addr *a)
{
    gc->addr = *a;
    gw_addr_key(a, gc->key);
    gw_addr_text(a, gc->peer, sizeof(gc->peer));
    gc->trusted = gw_cidr_match(cfg->trusted_proxies, cfg->ntrusted_proxies, a);
}

/*
 * A trusted peer's PROXY v2 header (proxy_protocol: true), read before the
 * TLS handshake: the connection becomes the client's it names (counted
 * against that address's cap: over it, closed), or is closed when the
 * header is missing or malformed.  Bytes after the header stay in the
 * socket's input for the handshake (h2o's TLS takes them from there).
 */
static void on_proxy_header(h2o_socket_t *sock, const char *err)
{
    struct gw_conn *gc = conn_of_sock(sock);
    const struct gw_config *cfg;
    struct sockaddr_storage src;
    socklen_t srclen;
    struct gw_addr a;
    const char *why;
    long n;

    if (gc == NULL || err != NULL) {
        h2o_socket_close(sock);
        return;
    }
    cfg = gc->worker->cfg;
    n = gw_proxy_v2_parse((const uint8_t *)sock->input->bytes, sock->input->size, &src, &srclen, &why);
    if (n == 0)
        return; /* more to come */
    if (n < 0) {
        log_warnx("%s: closing a connection from trusted proxy %s: %s (proxy_protocol is on)", __func__, gc->peer, why);
        h2o_socket_close(sock);
        return;
    }
    h2o_socket_read_stop(sock);
    h2o_buffer_consume(&sock->input, (size_t)n);
    if (srclen != 0 && gw_addr_of_sockaddr((struct sockaddr *)&src, srclen, &a) == 0) {
        uint8_t old[16];
        memcpy(old, gc->key, sizeof(old));
        set_client(gc, cfg, &a);
        /* the balancer's count becomes the client's */
        table_release(gc->worker->server->conns, old);
        if ((why = table_acquire(gc->worker->server->conns, gc->key, cfg->max_connections, cfg->max_connections_per_address)) !=
            NULL) {
            log_refusal(gc->worker->server->conns, h2o_now(gc->worker->ctx.loop), gc->peer, why);
            memset(gc->key, 0, sizeof(gc->key)); /* counted nowhere now: on_sock_close must not release it */
            gc->uncounted = 1;
            h2o_socket_close(sock);
            return;
        }
        h2o_socket_setpeername(sock, (struct sockaddr *)&src, srclen);
    }
    gc->on_ready(gc->worker, sock);
}

int gw_conn_accept(struct gw_worker *w, h2o_socket_t *sock, gw_conn_ready_cb on_ready)
{
    const struct gw_config *cfg = w->cfg;
    uint64_t now = h2o_now(w->ctx.loop);
    struct sockaddr_storage ss;
    struct gw_addr a;
    struct gw_conn *gc;
    unsigned per_addr = cfg->max_connections_per_address;
    const char *why;

    memset(&ss, 0, sizeof(ss));
    memset(&a, 0, sizeof(a));
    (void)gw_addr_of_sockaddr((struct sockaddr *)&ss, h2o_socket_getpeername(sock, (struct sockaddr *)&ss), &a);
    if ((gc = calloc(1, sizeof(*gc))) == NULL) {
        log_warnx("%s: out of memory", __func__);
        h2o_socket_close(sock);
        return -1;
    }
    set_client(gc, cfg, &a);
    /* a balancer's connections count against its address once they name their client */
    if (gc->trusted && cfg->proxy_protocol)
        per_addr = UINT_MAX;
    if ((why = table_acquire(w->server->conns, gc->key, cfg->max_connections, per_addr)) != NULL) {
        log_refusal(w->server->conns, now, gc->peer, why);
        free(gc);
        h2o_socket_close(sock);
        return -1;
    }
    gc->worker = w;
    gc->sock = sock;
    gc->fd = h2o_socket_get_fd(sock);
    gc->last_activity = gc->boundary_ms = now;
    sock->on_close.cb = on_sock_close;
    sock->on_close.data = gc;
    h2o_linklist_insert(&w->conns, &gc->link);
    if (gc->trusted && cfg->proxy_protocol) {
        gc->on_ready = on_ready;
        h2o_socket_read_start(sock, on_proxy_header); /* the idle clock bounds a header that never comes */
        return 0;
    }
    on_ready(w, sock);
    return 0;
}

void gw_conn_upgraded(struct gw_conn *gc)
{
    gc->upgraded = 1;
}

const void *gw_conn_cached_key(struct gw_conn *gc, unsigned serial, const char *token, size_t len)
{
    /* The same bytes against the same configuration give the same answer:
     * compared in constant time, and never across a reload.  A generation
     * is identified by its serial, never by its address (a freed one's
     * address can come back); the key pointer is used only when the serial
     * is the request's own, whose generation the request holds. */
    if (gc == NULL || gc->auth_key == NULL || gc->auth_serial != serial || len != sizeof(gc->auth_token) ||
        CRYPTO_memcmp(gc->auth_token, token, len) != 0)
        return NULL;
    return gc->auth_key;
}

void gw_conn_cache_key(struct gw_conn *gc, unsigned serial, const char *token, size_t len, const void *key)
{
    if (gc == NULL || len != sizeof(gc->auth_token))
        return;
    memcpy(gc->auth_token, token, len);
    gc->auth_serial = serial;
    gc->auth_key = key;
}

struct gw_conn *gw_conn_of(h2o_req_t *req)
{
    if (req->conn->callbacks->get_socket == NULL)
        return NULL;
    return conn_of_sock(req->conn->callbacks->get_socket(req->conn));
}

const char *gw_conn_peer(const struct gw_conn *gc)
{
    return gc->peer;
}

void gw_conn_client(const struct gw_conn *gc, char *text, size_t textlen, uint8_t key[16])
{
    size_t n = strlen(gc->peer);

    if (n >= textlen)
        n = textlen - 1;
    memcpy(text, gc->peer, n);
    text[n] = '\0';
    memcpy(key, gc->key, 16);
}

const struct gw_addr *gw_conn_addr(const struct gw_conn *gc, int *trusted)
{
    *trusted = gc->trusted;
    return &gc->addr;
}

/* ---------------------------------------------------------------- closing */

static void condemn(struct gw_conn *gc)
{
    gc->condemned = 1;
    gc->condemned_ms = h2o_now(gc->worker->ctx.loop);
}

/* Both directions: h2o's next read fails and it closes the connection. */
static void shut(struct gw_conn *gc)
{
    if (!gc->shut)
        shutdown(gc->fd, SHUT_RDWR);
    gc->shut = 1;
}

static void close_http1(struct gw_conn *gc, const char *why)
{
    condemn(gc);
    log_info("connection: closing HTTP/1.1 connection from %s: %s", gc->peer, why);
    shut(gc);
}

/* Now, discarding what is queued for the peer: RST instead of FIN. */
static void abort_conn(struct gw_conn *gc, const char *why)
{
    const struct linger now = {1, 0};

    condemn(gc);
    gw_metric_add(&gw_metrics_here()->aborted, 1);
    log_info("connection: closing %s connection from %s: %s", gc->is_h2 ? "HTTP/2" : "HTTP/1.1", gc->peer, why);
    setsockopt(gc->fd, SOL_SOCKET, SO_LINGER, &now, sizeof(now));
    shut(gc);
}

/*
 * GOAWAY with errnum and stop h2o opening streams (state HALF_CLOSED, as
 * after h2o's own GOAWAY): h2o ignores new HEADERS without decoding them,
 * and closes the connection once the GOAWAY is written and the requests in
 * flight are done (a RST_STREAM for an ignored stream makes it close at
 * once).  The watchdog shuts the descriptor if that takes too long.
 */
static void close_h2(struct gw_conn *gc, h2o_conn_t *conn, int errnum, const char *why)
{
    condemn(gc);
    gw_metric_add(
        &gw_metrics_here()->goaway[errnum == H2O_HTTP2_ERROR_ENHANCE_YOUR_CALM ? GW_GOAWAY_RESET_BUDGET : GW_GOAWAY_TIMEOUT], 1);
    log_info("connection: closing HTTP/2 connection from %s: %s", gc->peer, why);
    gw_h2_goaway(conn, errnum, why);
}

/* Streams the client opened that ended without a complete response, beyond what it has earned. */
static int h2_over_budget(const struct gw_conn *gc, const struct gw_h2_view *h2)
{
    unsigned budget = gc->worker->cfg->http2_reset_budget;
    uint64_t opened = ((uint64_t)h2->max_open + 1) / 2;
    uint64_t settled = gc->completed + h2->open;

    if (budget == 0 || opened <= settled)
        return 0;
    return opened - settled > budget + gc->completed;
}

/* ---------------------------------------------------------------- requests */

const char *gw_conn_request_start(struct gw_conn *gc, h2o_req_t *req)
{
    uint64_t now = h2o_now(gc->worker->ctx.loop);

    gc->inflight++;
    gc->last_activity = now;
    if (req->version >= 0x200) {
        gc->is_h2 = 1;
        gc->last_progress_ms = now;
    }
    if (gc->condemned)
        return "this connection is being closed";
    if (gc->is_h2) {
        struct gw_h2_view v;
        gw_h2_view(req->conn, &v);
        if (h2_over_budget(gc, &v)) {
            close_h2(gc, req->conn, H2O_HTTP2_ERROR_ENHANCE_YOUR_CALM, "too many reset streams");
            return "too many cancelled streams on this connection";
        }
    }
    return NULL;
}

void gw_conn_request_end(struct gw_conn *gc, int completed)
{
    uint64_t now = h2o_now(gc->worker->ctx.loop);

    if (gc->inflight > 0)
        gc->inflight--;
    if (completed)
        gc->completed++;
    gc->last_activity = now;
    if (!gc->is_h2 && gc->inflight == 0 && gc->sock != NULL) {
        /* HTTP/1: the connection is ready for the next request from now */
        gc->boundary_ms = now;
        gc->bytes_at_boundary = gc->sock->bytes_read;
        gc->first_byte_ms = gc->head_done_ms = 0;
        gc->head_scanned = 0;
    }
    free_if_done(gc);
}

/* ---------------------------------------------------------------- watchdog */

/* Bytes of ours the peer has acknowledged (TCP_INFO, Linux 4.2+), or 0 where the kernel does not say. */
static uint64_t tcp_bytes_acked(int fd)
{
    struct tcp_info ti;
    socklen_t len = sizeof(ti);

    memset(&ti, 0, sizeof(ti));
    if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) != 0 ||
        len < offsetof(struct tcp_info, tcpi_bytes_acked) + sizeof(ti.tcpi_bytes_acked))
        return 0;
    return ti.tcpi_bytes_acked;
}

static int same_progress(const struct send_progress *a, const struct send_progress *b)
{
    return a->acked == b->acked && a->written == b->written && a->body == b->body && a->completed == b->completed;
}

/*
 * Output is pending (pending) with progress p: restart the clock when it
 * moved, abort the connection when it stood still for send_ms.  1 if it
 * was aborted.
 */
static int check_send(struct gw_conn *gc, const struct gw_config *cfg, uint64_t now, int pending, const struct send_progress *p)
{
    if (!pending) {
        gc->send_stall_ms = 0;
        return 0;
    }
    if (gc->send_stall_ms == 0 || !same_progress(p, &gc->send_seen)) {
        gc->send_stall_ms = now;
        gc->send_seen = *p;
        return 0;
    }
    if (now - gc->send_stall_ms <= cfg->send_timeout_ms)
        return 0;
    abort_conn(gc, "response not taken by the client within timeouts.send_ms");
    return 1;
}

/* HTTP/1: a write h2o waits on; it moves when the peer acknowledges bytes or h2o writes again. */
static int check_send_http1(struct gw_conn *gc, const struct gw_config *cfg, uint64_t now)
{
    int writing = h2o_socket_is_writing(gc->sock);
    struct send_progress p = {0, gc->sock->bytes_written, 0, gc->completed};

    if (writing)
        p.acked = tcp_bytes_acked(gc->fd);
    return check_send(gc, cfg, now, writing, &p);
}

/*
 * HTTP/2: a response held by flow control moves only with its body (what
 * else the connection writes, PING answers say, does not count); a write
 * h2o waits on moves with the peer's acknowledgements.
 */
static int check_send_h2(struct gw_conn *gc, h2o_conn_t *conn, const struct gw_h2_view *h2, const struct gw_config *cfg,
                         uint64_t now)
{
    int writing = gc->sock != NULL && h2o_socket_is_writing(gc->sock);
    struct send_progress p = {0, 0, 0, gc->completed};

    if (h2->sending > 0)
        p.body = gw_h2_body_bytes_sent(conn) + 1; /* never 0: a change of kind is progress */
    else if (writing)
        p.acked = tcp_bytes_acked(gc->fd);
    return check_send(gc, cfg, now, writing || h2->sending > 0, &p);
}

/* Has the request head (up to its empty line) arrived?  Scans only what is new. */
static int head_complete(struct gw_conn *gc, const h2o_buffer_t *in)
{
    size_t from = gc->head_scanned > 2 ? gc->head_scanned - 2 : 0;

    for (size_t i = from; i + 1 < in->size; i++) {
        if (in->bytes[i] != '\n')
            continue;
        if (in->bytes[i + 1] == '\n' || (in->bytes[i + 1] == '\r' && i + 2 < in->size && in->bytes[i + 2] == '\n'))
            return 1;
    }
    gc->head_scanned = in->size;
    return 0;
}

/* HTTP/1, no request in flight: idle, or how far the next request has come. */
static void check_http1(struct gw_conn *gc, const struct gw_config *cfg, uint64_t now)
{
    h2o_socket_t *sock = gc->sock;

    if (sock->input->size == 0 && sock->bytes_read == gc->bytes_at_boundary) {
        if (now - gc->boundary_ms > cfg->idle_timeout_ms)
            close_http1(gc, "idle timeout");
        return;
    }
    if (gc->first_byte_ms == 0)
        gc->first_byte_ms = now;
    if (gc->head_done_ms == 0) {
        if (head_complete(gc, sock->input)) {
            gc->head_done_ms = now;
        } else {
            if (now - gc->first_byte_ms > cfg->header_timeout_ms)
                close_http1(gc, "request headers not received within timeouts.header_ms");
            return;
        }
    }
    if (now - gc->head_done_ms > cfg->body_timeout_ms)
        close_http1(gc, "request body not received within timeouts.body_ms");
}

static void check_h2(struct gw_conn *gc, h2o_conn_t *conn, const struct gw_config *cfg, uint64_t now)
{
    struct gw_h2_view h2;
    uint32_t open, busy;

    gw_h2_view(conn, &h2);
    open = h2.open;
    busy = h2.half_closed;
    if (check_send_h2(gc, conn, &h2, cfg, now))
        return; /* also when closing: h2o waits for a stuck response as long as it stays stuck */
    if (h2.closing)
        return; /* h2o is closing it already */
    if (h2_over_budget(gc, &h2)) {
        close_h2(gc, conn, H2O_HTTP2_ERROR_ENHANCE_YOUR_CALM, "too many reset streams");
        return;
    }
    /* a stream still receiving its headers or body, while requests are not queued behind the cap */
    if (open > busy && busy < cfg->http2_max_streams) {
        uint64_t since;
        if (gc->recv_since_ms == 0)
            gc->recv_since_ms = now;
        since = gc->recv_since_ms > gc->last_progress_ms ? gc->recv_since_ms : gc->last_progress_ms;
        if (now - since > cfg->body_timeout_ms) {
            close_h2(gc, conn, H2O_HTTP2_ERROR_NONE, "request not received within timeouts.body_ms");
            return;
        }
    } else {
        gc->recv_since_ms = 0;
    }
    if (open == 0 && gc->inflight == 0 && now - gc->last_activity > cfg->idle_timeout_ms)
        close_h2(gc, conn, H2O_HTTP2_ERROR_NONE, "idle timeout");
}

struct watch_h2 {
    struct gw_worker *w;
    uint64_t now;
};

static void watch_h2_conn(h2o_conn_t *conn, h2o_socket_t *sock, void *p)
{
    struct watch_h2 *a = p;
    struct gw_conn *gc = conn_of_sock(sock);

    if (gc == NULL || gc->condemned)
        return;
    gc->is_h2 = 1;
    check_h2(gc, conn, a->w->cfg, a->now);
}

/*
 * Memory of idle connections: OpenSSL keeps a 16.7 KB read and a 16.6 KB
 * write buffer per connection for its whole life.  At each tick a
 * connection with no request in flight gives them back (the next record
 * allocates them again): an idle connection holds none after one tick,
 * and a busy one pays at most one allocation per tick, not one per record
 * as SSL_MODE_RELEASE_BUFFERS would.
 */
static void release_idle_tls(struct gw_conn *gc)
{
    if (gc->sock != NULL && gc->inflight == 0)
        (void)gw_tls_release_buffers(gc->sock); /* cheap when there is nothing to give back */
}

static void on_watchdog(h2o_timeout_entry_t *entry)
{
    struct gw_worker *w = H2O_STRUCT_FROM_MEMBER(struct gw_worker, watchdog, entry);
    uint64_t now = h2o_now(w->ctx.loop);
    h2o_linklist_t *node;

    gw_worker_refresh(w);
    /* the layers above (the submissions queue's pump: server.c), inside the loop: a backend call
     * started between loop turns would begin a socket write there, which h2o 2.2.5 does not allow
     * (see audit_client.c) */
    if (w->server->on_tick != NULL)
        w->server->on_tick(w);
    __atomic_store_n(&w->beat_ms, now, __ATOMIC_RELAXED); /* moatctl status: this worker's loop turns */
    /* HTTP/2 first: h2o's own list holds only connections it has not freed */
    struct watch_h2 arg = {w, now};
    gw_h2_foreach(&w->ctx, watch_h2_conn, &arg);
    /* the rest: HTTP/1.1, or still in the TLS handshake (which h2o times out itself) */
    for (node = w->conns.next; node != &w->conns; node = node->next) {
        struct gw_conn *gc = H2O_STRUCT_FROM_MEMBER(struct gw_conn, link, node);
        if (gc->condemned) {
            if (now - gc->condemned_ms > GW_CONDEMNED_GRACE_MS)
                shut(gc);
        } else if (!gc->is_h2 && !check_send_http1(gc, w->cfg, now) && gc->inflight == 0 && !gc->upgraded) {
            check_http1(gc, w->cfg, now);
        }
        release_idle_tls(gc);
    }
    h2o_timeout_link(w->ctx.loop, &w->watchdog_timeout, &w->watchdog);
}

void gw_conn_watchdog_start(struct gw_worker *w)
{
    h2o_timeout_init(w->ctx.loop, &w->watchdog_timeout, GW_WATCHDOG_MS);
    __atomic_store_n(&w->beat_ms, h2o_now(w->ctx.loop), __ATOMIC_RELAXED);
    w->watchdog.cb = on_watchdog;
    h2o_timeout_link(w->ctx.loop, &w->watchdog_timeout, &w->watchdog);
}
