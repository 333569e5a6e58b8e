/*
 * audit_records.c - the bodies of the gateway's audit records and the
 * packets beside them (audit/FORMAT.md).  Pure: builds JSON, sends nothing.
 *
 * Strings that come from clients are put into JSON through jansson with
 * JSON_ENSURE_ASCII; the writer re-encodes them again, so no client byte can
 * end a line.  Secrets never appear: the key id, not the key.
 */
#include "audit_records.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "auth/apikey.h"
#include "moat_base64.h"
#include "moat_hex.h"
#include "moat_json_escape.h"
#include "json/piston_json.h"

static void sha256_hex(const void *data, size_t len, char out[APIKEY_DIGEST_HEX + 1])
{
    uint8_t h[APIKEY_DIGEST_LEN];
    /* SHA-256 fetched once, a context per thread (EVP_sha256() is looked up
     * on every call) */
    if (apikey_digest(data, len, h) != 0)
        memset(h, 0, sizeof(h));
    moat_hex_encode(h, sizeof(h), out);
}

/* A JSON string from bytes that may not be valid UTF-8: invalid bytes
 * become U+FFFD so jansson accepts it. */
static json_t *safe_string(const char *s, size_t len)
{
    json_t *j = json_stringn(s, len);
    if (j != NULL)
        return j;
    char *copy = malloc(len * 3 + 1);
    size_t o = 0;
    if (copy == NULL)
        return json_string("");
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x80 && c != 0) {
            copy[o++] = (char)c;
        } else {
            copy[o++] = (char)0xEF;
            copy[o++] = (char)0xBF;
            copy[o++] = (char)0xBD;
        }
    }
    j = json_stringn(copy, o);
    free(copy);
    return j ? j : json_string("");
}

json_t *gw_audit_base(const struct gw_audit_who *who, const char *type)
{
    json_t *b = json_object();
    if (b == NULL)
        return NULL;
    json_object_set_new(b, "type", json_string(type));
    json_object_set_new(b, "request_id", json_string(who->request_id));
    json_object_set_new(b, "tenant", who->tenant ? json_string(who->tenant) : json_null());
    json_object_set_new(b, "key_id", who->key_id && who->key_id[0] ? safe_string(who->key_id, strlen(who->key_id)) : json_null());
    json_object_set_new(b, "client", json_string(who->client));
    json_object_set_new(b, "method", safe_string(who->method, who->method_len));
    json_object_set_new(b, "endpoint", safe_string(who->path, who->path_len > 256 ? 256 : who->path_len));
    return b;
}

void gw_audit_add_decision(json_t *b, const char *decision, const char *reason, const char *rule, int status, const char *message)
{
    json_object_set_new(b, "decision", json_string(decision));
    json_object_set_new(b, "reason", reason ? json_string(reason) : json_null());
    if (rule)
        json_object_set_new(b, "rule", safe_string(rule, strlen(rule)));
    json_object_set_new(b, "status", json_integer(status));
    if (message)
        json_object_set_new(b, "message", safe_string(message, strlen(message)));
}

/* A limit as the request holds it; 0 (not asked, for the CPU limits and rlimits) is -1. */
static json_t *limit_json(int64_t v)
{
    return json_integer(v > 0 ? (json_int_t)v : v == 0 ? -1 : (json_int_t)v);
}

json_t *gw_audit_limits(const struct moat_exec_request *q)
{
    json_t *limits = json_object();

    if (limits == NULL)
        return NULL;
    json_object_set_new(limits, "run_timeout_ms", json_integer(q->run_timeout_ms));
    json_object_set_new(limits, "compile_timeout_ms", json_integer(q->compile_timeout_ms));
    json_object_set_new(limits, "run_memory_bytes", json_integer(q->run_memory_bytes));
    json_object_set_new(limits, "compile_memory_bytes", json_integer(q->compile_memory_bytes));
    json_object_set_new(limits, "run_cpu_ms", limit_json(q->run_cpu_ms));
    json_object_set_new(limits, "compile_cpu_ms", limit_json(q->compile_cpu_ms));
    json_object_set_new(limits, "run_stack_kib", limit_json(q->run_stack_kib));
    json_object_set_new(limits, "run_processes", limit_json(q->run_processes));
    json_object_set_new(limits, "run_file_size_kib", limit_json(q->run_file_size_kib));
    return limits;
}

/* The compiler options as sent to the backend (each one argv element), or nothing. */
static void add_compiler_options(json_t *o, const struct moat_exec_request *q)
{
    json_t *a;

    if (q->ncompiler_options == 0 || (a = json_array()) == NULL)
        return;
    for (size_t i = 0; i < q->ncompiler_options; i++)
        json_array_append_new(a, safe_string(q->compiler_options[i], strlen(q->compiler_options[i])));
    json_object_set_new(o, "compiler_options", a);
}

void gw_audit_add_request(json_t *b, const struct moat_exec_request *q, const void *canonical, size_t canonical_len)
{
    char hex[APIKEY_DIGEST_HEX + 1];
    json_t *files = json_array();

    json_object_set_new(b, "language", safe_string(q->language, strlen(q->language)));
    json_object_set_new(b, "version", safe_string(q->version, strlen(q->version)));
    sha256_hex(canonical, canonical_len, hex);
    json_object_set_new(b, "request_sha256", json_string(hex));
    for (size_t i = 0; i < q->nfiles; i++) {
        json_t *f = json_object();
        sha256_hex(q->files[i].content, q->files[i].content_len, hex);
        json_object_set_new(f, "name", safe_string(q->files[i].name, strlen(q->files[i].name)));
        json_object_set_new(f, "bytes", json_integer((json_int_t)q->files[i].content_len));
        json_object_set_new(f, "sha256", json_string(hex));
        json_array_append_new(files, f);
    }
    json_object_set_new(b, "files", files);
    json_object_set_new(b, "stdin_bytes", json_integer((json_int_t)q->stdin_len));
    json_object_set_new(b, "args", json_integer((json_int_t)q->nargs));
    add_compiler_options(b, q);
    json_object_set_new(b, "limits", gw_audit_limits(q));
}

/* The output a batch result holds, counted and hashed. */
static void held_output(const struct moat_stage_result *st, struct gw_audit_output *o)
{
    o->stdout_bytes = st->stdout_len;
    sha256_hex(st->stdout_data ? (const void *)st->stdout_data : "", st->stdout_len, o->stdout_sha256);
    o->stderr_bytes = st->stderr_len;
    sha256_hex(st->stderr_data ? (const void *)st->stderr_data : "", st->stderr_len, o->stderr_sha256);
}

/* A stage's record: st's status and usage, o's output (NULL: st's own). */
static json_t *stage(const struct moat_stage_result *st, const struct gw_audit_output *o)
{
    struct gw_audit_output held;
    json_t *s = json_object();

    if (o == NULL) {
        held_output(st, &held);
        o = &held;
    }
    json_object_set_new(s, "status", json_string(moat_status_name(st->status)));
    json_object_set_new(s, "code", st->has_code ? json_integer(st->code) : json_null());
    json_object_set_new(s, "signal", st->has_signal ? json_integer(st->signal) : json_null());
    json_object_set_new(s, "cpu_ms", json_integer((json_int_t)st->cpu_ms));
    json_object_set_new(s, "wall_ms", json_integer((json_int_t)st->wall_ms));
    json_object_set_new(s, "memory_bytes", json_integer((json_int_t)st->memory_bytes));
    json_object_set_new(s, "stdout_bytes", json_integer((json_int_t)o->stdout_bytes));
    json_object_set_new(s, "stdout_sha256", json_string(o->stdout_sha256));
    json_object_set_new(s, "stderr_bytes", json_integer((json_int_t)o->stderr_bytes));
    json_object_set_new(s, "stderr_sha256", json_string(o->stderr_sha256));
    return s;
}

/* out: each stage's output (compile, run), or NULL: res's own. */
static void add_result(json_t *b, const struct moat_exec_request *q, const struct moat_exec_result *res,
                       const struct gw_audit_output out[2])
{
    if (q != NULL)
        json_object_set_new(b, "limits", gw_audit_limits(q));
    if (res->walls != NULL) /* checked by the decoder: [a-z] names joined by '+' */
        json_object_set_new(b, "walls", json_string(res->walls));
    if (res->compile.present)
        json_object_set_new(b, "compile", stage(&res->compile, out != NULL ? &out[0] : NULL));
    if (res->run.present)
        json_object_set_new(b, "run", stage(&res->run, out != NULL ? &out[1] : NULL));
    if (res->ntests > 0) { /* test cases, or Judge0's number_of_runs: each run stage */
        json_t *runs = json_array();
        for (size_t i = 0; runs != NULL && i < res->ntests; i++)
            json_array_append_new(runs, stage(&res->tests[i], NULL));
        json_object_set_new(b, "test_runs", runs != NULL ? runs : json_null());
    }
}

void gw_audit_add_result(json_t *b, const struct moat_exec_request *q, const struct moat_exec_result *res)
{
    add_result(b, q, res, NULL);
}

void gw_audit_add_session_result(json_t *b, const struct moat_exec_request *q, const struct moat_exec_result *res,
                                 const struct gw_audit_output out[2])
{
    add_result(b, q, res, out);
}

/* Walks a transcript's output chunks of one stage and stream, as
 * apikey_digest_pieces takes them, counting their bytes.  Data before the
 * first stage event belongs to none; after a compile stage event, to the
 * compile stage; otherwise to the run (as session.c's result reads it). */
struct stage_chunks {
    const struct gw_transcript *t;
    size_t i;
    uint8_t at_stage; /* the stage the walk is in, 0 before the first */
    int want_compile;
    uint8_t stream;
    uint64_t bytes;
};

static int next_stage_chunk(void *arg, const void **p, size_t *len)
{
    struct stage_chunks *c = arg;

    while (c->i < c->t->n) {
        const struct gw_tr_event *e = &c->t->ev[c->i++];
        if (e->kind == GW_TR_STAGE)
            c->at_stage = e->stage;
        else if (e->kind == GW_TR_DATA && c->at_stage != 0 && e->stream == c->stream && e->len > 0 &&
                 (c->at_stage == MOAT_STAGE_COMPILE) == c->want_compile) {
            *p = e->data;
            *len = e->len;
            c->bytes += e->len;
            return 1;
        }
    }
    return 0;
}

/* The bytes of one stage's stream in t, and their SHA-256 (hex; zeros when
 * hashing failed, as sha256_hex). */
static uint64_t stream_digest(const struct gw_transcript *t, int compile, uint8_t stream, char hex[APIKEY_DIGEST_HEX + 1])
{
    struct stage_chunks c = {t, 0, 0, compile, stream, 0};
    uint8_t h[APIKEY_DIGEST_LEN];

    if (apikey_digest_pieces(next_stage_chunk, &c, h) != 0)
        memset(h, 0, sizeof(h));
    moat_hex_encode(h, sizeof(h), hex);
    return c.bytes;
}

void gw_audit_transcript_output(const struct gw_transcript *t, struct gw_audit_output out[2])
{
    for (int k = 0; k < 2; k++) {
        out[k].stdout_bytes = stream_digest(t, k == 0, GW_TR_STDOUT, out[k].stdout_sha256);
        out[k].stderr_bytes = stream_digest(t, k == 0, GW_TR_STDERR, out[k].stderr_sha256);
    }
}

static json_t *b64(const uint8_t *data, size_t len)
{
    char *out = malloc(MOAT_BASE64_ENCODED_LEN(len) + 1);
    if (out == NULL)
        return json_null();
    size_t n = moat_base64_encode(data ? data : (const uint8_t *)"", len, out);
    json_t *j = json_stringn(out, n);
    free(out);
    return j ? j : json_null();
}

/* The packet of an execution, as an object: who, the request, the
 * metadata (verbatim), the result. */
static json_t *packet_object(const struct gw_audit_who *who, const struct moat_exec_request *q, const json_t *metadata,
                             const char *result_json)
{
    json_t *p = json_object(), *req = json_object(), *files = json_array(), *args = json_array(), *res = NULL;
    json_error_t jerr;

    json_object_set_new(p, "request_id", json_string(who->request_id));
    json_object_set_new(p, "tenant", who->tenant ? json_string(who->tenant) : json_null());
    json_object_set_new(req, "language", safe_string(q->language, strlen(q->language)));
    json_object_set_new(req, "version", safe_string(q->version, strlen(q->version)));
    for (size_t i = 0; i < q->nfiles; i++) {
        json_t *f = json_object();
        json_object_set_new(f, "name", safe_string(q->files[i].name, strlen(q->files[i].name)));
        json_object_set_new(f, "content_base64", b64(q->files[i].content, q->files[i].content_len));
        json_array_append_new(files, f);
    }
    json_object_set_new(req, "files", files);
    json_object_set_new(req, "stdin_base64", b64(q->stdin_data, q->stdin_len));
    for (size_t i = 0; i < q->nargs; i++)
        json_array_append_new(args, safe_string(q->args[i], strlen(q->args[i])));
    json_object_set_new(req, "args", args);
    json_object_set_new(req, "run_timeout_ms", json_integer(q->run_timeout_ms));
    json_object_set_new(req, "compile_timeout_ms", json_integer(q->compile_timeout_ms));
    json_object_set_new(req, "run_memory_bytes", json_integer(q->run_memory_bytes));
    json_object_set_new(req, "compile_memory_bytes", json_integer(q->compile_memory_bytes));
    add_compiler_options(req, q);
    json_object_set_new(req, "limits", gw_audit_limits(q)); /* the limits applied, all of them */
    json_object_set_new(p, "request", req);
    if (metadata != NULL)
        json_object_set_new(p, "metadata", json_deep_copy(metadata));
    if (result_json != NULL)
        res = json_loads(result_json, 0, &jerr);
    json_object_set_new(p, "result", res ? res : json_null());
    return p;
}

static char *packet_dump(json_t *p, size_t *len)
{
    char *out = p != NULL ? json_dumps(p, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;

    json_decref(p);
    if (out != NULL)
        *len = strlen(out);
    return out;
}

char *gw_audit_packet(const struct gw_audit_who *who, const struct moat_exec_request *q, const json_t *metadata,
                      const char *result_json, size_t *len)
{
    return packet_dump(packet_object(who, q, metadata, result_json), len);
}

static const char *const tr_streams[] = {"stdin", "stdout", "stderr"};

/* "SIGINT" for 2; null for a number without a name. */
static json_t *signal_json(int sig)
{
    const char *abbrev = sig > 0 ? sigabbrev_np(sig) : NULL;
    char name[32];

    if (abbrev == NULL)
        return json_null();
    snprintf(name, sizeof(name), "SIG%s", abbrev);
    return json_string(name);
}

/* One transcript event as the packet holds it (audit/FORMAT.md). */
static json_t *transcript_event(const struct gw_tr_event *e)
{
    json_t *o = json_object();
    const char *status;

    json_object_set_new(o, "at_ms", json_integer((json_int_t)e->at_ms));
    switch (e->kind) {
    case GW_TR_STAGE:
        json_object_set_new(o, "event", json_string("stage"));
        json_object_set_new(o, "stage", json_string(e->stage == MOAT_STAGE_COMPILE ? "compile" : "run"));
        break;
    case GW_TR_DATA:
        json_object_set_new(o, "event", json_string("data"));
        json_object_set_new(o, "stream", json_string(tr_streams[e->stream <= GW_TR_STDERR ? e->stream : 0]));
        json_object_set_new(o, "data_base64", b64(e->data, e->len));
        break;
    case GW_TR_EXIT:
        status = moat_status_piston(e->exit.status);
        json_object_set_new(o, "event", json_string("exit"));
        json_object_set_new(o, "stage", json_string(e->stage == MOAT_STAGE_COMPILE ? "compile" : "run"));
        json_object_set_new(o, "status", status != NULL ? json_string(moat_status_name(e->exit.status)) : json_null());
        json_object_set_new(o, "clock", moat_clock_name(e->clock) != NULL ? json_string(moat_clock_name(e->clock)) : json_null());
        json_object_set_new(o, "code", e->exit.has_code ? json_integer(e->exit.code) : json_null());
        json_object_set_new(o, "signal", e->exit.has_signal ? signal_json(e->exit.signal) : json_null());
        break;
    case GW_TR_SIGNAL:
        json_object_set_new(o, "event", json_string("signal"));
        json_object_set_new(o, "signal", signal_json(e->signal));
        break;
    case GW_TR_STDIN_CLOSE:
    default:
        json_object_set_new(o, "event", json_string("stdin_close"));
        break;
    }
    return o;
}

/*
 * A session's packet is written in two passes over its transcript, the
 * first counting bytes (dst NULL), the second writing them where the audit
 * client queues the record: the output is never held twice (as a JSON tree
 * and its text, then the queue's copy), only once raw in the transcript
 * and once in the queue as base64.  The bytes are those jansson would dump
 * (JSON_COMPACT | JSON_PRESERVE_ORDER): the members before the transcript
 * are its dump, and a data event's fixed members and base64 need no
 * escaping.
 */
struct packet_out {
    uint8_t *dst; /* NULL: count only */
    size_t off, cap;
    int failed;
};

static void out_put(struct packet_out *w, const void *p, size_t n)
{
    if (w->failed)
        return;
    if (w->dst != NULL) {
        if (n > w->cap - w->off) {
            w->failed = 1;
            return;
        }
        memcpy(w->dst + w->off, p, n);
    }
    w->off += n;
}

static void out_event(struct packet_out *w, const struct gw_tr_event *e)
{
    char head[128];
    char *text;
    json_t *o;
    int n;
    size_t b64len = MOAT_BASE64_ENCODED_LEN(e->len);

    if (e->kind != GW_TR_DATA) {
        o = transcript_event(e);
        text = o != NULL ? json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
        json_decref(o);
        if (text == NULL)
            w->failed = 1;
        else
            out_put(w, text, strlen(text));
        free(text);
        return;
    }
    n = snprintf(head, sizeof(head), "{\"at_ms\":%" JSON_INTEGER_FORMAT ",\"event\":\"data\",\"stream\":\"%s\",\"data_base64\":\"",
                 (json_int_t)e->at_ms, tr_streams[e->stream <= GW_TR_STDERR ? e->stream : 0]);
    out_put(w, head, (size_t)n);
    if (w->failed)
        return;
    if (w->dst != NULL) {
        if (b64len + 1 > w->cap - w->off) { /* its NUL lands where the closing quote goes */
            w->failed = 1;
            return;
        }
        moat_base64_encode(e->data != NULL ? e->data : (const uint8_t *)"", e->len, (char *)w->dst + w->off);
    }
    w->off += b64len;
    out_put(w, "\"}", 2);
}

/* The packet: its members but the last, then "transcript":[events]. */
static void out_packet(struct packet_out *w, const struct gw_session_packet *p)
{
    static const char open[] = ",\"transcript\":[";

    out_put(w, p->head, p->head_len - 1); /* without its closing brace */
    out_put(w, open, sizeof(open) - 1);
    /* only the session's own thread appends, and this is that thread: no lock */
    for (size_t i = 0; i < p->t->n && !w->failed; i++) {
        if (i > 0)
            out_put(w, ",", 1);
        out_event(w, &p->t->ev[i]);
    }
    out_put(w, "]}", 2);
}

int gw_audit_session_packet(struct gw_session_packet *sp, const struct gw_audit_who *who, const struct moat_exec_request *q,
                            const json_t *metadata, json_t *limits, const struct gw_transcript *t, const char *result_json)
{
    json_t *p = packet_object(who, q, metadata, result_json);
    struct packet_out count = {0};

    memset(sp, 0, sizeof(*sp));
    if (p == NULL)
        return -1;
    json_object_set_new(p, "kind", json_string("session"));
    json_object_set(p, "limits", limits != NULL ? limits : json_null());
    if ((sp->head = packet_dump(p, &sp->head_len)) == NULL || sp->head_len < 2) {
        gw_audit_session_packet_free(sp);
        return -1;
    }
    sp->t = t;
    out_packet(&count, sp);
    if (count.failed) {
        gw_audit_session_packet_free(sp);
        return -1;
    }
    sp->len = count.off;
    return 0;
}

int gw_audit_session_packet_write(void *arg, uint8_t *dst, size_t len)
{
    const struct gw_session_packet *sp = arg;
    struct packet_out w = {dst, 0, len, 0};

    out_packet(&w, sp);
    return w.failed || w.off != len ? -1 : 0;
}

void gw_audit_session_packet_free(struct gw_session_packet *sp)
{
    free(sp->head);
    memset(sp, 0, sizeof(*sp));
}

/* Appends raw bytes; -1 when they do not fit. */
static int fast_put(char *b, size_t size, size_t *off, const char *s, size_t n)
{
    if (n >= size - *off)
        return -1;
    memcpy(b + *off, s, n);
    *off += n;
    return 0;
}

/* Appends ,"name":"value" (value NULL: null); 0, or -1 when the value is
 * not plain ASCII or does not fit (the caller then takes the jansson path).
 * name is a literal of ours. */
static int fast_str(char *b, size_t size, size_t *off, const char *name, const char *v, size_t vlen)
{
    if ((*off > 1 && fast_put(b, size, off, ",", 1)) || fast_put(b, size, off, "\"", 1) ||
        fast_put(b, size, off, name, strlen(name)) || fast_put(b, size, off, "\":", 2))
        return -1;
    if (v == NULL)
        return fast_put(b, size, off, "null", 4);
    if (fast_put(b, size, off, "\"", 1) || moat_json_escape(b, size, off, v, vlen, MOAT_JSON_ASCII_ONLY) != 0)
        return -1;
    return fast_put(b, size, off, "\"", 1);
}

int gw_audit_fast_decision(const struct gw_audit_who *who, const char *type, const char *decision, const char *reason,
                           const char *rule, int status, const char *message, char *buf, size_t size, size_t *len)
{
    char digits[12];
    size_t off = 1, nd = 0;
    unsigned st = status < 0 ? 0u : (unsigned)status;

    if (size < 2)
        return -1;
    buf[0] = '{';
    if (fast_str(buf, size, &off, "type", type, strlen(type)) ||
        fast_str(buf, size, &off, "request_id", who->request_id, strlen(who->request_id)) ||
        fast_str(buf, size, &off, "tenant", who->tenant, who->tenant ? strlen(who->tenant) : 0) ||
        fast_str(buf, size, &off, "key_id", who->key_id && who->key_id[0] ? who->key_id : NULL,
                 who->key_id ? strlen(who->key_id) : 0) ||
        fast_str(buf, size, &off, "client", who->client, strlen(who->client)) ||
        fast_str(buf, size, &off, "method", who->method, who->method_len) ||
        fast_str(buf, size, &off, "endpoint", who->path, who->path_len > 256 ? 256 : who->path_len) ||
        fast_str(buf, size, &off, "decision", decision, strlen(decision)) ||
        fast_str(buf, size, &off, "reason", reason, reason ? strlen(reason) : 0) ||
        (rule && fast_str(buf, size, &off, "rule", rule, strlen(rule))))
        return -1;
    do { /* the status, in decimal, without printf */
        digits[nd++] = (char)('0' + st % 10);
        st /= 10;
    } while (st != 0);
    if (fast_put(buf, size, &off, ",\"status\":", 10))
        return -1;
    while (nd > 0)
        if (fast_put(buf, size, &off, &digits[--nd], 1))
            return -1;
    if (message && fast_str(buf, size, &off, "message", message, strlen(message)))
        return -1;
    if (fast_put(buf, size, &off, "}", 1))
        return -1;
    buf[off] = '\0';
    *len = off;
    return 0;
}

char *gw_audit_dump(json_t *body, size_t *len)
{
    char *s = json_dumps(body, JSON_COMPACT | JSON_ENSURE_ASCII | JSON_PRESERVE_ORDER);
    if (s != NULL)
        *len = strlen(s);
    return s;
}

/* ---- reading an execution back, and reviews -------------------------------------------- */

/* Each line of records (JSON, '\n' after each) to fn, with its bytes;
 * stops at the first fn that returns non-zero, or a line that is not JSON
 * (-1). */
static int each_record(const char *records, size_t len, int (*fn)(void *, json_t *, const char *, size_t), void *arg)
{
    size_t at = 0;
    while (at < len) {
        const char *nl = memchr(records + at, '\n', len - at);
        size_t n = nl ? (size_t)(nl - (records + at)) : len - at;
        json_t *rec = json_loadb(records + at, n, JSON_REJECT_DUPLICATES, NULL);
        if (!json_is_object(rec)) {
            json_decref(rec);
            return -1;
        }
        int rc = fn(arg, rec, records + at, n);
        json_decref(rec);
        if (rc != 0)
            return rc;
        at += n + 1;
    }
    return 0;
}

struct result_of {
    uint64_t seq;
    char *hex;
};

static int note_result(void *arg, json_t *rec, const char *line, size_t len)
{
    struct result_of *r = arg;
    json_int_t seq = json_integer_value(json_object_get(rec, "seq"));
    const char *type = json_string_value(json_object_get(rec, "type"));
    if (type != NULL && strcmp(type, "result") == 0 && seq > 0) {
        r->seq = (uint64_t)seq;
        sha256_hex(line, len, r->hex);
    }
    return 0;
}

int gw_audit_result_of(const char *records, size_t len, uint64_t *seq, char sha256_hex[65])
{
    struct result_of r = {0, sha256_hex};
    if (each_record(records, len, note_result, &r) != 0 || r.seq == 0)
        return -1;
    *seq = r.seq;
    return 0;
}

static int is_verdict(const char *v)
{
    return v != NULL && (strcmp(v, "approved") == 0 || strcmp(v, "rejected") == 0 || strcmp(v, "needs_changes") == 0);
}

json_t *gw_audit_review(const struct gw_audit_who *reviewer, const char *request_id, const char *verdict, const char *note,
                        size_t note_len, uint64_t result_seq, const char *result_sha256, const char **why)
{
    json_t *n;
    if (!is_verdict(verdict)) {
        *why = "verdict must be approved, rejected or needs_changes";
        return NULL;
    }
    if (note_len > GW_AUDIT_REVIEW_MAX_NOTE) {
        *why = "note is longer than 4096 bytes";
        return NULL;
    }
    if (memchr(note, '\0', note_len) != NULL || (n = json_stringn(note, note_len)) == NULL) {
        *why = "note must be UTF-8 text without NUL";
        return NULL;
    }
    json_t *b = json_pack("{s:s, s:s, s:s, s:s, s:s, s:s, s:s, s:o, s:I, s:s}", "type", "review", "request_id", request_id,
                          "tenant", reviewer->tenant ? reviewer->tenant : "", "key_id", reviewer->key_id ? reviewer->key_id : "",
                          "review_request_id", reviewer->request_id, "client", reviewer->client, "verdict", verdict, "note", n,
                          "result_seq", (json_int_t)result_seq, "result_sha256", result_sha256);
    if (b == NULL)
        *why = "out of memory";
    return b;
}

struct execution {
    json_t *records, *reviews;
};

static int add_record(void *arg, json_t *rec, const char *line, size_t len)
{
    struct execution *x = arg;
    const char *type = json_string_value(json_object_get(rec, "type"));
    (void)line;
    (void)len;
    json_array_append(x->records, rec);
    if (type != NULL && strcmp(type, "review") == 0)
        json_array_append_new(x->reviews,
                              json_pack("{s:O?, s:O?, s:O?, s:O?, s:O?}", "verdict", json_object_get(rec, "verdict"), "note",
                                        json_object_get(rec, "note"), "key_id", json_object_get(rec, "key_id"), "time",
                                        json_object_get(rec, "time"), "result_seq", json_object_get(rec, "result_seq")));
    return 0;
}

json_t *gw_audit_execution(const char *request_id, const char *records, size_t len, const uint8_t *packet, size_t packet_len)
{
    struct execution x = {json_array(), json_array()};
    json_t *p = packet ? json_loadb((const char *)packet, packet_len, 0, NULL) : json_null();
    json_t *out = NULL;
    if (x.records != NULL && x.reviews != NULL && p != NULL && each_record(records, len, add_record, &x) == 0)
        out = json_pack("{s:s, s:O, s:O, s:O}", "request_id", request_id, "packet", p, "records", x.records, "reviews", x.reviews);
    json_decref(p);
    json_decref(x.records);
    json_decref(x.reviews);
    return out;
}
