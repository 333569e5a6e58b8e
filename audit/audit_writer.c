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
 *
 * Disk reserve: while the audit filesystem has less than reserve_bytes
 * free, records nobody waits for (AUDIT_WIRE_NOACK: denials, which a
 * client without any credential can cause at will) are not written but
 * counted, so that they cannot fill the disk that records somebody waits
 * for (an execution's decision and result) need.  Those are still
 * written, to the last byte.  The count goes into the log as a "dropped"
 * record (with the first and last drop's time) once free space is back
 * above the reserve (by RESUME_ROOM, so that a few freed bytes do not make
 * it flap), every DROP_REPORT_MS while it is not, and at the end;
 * each such record is said on stderr too.  Free space is asked of statvfs
 * once per pass that has such a record, then counted down by what the pass
 * appends.
 *
 * Reading back and reviews (audit_index.c): the writer indexes the
 * durable records of executions (once the batch's fdatasync succeeded),
 * answers a worker's AUDIT_WIRE_QUERY for one execution of one tenant
 * after its batch is durable, in order with the acks (the records are read
 * back from the files, each checked against the hash it was written with,
 * and the packet against its record), and writes a review only when it
 * names a result record of an execution of its own tenant (refused
 * otherwise, like any bad body).  An answer is sent whole, blocking, like
 * the acks: a worker reads its socket on every loop turn.
 *
 * A pass, in order: wait_for_clients (poll; no longer than until the next
 * checkpoint is due), read_requests (every complete request appended or
 * dropped, up to a batch), audit_log_tick (the log's timed duties: a
 * checkpoint within checkpoint_delay_ms of the first record it will
 * cover), commit (denials written, or the batch synced and acknowledged),
 * report_drops (the reserve's count recorded when due), settle_clients
 * (backlog noted, closed clients let go).
 */
#include "audit_writer.h"

#include "audit_index.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "moat_io.h"
#include "wire/audit_wire.h"

#define TICK_MS        1000
#define DENIAL_SYNC_MS 100 /* denial records are durable within this */
#define MAX_CLIENTS    512
#define MAX_BATCH      4096
#define DROP_REPORT_MS 10000 /* a "dropped" record at least this often while the reserve keeps records out */
#define LINE_OVERHEAD  512   /* a line's bytes besides its body: seq, time, prev, mac, a packet's place */
#define RESUME_ROOM    65536 /* dropping ends with this much free above the reserve, not at the first byte */

struct client {
    int fd;
    int eof; /* the client closed its end: answer what it sent, then close */
    uint8_t *buf;
    size_t len, cap;
};

struct pending {
    int client;
    int noack; /* AUDIT_WIRE_NOACK: made durable, not acknowledged */
    int query; /* AUDIT_WIRE_QUERY: answered after the batch is durable */
    uint64_t tag;
    uint64_t seq;
    uint32_t err;
    struct audit_index_fields f; /* the record's (indexed once durable), or the query's */
    struct audit_line_ref ref;   /* where the record's line is */
};

/* The disk reserve's account (see the top of the file). */
struct reserve {
    int known;                    /* room was measured in this pass */
    int64_t room;                 /* bytes free above the reserve, less what the pass appended */
    int below;                    /* dropping: said once, until there is room again */
    uint64_t dropped;             /* records not written since the last "dropped" record */
    struct timespec since, until; /* the first and the last of them */
    uint64_t reported_ms;         /* when the last "dropped" record was written, or dropping began */
};

/* The writer's state across passes.  Large: allocated, not on the stack. */
struct writer {
    struct audit_log *l;
    struct audit_index *ix;
    struct client clients[MAX_CLIENTS];
    int nclients, open_clients;
    int failing;             /* the log is failing: said once, until it writes again */
    int backlog;             /* a full batch left requests in a buffer */
    uint64_t unsynced_since; /* ms: denial records written but not yet synced, since */
    struct reserve rs;
    struct pending batch[MAX_BATCH];
    size_t np; /* requests in this pass's batch */
    struct audit_wire_ack acks[MAX_BATCH];
};

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

static void close_client(struct writer *w, struct client *c)
{
    close(c->fd);
    c->fd = -1;
    w->open_clients--;
}

/* The log failed (err): said once, until it writes again. */
static void note_failure(struct writer *w, const char *err)
{
    if (!w->failing)
        fprintf(stderr, "moat-audit-writer: %s\n", err);
    w->failing = 1;
}

/* ---- one pass: wait ------------------------------------------------------------------- */

/* How long poll may wait: not at all with requests still buffered, what is
 * left of DENIAL_SYNC_MS with denial records unsynced, no longer than until
 * a checkpoint is due, else a tick. */
static int wait_ms(const struct writer *w)
{
    int ms = TICK_MS;
    if (w->backlog)
        return 0;
    if (w->unsynced_since != 0) {
        uint64_t waited = now_ms() - w->unsynced_since;
        ms = waited >= DENIAL_SYNC_MS ? 0 : (int)(DENIAL_SYNC_MS - waited);
    }
    int64_t ckpt = audit_log_checkpoint_in(w->l);
    if (ckpt >= 0 && ckpt < ms)
        ms = (int)ckpt;
    return ms;
}

static int wait_for_clients(struct writer *w, struct pollfd *pfd)
{
    for (int i = 0; i < w->nclients; i++) {
        const struct client *c = &w->clients[i];
        pfd[i] = (struct pollfd){c->fd >= 0 && !c->eof ? c->fd : -1, POLLIN, 0};
    }
    return poll(pfd, (nfds_t)w->nclients, wait_ms(w));
}

/* ---- the disk reserve ------------------------------------------------------------- */

/* Bytes free above the reserve, from statvfs (once a pass).  A filesystem
 * that cannot say is taken to have room: the record is written. */
static void measure_room(struct writer *w)
{
    uint64_t free_bytes;
    struct reserve *rs = &w->rs;
    rs->known = 1;
    if (audit_log_free_bytes(w->l, &free_bytes) != 0)
        rs->room = INT64_MAX;
    else
        rs->room =
            (int64_t)(free_bytes > (uint64_t)INT64_MAX ? (uint64_t)INT64_MAX : free_bytes) - (int64_t)w->l->cfg.reserve_bytes;
}

/* Does the reserve keep this request out?  Only records nobody waits for:
 * when writing it would leave less than the reserve free, and then until
 * RESUME_ROOM is free above the reserve. */
static int keep_out(struct writer *w, const struct audit_wire_req *rq)
{
    struct reserve *rs = &w->rs;
    if (!(rq->flags & AUDIT_WIRE_NOACK) || w->l->cfg.reserve_bytes == 0)
        return 0;
    if (!rs->known)
        measure_room(w);
    if (rs->below)
        return rs->room < RESUME_ROOM;
    return rs->room < (int64_t)rq->body_len + (int64_t)rq->packet_len + LINE_OVERHEAD;
}

/* A record kept out: counted, and the start of dropping said once. */
static void count_drop(struct writer *w)
{
    struct reserve *rs = &w->rs;
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    if (rs->dropped++ == 0)
        rs->since = now;
    rs->until = now;
    if (!rs->below) {
        rs->below = 1;
        rs->reported_ms = now_ms();
        fprintf(stderr,
                "moat-audit-writer: disk reserve: less than %llu bytes free on the audit filesystem; records nobody waits "
                "for (denials) are counted, not written, until there is room\n",
                (unsigned long long)w->l->cfg.reserve_bytes);
    }
}

/* What a pass appended comes off the room it measured. */
static void use_room(struct writer *w, const struct audit_wire_req *rq)
{
    if (w->rs.known)
        w->rs.room -= (int64_t)rq->body_len + (int64_t)rq->packet_len + LINE_OVERHEAD;
}

/*
 * The count of dropped records into the log, as a "dropped" record made
 * durable at once: when there is room again (dropping ends), every
 * DROP_REPORT_MS while there is not, and at the end (closing).  Runs
 * between batches (after commit), so syncing here commits nobody's batch.
 * A record that did not reach the log keeps the count for the next try.
 */
static void report_drops(struct writer *w, int closing)
{
    struct reserve *rs = &w->rs;
    char err[256];
    if (rs->dropped == 0 && !rs->below)
        return;
    measure_room(w);
    rs->known = 0;
    int room = rs->room >= RESUME_ROOM;
    if (rs->dropped == 0) { /* counted already, by the last periodic record */
        if (room) {
            rs->below = 0;
            fprintf(stderr, "moat-audit-writer: disk reserve: there is room again\n");
        }
        return;
    }
    uint64_t now = now_ms();
    if (!closing && !room && now - rs->reported_ms < DROP_REPORT_MS)
        return;
    rs->reported_ms = now;
    uint64_t seq = audit_log_dropped(w->l, rs->dropped, &rs->since, &rs->until, err, sizeof(err));
    if (seq == 0 || audit_log_sync(w->l, err, sizeof(err)) != 0)
        note_failure(w, err);
    else
        w->unsynced_since = 0;
    if (seq == 0 || w->l->seq < seq) /* not in the log (a failed write is taken back): the count waits */
        return;
    fprintf(stderr, "moat-audit-writer: disk reserve: %llu record(s) nobody waited for were not written; %s\n",
            (unsigned long long)rs->dropped,
            room ? "there is room again" : "still below the reserve (a \"dropped\" record counts them)");
    rs->dropped = 0;
    if (room)
        rs->below = 0;
}

/* ---- one pass: append ------------------------------------------------------------- */

/* Appends one request (rq, its body and packet) to the log and the batch,
 * or counts it when the reserve keeps it out. */
/* A query's body: {"tenant":"...","request_id":"..."}, nothing else. */
static int parse_query(const char *body, size_t len, struct audit_index_fields *f)
{
    json_t *j = json_loadb(body, len, JSON_REJECT_DUPLICATES, NULL);
    const char *t = json_string_value(json_object_get(j, "tenant"));
    const char *r = json_string_value(json_object_get(j, "request_id"));
    int ok = json_is_object(j) && json_object_size(j) == 2 && t != NULL && r != NULL && t[0] && r[0] &&
             strlen(t) <= AUDIT_INDEX_MAX_ID && strlen(r) <= AUDIT_INDEX_MAX_ID;
    memset(f, 0, sizeof(*f));
    if (ok) {
        strcpy(f->tenant, t);
        strcpy(f->request_id, r);
    }
    json_decref(j);
    return ok ? 0 : -1;
}

/* A review is written only when it names a result of its own tenant's
 * execution (audit_index_check_review); 0, or -1 with pe->err set. */
static int admit_review(struct writer *w, int ci, struct pending *pe, const char *body, size_t len)
{
    char err[256];
    if (strcmp(pe->f.type, "review") != 0)
        return 0;
    errno = EINVAL;
    if (!pe->noack && audit_index_check_review(w->ix, body, len, err, sizeof(err)) == 0)
        return 0;
    if (pe->noack)
        snprintf(err, sizeof(err), "a review is acknowledged, never sent with AUDIT_WIRE_NOACK");
    pe->err = (uint32_t)errno;
    fprintf(stderr, "moat-audit-writer: client %d: review refused: %s\n", ci, err);
    return -1;
}

static void append_request(struct writer *w, int ci, const struct audit_wire_req *rq, const uint8_t *data)
{
    const char *body = (const char *)data;
    const uint8_t *packet = rq->packet_len ? data + rq->body_len : NULL;
    char err[256];
    int query = (rq->flags & AUDIT_WIRE_QUERY) != 0;
    if (!query && keep_out(w, rq)) {
        count_drop(w);
        return;
    }
    if (!query)
        use_room(w, rq);
    struct pending *pe = &w->batch[w->np++];
    pe->client = ci;
    pe->noack = (rq->flags & AUDIT_WIRE_NOACK) != 0;
    pe->query = query;
    pe->tag = rq->tag;
    pe->err = 0;
    pe->seq = 0;
    if (query) {
        if (rq->packet_len != 0 || parse_query(body, rq->body_len, &pe->f) != 0)
            pe->err = EINVAL;
        return;
    }
    (void)audit_index_fields(body, rq->body_len, &pe->f);
    if (admit_review(w, ci, pe, body, rq->body_len) != 0)
        return;
    errno = 0;
    /* bodies in compact printable ASCII are spliced as they are; any
     * other is parsed and re-encoded (audit_log_append_text) */
    if ((pe->seq = audit_log_append_text(w->l, body, rq->body_len, packet, rq->packet_len, err, sizeof(err))) != 0) {
        pe->ref = w->l->record_line;
        return;
    }
    pe->err = errno ? (uint32_t)errno : EIO;
    if (pe->err == EINVAL)
        fprintf(stderr, "moat-audit-writer: client %d: record refused: %s\n", ci, err);
    else
        note_failure(w, err);
}

/* Takes complete requests off a client's buffer and appends them.  -1: a
 * protocol error (the client is to be closed). */
static int drain(struct writer *w, int ci)
{
    struct client *c = &w->clients[ci];
    size_t off = 0;
    while (c->len - off >= sizeof(struct audit_wire_req) && w->np < MAX_BATCH) {
        struct audit_wire_req rq;
        memcpy(&rq, c->buf + off, sizeof(rq));
        if (rq.magic != AUDIT_WIRE_MAGIC || rq.body_len > AUDIT_WIRE_MAX_BODY || rq.packet_len > AUDIT_WIRE_MAX_PACKET ||
            (rq.flags & ~(AUDIT_WIRE_NOACK | AUDIT_WIRE_QUERY)) != 0 || rq.flags == (AUDIT_WIRE_NOACK | AUDIT_WIRE_QUERY)) {
            fprintf(stderr, "moat-audit-writer: client %d: protocol error, closing it\n", ci);
            return -1;
        }
        size_t need = sizeof(rq) + rq.body_len + rq.packet_len;
        if (c->len - off < need)
            break;
        append_request(w, ci, &rq, c->buf + off + sizeof(rq));
        off += need;
    }
    if (off > 0) { /* (a client not heard from yet has no buffer at all) */
        memmove(c->buf, c->buf + off, c->len - off);
        c->len -= off;
    }
    return 0;
}

/* Reads what the clients sent (n: poll's answer) and appends every
 * complete request, up to a batch. */
static void read_requests(struct writer *w, const struct pollfd *pfd, int n)
{
    w->np = 0;
    w->rs.known = 0;
    for (int i = 0; i < w->nclients; i++) {
        struct client *c = &w->clients[i];
        if (c->fd < 0)
            continue;
        if (n > 0 && pfd[i].revents && !c->eof && !fill(c))
            c->eof = 1;
        if (drain(w, i) != 0)
            close_client(w, c);
    }
}

/* ---- one pass: commit, acknowledge ---------------------------------------------------------- */

/* Does anybody wait for a request of the batch? */
static int batch_waited_for(const struct writer *w)
{
    for (size_t i = 0; i < w->np; i++)
        if (!w->batch[i].noack)
            return 1;
    return 0;
}

/* Denials only, which nobody waits for: written now (the writer dying
 * loses none of them), made durable with the next batch somebody waits
 * for, or DENIAL_SYNC_MS from now. */
static void write_denials(struct writer *w, uint64_t now)
{
    char err[256];
    if (audit_log_write(w->l, err, sizeof(err)) != 0)
        note_failure(w, err);
    if (w->unsynced_since == 0)
        w->unsynced_since = now ? now : 1;
}

/* A query's ack and, when found, its answer (audit_wire.h), in one go. */
static int answer_query(struct writer *w, int fd, const struct pending *pe)
{
    struct audit_found found;
    struct audit_wire_ack ack = {pe->tag, 0, pe->err, 0};
    struct audit_wire_found head = {0, 0};
    char err[256];
    int rc = pe->err ? 0 : audit_index_find(w->ix, w->l->dirfd, pe->f.tenant, pe->f.request_id, &found, err, sizeof(err));
    if (rc < 0) {
        fprintf(stderr, "moat-audit-writer: execution %s not served: %s\n", pe->f.request_id, err);
        ack.err = EIO;
    } else if (rc == 0 && !pe->err) {
        ack.err = ENOENT;
    } else if (rc == 1) {
        head = (struct audit_wire_found){(uint32_t)found.records_len, (uint32_t)found.packet_len};
        ack.len = (uint32_t)(sizeof(head) + found.records_len + found.packet_len);
    }
    int sent = moat_send_full(fd, &ack, sizeof(ack));
    if (sent == 0 && rc == 1)
        sent = moat_send_full(fd, &head, sizeof(head)) != 0 || moat_send_full(fd, found.records, found.records_len) != 0 ||
                       (found.packet_len && moat_send_full(fd, found.packet, found.packet_len) != 0)
                   ? -1
                   : 0;
    if (rc == 1)
        audit_found_free(&found);
    return sent;
}

/* One client's acknowledgements, in order: as few writes as the queries
 * among them allow. */
static int send_client_acks(struct writer *w, int ci)
{
    int fd = w->clients[ci].fd;
    size_t na = 0;
    for (size_t i = 0; i < w->np; i++) {
        const struct pending *pe = &w->batch[i];
        if (pe->client != ci || pe->noack)
            continue;
        if (!pe->query) {
            w->acks[na++] = (struct audit_wire_ack){pe->tag, pe->seq, pe->err, 0};
            continue;
        }
        if ((na > 0 && moat_send_full(fd, w->acks, na * sizeof(w->acks[0])) != 0) || answer_query(w, fd, pe) != 0)
            return -1;
        na = 0;
    }
    return na > 0 ? moat_send_full(fd, w->acks, na * sizeof(w->acks[0])) : 0;
}

/* The batch's acknowledgements, in order. */
static void send_acks(struct writer *w)
{
    for (int ci = 0; ci < w->nclients; ci++) {
        struct client *c = &w->clients[ci];
        if (c->fd >= 0 && send_client_acks(w, ci) != 0)
            close_client(w, c);
    }
}

/* The batch's durable records of executions into the index. */
static void index_batch(struct writer *w)
{
    for (size_t i = 0; i < w->np; i++) {
        const struct pending *pe = &w->batch[i];
        if (!pe->query && pe->seq != 0)
            audit_index_note(w->ix, &pe->f, &pe->ref);
    }
}

/* The log was failing and every record of this batch was written. */
static void note_writing_again(struct writer *w)
{
    int all_ok = 1;
    for (size_t i = 0; i < w->np; i++)
        all_ok &= w->batch[i].seq != 0 || w->batch[i].query;
    if (all_ok) {
        fprintf(stderr, "moat-audit-writer: writing again\n");
        w->failing = 0;
    }
}

/* One fdatasync for the whole batch, then the acknowledgements: a record
 * is acknowledged as recorded only once it is durable. */
static void commit_batch(struct writer *w)
{
    char err[256];
    w->unsynced_since = 0;
    if (audit_log_sync(w->l, err, sizeof(err)) != 0) {
        note_failure(w, err);
        for (size_t i = 0; i < w->np; i++)
            if (w->batch[i].seq) {
                w->batch[i].seq = 0;
                w->batch[i].err = EIO;
            }
    } else {
        index_batch(w);
        if (w->failing)
            note_writing_again(w);
    }
    send_acks(w);
}

static void commit(struct writer *w)
{
    uint64_t now = now_ms();
    int denial_window = w->unsynced_since == 0 || now - w->unsynced_since < DENIAL_SYNC_MS;
    if (w->np > 0 && !batch_waited_for(w) && denial_window)
        write_denials(w, now);
    else if (w->np > 0 || (w->unsynced_since != 0 && !denial_window))
        commit_batch(w);
}

/* Requests left in a buffer by a full batch need no new data (backlog); a
 * client that closed and has nothing left is closed. */
static void settle_clients(struct writer *w)
{
    w->backlog = 0;
    for (int i = 0; i < w->nclients; i++) {
        struct client *c = &w->clients[i];
        if (c->fd < 0)
            continue;
        if (has_request(c))
            w->backlog = 1;
        else if (c->eof)
            close_client(w, c);
    }
}

int audit_writer_run(struct audit_log *l, const int *fds, int nfds)
{
    struct pollfd pfd[MAX_CLIENTS];
    struct writer *w = calloc(1, sizeof(*w));
    char err[256];
    int rc = 0;

    if (w == NULL) {
        fprintf(stderr, "moat-audit-writer: out of memory\n");
        return -1;
    }
    w->l = l;
    if ((w->ix = audit_index_new()) == NULL) {
        fprintf(stderr, "moat-audit-writer: out of memory\n");
        free(w);
        return -1;
    }
    if (audit_index_load(w->ix, l->dirfd, err, sizeof(err)) != 0)
        fprintf(stderr, "moat-audit-writer: the index of executions starts empty (reading back finds only new ones): %s\n", err);
    w->nclients = nfds > MAX_CLIENTS ? MAX_CLIENTS : nfds;
    for (int i = 0; i < w->nclients; i++)
        w->clients[i].fd = fds[i];
    w->open_clients = w->nclients;
    while (w->open_clients > 0) {
        int n = wait_for_clients(w, pfd);
        if (n < 0 && errno != EINTR) {
            rc = -1;
            break;
        }
        read_requests(w, pfd, n);
        if (audit_log_tick(l, time(NULL), err, sizeof(err)) != 0)
            note_failure(w, err);
        commit(w);
        report_drops(w, 0);
        settle_clients(w);
    }
    report_drops(w, 1);
    for (int i = 0; i < w->nclients; i++)
        free(w->clients[i].buf);
    audit_index_free(w->ix);
    free(w);
    return rc;
}
