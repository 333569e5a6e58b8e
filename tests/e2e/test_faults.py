"""The fault campaign (issue 14, item 6): one test per fault, each injected while clients keep
sending requests, against the real backend, gateway, audit writer and redis-server.

  fault                              what must hold
  kill -9 the backend                requests get 503 backend_unavailable with Retry-After, none
                                     hangs; a new backend on the same socket serves again and
                                     leaves no box process or cgroup of the dead one
  kill -9 the gateway (the worker    every request answered 2xx has its request and result
  process; or the whole gateway:     records in the trail (the answer leaves only after they are
  supervisor, worker and writer)     durable), and `moat-audit verify` passes after a restart
  the audit disk full                executions get 503 audit_unavailable (fail closed), nothing
                                     runs unaudited, every 200 has its records, verify passes
                                     while full and after; space freed: served again, no restart
  Redis killed and restarted         only 2xx or 503 with Retry-After (limiter_unavailable,
  (limiter and Judge0 store)         store_unavailable); served again once Redis is back
  slow and stalled clients, many     slowloris headers, trickled bodies (HTTP/1.1 and HTTP/2), a
  at once on one worker              client that never reads: each closed by its timeout; a victim
                                     client on the same worker has every request answered
  HTTP/2 rapid reset and             each attacking connection gets GOAWAY or is closed (they
  CONTINUATION floods, several       reconnect, and are cut off again); the victim's requests all
  attackers at once                  succeed; its p50 before and during is printed, not asserted

Faults covered elsewhere, not repeated here: the audit writer killed (test_audit_gateway
WriterKilledTest), the audit disk full without load (DiskFullTest), Redis stopped (SIGSTOP) and
killed for the limiter and the shared stores with two gateways (test_redis_limits,
test_redis_shared), each slow-client shape alone with its timing (test_gateway_robustness
TimeoutTest, SendTimeoutTest), one rapid-reset attacker (RapidResetTest).

No assertion depends on how fast anything is: waits are for events with generous deadlines
(moat_harness.wait_until), and latencies are printed."""

import http.client
import json
import multiprocessing
import os
import select
import signal
import socket
import ssl
import struct
import subprocess
import threading
import time
import unittest

from moat_harness import (DEADLINE_S, LONG_WALL_MS, SmallAuditDisk, Stack, box_pids, box_uid_pids,
                          cgroup_count, held_program, wait_held, wait_until)
from test_audit_gateway import audit_cli, gateway_worker_pid, sha256, writer_pid
from test_gateway_robustness import (CANCEL, CONTINUATION, END_HEADERS, END_STREAM, H2, HEADERS, PREFACE, RST_STREAM,
                                     SETTINGS, frame, h2_ctx, header_block, hpack_literal, log_text, percentile,
                                     start_stack, tls_socket, trickle)
from test_redis_limits import HAVE_REDIS, Redis
from test_redis_limits import limiter as redis_limiter

EXECUTE = "/api/v2/execute"
QUICK = {"language": "python", "version": "*", "files": [{"name": "main.py", "content": "print(6 * 7)"}]}
BIG = "rate: {per_second: 100000, burst: 100000}\nmax_in_flight: 64\n"


def alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False


class Load:
    """`threads` clients, each sending make(i) -> (method, path, body, token) over a new HTTP/1.1
    connection in a loop until stop(); every outcome is kept as (t0, t1, status, headers, data),
    every client error (no answer) as (t0, t1, None, None, repr)."""

    def __init__(self, stack, make, threads=3, timeout=DEADLINE_S):
        self.stack, self.make, self.timeout = stack, make, timeout
        self.outcomes, self.lock, self.stopping = [], threading.Lock(), threading.Event()
        self.threads = [threading.Thread(target=self.loop, args=(i,), daemon=True) for i in range(threads)]
        for t in self.threads:
            t.start()

    def loop(self, i):
        n = 0
        while not self.stopping.is_set():
            method, path, body, token = self.make(i * 1000000 + n)
            n += 1
            t0 = time.monotonic()
            try:
                st, h, data = self.stack.request(method, path, body, token=token, timeout=self.timeout)
                out = (t0, time.monotonic(), st, h, data)
            except (OSError, http.client.HTTPException) as e:
                out = (t0, time.monotonic(), None, None, repr(e))
                time.sleep(0.05)  # the client's pause before it tries again (a server that is down)
            with self.lock:
                self.outcomes.append(out)

    def since(self, t, status=None):
        with self.lock:
            return [o for o in self.outcomes if o[0] >= t and (status is None or o[2] == status)]

    def stop(self):
        self.stopping.set()
        for t in self.threads:
            t.join(self.timeout + 30)
        return list(self.outcomes)


def quick(n):
    """An execute whose output names the request (so a record can be matched to its answer)."""
    return "POST", EXECUTE, dict(QUICK, files=[{"name": "main.py", "content": "print(%d)" % n}]), "default"


def statuses(outcomes):
    out = {}
    for o in outcomes:
        key = o[2] if o[2] is None or o[2] < 300 else (o[2], o[4].get("code") if isinstance(o[4], dict) else o[4])
        out[key] = out.get(key, 0) + 1
    return out


class FaultCase(unittest.TestCase):
    def assert_refusals(self, outcomes, allowed):
        """Every answer is 2xx or an allowed (status, code); every 503 carries Retry-After and a JSON
        body naming its request."""
        for t0, t1, st, h, data in outcomes:
            if st is None or st < 300:
                continue
            self.assertIsInstance(data, dict, (st, data))
            self.assertIn((st, data.get("code")), allowed, data)
            self.assertEqual(data.get("request_id"), h.get("x-request-id"))
            if st == 503:
                self.assertGreaterEqual(int(h.get("retry-after", "0")), 1, (st, data, h))


# ---------------------------------------------------------------------------
# kill -9 the backend
# ---------------------------------------------------------------------------


class BackendKilledTest(FaultCase):
    def setUp(self):
        self.stack = Stack(tenants=[("demo", BIG + "limits:\n  run_timeout_ms: %d\n" % LONG_WALL_MS, "")],
                           backend_args=["-o", "run_timeout=%d" % LONG_WALL_MS])
        self.stack.start()

    def tearDown(self):
        self.stack.stop()

    def test_backend_killed_under_load(self):
        stack = self.stack
        self.assertEqual(stack.request("POST", EXECUTE, QUICK)[0], 200)
        idle_groups = cgroup_count(stack.tag)
        # two runs held in their boxes (so that the kill finds boxes running), and quick runs all along
        held_body = dict(QUICK, files=[{"name": "main.py", "content": held_program()}], run_timeout=LONG_WALL_MS)
        # each thread's first run is held; what it sends afterwards is quick
        held = Load(stack, lambda n: quick(n) if n % 1000000 else ("POST", EXECUTE, held_body, "default"), threads=2)
        load = Load(stack, quick, threads=3)
        try:
            wait_held(stack.tag, 2)
            wait_until(lambda: len(load.since(0, 200)) >= 3, "quick runs served before the kill")
            boxes = box_pids(stack.tag) | box_uid_pids(stack.uid_base)
            self.assertTrue(boxes)
            os.kill(stack.backend.pid, signal.SIGKILL)
            stack.backend.wait(timeout=DEADLINE_S)
            dead = time.monotonic()
            stack.stop_backend()
            # requests sent after the kill: 503 backend_unavailable with Retry-After, at once (the held
            # ones, whose backend connection broke, answered too)
            refused = wait_until(lambda: [o for o in load.since(dead) if o[2] == 503], "a 503 after the kill",
                                 detail=lambda: repr(statuses(load.since(dead))))
            self.assertEqual(refused[0][4]["code"], "backend_unavailable")
            wait_until(lambda: len(held.since(0)) >= 2, "the held runs to be answered")
            orphans = {p for p in boxes if alive(p)}
            # a new backend on the same socket: it serves, and nothing of the dead one is left
            stack.start_backend()
            started = time.monotonic()
            wait_until(lambda: load.since(started, 200), "a run served by the new backend",
                       detail=lambda: repr(statuses(load.since(started))))
            wait_until(lambda: not {p for p in boxes if alive(p)}, "the dead backend's boxes to be gone",
                       detail=lambda: repr({p for p in boxes if alive(p)}))
        finally:
            outcomes = load.stop()
            held_outcomes = held.stop()
        after = [o for o in outcomes if o[0] >= dead]
        print("\n    backend killed: %d orphaned box process(es) at the restart; around the kill %r; held runs %r"
              % (len(orphans), statuses(after), statuses(held_outcomes)))
        self.assertEqual([o for o in outcomes if o[2] is None], [], "a request got no answer")
        self.assert_refusals(outcomes, {(503, "backend_unavailable"), (502, "bad_backend_reply")})
        # the runs in flight at the kill: answered with a 5xx, never a 200 the backend could not have produced
        firsts = sorted(held_outcomes)[:2]
        self.assertTrue(all(o[2] in (502, 503) for o in firsts), statuses(firsts))
        self.assert_refusals(held_outcomes, {(503, "backend_unavailable"), (502, "bad_backend_reply")})
        # the groups are back to the idle count: the dead backend's were removed
        wait_until(lambda: cgroup_count(stack.tag) <= idle_groups, "the backend's groups back to %d" % idle_groups,
                   detail=lambda: "%d groups" % cgroup_count(stack.tag))
        self.assertEqual(stack.request("POST", EXECUTE, QUICK)[0], 200)


# ---------------------------------------------------------------------------
# kill -9 the gateway
# ---------------------------------------------------------------------------


class GatewayKilledTest(FaultCase):
    def setUp(self):
        self.stack = Stack().start()

    def tearDown(self):
        self.stack.stop()

    def kill_under_load(self, whole):
        stack = self.stack
        worker, writer = gateway_worker_pid(stack), writer_pid(stack)
        self.assertIsNotNone(worker)
        self.assertIsNotNone(writer)
        load = Load(stack, quick, threads=4, timeout=30)
        denied = Load(stack, lambda n: ("GET", "/api/v2/runtimes", None, None), threads=1, timeout=30)
        try:
            wait_until(lambda: len(load.since(0, 200)) >= 8, "runs served before the kill")
            os.kill(worker, signal.SIGKILL)
            if whole:
                os.kill(stack.gateway.pid, signal.SIGKILL)
                os.kill(writer, signal.SIGKILL)
            # the supervisor ends with its gateway
            stack.gateway.wait(timeout=DEADLINE_S)
            wait_until(lambda: not alive(writer), "the writer to end with the gateway")
        finally:
            outcomes = load.stop()
            denied.stop()
        ok = {o[3]["x-request-id"]: o[4] for o in outcomes if o[2] == 200}
        self.assert_refusals(outcomes, {(503, "audit_unavailable")})
        # a new gateway on the same trail
        stack.gateway_log.close()
        stack.start_gateway()
        self.assertEqual(stack.request("POST", EXECUTE, QUICK)[0], 200)
        p = audit_cli("verify", stack.audit_dir)
        self.assertEqual(p.returncode, 0, p.stderr.decode(errors="replace"))
        recs = stack.audit_records()
        by_id = {}
        for r in recs:
            by_id.setdefault(r.get("request_id"), []).append(r)
        lost = [rid for rid in ok if sorted(r["type"] for r in by_id.get(rid, [])) != ["request", "result"]]
        self.assertEqual(lost, [], "acknowledged executions without their records")
        for rid, data in ok.items():
            res = next(r for r in by_id[rid] if r["type"] == "result")
            self.assertEqual(res["run"]["stdout_sha256"], sha256(data["run"]["stdout"].encode()))
        print("\n    gateway killed (%s): %d runs answered 200, all recorded; %d without an answer; %d records, %d repair"
              % ("supervisor, worker and writer" if whole else "worker", len(ok),
                 sum(1 for o in outcomes if o[2] is None), len(recs), sum(1 for r in recs if r.get("type") == "repair")))

    def test_worker_killed(self):
        self.kill_under_load(whole=False)

    def test_whole_gateway_killed(self):
        self.kill_under_load(whole=True)


# ---------------------------------------------------------------------------
# the audit disk full
# ---------------------------------------------------------------------------


class AuditDiskFullUnderLoadTest(FaultCase):
    def setUp(self):
        self.disk = SmallAuditDisk("4m", prefix="moat-faults-audit-")
        self.mnt, self.adir = self.disk.mnt, self.disk.dir
        # a reserve well below the tmpfs: denials are written until it is reached
        self.stack = self.disk.stack(reserve_bytes=262144)
        self.stack.start()

    def tearDown(self):
        self.disk.remove()

    def test_disk_fills_under_load(self):
        stack = self.stack
        writer = writer_pid(stack)
        load = Load(stack, quick, threads=3)
        denied = Load(stack, lambda n: ("GET", "/api/v2/runtimes", None, None), threads=1)
        filler = os.path.join(self.mnt, "filler")
        try:
            wait_until(lambda: len(load.since(0, 200)) >= 3, "runs served before the disk fills")
            subprocess.run(["dd", "if=/dev/zero", "of=" + filler, "bs=4k"], capture_output=True)
            full = time.monotonic()
            wait_until(lambda: load.since(full, 503), "executions refused on the full disk",
                       detail=lambda: repr(statuses(load.since(full))))
            # while full: the trail as it stands verifies, but for at most a torn last line (a write the disk
            # cut short, never acknowledged; the log is append-only, so the writer cannot cut it back: it
            # ends it with a repair record before its next record, audit/FORMAT.md "Torn tails")
            p = audit_cli("verify", self.adir)
            torn_while_full = p.returncode != 0
            if torn_while_full:
                self.assertIn("the last line is torn", p.stderr.decode(errors="replace"))
            os.unlink(filler)
            freed = time.monotonic()
            wait_until(lambda: load.since(freed, 200), "runs served once space is freed",
                       detail=lambda: repr(statuses(load.since(freed))))
        finally:
            outcomes = load.stop()
            denials = denied.stop()
        during = [o for o in outcomes if full <= o[0] < freed]
        print("\n    audit disk full under load: before %r, while full %r, after %r"
              % (statuses([o for o in outcomes if o[0] < full]), statuses(during),
                 statuses([o for o in outcomes if o[0] >= freed])))
        self.assertEqual([o for o in outcomes + denials if o[2] is None], [], "a request got no answer")
        self.assert_refusals(outcomes, {(503, "audit_unavailable")})
        self.assert_refusals(denials, {(401, "invalid_token")})
        self.assertEqual(writer_pid(stack), writer, "the writer was restarted")
        ok = {o[3]["x-request-id"] for o in outcomes if o[2] == 200}
        p = audit_cli("verify", self.adir)
        self.assertEqual(p.returncode, 0, p.stderr.decode(errors="replace"))

        def recorded():
            recs = stack.audit_records()
            types = {}
            for r in recs:
                types.setdefault(r.get("request_id"), []).append(r["type"])
            return all(sorted(types.get(rid, [])) == ["request", "result"] for rid in ok)

        wait_until(recorded, "the records of every run answered 200")
        repairs = [r for r in stack.audit_records() if r.get("type") == "repair"]
        if torn_while_full:
            self.assertTrue(repairs, "a torn line without its repair record")
        print("    torn last line while full: %s; repair records after: %d" % (torn_while_full, len(repairs)))


# ---------------------------------------------------------------------------
# Redis killed and restarted
# ---------------------------------------------------------------------------

JUDGE0 = BIG + "endpoints: [execute, runtimes, submissions, languages]\n"


@unittest.skipUnless(HAVE_REDIS, "redis-server is not installed (Debian: apt-get install redis-server)")
class RedisKilledUnderLoadTest(FaultCase):
    def setUp(self):
        self.stack = Stack(tenants=[("demo", JUDGE0, "")])
        self.redis = Redis(self.stack.tmp)
        self.redis.start()
        with open(self.stack.config) as f:
            text = f.read()
        with open(self.stack.config, "w") as f:
            f.write(redis_limiter(self.redis) + "submissions:\n  store: redis\n  ttl_s: 3600\n" + text)
        self.stack.start()

    def tearDown(self):
        self.stack.stop()
        self.redis.kill()

    def test_redis_killed_and_restarted_under_load(self):
        stack = self.stack

        def mixed(n):
            if n % 2:
                return "POST", "/submissions?wait=true", {"source_code": "print(%d)" % n, "language_id": 71}, "default"
            return quick(n)

        load = Load(stack, mixed, threads=3)
        try:
            wait_until(lambda: len([o for o in load.since(0) if o[2] in (200, 201)]) >= 4, "runs served with Redis up")
            self.redis.kill()
            down = time.monotonic()
            wait_until(lambda: load.since(down, 503), "a 503 with Redis down",
                       detail=lambda: repr(statuses(load.since(down))))
            self.redis.start()
            up = time.monotonic()
            wait_until(lambda: len([o for o in load.since(up) if o[2] in (200, 201)]) >= 4, "runs served once Redis is back",
                       detail=lambda: repr(statuses(load.since(up))))
        finally:
            outcomes = load.stop()
        print("\n    redis killed under load: up %r, down %r, back %r"
              % (statuses([o for o in outcomes if o[0] < down]), statuses([o for o in outcomes if down <= o[0] < up]),
                 statuses([o for o in outcomes if o[0] >= up])))
        self.assertEqual([o for o in outcomes if o[2] is None], [], "a request got no answer")
        self.assert_refusals(outcomes, {(503, "limiter_unavailable"), (503, "store_unavailable")})
        self.assertIsNone(stack.gateway.poll())


# ---------------------------------------------------------------------------
# slow and stalled clients, many at once
# ---------------------------------------------------------------------------


class SlowClientsTest(FaultCase):
    """On one worker, so that every slow client shares the victim's event loop."""

    SEND_MS = 3000

    def setUp(self):
        self.stack = start_stack("timeouts: {header_ms: 1500, body_ms: 1500, idle_ms: 3000, send_ms: %d}\n" % self.SEND_MS,
                                 workers=1, tenants=[("demo", BIG, "")])

    def tearDown(self):
        self.stack.stop()

    def test_slow_and_stalled_clients_cut_others_served(self):
        stack = self.stack
        token = stack.token.encode()
        closed, lock = {}, threading.Lock()

        def note(name, took):
            with lock:
                closed[name] = took

        def slowloris(name):
            with tls_socket(stack) as s:
                s.sendall(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n")
                note(name, trickle(s, b"X-Slow: " + b"a" * 200, interval=0.25, limit=DEADLINE_S))

        def slow_body(name):
            with tls_socket(stack) as s:
                s.sendall(b"POST /api/v2/execute HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                          b"Authorization: Bearer " + token + b"\r\nContent-Length: 100000\r\n\r\n")
                note(name, trickle(s, b"{" * 1000, interval=0.25, limit=DEADLINE_S))

        def h2_slow_body(name):
            h2 = H2(stack.port, h2_ctx(stack))
            start = time.monotonic()
            try:
                sid = h2.request("POST", EXECUTE, [("content-type", "application/json"),
                                                   ("authorization", "Bearer " + stack.token)], end_stream=False)
                while not h2.closed and time.monotonic() - start < DEADLINE_S:
                    try:
                        h2.send(frame(0, 0, sid, b"{"))  # DATA, one octet
                    except (ssl.SSLError, OSError):
                        break
                    h2.read_frame(0.25)
                note(name, time.monotonic() - start if h2.closed or h2.goaway else None)
            finally:
                h2.close()

        def never_reads(name):
            raw = socket.socket()
            raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            raw.connect(("127.0.0.1", stack.port))
            s = stack.ssl_context(alpn=("http/1.1",)).wrap_socket(raw, server_hostname="localhost")
            req = b"GET /api/v2/runtimes HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + token + b"\r\n\r\n"
            start = time.monotonic()
            s.settimeout(DEADLINE_S)
            try:
                for _ in range(400):  # until the gateway stops taking them; their answers are never read
                    s.sendall(req * 100)
            except (OSError, ValueError):
                pass
            # then read: what the kernel still holds, and the end
            took = None
            try:
                while s.recv(65536):
                    pass
                took = time.monotonic() - start
            except (ssl.SSLError, OSError):
                took = time.monotonic() - start
            finally:
                s.close()
            note(name, took)

        attackers = [(f, "%s-%d" % (f.__name__, i)) for f in (slowloris, slow_body, h2_slow_body, never_reads)
                     for i in range(3)]
        threads = [threading.Thread(target=f, args=(name,), daemon=True) for f, name in attackers]
        victim_lat, victim_fail = [], []

        def victim():
            end = time.monotonic() + DEADLINE_S + 60
            while not all(name in closed for _, name in attackers) and time.monotonic() < end:
                t0 = time.monotonic()
                try:
                    st, _, data = stack.request("POST", EXECUTE, QUICK, timeout=DEADLINE_S)
                    if st != 200:
                        victim_fail.append((st, data))
                except (OSError, http.client.HTTPException) as e:
                    victim_fail.append(repr(e))
                victim_lat.append((time.monotonic() - t0) * 1000)

        for t in threads:
            t.start()
        v = threading.Thread(target=victim, daemon=True)
        v.start()
        for t in threads:
            t.join(DEADLINE_S + 60)
        v.join(DEADLINE_S + 60)
        lat = sorted(victim_lat)
        print("\n    %d slow clients; cut after (s): %s; victim: %d runs, p50 %.1f ms, %d failed"
              % (len(attackers), json.dumps({k: None if v is None else round(v, 1) for k, v in sorted(closed.items())}),
                 len(lat), percentile(lat, 0.5) if lat else 0, len(victim_fail)))
        self.assertEqual(sorted(closed), sorted(name for _, name in attackers), "an attacker never finished")
        self.assertEqual({k: v for k, v in closed.items() if v is None}, {}, "slow clients never cut off")
        self.assertEqual(victim_fail, [])
        self.assertGreater(len(lat), 0)
        self.assertIsNone(stack.gateway.poll())
        wait_until(lambda: log_text(stack).count("within timeouts.send_ms") >= 3, "the send timeouts to be logged")


# ---------------------------------------------------------------------------
# HTTP/2 floods from several connections
# ---------------------------------------------------------------------------


def attacker(kind, port, ca, seconds, queue, started):
    """One attacking process: connects, floods until the gateway cuts the connection off, reconnects,
    for `seconds`; the last connection floods on until it is cut off too (or DEADLINE_S more).  Puts
    (kind, connections, connections cut off (GOAWAY or closed), frames sent)."""
    ctx = ssl.create_default_context(cafile=ca)
    ctx.set_alpn_protocols(["h2"])
    block = header_block("GET", "/healthz")
    filler = hpack_literal("x-f", "a" * 1000)
    end = time.time() + seconds
    hard_end = end + DEADLINE_S
    conns = cut = frames = 0
    while time.time() < end:
        try:
            # a send blocks while the gateway reads nothing (a busy machine): only its end counts
            s = ctx.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=DEADLINE_S),
                                server_hostname="localhost")
            s.sendall(PREFACE + frame(SETTINGS, 0, 0))
        except OSError:
            time.sleep(0.01)  # the attacker's pause before it reconnects
            continue
        conns += 1
        started.set()
        sid, gone = 1, False
        if kind != "rapid_reset":  # a header block that never ends
            try:
                s.sendall(frame(HEADERS, END_STREAM, sid, block))
            except OSError:
                gone = True
        while not gone and time.time() < hard_end:
            if kind == "rapid_reset":
                batch = b"".join(frame(HEADERS, END_HEADERS | END_STREAM, sid + 2 * i, block) +
                                 frame(RST_STREAM, 0, sid + 2 * i, struct.pack(">I", CANCEL)) for i in range(100))
                sid += 200
            elif kind == "continuation":
                batch = frame(CONTINUATION, 0, sid, filler) * 16
            else:  # empty CONTINUATION frames
                batch = frame(CONTINUATION, 0, sid, b"") * 1000
            try:
                s.sendall(batch)
                frames += 200 if kind == "rapid_reset" else (16 if kind == "continuation" else 1000)
            except OSError:
                gone = True
                break
            while True:  # what the server sent, without waiting
                r, _, _ = select.select([s], [], [], 0)
                if not r and not s.pending():
                    break
                try:
                    data = s.recv(1 << 20)
                except ssl.SSLWantReadError:
                    break
                except OSError:
                    gone = True
                    break
                if not data:
                    gone = True
                    break
        cut += gone
        s.close()
    queue.put((kind, conns, cut, frames))


def h2_victim(stack, until):
    """Latencies (ms) and failures of sequential GET /healthz on one HTTP/2 connection until the
    event `until` is set (a connection the gateway closes is replaced: that is a failure too)."""
    h2 = H2(stack.port, h2_ctx(stack))
    lat, fails = [], []
    while not until.is_set():
        t0 = time.monotonic()
        st = h2.get("/healthz", timeout=DEADLINE_S)
        lat.append((time.monotonic() - t0) * 1000)
        if st["status"] != 200:
            fails.append(st)
            h2.close()
            h2 = H2(stack.port, h2_ctx(stack))
    h2.close()
    return lat, fails


class Http2FloodsTest(FaultCase):
    FLOOD_S = 5.0
    KINDS = ("rapid_reset", "rapid_reset", "continuation", "continuation", "empty_continuation", "empty_continuation")

    def test_floods_cut_off_victim_served(self):
        stack = start_stack("", workers=1)
        try:
            quiet = threading.Event()
            timer = threading.Timer(1.0, quiet.set)
            timer.start()
            before, fails_before = h2_victim(stack, quiet)
            self.assertEqual(fails_before, [])
            mp = multiprocessing.get_context("fork")
            q = mp.Queue()
            started = [mp.Event() for _ in self.KINDS]
            procs = [mp.Process(target=attacker, args=(k, stack.port, stack.ca, self.FLOOD_S, q, e))
                     for k, e in zip(self.KINDS, started)]
            for p in procs:
                p.start()
            for e in started:
                wait_until(e.is_set, "every attacker to start")
            over = threading.Event()
            results = []

            def collect():
                for _ in procs:
                    results.append(q.get(timeout=DEADLINE_S + self.FLOOD_S))
                over.set()

            c = threading.Thread(target=collect)
            c.start()
            during, fails = h2_victim(stack, over)
            c.join()
            for p in procs:
                p.join(30)
            alive_after = stack.gateway.poll() is None
            st = H2(stack.port, h2_ctx(stack))
            after = st.get("/healthz")["status"]
            st.close()
        finally:
            stack.stop()
        res = {"victim_p50_before_ms": round(percentile(sorted(before), 0.5), 2),
               "victim_p50_during_ms": round(percentile(sorted(during), 0.5), 2),
               "victim_p99_during_ms": round(percentile(sorted(during), 0.99), 2),
               "victim_requests_during": len(during), "victim_failures": len(fails),
               "attackers": sorted(results)}
        print("\n    http/2 floods: %s" % json.dumps(res))
        self.assertTrue(alive_after)
        self.assertEqual(after, 200)
        self.assertEqual(fails, [])
        self.assertGreater(len(during), 0)
        self.assertEqual(len(results), len(self.KINDS))
        for kind, conns, cut, frames in results:
            # every connection the attacker opened was cut off
            self.assertGreaterEqual(conns, 1, (kind, conns, cut, frames))
            self.assertEqual(cut, conns, (kind, conns, cut, frames))


if __name__ == "__main__":
    unittest.main()
