"""The admin store in Redis (control.store_backend: redis): two real
gateways, each with its own audit trail, control socket and copy of the
store, one real backend, and a real redis-server from Debian on a Unix
socket in the test's temporary directory (no persistence).

What is checked:
  - a key made with moatctl on gateway a works on gateway b;
  - a revocation on either gateway is seen by the other within 1 s of
    moatctl's return (the first 401 of requests polled meanwhile);
  - a change written to Redis without a message (a missed publish) is
    applied by the periodic resync; a document the parser refuses is
    logged and the gateways keep their running state;
  - Redis down: moatctl changes fail with one clear line (exit 1), both
    gateways keep serving their last state; Redis back (empty: it is
    seeded from a gateway's copy): changes flow again, no restart;
  - concurrent moatctl runs on both gateways lose no update;
  - a key used on one gateway is listed as used on the other (its last use
    in Redis, to the minute, the later time kept);
  - the admin record is on the gateway where the change was made; the
    other logs and records the version it applied; the section's strict
    parsing; a TCP Redis with a password (and a wrong one).
Skipped (with the reason) when redis-server is not installed.
"""

import json
import os
import signal
import socket
import subprocess
import threading
import time
import unittest
from concurrent.futures import ThreadPoolExecutor

from moat_harness import GATEWAY, MOAT_AUDIT, MOATCTL, Stack, free_port, wait_until
from test_redis_limits import HAVE_REDIS, REDIS, Gateway, Redis, password_file

PREFIX = "moat-e2e:"
RESYNC_S = 5.0  # GW_ADMIN_REDIS_RESYNC_MS
PROPAGATION_S = 1.0  # the promise: every gateway within 1 s


def resp(where, *args, password=None):
    """One Redis command (RESP) over its Unix socket (a path) or TCP ((host, port)), after AUTH with
    password if given; the reply decoded: bytes, int, list, None; errors raise."""
    def read_reply(f):
        line = f.readline()
        kind, rest = line[:1], line[1:-2]
        if kind == b"+":
            return rest
        if kind == b"-":
            raise AssertionError("redis: " + rest.decode())
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            if n < 0:
                return None
            data = f.read(n + 2)
            return data[:-2]
        if kind == b"*":
            n = int(rest)
            return None if n < 0 else [read_reply(f) for _ in range(n)]
        raise AssertionError("redis: unexpected reply %r" % line)

    def encode(words):
        out = b"*%d\r\n" % len(words)
        for a in words:
            a = a if isinstance(a, bytes) else str(a).encode()
            out += b"$%d\r\n%s\r\n" % (len(a), a)
        return out

    with (socket.create_connection(where, timeout=30) if isinstance(where, tuple) else socket.socket(socket.AF_UNIX)) as s:
        if not isinstance(where, tuple):
            s.connect(where)
        with s.makefile("rb") as f:
            if password is not None:
                s.sendall(encode(("AUTH", password)))
                read_reply(f)
            s.sendall(encode(args))
            return read_reply(f)


class AdminGateway(Gateway):
    """test_redis_limits' extra gateway with its own audit trail, control
    socket and copy of the store, sharing the store in Redis."""

    def __init__(self, stack, name, redis=None, connection=None):
        """connection: the limiter's redis mapping's fields (default: redis' Unix socket)."""
        connection = connection or "socket: %s" % redis.socket
        self.audit_dir = os.path.join(stack.tmp, name + "-audit")
        subprocess.run([MOAT_AUDIT, "init", self.audit_dir], check=True, capture_output=True)
        self.control = os.path.join(stack.tmp, name + ".sock")
        self.store = os.path.join(stack.tmp, name + "-store.json")
        # on_unavailable: local, so that with Redis down the gateways answer and show which keys they hold
        super().__init__(stack, name, "limiter:\n  store: redis\n  redis: {%s, timeout_ms: 500, "
                         "connect_timeout_ms: 500, prefix: \"%s\"}\n  on_unavailable: local\n  gateways: 2\n"
                         "control:\n  socket: %s\n  store: %s\n  store_backend: redis\n  last_used_every_s: 1\n"
                         % (connection, PREFIX, self.control, self.store))
        with open(self.config) as f:
            text = f.read()
        with open(self.config, "w") as f:  # the same file: root:moat 0640 stays
            f.write(text.replace("  dir: %s\n" % stack.audit_dir, "  dir: %s\n" % self.audit_dir, 1))

    def stop(self):
        if hasattr(self, "log"):  # started
            super().stop()
        subprocess.run("chattr -a %s/audit-*.log %s/audit-*.pack 2>/dev/null" % (self.audit_dir, self.audit_dir),
                       shell=True)

    def runtimes(self, token):
        return self.request("GET", "/api/v2/runtimes", token=token, timeout=30)[0]

    def moatctl(self, *args):
        return subprocess.run([MOATCTL, "--socket", self.control, *args], capture_output=True, text=True, timeout=180)

    def ok(self, *args):
        p = self.moatctl(*args)
        if p.returncode != 0:
            raise AssertionError("moatctl on %s %s: exit %d: %s" % (self.name, " ".join(args), p.returncode, p.stderr))
        return p

    def new_key(self, tenant):
        reply = json.loads(self.ok("--json", "key", "create", "--tenant", tenant).stdout)
        return reply["token"], reply["key_id"]

    def admin_records(self):
        p = subprocess.run([MOAT_AUDIT, "export", self.audit_dir], capture_output=True, text=True)
        if p.returncode != 0:
            raise AssertionError("moat-audit export failed: " + p.stderr)
        return [r for r in (json.loads(l) for l in p.stdout.splitlines() if l.strip()) if r.get("type") == "admin"]


def poll_until_401(gateway, token, results, stop):
    """From another thread: GET with token on gateway until a 401 (or stop); (monotonic time, status) each."""
    while not stop.is_set():
        st = gateway.runtimes(token)
        results.append((time.monotonic(), st))
        if st == 401:
            return


@unittest.skipUnless(HAVE_REDIS, "redis-server is not installed (Debian: apt-get install redis-server)")
class RedisAdminTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        # the backend, certificates and temporary directory of a Stack; its own gateway is not started
        # each part is stopped by a class cleanup, so a failure half-way leaves nothing running
        cls.stack = Stack()
        cls.addClassCleanup(cls.stack.stop)
        cls.redis = Redis(cls.stack.tmp)
        cls.redis.start()
        cls.addClassCleanup(lambda: cls.redis.proc is not None and cls.redis.kill())
        cls.stack.start_backend()
        cls.a = AdminGateway(cls.stack, "gw-a", cls.redis)
        cls.addClassCleanup(cls.a.stop)
        cls.a.start()
        cls.b = AdminGateway(cls.stack, "gw-b", cls.redis)
        cls.addClassCleanup(cls.b.stop)
        cls.b.start()
        cls.a.ok("tenant", "add", "acme", "rate.per_second=1000", "rate.burst=1000", "max_in_flight=64")

    def setUp(self):
        if self.redis.proc is None:
            self.redis.start()

    def version(self):
        v = resp(self.redis.socket, "HGET", PREFIX + "admin:store", "version")
        return int(v) if v is not None else 0

    def wait_works(self, gateway, token):
        wait_until(lambda: gateway.runtimes(token) == 200, "the key to work on %s" % gateway.name, detail=gateway.log_text)

    def baseline_s(self, gateway, token, n=10):
        """The slowest of n answers: this run's yardstick for one request (the polling's granularity)."""
        worst = 0.0
        for _ in range(n):
            t0 = time.monotonic()
            self.assertEqual(gateway.runtimes(token), 200)
            worst = max(worst, time.monotonic() - t0)
        return worst

    def test_a_key_made_on_one_gateway_works_on_the_other(self):
        token, kid = self.a.new_key("acme")
        self.assertEqual(self.a.runtimes(token), 200)  # live on a when moatctl returns
        self.wait_works(self.b, token)
        # both copies hold it (the hash only), both gateways' users' files, 0600
        for g in (self.a, self.b):
            with open(g.store) as f:
                text = f.read()
            self.assertIn(kid, text)
            self.assertNotIn(token, text)
            st = os.stat(g.store)
            self.assertEqual(st.st_mode & 0o777, 0o600)
        # and b's moatctl sees it too, from Redis
        listed = json.loads(self.b.ok("--json", "key", "list", "--tenant", "acme").stdout)["keys"]
        self.assertIn(kid, [k["id"] for k in listed])

    def test_a_key_used_on_one_gateway_is_listed_as_used_on_the_other(self):
        token, kid = self.a.new_key("acme")
        row = lambda g: next(k for k in json.loads(g.ok("--json", "key", "list").stdout)["keys"] if k["id"] == kid)
        self.assertIsNone(row(self.b)["last_used"])  # b lists it from Redis, and has not seen it used
        used_at = time.time()
        self.assertEqual(self.a.runtimes(token), 200)  # on a only
        wait_until(lambda: row(self.b)["last_used"] is not None, "b to list the key as used", detail=self.a.log_text)
        stored = int(resp(self.redis.socket, "HGET", PREFIX + "admin:used", kid))
        self.assertEqual(stored % 60, 0)
        self.assertTrue(used_at - 60 < stored <= used_at, (stored, used_at))
        # a later time already there (another gateway's clock) is kept: a flush that also carries a
        # second key's first use (so it surely ran after this) leaves the field as it was
        resp(self.redis.socket, "HSET", PREFIX + "admin:used", kid, str(stored + 600))
        token2, kid2 = self.a.new_key("acme")
        self.assertEqual(self.a.runtimes(token), 200)
        self.assertEqual(self.a.runtimes(token2), 200)
        wait_until(lambda: resp(self.redis.socket, "HGET", PREFIX + "admin:used", kid2) is not None, "the second key's use")
        self.assertEqual(int(resp(self.redis.socket, "HGET", PREFIX + "admin:used", kid)), stored + 600)

    def revocation_seen_within(self, on, other):
        token, kid = on.new_key("acme")
        self.wait_works(other, token)
        slack = self.baseline_s(other, token)
        seen, stop = [], threading.Event()
        t = threading.Thread(target=poll_until_401, args=(other, token, seen, stop))
        t.start()
        try:
            wait_until(lambda: len(seen) >= 3, "requests before the revocation")
            on.ok("key", "revoke", kid)
            returned = time.monotonic()
            self.assertEqual(on.runtimes(token), 401)  # at once where the change was made
            t.join(timeout=30)
        finally:
            stop.set()
            t.join()
        first_401 = next((at for at, st in seen if st == 401), None)
        self.assertIsNotNone(first_401, "gateway %s never refused the revoked key" % other.name)
        self.assertEqual({st for at, st in seen if at < first_401}, {200})
        took = max(0.0, first_401 - returned)
        # one request's time of slack: the poll that saw the 401 may have started just before it was live
        self.assertLessEqual(took, PROPAGATION_S + slack, "revocation reached %s %.3f s after moatctl returned"
                             % (other.name, took))
        return took

    def test_revocation_is_seen_by_both_gateways_within_a_second(self):
        self.revocation_seen_within(self.a, self.b)
        self.revocation_seen_within(self.b, self.a)
        wait_until(lambda: "applied version" in self.b.log_text(), "b to log the version it applied")

    def test_a_missed_publish_heals_by_the_resync(self):
        token, kid = self.a.new_key("acme")
        self.wait_works(self.b, token)
        # the key revoked in Redis by hand: a new version, and no message
        v = self.version()
        doc = json.loads(resp(self.redis.socket, "HGET", PREFIX + "admin:store", "doc"))
        for k in doc["keys"]:
            if k["id"] == kid:
                k["state"] = "revoked"
                k["revoked"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        resp(self.redis.socket, "HSET", PREFIX + "admin:store", "version", v + 1, "doc", json.dumps(doc))
        for g in (self.a, self.b):
            wait_until(lambda: g.runtimes(token) == 401, "the resync to reach %s" % g.name, timeout=RESYNC_S * 4,
                       detail=g.log_text)
            wait_until(lambda: "applied version %d " % (v + 1) in g.log_text(), "%s to log version %d" % (g.name, v + 1))

    def test_a_document_the_parser_refuses_keeps_the_running_state(self):
        token, kid = self.a.new_key("acme")
        self.wait_works(self.b, token)
        v = self.version()
        good = resp(self.redis.socket, "HGET", PREFIX + "admin:store", "doc")
        doc = json.loads(good)
        doc["keys"].append({"id": "0" * 12, "tenant": "no-such-tenant", "sha256": "0" * 64, "state": "active",
                            "created": "2026-01-01T00:00:00Z"})
        resp(self.redis.socket, "HSET", PREFIX + "admin:store", "version", v + 1, "doc", json.dumps(doc))
        resp(self.redis.socket, "PUBLISH", PREFIX + "admin:changed", v + 1)
        for g in (self.a, self.b):
            wait_until(lambda: "version %d of the admin store in Redis refused" % (v + 1) in g.log_text(),
                       "%s to refuse version %d" % (g.name, v + 1), detail=g.log_text)
            self.assertIn("no-such-tenant", g.log_text())
            self.assertEqual(g.runtimes(token), 200)  # the running state
        # a good version after it is applied as usual
        resp(self.redis.socket, "HSET", PREFIX + "admin:store", "version", v + 2, "doc", good)
        resp(self.redis.socket, "PUBLISH", PREFIX + "admin:changed", v + 2)
        for g in (self.a, self.b):
            wait_until(lambda: "applied version %d " % (v + 2) in g.log_text() or
                       "holds version %d " % (v + 2) in g.log_text(), "%s to apply version %d" % (g.name, v + 2),
                       detail=g.log_text)
        self.a.ok("key", "revoke", kid)

    def test_redis_down_changes_fail_gateways_keep_their_state_and_recover(self):
        token, kid = self.a.new_key("acme")
        gone, gone_id = self.a.new_key("acme")
        self.a.ok("key", "revoke", gone_id)
        self.wait_works(self.b, token)
        wait_until(lambda: self.b.runtimes(gone) == 401, "b to see the revocation")
        self.redis.kill()
        try:
            for g in (self.a, self.b):
                p = g.moatctl("key", "create", "--tenant", "acme")
                self.assertEqual(p.returncode, 1, p.stdout + p.stderr)
                self.assertIn("the admin store in Redis at unix:%s is unreachable" % self.redis.socket, p.stderr)
                self.assertEqual(len(p.stderr.strip().splitlines()), 1, p.stderr)
                p = g.moatctl("key", "revoke", kid)
                self.assertEqual(p.returncode, 1, p.stderr)
                # the last state holds: the good key works, the revoked one does not
                self.assertEqual(g.runtimes(token), 200)
                self.assertEqual(g.runtimes(gone), 401)
                status = json.loads(g.ok("--json", "status").stdout)["redis"]
                self.assertFalse(status["connected"], status)
                self.assertIn("NOT CONNECTED", g.ok("status").stdout)
            wait_until(lambda: "moatctl changes fail until it answers" in self.b.log_text(), "b to log the outage")
        finally:
            self.redis.start()  # empty: no persistence
        # back, without restarting anything: seeded from a copy, and changes flow again
        reply = wait_until(lambda: (lambda p: p.returncode == 0 and json.loads(p.stdout))(
            self.a.moatctl("--json", "key", "create", "--tenant", "acme")), "moatctl on a to work again")
        fresh = reply["token"]
        self.wait_works(self.b, fresh)
        self.assertEqual(self.b.runtimes(token), 200)
        self.assertEqual(self.b.runtimes(gone), 401)
        for g in (self.a, self.b):
            wait_until(lambda: json.loads(g.ok("--json", "status").stdout)["redis"]["connected"],
                       "%s to reconnect" % g.name)
        self.assertIsNone(self.a.proc.poll())
        self.assertIsNone(self.b.proc.poll())

    def test_a_hung_redis_bounds_every_call(self):
        # Redis stopped (SIGSTOP), not gone: its socket accepts and never answers.  A change fails
        # within the section's timeouts (500 ms each here), and another client of the control
        # socket meanwhile waits no longer than those: the supervisor never hangs on Redis.
        token, kid = self.a.new_key("acme")
        self.wait_works(self.b, token)
        baseline = max(self.timed(lambda: self.a.ok("status"))[0] for _ in range(5))
        bound = baseline + 0.5 + 0.5 + 1.0  # a timed-out call, a reconnect's connect and its first command, slack
        self.redis.proc.send_signal(signal.SIGSTOP)
        try:
            took, p = self.timed(lambda: self.a.moatctl("key", "revoke", kid))
            self.assertEqual(p.returncode, 1, p.stdout + p.stderr)
            self.assertIn("the admin store in Redis at unix:%s" % self.redis.socket, p.stderr)
            self.assertLessEqual(took, bound + 0.5, p.stderr)
            for _ in range(5):
                took, p = self.timed(lambda: self.a.moatctl("status"))
                self.assertEqual(p.returncode, 0, p.stderr)
                self.assertLessEqual(took, bound)
            self.assertEqual(self.b.runtimes(token), 200)  # the last state
        finally:
            self.redis.proc.send_signal(signal.SIGCONT)
        wait_until(lambda: json.loads(self.a.ok("--json", "status").stdout)["redis"]["connected"], "a to reconnect")
        # at once: the lock Redis took when it woke (the timed-out SET) is a's own, which it retakes
        self.a.ok("key", "revoke", kid)
        wait_until(lambda: self.b.runtimes(token) == 401, "the revocation to reach b")

    @staticmethod
    def timed(fn):
        t0 = time.monotonic()
        out = fn()
        return time.monotonic() - t0, out

    def test_concurrent_moatctl_on_both_gateways_loses_no_update(self):
        def create(i):
            g = (self.a, self.b)[i % 2]
            return g.moatctl("--json", "key", "create", "--tenant", "acme", "--note", "parallel %d" % i)

        with ThreadPoolExecutor(max_workers=16) as pool:
            runs = list(pool.map(create, range(16)))
        made = []
        for p in runs:
            self.assertEqual(p.returncode, 0, p.stderr)
            made.append(json.loads(p.stdout))
        doc = json.loads(resp(self.redis.socket, "HGET", PREFIX + "admin:store", "doc"))
        ids = [k["id"] for k in doc["keys"]]
        self.assertEqual(len(ids), len(set(ids)))
        for m in made:
            self.assertIn(m["key_id"], ids)
        # every one works on both gateways
        for m in made:
            self.wait_works(self.a, m["token"])
            self.wait_works(self.b, m["token"])

    def test_a_lock_held_elsewhere_makes_moatctl_wait_then_fail(self):
        # another gateway's change in progress, as Redis sees it
        resp(self.redis.socket, "SET", PREFIX + "admin:lock", "someone-else", "PX", 60000)
        try:
            t0 = time.monotonic()
            p = self.a.moatctl("tenant", "add", "waited")
            self.assertEqual(p.returncode, 1, p.stdout + p.stderr)
            self.assertIn("another gateway's change held the admin store in Redis for more than 5000 ms", p.stderr)
            self.assertGreaterEqual(time.monotonic() - t0, 5.0)  # it waited, then gave up
            # the lock was not ours: it stays
            self.assertEqual(resp(self.redis.socket, "GET", PREFIX + "admin:lock"), b"someone-else")
        finally:
            resp(self.redis.socket, "DEL", PREFIX + "admin:lock")
        self.a.ok("tenant", "add", "waited")
        self.a.ok("tenant", "remove", "waited")

    def test_a_version_moved_under_a_change_refuses_the_commit(self):
        # the change of gateway a stopped between its read and its commit: its audit writer frozen
        writer = int(subprocess.run(["pgrep", "-f", "moat-audit-writer --dir %s " % self.a.audit_dir],
                                    capture_output=True, text=True).stdout.split()[0])
        staged = self.a.store + ".new"
        os.kill(writer, signal.SIGSTOP)
        try:
            result = {}
            t = threading.Thread(target=lambda: result.setdefault("p", self.a.moatctl("tenant", "add", "raced")))
            t.start()
            wait_until(lambda: os.path.exists(staged), "a's change to stage its candidate (after its read)")
            # meanwhile the store moves on (its lock expired, say): a new version by hand
            v = self.version()
            resp(self.redis.socket, "HSET", PREFIX + "admin:store", "version", v + 1)
        finally:
            os.kill(writer, signal.SIGCONT)
        t.join()
        p = result["p"]
        self.assertEqual(p.returncode, 1, p.stdout + p.stderr)
        self.assertIn("the admin store in Redis changed meanwhile (version %d, read %d): try again" % (v + 1, v),
                      p.stderr)
        doc = json.loads(resp(self.redis.socket, "HGET", PREFIX + "admin:store", "doc"))
        self.assertNotIn("raced", [t["name"] for t in doc["tenants"]])
        self.assertIsNone(resp(self.redis.socket, "GET", PREFIX + "admin:lock"))  # released
        self.a.ok("tenant", "add", "raced")  # again: it works
        self.a.ok("tenant", "remove", "raced")

    def test_the_admin_record_is_where_the_change_was_made(self):
        def applied(g, version, since):
            return {"action": "store.apply", "version": version} in [
                {k: r.get(k) for k in ("action", "version")} for r in g.admin_records()[since:]]

        since = len(self.b.admin_records())
        _, kid = self.a.new_key("acme")
        created_at = self.version()
        wait_until(lambda: applied(self.b, created_at, since), "b to record that it applied version %d" % created_at)
        before = {g.name: len(g.admin_records()) for g in (self.a, self.b)}
        self.b.ok("key", "revoke", kid)
        revoked_at = self.version()
        on_a = [r for r in self.a.admin_records() if kid in (r.get("key_id"), r.get("new_key_id"))]
        on_b = [r for r in self.b.admin_records() if kid in (r.get("key_id"), r.get("new_key_id"))]
        self.assertEqual([r["action"] for r in on_a], ["key.create"])
        self.assertEqual([r["action"] for r in on_b], ["key.revoke"])
        # the other gateway records the version it applied, after the fact; the one that made it does not
        wait_until(lambda: applied(self.a, revoked_at, before["gw-a"]), "a to record that it applied version %d" % revoked_at)
        self.assertEqual([r["action"] for r in self.b.admin_records()[before["gw-b"]:]], ["key.revoke"])
        for g in (self.a, self.b):
            p = subprocess.run([MOAT_AUDIT, "verify", g.audit_dir], capture_output=True, text=True)
            self.assertEqual(p.returncode, 0, p.stdout + p.stderr)

    def test_status_names_the_store_in_redis(self):
        reply = json.loads(self.a.ok("--json", "status").stdout)["redis"]
        self.assertEqual(reply["admin_store"], "unix:" + self.redis.socket)
        self.assertEqual(reply["key"], PREFIX + "admin:store")
        self.assertTrue(reply["connected"])
        wait_until(lambda: json.loads(self.b.ok("--json", "status").stdout)["redis"]["version"] == self.version(),
                   "b's copy to reach Redis' version")


@unittest.skipUnless(HAVE_REDIS, "redis-server is not installed (Debian: apt-get install redis-server)")
class RedisAdminTcpTest(unittest.TestCase):
    """A Redis on 127.0.0.1 with requirepass: the supervisor reaches it over TCP and authenticates
    with the limiter section's password file; a wrong password fails moatctl's changes clearly."""

    @classmethod
    def setUpClass(cls):
        cls.stack = Stack()
        cls.addClassCleanup(cls.stack.stop)
        cls.port = free_port()
        cls.log = open(os.path.join(cls.stack.tmp, "redis-tcp.log"), "ab")
        cls.addClassCleanup(cls.log.close)
        cls.redis = subprocess.Popen([REDIS, "--port", str(cls.port), "--bind", "127.0.0.1", "--requirepass", "s3cret",
                                      "--save", "", "--appendonly", "no", "--dir", cls.stack.tmp],
                                     stdout=cls.log, stderr=subprocess.STDOUT)
        cls.addClassCleanup(lambda: (cls.redis.kill(), cls.redis.wait()))
        wait_until(lambda: cls.redis.poll() is not None or cls.accepts(), "redis-server on TCP to start")
        cls.stack.start_backend()

    @classmethod
    def accepts(cls):
        try:
            return resp(("127.0.0.1", cls.port), "PING", password="s3cret") == b"PONG"
        except (OSError, AssertionError):
            return False

    def gateway(self, name, password):
        path = password_file(self.stack.tmp, name, password)
        g = AdminGateway(self.stack, name, connection="host: 127.0.0.1, port: %d, password_file: %s" % (self.port, path))
        self.addCleanup(g.stop)
        return g.start()

    def test_password_over_tcp(self):
        g = self.gateway("gw-tcp", "s3cret")
        g.ok("tenant", "add", "tcp")
        token, kid = g.new_key("tcp")
        self.assertEqual(g.runtimes(token), 200)
        doc = json.loads(resp(("127.0.0.1", self.port), "HGET", PREFIX + "admin:store", "doc", password="s3cret"))
        self.assertIn(kid, [k["id"] for k in doc["keys"]])

    def test_wrong_password_fails_changes_clearly(self):
        g = self.gateway("gw-badpass", "wrong")
        p = g.moatctl("tenant", "add", "nope")
        self.assertEqual(p.returncode, 1, p.stdout + p.stderr)
        self.assertIn("the admin store in Redis at 127.0.0.1:%d is unreachable: AUTH refused" % self.port, p.stderr)
        self.assertEqual(len(p.stderr.strip().splitlines()), 1, p.stderr)


class RedisAdminConfigTest(unittest.TestCase):
    """control.store_backend is strict, and redis needs the limiter's redis section (the connection)."""

    def check(self, extra):
        stack = Stack(extra_config=extra)
        try:
            return subprocess.run([GATEWAY, "-n", "-c", stack.config], capture_output=True, text=True)
        finally:
            stack.stop()

    def test_redis_needs_the_limiter_section(self):
        p = self.check("control:\n  socket: /run/moat-e2e-no.sock\n  store_backend: redis\n")
        self.assertEqual(p.returncode, 1, p.stdout + p.stderr)
        self.assertIn("control.store_backend: redis needs limiter: store: redis", p.stderr)

    def test_an_unknown_backend_is_refused(self):
        p = self.check("control:\n  socket: /run/moat-e2e-no.sock\n  store_backend: etcd\n")
        self.assertEqual(p.returncode, 1, p.stdout + p.stderr)
        self.assertIn("control.store_backend must be file or redis", p.stderr)


if __name__ == "__main__":
    unittest.main()
