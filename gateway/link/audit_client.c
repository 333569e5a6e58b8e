/*
 * audit_client.c - a worker's connection to the audit writer, on the
 * worker's own h2o loop (never blocking it).
 *
 * Records go out in order on one stream socket (audit/audit_wire.h); the
 * writer acknowledges them in the same order once they are durable, so a
 * FIFO of waiting entries pairs each acknowledgement with its request.
 * Records nobody waits for (denials) go with AUDIT_WIRE_NOACK: no entry,
 * no acknowledgement, no wake-up; and they may wait GW_AUDIT_DENIAL_DELAY_MS
 * to go out together.  An
 * entry whose request went away is cancelled (its callback is dropped but
 * it stays in the FIFO to absorb its acknowledgement).  No acknowledgement
 * within GW_AUDIT_ACK_TIMEOUT_MS, a refused record, or a lost writer all
 * report failure: the caller refuses the request (fail closed).
 *
 * Reading an execution back (gw_audit_fetch) takes the same road: a query
 * (AUDIT_WIRE_QUERY) queued in order with the records, its entry in the
 * same FIFO, its ack in order with theirs; a found execution's ack carries
 * len bytes of answer, which stay in the socket's buffer until they have
 * all come (at most AUDIT_WIRE_MAX_ANSWER; more is a protocol error and
 * the writer is let go).  A cancelled fetch absorbs its answer unread.
 *
 * Every write to the writer starts inside the loop: from h2o's callbacks
 * (on_write) or from a timer (on_zero, on_delay), never from the worker's
 * code between loop turns (gw_audit_flush runs there).  libh2o 2.2.5's
 * evloop polls a socket for writing while it has a write callback when the
 * turn begins; a write that completes at once leaves its callback set until
 * that turn's pending callbacks run, so one started between turns keeps the
 * socket polled for writing after the callback is gone, and the next
 * EPOLLOUT aborts the process (write_pending's assertion).
 */
#include "audit_client.h"
#include "common/metrics.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "audit_wire.h"
#include "log.h"

struct gw_audit_entry {
    struct gw_audit_entry *next;
    uint64_t tag;
    uint64_t deadline_ms;
    gw_audit_cb cb;             /* a record's; NULL once called or cancelled */
    gw_audit_fetch_cb fetch_cb; /* a query's; likewise */
    int query;                  /* sent with AUDIT_WIRE_QUERY: its ack may carry an answer */
    void *arg;
};

/* The entry's callback, with failure; never again. */
static void entry_fail(struct gw_audit_entry *e)
{
    gw_audit_cb cb = e->cb;
    gw_audit_fetch_cb fetch_cb = e->fetch_cb;
    e->cb = NULL;
    e->fetch_cb = NULL;
    if (cb != NULL || fetch_cb != NULL)
        gw_metric_add(&gw_metrics_here()->audit_failed, 1);
    if (cb != NULL)
        cb(e->arg, 0, 0);
    else if (fetch_cb != NULL)
        fetch_cb(e->arg, -1, NULL, 0, NULL, 0);
}

/* A batch's buffer starts at 4 KiB (many records, one allocation) and
 * doubles from there. */
static int out_append(struct moat_buf *b, const void *p, size_t n)
{
    if (b->cap == 0 && moat_buf_reserve(b, n > 4096 ? n : 4096) != 0)
        return -1;
    return moat_buf_append(b, p, n);
}

static uint64_t loop_now(struct gw_audit *a)
{
    return h2o_now(a->loop);
}

/* The oldest record still waiting for its ack was sent when (loop time; 0
 * none): moat_audit_lag_seconds.  Called wherever the head changes. */
static void note_head(struct gw_audit *a)
{
    __atomic_store_n(&a->oldest_ms, a->head != NULL ? a->head->deadline_ms - GW_AUDIT_ACK_TIMEOUT_MS : 0, __ATOMIC_RELAXED);
}

static void fail_all(struct gw_audit *a, const char *why)
{
    struct gw_audit_entry *e = a->head;
    if (e != NULL)
        log_warnx("%s: %s: the waiting record(s) fail", __func__, why);
    a->head = a->tail = NULL;
    note_head(a);
    while (e != NULL) {
        struct gw_audit_entry *next = e->next;
        entry_fail(e);
        free(e);
        e = next;
    }
    if (h2o_timeout_is_linked(&a->timer))
        h2o_timeout_unlink(&a->timer);
}

static void disconnect(struct gw_audit *a, const char *why)
{
    if (h2o_timeout_is_linked(&a->delay_timer))
        h2o_timeout_unlink(&a->delay_timer);
    if (h2o_timeout_is_linked(&a->zero_timer))
        h2o_timeout_unlink(&a->zero_timer);
    a->out_waited = 0;
    if (a->sock != NULL) {
        a->sock->data = NULL;
        h2o_socket_close(a->sock);
        __atomic_store_n(&a->sock, NULL, __ATOMIC_RELAXED); /* a scrape and moatctl status read it */
    }
    a->out.len = 0;
    a->writing = 0;
    fail_all(a, why);
}

static void flush(struct gw_audit *a);

static void on_write(h2o_socket_t *sock, const char *err)
{
    struct gw_audit *a = sock->data;
    if (a == NULL)
        return;
    a->writing = 0;
    moat_buf_free(&a->flight);
    if (err != NULL) {
        disconnect(a, "write to the audit writer failed");
        return;
    }
    flush(a);
}

/* Starts writing what has accumulated, unless a write is in flight. */
static void flush(struct gw_audit *a)
{
    if (a->writing || a->out.len == 0 || a->sock == NULL)
        return;
    a->flight = a->out;
    memset(&a->out, 0, sizeof(a->out));
    a->out_waited = 0;
    if (h2o_timeout_is_linked(&a->delay_timer))
        h2o_timeout_unlink(&a->delay_timer);
    h2o_iovec_t buf = h2o_iovec_init(a->flight.data, a->flight.len);
    a->writing = 1;
    h2o_socket_write(a->sock, &buf, 1, on_write);
}

/* A query's answer to its entry: found (the answer's bytes, checked
 * against their header), not found, or failed.  -1: a protocol error. */
static int answer_fetch(struct gw_audit_entry *e, const struct audit_wire_ack *ack, const uint8_t *answer)
{
    struct audit_wire_found found;
    gw_audit_fetch_cb cb = e->fetch_cb;
    e->fetch_cb = NULL;
    if (ack->len == 0) {
        if (cb != NULL)
            cb(e->arg, ack->err == ENOENT ? 0 : -1, NULL, 0, NULL, 0);
        return ack->err == 0 ? -1 : 0; /* found, without an answer */
    }
    if (ack->err != 0 || ack->len < sizeof(found))
        return -1;
    memcpy(&found, answer, sizeof(found));
    if ((uint64_t)found.records_len + found.packet_len + sizeof(found) != ack->len)
        return -1;
    const uint8_t *packet = found.packet_len ? answer + sizeof(found) + found.records_len : NULL;
    if (cb != NULL)
        cb(e->arg, 1, (const char *)answer + sizeof(found), found.records_len, packet, found.packet_len);
    return 0;
}

/* The next ack (and its answer) when all of it has come: 1 taken, 0 wait
 * for more, -1 a protocol error (why set). */
static int take_ack(struct gw_audit *a, h2o_socket_t *sock, const char **why)
{
    struct audit_wire_ack ack;
    if (sock->input->size < sizeof(ack))
        return 0;
    memcpy(&ack, sock->input->bytes, sizeof(ack));
    struct gw_audit_entry *e = a->head;
    *why = "the audit writer acknowledged out of order";
    if (e == NULL || e->tag != ack.tag)
        return -1;
    *why = "the audit writer answered out of bounds";
    if (ack.len > AUDIT_WIRE_MAX_ANSWER || (ack.len > 0 && !e->query))
        return -1;
    if (sock->input->size - sizeof(ack) < ack.len)
        return 0;
    a->head = e->next;
    if (a->head == NULL)
        a->tail = NULL;
    note_head(a);
    int rc = 0;
    if (e->query)
        rc = answer_fetch(e, &ack, (const uint8_t *)sock->input->bytes + sizeof(ack));
    else if (e->cb != NULL) {
        if (ack.seq == 0 || ack.err != 0)
            gw_metric_add(&gw_metrics_here()->audit_failed, 1);
        e->cb(e->arg, ack.seq != 0 && ack.err == 0, ack.seq);
    }
    free(e);
    h2o_buffer_consume(&sock->input, sizeof(ack) + ack.len);
    return rc == 0 ? 1 : -1;
}

static void on_read(h2o_socket_t *sock, const char *err)
{
    struct gw_audit *a = sock->data;
    const char *why = NULL;
    int rc;
    if (a == NULL)
        return;
    while ((rc = take_ack(a, sock, &why)) == 1)
        ;
    if (rc < 0) {
        disconnect(a, why);
        return;
    }
    if (err != NULL)
        disconnect(a, "the audit writer closed the connection");
}

static void on_timer(h2o_timeout_entry_t *entry)
{
    struct gw_audit *a = (struct gw_audit *)((char *)entry - offsetof(struct gw_audit, timer));
    uint64_t now = loop_now(a);
    int expired = 0;
    for (struct gw_audit_entry *e = a->head; e != NULL; e = e->next) {
        if (e->deadline_ms > now)
            break;
        if (e->cb != NULL || e->fetch_cb != NULL) {
            entry_fail(e); /* stays queued to absorb a late acknowledgement */
            expired++;
        }
    }
    if (expired)
        log_warnx("%s: %d record(s) not acknowledged within %d ms: requests refused", __func__, expired, GW_AUDIT_ACK_TIMEOUT_MS);
    if (a->head != NULL)
        h2o_timeout_link(a->loop, &a->timeout, &a->timer);
}

static void on_delay(h2o_timeout_entry_t *entry)
{
    flush((struct gw_audit *)((char *)entry - offsetof(struct gw_audit, delay_timer)));
}

static void on_zero(h2o_timeout_entry_t *entry)
{
    flush((struct gw_audit *)((char *)entry - offsetof(struct gw_audit, zero_timer)));
}

/* Writes what has accumulated from the loop's next timer phase (this turn's,
 * when called from a callback): see the theory above. */
static void flush_soon(struct gw_audit *a)
{
    if (a->sock != NULL && !h2o_timeout_is_linked(&a->zero_timer))
        h2o_timeout_link(a->loop, &a->zero, &a->zero_timer);
}

void gw_audit_init(struct gw_audit *a, h2o_loop_t *loop)
{
    memset(a, 0, sizeof(*a));
    a->loop = loop;
    a->fd = -1;
    h2o_timeout_init(loop, &a->timeout, GW_AUDIT_ACK_TIMEOUT_MS);
    a->timer.cb = on_timer;
    h2o_timeout_init(loop, &a->delay, GW_AUDIT_DENIAL_DELAY_MS);
    a->delay_timer.cb = on_delay;
    h2o_timeout_init(loop, &a->zero, 0);
    a->zero_timer.cb = on_zero;
}

void gw_audit_dispose(struct gw_audit *a)
{
    disconnect(a, "the audit client was disposed");
    h2o_timeout_dispose(a->loop, &a->timeout);
    h2o_timeout_dispose(a->loop, &a->delay);
    h2o_timeout_dispose(a->loop, &a->zero);
}

int gw_audit_attach(struct gw_audit *a, int fd)
{
    disconnect(a, "the audit writer was replaced");
    if (fd < 0)
        return -1;
    int flags = fcntl(fd, F_GETFL);
    if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) != 0 || fcntl(fd, F_SETFD, FD_CLOEXEC) != 0)
        return -1;
    __atomic_store_n(&a->sock, h2o_evloop_socket_create(a->loop, fd, 0), __ATOMIC_RELAXED);
    if (a->sock == NULL)
        return -1;
    a->sock->data = a;
    a->fd = fd;
    a->enabled = 1;
    h2o_socket_read_start(a->sock, on_read);
    return 0;
}

/* The end of a submission: written at the end of this loop turn
 * (gw_audit_flush), together with every other record of the turn. */
static void submitted(struct gw_audit *a)
{
    if (a->out.len >= GW_AUDIT_FLUSH_BYTES)
        flush_soon(a);
}

static void note_dropped(struct gw_audit *a)
{
    /* a denial's record (the request was refused anyway): say so, at most
     * once a second per worker */
    __atomic_store_n(&a->dropped, a->dropped + 1, __ATOMIC_RELAXED); /* read by a scrape */
    uint64_t now = loop_now(a);
    if (now - a->last_drop_log_ms >= 1000) {
        log_warnx("%s: audit writer unavailable: %llu denial record(s) not written", __func__, (unsigned long long)a->dropped);
        a->last_drop_log_ms = now;
    }
}

/* Appends rq, body, and the packet written in place by its filler. */
static int append_request(struct gw_audit *a, const struct audit_wire_req *rq, const char *body,
                          const struct gw_audit_filler *packet)
{
    size_t at = a->out.len;

    if (out_append(&a->out, rq, sizeof(*rq)) != 0 || out_append(&a->out, body, rq->body_len) != 0)
        goto fail;
    if (rq->packet_len > 0) {
        if (moat_buf_reserve(&a->out, rq->packet_len) != 0 ||
            packet->fill(packet->arg, a->out.data + a->out.len, rq->packet_len) != 0)
            goto fail;
        a->out.len += rq->packet_len;
    }
    return 0;
fail:
    a->out.len = at; /* nothing of it was queued */
    return -1;
}

/* Queues rq (its tag set here), body and packet with an entry waiting for
 * its ack: the entry, or NULL when out of memory (the writer is let go;
 * nothing was queued). */
static struct gw_audit_entry *queue_waited(struct gw_audit *a, struct audit_wire_req *rq, const char *body,
                                           const struct gw_audit_filler *packet)
{
    struct gw_audit_entry *e = calloc(1, sizeof(*e));
    if (e == NULL)
        return NULL;
    rq->tag = ++a->next_tag;
    if (append_request(a, rq, body, packet) != 0) {
        free(e);
        disconnect(a, "out of memory");
        return NULL;
    }
    a->out_waited = 1;
    e->tag = rq->tag;
    e->deadline_ms = loop_now(a) + GW_AUDIT_ACK_TIMEOUT_MS;
    if (a->tail)
        a->tail->next = e;
    else
        a->head = e;
    a->tail = e;
    note_head(a);
    if (!h2o_timeout_is_linked(&a->timer))
        h2o_timeout_link(a->loop, &a->timeout, &a->timer);
    return e;
}

static int copy_packet(void *arg, uint8_t *dst, size_t len)
{
    memcpy(dst, arg, len);
    return 0;
}

struct gw_audit_entry *gw_audit_submit(struct gw_audit *a, const char *body, size_t body_len, const void *packet, size_t packet_len,
                                       gw_audit_cb cb, void *arg)
{
    struct gw_audit_filler f = {packet_len, copy_packet, (void *)(uintptr_t)packet};

    return gw_audit_submit_filled(a, body, body_len, packet_len > 0 ? &f : NULL, cb, arg);
}

struct gw_audit_entry *gw_audit_submit_filled(struct gw_audit *a, const char *body, size_t body_len,
                                              const struct gw_audit_filler *packet, gw_audit_cb cb, void *arg)
{
    size_t packet_len = packet != NULL ? packet->len : 0;
    struct audit_wire_req rq = {AUDIT_WIRE_MAGIC, (uint32_t)body_len, (uint32_t)packet_len, 0, 0};
    struct gw_audit_entry *e;

    if (a->sock == NULL || body_len > AUDIT_WIRE_MAX_BODY || packet_len > AUDIT_WIRE_MAX_PACKET) {
        if (cb != NULL)
            cb(arg, 0, 0);
        else
            note_dropped(a);
        return NULL;
    }
    if (cb == NULL) {
        /* nobody waits for it: no entry, and no acknowledgement */
        rq.flags = AUDIT_WIRE_NOACK;
        if (append_request(a, &rq, body, packet) != 0) {
            disconnect(a, "out of memory");
            note_dropped(a);
            return NULL;
        }
        submitted(a);
        return NULL;
    }
    if ((e = queue_waited(a, &rq, body, packet)) == NULL) {
        cb(arg, 0, 0);
        return NULL;
    }
    e->cb = cb;
    e->arg = arg;
    submitted(a);
    return e;
}

struct gw_audit_entry *gw_audit_fetch(struct gw_audit *a, const char *tenant, const char *request_id, gw_audit_fetch_cb cb,
                                      void *arg)
{
    struct audit_wire_req rq = {AUDIT_WIRE_MAGIC, 0, 0, AUDIT_WIRE_QUERY, 0};
    struct gw_audit_entry *e = NULL;
    json_t *q = json_pack("{s:s, s:s}", "tenant", tenant, "request_id", request_id);
    char *body = q ? json_dumps(q, JSON_COMPACT | JSON_ENSURE_ASCII) : NULL;
    json_decref(q);
    if (body != NULL && a->sock != NULL && strlen(body) <= AUDIT_WIRE_MAX_BODY) {
        rq.body_len = (uint32_t)strlen(body);
        e = queue_waited(a, &rq, body, NULL);
    }
    free(body);
    if (e == NULL) {
        cb(arg, -1, NULL, 0, NULL, 0);
        return NULL;
    }
    e->query = 1;
    e->fetch_cb = cb;
    e->arg = arg;
    submitted(a);
    return e;
}

void gw_audit_flush(struct gw_audit *a)
{
    if (a->out_waited || a->out.len >= GW_AUDIT_FLUSH_BYTES)
        flush_soon(a);
    else if (a->out.len > 0 && a->sock != NULL && !h2o_timeout_is_linked(&a->delay_timer))
        h2o_timeout_link(a->loop, &a->delay, &a->delay_timer);
}

void gw_audit_flush_all(struct gw_audit *a)
{
    if (a->out.len > 0)
        flush_soon(a);
}

int gw_audit_connected(const struct gw_audit *a)
{
    return a->sock != NULL;
}

int gw_audit_sending(const struct gw_audit *a)
{
    return a->sock != NULL && (a->writing || a->out.len > 0);
}

void gw_audit_cancel(struct gw_audit_entry *e)
{
    if (e != NULL) {
        e->cb = NULL;
        e->fetch_cb = NULL;
    }
}
