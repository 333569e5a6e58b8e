#!/usr/bin/env python3
"""bench_submissions - Judge0 wait=false throughput against execute's (issue 12, item 2).

    python3 tests/bench/bench_submissions.py [--build-dir build] [--runs 320] [--clients 16]
        [--rounds 3] [--max-running 4] [--poll-ms 100] [--smoke]

Run as root (the backend runs boxes; the gateway drops to the `moat` user).
It starts one moat-backend (-j 4) and one moat-gateway on 127.0.0.1, set up
as the e2e tests do (tests/e2e/moat_harness.py, audit on, results kept in
memory), with submissions.max_running as given, and runs the same program
(python3: print(1)) N times two ways, with C clients (threads, each with one
keep-alive TLS connection, HTTP/1.1):

  execute      each client POSTs /api/v2/execute, one after another, until
               the N are done: the baseline;
  submissions  each client POSTs its share of the N to /submissions?wait=false,
               then polls its tokens (GET /submissions/batch?tokens=, 20 at
               a time, every poll-ms) until every one has a final status.

Throughput is runs completed per second, from the first request to the last
answer (execute) or the last poll that saw the last result (submissions).
Each round runs both (odd rounds execute first, even rounds submissions
first) and takes the ratio within the round; the median over rounds is
reported.  Every answer is checked: stdout "1\\n", status Accepted.
Goal: submissions / execute >= 0.9x.

Exit status: 0 when every run was checked; 1 on any error.  Missing the
goal is reported, not an error.
"""

import argparse
import http.client
import json
import os
import statistics
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.abspath(os.path.join(HERE, "..", ".."))
GOAL = 0.9
CODE = "print(1)"
TENANT = ("rate: {per_second: 100000, burst: 100000}\nmax_in_flight: 64\ncpu_seconds_per_minute: 100000\n"
          "endpoints: [execute, runtimes, submissions, languages]\n")


class Client:
    """One keep-alive TLS connection (HTTP/1.1) of one bench thread."""

    def __init__(self, stack):
        self.stack = stack
        self.conn = None

    def call(self, method, path, body=None):
        h = {"Authorization": "Bearer " + self.stack.token}
        if body is not None:
            body = json.dumps(body)
            h["Content-Type"] = "application/json"
        for attempt in (1, 2):  # once more on a connection the server closed
            if self.conn is None:
                self.conn = http.client.HTTPSConnection("127.0.0.1", self.stack.port, timeout=120,
                                                        context=self.stack.ssl_context(alpn=("http/1.1",)))
            try:
                self.conn.request(method, path, body=body, headers=h)
                resp = self.conn.getresponse()
                return resp.status, json.loads(resp.read())
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                self.conn.close()
                self.conn = None
                if attempt == 2:
                    raise

    def close(self):
        if self.conn is not None:
            self.conn.close()


def descendants(pid):
    """pid and every process below it (the gateway's privsep supervisor and audit writer)."""
    kids = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open("/proc/%s/stat" % d) as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            kids.setdefault(ppid, []).append(int(d))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += kids.get(p, [])
    return out


def cpu_ms(pids):
    """utime + stime (+ reaped children's: the boxes) of pids, in ms."""
    tick, total = os.sysconf("SC_CLK_TCK"), 0
    for p in pids:
        try:
            with open("/proc/%d/stat" % p) as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += sum(int(x) for x in fields[11:15])
        except (OSError, ValueError):
            pass
    return total * 1000.0 / tick


def check(what, ok, detail):
    if not ok:
        raise RuntimeError("%s: %s" % (what, detail))


def execute_share(client, n):
    body = {"language": "python", "version": "*", "files": [{"name": "main.py", "content": CODE}]}
    for _ in range(n):
        status, data = client.call("POST", "/api/v2/execute", body)
        check("execute", status == 200 and data["run"]["stdout"] == "1\n", (status, data))


POLLS = [0]  # GET /submissions/batch requests made (a list: the threads add to it under the GIL)


def submissions_share(client, n, poll_s):
    tokens = []
    for _ in range(n):
        status, data = client.call("POST", "/submissions?wait=false", {"source_code": CODE, "language_id": 71})
        check("submission", status == 201, (status, data))
        tokens.append(data["token"])
    while tokens:
        left = []
        for i in range(0, len(tokens), 20):
            part = tokens[i:i + 20]
            status, data = client.call("GET", "/submissions/batch?tokens=%s&fields=status,stdout" % ",".join(part))
            POLLS[0] += 1
            check("poll", status == 200, (status, data))
            for token, r in zip(part, data["submissions"]):
                check("poll", r is not None, "token %s lost" % token)
                if r["status"]["id"] < 3:
                    left.append(token)
                else:
                    check("result", r["status"]["id"] == 3 and r["stdout"] == "1\n", r)
        tokens = left
        if tokens:
            time.sleep(poll_s)


def timed(stack, clients, runs, share_fn, *extra):
    """runs split across the clients' threads; runs per second, and the CPU
    ms per run of the gateway side (gateway, audit writer) and of the
    backend (with its boxes)."""
    errors = []
    shares = [runs // len(clients) + (1 if i < runs % len(clients) else 0) for i in range(len(clients))]

    def work(c, n):
        try:
            share_fn(c, n, *extra)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)
    threads = [threading.Thread(target=work, args=(c, n)) for c, n in zip(clients, shares)]
    gw_pids, be_pids = descendants(stack.gateway.pid), [stack.backend.pid]
    gw0, be0 = cpu_ms(gw_pids), cpu_ms(be_pids)
    started = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    took = time.monotonic() - started
    gw1, be1 = cpu_ms(gw_pids), cpu_ms(be_pids)
    if errors:
        raise errors[0]
    return runs / took, (gw1 - gw0) / runs, (be1 - be0) / runs


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build-dir", default=os.path.join(SOURCE, "build"))
    ap.add_argument("--runs", type=int, default=320)
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--max-running", type=int, default=4, help="submissions.max_running (the backend has -j 4)")
    ap.add_argument("--poll-ms", type=int, default=100)
    ap.add_argument("--smoke", action="store_true", help="32 runs, 1 round: checks it runs, the figures mean nothing")
    args = ap.parse_args()
    if args.smoke:
        args.runs, args.rounds = 32, 1
    os.environ["MOAT_BUILD_DIR"] = os.path.abspath(args.build_dir)
    sys.path.insert(0, os.path.join(SOURCE, "tests", "e2e"))
    from moat_harness import Stack  # noqa: E402  (reads MOAT_BUILD_DIR)

    stack = Stack(tenants=[("bench", TENANT, "")],
                  extra_config="submissions:\n  max_running: %d\n  queue_max: 100000\n  queue_max_per_tenant: 100000\n"
                  % args.max_running)
    try:
        stack.start()
    except Exception as e:  # noqa: BLE001 - a half-started stack is stopped too
        print("bench_submissions: %s" % e, file=sys.stderr)
        stack.stop()
        return 1
    clients = [Client(stack) for _ in range(args.clients)]
    try:
        # warm: the runtime table, the page cache of python, the connections
        timed(stack, clients, args.clients, execute_share)
        timed(stack, clients, args.clients, submissions_share, args.poll_ms / 1000.0)
        ratios, t_exec, t_sub, cpu = [], [], [], {"execute": [], "submissions": []}
        for r in range(args.rounds):
            cases = [("execute", execute_share, ()), ("submissions", submissions_share, (args.poll_ms / 1000.0,))]
            if r % 2:
                cases.reverse()
            POLLS[0] = 0
            got = {name: timed(stack, clients, args.runs, fn, *extra) for name, fn, extra in cases}
            t_exec.append(got["execute"][0])
            t_sub.append(got["submissions"][0])
            for name in cpu:
                cpu[name].append(got[name][1:])
            ratios.append(t_sub[-1] / t_exec[-1])
            print("round %d: execute %.1f runs/s (CPU/run: gateway %.2f ms, backend %.2f ms), submissions (wait=false, "
                  "polled) %.1f runs/s (gateway %.2f ms, backend %.2f ms; %.1f polls/run): %.2fx" %
                  (r + 1, t_exec[-1], got["execute"][1], got["execute"][2], t_sub[-1], got["submissions"][1],
                   got["submissions"][2], POLLS[0] / args.runs, ratios[-1]), flush=True)
        ratio = statistics.median(ratios)
        print("\n%d runs, %d clients, max_running %d, %d rounds (medians): execute %.1f runs/s, submissions %.1f runs/s" %
              (args.runs, args.clients, args.max_running, args.rounds, statistics.median(t_exec), statistics.median(t_sub)))
        for name in ("execute", "submissions"):
            print("%s: CPU per run (medians): gateway side %.2f ms, backend with boxes %.2f ms" %
                  (name, statistics.median(c[0] for c in cpu[name]), statistics.median(c[1] for c in cpu[name])))
        print("submissions / execute: %.2fx (goal >= %.1fx: %s)" % (ratio, GOAL, "met" if ratio >= GOAL else "MISSED"))
    except Exception as e:  # noqa: BLE001 - any failure is the benchmark's error
        print("bench_submissions: %s" % e, file=sys.stderr)
        return 1
    finally:
        for c in clients:
            c.close()
        stack.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
