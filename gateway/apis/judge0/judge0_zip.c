/*
 * judge0_zip.c - additional_files unpacked in memory (see judge0_zip.h).
 *
 * Theory of operation
 * -------------------
 * A zip archive is read from its central directory, the archive's own
 * table of contents at its end, and every entry is checked against the
 * local header it points to before a byte is inflated:
 *
 *   1 the end record      one disk, no zip64, the directory inside the
 *                         archive and before the end record;
 *   2 the directory       per entry: no encryption, stored or deflated,
 *                         a name moat_path_check allows (no "..", no
 *                         absolute path, no control character), no link
 *                         or special file (the Unix mode of the entry),
 *                         the count and the declared sizes within limits;
 *                         directories ("dir/") are only checked: the box
 *                         makes a file's directories from its name;
 *   3 the names together  each once; never a file and a directory at once;
 *   4 the data            the local header agrees with the directory (name,
 *                         method), its data lies inside the archive before
 *                         the directory and overlaps no other entry's;
 *                         inflating stops at the declared size (an archive
 *                         that lies is refused at the first byte too many:
 *                         a bomb never gets past the limits), and the
 *                         CRC-32 must match.
 *
 * Nothing is written anywhere: the files become an execution request's
 * files, which the backend writes inside /box by the same name rules.
 */
#include "judge0_zip.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <zlib.h>

#include "moat_errf.h"
#include "moat_path.h"

#define SIG_END   0x06054b50u
#define SIG_DIR   0x02014b50u
#define SIG_LOCAL 0x04034b50u
#define END_LEN   22
#define DIR_LEN   46
#define LOCAL_LEN 30

#define FLAG_ENCRYPTED        0x0001u
#define FLAG_STRONG_ENCRYPTED 0x0040u
#define METHOD_STORED         0
#define METHOD_DEFLATED       8
#define HOST_UNIX             3
#define MODE_TYPE             0170000u
#define MODE_REG              0100000u
#define MODE_DIR              0040000u

struct entry {
    const char *name; /* into the archive */
    size_t name_len;
    int is_dir;
    uint16_t method;
    uint32_t crc, csize, usize, local;
    size_t data_at; /* step 4 */
};

static uint16_t le16(const uint8_t *p)
{
    return (uint16_t)(p[0] | p[1] << 8);
}

static uint32_t le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* 1. The end record: where the directory is and how many entries it has. */
static int find_end(const uint8_t *zip, size_t len, size_t *dir_at, size_t *dir_len, size_t *count, char *err, size_t errlen)
{
    size_t at;

    if (len < END_LEN)
        return moat_errf(err, errlen, "is not a zip archive");
    for (at = len - END_LEN;; at--) {
        if (le32(zip + at) == SIG_END && at + END_LEN + le16(zip + at + 20) == len)
            break;
        if (at == 0 || len - at > END_LEN + 0xffff)
            return moat_errf(err, errlen, "is not a zip archive (no end of central directory)");
    }
    const uint8_t *e = zip + at;
    if (le16(e + 4) != 0 || le16(e + 6) != 0 || le16(e + 8) != le16(e + 10))
        return moat_errf(err, errlen, "spans several disks");
    if (le16(e + 10) == 0xffff || le32(e + 12) == 0xffffffffu || le32(e + 16) == 0xffffffffu)
        return moat_errf(err, errlen, "is a zip64 archive (not supported)");
    *count = le16(e + 10);
    *dir_len = le32(e + 12);
    *dir_at = le32(e + 16);
    if (*dir_at > at || *dir_len > at - *dir_at)
        return moat_errf(err, errlen, "has its central directory outside the archive");
    return 0;
}

/* 2. One directory entry at p (left bytes), checked alone. */
static int read_entry(const uint8_t *p, size_t left, struct entry *e, size_t *used, char *err, size_t errlen)
{
    enum moat_path_problem problem;
    uint16_t flags;
    uint32_t mode;

    if (left < DIR_LEN || le32(p) != SIG_DIR)
        return moat_errf(err, errlen, "has a broken central directory");
    e->name_len = le16(p + 28);
    *used = DIR_LEN + e->name_len + le16(p + 30) + le16(p + 32);
    if (*used > left)
        return moat_errf(err, errlen, "has a broken central directory");
    e->name = (const char *)p + DIR_LEN;
    flags = le16(p + 8);
    e->method = le16(p + 10);
    e->crc = le32(p + 16);
    e->csize = le32(p + 20);
    e->usize = le32(p + 24);
    e->local = le32(p + 42);
    mode = le32(p + 38) >> 16;
    e->is_dir = e->name_len > 0 && e->name[e->name_len - 1] == '/';
    problem = moat_path_check(e->name, e->name_len - (size_t)e->is_dir);
    if (problem != MOAT_PATH_OK)
        return moat_errf(err, errlen, "entry '%.*s' %s", (int)(e->name_len > 64 ? 64 : e->name_len), e->name,
                         moat_path_problem_text(problem));
    if (flags & (FLAG_ENCRYPTED | FLAG_STRONG_ENCRYPTED))
        return moat_errf(err, errlen, "entry '%.*s' is encrypted", (int)e->name_len, e->name);
    if (p[5] == HOST_UNIX && (mode & MODE_TYPE) != 0 && (mode & MODE_TYPE) != (e->is_dir ? MODE_DIR : MODE_REG))
        return moat_errf(err, errlen, "entry '%.*s' is a symbolic link or a special file", (int)e->name_len, e->name);
    if (e->method != METHOD_STORED && e->method != METHOD_DEFLATED)
        return moat_errf(err, errlen, "entry '%.*s' uses compression method %u (only stored and deflate)", (int)e->name_len,
                         e->name, e->method);
    if (e->method == METHOD_STORED && e->csize != e->usize)
        return moat_errf(err, errlen, "entry '%.*s' has inconsistent sizes", (int)e->name_len, e->name);
    if (e->is_dir && e->usize != 0)
        return moat_errf(err, errlen, "directory entry '%.*s' has data", (int)e->name_len, e->name);
    return 0;
}

/* 3. The names together: each once, never a file and a directory. */
static int check_names(const struct entry *es, size_t n, char *err, size_t errlen)
{
    for (size_t i = 0; i < n; i++) {
        if (es[i].is_dir)
            continue;
        for (size_t k = 0; k < n; k++) {
            char a[MOAT_MAX_NAME_LEN + 2], b[MOAT_MAX_NAME_LEN + 2];
            size_t blen = es[k].name_len - (size_t)es[k].is_dir;
            if (k == i)
                continue;
            snprintf(a, sizeof(a), "%.*s", (int)es[i].name_len, es[i].name);
            snprintf(b, sizeof(b), "%.*s", (int)blen, es[k].name);
            if (strcmp(a, b) == 0)
                return moat_errf(err, errlen, "holds '%s' twice", a);
            if (moat_path_is_dir_of(a, b))
                return moat_errf(err, errlen, "holds '%s' both as a file and as a directory", a);
        }
    }
    return 0;
}

/* 4a. Where an entry's data is, by its local header. */
static int locate(const uint8_t *zip, size_t dir_at, struct entry *e, char *err, size_t errlen)
{
    const uint8_t *l = zip + e->local;

    if (e->local > dir_at || dir_at - e->local < LOCAL_LEN || le32(l) != SIG_LOCAL)
        return moat_errf(err, errlen, "entry '%.*s' has no local header", (int)e->name_len, e->name);
    size_t nlen = le16(l + 26), xlen = le16(l + 28);
    e->data_at = e->local + LOCAL_LEN + nlen + xlen;
    if (nlen != e->name_len || memcmp(l + LOCAL_LEN, e->name, nlen) != 0 || le16(l + 8) != e->method)
        return moat_errf(err, errlen, "entry '%.*s' disagrees with its local header", (int)e->name_len, e->name);
    if (e->data_at > dir_at || dir_at - e->data_at < e->csize)
        return moat_errf(err, errlen, "entry '%.*s' lies outside the archive", (int)e->name_len, e->name);
    return 0;
}

/* 4b. No two entries share bytes (overlapping entries are a bomb's trick). */
static int check_overlaps(const struct entry *es, size_t n, char *err, size_t errlen)
{
    for (size_t i = 0; i < n; i++)
        for (size_t k = i + 1; k < n; k++) {
            size_t a0 = es[i].local, a1 = es[i].data_at + es[i].csize;
            size_t b0 = es[k].local, b1 = es[k].data_at + es[k].csize;
            if (a0 < b1 && b0 < a1)
                return moat_errf(err, errlen, "has overlapping entries");
        }
    return 0;
}

/* 4c. The bytes of one file, exactly usize of them, CRC checked. */
static int inflate_entry(const uint8_t *zip, const struct entry *e, uint8_t **out, char *err, size_t errlen)
{
    uint8_t *buf = malloc((size_t)e->usize + 1);
    z_stream zs;
    int rc;

    if (buf == NULL)
        return moat_errf(err, errlen, "out of memory");
    if (e->method == METHOD_STORED) {
        memcpy(buf, zip + e->data_at, e->usize);
    } else {
        memset(&zs, 0, sizeof(zs));
        if (inflateInit2(&zs, -MAX_WBITS) != Z_OK) {
            free(buf);
            return moat_errf(err, errlen, "out of memory");
        }
        zs.next_in = (Bytef *)(uintptr_t)(zip + e->data_at); /* zlib only reads it */
        zs.avail_in = e->csize;
        zs.next_out = buf;
        zs.avail_out = e->usize + 1; /* one byte more than declared: a lie shows */
        rc = inflate(&zs, Z_FINISH);
        inflateEnd(&zs);
        if (rc != Z_STREAM_END || zs.total_out != e->usize) {
            free(buf);
            return moat_errf(err, errlen, "entry '%.*s' does not inflate to its declared size", (int)e->name_len, e->name);
        }
    }
    if (crc32(0, buf, e->usize) != e->crc) {
        free(buf);
        return moat_errf(err, errlen, "entry '%.*s' fails its CRC check", (int)e->name_len, e->name);
    }
    *out = buf;
    return 0;
}

static void free_files(struct moat_file *fs, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free(fs[i].name);
        free(fs[i].content);
    }
    free(fs);
}

int judge0_zip_unpack(const uint8_t *zip, size_t len, const struct judge0_zip_limits *lim, struct moat_file **files, size_t *nfiles,
                      char *err, size_t errlen)
{
    size_t dir_at = 0, dir_len = 0, count = 0, used = 0, nreg = 0, total = 0, n = 0;
    struct entry *es = NULL;
    struct moat_file *fs = NULL;
    int rc = -1;

    *files = NULL;
    *nfiles = 0;
    if (find_end(zip, len, &dir_at, &dir_len, &count, err, errlen) != 0)
        return -1;
    if (count > 4 * lim->max_files + 16)
        return moat_errf(err, errlen, "has more than %zu files", lim->max_files);
    if (count > 0 && (es = calloc(count, sizeof(*es))) == NULL)
        return moat_errf(err, errlen, "out of memory");
    for (size_t at = dir_at; n < count; n++, at += used) {
        if (read_entry(zip + at, dir_at + dir_len - at, &es[n], &used, err, errlen) != 0)
            goto out;
        if (!es[n].is_dir && (++nreg > lim->max_files || (total += es[n].usize) > lim->max_bytes)) {
            moat_errf(err, errlen, nreg > lim->max_files ? "has more than %zu files" : "unpacks to more than %zu bytes",
                      nreg > lim->max_files ? lim->max_files : lim->max_bytes);
            goto out;
        }
    }
    if (check_names(es, n, err, errlen) != 0)
        goto out;
    for (size_t i = 0; i < n; i++)
        if (locate(zip, dir_at, &es[i], err, errlen) != 0)
            goto out;
    if (check_overlaps(es, n, err, errlen) != 0)
        goto out;
    if (nreg > 0 && (fs = calloc(nreg, sizeof(*fs))) == NULL) {
        moat_errf(err, errlen, "out of memory");
        goto out;
    }
    for (size_t i = 0, k = 0; i < n; i++) {
        if (es[i].is_dir)
            continue;
        if ((fs[k].name = strndup(es[i].name, es[i].name_len)) == NULL) {
            moat_errf(err, errlen, "out of memory");
            goto out;
        }
        if (inflate_entry(zip, &es[i], &fs[k].content, err, errlen) != 0) {
            free(fs[k].name);
            fs[k].name = NULL;
            goto out;
        }
        fs[k++].content_len = es[i].usize;
    }
    *files = fs;
    *nfiles = nreg;
    fs = NULL;
    rc = 0;
out:
    if (fs != NULL)
        free_files(fs, nreg);
    free(es);
    return rc;
}
