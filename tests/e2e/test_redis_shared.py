"""Judge0 results and live session counts shared by two real gateways
through a real redis-server (submissions: store: redis, limiter: store:
redis), started here on a Unix socket in the test's temporary directory.

What is checked:
  - a submission made on gateway a (wait=false) is read by its token on
    gateway b; another tenant's token is 404 on either;
  - results survive stopping and starting both gateways (Redis keeps them);
  - a record lives ttl_s in Redis and is gone (404) once Redis expires it;
  - Redis hung (SIGSTOP) or gone: GET and POST answer 503 store_unavailable
    with Retry-After, within a bound measured in the same run, nothing is
    run, and nothing is shown wrongly; back: the same answers as before, no
    restart;
  - a run kept as pending by a gateway that was killed reads as an
    Internal Error on the other once the dead gateway's lease is over, and
    not while it lives;
  - a tenant's sessions.max_concurrent holds across both gateways; a killed
    gateway's sessions stop counting after the lease, not before.
The limiter runs with on_unavailable: local so that the store's own
refusals (not the limiter's) are what the outage tests see.
Skipped (with the reason) when redis-server is not installed.
"""

import asyncio
import grp
import os
import signal
import subprocess
import time
import types
import unittest

import websockets

from moat_harness import GATEWAY, Stack, wait_until
from test_redis_limits import HAVE_REDIS, LEASE_MS, Gateway, Redis
from test_redis_limits import limiter as redis_limiter
from ws_client import connect, init_message, recv_event, run

PREFIX = "moat-e2e:"  # test_redis_limits.limiter's
JUDGE0 = "rate: {per_second: 1000, burst: 1000}\nmax_in_flight: 64\nendpoints: [execute, runtimes, submissions, languages]\n"
SESSIONS = ("rate: {per_second: 1000, burst: 1000}\nmax_in_flight: 64\nendpoints: [execute, runtimes, connect]\n"
            "sessions: {max_concurrent: 1, wall_ms: 600000, idle_ms: 600000, cpu_ms: 600000}\n")
TENANTS = [("alpha", JUDGE0, ""), ("beta", JUDGE0, ""), ("gamma", JUDGE0, ""), ("sess", SESSIONS, ""), ("lease", SESSIONS, "")]
HOLD = "input()\n"  # a session that stays open until the client goes


def limiter(redis):
    """test_redis_limits' section (the same lease and prefix), with on_unavailable: local."""
    return redis_limiter(redis, "local")


@unittest.skipUnless(HAVE_REDIS, "redis-server is not installed (Debian: apt-get install redis-server)")
class SharedResultsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.stack = Stack(tenants=TENANTS, audit=False,
                          extra_config="submissions:\n  store: redis\n  ttl_s: 3600\n")
        cls.redis = Redis(cls.stack.tmp)
        cls.redis.start()
        cls.stack.start_backend()
        cls.a = Gateway(cls.stack, "gw-a", limiter(cls.redis)).start()
        cls.b = Gateway(cls.stack, "gw-b", limiter(cls.redis)).start()

    @classmethod
    def tearDownClass(cls):
        for g in (cls.a, cls.b):
            if g.proc is not None:
                g.stop()
        cls.redis.kill()
        cls.stack.stop()

    def setUp(self):
        if self.redis.proc is None:
            self.redis.start()
        self.wait_reachable()

    # ---- helpers ---------------------------------------------------------------

    def wait_reachable(self):
        """After an outage each worker thread reconnects after its own backoff (at most 2 s): all of them."""
        unknown = "00000000-0000-4000-8000-000000000000"
        for gw in (self.a, self.b):
            wait_until(lambda: all(self.get(gw, unknown)[0] == 404 for _ in range(8)), "%s to reach Redis" % gw.name)

    def log_text(self, name):
        with open(os.path.join(self.stack.tmp, name + ".log"), errors="replace") as f:
            return f.read()

    def check_config(self, submissions, with_limiter=True):
        """moat-gateway -n over the stack's configuration with these submissions lines (and gateway a's limiter)."""
        conf = os.path.join(self.stack.tmp, "check.conf")
        with open(self.stack.config) as f:
            text = f.read().replace("submissions:\n  store: redis\n  ttl_s: 3600\n", submissions)
        with open(conf, "w") as f:
            f.write((limiter(self.redis) if with_limiter else "") + text)
        os.chown(conf, 0, grp.getgrnam("moat").gr_gid)  # -n reads it again as the gateway's user
        os.chmod(conf, 0o640)
        return subprocess.run([GATEWAY, "-n", "-c", conf], capture_output=True, text=True, timeout=60)

    def test_section_is_strict(self):
        ok = self.check_config("submissions:\n  store: redis\n")
        self.assertEqual(ok.returncode, 0, ok.stderr)
        for lines, with_limiter, want in [
            ("submissions:\n  store: redis\n", False, "submissions.store redis needs limiter.store redis"),
            ("submissions:\n  store: disk\n", True, "submissions.store must be memory, dir or redis"),
            ("submissions:\n  store: dir\n", True, "store: dir needs a store_dir"),
            ("submissions:\n  store: redis\n  store_dir: /tmp\n", True, "store_dir goes with store: dir"),
        ]:
            got = self.check_config(lines, with_limiter)
            self.assertEqual(got.returncode, 1, (lines, got.stdout))
            self.assertIn(want, got.stderr)
            self.assertEqual(len(got.stderr.strip().splitlines()), 1, got.stderr)

    def cli(self, *args):
        return subprocess.run(["redis-cli", "-s", self.redis.socket] + list(args), capture_output=True, text=True,
                              timeout=30, check=True).stdout.strip()

    def submit(self, gw, code, tenant="alpha"):
        st, _, data = gw.request("POST", "/submissions?wait=false", {"source_code": code, "language_id": 71},
                                 token=self.stack.tokens[tenant])
        self.assertEqual(st, 201, data)
        return data["token"]

    def get(self, gw, token, tenant="alpha"):
        return gw.request("GET", "/submissions/%s?fields=status,stdout,message" % token, token=self.stack.tokens[tenant])

    def finished(self, gw, token):
        got = {}

        def done():
            st, _, data = self.get(gw, token)
            self.assertEqual(st, 200, data)
            got.update(data)
            return data["status"]["id"] >= 3
        wait_until(done, "submission %s to finish" % token)
        return got

    def record_key(self, token, tenant="alpha"):
        return "%sj:%s:%s" % (PREFIX, tenant.encode().hex(), token)

    def assert_store_down(self, got):
        st, headers, data = got
        self.assertEqual(st, 503, data)
        self.assertEqual(data["code"], "store_unavailable", data)
        self.assertIn("submissions store", data["message"])
        self.assertEqual(data["request_id"], headers["x-request-id"])
        self.assertGreaterEqual(int(headers["retry-after"]), 1)

    def baseline_s(self, gw, token, n=10):
        """The slowest of n GETs with Redis up: this run's yardstick for "bounded"."""
        worst = 0.0
        for _ in range(n):
            t0 = time.monotonic()
            self.assertEqual(self.get(gw, token)[0], 200)
            worst = max(worst, time.monotonic() - t0)
        return worst

    # ---- results ---------------------------------------------------------------

    def test_submission_on_one_gateway_is_read_on_the_other(self):
        token = self.submit(self.a, "print('shared')")
        got = self.finished(self.b, token)  # polled on b only
        self.assertEqual((got["status"]["id"], got["stdout"]), (3, "shared\n"))
        self.assertEqual(self.get(self.a, token)[2], self.get(self.b, token)[2])
        # another tenant's token: 404 on either gateway, as if it never existed
        for gw in (self.a, self.b):
            st, _, data = self.get(gw, token, tenant="beta")
            self.assertEqual(st, 404, data)
            self.assertEqual(data["code"], "not_found", data)
        # the batch GET too: null for the other tenant's token
        st, _, data = self.b.request("GET", "/submissions/batch?tokens=%s&fields=stdout" % token,
                                     token=self.stack.tokens["beta"])
        self.assertEqual((st, data["submissions"]), (200, [None]), data)
        st, _, data = self.b.request("GET", "/submissions/batch?tokens=%s&fields=stdout" % token,
                                     token=self.stack.tokens["alpha"])
        self.assertEqual((st, data["submissions"]), (200, [{"stdout": "shared\n"}]), data)

    def test_results_survive_restarting_both_gateways(self):
        token = self.submit(self.b, "print('kept')")
        self.finished(self.a, token)
        for gw in (self.a, self.b):
            gw.stop()
        for gw in (self.a, self.b):
            gw.start()
        for gw in (self.a, self.b):
            st, _, data = self.get(gw, token)
            self.assertEqual(st, 200, data)
            self.assertEqual((data["status"]["id"], data["stdout"]), (3, "kept\n"))

    def test_record_expires_with_its_ttl(self):
        token = self.submit(self.a, "print('short')")
        self.finished(self.a, token)
        key = self.record_key(token)
        pttl = int(self.cli("PTTL", key))
        self.assertGreater(pttl, 3000 * 1000)  # ttl_s 3600, just written
        self.assertLessEqual(pttl, 3600 * 1000)
        # the tenant's name is in the key, in hex: no other tenant's key holds it
        self.assertEqual(self.cli("EXISTS", self.record_key(token, "beta")), "0")
        self.cli("PEXPIRE", key, "1")  # as if its hour were over
        wait_until(lambda: self.cli("EXISTS", key) == "0", "Redis to expire the record")
        for gw in (self.a, self.b):
            st, _, data = self.get(gw, token)
            self.assertEqual(st, 404, data)

    def test_tenant_cap_evicts_its_oldest(self):
        capped = Gateway(self.stack, "gw-capped", limiter(self.redis))
        with open(capped.config) as f:
            text = f.read()
        with open(capped.config, "w") as f:
            f.write(text.replace("  ttl_s: 3600\n", "  ttl_s: 3600\n  max_per_tenant: 2\n", 1))
        capped.start()
        try:
            tokens = []
            for i in range(3):
                st, _, data = capped.request("POST", "/submissions?wait=true",
                                             {"source_code": "print(%d)" % i, "language_id": 71},
                                             token=self.stack.tokens["gamma"])
                self.assertEqual((st, data["status"]["id"]), (201, 3), data)
                tokens.append(data["token"])
            # the tenant's oldest went, on every gateway; the others stay
            for gw in (capped, self.a):
                self.assertEqual(self.get(gw, tokens[0], tenant="gamma")[0], 404)
                self.assertEqual([self.get(gw, t, tenant="gamma")[2]["stdout"] for t in tokens[1:]], ["1\n", "2\n"])
            self.assertEqual(self.cli("ZCARD", "%sj:%s" % (PREFIX, b"gamma".hex())), "2")
            self.assertEqual(self.cli("EXISTS", self.record_key(tokens[0], "gamma")), "0")
        finally:
            capped.stop()

    def test_hung_redis_fails_closed_then_shows_the_same(self):
        token = self.submit(self.a, "print('before')")
        before = self.finished(self.a, token)
        bound = 10 * self.baseline_s(self.b, token) + 0.5 + 1.0  # timeout_ms is 500
        self.redis.proc.send_signal(signal.SIGSTOP)
        try:
            t0 = time.monotonic()
            got = self.get(self.b, token)
            took = time.monotonic() - t0
            self.assert_store_down(got)
            self.assertLessEqual(took, bound)
            # a POST whose result could not be kept is not run
            st, headers, data = self.a.request("POST", "/submissions?wait=false",
                                               {"source_code": "print('lost?')", "language_id": 71},
                                               token=self.stack.tokens["alpha"])
            self.assert_store_down((st, headers, data))
            self.assertNotIn("token", data)
        finally:
            self.redis.proc.send_signal(signal.SIGCONT)
        # back, without a restart: the same answer as before the outage
        wait_until(lambda: self.get(self.b, token)[0] == 200, "gateway b to reach Redis again")
        self.assertEqual(self.get(self.b, token)[2], before)
        self.assertIsNone(self.a.proc.poll())
        self.assertIsNone(self.b.proc.poll())

    def test_redis_gone_fails_closed_then_recovers(self):
        token = self.submit(self.a, "print('x')")
        self.finished(self.a, token)
        self.redis.kill()
        try:
            for gw in (self.a, self.b):
                self.assert_store_down(self.get(gw, token))
                self.assert_store_down(gw.request("POST", "/submissions?wait=false",
                                                  {"source_code": "print(1)", "language_id": 71},
                                                  token=self.stack.tokens["alpha"]))
                st, headers, data = gw.request("POST", "/submissions/batch",
                                               {"submissions": [{"source_code": "print(1)", "language_id": 71}]},
                                               token=self.stack.tokens["alpha"])
                self.assert_store_down((st, headers, data))
                st, headers, data = gw.request("GET", "/submissions/batch?tokens=%s" % token,
                                               token=self.stack.tokens["alpha"])
                self.assert_store_down((st, headers, data))
                # a session cannot be counted across gateways: refused too (fail closed)
                self.assertEqual(run(self.refused_status(gw, "sess")), 503)
        finally:
            self.redis.start()
        # a fresh Redis (no persistence here): the gateways reconnect by themselves
        self.wait_reachable()
        token = self.submit(self.a, "print('again')")
        got = self.finished(self.b, token)
        self.assertEqual(got["stdout"], "again\n", got)

    def test_result_finished_during_an_outage_is_kept_once_redis_is_back(self):
        # the program sleeps to be still running when Redis is frozen: it ends during the outage
        token = self.submit(self.a, "import time\ntime.sleep(2)\nprint('late')")
        wait_until(lambda: self.get(self.a, token)[2]["status"]["id"] == 2, "the run to be Processing")
        self.redis.proc.send_signal(signal.SIGSTOP)
        try:
            # the run ends while Redis does not answer: its put fails and waits in the gateway
            wait_until(lambda: "the result could not be kept" in self.log_text("gw-a"), "the run to end during the outage")
        finally:
            self.redis.proc.send_signal(signal.SIGCONT)
        got = self.finished(self.b, token)
        self.assertEqual((got["status"]["id"], got["stdout"]), (3, "late\n"))

    def test_pending_run_of_a_killed_gateway_becomes_an_internal_error(self):
        doomed = Gateway(self.stack, "gw-doomed", limiter(self.redis)).start()
        try:
            # the program sleeps to outlive its gateway (killed below), far longer than the test
            token = self.submit(doomed, "import time\ntime.sleep(30)\nprint('never seen')")
            wait_until(lambda: self.get(self.a, token)[2]["status"]["id"] == 2, "the run to be Processing")
        finally:
            doomed.kill()
        killed = time.monotonic()
        # its heartbeat lives out its lease: pending still (the gateway might be alive)
        st, _, data = self.get(self.a, token)
        if time.monotonic() - killed < LEASE_MS / 1000 * 0.5:
            self.assertEqual((st, data["status"]["id"]), (200, 2), data)
        wait_until(lambda: self.get(self.b, token)[2]["status"]["id"] == 13, "the orphan to become an Internal Error")
        self.assertGreaterEqual(time.monotonic() - killed, LEASE_MS / 1000 * 0.6)
        st, _, data = self.get(self.a, token)
        self.assertEqual(data["status"], {"id": 13, "description": "Internal Error"})
        self.assertIn("the gateway restarted", data["message"])

    # ---- sessions --------------------------------------------------------------

    def endpoint(self, gw):
        return types.SimpleNamespace(port=gw.port, ssl_context=self.stack.ssl_context)

    async def open_session(self, gw, tenant):
        ws = await connect(self.endpoint(gw), token=self.stack.tokens[tenant])
        await ws.send(init_message("python", HOLD))
        ev = await recv_event(ws)
        self.assertEqual(ev["type"], "runtime", ev)
        return ws

    async def refused_status(self, gw, tenant):
        try:
            ws = await connect(self.endpoint(gw), token=self.stack.tokens[tenant])
        except websockets.InvalidStatusCode as e:
            return e.status_code
        await ws.close()
        return 101

    def test_session_cap_holds_across_gateways(self):
        async def go():
            ws = await self.open_session(self.a, "sess")
            try:
                on_b = await self.refused_status(self.b, "sess")
                on_a = await self.refused_status(self.a, "sess")
            finally:
                await ws.close()
            return on_b, on_a

        self.assertEqual(run(go()), (429, 429))
        # a's session is over: its count goes back at once, b may open one
        wait_until(lambda: run(self.refused_status(self.b, "sess")) == 101, "the session's count to go back")

    def test_killed_gateway_sessions_come_back_after_the_lease(self):
        doomed = Gateway(self.stack, "gw-doomed-s", limiter(self.redis)).start()

        async def go():
            ws = await self.open_session(doomed, "lease")
            doomed.kill()  # the session's gateway dies with it: nobody releases its count
            killed = time.monotonic()
            first = await self.refused_status(self.a, "lease")
            while await self.refused_status(self.a, "lease") != 101:
                self.assertLess(time.monotonic() - killed, 60, "the dead gateway's session still counts")
                await asyncio.sleep(0.2)  # the polling interval
            ws.transport.abort()
            return first, time.monotonic() - killed

        first, back_after = run(go())
        self.assertEqual(first, 429)
        self.assertGreaterEqual(back_after, LEASE_MS / 1000 * 0.6)


if __name__ == "__main__":
    unittest.main()
