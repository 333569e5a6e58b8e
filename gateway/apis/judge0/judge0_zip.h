/*
 * judge0_zip.h - a Judge0 submission's additional_files: a zip archive,
 * unpacked in memory into the files of an execution request.  Pure: no I/O.
 */
#ifndef GW_JUDGE0_ZIP_H
#define GW_JUDGE0_ZIP_H

#include <stddef.h>
#include <stdint.h>

#include "moat_proto.h"

struct judge0_zip_limits {
    size_t max_files; /* regular files (directories are not counted: they are made from the names) */
    size_t max_bytes; /* unpacked, all files together */
};

/*
 * Unpack zip[0..len) into *files (*nfiles of them, malloc'ed: free each
 * name and content, then the array).  Only what can be checked is taken:
 * one disk, no zip64, no encryption, stored or deflated entries whose
 * unpacked size and CRC-32 are what the archive says; names that
 * moat_path_check allows (relative, no "." or ".." component, no control
 * character, not option-like), each once, never both a file and a
 * directory; no symbolic link or other special file; at most lim's count
 * and bytes, checked before anything is inflated and again while it is
 * (an archive that lies about its sizes stops at the limit).  0, or -1
 * with a client-facing message in err (nothing allocated).
 */
int judge0_zip_unpack(const uint8_t *zip, size_t len, const struct judge0_zip_limits *lim, struct moat_file **files, size_t *nfiles,
                      char *err, size_t errlen);

#endif /* GW_JUDGE0_ZIP_H */
