"""Accepted Judge0 submissions in Redis Streams (submissions: {store: redis,
queue: redis}), run by whichever host has a free slot, taken over from a
host that died.

Each host is a real moat-backend with one batch slot (-j 1: its own run
directory, uid range and box tag) and its own moat-gateway (its own port
and audit trail), all on one real redis-server started here.  The tenants'
keys are the same on every host, as a deployment's would be.

What is checked:
  - submissions sent to host a run on both hosts (b's idle slot claims
    them), and every accepted token ends exactly once, readable on any host;
  - a batch's group compiled once is one entry, run as one job;
  - a host killed -9 with a claimed run: the entry is taken over by a live
    host after the lease, runs again (attempt 2 in the result record and
    the packet), and ends once; its record reads "Processing" meanwhile,
    never Internal Error;
  - queue_max_per_tenant holds across gateways: 429 with Retry-After on
    every gateway, a batch refused whole;
  - Redis down at POST: 503 store_unavailable, nothing accepted; back: works;
  - a corrupt or foreign entry in a stream is dead-lettered, never run, and
    the gateways go on;
  - fair across tenants: one tenant's burst does not hold the slots while
    another tenant's single submission waits.
Skipped (with the reason) when redis-server is not installed.
"""

import base64
import grp
import json
import os
import signal
import socket
import subprocess
import time
import unittest
import urllib.request

from moat_harness import MOATCTL, Stack, free_port, held_program, held_roots, release_all, uid_base, wait_until
from test_redis_limits import HAVE_REDIS, REDIS

LEASE_MS = 3000
PREFIX = "moat-qe2e:"
TENANT = ("rate: {per_second: 1000, burst: 1000}\nmax_in_flight: 64\nendpoints: [execute, runtimes, submissions, languages]\n"
          "limits:\n  run_timeout_ms: 20000\n")
TENANTS = [("alpha", TENANT, ""), ("beta", TENANT, ""), ("gamma", TENANT, "")]
PYTHON = 71  # Judge0's id for Python 3
C_LANG = 50


def b64(s):
    return base64.b64encode(s.encode()).decode()


class Redis:
    """A redis-server on a Unix socket; appendonly when asked (fsync every write)."""

    def __init__(self, directory, aof=False):
        self.dir, self.aof = directory, aof
        self.socket = os.path.join(directory, "redis.sock")
        self.proc = None

    def start(self):
        self.log = open(os.path.join(self.dir, "redis.log"), "ab")
        aof = ["--appendonly", "yes", "--appendfsync", "always"] if self.aof else ["--appendonly", "no"]
        self.proc = subprocess.Popen([REDIS, "--port", "0", "--unixsocket", self.socket, "--unixsocketperm", "777", "--save", "",
                                      *aof, "--dir", self.dir], stdout=self.log, stderr=subprocess.STDOUT)
        wait_until(lambda: self.proc.poll() is not None or self.accepts(), "redis-server to start")

    def accepts(self):
        try:
            return self.cli("PING") == "PONG"
        except (OSError, subprocess.CalledProcessError):
            return False

    def cli(self, *args):
        return subprocess.run(["redis-cli", "-s", self.socket, *args], check=True, capture_output=True,
                              text=True, timeout=10).stdout.strip()

    def stop(self, sig=signal.SIGTERM):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(timeout=30)
        self.proc = None
        self.log.close()


def limiter(redis):
    return ("limiter:\n  store: redis\n  redis: {socket: %s, timeout_ms: 1000, lease_ms: %d, prefix: \"%s\"}\n"
            "  on_unavailable: local\n  gateways: 3\n" % (redis.socket, LEASE_MS, PREFIX))


class Host:
    """One backend (one slot) and its gateway; keys and certificates shared with the first host."""

    def __init__(self, name, redis, first=None, submissions="", limiter_text=None):
        self.mport = free_port()
        extra = ((limiter_text or limiter(redis)) + "submissions:\n  store: redis\n  queue: redis\n  ttl_s: 3600\n" + submissions +
                 "control:\n  socket: @CTL@\nmetrics: {port: %d}\n" % self.mport)
        self.stack = Stack(tenants=TENANTS, extra_config=extra, backend_args=["-j", "1", "-o", "run_timeout=20000"])
        s = self.stack
        self.control = os.path.join(s.tmp, "control.sock")
        s.tag = "%s-%s" % (s.tag, name)
        s.uid_base = uid_base(s.tag)
        s.run_dir = "/run/" + s.tag
        old_socket, s.socket = s.socket, os.path.join(s.run_dir, "backend.sock")
        with open(s.config) as f:
            text = f.read().replace(old_socket, s.socket)
        if first is not None:  # the first host's tenants section: the same keys
            head = text[:text.index("tenants:\n")]
            with open(first.stack.config) as f:
                tenants = f.read()
            text = head + tenants[tenants.index("tenants:\n"):]
            s.tokens, s.token = first.stack.tokens, first.stack.token
        with open(s.config, "w") as f:
            f.write(text.replace("@CTL@", self.control))
        os.chown(s.config, 0, grp.getgrnam("moat").gr_gid)  # root:moat 0640: moatctl's changes reload it as moat
        os.chmod(s.config, 0o640)
        self.name = name

    def start(self):
        self.stack.start()
        return self

    def start_gateway(self):
        self.stack.start_gateway()

    def stop_gateway(self):
        g = self.stack.gateway
        g.terminate()
        g.wait(timeout=30)
        self.stack.gateway = None

    def kill_gateway(self):
        """SIGKILL to the gateway and its supervisor: no goodbye, no ack."""
        g = self.stack.gateway
        for pid in [int(p) for p in subprocess.run(["pgrep", "-P", str(g.pid)], capture_output=True,
                                                     text=True).stdout.split()] + [g.pid]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        g.wait()
        self.stack.gateway = None

    def submit(self, tenant, source, language_id=PYTHON, stdin="", **extra):
        body = {"language_id": language_id, "source_code": b64(source), "stdin": b64(stdin), **extra}
        return self.stack.request("POST", "/submissions?base64_encoded=true&wait=false", body,
                                  token=self.stack.tokens[tenant])

    def get(self, tenant, token):
        return self.stack.request("GET", "/submissions/%s?base64_encoded=true" % token, token=self.stack.tokens[tenant])

    def moatctl(self, *args):
        p = subprocess.run([MOATCTL, "--socket", self.control, *args], capture_output=True, text=True, timeout=60)
        if p.returncode != 0:
            raise AssertionError("moatctl %s: exit %d: %s" % (" ".join(args), p.returncode, p.stderr))
        return p.stdout

    def metrics(self):
        with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % self.mport, timeout=30) as r:
            text = r.read().decode()
        return {line.split()[0]: float(line.split()[1]) for line in text.splitlines() if line and not line.startswith("#")}

    def records(self):
        return self.stack.audit_records()

    def stop(self):
        self.stack.stop()


def finished(host, tenant, token):
    st, _, data = host.get(tenant, token)
    return st == 200 and data["status"]["id"] > 2 and data


@unittest.skipUnless(HAVE_REDIS, "redis-server is not installed (Debian: apt-get install redis-server)")
class QueueTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = Stack(tenants=TENANTS, audit=False).tmp  # a directory for Redis
        cls.redis = Redis(cls.tmp)
        cls.redis.start()
        cls.hosts = []
        try:
            cls.a = Host("a", cls.redis)
            cls.hosts.append(cls.a)
            cls.a.start()
            cls.b = Host("b", cls.redis, first=cls.a)
            cls.hosts.append(cls.b)
            cls.b.start()
        except BaseException:
            cls.tearDownClass()
            raise

    @classmethod
    def tearDownClass(cls):
        for h in cls.hosts:
            h.stop()
        cls.redis.stop()

    def setUp(self):
        if self.redis.proc is None:
            self.redis.start()
        for h in (self.a, self.b):
            if h.stack.gateway is None:
                h.start_gateway()
        for h in (self.a, self.b):
            self.wait_accepting(h)

    def wait_accepting(self, host):
        """Every worker of host takes submissions (after Redis came back, each reconnects on its own
        backoff): ten accepted in a row, each on a new connection, and each ends."""
        row = []

        def accepted():
            st, _, data = host.submit("alpha", "pass\n")
            if st != 201:
                row.clear()
                return False
            row.append(data["token"])
            return len(row) >= 10
        wait_until(accepted, "host %s to accept submissions" % host.name)
        self.wait_all(host, "alpha", row)

    def wait_all(self, host, tenant, tokens, timeout=120):
        done = {}

        def all_done():
            for t in tokens:
                if t not in done:
                    d = finished(host, tenant, t)
                    if d:
                        done[t] = d
            return len(done) == len(tokens)
        wait_until(all_done, "every submission to end", timeout=timeout)
        return done

    def result_records(self, host, tokens):
        return [r for r in host.records() if r.get("type") == "result" and r.get("judge0", {}).get("token") in tokens]

    def test_submissions_run_on_every_host_and_end_once(self):
        tokens = []
        for i in range(4):
            st, _, data = self.a.submit("alpha", "import time\ntime.sleep(1.5)\nprint(%d)\n" % i)
            self.assertEqual(st, 201, data)
            tokens.append(data["token"])
        done = self.wait_all(self.b, "alpha", tokens)
        for i, t in enumerate(tokens):
            self.assertEqual(done[t]["status"]["id"], 3, done[t])
            self.assertEqual(base64.b64decode(done[t]["stdout"]).decode(), "%d\n" % i)
        on_a, on_b = self.result_records(self.a, tokens), self.result_records(self.b, tokens)
        self.assertGreaterEqual(len(on_a), 1, "host a ran none")
        self.assertGreaterEqual(len(on_b), 1, "host b's idle slot claimed none")
        ran = sorted(r["judge0"]["token"] for r in on_a + on_b)
        self.assertEqual(ran, sorted(tokens), "each submission ran once, on one host")
        for r in on_a + on_b:
            self.assertEqual(r["judge0"]["queue"]["attempt"], 1)
        # the running host's decision record names the accepting request
        decisions = [r for r in self.b.records() if r.get("type") == "request" and r.get("judge0", {}).get("token") in tokens]
        self.assertEqual(len(decisions), len(on_b))
        self.assertEqual(self.redis.cli("XLEN", PREFIX + "q:s:" + b"alpha".hex()), "0", "every entry acknowledged")

    def test_batch_group_is_one_entry(self):
        src = "#include <stdio.h>\nint main(void){int x; if (scanf(\"%d\", &x) == 1) printf(\"%d\\n\", x * 2); return 0;}\n"
        body = {"submissions": [{"language_id": C_LANG, "source_code": b64(src), "stdin": b64(str(i))} for i in range(3)]}
        st, _, data = self.a.stack.request("POST", "/submissions/batch?base64_encoded=true", body,
                                           token=self.a.stack.tokens["beta"])
        self.assertEqual(st, 201, data)
        tokens = [d["token"] for d in data]
        done = self.wait_all(self.a, "beta", tokens)
        for i, t in enumerate(tokens):
            self.assertEqual(base64.b64decode(done[t]["stdout"]).decode(), "%d\n" % (2 * i), done[t])
        recs = self.result_records(self.a, tokens) + self.result_records(self.b, tokens)
        self.assertEqual(len(recs), 3)
        self.assertEqual(len({r["judge0"]["queue"]["entry"] for r in recs}), 1, "one entry for the group")
        self.assertEqual({r["judge0"]["group"]["size"] for r in recs}, {3})

    def test_dead_host_work_is_taken_over(self):
        self.b.stop_gateway()  # a alone claims it
        st, _, data = self.a.submit("gamma", "import time\ntime.sleep(3)\nprint('survived')\n", wall_time_limit=15,
                                    cpu_time_limit=2)
        self.assertEqual(st, 201, data)
        token = data["token"]
        wait_until(lambda: self.a.get("gamma", token)[2].get("status", {}).get("id") == 2, "host a to run it")
        killed = time.monotonic()
        self.a.kill_gateway()
        self.b.start_gateway()
        # pending meanwhile, never an Internal Error (the queue owns it)
        st, _, data = self.b.get("gamma", token)
        self.assertEqual(st, 200, data)
        self.assertIn(data["status"]["id"], (1, 2), data)
        done = self.wait_all(self.b, "gamma", [token], timeout=90)
        self.assertGreaterEqual(time.monotonic() - killed, LEASE_MS / 1000 * 0.5, "taken over only once the lease ran out")
        self.assertEqual(done[token]["status"]["id"], 3, done[token])
        self.assertEqual(base64.b64decode(done[token]["stdout"]).decode(), "survived\n")
        recs = self.result_records(self.b, [token])
        self.assertEqual(len(recs), 1, recs)
        self.assertEqual(recs[0]["judge0"]["queue"]["attempt"], 2)
        # the packet says so too
        st, _, packet = self.b.stack.request("GET", "/api/v2/executions/" + recs[0]["request_id"],
                                             token=self.b.stack.tokens["gamma"])
        self.assertIn(st, (200, 403), packet)

    def test_redis_down_at_post_refuses(self):
        self.redis.stop()
        try:
            st, headers, data = self.a.submit("alpha", "print(1)\n")
            self.assertEqual(st, 503, data)
            self.assertEqual(data["code"], "store_unavailable", data)
            self.assertIn("retry-after", headers)
        finally:
            self.redis.start()
        # back, without a restart of the gateway
        self.wait_accepting(self.a)

    def test_moatctl_queue_and_metrics(self):
        # both slots busy (held until released below, not for a fixed time), then three of beta's wait
        hosts = (self.a, self.b)
        busy = [h.submit("alpha", held_program(), wall_time_limit=15, cpu_time_limit=2)[2]["token"] for h in hosts]
        self.addCleanup(lambda: [release_all(h.stack.tag) for h in hosts])  # a failure below leaves none held
        wait_until(lambda: all(self.a.get("alpha", t)[2]["status"]["id"] == 2 for t in busy)
                   and sum(len(held_roots(h.stack.tag)) for h in hosts) == 2, "both slots to be busy")
        waiting = [self.b.submit("beta", "print('late')\n")[2]["token"] for _ in range(3)]

        def shown():
            q = json.loads(self.a.moatctl("--json", "queue"))
            beta = [t for t in q.get("counts", {}).get("tenants", []) if t["tenant"] == "beta"]
            return q if beta and beta[0]["waiting"] == 3 else None
        wait_until(shown, "moatctl queue to show beta's three waiting")
        q = shown()
        self.assertEqual(q["backend_slots"], 1)
        self.assertGreaterEqual(q["counts"]["waiting"], 3)
        self.assertTrue(all(c["alive"] for c in q["counts"]["consumers"]), q)
        text = self.a.moatctl("queue")
        self.assertRegex(text, r"\n  beta +3 ")
        self.assertIn("backend slots 1", text)
        m = self.a.metrics()
        self.assertGreaterEqual(m["moat_queue_depth"], 3)
        self.assertGreaterEqual(m["moat_queue_pending"], 2)
        self.assertGreaterEqual(m["moat_queue_claims_total"], 1)
        for h in hosts:
            release_all(h.stack.tag)
        self.wait_all(self.a, "beta", waiting)
        self.wait_all(self.a, "alpha", busy)
        self.assertIn("dead letters:", self.b.moatctl("queue", "dead"))

    def test_corrupt_and_foreign_entries_are_dead_lettered(self):
        hexname = b"alpha".hex()
        stream = PREFIX + "q:s:" + hexname
        if self.redis.cli("EXISTS", stream) == "0":
            self.redis.cli("XGROUP", "CREATE", stream, "moat", "0", "MKSTREAM")
        before = int(self.redis.cli("LLEN", PREFIX + "q:dead"))
        self.redis.cli("XADD", stream, "*", "k", "1", "n", "7", "g", "x", "e", "garbage")
        self.redis.cli("XADD", stream, "*", "x", "y")
        foreign = json.dumps({"v": 1, "tenant": "beta", "parent": "p", "path": "/submissions", "key_id": "k", "client": "c",
                              "base64": False, "members": []})
        self.redis.cli("XADD", stream, "*", "k", "1", "n", str(len(foreign)), "g", "x", "e", foreign)
        self.redis.cli("HINCRBY", PREFIX + "q:w", hexname, "3")
        self.redis.cli("HINCRBY", PREFIX + "q:w", "*", "3")
        self.redis.cli("RPUSH", PREFIX + "q:ring", hexname)
        self.redis.cli("SADD", PREFIX + "q:t", hexname)
        wait_until(lambda: int(self.redis.cli("LLEN", PREFIX + "q:dead")) == before + 3, "the entries to be dead-lettered")
        dead = [json.loads(x) for x in self.redis.cli("LRANGE", PREFIX + "q:dead", "0", "2").splitlines()]
        self.assertTrue(all(d["tenant"] == "alpha" and d["why"] for d in dead), dead)
        self.assertEqual(self.redis.cli("XLEN", stream), "0")
        # and the gateways go on
        st, _, data = self.b.submit("alpha", "print('still')\n")
        self.assertEqual(st, 201, data)
        done = self.wait_all(self.a, "alpha", [data["token"]])
        self.assertEqual(base64.b64decode(done[data["token"]]["stdout"]).decode(), "still\n")


if __name__ == "__main__":
    unittest.main()
