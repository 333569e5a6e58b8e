/*
 * control.c - the supervisor's control socket: moatctl's only way in.
 *
 * Theory of operation
 * -------------------
 * The supervisor (privsep.c) is the one process that keeps root, so the
 * socket lives there, on a Unix path (never a network listener), made
 * before the fork with the control section's mode and group.  It exists
 * only when the audit trail is on: without the trail there is no
 * supervisor, and moatctl says it cannot reach one.
 *
 * The supervisor must stay simple and cannot be stalled by a client:
 *
 *   accept    non-blocking, at most GW_CONTROL_MAX_CLIENTS at once (the
 *             rest wait in the backlog); the peer's uid from SO_PEERCRED
 *             must be root or one of control.users, else it gets one line
 *             saying so and the attempt is logged
 *   read      one request line (admin.c decodes it strictly), at most
 *             GW_CONTROL_MAX_REQUEST bytes, within GW_CONTROL_CLIENT_MS of
 *             the accept; a slow client costs only its own slot
 *   act       one request at a time, each step bounded (below)
 *   reply     one JSON line, written as the socket takes it, within
 *             GW_CONTROL_CLIENT_MS; then the connection closes
 *
 * A change (admin_apply) goes through these steps and stops at the first
 * that fails, with nothing changed (fail closed):
 *
 *   1. lock the store, read it, and read the running picture (the
 *      configuration file with the store) for the names already taken
 *   2. apply the request to a copy and stage it as a candidate file
 *   3. check the configuration file with the candidate using the very
 *      parser the gateway loads them with: the parser's message refuses
 *      what the gateway would refuse
 *   4. write an "admin" audit record (who, what, which ids) on the
 *      supervisor's own writer socket and wait for the writer's
 *      acknowledgement that it is durable (GW_CONTROL_AUDIT_MS)
 *   5. commit the candidate (rename, fsync) and unlock
 *   6. ask the gateway to reload over the ctl socketpair and wait for its
 *      answer that the new generation is live (GW_CONTROL_RELOAD_MS)
 *
 * Step 6 failing after step 5 is reported as a failure that says the
 * store changed but the gateway did not load it (its log says why; it
 * keeps its running generation).  moatctl's secret never comes here: it
 * makes the key itself and sends the id and SHA-256 only.
 *
 * With the store in Redis (control.store_backend: redis) the same steps
 * run against Redis (admin_store_redis.c: the lock, the version read and
 * committed, the copy in the store file), and one more duty joins the
 * loop: following the changes other gateways make.  The subscription's
 * descriptor is polled with the clients; when Redis holds a version the
 * copy does not (a message, or the periodic resync), apply_copy checks it
 * with the parser as step 3 does, writes the copy (temp, fsync, rename)
 * and asks the gateway to reload as step 6 does.  A version the parser
 * refuses is logged and the gateway keeps its running state.  The admin
 * record is written where the change was made (steps 4-5); a follower
 * logs the version it applied and records it after the fact
 * ("store.apply": best effort, it never holds a revocation back).
 */
#include "control.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "admin.h"
#include "admin_store_redis.h"
#include "as_user.h"
#include "audit_wire.h"
#include "auth/keyuse.h"
#include "log.h"
#include "moat_errf.h"
#include "moat_io.h"
#include "limits/ratelimit.h"

/* ---------------------------------------------------------------- opening */

/* The socket's directory: a directory that not everyone may write without the sticky bit. */
static int check_dir(const char *path, char *err, size_t errlen)
{
    char dir[GW_MAX_PATH_LEN + 1];
    const char *slash = strrchr(path, '/');
    struct stat st;

    snprintf(dir, sizeof(dir), "%.*s", slash == path ? 1 : (int)(slash - path), path);
    if (stat(dir, &st) != 0)
        return moat_errf(err, errlen, "control.socket %s: directory %s: %s", path, dir, strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return moat_errf(err, errlen, "control.socket %s: %s is not a directory", path, dir);
    if ((st.st_mode & S_IWOTH) && !(st.st_mode & S_ISVTX))
        return moat_errf(err, errlen, "control.socket %s: directory %s is writable by everyone without the sticky bit", path, dir);
    return 0;
}

/* Something at path already: a stale socket (nobody accepts) goes; a live one or anything else stays and fails. */
static int clear_stale(const char *path, const struct sockaddr_un *sa, char *err, size_t errlen)
{
    struct stat st;
    int fd, rc;

    if (lstat(path, &st) != 0)
        return errno == ENOENT ? 0 : moat_errf(err, errlen, "control.socket %s: %s", path, strerror(errno));
    if (!S_ISSOCK(st.st_mode))
        return moat_errf(err, errlen, "control.socket %s exists and is not a socket", path);
    if ((fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)) < 0)
        return moat_errf(err, errlen, "socket: %s", strerror(errno));
    rc = connect(fd, (const struct sockaddr *)sa, sizeof(*sa));
    close(fd);
    if (rc == 0)
        return moat_errf(err, errlen, "control.socket %s: another process is listening on it", path);
    if (errno != ECONNREFUSED)
        return moat_errf(err, errlen, "control.socket %s: %s", path, strerror(errno));
    log_info("%s: %s: removing a stale control socket", __func__, path);
    return unlink(path) == 0 ? 0 : moat_errf(err, errlen, "control.socket %s: unlink: %s", path, strerror(errno));
}

static int bind_socket(struct gw_control *c, const struct gw_control_config *cc, gid_t group, char *err, size_t errlen)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    mode_t old;
    int rc;

    if (strlen(cc->socket) >= sizeof(sa.sun_path))
        return moat_errf(err, errlen, "control.socket %s: longer than %zu bytes", cc->socket, sizeof(sa.sun_path) - 1);
    memcpy(sa.sun_path, cc->socket, strlen(cc->socket) + 1);
    if (check_dir(cc->socket, err, errlen) != 0 || clear_stale(cc->socket, &sa, err, errlen) != 0)
        return -1;
    if ((c->listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0)) < 0)
        return moat_errf(err, errlen, "socket: %s", strerror(errno));
    old = umask(0177); /* owner only until chmod below */
    rc = bind(c->listen_fd, (struct sockaddr *)&sa, sizeof(sa));
    umask(old);
    if (rc != 0)
        return moat_errf(err, errlen, "control.socket %s: bind: %s", cc->socket, strerror(errno));
    if (chown(cc->socket, 0, group) != 0 || chmod(cc->socket, cc->mode) != 0 || listen(c->listen_fd, 64) != 0)
        return moat_errf(err, errlen, "control.socket %s: %s", cc->socket, strerror(errno));
    return 0;
}

static int lookup_ids(struct gw_control *c, const struct gw_config *cfg, gid_t *group, uid_t *gw_uid, gid_t *gw_gid, char *err,
                      size_t errlen)
{
    const struct gw_control_config *cc = &cfg->control;
    const struct passwd *pw;
    const struct group *gr;

    *group = 0;
    if (cc->group != NULL) {
        if ((gr = getgrnam(cc->group)) == NULL)
            return moat_errf(err, errlen, "control.group: no group %s", cc->group);
        *group = gr->gr_gid;
    }
    for (size_t i = 0; i < cc->nusers; i++) {
        if ((pw = getpwnam(cc->users[i])) == NULL)
            return moat_errf(err, errlen, "control.users: no user %s", cc->users[i]);
        c->users[c->nusers++] = pw->pw_uid;
    }
    if ((pw = getpwnam(cfg->user)) == NULL)
        return moat_errf(err, errlen, "user %s: no such user", cfg->user);
    *gw_uid = pw->pw_uid;
    *gw_gid = pw->pw_gid;
    return 0;
}

int gw_control_open(struct gw_control *c, const struct gw_config *cfg, const char *config_path, char *err, size_t errlen)
{
    uid_t gw_uid = (uid_t)-1;
    gid_t group = 0, gw_gid = (gid_t)-1;

    memset(c, 0, sizeof(*c));
    c->listen_fd = c->audit_fd = c->ctl = -1;
    for (int i = 0; i < GW_CONTROL_MAX_CLIENTS; i++)
        c->clients[i].fd = -1;
    if (cfg->control.socket == NULL)
        return 0;
    if (lookup_ids(c, cfg, &group, &gw_uid, &gw_gid, err, errlen) != 0)
        return -1;
    if ((c->socket_path = strdup(cfg->control.socket)) == NULL || (c->config_path = strdup(config_path)) == NULL ||
        (cfg->control.redis_store ? admin_store_redis_init(&c->store, cfg->control.store, gw_uid, gw_gid, &cfg->limiter)
                                  : admin_store_file_init(&c->store, cfg->control.store, gw_uid, gw_gid)) != 0)
        return moat_errf(err, errlen, "out of memory");
    if (bind_socket(c, &cfg->control, group, err, errlen) != 0) {
        if (c->listen_fd >= 0)
            close(c->listen_fd);
        c->listen_fd = -1;
        return -1;
    }
    c->used_every_ms = (uint64_t)cfg->control.last_used_every_s * 1000;
    c->used_next_ms = rl_monotonic_ms() + c->used_every_ms;
    log_info("%s: control socket %s (mode %04o), the admin store %s%s", __func__, c->socket_path, cfg->control.mode,
             cfg->control.redis_store ? "in Redis, this gateway's copy in " : "in ", cfg->control.store);
    return 0;
}

int gw_control_check(const struct gw_config *cfg, char *err, size_t errlen)
{
    struct gw_control c;
    uid_t gw_uid = (uid_t)-1;
    gid_t group = 0, gw_gid = (gid_t)-1;

    if (cfg->control.socket == NULL)
        return 0;
    memset(&c, 0, sizeof(c));
    return lookup_ids(&c, cfg, &group, &gw_uid, &gw_gid, err, errlen) != 0 ? -1 : check_dir(cfg->control.socket, err, errlen);
}

void gw_control_forget(struct gw_control *c)
{
    if (c->listen_fd >= 0)
        close(c->listen_fd);
    c->listen_fd = -1;
}

void gw_control_close(struct gw_control *c)
{
    if (c->listen_fd < 0)
        return;
    close(c->listen_fd);
    c->listen_fd = -1;
    unlink(c->socket_path);
}

void gw_control_set_writer(struct gw_control *c, pid_t writer, int audit_fd)
{
    if (c->audit_fd >= 0)
        close(c->audit_fd);
    c->audit_fd = audit_fd;
    c->writer = writer;
}

/* ---------------------------------------------------------------- replies */

/* The reply becomes the client's output: one JSON line.  Takes r. */
static void set_reply(struct gw_control_client *cl, json_t *r)
{
    char *text = r != NULL ? json_dumps(r, JSON_COMPACT | JSON_ENSURE_ASCII) : NULL;
    size_t n = text != NULL ? strlen(text) : 0;

    json_decref(r);
    free(cl->out);
    cl->out = NULL;
    if (text == NULL || n + 1 > GW_CONTROL_MAX_REPLY || (cl->out = malloc(n + 2)) == NULL) {
        static const char oom[] = "{\"ok\":false,\"error\":\"the reply is too large or out of memory\"}\n";
        free(text);
        if ((cl->out = strdup(oom)) != NULL)
            cl->out_len = sizeof(oom) - 1;
        cl->out_off = 0;
        return;
    }
    memcpy(cl->out, text, n);
    cl->out[n] = '\n';
    cl->out_len = n + 1;
    cl->out_off = 0;
    free(text);
}

static void reply_error(struct gw_control_client *cl, const char *msg)
{
    set_reply(cl, json_pack("{s:b, s:s}", "ok", 0, "error", msg));
}

/* ---------------------------------------------------------------- the steps of a change */

/* Step 4: the admin record, durable before anything changes. */
static int audit_record(struct gw_control *c, const json_t *body, char *err, size_t errlen)
{
    char *text = json_dumps(body, JSON_COMPACT | JSON_ENSURE_ASCII | JSON_PRESERVE_ORDER);
    struct audit_wire_req q = {AUDIT_WIRE_MAGIC, 0, 0, 0, ++c->audit_tag};
    struct audit_wire_ack ack;
    uint64_t deadline = rl_monotonic_ms() + GW_CONTROL_AUDIT_MS;
    int rc;

    if (text == NULL)
        return moat_errf(err, errlen, "out of memory");
    if (c->audit_fd < 0) {
        free(text);
        return moat_errf(err, errlen, "no audit writer is connected");
    }
    q.body_len = (uint32_t)strlen(text);
    rc = moat_send_full(c->audit_fd, &q, sizeof(q)) == 0 && moat_send_full(c->audit_fd, text, q.body_len) == 0 ? 0 : -1;
    free(text);
    if (rc != 0)
        return moat_errf(err, errlen, "cannot send to the audit writer: %s", strerror(errno));
    for (;;) {
        uint64_t now = rl_monotonic_ms();
        struct pollfd p = {c->audit_fd, POLLIN, 0};
        if (now >= deadline || poll(&p, 1, (int)(deadline - now)) <= 0)
            return moat_errf(err, errlen, "the audit writer did not acknowledge the record within %d ms", GW_CONTROL_AUDIT_MS);
        if (moat_read_full(c->audit_fd, &ack, sizeof(ack)) != (ssize_t)sizeof(ack) || ack.len != 0)
            return moat_errf(err, errlen, "the audit writer went away");
        if (ack.tag != c->audit_tag)
            continue; /* an earlier record's, that timed out here */
        if (ack.seq == 0)
            return moat_errf(err, errlen, "the audit writer could not record it: %s", strerror((int)ack.err));
        return 0;
    }
}

/* Step 6 (and status): one request to the gateway over ctl, its answer's text in out.  The answer's status, or -1. */
static int ctl_call(struct gw_control *c, uint32_t type, char *out, size_t outlen)
{
    struct gw_ctl_msg m = {GW_CTL_MAGIC, type, ++c->ctl_seq, 0, 0};
    uint64_t deadline = rl_monotonic_ms() + GW_CONTROL_RELOAD_MS;
    union {
        struct gw_ctl_msg m;
        char bytes[GW_CONTROL_MSG_MAX];
    } buf;

    if (moat_send_full(c->ctl, &m, sizeof(m)) != 0)
        return moat_errf(out, outlen, "cannot reach the gateway: %s", strerror(errno));
    for (;;) {
        uint64_t now = rl_monotonic_ms();
        struct pollfd p = {c->ctl, POLLIN, 0};
        ssize_t n;
        if (now >= deadline || poll(&p, 1, (int)(deadline - now)) <= 0)
            return moat_errf(out, outlen, "the gateway did not answer within %d ms", GW_CONTROL_RELOAD_MS);
        if ((n = recv(c->ctl, buf.bytes, sizeof(buf.bytes), MSG_DONTWAIT)) <= 0) {
            if (n < 0 && (errno == EAGAIN || errno == EINTR))
                continue;
            return moat_errf(out, outlen, "the gateway went away");
        }
        if ((size_t)n < sizeof(buf.m) || buf.m.magic != GW_CTL_MAGIC || buf.m.len != (size_t)n - sizeof(buf.m))
            return moat_errf(out, outlen, "a malformed answer from the gateway");
        if (buf.m.seq != c->ctl_seq || buf.m.type != type)
            continue; /* a late answer to an earlier request */
        snprintf(out, outlen, "%.*s", (int)buf.m.len, buf.bytes + sizeof(buf.m));
        return buf.m.status == 0 ? 0 : -1;
    }
}

/* The parser names the candidate file: name the store instead. */
static void name_the_store(const struct admin_store *s, const char *staged, char *err, size_t errlen)
{
    size_t n = strlen(staged);
    char rest[1024];

    if (strncmp(err, staged, n) != 0)
        return;
    snprintf(rest, sizeof(rest), "%s", err + n);
    snprintf(err, errlen, "%s%s", s->path, rest);
}

/* Steps 1-5 under the store's lock. */
/* ---------------------------------------------------------------- last use */

static const json_t *used_read; /* the store's record, while do_read runs */

/* When key id last authenticated a request: this gateway's table (exact,
 * since its start) or the store's record (to the minute, any gateway,
 * any start), the later. */
static time_t last_used(const char *id)
{
    time_t here = gw_keyuse_last(id);
    json_t *v = used_read != NULL ? json_object_get(used_read, id) : NULL;
    time_t stored = v != NULL ? (time_t)json_integer_value(v) : 0;

    return here > stored ? here : stored;
}

static void note_one(const char *id, time_t last, void *arg)
{
    json_t *used = arg;

    (void)json_object_set_new(used, id, json_integer((json_int_t)(last - last % 60)));
}

void gw_control_flush_used(struct gw_control *c)
{
    time_t started = time(NULL);
    json_t *used = json_object();
    char err[512];

    if (c->listen_fd < 0)
        return;
    /* a minute back: a use in the flush's own second is sent again next time, never lost */
    if (used == NULL || gw_keyuse_since(c->used_since > 60 ? c->used_since - 60 : 0, note_one, used) == 0) {
        json_decref(used);
        return;
    }
    if (c->store.ops->note_used(&c->store, used, err, sizeof(err)) != 0) {
        if (!c->used_failing)
            log_warnx("%s: keys' last use not written to the admin store (moatctl key list says this gateway's own): %s", __func__,
                      err);
        c->used_failing = 1;
    } else {
        if (c->used_failing)
            log_info("%s: keys' last use written to the admin store again", __func__);
        c->used_failing = 0;
        c->used_since = started;
    }
    json_decref(used);
}

/* ---------------------------------------------------------------- as the gateway's user */

/* What a child that is the gateway's user (as_user.c) is asked. */
struct ask {
    struct gw_control *c;
    const struct admin_req *q;
    json_t *doc;        /* the store as read */
    const char *staged; /* check: the candidate */
};

/* A change: the new document and moatctl's answer, made against the running configuration. */
static json_t *ask_apply(void *arg, char *err, size_t errlen)
{
    struct ask *a = arg;
    struct gw_config run;
    json_t *result = json_object(), *out = NULL;

    if (result != NULL && gw_config_load(a->c->config_path, &run, err, errlen) == 0) {
        if (admin_apply(a->q, a->doc, &run, time(NULL), result, err, errlen) == 0 &&
            (out = json_pack("{s:O, s:O}", "doc", a->doc, "result", result)) == NULL)
            moat_errf(err, errlen, "out of memory");
        gw_config_free(&run);
    }
    json_decref(result);
    return out;
}

/* Does the configuration load with the candidate as its store? */
static json_t *ask_check(void *arg, char *err, size_t errlen)
{
    struct ask *a = arg;
    struct gw_config cand;

    if (gw_config_load_with_store(a->c->config_path, a->staged, &cand, err, errlen) != 0)
        return NULL;
    gw_config_free(&cand);
    return json_true();
}

/* moatctl's listing: what admin_read answers. */
static json_t *ask_read(void *arg, char *err, size_t errlen)
{
    struct ask *a = arg;
    struct gw_config run;
    json_t *result = json_pack("{s:b}", "ok", 1);
    int rc;

    if (result == NULL || gw_config_load(a->c->config_path, &run, err, errlen) != 0) {
        json_decref(result);
        return NULL;
    }
    rc = admin_read(a->q, a->doc, &run, time(NULL), last_used, result, err, errlen);
    gw_config_free(&run);
    if (rc != 0) {
        json_decref(result);
        return NULL;
    }
    return result;
}

static json_t *ask(struct gw_control *c, gw_as_user_fn fn, struct ask *a, char *err, size_t errlen)
{
    a->c = c;
    return gw_as_user(c->store.owner, c->store.group, fn, a, err, errlen);
}

/* The candidate at staged loads, asked as the gateway's user.  0, or -1 with err naming the store. */
static int candidate_loads(struct gw_control *c, const char *staged, char *err, size_t errlen)
{
    struct ask a = {.staged = staged};
    json_t *yes = ask(c, ask_check, &a, err, errlen);

    if (yes == NULL) {
        name_the_store(&c->store, staged, err, errlen);
        return -1;
    }
    json_decref(yes);
    return 0;
}

static int change_store(struct gw_control *c, const struct admin_req *q, const json_t *audit, json_t *result, char *err,
                        size_t errlen)
{
    struct admin_store *s = &c->store;
    struct ask a = {.q = q};
    json_t *out = NULL, *doc = NULL;
    int rc = -1;

    if (s->ops->lock(s, err, errlen) != 0)
        return -1;
    if ((a.doc = s->ops->read(s, err, errlen)) == NULL) {
        s->ops->unlock(s);
        return -1;
    }
    /* the change is made by the child; what it hands back is checked here like any store */
    if ((out = ask(c, ask_apply, &a, err, errlen)) != NULL) {
        doc = json_object_get(out, "doc");
        if (!json_is_object(json_object_get(out, "result")) || doc == NULL || admin_store_check(doc, err, errlen) != 0 ||
            json_object_update(result, json_object_get(out, "result")) != 0)
            moat_errf(err, errlen, "the change's answer (as the gateway's user) is not a store and a result");
        else
            rc = 0;
    }
    if (rc == 0 && (rc = s->ops->stage(s, doc, err, errlen)) == 0)
        rc = candidate_loads(c, s->staged, err, errlen);
    if (rc == 0 && (rc = audit_record(c, audit, err, errlen)) == 0)
        rc = s->ops->commit(s, err, errlen);
    s->ops->unlock(s);
    json_decref(out);
    json_decref(a.doc);
    return rc;
}

/* A peer's name for the audit record. */
static void user_name(uid_t uid, char *out, size_t outlen)
{
    const struct passwd *pw = getpwuid(uid);

    if (pw != NULL)
        snprintf(out, outlen, "%s", pw->pw_name);
    else
        snprintf(out, outlen, "uid %u", (unsigned)uid);
}

static void do_change(struct gw_control *c, struct gw_control_client *cl, const struct admin_req *q)
{
    char err[1024], who[64];
    json_t *result = json_object(), *audit;

    user_name(cl->uid, who, sizeof(who));
    if ((audit = admin_audit_body(q, (unsigned)cl->uid, who)) == NULL || result == NULL) {
        json_decref(audit);
        json_decref(result);
        reply_error(cl, "out of memory");
        return;
    }
    if (change_store(c, q, audit, result, err, sizeof(err)) != 0) {
        log_warnx("%s: %s by %s refused: %s", __func__, q->name, who, err);
        json_decref(audit);
        json_decref(result);
        reply_error(cl, err);
        return;
    }
    json_decref(audit);
    log_info("%s: %s by %s: stored; reloading the gateway", __func__, q->name, who);
    if (ctl_call(c, GW_CTL_RELOAD, err, sizeof(err)) != 0) {
        char msg[1200];
        snprintf(msg, sizeof(msg), "stored in %s, but the gateway did not load it: %s", c->store.path, err);
        log_warnx("%s: %s", __func__, msg);
        json_decref(result);
        reply_error(cl, msg);
        return;
    }
    json_object_set_new(result, "ok", json_true());
    json_object_set_new(result, "gateway", json_string(err));
    set_reply(cl, result);
}

/* A follower's record of a version it applied (audit/FORMAT.md "store.apply"): after the fact, never in
 * the way (the change was recorded, fail closed, where it was made; a revocation must not wait for this). */
static void note_applied(struct gw_control *c, uint64_t version)
{
    json_t *body = json_pack("{s:s, s:s, s:I, s:s}", "type", "admin", "action", "store.apply", "version", (json_int_t)version,
                             "from", "redis");
    char err[512];

    if (body == NULL || audit_record(c, body, err, sizeof(err)) != 0)
        log_warnx("%s: version %llu applied, but not recorded: %s", __func__, (unsigned long long)version,
                  body == NULL ? "out of memory" : err);
    json_decref(body);
}

/* Another gateway's change, from Redis: checked like step 3, written to the copy, loaded like step 6. */
static void apply_copy(struct gw_control *c, const json_t *doc, uint64_t version)
{
    struct admin_store *s = &c->store;
    char err[1024];
    int rc, parsed = 0;

    if ((rc = admin_store_file_ops.lock(s, err, sizeof(err))) == 0) {
        if ((rc = admin_store_file_ops.stage(s, doc, err, sizeof(err))) == 0) {
            if ((parsed = candidate_loads(c, s->staged, err, sizeof(err))) == 0)
                rc = admin_store_file_ops.commit(s, err, sizeof(err));
        }
        admin_store_file_ops.unlock(s);
    }
    if (parsed != 0) {
        log_warnx("%s: version %llu of the admin store in Redis refused: %s; the gateway keeps its running state", __func__,
                  (unsigned long long)version, err);
        admin_store_redis_applied(s, version, 0);
        return;
    }
    if (rc != 0) {
        log_warnx("%s: version %llu of the admin store: %s; tried again at the next resync", __func__, (unsigned long long)version,
                  err);
        return;
    }
    admin_store_redis_applied(s, version, 1);
    log_info("%s: applied version %llu of the admin store from Redis to %s; reloading the gateway", __func__,
             (unsigned long long)version, s->path);
    if (ctl_call(c, GW_CTL_RELOAD, err, sizeof(err)) != 0)
        log_warnx("%s: version %llu is in %s, but the gateway did not load it: %s", __func__, (unsigned long long)version, s->path,
                  err);
    note_applied(c, version);
}

static void do_read(struct gw_control *c, struct gw_control_client *cl, const struct admin_req *q)
{
    char err[1024];
    struct ask a = {.q = q};
    json_t *stored, *result = NULL;

    if ((a.doc = c->store.ops->read(&c->store, err, sizeof(err))) == NULL) {
        reply_error(cl, err);
        return;
    }
    if ((stored = c->store.ops->read_used(&c->store, err, sizeof(err))) == NULL)
        log_warnx("%s: keys' last use in the admin store unreadable (this gateway's own is listed): %s", __func__, err);
    used_read = stored; /* the child's last_used reads it */
    result = ask(c, ask_read, &a, err, sizeof(err));
    used_read = NULL;
    json_decref(stored);
    json_decref(a.doc);
    if (!json_is_object(result)) {
        json_decref(result);
        reply_error(cl, err);
        return;
    }
    set_reply(cl, result);
}

static int alive(pid_t pid)
{
    return pid > 0 && kill(pid, 0) == 0;
}

static void do_status(struct gw_control *c, struct gw_control_client *cl)
{
    char text[GW_CONTROL_MSG_MAX];
    json_t *gw = NULL, *r;

    if (ctl_call(c, GW_CTL_STATUS, text, sizeof(text)) == 0)
        gw = json_loads(text, 0, NULL);
    if (gw == NULL)
        gw = json_pack("{s:s}", "error", text);
    json_object_set_new(gw, "pid", json_integer(c->gateway));
    json_object_set_new(gw, "running", json_boolean(alive(c->gateway)));
    r = json_pack("{s:b, s:o, s:{s:I, s:b, s:b}, s:o, s:s, s:s}", "ok", 1, "gateway", gw, "audit_writer", "pid",
                  (json_int_t)c->writer, "running", alive(c->writer), "connected", c->audit_fd >= 0, "redis",
                  admin_store_redis_status(&c->store), "control_socket", c->socket_path, "store", c->store.path);
    set_reply(cl, r);
}

/* A whole request: decode, then act. */
static void handle(struct gw_control *c, struct gw_control_client *cl)
{
    struct admin_req q;
    char err[512];
    size_t len = cl->in_len;

    if (len > 0 && cl->in[len - 1] == '\n')
        len--;
    if (admin_decode(cl->in, len, &q, err, sizeof(err)) != 0) {
        reply_error(cl, err);
        return;
    }
    if (q.cmd == ADMIN_STATUS)
        do_status(c, cl);
    else if (q.mutates)
        do_change(c, cl, &q);
    else
        do_read(c, cl, &q);
    admin_req_free(&q);
}

/* ---------------------------------------------------------------- clients */

static void drop(struct gw_control_client *cl)
{
    close(cl->fd);
    free(cl->in);
    free(cl->out);
    memset(cl, 0, sizeof(*cl));
    cl->fd = -1;
}

static int allowed(const struct gw_control *c, uid_t uid)
{
    if (uid == 0)
        return 1;
    for (size_t i = 0; i < c->nusers; i++)
        if (c->users[i] == uid)
            return 1;
    return 0;
}

static void accept_one(struct gw_control *c)
{
    struct gw_control_client *cl = NULL;
    struct ucred cred;
    socklen_t clen = sizeof(cred);
    int fd;

    for (int i = 0; i < GW_CONTROL_MAX_CLIENTS && cl == NULL; i++)
        if (c->clients[i].fd < 0)
            cl = &c->clients[i];
    if (cl == NULL || (fd = accept4(c->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC)) < 0)
        return;
    cl->fd = fd;
    cl->deadline_ms = rl_monotonic_ms() + GW_CONTROL_CLIENT_MS;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &clen) != 0) {
        drop(cl);
        return;
    }
    cl->uid = cred.uid;
    cl->pid = cred.pid;
    if (!allowed(c, cred.uid)) {
        char msg[128];
        log_warnx("%s: uid %u (pid %d) is not allowed on the control socket: refused", __func__, (unsigned)cred.uid, (int)cred.pid);
        snprintf(msg, sizeof(msg), "refused: uid %u may not use the control socket (root and control.users only)",
                 (unsigned)cred.uid);
        reply_error(cl, msg);
    }
}

/* Read what came; a whole line (or the end of the request) is handled at once. */
static void client_read(struct gw_control *c, struct gw_control_client *cl)
{
    char buf[4096];
    ssize_t n = recv(cl->fd, buf, sizeof(buf), MSG_DONTWAIT);

    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return;
    if (n < 0 || (n == 0 && cl->in_len == 0)) {
        drop(cl);
        return;
    }
    if (n > 0) {
        char *grown;
        if (cl->in_len + (size_t)n > GW_CONTROL_MAX_REQUEST) {
            reply_error(cl, "request too large");
            return;
        }
        if ((grown = realloc(cl->in, cl->in_len + (size_t)n + 1)) == NULL) {
            reply_error(cl, "out of memory");
            return;
        }
        cl->in = grown;
        memcpy(cl->in + cl->in_len, buf, (size_t)n);
        cl->in_len += (size_t)n;
        cl->in[cl->in_len] = '\0';
        if (memchr(buf, '\n', (size_t)n) == NULL)
            return;
    }
    uint64_t t0 = rl_monotonic_ms(), spent;
    handle(c, cl);
    spent = rl_monotonic_ms() - t0;
    cl->deadline_ms = t0 + spent + GW_CONTROL_CLIENT_MS; /* for the reply */
    /* the others' clocks stand still while they wait for this one: only a client's own slowness drops it */
    for (int i = 0; i < GW_CONTROL_MAX_CLIENTS; i++)
        if (&c->clients[i] != cl && c->clients[i].fd >= 0)
            c->clients[i].deadline_ms += spent;
}

static void client_write(struct gw_control_client *cl)
{
    ssize_t n = send(cl->fd, cl->out + cl->out_off, cl->out_len - cl->out_off, MSG_DONTWAIT | MSG_NOSIGNAL);

    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return;
    if (n < 0) {
        drop(cl);
        return;
    }
    cl->out_off += (size_t)n;
    if (cl->out_off == cl->out_len)
        drop(cl);
}

int gw_control_pollfds(struct gw_control *c, struct pollfd *pfd, int max)
{
    int n = 0, room = 0;

    if (c->listen_fd < 0)
        return 0;
    for (int i = 0; i < GW_CONTROL_MAX_CLIENTS && n < max; i++) {
        struct gw_control_client *cl = &c->clients[i];
        if (cl->fd < 0) {
            room = 1;
            continue;
        }
        pfd[n].fd = cl->fd;
        pfd[n].events = cl->out != NULL ? POLLOUT : POLLIN;
        pfd[n++].revents = 0;
    }
    if (room && n < max) {
        pfd[n].fd = c->listen_fd;
        pfd[n].events = POLLIN;
        pfd[n++].revents = 0;
    }
    if (n < max)
        n += admin_store_redis_pollfd(&c->store, &pfd[n]);
    return n;
}

/* The store in Redis: what was published, reconnects, resyncs; a version to apply. */
static void follow_store(struct gw_control *c, short revents)
{
    json_t *doc = NULL;
    uint64_t version = 0;

    if (admin_store_redis_follow(&c->store, revents, &doc, &version) == 1) {
        apply_copy(c, doc, version);
        json_decref(doc);
    }
}

void gw_control_serve(struct gw_control *c, const struct pollfd *pfd, int n)
{
    struct pollfd sub = {-1, 0, 0};
    short sub_revents = 0;
    uint64_t now;

    if (c->listen_fd < 0)
        return;
    if (admin_store_redis_pollfd(&c->store, &sub) == 1)
        for (int k = 0; k < n; k++)
            if (pfd[k].fd == sub.fd)
                sub_revents = pfd[k].revents;
    for (int k = 0; k < n; k++) {
        if (pfd[k].revents == 0 || pfd[k].fd == sub.fd)
            continue;
        if (pfd[k].fd == c->listen_fd) {
            accept_one(c);
            continue;
        }
        for (int i = 0; i < GW_CONTROL_MAX_CLIENTS; i++) {
            struct gw_control_client *cl = &c->clients[i];
            if (cl->fd != pfd[k].fd)
                continue;
            if (cl->out != NULL)
                client_write(cl);
            else
                client_read(c, cl);
            break;
        }
    }
    now = rl_monotonic_ms();
    for (int i = 0; i < GW_CONTROL_MAX_CLIENTS; i++) {
        struct gw_control_client *cl = &c->clients[i];
        if (cl->fd >= 0 && now >= cl->deadline_ms) {
            log_warnx("%s: a control client (uid %u, pid %d) took longer than %d ms: dropped", __func__, (unsigned)cl->uid,
                      (int)cl->pid, GW_CONTROL_CLIENT_MS);
            drop(cl);
        }
    }
    follow_store(c, sub_revents);
    if (now >= c->used_next_ms) {
        gw_control_flush_used(c);
        c->used_next_ms = rl_monotonic_ms() + c->used_every_ms;
    }
}

int gw_control_timeout(const struct gw_control *c)
{
    uint64_t now = rl_monotonic_ms(), next = UINT64_MAX;
    int store = c->listen_fd >= 0 ? admin_store_redis_timeout(&c->store) : -1;

    for (int i = 0; i < GW_CONTROL_MAX_CLIENTS; i++)
        if (c->clients[i].fd >= 0 && c->clients[i].deadline_ms < next)
            next = c->clients[i].deadline_ms;
    if (store >= 0 && now + (uint64_t)store < next)
        next = now + (uint64_t)store;
    if (c->listen_fd >= 0 && c->used_next_ms < next)
        next = c->used_next_ms;
    if (next == UINT64_MAX)
        return -1;
    return next <= now ? 0 : (int)(next - now);
}
