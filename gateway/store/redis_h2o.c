/*
 * redis_h2o.c - the h2o evloop adapter for hiredis async (redis_h2o.h).
 *
 * hiredis does its own reads and writes on the descriptor; the event loop
 * only has to say when the descriptor is ready.  h2o's socket API does that
 * in "poll" form:
 *
 *   readable   h2o_socket_dont_read(sock, 1) stops h2o from reading the
 *              bytes itself; h2o_socket_read_start then only calls back
 *              when the descriptor is readable, and the callback calls
 *              redisAsyncHandleRead (which reads, parses and runs the
 *              reply callbacks).  addRead/delRead start and stop that.
 *   writable   hiredis calls addWrite after each command it buffers.  On
 *              a connected socket that is almost always writable, so the
 *              write is not waited for: a zero-length h2o timer ("flush")
 *              fires at the end of the current turn of the loop, after
 *              every request that turn handled has queued its command, and
 *              calls redisAsyncHandleWrite once for all of them (one
 *              write(2), no epoll change).  Only when that write could not
 *              finish, and while connecting (a non-blocking connect
 *              completes when the descriptor turns writable), does the
 *              adapter wait: h2o_socket_notify_write calls back once, when
 *              the descriptor is writable.  h2o cannot take a notification
 *              back, so delWrite only clears want_write and one still armed
 *              is ignored when it fires; addWrite arms one unless one is
 *              armed already (hiredis asks again and again: the hooks must
 *              be idempotent).
 *   cleanup    hiredis is freeing the context (it will call no hook
 *              again).  The socket is closed through h2o, which removes it
 *              from epoll and closes the descriptor; hiredis' own close is
 *              turned off by setting the context's fd to -1, so the number
 *              is closed exactly once and never one another thread reused.
 *
 * Ownership: anything hiredis calls (redisAsyncHandleRead/Write) may free
 * the context and with it this adapter (cleanup), so nothing here touches
 * its state after calling into hiredis - except the flush, which needs to
 * know whether the write finished: while it runs, cleanup only marks the
 * adapter dead and the flush frees it.  h2o frees a closed socket's memory
 * on a later turn of the loop, so closing it from inside its own callback
 * is safe.
 */
#include "redis_h2o.h"

#include <stdlib.h>

struct redis_h2o {
    redisAsyncContext *ac;
    h2o_socket_t *sock;
    h2o_loop_t *loop;
    h2o_timeout_t flush_timeout; /* 0 ms: the end of this turn of the loop */
    h2o_timeout_entry_t flush;
    int reading;    /* read_start is in force */
    int want_write; /* hiredis wants to know when it may write */
    int armed;      /* a notify_write is pending */
    int flushing;   /* inside on_flush's call into hiredis */
    int dead;       /* cleanup ran during it: on_flush frees */
};

static void on_readable(h2o_socket_t *sock, const char *err)
{
    struct redis_h2o *e = sock->data;

    (void)err; /* hiredis' own read sees the error or the end */
    redisAsyncHandleRead(e->ac);
}

static void on_writable(h2o_socket_t *sock, const char *err)
{
    struct redis_h2o *e = sock->data;

    (void)err; /* hiredis checks SO_ERROR (connect) or sees the write fail */
    e->armed = 0;
    if (e->want_write)
        redisAsyncHandleWrite(e->ac);
}

static void add_read(void *data)
{
    struct redis_h2o *e = data;

    if (!e->reading) {
        e->reading = 1;
        h2o_socket_read_start(e->sock, on_readable);
    }
}

static void del_read(void *data)
{
    struct redis_h2o *e = data;

    if (e->reading) {
        e->reading = 0;
        h2o_socket_read_stop(e->sock);
    }
}

static void arm(struct redis_h2o *e)
{
    if (!e->armed) {
        e->armed = 1;
        h2o_socket_notify_write(e->sock, on_writable);
    }
}

/* The end of the turn: write what this turn's commands buffered. */
static void on_flush(h2o_timeout_entry_t *entry)
{
    struct redis_h2o *e = H2O_STRUCT_FROM_MEMBER(struct redis_h2o, flush, entry);

    if (!e->want_write)
        return;
    e->flushing = 1;
    redisAsyncHandleWrite(e->ac);
    e->flushing = 0;
    if (e->dead) {
        h2o_timeout_dispose(e->loop, &e->flush_timeout);
        free(e);
        return;
    }
    if (e->want_write) /* the kernel took only part: wait until it may take more */
        arm(e);
}

static void add_write(void *data)
{
    struct redis_h2o *e = data;

    e->want_write = 1;
    if (e->flushing || e->armed)
        return;
    if ((e->ac->c.flags & REDIS_CONNECTED) == 0)
        arm(e); /* the connect completes when the socket turns writable */
    else if (!h2o_timeout_is_linked(&e->flush))
        h2o_timeout_link(e->loop, &e->flush_timeout, &e->flush);
}

static void del_write(void *data)
{
    struct redis_h2o *e = data;

    e->want_write = 0;
}

static void cleanup(void *data)
{
    struct redis_h2o *e = data;

    e->ac->c.fd = -1; /* h2o closes it */
    e->ac->ev.data = NULL;
    e->sock->data = NULL;
    h2o_socket_close(e->sock);
    if (h2o_timeout_is_linked(&e->flush))
        h2o_timeout_unlink(&e->flush);
    if (e->flushing) {
        e->dead = 1;
        return;
    }
    h2o_timeout_dispose(e->loop, &e->flush_timeout);
    free(e);
}

int redis_h2o_attach(redisAsyncContext *ac, h2o_loop_t *loop)
{
    struct redis_h2o *e;

    if (ac->ev.data != NULL || ac->c.fd < 0)
        return REDIS_ERR;
    if ((e = calloc(1, sizeof(*e))) == NULL)
        return REDIS_ERR;
    if ((e->sock = h2o_evloop_socket_create(loop, ac->c.fd, 0)) == NULL) {
        free(e);
        return REDIS_ERR;
    }
    e->ac = ac;
    e->loop = loop;
    e->flush.cb = on_flush;
    h2o_timeout_init(loop, &e->flush_timeout, 0);
    e->sock->data = e;
    h2o_socket_dont_read(e->sock, 1);
    ac->ev.data = e;
    ac->ev.addRead = add_read;
    ac->ev.delRead = del_read;
    ac->ev.addWrite = add_write;
    ac->ev.delWrite = del_write;
    ac->ev.cleanup = cleanup;
    return REDIS_OK;
}
