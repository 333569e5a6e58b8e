/*
 * audit_verify.h - verification of an audit directory (moat-audit verify,
 * and the tests).  Reads only.
 */
#ifndef MOAT_AUDIT_VERIFY_H
#define MOAT_AUDIT_VERIFY_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "audit_crypto.h"

struct audit_verify_result {
    int ok;
    uint64_t records;
    uint64_t first_seq; /* 1, but for an export that starts later */
    uint64_t last_seq;
    uint64_t checkpoints;         /* checkpoint records in the log */
    uint64_t last_checkpoint_seq; /* the head the last of them signs */
    uint64_t listed;              /* signed checkpoints in the list read (checkpoints.log or its copy) */
    uint64_t covered_seq;         /* records up to here are covered by a listed checkpoint: cut, they are missed */
    uint64_t uncovered;           /* records after covered_seq: removing only these is not detected */
    uint64_t repairs;             /* torn lines accounted for by repair records */
    int torn;                     /* a torn line was seen */
    int torn_tail;                /* the log ends with a torn line */
    char torn_where[4200];
    uint64_t bad_seq; /* seq of the first bad record, when known */
    char bad_file[4096];
    size_t bad_line;
    char problem[4608];         /* the first problem, one line */
    char pending_problem[4608]; /* why a torn candidate did not parse */
};

/* Called for each verified record, in order (for query/show/stats). */
typedef void (*audit_record_cb)(void *arg, json_t *record, const char *line, size_t len);

/* Reads a verifier.key: K0 and the Ed25519 public key. */
int audit_read_verifier_key(const char *path, uint8_t k0[AUDIT_KEY_LEN], uint8_t pub[AUDIT_PUB_LEN], char *err, size_t errlen);

/* 0 when the whole trail verifies; -1 with r->problem naming the first bad
 * record and why.  checkpoints: a checkpoints.log copy kept elsewhere, or
 * NULL for the one in dir. */
int audit_verify_dir(const char *dir, const uint8_t k0[AUDIT_KEY_LEN], const uint8_t pub[AUDIT_PUB_LEN], const char *checkpoints,
                     struct audit_verify_result *r, audit_record_cb cb, void *arg);

/* The same for an export (moat-audit export: the lines as stored) in one
 * file, "-" for stdin: one run of consecutive records, which may start
 * after seq 1 (its first record's prev is then taken as given).
 * checkpoints: a checkpoints.log copy, or NULL for none (only the
 * checkpoint records in the export then). */
int audit_verify_export(const char *path, const uint8_t k0[AUDIT_KEY_LEN], const uint8_t pub[AUDIT_PUB_LEN],
                        const char *checkpoints, struct audit_verify_result *r, audit_record_cb cb, void *arg);

#endif
