/*
 * notify.c - sd_notify without libsystemd (see moat_notify.h).
 *
 * One datagram socket per process, connected once by moat_notify_open() and
 * kept in a file-static descriptor (like log.c's state: one per process).
 * Only the process that opened it, and its forks, can send; exec'd programs
 * cannot (close-on-exec, and the variable is gone from the environment).
 */
#include "moat_notify.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "moat_errf.h"

static int notify_fd = -1;

/* $NOTIFY_SOCKET as a sockaddr_un: a path ("/run/systemd/notify") or an
 * abstract name ("@name": a leading NUL byte, no terminator counted). */
static int notify_address(const char *s, struct sockaddr_un *sa, socklen_t *len, char *err, size_t errlen)
{
    size_t n = strlen(s);

    memset(sa, 0, sizeof(*sa));
    sa->sun_family = AF_UNIX;
    if ((s[0] != '/' && s[0] != '@') || n < 2 || n >= sizeof(sa->sun_path))
        return moat_errf(err, errlen, "NOTIFY_SOCKET=%s: not a socket path or an abstract socket name", s);
    memcpy(sa->sun_path, s, n);
    if (s[0] == '@')
        sa->sun_path[0] = '\0';
    *len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n + (s[0] == '@' ? 0 : 1));
    return 0;
}

int moat_notify_open(char *err, size_t errlen)
{
    const char *s = getenv("NOTIFY_SOCKET");
    struct sockaddr_un sa;
    socklen_t len = 0;

    if (s == NULL || notify_fd >= 0)
        return 0;
    if (notify_address(s, &sa, &len, err, errlen) != 0)
        return -1;
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return moat_errf(err, errlen, "NOTIFY_SOCKET: socket: %s", strerror(errno));
    if (connect(fd, (const struct sockaddr *)&sa, len) != 0) {
        int saved = errno;
        close(fd);
        return moat_errf(err, errlen, "NOTIFY_SOCKET=%s: connect: %s", s, strerror(saved));
    }
    notify_fd = fd;
    unsetenv("NOTIFY_SOCKET");
    return 0;
}

void moat_notify(const char *state)
{
    if (notify_fd < 0)
        return;
    /* one datagram; EINTR is the only failure worth a second try */
    while (write(notify_fd, state, strlen(state)) < 0 && errno == EINTR)
        ;
}

void moat_notify_reloading(void)
{
    struct timespec ts;
    char state[64];

    clock_gettime(CLOCK_MONOTONIC, &ts);
    snprintf(state, sizeof(state), "RELOADING=1\nMONOTONIC_USEC=%llu",
             (unsigned long long)ts.tv_sec * 1000000ull + (unsigned long long)ts.tv_nsec / 1000ull);
    moat_notify(state);
}
