"""Observability (issue 14, item 3; gateway/observe/metrics_render.c, config_observe.c):
a Prometheus text /metrics on a listener of its own (loopback, plain HTTP,
never the public one), counters that move exactly with a known sequence of
requests, consistent histograms, TLS handshake failures counted, JSON log
lines, and the configuration's refusals."""

import grp
import http.client
import json
import os
import re
import shutil
import signal
import socket
import tempfile
import subprocess
import threading
import time
import unittest

from prometheus_client.parser import text_string_to_metric_families

from test_gateway_robustness import ENHANCE_YOUR_CALM, H2, rapid_reset_flood
from test_redis_limits import HAVE_REDIS, Redis, limiter

from moat_harness import (GATEWAY, LONG_WALL_MS, SilentBackend, Stack, free_port, held_program, release_all, wait_held,
                          wait_until)

BURST = 2  # the tenant's requests that pass before its rate answers 429
TS = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


def scrape(port):
    """The metrics listener's answer: (status, content type, text)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("GET", "/metrics")
        resp = conn.getresponse()
        return resp.status, resp.getheader("content-type"), resp.read().decode()
    finally:
        conn.close()


def samples(text):
    """{(name, frozenset(labels)): value} through a real text-format parser."""
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def value(smp, name, **labels):
    return smp.get((name, frozenset(labels.items())), 0.0)


class MetricsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.mport = free_port()
        tenant_extra = "rate: {per_second: 0.001, burst: %d}\nmax_in_flight: 64\n" % BURST
        runner_extra = Stack.DEFAULT_TENANT_EXTRA + "limits:\n  run_timeout_ms: %d\n" % LONG_WALL_MS
        cls.stack = Stack(tenants=[("demo", tenant_extra, ""), ("runner", runner_extra, "")],
                          backend_args=["-o", "run_timeout=%d" % LONG_WALL_MS],
                          extra_config="metrics: {address: 127.0.0.1, port: %d}\nlog: {format: json}\n" % cls.mport)
        cls.stack.start()

    @classmethod
    def tearDownClass(cls):
        cls.stack.stop()

    def scrape_samples(self):
        st, ctype, text = scrape(self.mport)
        self.assertEqual(st, 200, text)
        self.assertTrue(ctype.startswith("text/plain; version=0.0.4"), ctype)
        return samples(text)

    def test_1_counters_move_exactly(self):
        before = self.scrape_samples()
        ids = []
        for _ in range(BURST + 1):
            st, h, _ = self.stack.request("GET", "/api/v2/runtimes")
            ids.append((h["x-request-id"], st))
        st401, h, _ = self.stack.request("GET", "/api/v2/runtimes", token="moat_not_a_key")
        ids.append((h["x-request-id"], st401))
        st404, h, _ = self.stack.request("GET", '/no/such"path%0Ainjected="1', token=None)
        ids.append((h["x-request-id"], st404))
        self.assertEqual([s for _, s in ids], [200] * BURST + [429, 401, 404])
        after = self.scrape_samples()

        def delta(name, **labels):
            return value(after, name, **labels) - value(before, name, **labels)

        rt = {"route": "/api/v2/runtimes", "method": "GET"}
        self.assertEqual(delta("moat_requests_total", tenant="demo", status="200", **rt), BURST)
        self.assertEqual(delta("moat_requests_total", tenant="demo", status="429", **rt), 1)
        self.assertEqual(delta("moat_requests_total", tenant="", status="401", **rt), 1)
        self.assertEqual(delta("moat_requests_total", tenant="", route="other", method="other", status="404"), 1)
        self.assertEqual(delta("moat_request_duration_seconds_count", **rt), BURST + 2)
        # label values come from the route table, never the request's text
        st, _, text = scrape(self.mport)
        self.assertNotIn("injected", text)
        self.assertNotIn("no/such", text)

        # the JSON access lines of these requests, each with the fields
        def lines():
            found = {}
            for line in self.stack.log("gateway").splitlines():
                if line.startswith("{") and '"request_id"' in line:
                    rec = json.loads(line)
                    found[rec["request_id"]] = rec
            return found if all(i in found for i, _ in ids) else None

        found = wait_until(lines, "the access lines of the requests")
        for rid, status in ids:
            rec = found[rid]
            self.assertRegex(rec["ts"], TS)
            self.assertEqual(rec["status"], status)
            self.assertIsInstance(rec["duration_ms"], (int, float))
            self.assertEqual(rec["client"], "127.0.0.1")
            self.assertEqual(rec["program"], "moat-gateway")
        self.assertEqual(found[ids[0][0]]["tenant"], "demo")
        self.assertEqual(found[ids[0][0]]["route"], "/api/v2/runtimes")
        self.assertEqual(found[ids[BURST + 1][0]]["tenant"], "")
        self.assertEqual(found[ids[BURST + 2][0]]["route"], "other")

    def test_2_histograms_are_consistent(self):
        self.stack.request("GET", "/healthz", token=None)
        st, _, text = scrape(self.mport)
        fams = {f.name: f for f in text_string_to_metric_families(text)}
        hist = fams["moat_request_duration_seconds"]
        self.assertEqual(hist.type, "histogram")
        series = {}
        for s in hist.samples:
            key = (s.labels["route"], s.labels["method"])
            series.setdefault(key, {"buckets": []})
            if s.name.endswith("_bucket"):
                series[key]["buckets"].append((float(s.labels["le"]), s.value))
            else:
                series[key][s.name.rsplit("_", 1)[1]] = s.value
        self.assertIn(("/healthz", "GET"), series)
        for key, h in series.items():
            counts = [v for _, v in sorted(h["buckets"])]
            self.assertEqual(counts, sorted(counts), key)  # cumulative
            self.assertEqual(sorted(h["buckets"])[-1][0], float("inf"))
            self.assertEqual(h["count"], counts[-1], key)
            self.assertGreaterEqual(h["sum"], 0)
        for name, kind in (("moat_requests", "counter"), ("moat_backend_calls_in_flight", "gauge"),
                           ("moat_sessions_open", "gauge"), ("moat_audit_lag_seconds", "gauge"),
                           ("moat_audit_failures", "counter"), ("moat_limiter_store_state", "gauge"),
                           ("moat_tls_handshake_failures", "counter"), ("moat_http2_goaways", "counter"),
                           ("moat_submissions_queue_depth", "gauge")):
            self.assertEqual(fams[name].type, kind, name)
        smp = samples(text)
        self.assertEqual(value(smp, "moat_limiter_store_state", store="memory", state="up"), 1)
        self.assertEqual(value(smp, "moat_audit_writer_connected"), 2)  # both workers

    def test_3_tls_handshake_failure_counted(self):
        base = value(self.scrape_samples(), "moat_tls_handshake_failures_total", reason="error")
        # plain HTTP to the TLS port: not a client hello
        with socket.create_connection(("127.0.0.1", self.stack.port), timeout=30) as s:
            s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            while s.recv(4096):
                pass
        wait_until(lambda: value(self.scrape_samples(), "moat_tls_handshake_failures_total", reason="error") >= base + 1,
                   "the failed handshake to be counted")
        self.assertEqual(value(self.scrape_samples(), "moat_tls_handshake_failures_total", reason="error"), base + 1)

    def test_4_not_on_the_public_listener(self):
        st, h, data = self.stack.request("GET", "/metrics", token=None)
        self.assertEqual(st, 404)
        self.assertNotIn(b"moat_requests_total", json.dumps(data).encode())
        st, h, data = self.stack.request("GET", "/metrics")
        self.assertEqual(st, 404)
        # and the metrics listener serves nothing else, and no TLS
        conn = http.client.HTTPConnection("127.0.0.1", self.mport, timeout=30)
        conn.request("GET", "/api/v2/runtimes", headers={"Authorization": "Bearer " + self.stack.token})
        self.assertEqual(conn.getresponse().status, 404)
        conn.close()
        conn = http.client.HTTPConnection("127.0.0.1", self.mport, timeout=30)
        conn.request("POST", "/metrics", body=b"x")
        self.assertEqual(conn.getresponse().status, 405)
        conn.close()

    def test_5_every_gateway_line_is_json(self):
        self.stack.request("GET", "/healthz", token=None)
        text = wait_until(lambda: (lambda t: t if '"route":"/healthz"' in t else None)(self.stack.log("gateway")),
                          "a healthz access line")
        lines = [l for l in text.splitlines() if l.strip()]
        gateway_lines = [l for l in lines if "moat-gateway" in l]
        self.assertTrue(gateway_lines)
        for line in gateway_lines:
            rec = json.loads(line)  # no text line from the gateway in json mode
            self.assertRegex(rec["ts"], TS)
            self.assertIn(rec["level"], ("info", "warning", "debug", "fatal"))

    def test_6_backend_slots(self):
        # the backend's own account of its slots (RUNTIMES' load), asked at each scrape
        smp = self.scrape_samples()
        self.assertEqual(value(smp, "moat_backend_up"), 1)
        self.assertEqual(value(smp, "moat_backend_slots"), 4)  # the harness's -j 4
        self.assertEqual(value(smp, "moat_backend_queue_max"), 16)  # 4 places a slot by default
        results = {}
        body = {"language": "python", "version": "*", "files": [{"name": "main.py", "content": held_program()}],
                "run_timeout": LONG_WALL_MS}

        def run():
            results["held"] = self.stack.request("POST", "/api/v2/execute", body, token=self.stack.tokens["runner"])

        t = threading.Thread(target=run)
        t.start()
        try:
            wait_held(self.stack.tag)
            smp = self.scrape_samples()
            self.assertEqual(value(smp, "moat_backend_slots_busy"), 1)
            self.assertEqual(value(smp, "moat_backend_queue_depth"), 0)
            self.assertEqual(value(smp, "moat_backend_calls_in_flight"), 1)  # the held run's call
        finally:
            release_all(self.stack.tag)
            t.join()
        self.assertEqual(results["held"][0], 200, results["held"])
        wait_until(lambda: value(self.scrape_samples(), "moat_backend_slots_busy") == 0, "the slot to be given back")

    def test_7_rapid_reset_goaway_counted(self):
        base = value(self.scrape_samples(), "moat_http2_goaways_total", reason="reset_budget")
        h2 = H2(self.stack.port, self.stack.ssl_context(alpn=("h2",)))
        try:
            rapid_reset_flood(h2)  # until the gateway says enough
            self.assertTrue(h2.wait_closed(30), "the flooding connection was not closed")
            self.assertEqual(h2.goaway[1], ENHANCE_YOUR_CALM)
        finally:
            h2.close()
        self.assertEqual(value(self.scrape_samples(), "moat_http2_goaways_total", reason="reset_budget"), base + 1)


@unittest.skipUnless(HAVE_REDIS, "redis-server is not installed (Debian: apt-get install redis-server)")
class LimiterStateTest(unittest.TestCase):
    """moat_limiter_store_state follows a real Redis going away and coming back."""

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="moat-e2e-metrics-redis-")
        os.chmod(self.dir, 0o755)
        self.redis = Redis(self.dir)
        self.redis.start()
        self.mport = free_port()
        self.stack = Stack(audit=False, extra_config=limiter(self.redis) + "metrics: {port: %d}\n" % self.mport).start()

    def tearDown(self):
        self.stack.stop()
        self.redis.kill()
        shutil.rmtree(self.dir, ignore_errors=True)

    def state(self):
        smp = samples(scrape(self.mport)[2])
        return [st for st in ("up", "down", "fallback")
                if value(smp, "moat_limiter_store_state", store="redis", state=st) == 1]

    def in_state(self, want, status):
        # a decision on fresh connections (the kernel spreads them over the workers)
        # is what makes a worker notice
        st = self.stack.request("GET", "/api/v2/runtimes")[0]
        return st == status and self.state() == [want]

    def test_down_then_up(self):
        wait_until(lambda: self.in_state("up", 200), "the limiter to answer through Redis")
        self.redis.kill()
        wait_until(lambda: self.in_state("down", 503), "the store to show down (fail closed)")
        self.redis.start()
        wait_until(lambda: self.in_state("up", 200) and self.state() == ["up"], "the store to show up again")


class ReloadTest(unittest.TestCase):
    """SIGHUP applies log.format and keeps the running metrics listener."""

    def test_reload(self):
        mport, other = free_port(), free_port()
        stack = Stack(audit=False, extra_config="metrics: {port: %d}\n" % mport)
        try:
            # readable by the gateway's user after the drop, as a reload needs
            os.chown(stack.config, 0, grp.getgrnam("moat").gr_gid)
            os.chmod(stack.config, 0o640)
            stack.start()
            self.assertEqual(scrape(mport)[0], 200)
            with open(stack.config) as f:
                text = f.read()
            with open(stack.config, "w") as f:
                f.write(text.replace("metrics: {port: %d}\n" % mport, "metrics: {port: %d}\nlog: {format: json}\n" % other))
            stack.gateway.send_signal(signal.SIGHUP)
            line = wait_until(lambda: next((l for l in stack.log("gateway").splitlines()
                                            if l.startswith("{") and "configuration reloaded" in l), None),
                              "the reload's line, in JSON")
            self.assertEqual(json.loads(line)["level"], "info")
            self.assertIn("the metrics section changed", stack.log("gateway"))
            self.assertEqual(scrape(mport)[0], 200)  # the running listener stays
            with self.assertRaises(OSError):
                scrape(other)
            rid = stack.request("GET", "/healthz", token=None)[1]["x-request-id"]
            wait_until(lambda: any(l.startswith("{") and json.loads(l).get("request_id") == rid
                                   for l in stack.log("gateway").splitlines()), "the request's JSON line")
        finally:
            stack.stop()


class HungBackendTest(unittest.TestCase):
    """A scrape against a backend that accepts and never answers waits
    metrics.backend_timeout_ms, not backend.timeout_ms (30 s here), and
    answers moat_backend_up 0.  The backend is a real Unix socket listener
    that takes connections and stays silent."""

    BOUND_MS = 500

    def setUp(self):
        self.mport = free_port()
        self.stack = Stack(audit=False, extra_config="metrics: {port: %d, backend_timeout_ms: %d}\n"
                           % (self.mport, self.BOUND_MS))
        self.backend = SilentBackend(self.stack)
        self.stack.start_gateway()

    def tearDown(self):
        self.stack.stop()
        self.backend.close()

    def test_scrape_is_bounded(self):
        t0 = time.monotonic()
        st, _, text = scrape(self.mport)
        took = time.monotonic() - t0
        self.assertEqual(st, 200, text)
        self.assertEqual(value(samples(text), "moat_backend_up"), 0)
        # generous: the bound is 0.5 s, the backend's timeout 30 s
        self.assertLess(took, 5 * self.BOUND_MS / 1000.0, "the scrape took %.1f s" % took)
        wait_until(lambda: self.backend.held, "the scrape's connection to the silent backend")


class MetricsConfigTest(unittest.TestCase):
    """gateway -n refuses a metrics section that would expose it, naming why."""

    def check(self, extra):
        stack = Stack(audit=False, extra_config=extra)
        try:
            # as the gateway keeps it: -n also tries a reload as its user
            os.chown(stack.config, 0, grp.getgrnam("moat").gr_gid)
            os.chmod(stack.config, 0o640)
            p = subprocess.run([GATEWAY, "-n", "-c", stack.config], capture_output=True, text=True, timeout=120)
            return p.returncode, p.stderr + p.stdout, stack
        finally:
            stack.stop()

    def test_non_loopback_refused(self):
        rc, out, _ = self.check("metrics: {address: 0.0.0.0, port: %d}\n" % free_port())
        self.assertNotEqual(rc, 0)
        self.assertIn("not a loopback address", out)
        self.assertRegex(out, r"gateway\.conf:\d+: ")
        rc, out, _ = self.check("metrics: {address: 0.0.0.0, port: %d, allow_non_loopback: true}\n" % free_port())
        self.assertEqual(rc, 0, out)

    def test_public_port_refused(self):
        stack = Stack(audit=False)
        try:
            with open(stack.config, "a") as f:
                f.write("metrics: {port: %d}\n" % stack.port)
            p = subprocess.run([GATEWAY, "-n", "-c", stack.config], capture_output=True, text=True, timeout=120)
        finally:
            stack.stop()
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("public listener's port", p.stderr)

    def test_bad_keys_refused(self):
        for extra, why in (("metrics: {address: localhost}\n", "numeric"), ("metrics: {port: 0}\n", "metrics.port"),
                           ("metrics: {colour: blue}\n", "colour"), ("log: {format: xml}\n", "log.format"),
                           ("log: {level: debug}\n", "level"),
                           ("metrics: {backend_timeout_ms: 0}\n", "metrics.backend_timeout_ms")):
            rc, out, _ = self.check(extra)
            self.assertNotEqual(rc, 0, extra)
            self.assertIn(why, out, extra)

    def test_metrics_off_without_the_section(self):
        rc, out, _ = self.check("")
        self.assertEqual(rc, 0, out)


if __name__ == "__main__":
    unittest.main()
