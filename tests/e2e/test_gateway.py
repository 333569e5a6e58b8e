"""Black-box tests of the whole path: TLS gateway -> Unix socket -> box -> back.

Starts the real moat-backend and moat-gateway (which drops to the `moat`
user), and talks HTTP/1.1 and HTTP/2 over real TLS with a throwaway CA."""

import os
import socket
import ssl
import subprocess
import unittest
import warnings

from moat_harness import GATEWAY, Stack, communicate_or_kill, expected_missing, expected_walls, listens_on, wait_until


class GatewayTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.stack = Stack().start()

    @classmethod
    def tearDownClass(cls):
        cls.stack.stop()

    # ---- TLS ---------------------------------------------------------------

    def test_tls_handshake_with_dev_ca(self):
        ctx = self.stack.ssl_context()
        with socket.create_connection(("127.0.0.1", self.stack.port), timeout=10) as raw:
            with ctx.wrap_socket(raw, server_hostname="localhost") as tls:
                self.assertIn(tls.version(), ("TLSv1.2", "TLSv1.3"))
                self.assertEqual(tls.getpeercert()["subject"], ((("commonName", "localhost"),),))

    def test_second_gateway_on_the_same_port_refused(self):
        """The workers share the port by SO_REUSEPORT, which any root process may join: a second
        gateway must refuse to start there, not silently take a share of the connections."""
        p = subprocess.Popen([GATEWAY, "-c", self.stack.config], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             start_new_session=True)
        got = communicate_or_kill(p, 60)
        if got is None:  # it started: the bug
            self.fail("a second gateway started on port %d" % self.stack.port)
        out = got[0].decode(errors="replace")
        self.assertNotEqual(p.returncode, 0, out)
        self.assertIn("port %d: address already in use by another process" % self.stack.port, out)
        self.assertTrue(listens_on(self.stack.gateway.pid, self.stack.port))
        status, _, _ = self.stack.request("GET", "/healthz", token=None)
        self.assertEqual(status, 200)

    def test_tls_rejected_without_the_ca(self):
        ctx = ssl.create_default_context()  # system roots only: the dev CA is not trusted
        with socket.create_connection(("127.0.0.1", self.stack.port), timeout=10) as raw:
            with self.assertRaises(ssl.SSLCertVerificationError):
                ctx.wrap_socket(raw, server_hostname="localhost")

    def test_old_tls_versions_refused(self):
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.load_verify_locations(self.stack.ca)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            ctx.minimum_version = ssl.TLSVersion.TLSv1
            ctx.maximum_version = ssl.TLSVersion.TLSv1_1
        try:
            ctx.set_ciphers("ALL:@SECLEVEL=0")
        except ssl.SSLError:
            pass
        with socket.create_connection(("127.0.0.1", self.stack.port), timeout=10) as raw:
            with self.assertRaises(ssl.SSLError):
                ctx.wrap_socket(raw, server_hostname="localhost")

    def test_http2_negotiated_by_alpn(self):
        ctx = self.stack.ssl_context(alpn=("h2", "http/1.1"))
        with socket.create_connection(("127.0.0.1", self.stack.port), timeout=10) as raw:
            with ctx.wrap_socket(raw, server_hostname="localhost") as tls:
                self.assertEqual(tls.selected_alpn_protocol(), "h2")
        p = self.stack.curl("--http2", "-o", "/dev/null", "-w", "%{http_version} %{http_code}",
                            "https://localhost:%d/healthz" % self.stack.port,
                            "--resolve", "localhost:%d:127.0.0.1" % self.stack.port)
        self.assertEqual(p.stdout, "2 200", p.stderr)

    def test_execute_over_http2(self):
        p = self.stack.curl("--http2", "-H", "Authorization: Bearer " + self.stack.token,
                            "-H", "Content-Type: application/json", "-w", "\n%{http_version}",
                            "-d", '{"language":"python","version":"3","files":[{"content":"print(6*7)"}]}',
                            "https://127.0.0.1:%d/api/v2/execute" % self.stack.port)
        body, _, version = p.stdout.rpartition("\n")
        self.assertEqual(version, "2", p.stderr)
        self.assertIn('"stdout":"42\\n"', body.replace(" ", ""))

    # ---- authentication and routing -----------------------------------------

    def assert_json_error(self, status, headers, data, want_status, code=None):
        self.assertEqual(status, want_status, data)
        self.assertIsInstance(data, dict)
        self.assertIsInstance(data.get("message"), str)
        self.assertTrue(data["message"])
        self.assertEqual(data.get("request_id"), headers.get("x-request-id"))
        # a stable machine-readable code beside the message (moat-gateway(8): "Error codes")
        self.assertRegex(data.get("code", ""), r"^[a-z]+(_[a-z]+)*$")
        if code is not None:
            self.assertEqual(data["code"], code)

    def test_401_without_token(self):
        status, headers, data = self.stack.request("POST", "/api/v2/execute", {"language": "python"}, token=None)
        self.assert_json_error(status, headers, data, 401, "invalid_token")
        self.assertIn("bearer", headers.get("www-authenticate", "").lower())

    def test_401_with_wrong_token(self):
        # well-formed, right checksum, but a key nobody issued
        import subprocess
        from moat_harness import MOATCTL
        out = subprocess.run([MOATCTL, "key", "new"], check=True, capture_output=True, text=True).stdout
        other = out.split("token: ", 1)[1].split()[0]
        for token in (other, "moat_garbage", self.stack.token[:-1] + ("0" if self.stack.token[-1] != "0" else "1")):
            status, headers, data = self.stack.request("POST", "/api/v2/execute",
                                                       {"language": "python", "version": "*",
                                                        "files": [{"content": "print(1)"}]}, token=token)
            self.assert_json_error(status, headers, data, 401)

    def test_wrong_token_on_an_authenticated_connection(self):
        # the per-connection key cache must never answer for other bytes
        import http.client
        conn = http.client.HTTPSConnection("127.0.0.1", self.stack.port, context=self.stack.ssl_context(("http/1.1",)),
                                           timeout=30)
        try:
            tok = self.stack.token
            forged = tok[:-9] + ("0" if tok[-9] != "0" else "1") + tok[-8:]  # one secret digit changed
            for token, want in ((tok, 200), (forged, 401), (tok, 200), (tok + "x", 401)):
                conn.request("GET", "/api/v2/runtimes", headers={"Authorization": "Bearer " + token})
                resp = conn.getresponse()
                resp.read()
                self.assertEqual(resp.status, want, token[-12:])
        finally:
            conn.close()

    def test_404_for_unknown_path(self):
        for path in ("/", "/api/v2/packages", "/api/v2/execute/../../etc/passwd", "/admin"):
            status, headers, data = self.stack.request("GET", path)
            self.assert_json_error(status, headers, data, 404, "not_found")

    def test_405_for_wrong_method(self):
        status, headers, data = self.stack.request("GET", "/api/v2/execute")
        self.assert_json_error(status, headers, data, 405, "method_not_allowed")

    def test_log_line_has_time_and_duration_and_no_query_values(self):
        secret = "s3cr3t-query-value-%d" % os.getpid()
        status, headers, _ = self.stack.request("GET", "/api/v2/runtimes?access_token=%s&x=1&flag" % secret, token=None)
        self.assertEqual(status, 401)
        rid = headers["x-request-id"]
        line = wait_until(lambda: next((l for l in self.stack.log("gateway").splitlines() if "id=" + rid in l), None),
                          "the request's log line")
        self.assertNotIn(secret, self.stack.log("gateway"))
        self.assertIn("/api/v2/runtimes?access_token=*&x=*&flag 401", line)
        # RFC 3339 UTC time first; the request's duration in ms
        self.assertRegex(line, r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z moat-gateway: request: ")
        self.assertRegex(line, r" ms=\d+\.\d{3} ")

    def test_runtimes(self):
        status, _, data = self.stack.request("GET", "/api/v2/runtimes")
        self.assertEqual(status, 200)
        langs = {r["language"]: r for r in data}
        self.assertEqual(langs["python"]["version"], "3.11.2")
        self.assertIn("py", langs["python"]["aliases"])
        self.assertIn("bash", langs)

    def test_bad_json_is_400(self):
        status, headers, data = self.stack.request("POST", "/api/v2/execute", b"{not json",
                                                   headers={"Content-Type": "application/json"})
        self.assert_json_error(status, headers, data, 400)

    # ---- execution -----------------------------------------------------------

    def test_python_hello_world(self):
        status, _, data = self.stack.execute("python", 'print("hello, world")')
        self.assertEqual(status, 200, data)
        self.assertEqual(data["language"], "python")
        self.assertEqual(data["version"], "3.11.2")
        self.assertEqual(data["walls"], expected_walls())  # moat's: which walls held the box
        run = data["run"]
        self.assertEqual(run["stdout"], "hello, world\n")
        self.assertEqual(run["code"], 0)
        self.assertIsNone(run["signal"])
        self.assertIsNone(run["status"])
        for key in ("stdout", "stderr", "output", "code", "signal", "message", "status", "cpu_time", "wall_time",
                    "memory"):
            self.assertIn(key, run)
        self.assertNotIn("compile", data)

    def test_bash_hello_world_with_stdin_and_args(self):
        status, _, data = self.stack.execute("bash", 'read name; echo "hello $name $1"', stdin="moat\n",
                                             args=["x y"])
        self.assertEqual(status, 200, data)
        self.assertEqual(data["run"]["stdout"], "hello moat x y\n")
        self.assertEqual(data["run"]["code"], 0)

    def test_infinite_loop_times_out(self):
        status, _, data = self.stack.execute("python", "while True: pass", run_timeout=1000)
        self.assertEqual(status, 200, data)
        self.assertEqual(data["run"]["status"], "TO")
        self.assertEqual(data["run"]["signal"], "SIGKILL")
        self.assertGreaterEqual(data["run"]["wall_time"], 900)
        self.assertLess(data["run"]["wall_time"], 2000)

    def test_output_past_cap_is_ol(self):
        status, _, data = self.stack.execute("python", 'print("y" * 1000000)')
        self.assertEqual(status, 200, data)
        self.assertEqual(data["run"]["status"], "OL")
        self.assertEqual(len(data["run"]["stdout"]), 64 * 1024)

    def test_limit_above_ceiling_is_400(self):
        status, headers, data = self.stack.execute("python", "print(1)", run_timeout=10 ** 7)
        self.assert_json_error(status, headers, data, 400)
        self.assertIn("run_timeout", data["message"])

    def test_unknown_language_is_400(self):
        status, headers, data = self.stack.execute("brainfuck", "+")
        self.assert_json_error(status, headers, data, 400)
        self.assertIn("runtime is unknown", data["message"])


class ReadyWallsTest(unittest.TestCase):
    """Readiness names the walls of the backend's boxes, and a missing one by name."""

    def ready(self, stack):
        return wait_until(lambda: (lambda g: g if g[0] == 200 else None)(stack.request("GET", "/readyz", token=None)),
                          "/readyz 200")[2]

    def test_a_backend_without_landlock_is_ready_with_the_wall_named_missing(self):
        stack = Stack(backend_args=("--no-landlock",)).start()
        try:
            data = self.ready(stack)
            self.assertEqual((data["walls"], data.get("walls_missing")), ("namespaces+seccomp", ["landlock"]), data)
        finally:
            stack.stop()

    def test_nothing_missing_with_every_wall(self):
        if expected_missing():
            self.skipTest("this kernel has no Landlock: every backend here lacks that wall")
        stack = Stack().start()
        try:
            data = self.ready(stack)
            self.assertEqual(data["walls"], "namespaces+seccomp+landlock", data)
            self.assertNotIn("walls_missing", data)
        finally:
            stack.stop()


class BackendOutageTest(unittest.TestCase):
    """The backend stops: 503 with a JSON message; it comes back: 200 again."""

    def setUp(self):
        self.stack = Stack().start()

    def tearDown(self):
        self.stack.stop()

    def test_backend_down_503_then_recovers(self):
        status, _, data = self.stack.execute("python", "print(1)")
        self.assertEqual(status, 200, data)
        status, _, data = self.stack.request("GET", "/readyz", token=None)
        self.assertEqual((status, data.get("backend"), data.get("walls")), (200, "ok", expected_walls()), data)
        self.stack.stop_backend()
        for _ in range(3):
            status, headers, data = self.stack.execute("python", "print(1)")
            self.assertEqual(status, 503, data)
            self.assertIsInstance(data, dict)
            self.assertIn("backend", data["message"])
            self.assertEqual(data["code"], "backend_unavailable")
            self.assertEqual(data["request_id"], headers["x-request-id"])
            self.assertTrue(headers.get("retry-after", "").isdigit(), headers)  # every 503 says when to retry
        # liveness stays 200; readiness is 503 and names the backend (a
        # success is remembered for up to a second per worker: poll)
        status, _, _ = self.stack.request("GET", "/healthz", token=None)
        self.assertEqual(status, 200)
        ready = lambda: self.stack.request("GET", "/readyz", token=None)
        status, headers, data = wait_until(lambda: (lambda g: g if g[0] == 503 else None)(ready()), "/readyz 503")
        self.assertEqual(data["code"], "backend_unavailable")
        self.assertIn("backend", data["message"])
        self.assertTrue(headers.get("retry-after", "").isdigit(), headers)
        self.stack.start_backend()
        wait_until(lambda: ready()[0] == 200, "/readyz 200 again")
        status, _, data = self.stack.execute("python", "print(2)")
        self.assertEqual(status, 200, data)
        self.assertEqual(data["run"]["stdout"], "2\n")


if __name__ == "__main__":
    unittest.main()
