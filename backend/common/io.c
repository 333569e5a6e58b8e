/*
 * io.c - whole-buffer I/O loops and descriptor passing (see moat_io.h).
 */
#include "moat_io.h"

#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define FD_MARK 'F' /* the byte that carries the descriptors */

ssize_t moat_read_full(int fd, void *buf, size_t len)
{
    size_t off = 0;

    while (off < len) {
        ssize_t n = read(fd, (uint8_t *)buf + off, len - off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -1;
        if (n == 0)
            break;
        off += (size_t)n;
    }
    return (ssize_t)off;
}

/* The loop of moat_write_full and moat_send_full: write(2), or send(2)
 * with MSG_NOSIGNAL on a socket. */
static int put_full(int fd, const void *buf, size_t len, int sock, size_t *done)
{
    size_t off = 0;
    int rc = 0;

    while (off < len) {
        const uint8_t *p = (const uint8_t *)buf + off;
        ssize_t n = sock ? send(fd, p, len - off, MSG_NOSIGNAL) : write(fd, p, len - off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            if (n == 0)
                errno = sock ? EIO : ENOSPC;
            rc = -1;
            break;
        }
        off += (size_t)n;
    }
    if (done != NULL)
        *done = off;
    return rc;
}

int moat_write_full(int fd, const void *buf, size_t len, size_t *done)
{
    return put_full(fd, buf, len, 0, done);
}

int moat_send_full(int sock, const void *buf, size_t len)
{
    return put_full(sock, buf, len, 1, NULL);
}

/* Control buffer large enough for MOAT_IO_MAX_FDS, aligned for cmsghdr. */
union fd_control {
    char buf[CMSG_SPACE(sizeof(int) * MOAT_IO_MAX_FDS)];
    struct cmsghdr align;
};

/* One marker byte in iov, the control buffer in msg. */
static void fd_message(struct msghdr *msg, struct iovec *iov, char *mark, union fd_control *u, size_t controllen)
{
    memset(msg, 0, sizeof(*msg));
    iov->iov_base = mark;
    iov->iov_len = 1;
    msg->msg_iov = iov;
    msg->msg_iovlen = 1;
    msg->msg_control = u->buf;
    msg->msg_controllen = controllen;
}

int moat_send_fds(int sock, const int *fds, size_t n)
{
    char mark = FD_MARK;
    struct iovec iov;
    struct msghdr msg;
    union fd_control u;
    ssize_t w;

    if (n < 1 || n > MOAT_IO_MAX_FDS)
        return -1;
    memset(&u, 0, sizeof(u));
    fd_message(&msg, &iov, &mark, &u, CMSG_SPACE(sizeof(int) * n));
    struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * n);
    memcpy(CMSG_DATA(c), fds, sizeof(int) * n);
    while ((w = sendmsg(sock, &msg, MSG_NOSIGNAL)) < 0 && errno == EINTR)
        ;
    return w == 1 ? 0 : -1;
}

/* Closes every descriptor a refused message brought along. */
static void close_received(struct msghdr *msg)
{
    for (struct cmsghdr *c = CMSG_FIRSTHDR(msg); c != NULL; c = CMSG_NXTHDR(msg, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS || c->cmsg_len < CMSG_LEN(0))
            continue;
        size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < k; i++) {
            int fd;
            memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(fd));
            close(fd);
        }
    }
}

int moat_recv_fds(int sock, int *fds, size_t n)
{
    char mark = 0;
    struct iovec iov;
    struct msghdr msg;
    union fd_control u;
    ssize_t r;

    if (n < 1 || n > MOAT_IO_MAX_FDS)
        return -1;
    fd_message(&msg, &iov, &mark, &u, sizeof(u.buf));
    while ((r = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC)) < 0 && errno == EINTR)
        ;
    if (r < 0)
        return -1;
    struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
    if (r != 1 || mark != FD_MARK || (msg.msg_flags & MSG_CTRUNC) || c == NULL || c->cmsg_level != SOL_SOCKET ||
        c->cmsg_type != SCM_RIGHTS || c->cmsg_len != CMSG_LEN(sizeof(int) * n) || CMSG_NXTHDR(&msg, c) != NULL) {
        close_received(&msg);
        return -1;
    }
    memcpy(fds, CMSG_DATA(c), sizeof(int) * n);
    return 0;
}
