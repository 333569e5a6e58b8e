#!/usr/bin/env python3
"""bench_audit - what the audit trail costs the gateway: audit on vs off in one run.

    python3 tests/bench/bench_audit.py [--build-dir build] [--duration 10] [--rounds 4]
        [--exec-connections 8] [--deny-connections 64] [--threads 2] [--audit-line 'KEY: VALUE']

Run as root (the backend runs boxes; the gateway drops to the `moat` user;
the audit writer to `moat-audit`).  It starts, on 127.0.0.1 with throwaway
certificates, one moat-backend and two moat-gateways in front of it, set up
as the e2e tests do (tests/e2e/moat_harness.py), identical but for the audit
section:

  on    the audit trail on: the root supervisor, moat-audit-writer, a fresh
        audit directory (moat-audit init) on the same filesystem as the tests
        use (/tmp); every request writes a record, an execution waits for two
        (the decision before it runs, the result with its packet before the
        response), each made durable with fdatasync (group commit);
  off   no audit section.

Both gateways share the backend, so the executions compete for the same box
slots either way.  Cases, both over HTTP/1.1 keep-alive with wrk:

  exec  POST /api/v2/execute, print(1) in python, 8 connections: a real box
        per request.  Goal: on >= 0.95x off.
  401   the same POST without Authorization, 64 connections: the deny path,
        whose record the gateway does not wait for (the writer makes such
        records durable within 100 ms).  Goal: on >= 0.8x off.

Rounds interleave the series (exec on, exec off, 401 on, 401 off, then exec
off, exec on, ... : odd rounds start with on, even ones with off) so that
drift in machine load and whatever a run leaves behind hit both alike; the
ratio is taken within each round and the median over rounds reported.  Server CPU per request is the
gateway process's CPU time (and, with audit on, the writer's, shown apart).

After the run, `moat-audit verify` must pass on the audit directory and the
log must hold at least as many records as requests were answered.

Exit status: 0 when every case ran, every response had the expected status and
the log verifies; 1 on any error.  Missing a goal is reported, not an error.
"""

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)

from bench_gateway import BenchError, cpu_seconds, https_request, log, median, run_wrk  # noqa: E402

GOALS = {"exec": 0.95, "401": 0.8}
EXEC_BODY = {"language": "python", "version": "*", "files": [{"name": "main.py", "content": "print(1)"}]}


def children(pid):
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open("/proc/%s/stat" % d) as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                        out.append(int(d))
            except (OSError, IndexError, ValueError):
                pass
    return out


def child_named(pid, name):
    for c in children(pid):
        try:
            with open("/proc/%d/cmdline" % c, "rb") as f:
                argv0 = f.read().split(b"\0")[0].decode(errors="replace")
        except OSError:
            continue
        if os.path.basename(argv0) == name:
            return c
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build-dir", default=os.environ.get("MOAT_BUILD_DIR", os.path.join(SOURCE, "build")))
    ap.add_argument("--duration", type=int, default=10, help="seconds per measurement (default 10)")
    ap.add_argument("--rounds", type=int, default=4, help="interleaved rounds (default 4)")
    ap.add_argument("--exec-connections", type=int, default=8, help="connections for exec (default 8)")
    ap.add_argument("--deny-connections", type=int, default=64, help="connections for 401 (default 64)")
    ap.add_argument("--threads", type=int, default=2, help="load generator threads (default 2)")
    ap.add_argument("--cases", default="exec,401", help="comma-separated subset of exec,401")
    ap.add_argument("--smoke", action="store_true", help="short run: check that everything works")
    ap.add_argument("--hold", action="store_true", help="keep the servers running after the run (for perf)")
    ap.add_argument("--audit-line", action="append", default=[], metavar="'KEY: VALUE'",
                    help="one more line of the audit section of the 'on' gateway, e.g. 'packets: false' "
                         "or 'checkpoint_records: 100' (to see what a setting costs); repeatable")
    args = ap.parse_args()

    def interrupted(signum, frame):
        raise KeyboardInterrupt
    signal.signal(signal.SIGINT, interrupted)
    signal.signal(signal.SIGTERM, interrupted)

    build = os.path.abspath(args.build_dir)
    os.environ["MOAT_BUILD_DIR"] = build
    sys.path.insert(0, os.path.join(SOURCE, "tests", "e2e"))
    import moat_harness  # noqa: E402  (reads MOAT_BUILD_DIR at import)

    if shutil.which("wrk") is None:
        raise BenchError("wrk not found (.ci/install-deps)")
    for b in (moat_harness.BACKEND, moat_harness.GATEWAY, moat_harness.MOATCTL, moat_harness.MOAT_AUDIT,
              moat_harness.AUDIT_WRITER):
        if not os.access(b, os.X_OK):
            raise BenchError("%s not built" % b)
    if os.geteuid() != 0:
        raise BenchError("run as root (the backend runs boxes)")
    cases = args.cases.split(",")
    for c in cases:
        if c not in GOALS:
            raise BenchError("unknown case %r" % c)

    body = json.dumps(EXEC_BODY)
    extra = "rate: {per_second: 100000, burst: 100000}\nmax_in_flight: 1000\ncpu_seconds_per_minute: 1000000\n"
    tenants = [("bench", extra, "")]
    # Both stacks get the same backend socket path (the harness derives it
    # from our pid): "on" starts the backend, "off" only a gateway.
    stacks = {"on": moat_harness.Stack(tenants=tenants, audit=True, audit_extra="".join("  %s\n" % l for l in args.audit_line)),
              "off": moat_harness.Stack(tenants=tenants, audit=False)}
    results = {}
    answered_on = 0
    try:
        stacks["on"].start()
        stacks["off"].start_gateway()
        pids = {}
        for mode, s in stacks.items():
            gw = child_named(s.gateway.pid, "moat-gateway") if mode == "on" else s.gateway.pid
            writer = child_named(s.gateway.pid, "moat-audit-writer") if mode == "on" else None
            if gw is None or (mode == "on" and writer is None):
                raise BenchError("audit %s: cannot find the gateway/writer processes" % mode)
            pids[mode] = (gw, writer)
            hdr = {"Content-Type": "application/json"}
            st, _ = https_request(s.port, s.ca, "POST", "/api/v2/execute", body, hdr)
            if st != 401:
                raise BenchError("audit %s: no token: %d, want 401" % (mode, st))
            ok = dict(hdr, Authorization="Bearer " + s.tokens["bench"])
            st, data = https_request(s.port, s.ca, "POST", "/api/v2/execute", body, ok)
            if st != 200 or not isinstance(data, dict) or data.get("run", {}).get("stdout") != "1\n":
                raise BenchError("audit %s: execute print(1): %d %r" % (mode, st, data))
            if mode == "on":
                answered_on += 2

        log("load average at the start: %s" % open("/proc/loadavg").read().strip())
        log("bench_audit: %d s per case, exec %d connections, 401 %d connections, HTTP/1.1 keep-alive (wrk, %d threads), "
            "2 gateway workers each, audit dir %s" % (args.duration, args.exec_connections, args.deny_connections,
                                                     args.threads, stacks["on"].audit_dir))
        for rnd in range(args.rounds):
            for case in cases:
                # on first in odd rounds, off first in even ones: whatever
                # the first run leaves behind (dirty pages, warm boxes) hits both
                for mode in (("on", "off") if rnd % 2 == 0 else ("off", "on")):
                    s = stacks[mode]
                    gw, writer = pids[mode]
                    token = s.tokens["bench"] if case == "exec" else None
                    conns = args.exec_connections if case == "exec" else args.deny_connections
                    cpu0 = cpu_seconds(gw)
                    w0 = cpu_seconds(writer) if writer else 0.0
                    r = run_wrk(s.tmp, s.port, token, body, conns, args.threads, args.duration)
                    r["cpu_us"] = (cpu_seconds(gw) - cpu0) * 1e6 / r["requests"]
                    r["writer_us"] = ((cpu_seconds(writer) - w0) * 1e6 / r["requests"]) if writer else 0.0
                    r["rps"] = r["requests"] / r["seconds"]
                    want_non2xx = r["requests"] if case == "401" else 0
                    if r["socket_errors"] or r["non2xx"] != want_non2xx:
                        raise BenchError("%s audit %s: %d of %d responses with an unexpected status, %d socket errors"
                                         % (case, mode, abs(r["non2xx"] - want_non2xx), r["requests"],
                                            r["socket_errors"]))
                    if mode == "on":
                        answered_on += r["requests"]
                    results.setdefault((case, mode), []).append(r)
                    log("  round %d  %-4s audit %-3s %9.1f req/s  p50 %7.2f ms  p99 %7.2f ms  gateway CPU %6.1f us/req"
                        "  writer CPU %6.1f us/req  (%d requests)"
                        % (rnd + 1, case, mode, r["rps"], r["p50_ms"], r["p99_ms"], r["cpu_us"], r["writer_us"],
                           r["requests"]))
        if args.hold:
            log("holding: audit on: gateway pid %d writer pid %d port %d token %s; audit off: gateway pid %d port %d"
                " token %s; Ctrl-C to stop" % (pids["on"][0], pids["on"][1], stacks["on"].port, stacks["on"].tokens["bench"],
                                               pids["off"][0], stacks["off"].port, stacks["off"].tokens["bench"]))
            try:
                signal.pause()
            except KeyboardInterrupt:
                pass
        # The trail of the whole run verifies and holds a record per answer.
        # (wrk counts the responses it read; a few more may have been cut
        # off at the end, so the log may hold more.)
        for mode in ("off", "on"):
            st, _ = https_request(stacks[mode].port, stacks[mode].ca, "GET", "/healthz")
            if st != 200:
                raise BenchError("audit %s: gateway not healthy after the run (%d)" % (mode, st))
        time.sleep(1)
        adir = stacks["on"].audit_dir
        t0 = time.time()
        p = subprocess.run([moat_harness.MOAT_AUDIT, "verify", adir], capture_output=True, text=True)
        verify_s = time.time() - t0
        if p.returncode != 0:
            raise BenchError("moat-audit verify failed: %s" % p.stderr.strip())
        # (not `moat-audit stats`: it counts an execution's result record as a
        # second request, since the gateway gives result records a decision)
        q = subprocess.Popen([moat_harness.MOAT_AUDIT, "query", adir, "--type", "request", "--format", "json"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        n_request = sum(1 for _ in q.stdout)
        if q.wait() != 0:
            raise BenchError("moat-audit query failed: %s" % q.stderr.read().decode(errors="replace").strip())
        if n_request < answered_on:
            raise BenchError("the log holds %d request records for %d answered requests" % (n_request, answered_on))
        size = sum(os.path.getsize(os.path.join(dp, f)) for dp, _, fs in os.walk(adir) for f in fs)
        log("audit trail: %d request records for %d answered requests, %.1f MB on disk, verify OK in %.1f s"
            % (n_request, answered_on, size / 1e6, verify_s))
    finally:
        stacks["off"].stop()
        stacks["on"].stop()

    log("")
    log("load average at the end: %s" % open("/proc/loadavg").read().strip())
    log("")
    log("| case | audit | req/s | p50 ms | p99 ms | gateway CPU us/req | writer CPU us/req | req/s on/off | goal |")
    log("|---|---|---|---|---|---|---|---|---|")
    missed = []
    for case in cases:
        on, off = results[(case, "on")], results[(case, "off")]
        ratio = median([a["rps"] / b["rps"] for a, b in zip(on, off)])
        for mode, rs in (("on", on), ("off", off)):
            med = {k: median([r[k] for r in rs]) for k in ("rps", "p50_ms", "p99_ms", "cpu_us", "writer_us")}
            cells = ("%.2fx" % ratio, ">= %.2fx" % GOALS[case]) if mode == "on" else ("", "")
            log("| %s | %s | %.1f | %.2f | %.2f | %.1f | %s | %s | %s |"
                % (case, mode, med["rps"], med["p50_ms"], med["p99_ms"], med["cpu_us"],
                   "%.1f" % med["writer_us"] if mode == "on" else "-", cells[0], cells[1]))
        if ratio < GOALS[case]:
            missed.append("%s %.2fx < %.2fx" % (case, ratio, GOALS[case]))
    if args.rounds > 1:
        log("(medians over %d interleaved rounds; ratios are taken within each round)" % args.rounds)
    if args.smoke:
        log("bench_audit: smoke run OK (figures of a %d s run mean nothing)" % args.duration)
    elif missed:
        log("bench_audit: goal missed: %s" % ", ".join(missed))
    else:
        log("bench_audit: audit on meets the goals (exec >= %.2fx, 401 >= %.2fx of audit off)"
            % (GOALS["exec"], GOALS["401"]))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BenchError as e:
        print("bench_audit: error: %s" % e, file=sys.stderr)
        sys.exit(1)
