/*
 * gen_trail - writes a real audit trail of N records, fast, for the scale
 * benchmark (tests/bench/bench_scale.py).
 *
 *     gen_trail DIR RECORDS
 *
 * Theory of operation
 * -------------------
 * The records are the writer's own: DIR is made as `moat-audit init`
 * makes it (audit_init_dir), and every record goes through the writer's
 * core (audit_log_append_text), so each line is sealed, chained, MACed
 * under the epoch key, ratcheted every 1000 records and covered by signed
 * checkpoints exactly as moat-audit-writer does it, and `moat-audit
 * verify DIR` checks them like any other trail.  Only the socket between
 * gateway and writer is left out (the writer's wire costs nothing the
 * verifier sees), and records are made durable once per 1000 (one group
 * commit per batch) rather than per client batch.
 *
 * The bodies are the gateway's (gateway/records/audit_records.c): three in four
 * are an allowed execution (its request record, then its result record),
 * one in four a denial (401 or 429); tenants, key ids, clients and
 * languages vary so that query filters select a fraction.  No packets are
 * stored: packets live beside the log and no verify or query reads them.
 *
 * Exit status 0, or 1 with one line on stderr.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "audit_log.h"

#define SYNC_EVERY 1000 /* records per group commit */

static int usage(void)
{
    fputs("usage: gen_trail DIR RECORDS\n", stderr);
    return 1;
}

static int fail(const char *what, const char *err)
{
    fprintf(stderr, "gen_trail: %s: %s\n", what, err);
    return 1;
}

/* A hex string of n digits derived from x (a stand-in SHA-256). */
static void fake_hex(char *out, size_t n, uint64_t x)
{
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
        out[i] = digits[(x >> 60) & 15];
    }
    out[n] = '\0';
}

/* Body i: a gateway record, as audit_records.c builds it.  Its length. */
static int make_body(char *buf, size_t size, uint64_t i)
{
    static const char *const langs[] = {"python", "c", "javascript", "go"};
    char rid[17], h1[65], h2[65], h3[65];
    unsigned tenant = (unsigned)(i % 16), exec = (unsigned)(i / 2);
    fake_hex(rid, 16, exec * 7919 + 1);
    fake_hex(h1, 64, i * 31 + 7);
    if (i % 8 == 6) /* a denial, nobody waits for it */
        return snprintf(buf, size,
                        "{\"type\":\"request\",\"request_id\":\"%s\",\"tenant\":null,\"key_id\":null,"
                        "\"client\":\"203.0.113.%u\",\"method\":\"POST\",\"endpoint\":\"/api/v2/execute\","
                        "\"decision\":\"denied\",\"reason\":\"%s\",\"status\":%d,\"message\":\"%s\"}",
                        rid, (unsigned)(i % 250), i % 16 == 6 ? "unauthenticated" : "rate_limited", i % 16 == 6 ? 401 : 429,
                        i % 16 == 6 ? "missing or invalid credentials" : "rate limit exceeded");
    if (i % 2 == 0)
        return snprintf(buf, size,
                        "{\"type\":\"request\",\"request_id\":\"%s\",\"tenant\":\"tenant%02u\",\"key_id\":\"mk_t%02u_%04u\","
                        "\"client\":\"198.51.100.%u\",\"method\":\"POST\",\"endpoint\":\"/api/v2/execute\","
                        "\"decision\":\"allowed\",\"reason\":null,\"status\":200,\"language\":\"%s\",\"version\":\"3.11.2\","
                        "\"request_sha256\":\"%s\",\"limits\":{\"wall_ms\":3000,\"cpu_ms\":3000,\"memory_bytes\":268435456,"
                        "\"output_bytes\":65536}}",
                        rid, tenant, tenant, (unsigned)(i % 997), (unsigned)(i % 250), langs[exec % 4], h1);
    fake_hex(h2, 64, i * 17 + 3);
    fake_hex(h3, 64, i * 13 + 5);
    return snprintf(buf, size,
                    "{\"type\":\"result\",\"request_id\":\"%s\",\"tenant\":\"tenant%02u\",\"key_id\":\"mk_t%02u_%04u\","
                    "\"client\":\"198.51.100.%u\",\"method\":\"POST\",\"endpoint\":\"/api/v2/execute\",\"decision\":\"allowed\","
                    "\"status\":200,\"language\":\"%s\",\"run\":{\"status\":\"%s\",\"exit_code\":0,\"signal\":null,"
                    "\"cpu_ms\":%u,\"wall_ms\":%u,\"memory_bytes\":%u,\"stdout_bytes\":%u,\"stderr_bytes\":0,"
                    "\"stdout_sha256\":\"%s\",\"stderr_sha256\":\"%s\"},\"response_sha256\":\"%s\"}",
                    rid, tenant, tenant, (unsigned)((i - 1) % 997), (unsigned)((i - 1) % 250), langs[exec % 4],
                    exec % 50 == 0 ? "TO" : "OK", (unsigned)(i % 900), (unsigned)(i % 1200), (unsigned)(8000000 + i % 100000),
                    (unsigned)(i % 4096), h1, h2, h3);
}

int main(int argc, char **argv)
{
    struct audit_config cfg;
    char err[512], body[2048];
    static struct audit_log log; /* holds a 64 KiB line buffer */

    if (argc != 3)
        return usage();
    char *end;
    unsigned long long n = strtoull(argv[2], &end, 10);
    if (*end != '\0' || n == 0 || n > 100000000ULL)
        return usage();
    if (audit_init_dir(argv[1], getuid(), getgid(), err, sizeof(err)) != 0)
        return fail("init", err);
    audit_config_defaults(&cfg);
    cfg.packets = 0;
    cfg.append_only = 0; /* the trail is removed after the run */
    cfg.reserve_bytes = 0;
    if (audit_log_open(&log, argv[1], &cfg, err, sizeof(err)) != 0)
        return fail("open", err);
    for (uint64_t i = 1; i < n; i++) { /* the open's "start" record is the first */
        int len = make_body(body, sizeof(body), i);
        if (len <= 0 || (size_t)len >= sizeof(body))
            return fail("body", "too long");
        if (audit_log_append_text(&log, body, (size_t)len, NULL, 0, err, sizeof(err)) == 0)
            return fail("append", err);
        if (i % SYNC_EVERY == 0 && audit_log_sync(&log, err, sizeof(err)) != 0)
            return fail("sync", err);
    }
    if (audit_log_sync(&log, err, sizeof(err)) != 0)
        return fail("sync", err);
    audit_log_close(&log);
    return 0;
}
