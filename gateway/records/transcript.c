/*
 * transcript.c - a live session's events, kept for its audit packet and
 * read by its watchers (see transcript.h).
 *
 * Theory of operation
 * -------------------
 * Only the session appends, always on its own worker's thread.  Watchers
 * read from other threads, so appending and reading both hold the mutex;
 * a reader copies what it takes (the array may move when it grows) and
 * writes nothing to the transcript but its own cursor.  Memory is bounded
 * by the session's caps: stdin_bytes, and output_bytes per stream, each
 * held once, as raw bytes.  A data event's message (what its watchers and
 * its client read) is made from those bytes each time it is sent: a chunk
 * is at most MOAT_SESSION_CHUNK_MAX, and a watcher reads about
 * GW_WATCH_HIGH at a time, so the text made lives briefly and is small.
 * The audit packet is written from the raw bytes too (audit_records.c).
 */
#include "transcript.h"

#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "json/piston_json.h"

struct gw_transcript *gw_transcript_new(void)
{
    struct gw_transcript *t = calloc(1, sizeof(*t));

    if (t == NULL)
        return NULL;
    if (pthread_mutex_init(&t->mu, NULL) != 0) {
        free(t);
        return NULL;
    }
    t->refs = 1;
    return t;
}

void gw_transcript_hold(struct gw_transcript *t)
{
    __atomic_add_fetch(&t->refs, 1, __ATOMIC_SEQ_CST);
}

static void event_free(struct gw_tr_event *e)
{
    free(e->data);
    free(e->message);
    free(e->exit.message);
    memset(e, 0, sizeof(*e));
}

void gw_transcript_release(struct gw_transcript *t)
{
    if (t == NULL || __atomic_sub_fetch(&t->refs, 1, __ATOMIC_SEQ_CST) != 0)
        return;
    for (size_t i = 0; i < t->n; i++)
        event_free(&t->ev[i]);
    free(t->ev);
    pthread_mutex_destroy(&t->mu);
    free(t);
}

int gw_transcript_append(struct gw_transcript *t, struct gw_tr_event *ev)
{
    int rc = 0;

    pthread_mutex_lock(&t->mu);
    if (t->n == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 16;
        struct gw_tr_event *grown = realloc(t->ev, cap * sizeof(*grown));
        if (grown == NULL) {
            rc = -1;
        } else {
            t->ev = grown;
            t->cap = cap;
        }
    }
    if (rc == 0) {
        t->ev[t->n++] = *ev;
        t->data_bytes += ev->len;
        memset(ev, 0, sizeof(*ev)); /* taken */
    }
    pthread_mutex_unlock(&t->mu);
    if (rc != 0)
        event_free(ev);
    return rc;
}

void gw_transcript_end(struct gw_transcript *t, int code)
{
    pthread_mutex_lock(&t->mu);
    if (!t->ended) {
        t->ended = 1;
        t->end_code = code;
    }
    pthread_mutex_unlock(&t->mu);
}

static const char *const stream_names[] = {"stdin", "stdout", "stderr"};

/* A data event's message: the first msg_len bytes of pre then data. */
static char *data_message(const struct gw_tr_event *e, size_t *len)
{
    uint8_t *joined = NULL;
    const uint8_t *p = e->data;
    json_t *o = json_object(), *text;
    char *out = NULL;

    if (e->pre_len > 0) {
        size_t from_data = e->msg_len > e->pre_len ? e->msg_len - e->pre_len : 0;
        if ((joined = malloc(e->pre_len + from_data)) == NULL) {
            json_decref(o);
            return NULL;
        }
        memcpy(joined, e->pre, e->pre_len);
        if (from_data > 0)
            memcpy(joined + e->pre_len, e->data, from_data);
        p = joined;
    }
    text = piston_json_bytes(p != NULL ? p : (const uint8_t *)"", e->msg_len);
    free(joined);
    if (o != NULL && text != NULL && json_object_set_new(o, "type", json_string("data")) == 0 &&
        json_object_set_new(o, "stream", json_string(stream_names[e->stream <= GW_TR_STDERR ? e->stream : 0])) == 0 &&
        json_object_set_new(o, "data", text) == 0) {
        text = NULL;
        out = json_dumps(o, JSON_COMPACT);
    }
    json_decref(text);
    json_decref(o);
    if (out != NULL)
        *len = strlen(out);
    return out;
}

char *gw_transcript_message(const struct gw_tr_event *e, size_t *len)
{
    char *out;

    *len = 0;
    if (e->kind == GW_TR_DATA) {
        if (e->msg_len == 0)
            return NULL;
        out = data_message(e, len);
    } else {
        if (e->message == NULL)
            return NULL;
        if ((out = malloc(e->message_len + 1)) != NULL) {
            memcpy(out, e->message, e->message_len + 1);
            *len = e->message_len;
        }
    }
    if (out == NULL)
        *len = 1; /* out of memory */
    return out;
}

/* Has e a message, and about how long is it (a data event's: its bytes)? */
static size_t message_size(const struct gw_tr_event *e)
{
    if (e->kind == GW_TR_DATA)
        return e->msg_len;
    return e->message != NULL ? e->message_len : 0;
}

int gw_transcript_read(struct gw_transcript *t, size_t *cursor, size_t max_bytes, char ***out, size_t **lens, size_t *nout,
                       int *ended, int *end_code)
{
    size_t i, n = 0, bytes = 0, want = 0;
    int rc = 0;

    *out = NULL;
    *lens = NULL;
    *nout = 0;
    *ended = 0;
    pthread_mutex_lock(&t->mu);
    for (i = *cursor; i < t->n && (want == 0 || bytes < max_bytes); i++)
        if (message_size(&t->ev[i]) > 0) {
            want++;
            bytes += message_size(&t->ev[i]);
        }
    if (want > 0) {
        *out = calloc(want, sizeof(**out));
        *lens = calloc(want, sizeof(**lens));
        if (*out == NULL || *lens == NULL)
            rc = -1;
    }
    for (i = *cursor; rc == 0 && i < t->n; i++) {
        const struct gw_tr_event *e = &t->ev[i];
        if (message_size(e) == 0)
            continue;
        if (n == want)
            break; /* the next read starts here */
        if (((*out)[n] = gw_transcript_message(e, &(*lens)[n])) == NULL) {
            rc = -1;
            break;
        }
        n++;
    }
    if (rc == 0) {
        *cursor = i;
        *nout = n;
        if (i == t->n && t->ended) {
            *ended = 1;
            *end_code = t->end_code;
        }
    }
    pthread_mutex_unlock(&t->mu);
    if (rc != 0) {
        for (i = 0; i < n; i++)
            free((*out)[i]);
        free(*out);
        free(*lens);
        *out = NULL;
        *lens = NULL;
    }
    return rc;
}
