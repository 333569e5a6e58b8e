#!/usr/bin/env python3
"""bench_gateway - requests/s and latency of moat-gateway against a bare h2o server.

    python3 tests/bench/bench_gateway.py [--build-dir build] [--duration 10] [--rounds 3]
        [--connections 64] [--streams 8] [--exec-connections 8] [--threads 2]

Run as root (the backend runs boxes; the gateway drops to the `moat` user).
It starts, on 127.0.0.1 with throwaway certificates:

  raw_h2o       the baseline: h2o 2.2.5 evloop, TLS, answering every request
                with 200 and a fixed JSON body (tests/bench/raw_h2o.c), with
                as many worker threads as the gateway;
  the stack     moat-backend + moat-gateway, set up as the e2e tests do
                (tests/e2e/moat_harness.py), with two tenants: "bench"
                (generous limits) and "limited" (rate 0.001/s, burst 1: every
                request after the first gets 429).

and drives each case with HTTP/1.1 keep-alive (wrk) and HTTP/2 (h2load),
all of them POSTing the same small execute body to /api/v2/execute:

  raw     raw_h2o, fixed response                      (the baseline of 401)
  rawkey  raw_h2o, the same request as 429, with its   (the baseline of 429)
          Authorization header (ignored by raw_h2o)
  401     gateway, no Authorization header             (deny path)
  429     gateway, tenant "limited", valid API key     (deny path)
  exec    gateway, tenant "bench": print(1) in python, fewer connections
  hpack   gateway, HTTP/2 header blocks (not a load run; see below)
  idle    memory per idle TLS connection, gateway and raw_h2o (not a load
          run; see below)

The idle case runs first, per protocol on a freshly started gateway and
raw_h2o (a heap that has served other connections would hide the growth):
after a warm-up of a few connections opened and closed, it opens
--idle-connections TLS connections (default 1,000; RLIMIT_NOFILE is raised
for them), each completing its handshake and --idle-requests requests
(default 1; gateway: GET /api/v2/runtimes with tenant "bench"'s key, 200;
raw_h2o: GET /; more show what a connection keeps of the requests it
served, e.g. HTTP/2's HPACK tables), holds
them all open and idle, and reads each server's VmRSS (/proc/PID/status)
before and after: KiB per connection, and against raw h2o (goal: <= 8 KiB).
raw_h2o keeps idle connections 60 s, as the gateway's default idle timeout
does; both run with stock h2o settings otherwise.

The hpack case measures the gateway's CPU time per request (utime + stime
of its process, /proc/PID/stat) for three kinds of unauthenticated HTTP/2
request, each sent on a connection whose TLS handshake and preface were
done before the measurement starts:

  plain       GET /api/v2/runtimes, no token: 401 (100 at once per
              connection, the connection kept)
  plain_close the same, one per connection, which then ends as a refused
              block ends it: a frame h2o takes as a connection error
              (WINDOW_UPDATE of 0), so GOAWAY and close are included
  at_limit    plain with a header block at the default limits (100
              fields, ~62 KiB decoded from ~4 KiB: a 600-octet literal in
              the dynamic table referenced 95 times): 401
  amplified   plain with a 4,000-octet literal referenced 16,000 times (20
              KB on the wire, 64 MB decoded): refused before it is
              decoded, GOAWAY and close (one per connection)

and prints each one's cost against plain and plain_close.  The goal for
amplified is <= 10x a plain 401 on the same footing (plain_close: one
request, then the connection's teardown).

Each deny path is compared with raw_h2o receiving the very same request
bytes: a 429 request carries a 100-byte bearer token, which any HTTP server
has to read (over HTTP/2 clients send it Huffman-coded and never indexed),
so the baseline of 429 carries it too.  The ratio of 429 to plain raw is
printed as well.

For each it prints requests/s, p50/p99 latency, the server's CPU time per
request, and the ratio of each deny path to raw (goal: >= 0.85x).  The
ratio compares two servers on the same machine in the same run; the load
generator shares the CPUs with the server, which is why CPU time per
request is printed as well.  The cases run in interleaved rounds (raw, 401,
429, exec, raw, ...) and the medians over the rounds are reported.

Exit status: 0 when every case ran and every response had the expected
status; 1 on any error (missing tool, server not starting, wrong status,
socket errors).  Missing the 0.85x goal (or the idle case's 8 KiB) is
reported, not an error.
"""

import argparse
import json
import math
import os
import resource
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import http.client

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.abspath(os.path.join(HERE, "..", ".."))

GOAL = 0.85  # issue 14: each deny path >= 0.85x raw h2o, on HTTP/1.1 and HTTP/2
EXEC_BODY = {"language": "python", "version": "*", "files": [{"name": "main.py", "content": "print(1)"}]}


class BenchError(Exception):
    pass


def start_redis_bench(build_dir):
    """What a bench on the Redis limiter does first: SIGINT/SIGTERM end it
    through its finally blocks, MOAT_BUILD_DIR and the e2e helpers set up,
    and the tools it needs checked.  Returns (moat_harness, test_redis_limits)."""
    def interrupted(signum, frame):
        raise KeyboardInterrupt
    signal.signal(signal.SIGINT, interrupted)
    signal.signal(signal.SIGTERM, interrupted)
    os.environ["MOAT_BUILD_DIR"] = os.path.abspath(build_dir)
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "e2e"))
    import moat_harness  # noqa: E402  (reads MOAT_BUILD_DIR at import)
    import test_redis_limits  # noqa: E402  (its Redis and Gateway helpers)
    if shutil.which("wrk") is None:
        raise BenchError("wrk not found (.ci/install-deps)")
    if not test_redis_limits.HAVE_REDIS:
        raise BenchError("redis-server not found (apt-get install redis-server)")
    if os.geteuid() != 0:
        raise BenchError("run as root (the backend runs boxes)")
    return moat_harness, test_redis_limits


def log(msg):
    print(msg, flush=True)


# ---- servers ---------------------------------------------------------------

def https_request(port, ca, method, path, body=None, headers=None, timeout=60):
    ctx = ssl.create_default_context(cafile=ca)
    ctx.set_alpn_protocols(["http/1.1"])
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=timeout)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        resp = conn.getresponse()
        raw = resp.read()
        try:
            data = json.loads(raw)
        except ValueError:
            data = raw
        return resp.status, data
    finally:
        conn.close()


def cpu_seconds(pid):
    """utime + stime of a process (all threads), in seconds."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class RawH2o:
    def __init__(self, binary, certs, threads, port):
        self.port = port
        self.log = open(os.path.join(certs, "..", "raw_h2o.log"), "ab")
        self.proc = subprocess.Popen(
            [binary, "-c", os.path.join(certs, "server.pem"), "-k", os.path.join(certs, "server.key"),
             "-p", str(port), "-t", str(threads)], stdout=self.log, stderr=subprocess.STDOUT)
        ca = os.path.join(certs, "ca.pem")
        deadline = time.time() + 10
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise BenchError("raw_h2o exited with status %d" % self.proc.returncode)
            try:
                https_request(port, ca, "GET", "/", timeout=2)
                return
            except OSError:
                time.sleep(0.05)
        raise BenchError("raw_h2o did not start")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


# ---- load generators -------------------------------------------------------

WRK_SCRIPT = """
%(request)s
%(auth)s
function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format("WRK requests=%%d duration_us=%%d p50_us=%%d p99_us=%%d status=%%d connect=%%d read=%%d write=%%d timeout=%%d\\n",
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(99),
    e.status, e.connect, e.read, e.write, e.timeout))
end
"""


def lua_string(s):
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def run_wrk(tmp, port, token, body, connections, threads, duration, path="/api/v2/execute"):
    """wrk against path: a POST of the JSON body, or a GET when body is None."""
    script = os.path.join(tmp, "wrk-%d.lua" % os.getpid())
    auth = 'wrk.headers["Authorization"] = %s' % lua_string("Bearer " + token) if token else ""
    request = 'wrk.method = "GET"'
    if body is not None:
        request = 'wrk.method = "POST"\nwrk.body = %s\nwrk.headers["Content-Type"] = "application/json"' % lua_string(body)
    with open(script, "w") as f:
        f.write(WRK_SCRIPT % {"request": request, "auth": auth})
    cmd = ["wrk", "-t", str(min(threads, connections)), "-c", str(connections), "-d", "%ds" % duration,
           "--timeout", "30s", "-s", script, "https://127.0.0.1:%d%s" % (port, path)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=duration + 60)
    line = next((l for l in p.stdout.splitlines() if l.startswith("WRK ")), None)
    if p.returncode != 0 or line is None:
        raise BenchError("wrk failed (%d): %s %s" % (p.returncode, p.stdout[-2000:], p.stderr[-2000:]))
    v = {k: int(x) for k, x in (kv.split("=") for kv in line.split()[1:])}
    if v["requests"] == 0:
        raise BenchError("wrk made no requests:\n" + p.stdout)
    socket_errors = v["connect"] + v["read"] + v["write"] + v["timeout"]
    return {"requests": v["requests"], "seconds": v["duration_us"] / 1e6, "p50_ms": v["p50_us"] / 1e3,
            "p99_ms": v["p99_us"] / 1e3, "non2xx": v["status"], "socket_errors": socket_errors}


def median(values):
    v = sorted(values)
    n = len(v)
    return v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2


def percentile(sorted_values, q):
    """Nearest rank: the smallest value with at least q% of the samples at or below it (p99 of 100
    samples is the second highest).  Until 2026-12-07 this rounded q% of n + 0.5 half to even, which
    is one rank too high when q% of n is whole: p99 of 100 was the maximum."""
    if not sorted_values:
        return 0.0
    k = min(len(sorted_values) - 1, max(0, math.ceil(q * len(sorted_values) / 100.0 - 1e-9) - 1))
    return sorted_values[k]


def run_h2load(tmp, port, token, body, connections, streams, threads, duration):
    body_file = os.path.join(tmp, "body.json")
    with open(body_file, "w") as f:
        f.write(body)
    log_file = os.path.join(tmp, "h2load-%d.tsv" % os.getpid())
    cmd = ["h2load", "-D", str(duration), "-c", str(connections), "-m", str(streams), "-t",
           str(min(threads, connections)), "-d", body_file, "-H", "content-type: application/json",
           "--log-file", log_file]
    if token:
        cmd += ["-H", "authorization: Bearer " + token]
    cmd.append("https://127.0.0.1:%d/api/v2/execute" % port)
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=duration + 60)
    out = p.stdout
    if p.returncode != 0:
        raise BenchError("h2load failed (%d): %s %s" % (p.returncode, out[-2000:], p.stderr[-2000:]))
    if "Application protocol: h2" not in out:
        raise BenchError("h2load did not negotiate h2:\n" + out)
    finished = next((l for l in out.splitlines() if l.startswith("finished in")), "")
    reqs = next((l for l in out.splitlines() if l.startswith("requests:")), "")
    codes = next((l for l in out.splitlines() if l.startswith("status codes:")), "")
    try:
        seconds = float(finished.split()[2].rstrip("s,"))
        r = reqs.split()
        done, errored, timeout = int(r[5]), int(r[11]), int(r[13])
        c = codes.split()
        n2xx = int(c[2])
        non2xx = int(c[4]) + int(c[6]) + int(c[8])
    except (IndexError, ValueError):
        raise BenchError("cannot parse h2load output:\n" + out)
    lat = []
    with open(log_file) as f:
        for row in f:
            cols = row.split("\t")
            if len(cols) >= 3:
                lat.append(int(cols[2]))
    os.unlink(log_file)
    lat.sort()
    if done == 0:
        raise BenchError("h2load made no requests:\n" + out)
    # h2load counts non-2xx responses as "failed" as well; socket-level trouble is "errored"/"timeout"
    return {"requests": n2xx + non2xx, "seconds": seconds, "p50_ms": percentile(lat, 50) / 1e3,
            "p99_ms": percentile(lat, 99) / 1e3, "non2xx": non2xx, "socket_errors": errored + timeout + (done - n2xx - non2xx)}


# ---- hpack: what one HTTP/2 header block costs the gateway -------------------

HPACK_GOAL = 10.0


def hpack_bench(stack, pid, amplified_connections, plain_requests):
    """CPU microseconds per request of the plain, at_limit and amplified requests (see the
    module docstring), each measured around its requests only."""
    import test_gateway_robustness as rob  # the e2e tests' HTTP/2 client and blocks

    def ready(n):
        return rob.h2_ready(stack, n)

    def measure(conns, blocks_per_conn, block, answered, end=False):
        cpu0 = cpu_seconds(pid)
        pending = []
        for c in conns:
            sids = []
            for _ in range(blocks_per_conn):
                sids.append(c.new_stream())
                c.send(rob.header_frames(sids[-1], block))
            # at most 100 streams at once per connection (h2o's cap): answer the batch
            c.wait(sids, timeout=60)
            pending += [(c, sid) for sid in sids]
            if end:  # WINDOW_UPDATE of 0 on the connection: h2o's PROTOCOL_ERROR, GOAWAY and close
                c.send(rob.frame(rob.WINDOW_UPDATE, 0, 0, b"\0\0\0\0"))
        for c in conns:
            if end and not c.wait_closed(60):
                raise BenchError("hpack: the gateway did not end a connection")
        cpu = cpu_seconds(pid) - cpu0
        for c, sid in pending:
            st = c.streams[sid]
            if answered and st["status"] != 401:
                raise BenchError("hpack: expected 401, got %r" % (st,))
            if not answered and st["status"] is None and not c.closed and c.goaway is None:
                raise BenchError("hpack: an amplified block was neither refused nor answered: %r" % (st,))
            if not answered and st["status"] is not None:
                res["unbounded"] = True  # answered: this gateway decoded it (no guard)
        for c in conns:
            c.close()
        return cpu * 1e6 / len(pending)

    def handshakes(n):
        cpu0 = cpu_seconds(pid)
        conns = ready(n)
        cpu = cpu_seconds(pid) - cpu0
        for c in conns:
            c.close()
        return cpu * 1e6 / n

    plain_block = rob.header_block("GET", "/api/v2/runtimes")
    at_limit = plain_block + rob.hpack_indexed_literal(b"x-a", b"a" * 600) + bytes([0x80 | 62]) * 95
    amplified = rob.amplified_block()
    per_conn = 100
    res = {"unbounded": False}
    res["plain"] = measure(ready(max(1, plain_requests // per_conn)), per_conn, plain_block, True)
    res["plain_close"] = measure(ready(amplified_connections), 1, plain_block, True, end=True)
    res["at_limit"] = measure(ready(max(1, plain_requests // per_conn // 10)), per_conn, at_limit, True)
    res["amplified"] = measure(ready(amplified_connections), 1, amplified, False)
    res["handshake"] = handshakes(amplified_connections)
    return res


# ---- idle: memory per idle TLS connection ------------------------------------

IDLE_GOAL_KIB = 8.0


def rss_kib(pid):
    """VmRSS of a process, in KiB."""
    with open("/proc/%d/status" % pid) as f:
        return int(next(l for l in f if l.startswith("VmRSS:")).split()[1])


def idle_h1(port, ca, path, token, requests=1):
    """One TLS connection (ALPN http/1.1) that has had `requests` requests answered: the
    socket, left open.  Raises BenchError unless every response is a 200."""
    ctx = ssl.create_default_context(cafile=ca)
    ctx.set_alpn_protocols(["http/1.1"])
    sock = ctx.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=30), server_hostname="localhost")
    for _ in range(requests):
        h1_get(sock, path, token)
    return sock


def h1_get(sock, path, token):
    auth = "Authorization: Bearer %s\r\n" % token if token else ""
    sock.sendall(("GET %s HTTP/1.1\r\nHost: localhost\r\n%s\r\n" % (path, auth)).encode())
    buf = b""
    while b"\r\n\r\n" not in buf:
        chunk = sock.recv(65536)
        if not chunk:
            raise BenchError("idle h1: the server closed the connection before answering")
        buf += chunk
    head, _, rest = buf.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    length = next((int(l.split(":", 1)[1]) for l in lines if l.lower().startswith("content-length:")), None)
    if not lines[0].startswith("HTTP/1.1 200") or length is None:
        raise BenchError("idle h1: unexpected response %r" % head[:200])
    while len(rest) < length:
        chunk = sock.recv(65536)
        if not chunk:
            raise BenchError("idle h1: the server closed the connection mid-response")
        rest += chunk
    if len(rest) != length:
        raise BenchError("idle h1: more than one response")


def idle_h2(port, ca, path, token, requests=1):
    """As idle_h1, over HTTP/2 (ALPN h2): preface, SETTINGS both ways, `requests` GETs."""
    import test_gateway_robustness as rob  # the e2e tests' HTTP/2 client
    ctx = ssl.create_default_context(cafile=ca)
    ctx.set_alpn_protocols(["h2"])
    c = rob.H2(port, ctx, timeout=30)
    for _ in range(requests):
        st = c.get(path, headers=[("authorization", "Bearer " + token)] if token else [], timeout=30)
        if st["status"] != 200 or not st["done"]:
            raise BenchError("idle h2: unexpected response %r" % (st,))
    return c


def idle_rss(pid, opener, n, warmup):
    """KiB of VmRSS per idle connection: n connections opened (each with one request
    answered) on top of `warmup` opened and closed first, so that one-time allocations
    (per-thread caches, the first TLS handshake's tables) are not counted.  Returns
    (rss before KiB, rss after KiB, KiB per connection, KiB per connection over the
    second half only)."""
    for c in [opener() for _ in range(warmup)]:
        c.close()
    time.sleep(0.5)
    before = rss_kib(pid)
    conns = []
    try:
        for i in range(n):
            conns.append(opener())
            if i + 1 == n // 2:
                time.sleep(0.2)
                half = rss_kib(pid)
        time.sleep(1.0)  # idle: whatever the server frees after a response is freed by now
        after = rss_kib(pid)
        for c in conns:  # all still open (a closed one would not count)
            sock = getattr(c, "sock", c)
            sock.setblocking(False)
            try:
                if sock.recv(1) == b"":
                    raise BenchError("idle: the server closed an idle connection during the measurement")
            except (ssl.SSLWantReadError, BlockingIOError):
                pass
            sock.setblocking(True)
    finally:
        for c in conns:
            c.close()
    return before, after, (after - before) / n, (after - half) / (n - n // 2)


def raise_nofile(n):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = min(hard, max(soft, 4 * n + 1024))
    if want < 2 * n + 256:
        raise BenchError("RLIMIT_NOFILE hard limit %d is too low for %d connections" % (hard, n))
    resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))


def idle_bench(stack, raw_bin, workers, n, protocols, requests):
    """Per protocol, on a fresh gateway and a fresh raw_h2o (a heap that served
    earlier connections would hide the growth): KiB per idle TLS connection."""
    import moat_harness  # sys.path and MOAT_BUILD_DIR are set by main()
    res = {}
    token = stack.tokens["bench"]
    for proto in protocols:
        opener = idle_h1 if proto == "h1" else idle_h2
        stack.gateway.terminate()
        stack.gateway.wait(timeout=30)
        stack.gateway_log.close()
        stack.start_gateway()
        raw = RawH2o(raw_bin, stack.certs, workers, moat_harness.free_port())
        try:
            for name, port, pid, path, tok in (("gateway", stack.port, stack.gateway.pid, "/api/v2/runtimes", token),
                                               ("raw", raw.port, raw.proc.pid, "/", None)):
                r = idle_rss(pid, lambda: opener(port, stack.ca, path, tok, requests), n, max(10, n // 50))
                res[(name, proto)] = r
                log("  idle  %-7s %s: VmRSS %.1f MiB -> %.1f MiB with %d idle TLS connections: %.2f KiB each"
                    " (second half alone: %.2f KiB each)" % (name, proto, r[0] / 1024, r[1] / 1024, n, r[2], r[3]))
        finally:
            raw.stop()
    return res


def report_idle(idle, n, requests):
    if idle is None:
        return
    log("")
    log("| idle TLS connections (%d, %d request%s each) | proto | VmRSS before MiB | after MiB | KiB per connection | vs raw h2o |"
        % (n, requests, "" if requests == 1 else "s"))
    log("|---|---|---|---|---|---|")
    misses = []
    for (name, proto), r in sorted(idle.items()):
        base = idle.get(("raw", proto))
        vs = "%.2fx" % (r[2] / base[2]) if name == "gateway" and base and base[2] > 0 else "-"
        log("| %s | %s | %.1f | %.1f | %.2f | %s |" % (name, proto, r[0] / 1024, r[1] / 1024, r[2], vs))
        if name == "gateway" and r[2] > IDLE_GOAL_KIB:
            misses.append("%s %.2f KiB" % (proto, r[2]))
    log("bench_gateway: memory per idle TLS connection %s the %.0f KiB goal%s"
        % ("misses" if misses else "meets", IDLE_GOAL_KIB, (": " + ", ".join(misses)) if misses else ""))


# ---- the benchmark ---------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build-dir", default=os.environ.get("MOAT_BUILD_DIR", os.path.join(SOURCE, "build")))
    ap.add_argument("--duration", type=int, default=10, help="seconds per measurement (default 10)")
    ap.add_argument("--connections", type=int, default=64, help="connections for raw/401/429 (default 64)")
    ap.add_argument("--streams", type=int, default=8, help="HTTP/2 streams per connection (default 8)")
    ap.add_argument("--exec-connections", type=int, default=8, help="connections for exec (default 8)")
    ap.add_argument("--threads", type=int, default=2, help="load generator threads (default 2)")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds of every case (default 3)")
    ap.add_argument("--cases", default="idle,raw,rawkey,401,429,exec,hpack", help="comma-separated subset")
    ap.add_argument("--idle-connections", type=int, default=1000,
                    help="idle: TLS connections held open at once (default 1000)")
    ap.add_argument("--idle-requests", type=int, default=1,
                    help="idle: requests answered on each connection before it idles (default 1)")
    ap.add_argument("--hpack-connections", type=int, default=500,
                    help="hpack: amplified blocks, one connection each (default 500; plain: 20x as many requests)")
    ap.add_argument("--protocols", default="h1,h2", help="h1 (wrk), h2 (h2load) or both")
    ap.add_argument("--smoke", action="store_true", help="short run: check that everything works")
    ap.add_argument("--hold", action="store_true", help="keep the servers running after the run (for perf)")
    args = ap.parse_args()

    # SIGINT/SIGTERM (also when started in the background, where SIGINT is
    # ignored) unwind through the finally below, which stops every server.
    def interrupted(signum, frame):
        raise KeyboardInterrupt
    signal.signal(signal.SIGINT, interrupted)
    signal.signal(signal.SIGTERM, interrupted)

    build = os.path.abspath(args.build_dir)
    os.environ["MOAT_BUILD_DIR"] = build
    sys.path.insert(0, os.path.join(SOURCE, "tests", "e2e"))
    import moat_harness  # noqa: E402  (reads MOAT_BUILD_DIR at import)

    raw_bin = os.path.join(build, "tests", "bench", "raw_h2o")
    all_cases = args.cases.split(",")
    cases = [c for c in all_cases if c not in ("hpack", "idle")]  # the load cases
    for tool in ("wrk", "h2load") if cases else ():
        if shutil.which(tool) is None:
            raise BenchError("%s not found (install nghttp2-client and wrk: .ci/install-deps)" % tool)
    for b in ((raw_bin,) if cases or "idle" in all_cases else ()) + (moat_harness.BACKEND, moat_harness.GATEWAY, moat_harness.MOATCTL):
        if not os.access(b, os.X_OK):
            raise BenchError("%s not built" % b)
    if os.geteuid() != 0:
        raise BenchError("run as root (the backend runs boxes)")
    protocols = args.protocols.split(",")
    body = json.dumps(EXEC_BODY)
    bench_extra = "rate: {per_second: 100000, burst: 100000}\nmax_in_flight: 1000\ncpu_seconds_per_minute: 1000000\n"
    limited_extra = "rate: {per_second: 0.001, burst: 1}\n"
    # hpack opens its connections from one address
    stack = moat_harness.Stack(tenants=[("bench", bench_extra, ""), ("limited", limited_extra, "")], audit=False,
                               extra_config="max_connections_per_address: 100000\nmax_connections: 100000\n")
    workers = 2  # moat_harness.Stack writes "workers: 2"
    raw = None
    results = {}
    hpack = None
    idle = None
    n_idle = 100 if args.smoke else args.idle_connections
    if "idle" in all_cases:
        raise_nofile(n_idle)  # the gateway and raw_h2o inherit it
    try:
        stack.start()
        if "idle" in all_cases:
            idle = idle_bench(stack, raw_bin, workers, n_idle, protocols, args.idle_requests)
        if "hpack" in all_cases:
            n = 50 if args.smoke else args.hpack_connections
            hpack = hpack_bench(stack, stack.gateway.pid, n, 20 * n)
        if not cases:
            report_idle(idle, n_idle, args.idle_requests)
            return report_hpack(hpack)
        raw = RawH2o(raw_bin, stack.certs, workers, moat_harness.free_port())
        tmp = stack.tmp
        servers = {"raw": (raw.port, raw.proc.pid, None), "rawkey": (raw.port, raw.proc.pid, stack.tokens["limited"]),
                   "401": (stack.port, stack.gateway.pid, None),
                   "429": (stack.port, stack.gateway.pid, stack.tokens["limited"]),
                   "exec": (stack.port, stack.gateway.pid, stack.tokens["bench"])}

        # Each case answers as expected before it is measured.
        hdr = {"Content-Type": "application/json"}
        st, _ = https_request(raw.port, stack.ca, "POST", "/api/v2/execute", body, hdr)
        if st != 200:
            raise BenchError("raw_h2o answered %d" % st)
        st, _ = https_request(stack.port, stack.ca, "POST", "/api/v2/execute", body, hdr)
        if st != 401:
            raise BenchError("no token: gateway answered %d, want 401" % st)
        lim = dict(hdr, Authorization="Bearer " + stack.tokens["limited"])
        st, data = https_request(stack.port, stack.ca, "POST", "/api/v2/execute", body, lim)
        if st != 200:
            raise BenchError("limited tenant, first request: %d %r, want 200" % (st, data))
        st, _ = https_request(stack.port, stack.ca, "POST", "/api/v2/execute", body, lim)
        if st != 429:
            raise BenchError("limited tenant, second request: %d, want 429" % st)
        ok = dict(hdr, Authorization="Bearer " + stack.tokens["bench"])
        st, data = https_request(stack.port, stack.ca, "POST", "/api/v2/execute", body, ok)
        if st != 200 or not isinstance(data, dict) or data.get("run", {}).get("stdout") != "1\n":
            raise BenchError("execute print(1): %d %r" % (st, data))

        log("load average at the start: %s" % open("/proc/loadavg").read().strip())
        log("bench_gateway: %d s per case, %d connections (exec: %d), h2 %d streams/connection, "
            "%d server threads, %d load generator threads" % (args.duration, args.connections, args.exec_connections,
                                                              args.streams, workers, args.threads))
        # Rounds interleave the series (raw, 401, 429, exec, raw, ...) so that
        # drift in machine load hits all of them alike; ratios are taken within
        # a round, and the medians over rounds are reported.
        for rnd in range(args.rounds):
            for case in cases:
                port, pid, token = servers[case]
                conns = args.exec_connections if case == "exec" else args.connections
                streams = 1 if case == "exec" else args.streams
                for proto in protocols:
                    cpu0 = cpu_seconds(pid)
                    if proto == "h1":
                        r = run_wrk(tmp, port, token, body, conns, args.threads, args.duration)
                    else:
                        r = run_h2load(tmp, port, token, body, conns, streams, args.threads, args.duration)
                    r["cpu_us"] = (cpu_seconds(pid) - cpu0) * 1e6 / r["requests"]
                    r["rps"] = r["requests"] / r["seconds"]
                    want_non2xx = r["requests"] if case in ("401", "429") else 0
                    if r["socket_errors"] or r["non2xx"] != want_non2xx:
                        raise BenchError("%s %s: %d of %d responses with an unexpected status, %d socket errors"
                                         % (case, proto, abs(r["non2xx"] - want_non2xx), r["requests"],
                                            r["socket_errors"]))
                    results.setdefault((case, proto), []).append(r)
                    log("  round %d  %-5s %-2s %9.0f req/s  p50 %7.2f ms  p99 %7.2f ms  server CPU %6.1f us/req  (%d requests)"
                        % (rnd + 1, case, proto, r["rps"], r["p50_ms"], r["p99_ms"], r["cpu_us"], r["requests"]))
        # The limiter must still be refusing, and the gateway must still be up.
        st, _ = https_request(stack.port, stack.ca, "POST", "/api/v2/execute", body, lim)
        if st != 429:
            raise BenchError("limited tenant after the run: %d, want 429" % st)
        if args.hold:
            log("holding: raw_h2o pid %d port %d, gateway pid %d port %d, tokens %s; Ctrl-C to stop"
                % (raw.proc.pid, raw.port, stack.gateway.pid, stack.port, json.dumps(stack.tokens)))
            try:
                signal.pause()
            except KeyboardInterrupt:
                pass
    finally:
        if raw is not None:
            raw.stop()
        stack.stop()

    log("")
    log("load average at the end: %s" % open("/proc/loadavg").read().strip())
    log("")
    log("| case | proto | req/s | p50 ms | p99 ms | server CPU us/req | ratio req/s vs baseline | ratio CPU/req baseline/case |")
    log("|---|---|---|---|---|---|---|---|")
    below = []
    baseline_of = {"401": "raw", "429": "rawkey" if "rawkey" in cases else "raw", "rawkey": "raw"}
    notes = []
    for case in cases:
        for proto in protocols:
            rs = results[(case, proto)]
            med = {k: median([r[k] for r in rs]) for k in ("rps", "p50_ms", "p99_ms", "cpu_us")}
            base = results.get((baseline_of.get(case, ""), proto))
            ratios = "- | -"  # raw is the baseline; exec runs a box per request: no like-for-like baseline
            if base:
                ratio = median([r["rps"] / b["rps"] for r, b in zip(rs, base)])
                cpu_ratio = median([b["cpu_us"] / r["cpu_us"] for r, b in zip(rs, base)])
                ratios = "%.2fx vs %s | %.2fx" % (ratio, baseline_of[case], cpu_ratio)
                if case in ("401", "429") and ratio < GOAL:
                    below.append("%s/%s %.2fx" % (case, proto, ratio))
                plain = results.get(("raw", proto))
                if case == "429" and baseline_of[case] != "raw" and plain:
                    notes.append("429/%s against plain raw (no Authorization header): %.2fx"
                                 % (proto, median([r["rps"] / b["rps"] for r, b in zip(rs, plain)])))
            log("| %s | %s | %.0f | %.2f | %.2f | %.1f | %s |"
                % (case, proto, med["rps"], med["p50_ms"], med["p99_ms"], med["cpu_us"], ratios))
    for n in notes:
        log(n)
    if args.rounds > 1:
        log("(medians over %d interleaved rounds; ratios are taken within each round)" % args.rounds)
    report_idle(idle, n_idle, args.idle_requests)
    report_hpack(hpack)
    if args.smoke:
        log("bench_gateway: smoke run OK (figures of a %d s run mean nothing)" % args.duration)
    elif below:
        log("bench_gateway: deny path below the %.2fx goal: %s" % (GOAL, ", ".join(below)))
    elif "raw" in cases and ("401" in cases or "429" in cases):
        log("bench_gateway: deny path meets the %.2fx goal" % GOAL)
    return 0


def report_hpack(hpack):
    if hpack is None:
        return 0
    def ratio(k, base):
        return hpack[k] / hpack[base] if hpack[base] > 0 else float("inf")

    log("")
    log("| hpack request | server CPU us/req | vs plain | vs plain_close |")
    log("|---|---|---|---|")
    for k in ("plain", "plain_close", "at_limit", "amplified"):
        log("| %s | %.1f | %.1fx | %.2fx |" % (k + (" (answered: no bound)" if k == "amplified" and hpack["unbounded"] else ""),
                                                hpack[k], ratio(k, "plain"), ratio(k, "plain_close")))
    log("| (a TLS handshake and preface, for scale) | %.1f | %.1fx | %.2fx |"
        % (hpack["handshake"], ratio("handshake", "plain"), ratio("handshake", "plain_close")))
    log("bench_gateway: amplified header block %s the %.0fx goal (%.2fx a plain 401 with its connection's teardown)"
        % ("meets" if ratio("amplified", "plain_close") <= HPACK_GOAL else "misses", HPACK_GOAL,
           ratio("amplified", "plain_close")))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BenchError as e:
        print("bench_gateway: error: %s" % e, file=sys.stderr)
        sys.exit(1)
