"""Shared limits in Redis (limiter: store: redis): several real gateways,
one real backend and a real redis-server from Debian, started here on a
Unix socket in the test's temporary directory (no persistence).

What is checked, with counts and GCRA arithmetic rather than wall-clock
timing (elapsed times only ever widen an upper bound):
  - two gateways keep a tenant within its rate together (burst + rate *
    elapsed + 1), where each alone would pass its own burst;
  - the in-flight cap is one count across gateways;
  - a gateway killed (SIGKILL) holding a slot: the slot comes back by
    itself, not before about lease_ms;
  - the CPU budget is shared;
  - Redis killed and restarted under load: fail_closed answers 503
    limiter_unavailable with Retry-After while it is down and recovers
    without a gateway restart; on_unavailable: local keeps answering at
    each limit / gateways;
  - the limiter section's strict parsing and the password file's checks.
Skipped (with the reason) when redis-server is not installed.
"""

import grp
import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import unittest

from moat_harness import GATEWAY, LONG_WALL_MS, SOURCE, Stack, free_port, held_program, release_all, wait_held, \
    wait_until

REDIS = shutil.which("redis-server") or "/usr/bin/redis-server"
HAVE_REDIS = os.access(REDIS, os.X_OK)
LEASE_MS = 5000  # generous: the kill test must still see the slot held right after the kill

TENANTS = [
    # rate only: 0.5/s with a burst of 5 (the sharing test counts against this)
    ("rate", "rate: {per_second: 0.5, burst: 5}\nmax_in_flight: 64\n", ""),
    # one run at a time, held as long as the test needs
    ("single", "rate: {per_second: 1000, burst: 1000}\nmax_in_flight: 1\nlimits:\n  run_timeout_ms: %d\n" % LONG_WALL_MS,
     ""),
    ("lease", "rate: {per_second: 1000, burst: 1000}\nmax_in_flight: 1\nlimits:\n  run_timeout_ms: %d\n" % LONG_WALL_MS,
     ""),
    ("quota", "rate: {per_second: 1000, burst: 1000}\ncpu_seconds_per_minute: 1\nlimits:\n  run_timeout_ms: %d\n"
     % LONG_WALL_MS, ""),
    ("outage", "rate: {per_second: 1000, burst: 1000}\nmax_in_flight: 64\n", ""),
    # local fallback at / 2: a burst of 10 becomes 5 per gateway, 0.5/s 0.25/s
    ("local", "rate: {per_second: 0.5, burst: 10}\nmax_in_flight: 64\n", ""),
]


class Redis:
    """A redis-server on a Unix socket in dir, no persistence; kill() and start() again at will."""

    def __init__(self, directory):
        self.dir = directory
        self.socket = os.path.join(directory, "redis.sock")
        self.proc = None

    def start(self):
        self.log = open(os.path.join(self.dir, "redis.log"), "ab")
        self.proc = subprocess.Popen(
            [REDIS, "--port", "0", "--unixsocket", self.socket, "--unixsocketperm", "777", "--save", "",
             "--appendonly", "no", "--dir", self.dir], stdout=self.log, stderr=subprocess.STDOUT)
        wait_until(lambda: self.proc.poll() is not None or self.accepts(), "redis-server to start")
        if self.proc.poll() is not None:
            raise AssertionError("redis-server did not start")

    def accepts(self):
        with socket.socket(socket.AF_UNIX) as s:
            try:
                s.connect(self.socket)
                s.sendall(b"PING\r\n")
                return s.recv(16).startswith(b"+PONG")
            except OSError:
                return False

    def log_text(self):
        with open(os.path.join(self.stack.tmp, self.name + ".log"), errors="replace") as f:
            return f.read()

    def kill(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.proc = None
        self.log.close()
        try:
            os.unlink(self.socket)
        except FileNotFoundError:
            pass


class Gateway:
    """One more moat-gateway on the stack's backend and keys, with its own port, limiter section and log."""

    def __init__(self, stack, name, limiter):
        self.stack, self.name = stack, name
        self.port = free_port()
        with open(stack.config) as f:
            text = f.read()
        text = text.replace("  port: %d\n" % stack.port, "  port: %d\n" % self.port, 1)
        self.config = os.path.join(stack.tmp, name + ".conf")
        with open(self.config, "w") as f:
            f.write(limiter + text)
        # root:moat 0640, as a SIGHUP reload reads it after the privilege drop
        os.chown(self.config, 0, grp.getgrnam("moat").gr_gid)
        os.chmod(self.config, 0o640)
        self.proc = None

    def start(self):
        self.log = open(os.path.join(self.stack.tmp, self.name + ".log"), "ab")
        # a session of its own: kill() takes the supervisor and the gateway process together
        self.proc = subprocess.Popen([GATEWAY, "-c", self.config], stdout=self.log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        wait_until(lambda: self.proc.poll() is not None or self.healthy(), "gateway %s to start" % self.name)
        if self.proc.poll() is not None:
            raise AssertionError("gateway %s did not start" % self.name)
        return self

    def healthy(self):
        try:
            return self.request("GET", "/healthz", token=None, timeout=10)[0] == 200
        except OSError:
            return False

    def request(self, method, path, body=None, token="default", timeout=60):
        """Stack.request, to this gateway's port (the tests call it from several threads)."""
        conn = http.client.HTTPSConnection("127.0.0.1", self.port, context=self.stack.ssl_context(alpn=("http/1.1",)),
                                           timeout=timeout)
        h = {}
        if token == "default":
            token = self.stack.token
        if token is not None:
            h["Authorization"] = "Bearer " + token
        if body is not None:
            body = json.dumps(body)
            h["Content-Type"] = "application/json"
        try:
            conn.request(method, path, body=body, headers=h)
            resp = conn.getresponse()
            raw = resp.read()
            try:
                data = json.loads(raw)
            except ValueError:
                data = raw
            return resp.status, {k.lower(): v for k, v in resp.getheaders()}, data
        finally:
            conn.close()

    def runtimes(self, tenant):
        return self.request("GET", "/api/v2/runtimes", token=self.stack.tokens[tenant])

    def execute(self, tenant, code):
        body = {"language": "python", "version": "*", "files": [{"content": code}], "run_timeout": LONG_WALL_MS}
        return self.request("POST", "/api/v2/execute", body, token=self.stack.tokens[tenant])

    def log_text(self):
        with open(os.path.join(self.stack.tmp, self.name + ".log"), errors="replace") as f:
            return f.read()

    def kill(self):
        """SIGKILL to every process of this gateway: nothing is released, nothing says goodbye."""
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        wait_until(lambda: not self.healthy(), "gateway %s to die" % self.name)
        self.proc = None
        self.log.close()

    def stop(self, sig=signal.SIGTERM):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None
        self.log.close()


def password_file(directory, name, password):
    """A limiter.redis.password_file for gateway name: root:moat 0640 (a reload reads it as moat)."""
    path = os.path.join(directory, name + ".password")
    with open(path, "w") as f:
        f.write(password + "\n")
    os.chown(path, 0, grp.getgrnam("moat").gr_gid)
    os.chmod(path, 0o640)
    return path


def limiter(redis, on_unavailable="fail_closed"):
    return ("limiter:\n  store: redis\n  redis: {socket: %s, timeout_ms: 500, lease_ms: %d, prefix: \"moat-e2e:\"}\n"
            "  on_unavailable: %s\n  gateways: 2\n" % (redis.socket, LEASE_MS, on_unavailable))


@unittest.skipUnless(HAVE_REDIS, "redis-server is not installed (Debian: apt-get install redis-server)")
class SharedLimitsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        # the backend, keys and temporary directory of a Stack; its own gateway is not started
        cls.stack = Stack(tenants=TENANTS, backend_args=["-o", "run_timeout=%d" % LONG_WALL_MS])
        cls.redis = Redis(cls.stack.tmp)
        cls.redis.start()
        cls.stack.start_backend()
        cls.a = Gateway(cls.stack, "gw-a", limiter(cls.redis)).start()
        cls.b = Gateway(cls.stack, "gw-b", limiter(cls.redis)).start()
        cls.local = Gateway(cls.stack, "gw-local", limiter(cls.redis, "local")).start()

    @classmethod
    def tearDownClass(cls):
        release_all(cls.stack.tag)
        for g in (cls.a, cls.b, cls.local):
            g.stop()
        cls.redis.kill()
        cls.stack.stop()

    def setUp(self):
        if self.redis.proc is None:
            self.redis.start()
        # every worker of every gateway uses Redis again (after a test that stopped it, a worker
        # may still be waiting out its reconnect backoff): ten answers in a row, on new
        # connections that the kernel spreads over the workers
        for g in (self.a, self.b, self.local):
            streak = [0]

            def settled():
                streak[0] = streak[0] + 1 if g.runtimes("outage")[0] == 200 else 0
                return streak[0] >= 10

            wait_until(settled, "gateway %s to use Redis on every worker" % g.name)

    def assert_refused(self, got, status, code, text):
        st, headers, data = got
        self.assertEqual(st, status, data)
        self.assertEqual(data["code"], code, data)
        self.assertIn(text, data["message"])
        self.assertEqual(data["request_id"], headers["x-request-id"])
        return headers

    def test_rate_is_shared_by_two_gateways(self):
        # 30 requests alternating between the gateways, as fast as they come back.
        # GCRA: over elapsed seconds the tenant gets at most burst + rate * elapsed
        # (+1 for the rounding of T); each gateway alone would pass its own burst.
        allowed, refused = 0, 0
        start = time.monotonic()
        for i in range(30):
            st, headers, data = (self.a if i % 2 == 0 else self.b).runtimes("rate")
            self.assertIn(st, (200, 429), data)
            self.assertEqual(headers["ratelimit-limit"], "5")
            if st == 200:
                allowed += 1
            else:
                refused += 1
                self.assertEqual(data["code"], "rate_limited", data)
                self.assertGreaterEqual(int(headers["retry-after"]), 1)
        elapsed = time.monotonic() - start
        self.assertGreaterEqual(allowed, 5)  # the whole burst, shared
        self.assertLessEqual(allowed, 5 + int(0.5 * elapsed) + 1, "elapsed %.1f s" % elapsed)
        self.assertEqual(allowed + refused, 30)

    def test_in_flight_cap_is_shared(self):
        results = {}
        t = threading.Thread(target=lambda: results.setdefault("held", self.a.execute("single", held_program())))
        t.start()
        try:
            wait_held(self.stack.tag)  # gateway a's run holds the tenant's one slot
            got = self.b.execute("single", "print(1)")
        finally:
            release_all(self.stack.tag)
            t.join()
        self.assert_refused(got, 429, "too_many_in_flight", "in flight")
        self.assertEqual(results["held"][0], 200, results["held"])
        # the slot came back through gateway a's release, and b sees it
        self.assertEqual(self.b.execute("single", "print(2)")[0], 200)

    def test_killed_gateway_slots_come_back_after_the_lease(self):
        doomed = Gateway(self.stack, "gw-doomed", limiter(self.redis)).start()
        def held():
            try:
                doomed.execute("lease", held_program())
            except OSError:
                pass  # its gateway is killed under it

        t = threading.Thread(target=held, daemon=True)
        try:
            t.start()
            wait_held(self.stack.tag)
            doomed.kill()
            killed = time.monotonic()
            # its slot is still counted: nobody released it
            self.assert_refused(self.a.execute("lease", "print(1)"), 429, "too_many_in_flight", "in flight")
        finally:
            release_all(self.stack.tag)
        # ... until its lease runs out, by itself
        wait_until(lambda: self.a.execute("lease", "print(1)")[0] == 200, "the dead gateway's slot to expire")
        # not before its last heartbeat (at most lease/3 before the kill) plus the lease
        self.assertGreaterEqual(time.monotonic() - killed, LEASE_MS / 1000 * 0.6)

    def test_cpu_budget_is_shared(self):
        st, _, data = self.a.execute("quota", "import time\nt = time.process_time()\n"
                                              "while time.process_time() - t < 1.5: pass\n")
        self.assertEqual(st, 200, data)
        self.assertGreaterEqual(data["run"]["cpu_time"], 1000)
        headers = self.assert_refused(self.b.execute("quota", "print(1)"), 429, "cpu_quota_exhausted", "CPU-time budget")
        self.assertGreater(int(headers["retry-after"]), 30)

    def baseline_s(self, gateway, n=20):
        """The slowest of n answers with Redis up: this run's yardstick for "bounded"."""
        worst = 0.0
        for _ in range(n):
            t0 = time.monotonic()
            self.assertEqual(gateway.runtimes("outage")[0], 200)
            worst = max(worst, time.monotonic() - t0)
        return worst

    def test_redis_down_fail_closed_then_recovers(self):
        bound = 10 * self.baseline_s(self.b) + 1.0  # generous: a hang would take the client's 60 s
        # load from another thread all along: every answer is 200 or 503, never a hang or another error
        seen, took, stop = [], [], threading.Event()

        def load():
            while not stop.is_set():
                t0 = time.monotonic()
                seen.append(self.b.runtimes("outage")[0])
                took.append(time.monotonic() - t0)

        t = threading.Thread(target=load)
        t.start()
        try:
            wait_until(lambda: len(seen) >= 10, "the load to run")
            self.redis.kill()
            got = wait_until(lambda: (lambda r: r[0] == 503 and r)(self.a.runtimes("outage")), "a 503 with Redis down")
            headers = self.assert_refused(got, 503, "limiter_unavailable", "rate limiter unavailable")
            self.assertGreaterEqual(int(headers["retry-after"]), 1)
            self.redis.start()
            # recovery without restarting the gateways
            wait_until(lambda: self.a.runtimes("outage")[0] == 200, "gateway a to use Redis again")
            wait_until(lambda: self.b.runtimes("outage")[0] == 200, "gateway b to use Redis again")
        finally:
            stop.set()
            t.join()
        self.assertTrue(set(seen) <= {200, 503}, set(seen))
        self.assertIn(503, seen)
        took.sort()
        self.assertLessEqual(took[int(len(took) * 0.99)], bound, "p99 of %d answers" % len(took))
        self.assertIsNone(self.a.proc.poll())
        self.assertIsNone(self.b.proc.poll())

    def test_hung_redis_answers_within_the_timeout(self):
        # Redis stopped (SIGSTOP), not gone: its socket accepts and never answers
        bound = 10 * self.baseline_s(self.a) + 0.5 + 1.0  # timeout_ms is 500
        self.redis.proc.send_signal(signal.SIGSTOP)
        try:
            t0 = time.monotonic()
            got = self.a.runtimes("outage")
            took = time.monotonic() - t0
        finally:
            self.redis.proc.send_signal(signal.SIGCONT)
        self.assert_refused(got, 503, "limiter_unavailable", "rate limiter unavailable")
        self.assertLessEqual(took, bound)
        wait_until(lambda: self.a.runtimes("outage")[0] == 200, "gateway a to use Redis again")

    def test_reload_keeps_the_running_limiter(self):
        with open(self.b.config) as f:
            text = f.read()
        with open(self.b.config, "w") as f:
            f.write(text.replace("lease_ms: %d" % LEASE_MS, "lease_ms: %d" % (LEASE_MS + 1000), 1))
        try:
            self.b.proc.send_signal(signal.SIGHUP)
            wait_until(lambda: "configuration reloaded" in self.b.log_text(), "gateway b to reload")
            self.assertIn("the limiter section changed; the running limiter (redis) stays until a restart",
                          self.b.log_text())
            self.assertEqual(self.b.runtimes("outage")[0], 200)
        finally:
            with open(self.b.config, "w") as f:
                f.write(text)

    def test_redis_down_local_mode_answers_at_a_share(self):
        self.assertEqual(self.local.runtimes("outage")[0], 200)  # its connection is up
        self.redis.kill()
        try:
            # the tenant's burst is 10 at 0.5/s; locally, with gateways: 2, 5 at 0.25/s
            allowed, start = 0, time.monotonic()
            for _ in range(20):
                st, headers, data = self.local.runtimes("local")
                self.assertIn(st, (200, 429), data)
                allowed += st == 200
            elapsed = time.monotonic() - start
            self.assertGreaterEqual(allowed, 5)
            self.assertLessEqual(allowed, 5 + int(0.25 * elapsed) + 1, "elapsed %.1f s" % elapsed)
            self.assertEqual(headers["ratelimit-limit"], "5")
            # while gateway a (fail_closed) refuses
            self.assertEqual(self.a.runtimes("local")[0], 503)
        finally:
            self.redis.start()
        wait_until(lambda: self.local.runtimes("outage")[0] == 200 and self.local.runtimes("local")[1].get(
            "ratelimit-limit") == "10", "the local gateway to use Redis again")


@unittest.skipUnless(HAVE_REDIS, "redis-server is not installed (Debian: apt-get install redis-server)")
class TcpRedisTest(unittest.TestCase):
    """A Redis on 127.0.0.1 with requirepass: the gateway reaches it over TCP
    (the seccomp filter then allows inet sockets) and authenticates with the
    password file; a wrong password fails closed."""

    @classmethod
    def setUpClass(cls):
        cls.stack = Stack(tenants=[("rate", "rate: {per_second: 0.001, burst: 2}\n", "")])
        cls.port = free_port()
        cls.log = open(os.path.join(cls.stack.tmp, "redis-tcp.log"), "ab")
        cls.redis = subprocess.Popen([REDIS, "--port", str(cls.port), "--bind", "127.0.0.1", "--requirepass", "s3cret",
                                      "--save", "", "--appendonly", "no", "--dir", cls.stack.tmp],
                                     stdout=cls.log, stderr=subprocess.STDOUT)
        wait_until(lambda: cls.redis.poll() is not None or cls.accepts(), "redis-server on TCP to start")
        cls.stack.start_backend()
        cls.gateways = []

    @classmethod
    def accepts(cls):
        try:
            with socket.create_connection(("127.0.0.1", cls.port), timeout=5) as s:
                s.sendall(b"PING\r\n")
                return s.recv(64).startswith(b"-NOAUTH")
        except OSError:
            return False

    @classmethod
    def tearDownClass(cls):
        for g in cls.gateways:
            g.stop()
        cls.redis.kill()
        cls.redis.wait()
        cls.log.close()
        cls.stack.stop()

    def gateway(self, name, password):
        path = password_file(self.stack.tmp, name, password)
        g = Gateway(self.stack, name, "limiter:\n  store: redis\n  redis: {host: 127.0.0.1, port: %d, password_file: %s}\n"
                    % (self.port, path)).start()
        self.gateways.append(g)
        return g

    def test_password_and_inet_socket(self):
        g = self.gateway("gw-tcp", "s3cret")
        self.assertEqual([g.runtimes("rate")[0] for _ in range(3)], [200, 200, 429])
        # the state is in Redis: a second gateway sees the bucket empty
        self.assertEqual(self.gateway("gw-tcp2", "s3cret").runtimes("rate")[0], 429)

    def test_wrong_password_fails_closed(self):
        g = self.gateway("gw-badpass", "wrong")
        st, headers, data = g.runtimes("rate")
        self.assertEqual((st, data["code"]), (503, "limiter_unavailable"), data)
        self.assertGreaterEqual(int(headers["retry-after"]), 1)
        self.assertIn("AUTH refused", g.log_text())


@unittest.skipUnless(HAVE_REDIS, "redis-server is not installed (Debian: apt-get install redis-server)")
class LimiterConfigTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="moat-redis-conf-")
        subprocess.run([os.path.join(SOURCE, "certs", "gen-dev-certs.sh"), self.tmp], check=True, capture_output=True)
        os.chmod(self.tmp, 0o755)
        self.base = "tls: {certificate: %s/server.pem, key: %s/server.key}\n" % (self.tmp, self.tmp)
        self.password = os.path.join(self.tmp, "redis.password")
        with open(self.password, "w") as f:
            f.write("s3cret\n")
        os.chown(self.password, 0, grp.getgrnam("moat").gr_gid)
        os.chmod(self.password, 0o640)

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def check(self, text):
        path = os.path.join(self.tmp, "gw.conf")
        with open(path, "w") as f:
            f.write(self.base + text + "tenants:\n  - name: t\n    languages: [python]\n")
        os.chown(path, 0, grp.getgrnam("moat").gr_gid)
        os.chmod(path, 0o640)
        return subprocess.run([GATEWAY, "-n", "-c", path], capture_output=True, text=True), path

    def test_good_sections(self):
        for text in ("limiter: {store: memory}\n",
                     "limiter:\n  store: redis\n  redis: {socket: /run/redis/redis.sock}\n",
                     "limiter:\n  store: redis\n  redis: {host: 10.0.0.5, port: 6380, password_file: %s, db: 3,"
                     " prefix: \"a:b:\", connect_timeout_ms: 500, timeout_ms: 100, lease_ms: 10000}\n"
                     "  on_unavailable: local\n  gateways: 3\n" % self.password,
                     "limiter:\n  store: redis\n  redis: {host: \"::1\", password_file: %s}\n" % self.password,
                     "limiter:\n  store: redis\n  redis: {sentinels: [\"10.0.0.7:26379\", \"[fd00::8]:26380\"], master: m1,"
                     " password_file: %s, sentinel_password_file: %s}\n" % (self.password, self.password),
                     "limiter:\n  store: redis\n  redis: {socket: /x}\nsubmissions: {store: redis, queue: redis,"
                     " durability: replicated}\n"):
            with self.subTest(text=text):
                p, _ = self.check(text)
                self.assertEqual((p.returncode, p.stdout.strip()), (0, "configuration OK"), p.stderr)

    def test_errors_name_file_line_and_reason(self):
        cases = [
            ("limiter: {store: disk}\n", ":2: limiter.store must be memory or redis"),
            ("limiter: {stor: redis}\n", ":2: unknown key 'stor' in limiter"),
            ("limiter:\n  store: redis\n", ":3: limiter: store: redis needs a redis section"),
            ("limiter:\n  redis: {socket: /x}\n", ":3: limiter.redis needs store: redis"),
            ("limiter:\n  store: redis\n  redis: {socket: /x, host: 10.0.0.1}\n", ":4: limiter.redis: give one of socket, host (and port), or sentinels"),
            ("limiter:\n  store: redis\n  redis: {host: redis.example}\n", ":4: limiter.redis.host must be a numeric"),
            ("limiter:\n  store: redis\n  redis: {host: 10.0.0.1}\n", ":4: limiter.redis: a Redis reached over TCP "
                                                                      "needs a password_file"),
            ("limiter:\n  store: redis\n  redis: {socket: relative.sock}\n", ":4: limiter.redis.socket must be an "
                                                                             "absolute path"),
            ("limiter:\n  store: redis\n  redis: {socket: /%s}\n" % ("x" * 120), ":4: limiter.redis.socket is longer than "
                                                                             "a Unix socket path may be (107 bytes)"),
            ("limiter:\n  store: redis\n  redis: {socket: /x, lease_ms: 10}\n", ":4: limiter.redis.lease_ms must be "
                                                                                 "between 500 and 3600000"),
            ("limiter:\n  store: redis\n  redis: {socket: /x, prefix: \"a b\"}\n", ":4: limiter.redis.prefix"),
            ("limiter:\n  store: redis\n  redis: {socket: /x}\n  on_unavailable: open\n",
             ":5: limiter.on_unavailable must be fail_closed or local"),
            ("limiter:\n  store: redis\n  redis: {socket: /x}\n  gateways: 0\n", ":5: limiter.gateways must be between"),
            ("limiter:\n  store: redis\n  redis: {socket: /x, password: hunter2}\n", ":4: unknown key 'password'"),
            ("limiter:\n  store: redis\n  redis: {sentinels: [\"10.0.0.7:26379\"], master: m}\n",
             ":4: limiter.redis: a Redis reached over TCP needs a password_file"),
            ("limiter:\n  store: redis\n  redis: {sentinels: [\"10.0.0.7:26379\"], password_file: %s}\n" % self.password,
             ":4: limiter.redis: sentinels and master go together"),
            ("limiter:\n  store: redis\n  redis: {sentinels: [\"sentinel.example:26379\"], master: m}\n",
             ":4: limiter.redis.sentinels: 'sentinel.example:26379': a numeric address and a port"),
            ("limiter:\n  store: redis\n  redis: {sentinels: [\"10.0.0.7\"], master: m}\n",
             ":4: limiter.redis.sentinels: want \"host:port\""),
            ("limiter:\n  store: redis\n  redis: {sentinels: [], master: m}\n",
             ":4: limiter.redis.sentinels must be a sequence of 1 to 16"),
            ("limiter:\n  store: redis\n  redis: {socket: /x, sentinels: [\"10.0.0.7:1\"], master: m}\n",
             ":4: limiter.redis: give one of socket, host (and port), or sentinels"),
            ("limiter:\n  store: redis\n  redis: {socket: /x}\nsubmissions: {store: redis, durability: always}\n",
             ":5: submissions.durability must be primary or replicated"),
            ("limiter:\n  store: redis\n  redis: {socket: /x}\nsubmissions: {store: redis, durability: replicated}\n",
             ": submissions.durability replicated needs submissions.queue redis"),
        ]
        for text, want in cases:
            with self.subTest(want=want):
                p, path = self.check(text)
                self.assertEqual(p.returncode, 1, p.stdout)
                self.assertIn(path + want, p.stderr)
                self.assertEqual(len(p.stderr.strip().splitlines()), 1, p.stderr)

    def test_password_file_must_be_secret(self):
        text = "limiter:\n  store: redis\n  redis: {socket: /x, password_file: %s}\n" % self.password
        for mode, want in ((0o644, "others may read it"), (0o660, "writable by group or others")):
            with self.subTest(mode=oct(mode)):
                os.chmod(self.password, mode)
                p, path = self.check(text)
                self.assertEqual(p.returncode, 1, p.stdout)
                self.assertIn(want, p.stderr)
        os.chmod(self.password, 0o640)
        with open(self.password, "w") as f:
            f.write("two\nlines\n")
        p, path = self.check(text)
        self.assertEqual(p.returncode, 1, p.stdout)
        self.assertIn("want one line", p.stderr)


if __name__ == "__main__":
    unittest.main()
