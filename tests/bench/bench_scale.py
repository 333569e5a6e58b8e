#!/usr/bin/env python3
"""bench_scale - how cost grows with size (issue 14, item 9).

    python3 tests/bench/bench_scale.py [--build-dir build] [--cases audit,config,deny,memory]
        [--trail-cache DIR] [--duration 5] [--rounds 3] [--smoke]

Run as root (the backend runs boxes; the gateway drops to the `moat` user).
Each case measures one cost at three sizes or more, and prints how it grows:
for each step from one size to the next, the time (or memory) ratio against
the size ratio, and the exponent k of cost ~ size^k (1: linear; a fixed
cost at the small end makes it less).  Anything above LINEAR_K is flagged
as worse than linear.

  audit   moat-audit verify and query against the trail's length: 10k,
          100k and 1M records.  The trails are real: tests/bench/gen_trail
          writes them through the writer's core (moat-audit init's keys,
          sealing, ratchet every 1000 records, signed checkpoints), and
          verify must pass.  Time is the process's CPU time (user + sys)
          and wall time; records/s by CPU is what the goal is taken on
          (>= 200k records/s), since wall time on a shared machine measures
          the neighbours.  query filters one tenant of 16 (--format json).
  config  the configuration's load against its keys and tenants: 10,
          1,000 and 16,000 keys (4 keys per tenant: 3, 251 and 4,001
          tenants).  `moat-gateway -n -c FILE` (parse, check, and the
          reload check's second load as the gateway's user: its CPU time
          and wall time), and a SIGHUP reload of a running gateway (the
          CPU time its processes spent from the signal to the
          "configuration reloaded" line in its log, and that wall time).
  admin   `moatctl key create` against the admin store's keys (10, 1,000,
          16,000 active keys in moatctl's store file, 4 per tenant of the
          store's): the store read and locked, the configuration with it
          parsed twice, the admin record made durable, the store written,
          the gateway reloaded; `moatctl status` beside it as the baseline.
  deny    the deny paths with 16,000 keys configured against 10, the same
          gateway reloaded between them, in interleaved rounds: 401 (a
          well-formed API key whose id is not configured: a key lookup on
          every request) and 429 (tenant "limited", a valid key), wrk over
          HTTP/1.1 keep-alive.  Goal: the gateway's CPU time per request
          with 16,000 keys <= 1.1x of 10 (requests/s are printed too, but
          on a shared machine they follow the neighbours: the load
          generator and the gateway share the CPUs with them).
  memory  the gateway's memory against output size: a WebSocket session
          (/api/v2/connect) printing 1 KiB, 1, 2 and 4 MiB (the session
          cap, POLICY_SESSION_MAX_BYTES): the gateway process's peak RSS
          while it streams and records it, over its RSS before (a fresh
          gateway for each size); and Judge0 submissions
          (POST /submissions?wait=false, then GET until done) printing 1
          KiB, 64 KiB and 1 MiB, 20 of each (the backend's output cap
          raised for them): RSS growth per result kept in the in-memory
          store, and the size of the record (a GET of all its fields).
          Each series starts on a fresh gateway (RSS is what the process
          holds: memory an earlier case freed would hide a later growth).
          Memory figures are reported, not judged: RSS moves in pages and
          arenas.

Exit status: 0 when every case ran and every answer was right (verify
passed, statuses as expected); 1 on any error.  Missing a goal or a growth
worse than linear is reported, not an error.
"""

import argparse
import grp
import json
import math
import os
import pwd
import resource
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
from bench_gateway import BenchError, cpu_seconds, log, median, run_wrk  # noqa: E402
from bench_audit import child_named  # noqa: E402

LINEAR_K = 1.15  # cost ~ size^k: above this, worse than linear
VERIFY_GOAL = 200000  # records/s (CPU)
DENY_GOAL = 1.1  # gateway CPU per request, 16,000 keys against 10

FULL = {"trail": [10000, 100000, 1000000], "keys": [10, 1000, 16000], "session": [1024, 1 << 20, 2 << 20, 4 << 20],
        "submission": [1024, 64 << 10, 1 << 20]}
SMOKE = {"trail": [1000, 3000, 10000], "keys": [10, 100, 1000], "session": [1024, 64 << 10, 256 << 10],
         "submission": [1024, 16 << 10, 64 << 10]}

EXEC_BODY = json.dumps({"language": "python", "version": "*", "files": [{"name": "main", "content": "print(1)"}]})
BENCH_EXTRA = ("rate: {per_second: 100000, burst: 100000}\nmax_in_flight: 1000\ncpu_seconds_per_minute: 1000000\n"
               "endpoints: [execute, runtimes, connect, submissions, languages]\n"
               "sessions: {max_concurrent: 4, output_bytes: 4194304}\n")
LIMITED_EXTRA = "rate: {per_second: 0.001, burst: 1}\n"
# Prints n bytes of 'x' in 64 KiB writes.
PRINT_N = ("import sys\nn = %d\nc = 'x' * 65536\nwhile n > 0:\n    k = min(n, 65536)\n    sys.stdout.write(c[:k])\n"
           "    n -= k\nsys.stdout.flush()\n")


# ---- growth ------------------------------------------------------------------------------

def growth(points):
    """[(size, cost)] -> [(size ratio, cost ratio, k)] between neighbours."""
    out = []
    for (n1, c1), (n2, c2) in zip(points, points[1:]):
        if c1 > 0 and c2 > 0:
            out.append((n2 / n1, c2 / c1, math.log(c2 / c1) / math.log(n2 / n1)))
        else:
            out.append((n2 / n1, float("nan"), float("nan")))
    return out


def growth_text(points):
    parts, worst = [], 0.0
    for sr, cr, k in growth(points):
        parts.append("x%.0f size: x%.2f (k %.2f)" % (sr, cr, k))
        if not math.isnan(k):
            worst = max(worst, k)
    return "; ".join(parts), worst


def note_growth(findings, what, points):
    text, worst = growth_text(points)
    flag = worst > LINEAR_K
    log("  growth of %s: %s%s" % (what, text, "  WORSE THAN LINEAR" if flag else ""))
    if flag:
        findings.append("%s grows worse than linear (k %.2f)" % (what, worst))
    return text


def timed(cmd, **kw):
    """Runs cmd; (wall s, CPU s of the child, CompletedProcess)."""
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    p = subprocess.run(cmd, **kw)
    wall = time.monotonic() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime), p


def cpu_ns_seconds(pid):
    """CPU time of a process's threads from schedstat (ns resolution, where
    /proc/PID/stat counts 10 ms ticks), in seconds."""
    total = 0
    for t in os.listdir("/proc/%d/task" % pid):
        try:
            with open("/proc/%d/task/%s/schedstat" % (pid, t)) as f:
                total += int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            pass  # a thread that ended
    return total / 1e9


def rss_kib(pid, field="VmRSS"):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise BenchError("no %s for pid %d" % (field, pid))


# ---- audit: verify and query against the trail's length -----------------------------------------

def trail(cache, tools, n):
    """The directory of a trail of (about) n records, made once per cache."""
    d = os.path.join(cache, "trail-%d" % n)
    done = os.path.join(cache, "trail-%d.ok" % n)
    if not os.path.exists(done):
        shutil.rmtree(d, ignore_errors=True)
        wall, cpu, p = timed([tools["gen_trail"], d, str(n)], capture_output=True, text=True)
        if p.returncode != 0:
            raise BenchError("gen_trail %d: %s" % (n, p.stderr.strip()))
        shutil.copy(os.path.join(d, "verifier.key"), os.path.join(cache, "verifier-%d.key" % n))
        with open(done, "w") as f:
            f.write("%f %f\n" % (wall, cpu))
        log("  generated %d records in %.1f s (%.1f s CPU): %s" % (n, wall, cpu, d))
    return d, os.path.join(cache, "verifier-%d.key" % n)


def case_audit(args, tools, sizes, findings, rows):
    cache = args.trail_cache
    reps = 1 if args.smoke else args.rounds
    log("audit: moat-audit verify and query against the trail's length (%s records), %d run(s) each, medians"
        % (", ".join(str(n) for n in sizes), reps))
    pts_v, pts_q = [], []
    for n in sizes:
        d, key = trail(cache, tools, n)
        mb = sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d)) / 1e6
        vs, qs = [], []
        records = matched = 0
        for _ in range(reps):
            wall, cpu, p = timed([tools["moat-audit"], "verify", d, "--key", key, "--json"], capture_output=True, text=True)
            if p.returncode != 0:
                raise BenchError("verify of %d records failed: %s %s" % (n, p.stdout[-500:], p.stderr[-500:]))
            records = json.loads(p.stdout)["records"]
            vs.append((wall, cpu))
            q = [tools["moat-audit"], "query", d, "--key", key, "--tenant", "tenant03", "--format", "json"]
            out = os.path.join(cache, "query.out")
            with open(out, "w") as f:
                wall, cpu, p = timed(q, stdout=f, stderr=subprocess.PIPE, text=True)
            if p.returncode != 0:
                raise BenchError("query of %d records failed: %s" % (n, p.stderr[-500:]))
            with open(out) as f:
                matched = sum(1 for _ in f)
            qs.append((wall, cpu))
        if not records >= n or not n // 32 <= matched <= n // 8:
            raise BenchError("trail of %d: verify counted %d records, query matched %d" % (n, records, matched))
        vw, vc = median([v[0] for v in vs]), median([v[1] for v in vs])
        qw, qc = median([q[0] for q in qs]), median([q[1] for q in qs])
        pts_v.append((records, vc))
        pts_q.append((records, qc))
        log("  %8d records (%6.1f MB): verify %7.2f s CPU (%7.0f rec/s), %7.2f s wall (%7.0f rec/s); "
            "query %7.2f s CPU (%7.0f rec/s), %7.2f s wall, %d matched"
            % (records, mb, vc, records / vc, vw, records / vw, qc, records / qc, qw, matched))
        rows.append(("audit verify", "%d records" % records, "%.2f s CPU, %.2f s wall" % (vc, vw),
                     "%.0fk rec/s CPU, %.0fk wall" % (records / vc / 1e3, records / vw / 1e3)))
        rows.append(("audit query --tenant", "%d records" % records, "%.2f s CPU, %.2f s wall" % (qc, qw),
                     "%.0fk rec/s CPU, %.0fk wall" % (records / qc / 1e3, records / qw / 1e3)))
    gv = note_growth(findings, "verify CPU time", pts_v)
    gq = note_growth(findings, "query CPU time", pts_q)
    rows.append(("audit verify growth", "", gv, ""))
    rows.append(("audit query growth", "", gq, ""))
    rate = pts_v[-1][0] / pts_v[-1][1]
    if rate < VERIFY_GOAL:
        findings.append("verify %.0f records/s of CPU < %d" % (rate, VERIFY_GOAL))
    log("  verify at %d records: %.0f records/s of CPU (goal >= %d: %s)"
        % (pts_v[-1][0], rate, VERIFY_GOAL, "met" if rate >= VERIFY_GOAL else "MISSED"))


# ---- config: load and reload against keys ---------------------------------------------------------

def key_yaml(nkeys, seed):
    """YAML of tenants s<seed>-<i>, 4 keys each, nkeys keys in all (random ids and digests)."""
    out, ids = [], set()
    for t in range((nkeys + 3) // 4):
        out.append("  - name: s%d-%d\n    keys:\n" % (seed, t))
        for _ in range(min(4, nkeys - 4 * t)):
            kid = secrets.token_hex(6)
            while kid in ids:
                kid = secrets.token_hex(6)
            ids.add(kid)
            out.append("      - {id: %s, sha256: %s}\n" % (kid, secrets.token_hex(32)))
    return "".join(out)


class Configs:
    """The stack's configuration with n keys in all (its own two, bench and limited, among them)."""

    def __init__(self, stack):
        self.stack = stack
        with open(stack.config) as f:
            self.base = f.read()
        self.texts = {}

    def write(self, n, path=None):
        if n not in self.texts:
            self.texts[n] = self.base + key_yaml(n - 2, n)
        path = path or self.stack.config
        with open(path + ".new", "w") as f:
            f.write(self.texts[n])
        # the gateway reads it again as its user: root's, the user's group, 0640
        os.chown(path + ".new", 0, grp.getgrnam("moat").gr_gid)
        os.chmod(path + ".new", 0o640)
        os.rename(path + ".new", path)
        return path


class GatewayLog:
    def __init__(self, stack, pids):
        self.path = os.path.join(stack.tmp, "gateway.log")
        self.pids = pids  # the gateway's processes (supervisor, worker): the reload's CPU time is theirs

    def reload(self, pid):
        """SIGHUP to pid; (seconds until the log says the configuration was
        reloaded, CPU seconds the gateway's processes spent meanwhile)."""
        with open(self.path, "rb") as f:
            f.seek(0, 2)
            cpu0 = sum(cpu_ns_seconds(p) for p in self.pids)
            t0 = time.monotonic()
            os.kill(pid, signal.SIGHUP)
            buf = b""
            while time.monotonic() - t0 < 120:
                chunk = f.read()
                if chunk:
                    buf += chunk
                    if b"configuration reloaded" in buf:
                        return time.monotonic() - t0, sum(cpu_ns_seconds(p) for p in self.pids) - cpu0
                    if b"reload failed" in buf:
                        raise BenchError("reload failed: %s" % buf[-1000:].decode(errors="replace"))
                else:
                    time.sleep(0.001)
        raise BenchError("no reload within 120 s")


def case_config(args, tools, sizes, findings, rows, stack, configs, glog):
    reps = 1 if args.smoke else args.rounds
    log("config: load (moat-gateway -n) and SIGHUP reload against the keys (%s keys, 4 per tenant), %d run(s) each, "
        "medians" % (", ".join(str(n) for n in sizes), reps))
    pts_n, pts_r = [], []
    check = os.path.join(stack.tmp, "check.conf")
    for n in sizes:
        configs.write(n, check)
        ns, rs = [], []
        for _ in range(reps):
            wall, cpu, p = timed([tools["moat-gateway"], "-n", "-c", check], capture_output=True, text=True)
            if p.returncode != 0:
                raise BenchError("moat-gateway -n with %d keys: %s" % (n, (p.stdout + p.stderr)[-500:]))
            ns.append((wall, cpu))
        configs.write(n)
        for _ in range(reps):
            rs.append(glog.reload(stack.gateway.pid))
        nw, nc = median([x[0] for x in ns]), median([x[1] for x in ns])
        rw, rc = median([x[0] for x in rs]), median([x[1] for x in rs])
        pts_n.append((n, nc))
        pts_r.append((n, rc))
        size_kb = os.path.getsize(check) / 1e3
        log("  %6d keys (%5d tenants, %7.0f KB): moat-gateway -n %7.1f ms CPU, %7.1f ms wall; SIGHUP reload %7.1f ms CPU,"
            " %7.1f ms wall" % (n, (n - 2 + 3) // 4 + 2, size_kb, nc * 1e3, nw * 1e3, rc * 1e3, rw * 1e3))
        rows.append(("config check (-n)", "%d keys" % n, "%.1f ms CPU, %.1f ms wall" % (nc * 1e3, nw * 1e3), ""))
        rows.append(("SIGHUP reload", "%d keys" % n, "%.1f ms CPU, %.1f ms wall" % (rc * 1e3, rw * 1e3), ""))
    rows.append(("config check growth", "", note_growth(findings, "moat-gateway -n CPU time", pts_n), ""))
    rows.append(("SIGHUP reload growth", "", note_growth(findings, "SIGHUP reload CPU time", pts_r), ""))


# ---- admin: a moatctl change against the admin store's keys ---------------------------------------------

def store_json(nkeys):
    """An admin store (moatctl's file) of nkeys active keys, 4 per tenant of its own."""
    tenants = [{"name": "st-%d" % t} for t in range((nkeys + 3) // 4)]
    keys, ids = [], set()
    for i in range(nkeys):
        kid = secrets.token_hex(6)
        while kid in ids:
            kid = secrets.token_hex(6)
        ids.add(kid)
        keys.append({"id": kid, "tenant": "st-%d" % (i // 4), "sha256": secrets.token_hex(32), "state": "active",
                     "created": "2026-01-01T00:00:00Z"})
    return json.dumps({"version": 1, "tenants": tenants, "jwt_issuers": [], "keys": keys})


def case_admin(args, sizes, findings, rows):
    """moatctl key create (store read and locked, configuration and store
    parsed, audit record durable, store written, gateway reloaded) against
    the store's keys, with moatctl status as the baseline."""
    from test_admin import admin_stack, moatctl  # noqa: E402  (reads MOAT_BUILD_DIR)
    reps = 1 if args.smoke else args.rounds
    log("admin: moatctl key create against the admin store's keys (%s keys, 4 per tenant), %d run(s) each, medians"
        % (", ".join(str(n) for n in sizes), reps))
    stack = admin_stack()
    pts = []
    try:
        stack.start()
        moat = grp.getgrnam("moat").gr_gid
        for n in sizes:
            with open(stack.store + ".new", "w") as f:
                f.write(store_json(n))
            os.chown(stack.store + ".new", pwd.getpwnam("moat").pw_uid, moat)
            os.chmod(stack.store + ".new", 0o600)
            os.rename(stack.store + ".new", stack.store)
            st, cr = [], []
            for _ in range(reps):
                for series, argv in ((st, ("status",)), (cr, ("--json", "key", "create", "--tenant", stack.tenants[0][0]))):
                    t0 = time.monotonic()
                    p = moatctl(stack, *argv)
                    series.append(time.monotonic() - t0)
                    if p.returncode != 0:
                        raise BenchError("moatctl %s with %d store keys: %s" % (" ".join(argv), n, p.stderr.strip()))
            sm, cm = median(st), median(cr)
            pts.append((n, cm))
            log("  %6d store keys (%7.0f KB): moatctl key create %7.1f ms, status %6.1f ms"
                % (n, os.path.getsize(stack.store) / 1e3, cm * 1e3, sm * 1e3))
            rows.append(("moatctl key create", "%d store keys" % n, "%.1f ms wall" % (cm * 1e3),
                         "status %.1f ms" % (sm * 1e3)))
    finally:
        stack.stop()
    rows.append(("moatctl key create growth", "", note_growth(findings, "moatctl key create time", pts), ""))


# ---- deny: 401 and 429 with 16,000 keys against 10 -----------------------------------------------------

def case_deny(args, tools, sizes, findings, rows, stack, configs, glog, gw_pid):
    lo, hi = sizes[0], sizes[-1]
    out = subprocess.run([tools["moatctl"], "key", "new"], check=True, capture_output=True, text=True).stdout
    unknown = dict(line.split(": ", 1) for line in out.strip().splitlines())["token"]  # well formed, not configured
    rounds = 1 if args.smoke else args.rounds
    log("deny: 401 (an unknown key id) and 429 (a limited tenant) with %d keys against %d, %d s per run, %d "
        "connections, %d interleaved round(s)" % (hi, lo, args.duration, args.connections, rounds))
    res = {}
    for rnd in range(rounds):
        for n in ((lo, hi) if rnd % 2 == 0 else (hi, lo)):
            configs.write(n)
            glog.reload(stack.gateway.pid)
            # the limited tenant's one request of its burst (a reload may start its bucket afresh)
            stack.request("POST", "/api/v2/execute", EXEC_BODY, token=stack.tokens["limited"],
                          headers={"Content-Type": "application/json"})
            for case, token in (("401", unknown), ("429", stack.tokens["limited"])):
                st = stack.request("POST", "/api/v2/execute", EXEC_BODY, token=token,
                                   headers={"Content-Type": "application/json"})[0]
                if st != int(case):
                    raise BenchError("%s with %d keys: got %d" % (case, n, st))
                cpu0 = cpu_seconds(gw_pid)
                r = run_wrk(stack.tmp, stack.port, token, EXEC_BODY, args.connections, 2, args.duration)
                r["cpu_us"] = (cpu_seconds(gw_pid) - cpu0) * 1e6 / r["requests"]
                r["rps"] = r["requests"] / r["seconds"]
                if r["socket_errors"] or r["non2xx"] != r["requests"]:
                    raise BenchError("%s with %d keys: %d of %d answers not %s, %d socket errors"
                                     % (case, n, r["requests"] - r["non2xx"], r["requests"], case, r["socket_errors"]))
                res.setdefault((case, n), []).append(r)
                log("  round %d  %s  %5d keys  %9.1f req/s  p50 %6.2f ms  p99 %6.2f ms  gateway CPU %6.1f us/req"
                    % (rnd + 1, case, n, r["rps"], r["p50_ms"], r["p99_ms"], r["cpu_us"]))
    for case in ("401", "429"):
        a, b = res[(case, lo)], res[(case, hi)]
        ratio = median([y["rps"] / x["rps"] for x, y in zip(a, b)])
        cpu_ratio = median([y["cpu_us"] / x["cpu_us"] for x, y in zip(a, b)])
        for n, rs in ((lo, a), (hi, b)):
            rows.append(("deny %s" % case, "%d keys" % n, "%.0f req/s, %.1f us CPU/req" %
                         (median([r["rps"] for r in rs]), median([r["cpu_us"] for r in rs])),
                         ("%.2fx req/s, %.2fx CPU/req of %d keys" % (ratio, cpu_ratio, lo)) if n == hi else ""))
        log("  %s: %d keys against %d: %.2fx req/s, %.2fx gateway CPU per request (goal <= %.1fx: %s)"
            % (case, hi, lo, ratio, cpu_ratio, DENY_GOAL, "met" if cpu_ratio <= DENY_GOAL else "MISSED"))
        if cpu_ratio > DENY_GOAL:
            findings.append("%s with %d keys: %.2fx the gateway CPU per request of %d" % (case, hi, cpu_ratio, lo))
    configs.write(lo)
    glog.reload(stack.gateway.pid)


# ---- memory: a session's and a submission's output -----------------------------------------------------

class Sampler:
    """Peak VmRSS of pid, sampled every 2 ms while running."""

    def __init__(self, pid):
        self.pid, self.peak, self.stop_ = pid, 0, False
        self.t = threading.Thread(target=self.run, daemon=True)

    def run(self):
        while not self.stop_:
            self.peak = max(self.peak, rss_kib(self.pid))
            time.sleep(0.002)

    def __enter__(self):
        self.peak = rss_kib(self.pid)
        self.t.start()
        return self

    def __exit__(self, *exc):
        self.stop_ = True
        self.t.join()
        self.peak = max(self.peak, rss_kib(self.pid))


def one_session(stack, n):
    import ws_client

    async def go():
        ws = await ws_client.connect(stack, token=stack.tokens["bench"])
        await ws.send(ws_client.init_message("python", PRINT_N % n))
        events, code, reason = await ws_client.events_until_close(ws, timeout=120)
        return events, code

    events, code = ws_client.run(go())
    got = len(ws_client.stream_text(events, "stdout"))
    if code != 4999 or got != n:
        raise BenchError("session printing %d bytes: close %s, %d bytes of stdout" % (n, code, got))


def submission(stack, n):
    st, _, data = stack.request("POST", "/submissions?wait=false", {"source_code": PRINT_N % n, "language_id": 71},
                                token=stack.tokens["bench"])
    if st != 201 or not isinstance(data, dict) or "token" not in data:
        raise BenchError("POST /submissions: %d %r" % (st, data if isinstance(data, dict) else data[:200]))
    return data["token"]


def fetch(stack, token):
    t0 = time.monotonic()
    while time.monotonic() - t0 < 120:
        st, hdr, data = stack.request("GET", "/submissions/%s?fields=status,stdout" % token, token=stack.tokens["bench"])
        if st == 200 and isinstance(data, dict) and data.get("status", {}).get("id", 0) > 2:
            return data
        time.sleep(0.02)
    raise BenchError("submission %s not done within 120 s" % token)


def restart_gateway(stack):
    """A fresh gateway (the backend stays): its worker's pid."""
    stack.gateway.terminate()
    stack.gateway.wait(timeout=30)
    stack.gateway_log.close()
    stack.start_gateway()
    pid = child_named(stack.gateway.pid, "moat-gateway")
    if pid is None:
        raise BenchError("cannot find the gateway's worker process")
    return pid


def case_submissions(args, sizes, rows, stack):
    """RSS growth per stored result (the in-memory store) and the stored
    record's size (a GET of all its fields), on a fresh gateway: the sizes
    in ascending order, so none runs in memory an earlier one freed."""
    log("memory: the gateway's RSS against submissions' output (%s bytes, %d each), a fresh gateway"
        % (", ".join(str(n) for n in sizes), args.submissions))
    gw_pid = restart_gateway(stack)
    fetch(stack, submission(stack, 1024))  # warm
    pts = []
    for n in sizes:
        before = rss_kib(gw_pid)
        with Sampler(gw_pid) as s:
            tokens = [submission(stack, n) for _ in range(args.submissions)]
            results = [fetch(stack, t) for t in tokens]
        after = rss_kib(gw_pid)
        for r in results:
            if r.get("status", {}).get("id") != 3 or len(r.get("stdout") or "") != n:
                raise BenchError("submission printing %d bytes: %r" % (n, {k: (v if k != "stdout" else len(v or ""))
                                                                          for k, v in r.items()}))
        st, _, raw = stack.request("GET", "/submissions/%s?fields=*" % tokens[0], token=stack.tokens["bench"])
        record = len(json.dumps(raw)) if st == 200 and isinstance(raw, dict) else 0
        per = (after - before) / args.submissions
        pts.append((n, max(per, 1)))
        log("  %d submissions printing %8d bytes: gateway RSS %d KiB before, peak %d KiB, %d KiB after (%.1f KiB per "
            "stored result, %.2f x output); the record (GET fields=*) %d bytes"
            % (args.submissions, n, before, s.peak, after, per, per * 1024.0 / n, record))
        rows.append(("submission output", "%d bytes" % n, "RSS +%.1f KiB per stored result; record %d bytes"
                     % (per, record), "%.2f x output" % (per * 1024.0 / n)))
    text, worst = growth_text(pts)
    log("  growth of RSS per stored result: %s" % text)
    rows.append(("submission RSS growth", "", text, ""))


def case_sessions(args, sizes, rows, stack):
    """The gateway's peak RSS while one session streams its output, over its
    RSS before: each size on a fresh gateway warmed by one 1 KiB session, so
    that no size runs in memory an earlier one freed."""
    log("memory: the gateway's RSS against a session's output (%s bytes), a fresh gateway for each"
        % ", ".join(str(n) for n in sizes))
    pts = []
    for n in sizes:
        gw_pid = restart_gateway(stack)
        one_session(stack, 1024)  # warm: the first session's allocations
        before = rss_kib(gw_pid)
        with Sampler(gw_pid) as s:
            one_session(stack, n)
        after = rss_kib(gw_pid)
        grew = max(0, s.peak - before)
        pts.append((n, max(grew, 1)))
        log("  session printing %8d bytes: gateway RSS %d KiB before, peak %d KiB (+%d KiB, %.2f x output), %d KiB after"
            % (n, before, s.peak, grew, grew * 1024.0 / n, after))
        rows.append(("session output", "%d bytes" % n, "peak RSS +%d KiB" % grew, "%.2f x output" % (grew * 1024.0 / n)))
    text, worst = growth_text(pts)
    log("  growth of the session's peak RSS: %s" % text)
    rows.append(("session RSS growth", "", text, ""))


# ---- main ------------------------------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build-dir", default=os.environ.get("MOAT_BUILD_DIR", os.path.join(SOURCE, "build")))
    ap.add_argument("--cases", default="audit,config,admin,deny,memory",
                    help="comma-separated subset of audit,config,admin,deny,memory")
    ap.add_argument("--trail-cache", help="keep the generated trails here (made once); default: a temporary directory")
    ap.add_argument("--gen-trail", help="the trail generator (default: BUILD/tests/bench/gen_trail)")
    ap.add_argument("--duration", type=int, default=5, help="seconds per wrk run (default 5)")
    ap.add_argument("--rounds", type=int, default=3, help="runs per size, and interleaved deny rounds (default 3)")
    ap.add_argument("--connections", type=int, default=32, help="wrk connections (default 32)")
    ap.add_argument("--submissions", type=int, default=20, help="submissions per output size (default 20)")
    ap.add_argument("--smoke", action="store_true", help="small sizes, one run each: check that everything works")
    args = ap.parse_args()
    if args.smoke:
        args.duration = min(args.duration, 1)
        args.submissions = min(args.submissions, 3)
    sizes = SMOKE if args.smoke else FULL

    def interrupted(signum, frame):
        raise KeyboardInterrupt
    signal.signal(signal.SIGINT, interrupted)
    signal.signal(signal.SIGTERM, interrupted)

    build = os.path.abspath(args.build_dir)
    os.environ["MOAT_BUILD_DIR"] = build
    sys.path.insert(0, os.path.join(SOURCE, "tests", "e2e"))
    import moat_harness  # noqa: E402  (reads MOAT_BUILD_DIR at import)

    tools = {"gen_trail": args.gen_trail or os.path.join(build, "tests", "bench", "gen_trail"),
             "moat-audit": moat_harness.MOAT_AUDIT, "moat-gateway": moat_harness.GATEWAY, "moatctl": moat_harness.MOATCTL}
    cases = args.cases.split(",")
    for c in cases:
        if c not in ("audit", "config", "admin", "deny", "memory"):
            raise BenchError("unknown case %r" % c)
    for name, path in tools.items():
        if not os.access(path, os.X_OK):
            raise BenchError("%s not built (%s)" % (name, path))
    if os.geteuid() != 0:
        raise BenchError("run as root (the backend runs boxes)")
    if "deny" in cases and shutil.which("wrk") is None:
        raise BenchError("wrk not found (.ci/install-deps)")

    findings, rows = [], []
    own_cache = args.trail_cache is None
    if own_cache:
        args.trail_cache = tempfile.mkdtemp(prefix="moat-bench-scale-")
    os.makedirs(args.trail_cache, exist_ok=True)
    log("bench_scale: build %s, nproc %d, kernel %s, load average at the start: %s"
        % (build, os.cpu_count(), os.uname().release, open("/proc/loadavg").read().strip()))
    stack = None
    try:
        if "audit" in cases:
            case_audit(args, tools, sizes["trail"], findings, rows)
        if "admin" in cases:
            case_admin(args, sizes["keys"], findings, rows)
        if {"config", "deny", "memory"} & set(cases):
            tenants = [("bench", BENCH_EXTRA, ""), ("limited", LIMITED_EXTRA, "")]
            out_cap = max(sizes["submission"]) * 2
            stack = moat_harness.Stack(tenants=tenants, backend_args=["-o", "session_output=4194304", "-o",
                                                                      "output=%d" % out_cap])
            stack.start()
            gw_pid = child_named(stack.gateway.pid, "moat-gateway")
            if gw_pid is None:
                raise BenchError("cannot find the gateway's worker process")
            configs, glog = Configs(stack), GatewayLog(stack, (stack.gateway.pid, gw_pid))
            if "config" in cases:
                case_config(args, tools, sizes["keys"], findings, rows, stack, configs, glog)
            if "deny" in cases:
                case_deny(args, tools, sizes["keys"], findings, rows, stack, configs, glog, gw_pid)
            if "memory" in cases:
                case_submissions(args, sizes["submission"], rows, stack)
                case_sessions(args, sizes["session"], rows, stack)
    finally:
        if stack is not None:
            stack.stop()
        if own_cache:
            shutil.rmtree(args.trail_cache, ignore_errors=True)

    log("")
    log("load average at the end: %s" % open("/proc/loadavg").read().strip())
    log("")
    log("| what | size | cost | rate / ratio |")
    log("|---|---|---|---|")
    for r in rows:
        log("| %s |" % " | ".join(r))
    log("")
    if args.smoke:
        log("bench_scale: smoke run OK (figures of a smoke run mean nothing)")
    elif findings:
        log("bench_scale: findings: %s" % "; ".join(findings))
    else:
        log("bench_scale: every cost grows at most linearly and the goals are met")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BenchError as e:
        print("bench_scale: error: %s" % e, file=sys.stderr)
        sys.exit(1)
