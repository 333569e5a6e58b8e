/*
 * audit_client.h - a worker's non-blocking connection to the audit writer.
 */
#ifndef GW_AUDIT_CLIENT_H
#define GW_AUDIT_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#ifndef H2O_USE_LIBUV
#define H2O_USE_LIBUV 0
#endif
#include <h2o.h>

#include "moat_buf.h"

#define GW_AUDIT_ACK_TIMEOUT_MS 5000
#define GW_AUDIT_FLUSH_BYTES    (64 * 1024)
/* Records nobody waits for (denials) are sent at most this much later, with
 * the next record somebody waits for, or once GW_AUDIT_FLUSH_BYTES have
 * gathered: under a flood of denials the writer wakes a few hundred times a
 * second rather than once per loop turn. */
#define GW_AUDIT_DENIAL_DELAY_MS 10

/*
 * Called once per submitted record: ok when the writer made it durable
 * (seq is its place in the log), 0 when it failed, timed out, or the writer
 * is gone.  May be called before gw_audit_submit returns.  Whoever keeps
 * the entry handle must forget it in this callback.
 */
typedef void (*gw_audit_cb)(void *arg, int ok, uint64_t seq);

/*
 * Called once per gw_audit_fetch: found is 1 with the execution's records
 * (JSON lines as in the log, each ending in '\n', oldest first) and its
 * packet (NULL, 0: none, or removed by the retention), 0 when the writer
 * has no such execution for that tenant (another tenant's, unknown, or older
 * than the writer's index: answer 404), -1 when it failed (the writer is
 * gone, timed out, or found a record or packet that is not what was
 * written: answer 503).  The bytes are the client's until the callback
 * returns.  May be called before gw_audit_fetch returns.  Whoever keeps the
 * entry handle must forget it in this callback.
 */
typedef void (*gw_audit_fetch_cb)(void *arg, int found, const char *records, size_t records_len, const uint8_t *packet,
                                  size_t packet_len);

struct gw_audit_entry;

struct gw_audit {
    h2o_loop_t *loop;
    h2o_socket_t *sock; /* NULL: no writer (every submit fails) */
    int fd;
    int enabled;
    int writing;
    struct moat_buf out, flight; /* records queued; records being written */
    int out_waited;              /* out holds a record somebody waits for */
    struct gw_audit_entry *head, *tail;
    uint64_t next_tag;
    h2o_timeout_t timeout;
    h2o_timeout_entry_t timer;
    h2o_timeout_t delay; /* GW_AUDIT_DENIAL_DELAY_MS */
    h2o_timeout_entry_t delay_timer;
    h2o_timeout_t zero; /* writes start from the loop (audit_client.c) */
    h2o_timeout_entry_t zero_timer;
    uint64_t dropped;   /* denial records lost while no writer was connected (metrics.c reads it) */
    uint64_t oldest_ms; /* the oldest record waiting for its ack was sent (loop time; 0: none; metrics.c) */
    uint64_t last_drop_log_ms;
};

void gw_audit_init(struct gw_audit *a, h2o_loop_t *loop);
/* Lets the writer go (waiting records fail) and removes a's timeouts from
 * its loop, which may then be destroyed. */
void gw_audit_dispose(struct gw_audit *a);
/* Uses fd (one end of the writer's socketpair), replacing a previous one
 * (whose waiting records fail). */
int gw_audit_attach(struct gw_audit *a, int fd);
/* Queues one record; cb NULL = nobody waits for it (sent with
 * AUDIT_WIRE_NOACK: no acknowledgement comes back; returns NULL).  Returns
 * a handle for gw_audit_cancel, or NULL when cb was already called with
 * failure. */
struct gw_audit_entry *gw_audit_submit(struct gw_audit *a, const char *body, size_t body_len, const void *packet, size_t packet_len,
                                       gw_audit_cb cb, void *arg);
/* A packet written straight into the queue, so that no whole copy of it is
 * made first (a session's, audit_records.c): len bytes, which fill writes
 * to dst; fill returns 0, or -1 when it cannot (the record is not queued,
 * and fails as when memory runs out). */
struct gw_audit_filler {
    size_t len;
    int (*fill)(void *arg, uint8_t *dst, size_t len);
    void *arg;
};
/* gw_audit_submit with the packet from a filler (NULL: none). */
struct gw_audit_entry *gw_audit_submit_filled(struct gw_audit *a, const char *body, size_t body_len,
                                              const struct gw_audit_filler *packet, gw_audit_cb cb, void *arg);
/* Asks the writer for one execution of tenant: its records and its packet
 * (audit/FORMAT.md "Reading an execution back").  Returns a handle for
 * gw_audit_cancel, or NULL when cb was already called. */
struct gw_audit_entry *gw_audit_fetch(struct gw_audit *a, const char *tenant, const char *request_id, gw_audit_fetch_cb cb,
                                      void *arg);
/* Called by the worker once per event-loop turn, between turns: what was
 * queued is sent from the next turn (records nobody waits for: within
 * GW_AUDIT_DENIAL_DELAY_MS). */
void gw_audit_flush(struct gw_audit *a);
/* Sends everything queued from the next turn (at shutdown). */
void gw_audit_flush_all(struct gw_audit *a);
/* Is a writer connected (a record submitted now can be written)? */
int gw_audit_connected(const struct gw_audit *a);
/* Is anything queued or being written? */
int gw_audit_sending(const struct gw_audit *a);
/* The request went away: its callback (a submit's or a fetch's) will not
 * be called. */
void gw_audit_cancel(struct gw_audit_entry *e);

#endif
