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
 *   writable   h2o_socket_notify_write calls back once, when the
 *              descriptor is writable (also how a non-blocking connect
 *              completes); the callback calls redisAsyncHandleWrite.  h2o
 *              cannot take a notification back, so delWrite only clears
 *              want_write and the one still armed is ignored when it fires;
 *              addWrite arms one unless one is armed already (hiredis asks
 *              again and again: the hooks must be idempotent).
 *   cleanup    hiredis is freeing the context (it will call no hook
 *              again).  The socket is closed through h2o, which removes it
 *              from epoll and closes the descriptor; hiredis' own close is
 *              turned off by setting the context's fd to -1, so the number
 *              is closed exactly once and never one another thread reused.
 *
 * Ownership: anything hiredis calls (redisAsyncHandleRead/Write) may free
 * the context and with it this adapter (cleanup), so nothing here touches
 * its state after calling into hiredis.  h2o frees a closed socket's memory
 * on a later turn of the loop, so closing it from inside its own callback
 * is safe.
 */
#include "redis_h2o.h"

#include <stdlib.h>

struct redis_h2o {
    redisAsyncContext *ac;
    h2o_socket_t *sock;
    int reading;    /* read_start is in force */
    int want_write; /* hiredis wants to know when it may write */
    int armed;      /* a notify_write is pending */
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

static void add_write(void *data)
{
    struct redis_h2o *e = data;

    e->want_write = 1;
    if (!e->armed) {
        e->armed = 1;
        h2o_socket_notify_write(e->sock, on_writable);
    }
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
