/*
 * audit_writer.c - the audit writer process's loop (the httpd logger
 * pattern): it alone holds the log, under its own uid; request handlers
 * reach it only through their socketpairs.
 *
 * Group commit: each pass reads every complete request waiting on every
 * socket, appends them all, makes them durable with one fdatasync, and only
 * then acknowledges them (but for records sent with AUDIT_WIRE_NOACK, which
 * nobody waits for: a pass that read only those writes them at once and
 * makes them durable with the next batch that is waited for, or within
 * DENIAL_SYNC_MS).  A record that could not be appended or made
 * durable is acknowledged as failed (seq 0), so the gateway refuses the
 * request rather than run it unaudited; the next pass tries again, so the
 * writer recovers by itself when the disk has room again.
 */
#include "audit_writer.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "audit_wire.h"

#define TICK_MS        1000
#define DENIAL_SYNC_MS 100 /* denial records are durable within this */
#define MAX_CLIENTS    512
#define MAX_BATCH      4096

struct client {
    int fd;
    int eof; /* the client closed its end: answer what it sent, then close */
    uint8_t *buf;
    size_t len, cap;
};

struct pending {
    int client;
    int noack; /* AUDIT_WIRE_NOACK: made durable, not acknowledged */
    uint64_t tag;
    uint64_t seq;
    uint32_t err;
};

static int send_all(int fd, const void *p, size_t len)
{
    size_t off = 0;
    while (off < len) {
        ssize_t n = write(fd, (const char *)p + off, len - off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN) {
            struct pollfd pfd = {fd, POLLOUT, 0};
            if (poll(&pfd, 1, 1000) <= 0)
                return -1;
            continue;
        }
        if (n <= 0)
            return -1;
        off += (size_t)n;
    }
    return 0;
}

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* Reads what a client sent; 0 on EOF or a protocol error. */
static int fill(struct client *c)
{
    if (c->cap - c->len < 65536) {
        size_t cap = c->cap ? c->cap * 2 : 131072;
        if (cap > sizeof(struct audit_wire_req) + AUDIT_WIRE_MAX_BODY + AUDIT_WIRE_MAX_PACKET + 65536)
            cap = sizeof(struct audit_wire_req) + AUDIT_WIRE_MAX_BODY + AUDIT_WIRE_MAX_PACKET + 65536;
        if (cap > c->cap) {
            uint8_t *g = realloc(c->buf, cap);
            if (g == NULL)
                return 0;
            c->buf = g;
            c->cap = cap;
        }
    }
    if (c->len == c->cap)
        return 1;
    ssize_t n = read(c->fd, c->buf + c->len, c->cap - c->len);
    if (n < 0)
        return errno == EINTR || errno == EAGAIN ? 1 : 0;
    if (n == 0)
        return 0;
    c->len += (size_t)n;
    return 1;
}

/* Does a client's buffer hold a whole request (or a bad header)? */
static int has_request(const struct client *c)
{
    struct audit_wire_req rq;
    if (c->len < sizeof(rq))
        return 0;
    memcpy(&rq, c->buf, sizeof(rq));
    if (rq.magic != AUDIT_WIRE_MAGIC || rq.body_len > AUDIT_WIRE_MAX_BODY || rq.packet_len > AUDIT_WIRE_MAX_PACKET)
        return 1;
    return c->len - sizeof(rq) >= (size_t)rq.body_len + rq.packet_len;
}

static void close_client(struct client *c, int *open_clients)
{
    close(c->fd);
    c->fd = -1;
    (*open_clients)--;
}

/* Takes complete requests off a client's buffer and appends them. */
static int drain(struct audit_log *l, struct client *c, int ci, struct pending *p, size_t *np, int *failing)
{
    size_t off = 0;
    while (c->len - off >= sizeof(struct audit_wire_req) && *np < MAX_BATCH) {
        struct audit_wire_req rq;
        memcpy(&rq, c->buf + off, sizeof(rq));
        if (rq.magic != AUDIT_WIRE_MAGIC || rq.body_len > AUDIT_WIRE_MAX_BODY || rq.packet_len > AUDIT_WIRE_MAX_PACKET ||
            (rq.flags & ~AUDIT_WIRE_NOACK) != 0) {
            fprintf(stderr, "moat-audit-writer: client %d: protocol error, closing it\n", ci);
            return -1;
        }
        size_t need = sizeof(rq) + rq.body_len + rq.packet_len;
        if (c->len - off < need)
            break;
        const char *body = (const char *)c->buf + off + sizeof(rq);
        const uint8_t *packet = rq.packet_len ? c->buf + off + sizeof(rq) + rq.body_len : NULL;
        struct pending *pe = &p[(*np)++];
        char err[256];
        pe->client = ci;
        pe->noack = (rq.flags & AUDIT_WIRE_NOACK) != 0;
        pe->tag = rq.tag;
        pe->err = 0;
        errno = 0;
        /* bodies in compact printable ASCII are spliced as they are; any
         * other is parsed and re-encoded (audit_log_append_text) */
        if ((pe->seq = audit_log_append_text(l, body, rq.body_len, packet, rq.packet_len, err, sizeof(err))) == 0) {
            pe->err = errno ? (uint32_t)errno : EIO;
            if (pe->err == EINVAL)
                fprintf(stderr, "moat-audit-writer: client %d: record refused: %s\n", ci, err);
            else if (!*failing)
                fprintf(stderr, "moat-audit-writer: %s\n", err);
            if (pe->err != EINVAL)
                *failing = 1;
        }
        off += need;
    }
    memmove(c->buf, c->buf + off, c->len - off);
    c->len -= off;
    return 0;
}

int audit_writer_run(struct audit_log *l, const int *fds, int nfds)
{
    struct client clients[MAX_CLIENTS];
    static struct pending batch[MAX_BATCH];
    int open_clients = 0, failing = 0, backlog = 0;
    uint64_t unsynced_since = 0; /* ms: denial records written but not yet synced, since */

    if (nfds > MAX_CLIENTS)
        nfds = MAX_CLIENTS;
    memset(clients, 0, sizeof(clients));
    for (int i = 0; i < nfds; i++) {
        clients[i].fd = fds[i];
        open_clients++;
    }
    while (open_clients > 0) {
        struct pollfd pfd[MAX_CLIENTS];
        for (int i = 0; i < nfds; i++)
            pfd[i] = (struct pollfd){clients[i].fd >= 0 && !clients[i].eof ? clients[i].fd : -1, POLLIN, 0};
        /* requests left in a buffer by a full batch need no new data */
        int wait_ms = TICK_MS;
        if (backlog) {
            wait_ms = 0;
        } else if (unsynced_since != 0) { /* what is left of DENIAL_SYNC_MS */
            uint64_t waited = now_ms() - unsynced_since;
            wait_ms = waited >= DENIAL_SYNC_MS ? 0 : (int)(DENIAL_SYNC_MS - waited);
        }
        int n = poll(pfd, (nfds_t)nfds, wait_ms);
        if (n < 0 && errno != EINTR)
            return -1;
        size_t np = 0;
        for (int i = 0; i < nfds; i++) {
            struct client *c = &clients[i];
            if (c->fd < 0)
                continue;
            if (n > 0 && pfd[i].revents && !c->eof && !fill(c))
                c->eof = 1;
            if (drain(l, c, i, batch, &np, &failing) != 0) {
                close_client(c, &open_clients);
                continue;
            }
        }
        char err[256];
        if (audit_log_tick(l, time(NULL), err, sizeof(err)) != 0 && !failing) {
            fprintf(stderr, "moat-audit-writer: %s\n", err);
            failing = 1;
        }
        int waited_for = 0;
        for (size_t i = 0; i < np && !waited_for; i++)
            waited_for = !batch[i].noack;
        uint64_t now = now_ms();
        if (np > 0 && !waited_for && (unsynced_since == 0 || now - unsynced_since < DENIAL_SYNC_MS)) {
            /* denials only, which nobody waits for: written now (the writer
             * dying loses none of them), made durable with the next batch
             * somebody waits for, or DENIAL_SYNC_MS from now */
            if (audit_log_write(l, err, sizeof(err)) != 0) {
                if (!failing)
                    fprintf(stderr, "moat-audit-writer: %s\n", err);
                failing = 1;
            }
            if (unsynced_since == 0)
                unsynced_since = now ? now : 1;
        } else if (np > 0 || (unsynced_since != 0 && now - unsynced_since >= DENIAL_SYNC_MS)) {
            unsynced_since = 0;
            /* one fdatasync for the whole batch, then the acknowledgements */
            if (audit_log_sync(l, err, sizeof(err)) != 0) {
                if (!failing)
                    fprintf(stderr, "moat-audit-writer: %s\n", err);
                failing = 1;
                for (size_t i = 0; i < np; i++)
                    if (batch[i].seq) {
                        batch[i].seq = 0;
                        batch[i].err = EIO;
                    }
            } else if (failing) {
                int all_ok = 1;
                for (size_t i = 0; i < np; i++)
                    all_ok &= batch[i].seq != 0;
                if (all_ok) {
                    fprintf(stderr, "moat-audit-writer: writing again\n");
                    failing = 0;
                }
            }
            /* the batch's acknowledgements, in order, one write per client */
            static struct audit_wire_ack acks[MAX_BATCH];
            for (int ci = 0; ci < nfds; ci++) {
                size_t na = 0;
                for (size_t i = 0; i < np; i++)
                    if (batch[i].client == ci && !batch[i].noack)
                        acks[na++] = (struct audit_wire_ack){batch[i].tag, batch[i].seq, batch[i].err, 0};
                struct client *c = &clients[ci];
                if (na > 0 && c->fd >= 0 && send_all(c->fd, acks, na * sizeof(acks[0])) != 0)
                    close_client(c, &open_clients);
            }
        }
        backlog = 0;
        for (int i = 0; i < nfds; i++) {
            struct client *c = &clients[i];
            if (c->fd < 0)
                continue;
            if (has_request(c))
                backlog = 1;
            else if (c->eof)
                close_client(c, &open_clients);
        }
    }
    for (int i = 0; i < nfds; i++)
        free(clients[i].buf);
    return 0;
}
