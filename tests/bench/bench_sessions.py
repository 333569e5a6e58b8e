#!/usr/bin/env python3
"""bench_sessions - live sessions (GET /api/v2/connect) against their baselines, in one run.

    /usr/bin/python3 tests/bench/bench_sessions.py [--build-dir build] [--rounds 3] [--lines 1000]
        [--starts 20] [--idle 200] [--idle-rounds 3] [--open-concurrency 20] [--batch 40]
        [--sessions-warm N] [--audit] [--smoke]

Run as root (the backend runs boxes; the gateway drops to the `moat` user),
with Debian's python3 (python3-websockets: tests/e2e/ws_client.py).  It
starts moat-backend and moat-gateway on 127.0.0.1 with throwaway
certificates, set up as the e2e tests do (tests/e2e/moat_harness.py), with
one tenant "bench" whose ceilings allow hundreds of sessions with long
clocks, and measures, each against a baseline taken in the same run:

  echo   a session running an echo program (each stdin line written back
         to stdout at once): one line sent as a stdin `data` message, the
         time until its stdout `data` event, --lines times in a row; p50 and
         p99.  Baseline: the same program, unboxed, as a child process over
         two plain pipes (/usr/bin/python3.11 -u, what the box runs), driven
         by the same asyncio loop.  Goal: session p50 <= 2 ms on loopback
         (the absolute figure; the ratio is printed for scale).
  start  connect (TCP, TLS, the WebSocket upgrade) + `init` of print(1)
         until the `runtime` event, and until the first stdout `data`
         event; against a batch POST /api/v2/execute of the same program on
         an HTTP/1.1 keep-alive connection (TLS set up beforehand, as a
         client that keeps its connection would).  Samples alternate
         (session, batch, session, ...).  Goal: to runtime <= 1.1x batch.
         "To first output" is reported against the same batch.
  idle   --idle sessions at once, each program blocked in input(), opened
         --open-concurrency at a time, each waited for until its `stage`
         event (the program started).  The VmRSS of the gateway process
         and of the backend process (its session threads included; the
         boxes are processes of their own and are not counted) before and
         after opening them gives the memory per idle session: goal
         <= 1 MiB.  A batch execute's p50 (sequential, keep-alive) with the
         sessions open against the same series just before opening them
         and again after ending them (each program gets its line and exits:
         every session must end with 4999), taken together: goal <= 1.1x.
         Also printed: how long opening took, the CPU and context switches
         of the gateway and backend while the sessions sit idle, their CPU
         per batch execution with and without the sessions, and the
         programs' own RSS (python in the boxes; for scale, not counted).
         The memory goal is judged on the worst round (the first: later
         rounds reuse what the first freed).

Echo and start run in --rounds interleaved rounds (echo session, echo pipe,
start, ...); idle in --idle-rounds rounds (opening hundreds of boxes takes a
while).  Ratios are taken within a round; the medians over rounds are
reported.

The backend gets --sessions (default 256) session slots and 4 batch slots
(-j 4, the harness's), so it needs 4 + sessions box uids: more than the
harness's block of 256 per backend.  Its box uids are therefore a range of
this benchmark's own, 1850000000 + (pid % 4096) * 512 (512 uids; below the
tests' 1900000000 and above bench_box's 1800000000 .. 1801048575).

Exit status: 0 when every case ran and every session and execution gave the
expected output; 1 on any error (a session refused or cut off, a wrong
output, a server not starting).  Missing a goal is reported, not an error.
"""

import argparse
import asyncio
import http.client
import json
import os
import signal
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)

from bench_gateway import BenchError, cpu_seconds, log, median, percentile  # noqa: E402
from bench_audit import child_named, children  # noqa: E402

ECHO = "import sys\nfor l in sys.stdin: sys.stdout.write(l); sys.stdout.flush()\n"
PRINT1 = "print(1)\n"
IDLE = "input()\n"
PIPE_PYTHON = "/usr/bin/python3.11"  # the python manifest's interpreter (PYTHONUNBUFFERED=1 in the box: -u here)
BATCH_BODY = json.dumps({"language": "python", "version": "*", "files": [{"name": "main", "content": PRINT1}]})

GOAL_ECHO_P50_MS = 2.0
GOAL_START = 1.1
GOAL_IDLE_KIB = 1024
GOAL_IDLE_BATCH = 1.1

BENCH_UID_BASE = 1850000000
BENCH_UID_BLOCK = 512
HARNESS_SLOTS = 4  # moat_harness.Stack starts the backend with -j 4


def status_field(pid, key):
    """A number of /proc/PID/status: VmRSS (KiB), Threads, voluntary_ctxt_switches..."""
    with open("/proc/%s/status" % pid) as f:
        for line in f:
            name, _, value = line.partition(":")
            if name == key:
                return int(value.split()[0])
    return 0


def rss_kib(pid):
    return status_field(pid, "VmRSS")


def threads_of(pid):
    return status_field(pid, "Threads")


def ctx_switches(pid):
    """Context switches of all the threads of a process, so far."""
    n = 0
    for t in os.listdir("/proc/%d/task" % pid):
        try:
            n += sum(status_field("%d/task/%s" % (pid, t), k) for k in ("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches"))
        except OSError:
            pass  # a thread that ended
    return n


def quiet(gw_pid, be_pid, below=0.05, window=0.5, timeout=60):
    """Waits until the gateway and backend together use less than `below`
    of a core over `window` seconds (at most `timeout`); returns the seconds waited."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        c0 = cpu_seconds(gw_pid) + cpu_seconds(be_pid)
        time.sleep(window)
        if (cpu_seconds(gw_pid) + cpu_seconds(be_pid) - c0) / window < below:
            break
    return time.monotonic() - t0


def pct(samples, q):
    return percentile(sorted(samples), q)


# ---- batch execute on a keep-alive connection --------------------------------

class Batch:
    """POST /api/v2/execute of print(1) on one HTTP/1.1 keep-alive connection
    over TLS.  The connection is made (and remade, should the gateway have
    closed it) outside the timed part."""

    def __init__(self, stack, token):
        self.stack, self.token = stack, token
        self.conn = None

    def _connect(self):
        self.close()
        ctx = self.stack.ssl_context(alpn=("http/1.1",))
        self.conn = http.client.HTTPSConnection("127.0.0.1", self.stack.port, context=ctx, timeout=120)
        self.conn.connect()

    def close(self):
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    def once(self):
        """One execution; returns its seconds."""
        if self.conn is None or self.conn.sock is None:
            self._connect()
        hdr = {"Content-Type": "application/json", "Authorization": "Bearer " + self.token}
        t0 = time.monotonic()
        try:
            self.conn.request("POST", "/api/v2/execute", body=BATCH_BODY, headers=hdr)
            resp = self.conn.getresponse()
            raw = resp.read()
        except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
            # the gateway closed the idle connection: once more, on a new one, untimed connect
            self._connect()
            t0 = time.monotonic()
            self.conn.request("POST", "/api/v2/execute", body=BATCH_BODY, headers=hdr)
            resp = self.conn.getresponse()
            raw = resp.read()
        dt = time.monotonic() - t0
        try:
            data = json.loads(raw)
        except ValueError:
            data = raw
        if resp.status != 200 or not isinstance(data, dict) or data.get("run", {}).get("stdout") != "1\n":
            raise BenchError("batch execute of print(1): %d %r" % (resp.status, data))
        if resp.getheader("connection", "").lower() == "close":
            self.close()
        return dt

    def series(self, n):
        return [self.once() for _ in range(n)]


# ---- sessions ------------------------------------------------------------------

class Sessions:
    def __init__(self, stack, ws_client, websockets):
        self.stack, self.wc, self.websockets = stack, ws_client, websockets

    async def open(self, code):
        """connect + init; returns (ws, t_start, t_open, runtime event)."""
        t0 = time.monotonic()
        ws = await self.wc.connect(self.stack, ping_interval=None)
        t_open = time.monotonic()
        await ws.send(self.wc.init_message("python", code))
        runtime = await self.wc.recv_event(ws)
        if runtime.get("type") != "runtime":
            await ws.close()
            raise BenchError("session: first event %r, want runtime" % runtime)
        return ws, t0, t_open, runtime

    async def until(self, ws, what, pred):
        try:
            return await self.wc.wait_for_event(ws, pred)
        except self.websockets.ConnectionClosed as e:
            raise BenchError("session closed (%s %s) while waiting for %s" % (e.code, e.reason, what))

    async def finish(self, ws, want_stdout=None):
        """Reads to the close; checks it ended with 4999 (and the stdout, if given)."""
        events, code, reason = await self.wc.events_until_close(ws)
        if code != 4999:
            raise BenchError("session ended with close %s %r, events %r" % (code, reason, events[-3:]))
        if want_stdout is not None and self.wc.stream_text(events) != want_stdout:
            raise BenchError("session stdout %r, want %r" % (self.wc.stream_text(events), want_stdout))
        return events

    # echo --------------------------------------------------------------------

    async def echo(self, lines, warmup):
        ws, _, _, _ = await self.open(ECHO)
        await self.until(ws, "the run stage", lambda e: e["type"] == "stage")
        lat = []
        for i in range(warmup + lines):
            line = "%08d\n" % i
            t0 = time.monotonic()
            await ws.send(json.dumps({"type": "data", "stream": "stdin", "data": line}))
            got = ""
            while not got.endswith("\n"):
                ev, _ = await self.until(ws, "the echo of a line", lambda e: e["type"] in ("data", "exit", "error"))
                if ev["type"] != "data" or ev.get("stream") != "stdout":
                    raise BenchError("echo: %r instead of the line" % ev)
                got += ev["data"]
            dt = time.monotonic() - t0
            if got != line:
                raise BenchError("echo: sent %r, got back %r" % (line, got))
            if i >= warmup:
                lat.append(dt)
        await ws.send(json.dumps({"type": "stdin_close"}))
        await self.finish(ws)
        return lat

    # start ---------------------------------------------------------------------

    async def start(self):
        """connect + init of print(1): (to open, to runtime, to first output) in seconds."""
        ws, t0, t_open, runtime = await self.open(PRINT1)
        first, _ = await self.until(ws, "the first output", lambda e: e["type"] in ("data", "exit", "error"))
        # (unbuffered, print() writes "1" and "\n" apart: they may come as two events)
        if first["type"] != "data" or first.get("stream") != "stdout" or not first.get("data", "").startswith("1"):
            raise BenchError("print(1) session: %r instead of its output" % first)
        rest = await self.finish(ws)
        if first["data"] + self.wc.stream_text(rest) != "1\n":
            raise BenchError("print(1) session: stdout %r" % (first["data"] + self.wc.stream_text(rest)))
        return t_open - t0, runtime["_at"] - t0, first["_at"] - t0

    # idle ----------------------------------------------------------------------

    async def open_idle(self, n, concurrency):
        """n sessions blocked in input(), at most `concurrency` opening at once;
        returns (the sockets, seconds each took to its stage event, seconds in all)."""
        sem = asyncio.Semaphore(concurrency)
        t_all = time.monotonic()

        async def one():
            async with sem:
                ws, t0, _, _ = await self.open(IDLE)
                await self.until(ws, "the run stage", lambda e: e["type"] == "stage")
                return ws, time.monotonic() - t0

        results = await asyncio.gather(*[one() for _ in range(n)], return_exceptions=True)
        opened = [r for r in results if not isinstance(r, BaseException)]
        failed = [r for r in results if isinstance(r, BaseException)]
        if failed:
            await self.close_all([ws for ws, _ in opened])
            raise BenchError("%d of %d idle sessions did not open; first: %r" % (len(failed), n, failed[0]))
        return [ws for ws, _ in opened], [dt for _, dt in opened], time.monotonic() - t_all

    async def end_idle(self, sockets):
        """Each program gets its line, returns from input() and exits: every
        session must end with 4999 (each was alive all along)."""
        async def one(ws):
            await ws.send(json.dumps({"type": "data", "stream": "stdin", "data": "\n"}))
            await self.finish(ws, want_stdout="")

        results = await asyncio.gather(*[one(ws) for ws in sockets], return_exceptions=True)
        failed = [r for r in results if isinstance(r, BaseException)]
        if failed:
            raise BenchError("%d of %d idle sessions did not end well; first: %r" % (len(failed), len(sockets), failed[0]))

    async def close_all(self, sockets):
        await asyncio.gather(*[ws.close() for ws in sockets], return_exceptions=True)


# ---- the cases --------------------------------------------------------------------

async def echo_pipe(lines, warmup):
    p = await asyncio.create_subprocess_exec(PIPE_PYTHON, "-u", "-c", ECHO, stdin=asyncio.subprocess.PIPE,
                                             stdout=asyncio.subprocess.PIPE)
    lat = []
    try:
        for i in range(warmup + lines):
            line = b"%08d\n" % i
            t0 = time.monotonic()
            p.stdin.write(line)
            await p.stdin.drain()
            got = await asyncio.wait_for(p.stdout.readline(), 60)
            dt = time.monotonic() - t0
            if got != line:
                raise BenchError("echo over a pipe: sent %r, got back %r" % (line, got))
            if i >= warmup:
                lat.append(dt)
    finally:
        p.stdin.close()
        await p.wait()
    return lat


def box_programs(tag, moat_harness):
    """Pids of the programs running in the boxes of `tag` (python; not the boxes' own init processes)."""
    out = []
    for pid in moat_harness.box_pids(tag):
        try:
            with open("/proc/%d/cmdline" % pid, "rb") as f:
                if f.read().split(b"\0")[0] == PIPE_PYTHON.encode():
                    out.append(pid)
        except OSError:
            pass
    return out


def box_rss_kib(tag, moat_harness):
    total = 0
    for pid in box_programs(tag, moat_harness):
        try:
            total += rss_kib(pid)
        except OSError:
            pass
    return total


async def run_all(args, stack, moat_harness, ws_client, websockets, pids):
    s = Sessions(stack, ws_client, websockets)
    batch = Batch(stack, stack.tokens["bench"])
    gw_pid, be_pid = pids
    res = {"echo": [], "start": [], "idle": []}
    warm = 10 if not args.smoke else 3

    # everything answers before anything is measured (and warms both paths)
    await s.echo(3, 0)
    await echo_pipe(3, 0)
    await s.start()
    batch.series(2)

    # ---- echo and start, interleaved rounds ----
    for rnd in range(args.rounds):
        sess = await s.echo(args.lines, warm)
        pipe = await echo_pipe(args.lines, warm)
        r = {"s50": pct(sess, 50), "s99": pct(sess, 99), "p50": pct(pipe, 50), "p99": pct(pipe, 99)}
        res["echo"].append(r)
        log("  round %d  echo   session p50 %6.3f ms p99 %6.3f ms | pipe p50 %6.3f ms p99 %6.3f ms  (%d lines)"
            % (rnd + 1, r["s50"] * 1e3, r["s99"] * 1e3, r["p50"] * 1e3, r["p99"] * 1e3, args.lines))

        opened, runtime, first, batched = [], [], [], []
        for _ in range(args.starts):
            o, rt, f = await s.start()
            opened.append(o)
            runtime.append(rt)
            first.append(f)
            batched.append(batch.once())
        r = {"open": median(opened), "runtime": median(runtime), "first": median(first), "batch": median(batched),
             "init_runtime": median([b - a for a, b in zip(opened, runtime)]),
             "init_first": median([b - a for a, b in zip(opened, first)])}
        res["start"].append(r)
        log("  round %d  start  open %6.2f ms  to runtime %6.2f ms  to first output %6.2f ms"
            " (from init: %.2f, %.2f) | batch %6.2f ms  (medians of %d)"
            % (rnd + 1, r["open"] * 1e3, r["runtime"] * 1e3, r["first"] * 1e3, r["init_runtime"] * 1e3,
               r["init_first"] * 1e3, r["batch"] * 1e3, args.starts))

    # ---- idle sessions ----
    # before: a batch series without sessions; open them; RSS; a quiet window
    # (CPU, context switches); the batch series with them open; end them;
    # after: the batch series without them again.  "with" is compared with
    # the before and after series together, so drift in the machine's load
    # over the round hits both sides alike.
    loop = asyncio.get_running_loop()

    def series():
        c0 = cpu_seconds(gw_pid) + cpu_seconds(be_pid)
        lat = batch.series(args.batch)
        return lat, (cpu_seconds(gw_pid) + cpu_seconds(be_pid) - c0) / len(lat)

    for rnd in range(args.idle_rounds):
        quiet(gw_pid, be_pid)
        before, cpu_before = series()
        gw0, be0, th0 = rss_kib(gw_pid), rss_kib(be_pid), threads_of(be_pid)
        sockets, open_s, open_all = await s.open_idle(args.idle, args.open_concurrency)
        try:
            # each program is in input(): nothing moves until we write (once
            # the backend has made whatever boxes it makes ahead)
            quiet(gw_pid, be_pid)
            gw1, be1, th1 = rss_kib(gw_pid), rss_kib(be_pid), threads_of(be_pid)
            prog = box_rss_kib(stack.tag, moat_harness)
            c0, x0 = cpu_seconds(gw_pid) + cpu_seconds(be_pid), ctx_switches(gw_pid) + ctx_switches(be_pid)
            t0 = time.monotonic()
            await asyncio.sleep(args.idle_seconds)
            dt = time.monotonic() - t0
            idle_cpu = (cpu_seconds(gw_pid) + cpu_seconds(be_pid) - c0) / dt
            idle_ctx = (ctx_switches(gw_pid) + ctx_switches(be_pid) - x0) / dt
            with_, cpu_with = await loop.run_in_executor(None, series)
            closed = [ws for ws in sockets if ws.closed]
            if closed:
                raise BenchError("%d idle sessions were closed while idle (first: %s %r)"
                                 % (len(closed), closed[0].close_code, closed[0].close_reason))
            await s.end_idle(sockets)
        finally:
            await s.close_all(sockets)  # on an error; after end_idle, all are closed already
        moat_harness.wait_until(lambda: not box_programs(stack.tag, moat_harness), "the idle sessions' programs to go",
                                timeout=300)
        # the backend discards the used boxes and makes new ones after the
        # programs are gone: "after" starts once it is done with that
        settle = quiet(gw_pid, be_pid)
        after, cpu_after = series()
        n = args.idle
        r = {"gw0": gw0, "be0": be0, "gw1": gw1, "be1": be1, "threads0": th0, "threads1": th1,
             "per_kib": ((gw1 - gw0) + (be1 - be0)) / n, "gw_per": (gw1 - gw0) / n, "be_per": (be1 - be0) / n,
             "prog_per": prog / n, "open_all": open_all, "open50": pct(open_s, 50), "open99": pct(open_s, 99),
             "idle_cpu": idle_cpu, "idle_ctx": idle_ctx, "without": median(before + after), "with": median(with_),
             "before": median(before), "after": median(after),
             "cpu_without": (cpu_before + cpu_after) / 2, "cpu_with": cpu_with}
        r["ratio"] = r["with"] / r["without"]
        res["idle"].append(r)
        log("  round %d  idle   %d sessions opened in %.1f s (each to its stage event: p50 %.0f ms, p99 %.0f ms)"
            % (rnd + 1, n, open_all, r["open50"] * 1e3, r["open99"] * 1e3))
        log("                  RSS gateway %d -> %d KiB, backend %d -> %d KiB (threads %d -> %d): %.1f KiB per session"
            " (gateway %.1f, backend %.1f); the programs %.0f KiB each (not counted)"
            % (gw0, gw1, be0, be1, th0, th1, r["per_kib"], r["gw_per"], r["be_per"], r["prog_per"]))
        log("                  idle: gateway + backend %.2f%% of a core, %.0f context switches/s; after the end,"
            " %.1f s until the backend was quiet" % (idle_cpu * 100, idle_ctx, settle))
        log("                  batch p50 %.2f ms with the sessions open, %.2f ms without (%.2f before, %.2f after):"
            " %.2fx; gateway + backend CPU per execution %.0f us with, %.0f us without"
            % (r["with"] * 1e3, r["without"] * 1e3, r["before"] * 1e3, r["after"] * 1e3, r["ratio"],
               cpu_with * 1e6, r["cpu_without"] * 1e6))
    batch.close()
    return res


def report(args, res):
    missed = []
    log("")
    log("| case | figure | session | baseline | ratio | goal |")
    log("|---|---|---|---|---|---|")
    e = res["echo"]
    s50 = median([r["s50"] for r in e])
    s99 = median([r["s99"] for r in e])
    p50 = median([r["p50"] for r in e])
    p99 = median([r["p99"] for r in e])
    r50 = median([r["s50"] / r["p50"] for r in e])
    r99 = median([r["s99"] / r["p99"] for r in e])
    ok = s50 * 1e3 <= GOAL_ECHO_P50_MS
    log("| echo (%d lines) | p50 | %.3f ms | %.3f ms (pipe) | %.1fx | <= %.0f ms %s |"
        % (args.lines, s50 * 1e3, p50 * 1e3, r50, GOAL_ECHO_P50_MS, "met" if ok else "MISSED"))
    log("| echo | p99 | %.3f ms | %.3f ms (pipe) | %.1fx | - |" % (s99 * 1e3, p99 * 1e3, r99))
    if not ok:
        missed.append("echo p50 %.3f ms > %.0f ms" % (s50 * 1e3, GOAL_ECHO_P50_MS))

    st = res["start"]
    b = median([r["batch"] for r in st])
    rt_ratio = median([r["runtime"] / r["batch"] for r in st])
    first_ratio = median([r["first"] / r["batch"] for r in st])
    open_ratio = median([r["open"] / r["batch"] for r in st])
    ok = rt_ratio <= GOAL_START
    log("| start | connect + upgrade | %.2f ms | %.2f ms (batch) | %.2fx | - |"
        % (median([r["open"] for r in st]) * 1e3, b * 1e3, open_ratio))
    log("| start | to runtime | %.2f ms | %.2f ms (batch) | %.2fx | <= %.1fx %s |"
        % (median([r["runtime"] for r in st]) * 1e3, b * 1e3, rt_ratio, GOAL_START, "met" if ok else "MISSED"))
    log("| start | to first output | %.2f ms | %.2f ms (batch) | %.2fx | (reported) |"
        % (median([r["first"] for r in st]) * 1e3, b * 1e3, first_ratio))
    for k, what in (("init_runtime", "init to runtime (no handshake)"), ("init_first", "init to first output (no handshake)")):
        log("| start | %s | %.2f ms | %.2f ms (batch) | %.2fx | - |"
            % (what, median([r[k] for r in st]) * 1e3, b * 1e3, median([r[k] / r["batch"] for r in st])))
    if not ok:
        missed.append("session start to runtime %.2fx > %.1fx" % (rt_ratio, GOAL_START))

    idle = res["idle"]
    if idle:
        per = max(r["per_kib"] for r in idle)  # the worst round: the first, in a process that never held as many
        ratio = median([r["ratio"] for r in idle])
        ok_mem, ok_batch = per <= GOAL_IDLE_KIB, ratio <= GOAL_IDLE_BATCH
        worst = max(idle, key=lambda r: r["per_kib"])
        log("| idle x%d | gateway + backend RSS per session (worst round) | %.1f KiB (gateway %.1f, backend %.1f) | - | - |"
            " <= %d KiB %s |" % (args.idle, per, worst["gw_per"], worst["be_per"], GOAL_IDLE_KIB, "met" if ok_mem else "MISSED"))
        log("| idle x%d | batch execute p50 | %.2f ms | %.2f ms (no sessions) | %.2fx | <= %.1fx %s |"
            % (args.idle, median([r["with"] for r in idle]) * 1e3, median([r["without"] for r in idle]) * 1e3, ratio,
               GOAL_IDLE_BATCH, "met" if ok_batch else "MISSED"))
        log("| idle x%d | gateway + backend CPU per batch execution | %.0f us | %.0f us (no sessions) | %.2fx | - |"
            % (args.idle, median([r["cpu_with"] for r in idle]) * 1e6, median([r["cpu_without"] for r in idle]) * 1e6,
               median([r["cpu_with"] / r["cpu_without"] for r in idle])))
        log("| idle x%d | gateway + backend while idle | %.2f%% of a core, %.0f context switches/s | - | - | - |"
            % (args.idle, median([r["idle_cpu"] for r in idle]) * 100, median([r["idle_ctx"] for r in idle])))
        log("| idle x%d | the program's own RSS per session (not counted) | %.0f KiB | - | - | - |"
            % (args.idle, median([r["prog_per"] for r in idle])))
        log("(RSS per session by round: %s KiB)" % ", ".join("%.1f" % r["per_kib"] for r in idle))
        if not ok_mem:
            missed.append("%.1f KiB per idle session > %d KiB" % (per, GOAL_IDLE_KIB))
        if not ok_batch:
            missed.append("batch p50 with %d idle sessions %.2fx > %.1fx" % (args.idle, ratio, GOAL_IDLE_BATCH))
    log("(echo and start: medians over %d interleaved rounds; idle: over %d rounds; ratios taken within each round)"
        % (args.rounds, args.idle_rounds))
    if args.smoke:
        log("bench_sessions: smoke run OK (figures of a smoke run mean nothing)")
    elif missed:
        log("bench_sessions: goal missed: %s" % "; ".join(missed))
    else:
        log("bench_sessions: every goal met")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build-dir", default=os.environ.get("MOAT_BUILD_DIR", os.path.join(SOURCE, "build")))
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds of echo and start (default 3)")
    ap.add_argument("--lines", type=int, default=1000, help="echo: lines per round (default 1000)")
    ap.add_argument("--starts", type=int, default=20, help="start: sessions and batch executions per round (default 20)")
    ap.add_argument("--idle", type=int, default=200, help="idle: sessions open at once (default 200)")
    ap.add_argument("--idle-rounds", type=int, default=3, help="idle: rounds (default 3)")
    ap.add_argument("--idle-seconds", type=float, default=5.0, help="idle: seconds of idle CPU measured (default 5)")
    ap.add_argument("--open-concurrency", type=int, default=20, help="idle: sessions opening at once (default 20)")
    ap.add_argument("--batch", type=int, default=40, help="idle: batch executions per series (default 40)")
    ap.add_argument("--backend-sessions", type=int, default=256, help="moat-backend --sessions (default 256)")
    ap.add_argument("--sessions-warm", type=int, default=None,
                    help="moat-backend --sessions-warm (default: not given, the backend's default: cold session slots)")
    ap.add_argument("--audit", action="store_true", help="with the audit trail on (default off, as bench_gateway)")
    ap.add_argument("--smoke", action="store_true", help="short run: check that everything works")
    ap.add_argument("--hold", action="store_true", help="keep the servers running after the run (for perf)")
    args = ap.parse_args()
    if args.smoke:
        args.rounds, args.lines, args.starts, args.idle, args.idle_rounds = 1, 20, 3, 10, 1
        args.batch, args.idle_seconds = 5, 1.0
    if args.idle > args.backend_sessions:
        raise BenchError("--idle %d needs --backend-sessions >= %d" % (args.idle, args.idle))
    if HARNESS_SLOTS + args.backend_sessions > BENCH_UID_BLOCK:
        raise BenchError("--backend-sessions %d: more box uids than this benchmark's block of %d"
                         % (args.backend_sessions, BENCH_UID_BLOCK))

    def interrupted(signum, frame):
        raise KeyboardInterrupt
    signal.signal(signal.SIGINT, interrupted)
    signal.signal(signal.SIGTERM, interrupted)

    build = os.path.abspath(args.build_dir)
    os.environ["MOAT_BUILD_DIR"] = build
    sys.path.insert(0, os.path.join(SOURCE, "tests", "e2e"))
    import moat_harness  # noqa: E402  (reads MOAT_BUILD_DIR at import)
    try:
        import websockets  # noqa: E402
        import ws_client  # noqa: E402
    except ImportError as e:
        raise BenchError("%s: run with Debian's /usr/bin/python3 (python3-websockets, .ci/install-deps)" % e)

    bins = [moat_harness.BACKEND, moat_harness.GATEWAY, moat_harness.MOATCTL]
    if args.audit:
        bins += [moat_harness.MOAT_AUDIT, moat_harness.AUDIT_WRITER]
    for b in bins:
        if not os.access(b, os.X_OK):
            raise BenchError("%s not built" % b)
    if not os.access(PIPE_PYTHON, os.X_OK):
        raise BenchError("%s not found (the baseline of echo)" % PIPE_PYTHON)
    if os.geteuid() != 0:
        raise BenchError("run as root (the backend runs boxes)")

    many = max(1000, 2 * args.idle)
    tenant = ("rate: {per_second: 100000, burst: 100000}\nmax_in_flight: 1000\ncpu_seconds_per_minute: 1000000\n"
              "endpoints: [execute, runtimes, connect]\n"
              "sessions: {max_concurrent: %d, wall_ms: 3600000, idle_ms: 3600000, cpu_ms: 600000}\n" % many)
    stack = moat_harness.Stack(
        tenants=[("bench", tenant, "")], audit=args.audit,
        extra_config="max_connections_per_address: 100000\nmax_connections: 100000\n"
                     "sessions: {max_sessions: %d, init_timeout_ms: 60000}\n" % many,
        backend_args=["--sessions", str(args.backend_sessions),
                      "-o", "session_wall=3600000", "-o", "session_idle=3600000"]
                     + (["--sessions-warm", str(args.sessions_warm)] if args.sessions_warm is not None else []))
    stack.uid_base = BENCH_UID_BASE + (os.getpid() % 4096) * BENCH_UID_BLOCK
    try:
        stack.start()
        gw = stack.gateway.pid
        if args.audit:
            gw = child_named(stack.gateway.pid, "moat-gateway")
            if gw is None:
                raise BenchError("audit on: cannot find the gateway process below its supervisor")
        be = stack.backend.pid
        extra = [c for c in children(gw)]
        log("load average at the start: %s" % open("/proc/loadavg").read().strip())
        log("bench_sessions: gateway pid %d (2 workers%s), backend pid %d (-j %d, --sessions %d, --sessions-warm %s,"
            " box uids %d..%d), audit %s"
            % (gw, ", children %s" % extra if extra else "", be, HARNESS_SLOTS, args.backend_sessions,
               "(default)" if args.sessions_warm is None else args.sessions_warm, stack.uid_base,
               stack.uid_base + HARNESS_SLOTS + args.backend_sessions - 1, "on" if args.audit else "off"))
        log("RSS at start: gateway %d KiB, backend %d KiB (%d threads)" % (rss_kib(gw), rss_kib(be), threads_of(be)))
        res = asyncio.run(run_all(args, stack, moat_harness, ws_client, websockets, (gw, be)))
        for name, proc in (("gateway", stack.gateway), ("backend", stack.backend)):
            if proc.poll() is not None:
                raise BenchError("the %s exited during the run (status %d); its log ends:\n%s"
                                 % (name, proc.returncode, stack.log(name)[-2000:]))
        if not stack.healthy():
            raise BenchError("the gateway does not answer /healthz after the run; its log ends:\n%s"
                             % stack.log("gateway")[-2000:])
        if args.hold:
            log("holding: gateway pid %d backend pid %d port %d token %s; Ctrl-C to stop"
                % (gw, be, stack.port, stack.tokens["bench"]))
            try:
                signal.pause()
            except KeyboardInterrupt:
                pass
    except AssertionError as e:  # the harness's
        raise BenchError(str(e))
    finally:
        stack.stop()

    log("")
    log("load average at the end: %s" % open("/proc/loadavg").read().strip())
    return report(args, res)


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BenchError as e:
        print("bench_sessions: error: %s" % e, file=sys.stderr)
        sys.exit(1)
