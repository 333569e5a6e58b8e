#!/usr/bin/env python3
"""bench_redis_slow - does a slow Redis stall unrelated requests on the same gateway worker?

    /usr/bin/python3 tests/bench/bench_redis_slow.py [--build-dir build] [--duration 10] [--rounds 3]
        [--delay-ms 200] [--connections 32] [--probe-gap-ms 2] [--smoke]

Run as root (the backend runs boxes; the gateway drops to the `moat` user).
The goal (from the issue): "A slow Redis must not stall unrelated requests
on that worker (measure it: p99 of /healthz and of a 401 while Redis
answers in 200 ms)".

It starts, on 127.0.0.1: a redis-server on a Unix socket in a temporary
directory (no persistence), a delaying proxy in front of it (this file run
with --proxy, in a process of its own so that it never shares the GIL with
the probe), one moat-backend, and one moat-gateway with `workers: 1` (one
worker thread: every request below lands on the same loop) and
`limiter: store: redis` on the proxy's socket, timeout_ms 1000 (a 200 ms
answer is slow, not a timeout).  The proxy forwards bytes both ways and
holds every chunk from Redis to the gateway for --delay-ms (per connection,
in order: a queue of release times), so each limiter decision (one EVALSHA
on the worker's asynchronous connection) is answered that much later; its
delay is changed between cases over the proxy's stdin, the connections
stay up.

In each case, for --duration seconds:
  load     wrk, --connections keep-alive connections, GET /api/v2/runtimes
           with tenant "load"'s key (a rate nobody reaches): each request
           is one limiter decision in Redis, then a backend query; started
           1 s before the probe and ended 1 s after it.
  probe    one client, sequential requests over two keep-alive TLS
           connections, alternating: GET /healthz (no key; never admitted)
           and GET /api/v2/runtimes with a well-formed key the gateway does
           not know (401; the unauthenticated limiter is in memory), with
           --probe-gap-ms between requests.
Cases, in interleaved rounds: base (delay 0: the same proxy, answering at
once) and slow (delay --delay-ms).  It prints p50/p99 of healthz and 401 in
each case, the slow/base ratios of the p99s (taken within each round,
medians over rounds), and the load's requests, requests/s and p50/p99 (in
the slow case their p50 must be >= the delay, else Redis was not slow and
nothing was measured: exit 1).  A probe p99 at or above half the delay in
the slow case is reported as a stall (the probe waited on Redis); that is a
finding, not an error.

Note: base is a closed loop at full speed (the worker is busy with the
load's requests), slow is the same connections each waiting out the delay
(far fewer requests/s): the slow case's probes compete with less work, so
a ratio below 1 is expected when nothing waits on Redis.

--smoke: 2 s, one round (unless given): checks that everything works
(figures of a smoke run mean nothing).  Exit status: 0 when every case ran
and every response had its expected status (a smoke run allows up to 1%
of the load answered otherwise); 1 on any error.
"""

import argparse
import asyncio
import http.client
import os
import shutil
import signal
import ssl
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
from bench_gateway import BenchError, log, median, percentile, run_wrk, start_redis_bench  # noqa: E402

CASES = ("base", "slow")
LOAD_PATH = "/api/v2/runtimes"


# ---- the delaying proxy (its own process: bench_redis_slow.py --proxy LISTEN UPSTREAM) ----

def proxy_main(listen, upstream):
    """Unix socket listen -> Unix socket upstream; chunks from upstream held for the current
    delay, in order.  stdin: one delay in ms a line, each acknowledged on stdout ("delay N")."""
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    state = {"delay": 0.0}

    async def handle(creader, cwriter):
        try:
            ureader, uwriter = await asyncio.open_unix_connection(upstream)
        except OSError:
            cwriter.close()
            return
        queue = asyncio.Queue()

        async def up():  # gateway -> Redis, at once
            try:
                while True:
                    data = await creader.read(65536)
                    if not data:
                        break
                    uwriter.write(data)
                    await uwriter.drain()
            except (OSError, ConnectionError):
                pass
            finally:
                uwriter.close()

        async def down_read():  # Redis -> queue, each chunk with its release time
            try:
                while True:
                    data = await ureader.read(65536)
                    if not data:
                        break
                    queue.put_nowait((loop.time() + state["delay"], data))
            except (OSError, ConnectionError):
                pass
            finally:
                queue.put_nowait((0, None))

        async def down_write():  # queue -> gateway, in order, each at its time
            try:
                while True:
                    at, data = await queue.get()
                    if data is None:
                        break
                    wait = at - loop.time()
                    if wait > 0:
                        await asyncio.sleep(wait)
                    cwriter.write(data)
                    await cwriter.drain()
            except (OSError, ConnectionError):
                pass
            finally:
                cwriter.close()

        await asyncio.gather(up(), down_read(), down_write())

    def control():
        for line in sys.stdin:
            ms = float(line.strip())
            loop.call_soon_threadsafe(state.__setitem__, "delay", ms / 1000.0)
            print("delay %g" % ms, flush=True)
        loop.call_soon_threadsafe(loop.stop)  # stdin closed: the bench is gone

    server = loop.run_until_complete(asyncio.start_unix_server(handle, path=listen))
    os.chmod(listen, 0o777)  # the gateway connects as `moat`
    print("ready", flush=True)
    threading.Thread(target=control, daemon=True).start()
    try:
        loop.run_forever()
    finally:
        server.close()


class Proxy:
    def __init__(self, listen, upstream):
        self.socket = listen
        self.proc = subprocess.Popen([sys.executable, "-B", os.path.abspath(__file__), "--proxy", listen, upstream],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        if self.proc.stdout.readline().strip() != "ready":
            raise BenchError("the delaying proxy did not start")

    def set_delay(self, ms):
        self.proc.stdin.write("%g\n" % ms)
        self.proc.stdin.flush()
        if self.proc.stdout.readline().strip() != "delay %g" % ms:
            raise BenchError("the delaying proxy did not take delay %g ms" % ms)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        for f in (self.proc.stdin, self.proc.stdout):
            try:
                f.close()
            except OSError:
                pass


# ---- the probe -------------------------------------------------------------

class Probe:
    """Sequential requests on keep-alive TLS connections, one per kind; latencies in ms."""

    def __init__(self, port, ca, bad_token):
        self.port, self.bad_token = port, bad_token
        self.ctx = ssl.create_default_context(cafile=ca)
        self.ctx.set_alpn_protocols(["http/1.1"])
        self.conns = {}
        self.reconnects = 0

    def one(self, kind):
        path, headers, want = {"healthz": ("/healthz", {}, 200),
                               "401": (LOAD_PATH, {"Authorization": "Bearer " + self.bad_token}, 401)}[kind]
        conn = self.conns.get(kind)
        if conn is None:
            conn = self.conns[kind] = http.client.HTTPSConnection("127.0.0.1", self.port, context=self.ctx, timeout=30)
            conn.connect()  # the handshake is not part of a request's latency
        t0 = time.perf_counter()
        conn.request("GET", path, headers=headers)
        resp = conn.getresponse()
        resp.read()
        ms = (time.perf_counter() - t0) * 1e3
        if resp.status != want:
            raise BenchError("probe %s: status %d, want %d" % (kind, resp.status, want))
        if resp.will_close:
            conn.close()
            del self.conns[kind]
            self.reconnects += 1
        return ms

    def run(self, seconds, gap_ms):
        lat = {"healthz": [], "401": []}
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            for kind in ("healthz", "401"):
                lat[kind].append(self.one(kind))
                if gap_ms > 0:
                    time.sleep(gap_ms / 1e3)
        return lat

    def close(self):
        for c in self.conns.values():
            c.close()
        self.conns = {}


def kill_wrk(moat_harness):
    """A wrk still running (the bench interrupted mid-case: run_wrk waits in its thread): killed by pid."""
    for pid in moat_harness.descendants(os.getpid()):
        try:
            with open("/proc/%d/comm" % pid) as f:
                if f.read().strip() == "wrk":
                    os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def measure(stack, gw, probe, token, args, delay_ms, smoke):
    """One case: the load for duration + 2 s, the probe for duration in its middle."""
    box = {}

    def load():
        try:
            box["wrk"] = run_wrk(stack.tmp, gw.port, token, None, args.connections, 1, args.duration + 2,
                                 path=LOAD_PATH)
        except BaseException as e:  # noqa: B036  (handed to the main thread)
            box["error"] = e

    t = threading.Thread(target=load, daemon=True)
    t.start()
    time.sleep(1)
    try:
        lat = probe.run(args.duration, args.probe_gap_ms)
    finally:
        t.join(args.duration + 90)
    if "error" in box:
        raise box["error"]
    if "wrk" not in box:
        raise BenchError("wrk did not finish")
    w = box["wrk"]
    allowed = w["requests"] // 100 if smoke else 0
    if w["socket_errors"] or w["non2xx"] > allowed:
        raise BenchError("delay %g ms: %d of %d load responses not 200, %d socket errors (gateway log: %s)"
                         % (delay_ms, w["non2xx"], w["requests"], w["socket_errors"], gw.log_text()[-1500:]))
    r = {"load_requests": w["requests"], "load_rps": w["requests"] / w["seconds"], "load_p50": w["p50_ms"],
         "load_p99": w["p99_ms"]}
    for kind, v in lat.items():
        v.sort()
        r[kind + "_n"] = len(v)
        r[kind + "_p50"] = percentile(v, 50)
        r[kind + "_p99"] = percentile(v, 99)
        r[kind + "_max"] = v[-1] if v else 0.0
    return r


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build-dir", default=os.environ.get("MOAT_BUILD_DIR", os.path.join(SOURCE, "build")))
    ap.add_argument("--duration", type=int, default=None, help="seconds of probing per case (default 10; smoke 2)")
    ap.add_argument("--rounds", type=int, default=None, help="interleaved rounds (default 3; smoke 1)")
    ap.add_argument("--delay-ms", type=float, default=200.0, help="Redis' answers held this long (default 200)")
    ap.add_argument("--connections", type=int, default=32, help="load connections (default 32)")
    ap.add_argument("--probe-gap-ms", type=float, default=2.0, help="pause between probe requests (default 2)")
    ap.add_argument("--smoke", action="store_true", help="short run: check that everything works")
    ap.add_argument("--proxy", nargs=2, metavar=("LISTEN", "UPSTREAM"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.proxy:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # the bench ends it (kill, or its stdin closing)
        proxy_main(*args.proxy)
        return 0
    if args.duration is None:
        args.duration = 2 if args.smoke else 10
    if args.rounds is None:
        args.rounds = 1 if args.smoke else 3

    moat_harness, test_redis_limits = start_redis_bench(args.build_dir)
    # a key of the right form that no tenant has: the probe's 401
    out = subprocess.run([moat_harness.MOATCTL, "key", "new"], check=True, capture_output=True, text=True).stdout
    bad_token = dict(line.split(": ", 1) for line in out.strip().splitlines())["token"]
    tenant = ("rate: {per_second: 100000, burst: 100000}\nmax_in_flight: 1000\n"
              "endpoints: [execute, runtimes]\n")
    stack = moat_harness.Stack(tenants=[("load", tenant, "")], audit=False,
                               extra_config="max_connections_per_address: 100000\nmax_connections: 100000\n")
    redis = test_redis_limits.Redis(stack.tmp)
    proxy = gw = probe = None
    results = {}
    try:
        redis.start()
        proxy = Proxy(os.path.join(stack.tmp, "slow-redis.sock"), redis.socket)
        stack.start_backend()
        lim = ("limiter:\n  store: redis\n  redis: {socket: %s, timeout_ms: 1000, lease_ms: 5000, "
               "prefix: \"moat-bench:\"}\n  on_unavailable: fail_closed\n" % proxy.socket)
        gw = test_redis_limits.Gateway(stack, "gw-slow", lim)
        with open(gw.config) as f:
            text = f.read()
        if "\nworkers: 2\n" not in text:
            raise BenchError("the harness' configuration has no 'workers: 2' line to make 'workers: 1'")
        with open(gw.config, "w") as f:  # keeps root:moat 0640
            f.write(text.replace("\nworkers: 2\n", "\nworkers: 1\n", 1))
        try:
            gw.start()
        except AssertionError as e:
            raise BenchError("%s: %s" % (e, gw.log_text()[-1500:]))
        token = stack.tokens["load"]
        st = gw.request("GET", LOAD_PATH, token=token)[0]
        if st != 200:
            raise BenchError("GET %s with the tenant's key answered %d (gateway log: %s)"
                             % (LOAD_PATH, st, gw.log_text()[-1500:]))
        st = gw.request("GET", LOAD_PATH, token=bad_token)[0]
        if st != 401:
            raise BenchError("GET %s with an unknown key answered %d, want 401" % (LOAD_PATH, st))
        # the proxy is really on the path: one decision takes at least the delay
        proxy.set_delay(args.delay_ms)
        t0 = time.perf_counter()
        st = gw.request("GET", LOAD_PATH, token=token)[0]
        ms = (time.perf_counter() - t0) * 1e3
        proxy.set_delay(0)
        if st != 200 or ms < args.delay_ms:
            raise BenchError("through the delaying proxy: %d in %.1f ms, want 200 in >= %g ms" % (st, ms, args.delay_ms))
        time.sleep(args.delay_ms / 1e3 + 0.2)  # the heartbeats held meanwhile are through
        probe = Probe(gw.port, stack.ca, bad_token)
        log("machine: %d CPUs; load average at the start: %s" % (os.cpu_count(), open("/proc/loadavg").read().strip()))
        log("bench_redis_slow: %d s per case, delay %g ms, %d load connections (wrk, 1 thread), gateway workers: 1, "
            "Redis timeout_ms 1000, probe gap %g ms" % (args.duration, args.delay_ms, args.connections,
                                                        args.probe_gap_ms))
        loads = []
        for rnd in range(args.rounds):
            for case in CASES:
                delay = 0 if case == "base" else args.delay_ms
                proxy.set_delay(delay)
                time.sleep(args.delay_ms / 1e3 + 0.2)  # what the previous case queued is through
                r = measure(stack, gw, probe, token, args, delay, args.smoke)
                loads.append(open("/proc/loadavg").read().strip())
                results.setdefault(case, []).append(r)
                log("  round %d  %-4s  healthz p50 %7.2f p99 %7.2f max %7.2f ms (%d)  401 p50 %7.2f p99 %7.2f "
                    "max %7.2f ms (%d)  load %6d req %8.0f/s p50 %7.2f p99 %7.2f ms  [loadavg %s]"
                    % (rnd + 1, case, r["healthz_p50"], r["healthz_p99"], r["healthz_max"], r["healthz_n"],
                       r["401_p50"], r["401_p99"], r["401_max"], r["401_n"], r["load_requests"], r["load_rps"],
                       r["load_p50"], r["load_p99"], loads[-1]))
        proxy.set_delay(0)
        if probe.reconnects:
            log("(the probe reconnected %d times: the gateway closed a keep-alive connection)" % probe.reconnects)
    finally:
        # a second signal (timeout(1) sends one to the child and one to its group) must not cut
        # the cleanup short; each step runs even if one before it failed
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        steps = [lambda: kill_wrk(moat_harness)]
        if probe is not None:
            steps.append(probe.close)
        if gw is not None and gw.proc is not None:
            steps.append(gw.stop)
        steps.append(stack.stop)  # the backend and the temporary directory (the proxy's socket and Redis' with it)
        if proxy is not None:
            steps.append(proxy.stop)
        if redis.proc is not None:
            steps.append(redis.kill)
        for step in steps:
            try:
                step()
            except Exception as e:  # noqa: BLE001  (the others still run; the first error is the one raised)
                print("bench_redis_slow: cleanup: %s: %r" % (getattr(step, "__qualname__", step), e), file=sys.stderr)
        if os.path.isdir(stack.tmp) and not os.environ.get("MOAT_KEEP_TMP"):
            subprocess.run(["chattr", "-R", "-a", stack.tmp], capture_output=True)
            shutil.rmtree(stack.tmp, ignore_errors=True)

    log("")
    log("load average at the end: %s" % open("/proc/loadavg").read().strip())
    log("")
    log("| case | healthz p50 ms | healthz p99 ms | 401 p50 ms | 401 p99 ms | load requests | load req/s "
        "| load p50 ms | load p99 ms |")
    log("|---|---|---|---|---|---|---|---|---|")
    keys = ("healthz_p50", "healthz_p99", "401_p50", "401_p99", "load_requests", "load_rps", "load_p50", "load_p99")
    med = {}
    for case in CASES:
        med[case] = {k: median([r[k] for r in results[case]]) for k in keys}
        m = med[case]
        log("| %s (%g ms) | %.2f | %.2f | %.2f | %.2f | %d | %.0f | %.2f | %.2f |"
            % (case, 0 if case == "base" else args.delay_ms, m["healthz_p50"], m["healthz_p99"], m["401_p50"],
               m["401_p99"], m["load_requests"], m["load_rps"], m["load_p50"], m["load_p99"]))
    ratios = {k: median([s[k] / b[k] if b[k] > 0 else float("inf") for s, b in zip(results["slow"], results["base"])])
              for k in ("healthz_p99", "401_p99")}
    log("slow/base p99: healthz %.2fx, 401 %.2fx" % (ratios["healthz_p99"], ratios["401_p99"]))
    if args.rounds > 1:
        log("(medians over %d interleaved rounds; ratios are taken within each round)" % args.rounds)

    slow_load = [r["load_p50"] for r in results["slow"]]
    if min(slow_load) < args.delay_ms:
        raise BenchError("the load's p50 in the slow case was %s ms, below the delay of %g ms: Redis was not slow, "
                         "nothing was measured" % (", ".join("%.1f" % x for x in slow_load), args.delay_ms))
    stalled = ["%s p99 %.2f ms" % (k.split("_")[0], med["slow"][k]) for k in ("healthz_p99", "401_p99")
               if med["slow"][k] >= args.delay_ms / 2]
    if args.smoke:
        log("bench_redis_slow: smoke run OK (figures of a %d s run mean nothing)" % args.duration)
    elif stalled:
        log("bench_redis_slow: STALL: with Redis answering in %g ms, %s (>= half the delay): these requests wait "
            "on Redis" % (args.delay_ms, ", ".join(stalled)))
    else:
        log("bench_redis_slow: no stall: with Redis answering in %g ms, healthz p99 %.2f ms and 401 p99 %.2f ms "
            "(load p50 %.1f ms)" % (args.delay_ms, med["slow"]["healthz_p99"], med["slow"]["401_p99"],
                                    med["slow"]["load_p50"]))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BenchError as e:
        print("bench_redis_slow: %s" % e, file=sys.stderr)
        sys.exit(1)
