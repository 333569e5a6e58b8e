#!/usr/bin/env python3
"""load_campaign - N minutes of mixed traffic against one real stack, with pass criteria.

    flock /tmp/moat-bench.lock python3 tests/bench/load_campaign.py [--build-dir build]
        [--minutes 10] [--connections 64] [--smoke]

Run as root with Debian's python3 (python3-websockets), wrk installed.  It starts a backend
(-j 4), a gateway (2 workers, TLS, audit trail on) as the e2e tests do
(tests/e2e/moat_harness.py), and drives it for --minutes with --connections connections
split between these kinds of traffic, each one wrk process (HTTP/1.1 keep-alive, one thread,
a Lua script that counts every response by status and error code):

  kind       route                          what                          expected
  exec       POST /api/v2/execute           valid runs: python, bash,      200; 503 backend_busy
                                            javascript, c, lua, perl
  judge0     POST /submissions?wait=true    valid runs (python, c)         201; 429 tenant_queue_full,
                                                                           503 queue_full/backend_busy
  runtimes   GET /api/v2/runtimes           the catalogue                  200
  badtoken   POST /api/v2/execute           a well-formed, unknown key     401; 429 too_many_failed_requests
  limited    POST /api/v2/execute           a tenant at 0.001 req/s        429 rate_limited (the first: 200)
  filtered   POST /api/v2/execute           bodies the gateway refuses:    400, 403, 422
                                            bad JSON, unknown field, a
                                            ceiling, a language, a rule
  oversized  POST /api/v2/execute           a body over the 1 MiB cap      413

plus --sessions Python threads, each opening WebSocket sessions (/api/v2/connect) one after
another: a python program that echoes a line, checked end to end (101, the echo, exit 0).

The 5xx that count as expected are the back-pressure answers, and only with `Retry-After`:
503 backend_busy (every box slot and queue place taken) and, for Judge0, 503 queue_full.  Any
other 5xx, any 5xx without Retry-After, any status outside a kind's set, and any wrk socket
error other than on the oversized connections (h2o closes a connection after a 413) fails the
run.

Once per sample interval (a minute; --sample-s) it records the gateway's and the backend's
resident memory (VmRSS, summed over the process tree, box processes excluded), their open
descriptors, the cgroups under the backend's groups (its -n name, every v1 controller and v2),
and the box processes (uids in the backend's box range).  At the end it prints the table and
p50/p99 per kind, and checks that the last sample is "flat" against the first:

  RSS      end <= base + max(10 %, 4 MiB)        (per process tree; the first third of the
           samples is the warm-up, in which the allocator's arenas and h2o's pools grow to their
           working size; base: the median of the next three samples (minutes 4-6 of 10), end: of
           the last three, so that a process the backend forks for a run at the moment of one sample
           does not decide; a leak per request grows all along and fails it once it passes
           4 MiB in the four minutes between the two: about 1 MiB a minute, some 16 bytes per
           request at this campaign's rate)
  fds      last <= first + 32 (connections and runs in flight come and go), and once the load
           has stopped, <= the idle count (before any load) + 8
  cgroups, box processes: back to the idle count within 60 s after the load

and that the audit trail verifies (`moat-audit verify`).  --smoke (ctest): 20 s, 16
connections, a sample every 5 s, looser bounds (RSS + 50 % or 32 MiB, fds + 64 under load, + 16 after): it checks that
everything works and nothing leaks grossly, never a timing.  Exit status 0 when every criterion
holds, 1 otherwise.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.abspath(os.path.join(HERE, "..", ".."))

LANGUAGES = {
    "python": 'print("hi")',
    "bash": "echo hi",
    "javascript": 'console.log("hi")',
    "c": '#include <stdio.h>\nint main(void) { puts("hi"); return 0; }\n',
    "lua": 'print("hi")',
    "perl": 'print "hi\\n";',
}

# the tenant under load: limits far above the load, a content rule, and every language the load uses
# (not ruby: the "filtered" kind asks for it)
TENANT = """rate: {per_second: 100000, burst: 100000}
max_in_flight: 1000
cpu_seconds_per_minute: 1000000
endpoints: [execute, runtimes, connect, submissions, languages]
languages: [python, bash, javascript, c, lua, perl]
sessions: {max_concurrent: 64, wall_ms: 60000, idle_ms: 60000, cpu_ms: 60000}
content_rules:
  - {name: no-os-system, pattern: "os\\\\.system"}
"""
LIMITED = "rate: {per_second: 0.001, burst: 1}\n"

# Judge0 language ids (Judge0 CE): 71 Python, 50 C
JUDGE0_IDS = {"python": 71, "c": 50}

# (status, code) pairs each kind may get; a 5xx must carry Retry-After as well
EXPECTED = {
    "exec": {(200, ""), (503, "backend_busy")},
    "judge0": {(201, ""), (429, "tenant_queue_full"), (503, "queue_full"), (503, "backend_busy")},
    "runtimes": {(200, "")},
    "badtoken": {(401, "invalid_token"), (429, "too_many_failed_requests")},
    "limited": {(200, ""), (429, "rate_limited")},
    "filtered": {(400, "invalid_request"), (400, "limit_exceeded"), (403, "language_not_allowed"),
                 (422, "content_rejected")},
    "oversized": {(413, "body_too_large")},
}
SOCKET_ERRORS_ALLOWED = {"oversized"}

# share of the connections per kind (the rest: WebSocket sessions)
SHARES = {"exec": 16, "judge0": 8, "runtimes": 8, "badtoken": 8, "limited": 8, "filtered": 8, "oversized": 4}


class CampaignError(Exception):
    pass


def log(msg):
    print(msg, flush=True)


# ---- wrk, one process per kind ----------------------------------------------

WRK_LUA = r"""
-- one kind of traffic: requests[] in turn; every response counted by "status code retry"
local requests = {%(requests)s}
local n = 0
counts = {}

function request()
  n = n + 1
  return requests[(n - 1) %% #requests + 1]
end

function response(status, headers, body)
  local code = "-"
  if status >= 300 then
    code = string.match(body or "", '"code"%%s*:%%s*"([%%w_]+)"') or "?"
  end
  local retry = "-"
  for k, v in pairs(headers) do
    if string.lower(k) == "retry-after" then retry = "r" end
  end
  local key = status .. " " .. code .. " " .. retry
  counts[key] = (counts[key] or 0) + 1
end

local threads = {}
function setup(thread)
  table.insert(threads, thread)
end

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format("WRK requests=%%d duration_us=%%d p50_us=%%d p99_us=%%d max_us=%%d connect=%%d read=%%d write=%%d timeout=%%d\n",
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(99), latency.max,
    e.connect, e.read, e.write, e.timeout))
  for _, t in ipairs(threads) do
    local c = t:get("counts")
    for k, v in pairs(c) do
      io.write(string.format("STATUS %%s %%d\n", k, v))
    end
  end
end
"""


def lua_string(s):
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def wrk_request(method, path, token, body=None):
    headers = {}
    if token:
        headers["Authorization"] = "Bearer " + token
    if body is not None:
        headers["Content-Type"] = "application/json"
    h = ", ".join("[%s] = %s" % (lua_string(k), lua_string(v)) for k, v in headers.items())
    return "wrk.format(%s, %s, {%s}, %s)" % (lua_string(method), lua_string(path), h,
                                             lua_string(body) if body is not None else "nil")


def execute_body(language, code, **extra):
    b = {"language": language, "version": "*", "files": [{"name": "main", "content": code}]}
    b.update(extra)
    return json.dumps(b)


def kind_requests(kind, stack):
    """The requests (Lua expressions) a kind's wrk sends in turn."""
    tok = stack.tokens["load"]
    ex = "/api/v2/execute"
    if kind == "exec":
        return [wrk_request("POST", ex, tok, execute_body(l, c)) for l, c in LANGUAGES.items()]
    if kind == "judge0":
        return [wrk_request("POST", "/submissions?wait=true", tok,
                            json.dumps({"source_code": LANGUAGES[l], "language_id": i})) for l, i in JUDGE0_IDS.items()]
    if kind == "runtimes":
        return [wrk_request("GET", "/api/v2/runtimes", tok)]
    if kind == "badtoken":
        # the shape of a key, an id nobody issued
        bad = "moat_0123456789ab_" + "0" * 64 + "_00000000"
        return [wrk_request("POST", ex, bad, execute_body("python", "print(1)"))]
    if kind == "limited":
        return [wrk_request("POST", ex, stack.tokens["limited"], execute_body("python", "print(1)"))]
    if kind == "filtered":
        return [wrk_request("POST", ex, tok, b) for b in (
            '{"language": "python", "files": [',  # not JSON
            execute_body("python", "print(1)", color="red"),  # an unknown member
            execute_body("python", "print(1)", run_timeout=10 ** 9),  # over the ceiling
            execute_body("ruby", "puts 1"),  # not among the tenant's languages
            execute_body("python", "import os\nos.system('id')"),  # the content rule
        )]
    if kind == "oversized":
        return [wrk_request("POST", ex, tok, execute_body("python", "#" + "x" * (1 << 20)))]
    raise ValueError(kind)


class Wrk:
    def __init__(self, kind, stack, connections, seconds, tmp):
        self.kind, self.connections = kind, connections
        script = os.path.join(tmp, "campaign-%s.lua" % kind)
        with open(script, "w") as f:
            f.write(WRK_LUA % {"requests": ", ".join(kind_requests(kind, stack))})
        self.out = open(os.path.join(tmp, "campaign-%s.out" % kind), "w+")
        self.proc = subprocess.Popen(
            ["wrk", "-t", "1", "-c", str(connections), "-d", "%ds" % seconds, "--timeout", "60s", "-s", script,
             "https://127.0.0.1:%d/" % stack.port], stdout=self.out, stderr=subprocess.STDOUT)

    def result(self, timeout):
        self.proc.wait(timeout=timeout)
        self.out.seek(0)
        text = self.out.read()
        self.out.close()
        line = next((l for l in text.splitlines() if l.startswith("WRK ")), None)
        if self.proc.returncode != 0 or line is None:
            raise CampaignError("wrk %s failed (%d): %s" % (self.kind, self.proc.returncode, text[-2000:]))
        v = {k: int(x) for k, x in (kv.split("=") for kv in line.split()[1:])}
        statuses = {}
        for l in text.splitlines():
            if l.startswith("STATUS "):
                _, st, code, retry, n = l.split()
                key = (int(st), "" if code == "-" or int(st) < 300 else code, retry == "r")
                statuses[key] = statuses.get(key, 0) + int(n)
        v["statuses"] = statuses
        v["socket_errors"] = v["connect"] + v["read"] + v["write"] + v["timeout"]
        return v

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait()


# ---- WebSocket sessions, from threads ---------------------------------------

ECHO = "import sys\nline = sys.stdin.readline()\nprint('echo:' + line.strip())\n"


class Sessions:
    """threads x sequential sessions: init, a line in, its echo out, exit 0."""

    def __init__(self, stack, threads, until):
        self.stack, self.until = stack, until
        self.lat_ms, self.fails, self.lock = [], [], threading.Lock()
        self.threads = [threading.Thread(target=self.loop, daemon=True) for _ in range(threads)]
        for t in self.threads:
            t.start()

    def loop(self):
        import ws_client
        while time.monotonic() < self.until:
            t0 = time.monotonic()
            try:
                out = ws_client.run(self.one(ws_client))
            except Exception as e:  # noqa: BLE001 - every failure is reported
                out = "%s: %s" % (type(e).__name__, e)
            with self.lock:
                if out is None:
                    self.lat_ms.append((time.monotonic() - t0) * 1000)
                else:
                    self.fails.append(out)

    async def one(self, ws_client):
        ws = await ws_client.connect(self.stack, token=self.stack.tokens["load"])
        try:
            await ws.send(ws_client.init_message("python", ECHO))
            await ws.send(json.dumps({"type": "data", "stream": "stdin", "data": "ping\n"}))
            events, code, reason = await ws_client.events_until_close(ws, timeout=120)
        finally:
            await ws.close()
        text = ws_client.stream_text(events)
        exits = [e for e in events if e.get("type") == "exit"]
        if "echo:ping" not in text or not exits or exits[-1].get("code") != 0:
            return "session: output %r, exits %r, close %r %r" % (text[:200], exits, code, reason)
        return None

    def join(self):
        for t in self.threads:
            t.join(180)


# ---- the resources of the stack ---------------------------------------------

def proc_table():
    """{pid: (ppid, uid)} of every process."""
    out = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open("/proc/%s/status" % entry) as f:
                fields = dict(l.split(":", 1) for l in f if ":" in l)
            out[int(entry)] = (int(fields["PPid"]), int(fields["Uid"].split()[0]))
        except (OSError, KeyError, ValueError):
            pass
    return out


def tree(table, root):
    pids, todo = [], [root]
    while todo:
        p = todo.pop()
        pids.append(p)
        todo += [c for c, (pp, _) in table.items() if pp == p]
    return pids


def fd_count(pid):
    try:
        return len(os.listdir("/proc/%d/fd" % pid))
    except OSError:
        return 0


def sample(stack, moat_harness):
    table = proc_table()
    lo, hi = stack.uid_base, stack.uid_base + 256
    boxes = [p for p, (_, uid) in table.items() if lo <= uid < hi]
    gw = [p for p in tree(table, stack.gateway.pid)]
    be = [p for p in tree(table, stack.backend.pid) if not lo <= table.get(p, (0, 0))[1] < hi]

    def rss_kib(pid):
        try:
            return moat_harness.vm_rss_kib(pid)
        except (OSError, IndexError):
            return 0  # gone meanwhile

    return {"gw_rss_kib": sum(rss_kib(p) for p in gw), "gw_fds": sum(fd_count(p) for p in gw), "gw_procs": len(gw),
            "be_rss_kib": sum(rss_kib(p) for p in be), "be_fds": sum(fd_count(p) for p in be),
            "cgroups": moat_harness.cgroup_count(stack.tag), "box_procs": len(boxes)}


def print_table(rows):
    log("\n%-8s %12s %7s %12s %7s %8s %9s" % ("sample", "gw RSS MiB", "gw fds", "be RSS MiB", "be fds", "cgroups",
                                               "box procs"))
    for label, s in rows:
        log("%-8s %12.1f %7d %12.1f %7d %8d %9d" % (label, s["gw_rss_kib"] / 1024, s["gw_fds"], s["be_rss_kib"] / 1024,
                                                     s["be_fds"], s["cgroups"], s["box_procs"]))


# ---- the campaign -----------------------------------------------------------

def median(values):
    v = sorted(values)
    return (v[(len(v) - 1) // 2] + v[len(v) // 2]) / 2


def edges(loaded, key):
    """(base, end): the medians of key over the k samples after the first k (the warm-up: the allocator's
    arenas and h2o's pools grow to their working size) and over the last k (k = 3 of 10), so that neither
    the warm-up nor a process the backend forks for a run at the moment of one sample decides."""
    k = max(1, len(loaded) // 3)
    return median([s[key] for s in loaded[k:2 * k]]), median([s[key] for s in loaded[-k:]])


def flat(idle, loaded, after, smoke):
    """The flatness failures (messages): RSS at the end of the load against its start; descriptors likewise
    but loosely (connections and runs in flight come and go), and after the load against idle closely
    (whatever is left open then is a leak)."""
    rss_pct, rss_kib_abs, fd_load, fd_idle = (0.5, 32768, 64, 16) if smoke else (0.10, 4096, 32, 8)
    first, last = loaded[0], loaded[-1]
    fails = []
    for who in ("gw", "be"):
        a, b = edges(loaded, who + "_rss_kib")
        if b > a + max(a * rss_pct, rss_kib_abs):
            fails.append("%s RSS grew from %.1f to %.1f MiB under load" % (who, a / 1024, b / 1024))
        a, b = first[who + "_fds"], last[who + "_fds"]
        if b > a + fd_load:
            fails.append("%s fds grew from %d to %d under load" % (who, a, b))
        a, b = idle[who + "_fds"], after[who + "_fds"]
        if b > a + fd_idle:
            fails.append("%s fds: %d after the load, %d idle before it" % (who, b, a))
    return fails


def classify(kind, statuses):
    """(unexpected responses {key: n}, bad 5xx {key: n}) of one kind."""
    unexpected, bad5xx = {}, {}
    for (st, code, retry), n in statuses.items():
        if (st, code) not in EXPECTED[kind]:
            unexpected[(st, code)] = unexpected.get((st, code), 0) + n
        if st >= 500 and (not retry or (st, code) not in EXPECTED[kind]):
            bad5xx[(st, code, retry)] = bad5xx.get((st, code, retry), 0) + n
    return unexpected, bad5xx


def run(args, moat_harness):
    seconds = int(args.minutes * 60)
    scale = args.connections / 64.0
    conns = {k: max(1, int(round(v * scale))) for k, v in SHARES.items()}
    sessions = max(1, args.connections - sum(conns.values()))
    stack = moat_harness.Stack(
        tenants=[("load", TENANT, ""), ("limited", LIMITED, "")],
        # init_timeout_ms: a busy machine may take long to send a session's init; that is not under test
        extra_config="max_connections_per_address: 1000\nunauthenticated: {per_second: 200, burst: 1000}\n"
                     "sessions: {init_timeout_ms: 60000}\n"
                     "submissions:\n  max_running: 4\n  queue_max: 256\n  queue_max_per_tenant: 256\n")
    fails = []
    try:
        stack.start()
        st, _, _ = stack.request("GET", "/api/v2/runtimes", token=stack.tokens["load"])
        if st != 200:
            raise CampaignError("runtimes answered %d before the load" % st)
        # idle: the backend's groups and boxes before any load
        idle = sample(stack, moat_harness)
        log("load_campaign: %d s, %d connections (%s; %d session threads), backend -j 4, gateway 2 workers"
            % (seconds, args.connections, ", ".join("%s %d" % kv for kv in conns.items()), sessions))
        tmp = tempfile.mkdtemp(prefix="moat-campaign-")
        start = time.monotonic()
        # the load goes on a little past the last sample, so that it is taken under load
        load_s = seconds + max(2, args.sample_s // 4)
        wrks = [Wrk(k, stack, n, load_s, tmp) for k, n in conns.items()]
        ses = Sessions(stack, sessions, start + load_s)
        rows = [("idle", idle)]
        for i in range(1, seconds // args.sample_s + 1):
            wake = start + i * args.sample_s
            while time.monotonic() < wake:
                time.sleep(min(1.0, wake - time.monotonic()))
            if stack.gateway.poll() is not None or stack.backend.poll() is not None:
                raise CampaignError("a server died under load:\n" + stack.log("gateway")[-1500:]
                                    + stack.log("backend")[-1500:])
            at = i * args.sample_s
            rows.append(("min %d" % (at // 60) if at % 60 == 0 else "%ds" % at, sample(stack, moat_harness)))
            log("  sampled %s" % rows[-1][0])
        results = {w.kind: w.result(timeout=load_s + 120) for w in wrks}
        ses.join()
        # after the load: groups and box processes back to the idle count
        settle = time.monotonic() + 60
        while True:
            after = sample(stack, moat_harness)
            if (after["cgroups"] <= idle["cgroups"] and after["box_procs"] <= idle["box_procs"]
                    and after["gw_fds"] <= idle["gw_fds"] and after["be_fds"] <= idle["be_fds"]) or time.monotonic() > settle:
                break
            time.sleep(0.5)
        rows.append(("after", after))
        print_table(rows)
        loaded = [r[1] for r in rows[1:-1]]
        log("")
        for who, name in (("gw", "gateway"), ("be", "backend")):
            a, b = edges(loaded, who + "_rss_kib")
            k = max(1, len(loaded) // 3)
            log("%s RSS at the end of the load against after its warm-up (medians of the last %d samples and of "
                "samples %d-%d): %.1f MiB / %.1f MiB = %.2fx" % (name, k, k + 1, 2 * k, b / 1024, a / 1024, b / max(1, a)))
        log("\n%-10s %9s %8s %9s %9s %9s  %s" % ("kind", "requests", "req/s", "p50 ms", "p99 ms", "max ms",
                                                 "statuses (status code +retry-after: count)"))
        for kind, r in results.items():
            sts = ", ".join("%d %s%s: %d" % (st, code, " +RA" if ra else "", n)
                            for (st, code, ra), n in sorted(r["statuses"].items()))
            log("%-10s %9d %8.1f %9.1f %9.1f %9.1f  %s" % (kind, r["requests"], r["requests"] / (r["duration_us"] / 1e6),
                                                       r["p50_us"] / 1e3, r["p99_us"] / 1e3, r["max_us"] / 1e3, sts))
            unexpected, bad5xx = classify(kind, r["statuses"])
            if unexpected:
                fails.append("%s: unexpected responses %r" % (kind, unexpected))
            if bad5xx:
                fails.append("%s: unexpected 5xx %r" % (kind, bad5xx))
            if r["socket_errors"] and kind not in SOCKET_ERRORS_ALLOWED:
                fails.append("%s: %d socket errors" % (kind, r["socket_errors"]))
            if sum(r["statuses"].values()) == 0:
                fails.append("%s: no response at all" % kind)
        lat = sorted(ses.lat_ms)
        if lat:
            log("%-10s %9d %8.1f %9.1f %9.1f %9.1f  %d failed" % (
                "sessions", len(lat), len(lat) / load_s, lat[len(lat) // 2], lat[min(len(lat) - 1, int(len(lat) * 0.99))],
                lat[-1], len(ses.fails)))
        if ses.fails:
            fails.append("sessions: %d failed, e.g. %s" % (len(ses.fails), ses.fails[:3]))
        if not lat:
            fails.append("sessions: none completed")
        # flat: the last sample under load against the first
        fails += flat(idle, loaded, after, args.smoke)
        if after["cgroups"] > idle["cgroups"]:
            fails.append("cgroups: %d after the load, %d idle" % (after["cgroups"], idle["cgroups"]))
        if after["box_procs"] > idle["box_procs"]:
            fails.append("box processes: %d after the load, %d idle" % (after["box_procs"], idle["box_procs"]))
        p = subprocess.run([moat_harness.MOAT_AUDIT, "verify", stack.audit_dir], capture_output=True, text=True)
        log("\naudit verify: " + "; ".join(l for l in p.stdout.strip().splitlines() if not l.startswith("anchor:")))
        if p.returncode != 0:
            fails.append("moat-audit verify failed: " + p.stderr.strip()[-500:])
        if stack.gateway.poll() is not None or stack.backend.poll() is not None:
            fails.append("a server exited during the campaign")
    finally:
        for w in locals().get("wrks", []):
            w.stop()
        stack.stop()
        if "tmp" in locals():
            shutil.rmtree(tmp, ignore_errors=True)
    return fails


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build-dir", default=os.environ.get("MOAT_BUILD_DIR", os.path.join(SOURCE, "build")))
    ap.add_argument("--minutes", type=float, default=10.0, help="length of the load (default 10)")
    ap.add_argument("--connections", type=int, default=64, help="connections in all (default 64)")
    ap.add_argument("--sample-s", type=int, default=60, help="seconds between samples (default 60)")
    ap.add_argument("--smoke", action="store_true", help="20 s, 16 connections, a sample every 5 s, loose bounds")
    args = ap.parse_args()
    if args.smoke:
        args.minutes, args.connections, args.sample_s = 20 / 60.0, 16, 5
    if args.connections < 16:
        ap.error("--connections must be at least 16 (one per kind and a session)")
    os.environ["MOAT_BUILD_DIR"] = os.path.abspath(args.build_dir)
    sys.path.insert(0, os.path.join(SOURCE, "tests", "e2e"))
    import moat_harness  # noqa: E402  (reads MOAT_BUILD_DIR)
    if os.geteuid() != 0:
        print("load_campaign: run as root (the backend runs boxes)", file=sys.stderr)
        return 1
    try:
        fails = run(args, moat_harness)
    except (CampaignError, AssertionError, OSError, subprocess.SubprocessError) as e:
        print("load_campaign: %s" % e, file=sys.stderr)
        return 1
    if fails:
        log("\nFAIL")
        for f in fails:
            log("  " + f)
        return 1
    log("\nPASS: no unexpected status, no unexpected 5xx, resources flat, trail verifies")
    return 0


if __name__ == "__main__":
    sys.exit(main())
