/*
 * audit_files.c - the audit directory's log files and packs: their names,
 * opening, rotation, packets appended to packs, and the packs' retention.
 *
 * Theory of operation
 * -------------------
 * The log is a run of files audit-<first seq, 16 digits>.log, each O_APPEND,
 * mode 0600 and chattr +a where permitted; the newest is the current one.
 * Beside each is its pack, audit-<the same>.pack, opened at its first
 * packet: the packets (full request and result of an execution) of the
 * records in that file, one after the other, with no file, inode or
 * directory entry per packet.  A record names its packet by SHA-256 and
 * place ("<pack>:<offset>:<length>"); the log is the pack's index.
 *
 *   rotation:  past rotate_bytes or rotate_seconds, before the next record:
 *              a torn line is ended and repaired in the file it is in, the
 *              file and its pack synced, then the next file created (its
 *              directory entry fsynced) and its pack left to its first packet.
 *   packets:   appended and made durable with the batch (audit_log_sync),
 *              before the record naming them is acknowledged.  A write that
 *              fails part-way leaves bytes no record names; the next packet
 *              goes after them.
 *   retention: once an hour (audit_log_tick), packs whose last packet is older
 *              than packet_retention_s go whole; never the current file's.
 *   free space: what statvfs says the writer's user may still use, for the
 *              writer's disk reserve (audit_writer.c).
 */
#include "audit_log_internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "moat_io.h"

int alog_log_name(char *buf, size_t size, uint64_t first_seq)
{
    int n = snprintf(buf, size, "audit-%016llu.log", (unsigned long long)first_seq);
    return n > 0 && (size_t)n < size ? 0 : -1;
}

/* The pack beside a log file: audit-<its first seq>.pack. */
static int pack_name(char *buf, size_t size, uint64_t first_seq)
{
    int n = snprintf(buf, size, "audit-%016llu.pack", (unsigned long long)first_seq);
    return n > 0 && (size_t)n < size ? 0 : -1;
}

uint64_t alog_newest_log(int dirfd, uint64_t below)
{
    int fd = dup(dirfd);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    struct dirent *de;
    uint64_t best = 0;
    if (d == NULL) {
        if (fd >= 0)
            close(fd);
        return 0;
    }
    /* the dup shares dirfd's position, which an earlier call left at the end */
    rewinddir(d);
    while ((de = readdir(d)) != NULL) {
        unsigned long long s;
        char tail[8];
        if (sscanf(de->d_name, "audit-%16llu.%4s", &s, tail) == 2 && strcmp(tail, "log") == 0 && s > best && s < below)
            best = s;
    }
    closedir(d);
    return best;
}

/* chattr +a on fd where permitted; 1 if it worked. */
static int mark_append_only(const struct audit_log *l, int fd)
{
    int flags = 0;
    if (!l->cfg.append_only || ioctl(fd, FS_IOC_GETFLAGS, &flags) != 0)
        return 0;
    flags |= FS_APPEND_FL;
    return ioctl(fd, FS_IOC_SETFLAGS, &flags) == 0;
}

/* chattr -a on a pack about to be removed, where it was set. */
static void clear_append_only(int dirfd, const char *name)
{
    int fd = openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    int flags = 0;
    if (fd < 0)
        return;
    if (ioctl(fd, FS_IOC_GETFLAGS, &flags) == 0 && (flags & FS_APPEND_FL)) {
        flags &= ~FS_APPEND_FL;
        (void)ioctl(fd, FS_IOC_SETFLAGS, &flags);
    }
    close(fd);
}

int audit_log_free_bytes(const struct audit_log *l, uint64_t *free_bytes)
{
    struct statvfs sv;
    if (fstatvfs(l->dirfd, &sv) != 0)
        return -1;
    *free_bytes = (uint64_t)sv.f_bavail * (uint64_t)sv.f_frsize;
    return 0;
}

/* ---- log files -------------------------------------------------------------------- */

int alog_open_file(struct audit_log *l, uint64_t first_seq, int create, char *err, size_t errlen)
{
    char name[64];
    if (alog_log_name(name, sizeof(name), first_seq) != 0)
        return alog_fail(err, errlen, "log name");
    int flags = O_WRONLY | O_APPEND | O_NOFOLLOW | O_CLOEXEC | (create ? O_CREAT | O_EXCL : 0);
    int fd = openat(l->dirfd, name, flags, 0600);
    if (fd < 0)
        return alog_fail(err, errlen, "open %s: %s", name, strerror(errno));
    if (l->fd >= 0)
        close(l->fd);
    l->fd = fd;
    l->file_first_seq = first_seq;
    if (l->pack_fd >= 0) { /* synced before a rotation: the next packet opens this file's pack */
        close(l->pack_fd);
        l->pack_fd = -1;
        l->pack_dirty = 0;
    }
    struct stat st;
    l->file_bytes = fstat(fd, &st) == 0 ? (uint64_t)st.st_size : 0;
    l->file_started = time(NULL);
    if (create && fsync(l->dirfd) != 0)
        return alog_fail(err, errlen, "fsync directory: %s", strerror(errno));
    l->appended_ok = mark_append_only(l, l->fd);
    return 0;
}

int alog_rotation_due(const struct audit_log *l)
{
    return (l->file_bytes >= l->cfg.rotate_bytes ||
            (l->cfg.rotate_seconds && (uint64_t)(time(NULL) - l->file_started) >= l->cfg.rotate_seconds)) &&
           l->file_bytes > 0;
}

int alog_rotate(struct audit_log *l, char *err, size_t errlen)
{
    if (alog_sync_files(l, err, errlen) != 0)
        return -1;
    return alog_open_file(l, l->seq + 1, 1, err, errlen);
}

/* ---- packs ------------------------------------------------------------------------------ */

/* Opens the current file's pack (O_APPEND, mode 0600, chattr +a where
 * permitted) for its first packet of this run. */
static int open_pack(struct audit_log *l, const char *name, char *err, size_t errlen)
{
    struct stat st;
    int fd = openat(l->dirfd, name, O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0)
        return alog_fail(err, errlen, "open %s: %s", name, strerror(errno));
    if (fstat(fd, &st) != 0) {
        int saved = errno;
        close(fd);
        return alog_fail(err, errlen, "stat %s: %s", name, strerror(saved));
    }
    /* the pack's directory entry is durable before a record names it */
    if (st.st_size == 0 && fsync(l->dirfd) != 0) {
        int saved = errno;
        close(fd);
        return alog_fail(err, errlen, "fsync directory: %s", strerror(saved));
    }
    (void)mark_append_only(l, fd);
    l->pack_fd = fd;
    l->pack_bytes = (uint64_t)st.st_size;
    return 0;
}

/* Appends a packet to the current log file's pack and fills ref: its
 * SHA-256, and where it is ("<pack>:<offset>:<length>"). */
int alog_store_packet(struct audit_log *l, const void *packet, size_t len, struct packet_ref *ref, char *err, size_t errlen)
{
    uint8_t h[AUDIT_HASH_LEN];
    char name[40];
    size_t done = 0;

    if (pack_name(name, sizeof(name), l->file_first_seq) != 0)
        return alog_fail(err, errlen, "pack name");
    if (l->pack_fd < 0 && open_pack(l, name, err, errlen) != 0)
        return -1;
    audit_sha256(packet, len, h);
    moat_hex_encode(h, sizeof(h), ref->hex);
    snprintf(ref->at, sizeof(ref->at), "%s:%llu:%zu", name, (unsigned long long)l->pack_bytes, len);
    int rc = moat_write_full(l->pack_fd, packet, len, &done);
    l->pack_bytes += done;
    l->pack_dirty |= done > 0;
    if (rc != 0)
        return alog_fail(err, errlen, "write %s: %s", name, strerror(errno));
    return 0;
}

static int is_pack_name(const char *name)
{
    size_t n = strlen(name);
    return n >= 6 && strncmp(name, "audit-", 6) == 0 && strcmp(name + n - 5, ".pack") == 0;
}

void alog_expire_packs(struct audit_log *l, time_t now)
{
    char current[40];
    int fd = openat(l->dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    struct dirent *de;
    if (d == NULL) {
        if (fd >= 0)
            close(fd);
        return;
    }
    if (pack_name(current, sizeof(current), l->file_first_seq) != 0)
        current[0] = '\0';
    while ((de = readdir(d)) != NULL) {
        struct stat st;
        if (!is_pack_name(de->d_name) || strcmp(de->d_name, current) == 0)
            continue;
        if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode) &&
            (uint64_t)(now - st.st_mtime) > l->cfg.packet_retention_s) {
            clear_append_only(dirfd(d), de->d_name);
            unlinkat(dirfd(d), de->d_name, 0);
        }
    }
    closedir(d);
}
