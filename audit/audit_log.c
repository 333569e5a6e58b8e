/*
 * audit_log.c - the record path of the writer's core (FORMAT.md): a body
 * checked, sealed into the next line of the hash chain, batched, written
 * and made durable.
 *
 * Theory of operation
 * -------------------
 * Every line is built here, from a body the writer re-encodes itself or, on
 * the fast path, from the body as sent when json_scan.c finds it already
 * strict compact printable-ASCII JSON with no duplicate keys, so a line is
 * always one line of ASCII JSON whatever the gateway sent.  A record goes
 * through these steps:
 *
 *   1. admit: a body that sets one of the writer's names or types is refused
 *      (errno EINVAL: the sender's fault, not the disk's);
 *   2. before: the file rotates when due, and the packet is appended to the
 *      pack (audit_files.c);
 *   3. seal_begin: a torn line is ended and repaired first (audit_repair.c),
 *      and the epoch ratchets when it is full (audit_keys.c);
 *   4. seal: {"seq","time","epoch","prev",<body>,"mac"}, MACed with the
 *      epoch's key, and appended to the batch (seq and prev run ahead;
 *      audit_line.c);
 *   5. after: a signed checkpoint when one is due.
 *
 * Step 3 runs for every record sealed, the core's own too (a checkpoint, a
 * repair, the start record): installed at open as the line layer's
 * before_seal, so that the files below this one never call back up.  The
 * batch goes out with one write(2) at audit_log_write or audit_log_sync, or
 * before anything that must follow it on disk (audit_line.c).
 */
#include "audit_log_internal.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "json_scan.h"
#include "moat_io.h"

static const char *const reserved[] = {"seq", "time", "epoch", "prev", "mac", "packet", "packet_at"};
static const char *const own_types[] = {"checkpoint", "repair", "start", "dropped"};

/* What comes before any record: a torn line is ended (and repaired), and
 * the epoch ratchets when it is full. */
int alog_seal_begin(struct audit_log *l, char *err, size_t errlen)
{
    if (alog_end_torn(l, err, errlen) != 0)
        return -1;
    if (l->cfg.epoch_records && l->epoch_records >= l->cfg.epoch_records && alog_ratchet(l, err, errlen) != 0)
        return -1;
    return 0;
}

/* ---- appending a body --------------------------------------------------------------------- */

/* The checks of a parsed body: an object, none of the writer's names or types. */
static int admit_body(json_t *body, char *err, size_t errlen)
{
    if (!json_is_object(body))
        return alog_refuse(err, errlen, "a record body must be a JSON object");
    for (size_t i = 0; i < sizeof(reserved) / sizeof(reserved[0]); i++)
        if (json_object_get(body, reserved[i]) != NULL)
            return alog_refuse(err, errlen, "a record body may not set \"%s\"", reserved[i]);
    const char *type = json_string_value(json_object_get(body, "type"));
    for (size_t i = 0; type != NULL && i < sizeof(own_types) / sizeof(own_types[0]); i++)
        if (strcmp(type, own_types[i]) == 0)
            return alog_refuse(err, errlen, "record type \"%s\" is the writer's own", type);
    return 0;
}

static int packet_stored(const struct audit_log *l, const void *packet, size_t packet_len)
{
    return packet != NULL && l->cfg.packets && packet_len <= l->cfg.packet_max_bytes;
}

/* Before a record: rotation, and the packet stored (*pk = ref) or not
 * (NULL). */
static int before_record(struct audit_log *l, const void *packet, size_t packet_len, struct packet_ref *ref,
                         const struct packet_ref **pk, char *err, size_t errlen)
{
    *pk = NULL;
    /* a torn line is ended, and repaired, in the file it is in */
    if (alog_rotation_due(l) && (alog_end_torn(l, err, errlen) != 0 || alog_rotate(l, err, errlen) != 0))
        return -1;
    if (packet_stored(l, packet, packet_len)) {
        if (alog_store_packet(l, packet, packet_len, ref, err, errlen) != 0)
            return -1;
        *pk = ref;
    }
    return 0;
}

/* After a record: its line noted (record_line), then a checkpoint when one
 * is due.  One that fails is tried again after the next record; the record
 * itself is written either way. */
static uint64_t after_record(struct audit_log *l, uint64_t seq)
{
    if (seq)
        l->record_line = l->last_line;
    if (seq && l->cfg.checkpoint_records && l->since_checkpoint >= l->cfg.checkpoint_records) {
        char cerr[256];
        (void)alog_checkpoint(l, cerr, sizeof(cerr));
    }
    return seq;
}

uint64_t audit_log_append(struct audit_log *l, json_t *body, const void *packet, size_t packet_len, char *err, size_t errlen)
{
    struct packet_ref ref;
    const struct packet_ref *pk;

    if (admit_body(body, err, errlen) != 0 || before_record(l, packet, packet_len, &ref, &pk, err, errlen) != 0)
        return 0;
    return after_record(l, alog_seal(l, body, pk, err, errlen));
}

/* json_scan's check of each top-level member: bodies with the writer's
 * names or types take the slow path, which refuses them. */
static int fast_member(void *arg, const char *key, size_t key_len, const char *value, size_t value_len)
{
    (void)arg;
    if (key_len < 3 || key_len > 9)
        return 0; /* no name of the writer's is shorter or longer */
    for (size_t i = 0; i < sizeof(reserved) / sizeof(reserved[0]); i++)
        if (reserved[i][0] == key[0] && strlen(reserved[i]) == key_len && memcmp(reserved[i], key, key_len) == 0)
            return -1;
    if (key_len != 4 || memcmp(key, "type", 4) != 0 || value[0] != '"')
        return 0;
    if (memchr(value, '\\', value_len) != NULL)
        return -1; /* jansson decodes it and compares */
    for (size_t i = 0; i < sizeof(own_types) / sizeof(own_types[0]); i++)
        if (strlen(own_types[i]) == value_len - 2 && memcmp(own_types[i], value + 1, value_len - 2) == 0)
            return -1;
    return 0;
}

static uint64_t append_fast(struct audit_log *l, const char *body, size_t body_len, const void *packet, size_t packet_len,
                            char *err, size_t errlen)
{
    struct packet_ref ref;
    const struct packet_ref *pk;

    if (before_record(l, packet, packet_len, &ref, &pk, err, errlen) != 0 || alog_seal_begin(l, err, errlen) != 0)
        return 0;
    return after_record(l, alog_seal_line(l, body, body_len, pk, err, errlen));
}

static uint64_t append_slow(struct audit_log *l, const char *body, size_t body_len, const void *packet, size_t packet_len,
                            char *err, size_t errlen)
{
    json_error_t jerr;
    json_t *j = json_loadb(body, body_len, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &jerr);
    if (j == NULL) {
        alog_refuse(err, errlen, "body is not JSON: %s", jerr.text);
        return 0;
    }
    uint64_t seq = audit_log_append(l, j, packet, packet_len, err, errlen);
    int saved = errno;
    json_decref(j);
    errno = saved;
    return seq;
}

uint64_t audit_log_append_text(struct audit_log *l, const char *body, size_t body_len, const void *packet, size_t packet_len,
                               char *err, size_t errlen)
{
    if (alog_body_size(body_len, packet_stored(l, packet, packet_len)) <= MAX_BODY &&
        audit_json_scan(body, body_len, fast_member, NULL) == 0)
        return append_fast(l, body, body_len, packet, packet_len, err, errlen);
    return append_slow(l, body, body_len, packet, packet_len, err, errlen);
}

/* The writer's own record of what the disk reserve kept out. */
uint64_t audit_log_dropped(struct audit_log *l, uint64_t count, const struct timespec *since, const struct timespec *until,
                           char *err, size_t errlen)
{
    char first[32], last[32];
    alog_format_time(since, first);
    alog_format_time(until, last);
    json_t *b = json_pack("{s:s, s:I, s:s, s:s}", "type", "dropped", "count", (json_int_t)count, "since", first, "until", last);
    if (b == NULL) {
        alog_fail(err, errlen, "out of memory");
        return 0;
    }
    uint64_t seq = alog_seal(l, b, NULL, err, errlen);
    json_decref(b);
    return after_record(l, seq);
}

/* ---- durability ------------------------------------------------------------------------------ */

int audit_log_write(struct audit_log *l, char *err, size_t errlen)
{
    return alog_flush(l, err, errlen);
}

int audit_log_sync(struct audit_log *l, char *err, size_t errlen)
{
    int rc = alog_sync_files(l, err, errlen);
    /* the batch is committed, or reported failed as a whole: either way
     * the failure has been told */
    l->write_failed = 0;
    return rc;
}
