#!/usr/bin/env python3
"""bench_metrics - what counting every request costs on the deny path (401).

    flock /tmp/moat-bench.lock python3 tests/bench/bench_metrics.py [--build-dir build]
        [--duration 10] [--rounds 5] [--connections 64] [--threads 2] [--smoke]

Run as root.  One backend and three gateways on 127.0.0.1 (audit off, as in
bench_gateway, so the audit writer does not dominate), each with two
workers, identical but for:

  off    no metrics section, text log lines (the baseline)
  on     metrics: {port: P} (every request counted, a scrape between rounds)
  json   metrics on and log: {format: json}

wrk drives each with HTTP/1.1 keep-alive POSTs of a small execute body and
no Authorization header (401: the deny path, the hot path under attack).
The cases run in interleaved rounds (off, on, json, off, ...) so drift in
machine load hits them alike; each round's ratio to off is taken within
the round, and the medians over rounds are printed with requests/s and the
gateway's CPU time per request (utime + stime, /proc/PID/stat), the better
measure on a machine the load generator shares.  Goal: on costs <= 3% (a
CPU-per-request ratio <= 1.03, a throughput ratio >= 0.97).

The counters are checked too: after the run, moat_requests_total{status=
"401"} of the "on" gateway equals the 401s wrk saw (plus the check's own).

Exit status: 0 when every case ran with only 401s and the counts agree; 1
otherwise.  Missing the goal is reported, not an error.
"""

import argparse
import http.client
import json
import os
import re
import signal
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
from bench_gateway import BenchError, cpu_seconds, https_request, log, median, run_wrk, EXEC_BODY  # noqa: E402

GOAL = 0.03


def scrape(port):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("GET", "/metrics")
        resp = conn.getresponse()
        if resp.status != 200:
            raise BenchError("scrape: %d" % resp.status)
        return resp.read().decode()
    finally:
        conn.close()


def counted_401(text):
    n = 0
    for m in re.finditer(r'^moat_requests_total\{[^}]*status="401"[^}]*\} (\d+)$', text, re.M):
        n += int(m.group(1))
    return n


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build-dir", default=os.environ.get("MOAT_BUILD_DIR", os.path.join(SOURCE, "build")))
    ap.add_argument("--duration", type=int, default=10, help="seconds per measurement (default 10)")
    ap.add_argument("--connections", type=int, default=64, help="connections (default 64)")
    ap.add_argument("--threads", type=int, default=2, help="wrk threads (default 2)")
    ap.add_argument("--rounds", type=int, default=5, help="interleaved rounds (default 5)")
    ap.add_argument("--smoke", action="store_true", help="short run: check that everything works")
    args = ap.parse_args()
    if args.smoke:
        args.duration, args.rounds, args.connections = 1, 1, 4

    def interrupted(signum, frame):
        raise KeyboardInterrupt
    signal.signal(signal.SIGINT, interrupted)
    signal.signal(signal.SIGTERM, interrupted)

    build = os.path.abspath(args.build_dir)
    os.environ["MOAT_BUILD_DIR"] = build
    sys.path.insert(0, os.path.join(SOURCE, "tests", "e2e"))
    import moat_harness  # noqa: E402  (reads MOAT_BUILD_DIR at import)

    if os.geteuid() != 0:
        raise BenchError("run as root (the backend runs boxes)")
    body = json.dumps(EXEC_BODY)
    limits = "max_connections_per_address: 100000\nmax_connections: 100000\n"
    mport = moat_harness.free_port()
    extras = {"off": limits, "on": limits + "metrics: {port: %d}\n" % mport,
              "json": limits + "metrics: {port: %d}\nlog: {format: json}\n" % moat_harness.free_port()}
    stacks = {name: moat_harness.Stack(audit=False, extra_config=extra) for name, extra in extras.items()}
    cases = list(stacks)
    results = {c: [] for c in cases}
    try:
        first = stacks["off"]
        first.start()
        for name in cases[1:]:
            # the other gateways share the first one's backend (a 401 never reaches it)
            s = stacks[name]
            with open(s.config) as f:
                text = f.read().replace("socket: %s\n" % s.socket, "socket: %s\n" % first.socket)
            with open(s.config, "w") as f:
                f.write(text)
            s.start_gateway()
        hdr = {"Content-Type": "application/json"}
        for name, s in stacks.items():
            st, _ = https_request(s.port, s.ca, "POST", "/api/v2/execute", body, hdr)
            if st != 401:
                raise BenchError("%s: no token: %d, want 401" % (name, st))
        log("load average at the start: %s" % open("/proc/loadavg").read().strip())
        log("bench_metrics: %d s per case, %d rounds, %d connections, 2 gateway workers, %d wrk threads" %
            (args.duration, args.rounds, args.connections, args.threads))
        wrk_401 = 1  # the check above
        for rnd in range(args.rounds):
            row = {}
            for case in cases:
                s = stacks[case]
                cpu0 = cpu_seconds(s.gateway.pid)
                r = run_wrk(s.tmp, s.port, None, body, args.connections, args.threads, args.duration)
                r["cpu_us"] = (cpu_seconds(s.gateway.pid) - cpu0) * 1e6 / r["requests"]
                r["rps"] = r["requests"] / r["seconds"]
                if r["socket_errors"] or r["non2xx"] != r["requests"]:
                    raise BenchError("%s: %d socket errors, %d of %d not 2xx (want all 401)" %
                                     (case, r["socket_errors"], r["non2xx"], r["requests"]))
                if case == "on":
                    wrk_401 += r["requests"]
                    scrape(mport)  # a scrape while it runs costs what it costs
                row[case] = r
                log("round %d %-4s %9.0f req/s  p50 %6.2f ms  p99 %6.2f ms  cpu %6.1f us/req" %
                    (rnd + 1, case, r["rps"], r["p50_ms"], r["p99_ms"], r["cpu_us"]))
            for case in cases:
                results[case].append({"rps": row[case]["rps"], "cpu_us": row[case]["cpu_us"],
                                      "rps_ratio": row[case]["rps"] / row["off"]["rps"],
                                      "cpu_ratio": row[case]["cpu_us"] / row["off"]["cpu_us"]})
        # wrk counts the requests it finished; one cut off at the end may have
        # been answered (and counted) without wrk seeing it
        got = counted_401(scrape(mport))
        if not wrk_401 <= got <= wrk_401 + args.connections * args.rounds:
            raise BenchError("on: moat_requests_total 401 = %d, wrk saw %d" % (got, wrk_401))
        log("counters: moat_requests_total{status=\"401\"} = %d, wrk saw %d" % (got, wrk_401))
        log("load average at the end: %s" % open("/proc/loadavg").read().strip())
        log("median over %d rounds (ratio to off within each round):" % args.rounds)
        for case in cases:
            m = {k: median([r[k] for r in results[case]]) for k in results[case][0]}
            log("  %-4s %9.0f req/s (%.3fx)  cpu %6.1f us/req (%.3fx)" %
                (case, m["rps"], m["rps_ratio"], m["cpu_us"], m["cpu_ratio"]))
            if case == "off":
                off_cpu_us = m["cpu_us"]
            if case == "on":
                met = m["cpu_ratio"] <= 1 + GOAL or m["rps_ratio"] >= 1 - GOAL
                log("  goal (metrics cost <= %d%%) by the gateways' ratio: %s" % (GOAL * 100, "met" if met else "MISSED"))
        # the counting alone, on the thread's CPU clock: what on adds to each 401
        count = os.path.join(build, "tests", "bench", "bench_metrics_count")
        p = subprocess.run([count, "2000000" if args.smoke else "20000000"], capture_output=True, text=True, timeout=300)
        v = dict(kv.split("=") for kv in p.stdout.split()) if p.returncode == 0 else None
        if v is None:
            raise BenchError("bench_metrics_count failed: %s" % p.stderr)
        frac = float(v["count_ns"]) / (off_cpu_us * 1000)
        log("counting alone: %s ns per 401 (%s ns over 16 tenants and 3 statuses) = %.2f%% of off's %.1f us/req; "
            "goal by the counting's own cost: %s" % (v["count_ns"], v["mixed_ns"], frac * 100, off_cpu_us,
                                                     "met" if frac <= GOAL else "MISSED"))
        return 0
    finally:
        for s in stacks.values():
            s.stop()


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BenchError as e:
        print("bench_metrics: %s" % e, file=sys.stderr)
        sys.exit(1)
