/*
 * admin_store.c - the admin store in a file beside the configuration.
 *
 * Theory of operation: the supervisor (root) changes the store for
 * moatctl; the gateway (its own user, after the privilege drop) reads it
 * on every load of the configuration (config_store.c).  So:
 *
 *   lock     flock on PATH.lock (0600, root's): two moatctl runs, or two
 *            supervisors given the same store, take turns; bounded wait
 *   read     PATH, at most GW_STORE_MAX_BYTES, JSON with no duplicate
 *            names, checked for shape; none yet: an empty store
 *   stage    the candidate written to PATH.new (created fresh, never
 *            through a link), owner the gateway's user, mode 0600,
 *            fsync'ed: the configuration parser checks this very file
 *   commit   rename PATH.new over PATH, then fsync the directory: a crash
 *            leaves the old store or the new one, never a mix
 *   unlock   remove a candidate not committed, release the lock
 *
 * Keys' last use (note_used, read_used) is kept apart from the store, in
 * PATH.used (root's, 0600; the gateway never reads it): a JSON object of
 * key id -> unix seconds, merged (the later time kept) and replaced
 * whole under the same lock, the same way as a commit.  It changes every
 * control.last_used_every_s while keys are used; the store itself, whose
 * every change reloads the gateway, does not.  A record that does not
 * parse is set aside as PATH.used.bad (logged) and a new one begun: it is
 * what moatctl key list says, not what anyone is allowed by.
 *
 * A store torn by something else (an editor, a full disk before this
 * code) fails read here and the parser at the gateway's next load, which
 * then keeps its running generation.
 */
#include "admin_store.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "admin.h"
#include "auth/apikey.h"
#include "common/gw_limits.h"
#include "log.h"
#include "moat_io.h"

#define STORE_LOCK_TRIES 500 /* 10 ms apart: 5 s */

static char *suffixed(const char *path, const char *suffix)
{
    size_t n = strlen(path) + strlen(suffix) + 1;
    char *s = malloc(n);

    if (s != NULL)
        snprintf(s, n, "%s%s", path, suffix);
    return s;
}

static int file_lock(struct admin_store *s, char *err, size_t errlen)
{
    struct timespec ts = {0, 10 * 1000 * 1000};

    if ((s->lock_fd = open(s->lock_path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600)) < 0) {
        snprintf(err, errlen, "%s: %s", s->lock_path, strerror(errno));
        return -1;
    }
    for (int i = 0; i < STORE_LOCK_TRIES; i++) {
        if (flock(s->lock_fd, LOCK_EX | LOCK_NB) == 0)
            return 0;
        if (errno != EWOULDBLOCK && errno != EINTR)
            break;
        nanosleep(&ts, NULL);
    }
    snprintf(err, errlen, "%s: cannot lock the store: %s", s->lock_path, strerror(errno));
    close(s->lock_fd);
    s->lock_fd = -1;
    return -1;
}

static json_t *file_read(struct admin_store *s, char *err, size_t errlen)
{
    struct stat st;
    json_error_t je;
    json_t *doc;
    FILE *fp;
    int fd;

    if ((fd = open(s->path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW)) < 0) {
        if (errno == ENOENT)
            return admin_store_empty();
        snprintf(err, errlen, "%s: %s", s->path, strerror(errno));
        return NULL;
    }
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size > (off_t)GW_STORE_MAX_BYTES) {
        snprintf(err, errlen, "%s: not a regular file of at most %u bytes", s->path, GW_STORE_MAX_BYTES);
        close(fd);
        return NULL;
    }
    if ((fp = fdopen(fd, "r")) == NULL) {
        snprintf(err, errlen, "%s: %s", s->path, strerror(errno));
        close(fd);
        return NULL;
    }
    doc = json_loadf(fp, JSON_REJECT_DUPLICATES, &je);
    fclose(fp);
    if (doc == NULL) {
        snprintf(err, errlen, "%s:%d: the store is not valid JSON (%s): fix or restore it", s->path, je.line, je.text);
        return NULL;
    }
    if (admin_store_check(doc, err, errlen) != 0) {
        char why[256];
        snprintf(why, sizeof(why), "%s", err);
        snprintf(err, errlen, "%s: %s", s->path, why);
        json_decref(doc);
        return NULL;
    }
    return doc;
}

/* text and a newline in a new file at path (any old one removed first; never through a link),
 * mode 0600, owner:group unless owner is (uid_t)-1 (root's then), fsync'ed.  0, or -1 with err. */
static int write_fresh(const char *path, const char *text, uid_t owner, gid_t group, char *err, size_t errlen)
{
    int fd = -1, rc = -1;

    if (unlink(path) != 0 && errno != ENOENT)
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
    else if ((fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600)) < 0)
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
    else if (moat_write_full(fd, text, strlen(text), NULL) != 0 || moat_write_full(fd, "\n", 1, NULL) != 0 ||
             (owner != (uid_t)-1 && fchown(fd, owner, group) != 0) || fsync(fd) != 0)
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
    else
        rc = 0;
    if (fd >= 0 && close(fd) != 0 && rc == 0) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        rc = -1;
    }
    return rc;
}

static int file_stage(struct admin_store *s, const json_t *doc, char *err, size_t errlen)
{
    char *text = json_dumps(doc, JSON_INDENT(2) | JSON_ENSURE_ASCII | JSON_PRESERVE_ORDER);
    int rc;

    if (text == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    rc = write_fresh(s->temp, text, s->owner, s->group, err, errlen);
    free(text);
    s->staged = s->temp;
    return rc;
}

static int fsync_dir(const char *path, char *err, size_t errlen)
{
    char *copy = strdup(path);
    int fd, rc = -1;

    if (copy == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    if ((fd = open(dirname(copy), O_RDONLY | O_DIRECTORY | O_CLOEXEC)) >= 0 && fsync(fd) == 0)
        rc = 0;
    else
        snprintf(err, errlen, "%s: fsync of its directory: %s", path, strerror(errno));
    if (fd >= 0)
        close(fd);
    free(copy);
    return rc;
}

static int file_commit(struct admin_store *s, char *err, size_t errlen)
{
    if (s->staged == NULL) {
        snprintf(err, errlen, "nothing staged");
        return -1;
    }
    if (rename(s->staged, s->path) != 0) {
        snprintf(err, errlen, "%s: rename: %s", s->path, strerror(errno));
        return -1;
    }
    s->staged = NULL;
    return fsync_dir(s->path, err, errlen);
}

static void file_unlock(struct admin_store *s)
{
    if (s->staged != NULL)
        unlink(s->staged);
    s->staged = NULL;
    if (s->lock_fd >= 0)
        close(s->lock_fd); /* releases the flock */
    s->lock_fd = -1;
}

/* ---------------------------------------------------------------- last use */

#define USED_MAX_TIME 9007199254740992ll /* 2^53: exact in JSON */

int admin_used_check(json_t *used, char *err, size_t errlen)
{
    const char *id;
    json_t *v;

    if (!json_is_object(used))
        return snprintf(err, errlen, "not an object of key ids"), -1;
    json_object_foreach(used, id, v)
    {
        if (!apikey_valid_id(id, strlen(id)))
            return snprintf(err, errlen, "\"%.32s\" is not a key id", id), -1;
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > USED_MAX_TIME)
            return snprintf(err, errlen, "key %s: not a time in unix seconds", id), -1;
    }
    return 0;
}

/* PATH.used as it is: an empty record when there is none, or when the one
 * there does not parse (set aside as PATH.used.bad).  NULL with err. */
static json_t *used_load(struct admin_store *s, char *err, size_t errlen)
{
    char why[256] = "not a regular file", *bad;
    json_error_t je = {.text = ""};
    json_t *used = NULL;
    struct stat st;
    int fd;

    if ((fd = open(s->used_path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW)) < 0) {
        if (errno == ENOENT)
            return json_object();
        snprintf(err, errlen, "%s: %s", s->used_path, strerror(errno));
        return NULL;
    }
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size <= (off_t)GW_STORE_MAX_BYTES &&
        (used = json_loadfd(fd, JSON_REJECT_DUPLICATES, &je)) == NULL)
        snprintf(why, sizeof(why), "%s", je.text);
    close(fd);
    if (used != NULL && admin_used_check(used, why, sizeof(why)) == 0)
        return used;
    json_decref(used);
    if ((bad = suffixed(s->used_path, ".bad")) == NULL || rename(s->used_path, bad) != 0) {
        snprintf(err, errlen, "%s: does not parse, and cannot be set aside: %s", s->used_path, strerror(errno));
        free(bad);
        return NULL;
    }
    log_warnx("%s: keys' last use did not parse (%s): set aside as %s, a new record begun", s->used_path, why, bad);
    free(bad);
    return json_object();
}

static json_t *file_read_used(struct admin_store *s, char *err, size_t errlen)
{
    return used_load(s, err, errlen);
}

/* merged[id] = the later of merged[id] and used[id]. */
static int used_merge(json_t *merged, json_t *used)
{
    const char *id;
    json_t *v;

    json_object_foreach(used, id, v)
    {
        json_t *cur = json_object_get(merged, id);
        if (cur != NULL && json_integer_value(cur) >= json_integer_value(v))
            continue;
        if (json_object_set_new(merged, id, json_integer(json_integer_value(v))) != 0)
            return -1;
    }
    return 0;
}

static int file_note_used(struct admin_store *s, json_t *used, char *err, size_t errlen)
{
    char *tmp = suffixed(s->used_path, ".new"), *text = NULL;
    json_t *merged = NULL;
    int rc = -1;

    if (tmp == NULL)
        return snprintf(err, errlen, "out of memory"), -1;
    if (admin_used_check(used, err, errlen) != 0 || file_lock(s, err, errlen) != 0) {
        free(tmp);
        return -1;
    }
    if ((merged = used_load(s, err, errlen)) == NULL)
        goto out;
    if (used_merge(merged, used) != 0 || (text = json_dumps(merged, JSON_COMPACT | JSON_SORT_KEYS)) == NULL) {
        snprintf(err, errlen, "out of memory");
        goto out;
    }
    if (write_fresh(tmp, text, (uid_t)-1, (gid_t)-1, err, errlen) != 0) {
        unlink(tmp);
        goto out;
    }
    if (rename(tmp, s->used_path) != 0) {
        snprintf(err, errlen, "%s: rename: %s", s->used_path, strerror(errno));
        unlink(tmp);
        goto out;
    }
    rc = fsync_dir(s->used_path, err, errlen);
out:
    file_unlock(s);
    json_decref(merged);
    free(text);
    free(tmp);
    return rc;
}

const struct admin_store_ops admin_store_file_ops = {file_lock,   file_read,      file_stage,    file_commit,
                                                     file_unlock, file_note_used, file_read_used};

int admin_store_file_init(struct admin_store *s, const char *path, uid_t owner, gid_t group)
{
    memset(s, 0, sizeof(*s));
    s->ops = &admin_store_file_ops;
    s->lock_fd = -1;
    s->owner = owner;
    s->group = group;
    s->path = strdup(path);
    s->temp = suffixed(path, ".new");
    s->lock_path = suffixed(path, ".lock");
    s->used_path = suffixed(path, ".used");
    if (s->path == NULL || s->temp == NULL || s->lock_path == NULL || s->used_path == NULL) {
        admin_store_file_free(s);
        return -1;
    }
    return 0;
}

void admin_store_file_free(struct admin_store *s)
{
    free(s->path);
    free(s->temp);
    free(s->lock_path);
    free(s->used_path);
    memset(s, 0, sizeof(*s));
    s->lock_fd = -1;
}
