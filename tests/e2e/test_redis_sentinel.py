"""The shared queue on a Redis watched by Sentinels (limiter.redis: {sentinels, master}),
with submissions.durability: replicated.

Started here, all real and on 127.0.0.1: a primary redis-server and one
replica (both with a password), three Sentinels (redis-server --sentinel)
watching them as "mymaster", and one host (a moat-backend with one slot and
its moat-gateway) that knows only the Sentinels' addresses.

What is checked:
  - the gateway finds the primary through the Sentinels and works
    (submissions accepted, run, read back);
  - durability replicated: with the replica frozen (SIGSTOP) no replica
    confirms an entry (WAIT), and a POST is refused 503 with the reason;
    the replica back, POSTs are accepted again;
  - the admin store (control.store_backend: redis) on the same Sentinels:
    moatctl's changes go to the primary they name and, after a failover,
    to the promoted replica, with no restart;
  - a failover with entries waiting: the primary killed -9 while accepted
    submissions wait behind a running one; the Sentinels promote the
    replica, the gateway follows them to it, and every accepted token ends
    Accepted with its output: nothing a 201 promised is lost.  The new
    primary has no replica: POSTs are refused until one joins it.
Skipped (with the reason) when redis-server is not installed.
"""

import json
import os
import shutil
import signal
import subprocess
import time
import unittest

from moat_harness import Stack, free_port, wait_until
from test_queue_redis import LEASE_MS, PREFIX, TENANTS, Host, finished
from test_redis_admin import PREFIX as ADMIN_PREFIX, AdminGateway
from test_redis_limits import HAVE_REDIS, REDIS, password_file

PASSWORD = "sentinel-e2e-password"
MASTER = "mymaster"
# a run of a second (the sleep is the program under test): the first holds the one slot, the others wait
SLEEPER = "import time\ntime.sleep(1)\nprint('slept')\n"


def sentinel_command(conf):
    """redis-sentinel is redis-server under another name; either will do."""
    found = shutil.which("redis-sentinel")
    return [found, conf] if found else [REDIS, conf, "--sentinel"]


class Node:
    """A redis-server on a TCP port with a password (a replica when primary is given)."""

    def __init__(self, directory, name, primary=None):
        self.dir = os.path.join(directory, name)
        os.makedirs(self.dir, exist_ok=True)
        self.port, self.primary, self.proc = free_port(), primary, None

    def start(self):
        self.log = open(os.path.join(self.dir, "redis.log"), "ab")
        args = [REDIS, "--port", str(self.port), "--bind", "127.0.0.1", "--requirepass", PASSWORD, "--masterauth", PASSWORD,
                "--save", "", "--appendonly", "no", "--dir", self.dir]
        if self.primary is not None:
            args += ["--replicaof", "127.0.0.1", str(self.primary.port)]
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT)
        wait_until(lambda: self.proc.poll() is not None or self.cli("PING") == "PONG", "redis-server %s" % self.dir)
        if self.proc.poll() is not None:
            raise AssertionError("redis-server exited: see %s" % os.path.join(self.dir, "redis.log"))

    def cli(self, *args):
        try:
            return subprocess.run(["redis-cli", "-p", str(self.port), "--no-auth-warning", "-a", PASSWORD, *args], check=True,
                                  capture_output=True, text=True, timeout=10).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return None

    def role(self):
        out = self.cli("ROLE")
        return out.splitlines()[0] if out else None

    def stop(self, sig=signal.SIGTERM):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.send_signal(sig)
            self.proc.wait(timeout=30)
        if self.proc is not None:
            self.proc = None
            self.log.close()


class Sentinel:
    def __init__(self, directory, index, primary):
        self.dir = os.path.join(directory, "sentinel%d" % index)
        os.makedirs(self.dir, exist_ok=True)
        self.port, self.proc = free_port(), None
        self.conf = os.path.join(self.dir, "sentinel.conf")
        with open(self.conf, "w") as f:
            f.write("port %d\nbind 127.0.0.1\ndir %s\n"
                    "sentinel monitor %s 127.0.0.1 %d 2\n"
                    "sentinel auth-pass %s %s\n"
                    "sentinel down-after-milliseconds %s 1000\n"
                    "sentinel failover-timeout %s 4000\n"
                    "sentinel parallel-syncs %s 1\n" % (self.port, self.dir, MASTER, primary.port, MASTER, PASSWORD,
                                                        MASTER, MASTER, MASTER))

    def start(self):
        self.log = open(os.path.join(self.dir, "sentinel.log"), "ab")
        self.proc = subprocess.Popen(sentinel_command(self.conf), stdout=self.log, stderr=subprocess.STDOUT)
        wait_until(lambda: self.proc.poll() is not None or self.primary_port() is not None, "a Sentinel to start")
        if self.proc.poll() is not None:
            raise AssertionError("a Sentinel exited: see %s" % os.path.join(self.dir, "sentinel.log"))

    def primary_port(self):
        try:
            out = subprocess.run(["redis-cli", "-p", str(self.port), "SENTINEL", "get-master-addr-by-name", MASTER],
                                 check=True, capture_output=True, text=True, timeout=10).stdout.split()
        except (OSError, subprocess.SubprocessError):
            return None
        return int(out[1]) if len(out) == 2 else None

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=30)
        if self.proc is not None:
            self.proc = None
            self.log.close()


def start_watched_pair(cls):
    """A primary and its replica in cls.tmp, synced, and three Sentinels watching them (cls.primary,
    cls.replica; every process in cls.nodes and cls.sentinels, for the caller's teardown)."""
    cls.primary = Node(cls.tmp, "primary")
    cls.nodes.append(cls.primary)
    cls.primary.start()
    cls.replica = Node(cls.tmp, "replica", primary=cls.primary)
    cls.nodes.append(cls.replica)
    cls.replica.start()
    wait_until(lambda: "master_link_status:up" in (cls.replica.cli("INFO", "replication") or ""), "the replica to sync")
    for i in range(3):
        s = Sentinel(cls.tmp, i, cls.primary)
        cls.sentinels.append(s)
        s.start()


def fail_over(cls):
    """Kill the primary -9 and wait until the Sentinels promote the replica."""
    cls.primary.stop(signal.SIGKILL)
    wait_until(lambda: all(s.primary_port() == cls.replica.port for s in cls.sentinels),
               "the Sentinels to promote the replica", timeout=60)
    wait_until(lambda: cls.replica.role() == "master", "the replica to be the primary", timeout=30)


@unittest.skipUnless(HAVE_REDIS, "redis-server is not installed (Debian: apt-get install redis-server)")
class SentinelTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = Stack(tenants=TENANTS, audit=False).tmp
        cls.nodes, cls.sentinels, cls.host = [], [], None
        try:
            start_watched_pair(cls)
            pw = password_file(cls.tmp, "sentinel-gw", PASSWORD)
            text = ("limiter:\n  store: redis\n  redis:\n    sentinels: [%s]\n    master: %s\n    password_file: %s\n"
                    "    timeout_ms: 1000\n    connect_timeout_ms: 500\n    lease_ms: %d\n    prefix: \"%s\"\n"
                    "  on_unavailable: local\n  gateways: 1\n" % (
                        ", ".join('"127.0.0.1:%d"' % s.port for s in cls.sentinels), MASTER, pw, LEASE_MS, PREFIX))
            cls.host = Host("s", None, submissions="  durability: replicated\n", limiter_text=text)
            cls.host.start()
        except BaseException:
            cls.tearDownClass()
            raise

    @classmethod
    def tearDownClass(cls):
        if cls.host is not None:
            cls.host.stop()
        for s in cls.sentinels:
            s.stop()
        for n in cls.nodes:
            n.stop()

    def wait_accepting(self):
        def accepted():
            st, _, data = self.host.submit("alpha", "print('ok')\n")
            return st == 201 and data["token"]
        return wait_until(accepted, "the gateway to accept submissions through the Sentinels", timeout=60)

    def wait_all(self, tokens, timeout=120):
        done = {}

        def all_done():
            for t in tokens:
                if t not in done:
                    d = finished(self.host, "alpha", t)
                    if d:
                        done[t] = d
            return len(done) == len(tokens)
        wait_until(all_done, "every accepted submission to end", timeout=timeout,
                   detail=lambda: "ended %d of %d" % (len(done), len(tokens)))
        return done

    def test_a_found_through_the_sentinels(self):
        token = self.wait_accepting()
        done = self.wait_all([token])
        self.assertEqual(done[token]["status"]["id"], 3, done[token])
        # the entry is in the primary the Sentinels name, and on its replica
        self.assertEqual(self.primary.role(), "master")
        self.assertGreater(int(self.replica.cli("DBSIZE")), 0)

    def test_b_replicated_refuses_without_a_replica(self):
        self.wait_accepting()
        self.replica.proc.send_signal(signal.SIGSTOP)
        try:
            st, hdrs, data = self.host.submit("alpha", "print('never confirmed')\n")
        finally:
            self.replica.proc.send_signal(signal.SIGCONT)
        self.assertEqual(st, 503, data)
        self.assertIn("replica", data["message"])
        self.assertIn("retry-after", {k.lower() for k in hdrs})
        self.wait_accepting()

    def test_c_failover_with_entries_waiting_loses_nothing(self):
        self.wait_accepting()
        tokens = []
        for _ in range(6):  # one runs, five wait (one slot)
            st, _, data = self.host.submit("alpha", SLEEPER)
            self.assertEqual(st, 201, data)
            tokens.append(data["token"])
        fail_over(self)
        done = self.wait_all(tokens, timeout=180)
        for t in tokens:
            self.assertEqual(done[t]["status"]["id"], 3, done[t])
            self.assertEqual(done[t]["stdout"], "c2xlcHQK", done[t])  # "slept\n"
        # the new primary has no replica: replicated durability refuses (fail closed) ...
        st, _, data = self.host.submit("alpha", "print('no replica left')\n")
        self.assertEqual(st, 503, data)
        # ... until one joins it: then new work is accepted there
        again = Node(self.tmp, "replica2", primary=self.replica)
        self.nodes.append(again)
        again.start()
        token = self.wait_accepting()
        self.wait_all([token])


@unittest.skipUnless(HAVE_REDIS, "redis-server is not installed (Debian: apt-get install redis-server)")
class AdminStoreSentinelTest(unittest.TestCase):
    """control.store_backend: redis on a Redis named by Sentinels: moatctl's changes go to the primary
    they name, and after a failover to the promoted replica, with no restart."""

    @classmethod
    def setUpClass(cls):
        cls.stack = Stack()
        cls.addClassCleanup(cls.stack.stop)
        cls.tmp = cls.stack.tmp
        cls.nodes, cls.sentinels = [], []
        cls.addClassCleanup(lambda: [n.stop() for n in cls.nodes])
        cls.addClassCleanup(lambda: [s.stop() for s in cls.sentinels])
        start_watched_pair(cls)
        cls.stack.start_backend()
        pw = password_file(cls.tmp, "admin-sentinel", PASSWORD)
        cls.gw = AdminGateway(cls.stack, "gw-sentinel", connection="sentinels: [%s], master: %s, password_file: %s" % (
            ", ".join('"127.0.0.1:%d"' % s.port for s in cls.sentinels), MASTER, pw))
        cls.addClassCleanup(cls.gw.stop)
        cls.gw.start()

    def stored_key_ids(self, node):
        doc = json.loads(node.cli("HGET", ADMIN_PREFIX + "admin:store", "doc") or "{}")
        return [k["id"] for k in doc.get("keys", [])]

    def test_changes_follow_the_primary_through_a_failover(self):
        self.gw.ok("tenant", "add", "acme")
        token, kid = self.gw.new_key("acme")
        wait_until(lambda: self.gw.runtimes(token) == 200, "the key to work", detail=self.gw.log_text)
        self.assertIn(kid, self.stored_key_ids(self.primary))
        status = json.loads(self.gw.ok("--json", "status").stdout)["redis"]
        self.assertEqual(status["admin_store"], "the primary of %s (3 Sentinels)" % MASTER, status)
        self.assertTrue(status["connected"], status)
        wait_until(lambda: kid in self.stored_key_ids(self.replica), "the store to reach the replica")
        fail_over(self)
        # the supervisor's connection follows the Sentinels to the promoted replica: changes work again
        reply = wait_until(lambda: (lambda p: p.returncode == 0 and json.loads(p.stdout))(
            self.gw.moatctl("--json", "key", "create", "--tenant", "acme")), "moatctl to work on the new primary",
            timeout=60)
        self.assertEqual(set(self.stored_key_ids(self.replica)) >= {kid, reply["key_id"]}, True,
                         self.stored_key_ids(self.replica))
        wait_until(lambda: self.gw.runtimes(reply["token"]) == 200, "the new key to work", detail=self.gw.log_text)
        self.assertEqual(self.gw.runtimes(token), 200)
        self.gw.ok("key", "revoke", kid)
        wait_until(lambda: self.gw.runtimes(token) == 401, "the revocation to apply")
        self.assertIsNone(self.gw.proc.poll())


if __name__ == "__main__":
    unittest.main()
