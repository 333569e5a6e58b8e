"""Judge0 callbacks (callback_url) through the real gateway, supervisor and
callback sender, to a real HTTPS receiver started here with a CA made for
this run: delivery with Judge0's body and a signature that verifies with the
tenant's secret, retries on a 5xx, refusal at submit time (no callbacks for
the tenant, http, a URL under no allowed prefix, userinfo, a loopback
literal without allow_private), refusal by the sender of a host name that
resolves to loopback, submissions that do not wait for a receiver that
never answers, the records naming the URL, and a sender that is restarted
when it dies."""

import base64
import hashlib
import hmac
import http.server
import json
import os
import pwd
import re
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import threading
import time
import unittest

from moat_harness import CALLBACK_SENDER, GATEWAY, SOURCE, Stack, wait_until

BIG = "rate: {per_second: 1000, burst: 1000}\nmax_in_flight: 64\n"
JUDGE0 = "endpoints: [execute, runtimes, submissions, languages]\n"
PY = 71
SECRET_HOOKS = b"hooks-secret-0123456789abcdef-0123456789"
SECRET_STRICT = b"strict-secret-0123456789abcdef-012345678"


class Receiver(http.server.ThreadingHTTPServer):
    """An HTTPS server that keeps every PUT; under /flaky/ the first PUT of each path gets a 500."""

    daemon_threads = True

    def __init__(self, certs):
        super().__init__(("127.0.0.1", 0), Handler)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(os.path.join(certs, "server.pem"), os.path.join(certs, "server.key"))
        self.socket = ctx.wrap_socket(self.socket, server_side=True)
        self.got, self.lock, self.seen_paths = [], threading.Lock(), set()

    def handle_error(self, request, client_address):
        pass  # a refused or cut connection is the test's business, not stderr's

    def puts(self, token=None):
        with self.lock:
            return [g for g in self.got if token is None or g["token"] == token]


class Handler(http.server.BaseHTTPRequestHandler):
    def do_PUT(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        try:
            token = json.loads(body).get("token")
        except ValueError:
            token = None
        srv = self.server
        with srv.lock:
            first = self.path not in srv.seen_paths
            srv.seen_paths.add(self.path)
            status = 500 if "/flaky/" in self.path and first else 200
            srv.got.append({"path": self.path, "headers": dict(self.headers), "body": body, "token": token,
                            "status": status, "at": time.time()})
        self.send_response(status)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args):
        pass


def loopback_host_name():
    """This host's name if it is a plain DNS name that resolves to loopback addresses only, else None."""
    name = socket.gethostname().lower()
    if not re.fullmatch(r"[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*", name) or name.isdigit():
        return None
    try:
        addrs = {ai[4][0] for ai in socket.getaddrinfo(name, 443, proto=socket.IPPROTO_TCP)}
    except OSError:
        return None
    return name if addrs and all(a.startswith("127.") or a == "::1" for a in addrs) else None


def verify(secret, header, body, tolerance=300):
    """What moat-api(7) tells a receiver to do with X-Moat-Signature."""
    parts = dict(p.split("=", 1) for p in header.split(","))
    want = hmac.new(secret, parts["t"].encode() + b"." + body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(want, parts["v1"]) and abs(time.time() - int(parts["t"])) < tolerance


class CallbackTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="moat-cb-test-")
        os.chmod(cls.tmp, 0o755)
        certs = os.path.join(cls.tmp, "certs")
        subprocess.run([os.path.join(SOURCE, "certs", "gen-dev-certs.sh"), certs], check=True, capture_output=True)
        cls.ca = os.path.join(cls.tmp, "receiver-ca.pem")
        shutil.copy(os.path.join(certs, "ca.pem"), cls.ca)
        os.chmod(cls.ca, 0o644)
        moat = pwd.getpwnam("moat")
        secrets = {}
        for name, value in (("hooks", SECRET_HOOKS), ("strict", SECRET_STRICT)):
            path = os.path.join(cls.tmp, name + ".secret")
            with open(path, "wb") as f:
                f.write(value + b"\n")
            os.chmod(path, 0o600)
            os.chown(path, moat.pw_uid, moat.pw_gid)  # the sender (and a reload) read it as the gateway's user
            secrets[name] = path
        cls.receiver = Receiver(certs)
        cls.port = cls.receiver.server_address[1]
        threading.Thread(target=cls.receiver.serve_forever, daemon=True).start()
        # a receiver that never answers: connections wait in its backlog
        cls.hole = socket.socket()
        cls.hole.bind(("127.0.0.1", 0))
        cls.hole.listen(64)
        cls.hole_port = cls.hole.getsockname()[1]
        p, h = cls.port, cls.hole_port
        hooks = ('callbacks: {allow: ["https://127.0.0.1:%d/hooks/", "https://localhost:%d/local", "https://127.0.0.1:%d/"], '
                 'allow_private: true, secret_file: %s}\n' % (p, p, h, secrets["hooks"]))
        # this host's name, when the system's resolver (not libcurl's own
        # shortcut for "localhost") answers a loopback address for it
        cls.loopback_name = loopback_host_name()
        named = ', "https://%s:%d/"' % (cls.loopback_name, p) if cls.loopback_name else ""
        strict = ('callbacks: {allow: ["https://127.0.0.1:%d/", "https://localhost:%d/", "https://[::1]:%d/"%s], '
                  'secret_file: %s}\n' % (p, p, p, named, secrets["strict"]))
        tenants = [("hooks", BIG + JUDGE0 + hooks, ""), ("strict", BIG + JUDGE0 + strict, ""), ("nocb", BIG + JUDGE0, "")]
        # an attempt to the hole lasts timeout_ms: long enough that a
        # submission that waited for it would show
        extra = ("callbacks:\n  sender: %s\n  ca_file: %s\n  retry_ms: 200\n  connect_timeout_ms: 60000\n"
                 "  timeout_ms: 60000\n  max_tries: 3\n" % (CALLBACK_SENDER, cls.ca))
        cls.stack = Stack(tenants=tenants, extra_config=extra).start()

    @classmethod
    def tearDownClass(cls):
        cls.stack.stop()
        cls.receiver.shutdown()
        cls.receiver.server_close()
        cls.hole.close()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def submit(self, callback_url, tenant="hooks", query="wait=true", code="print('hi')", expect=201):
        body = {"source_code": code, "language_id": PY}
        if callback_url is not None:
            body["callback_url"] = callback_url
        st, _, data = self.stack.request("POST", "/submissions?" + query, body, token=self.stack.tokens[tenant])
        self.assertEqual(st, expect, data)
        return data

    def url(self, path, host="127.0.0.1", port=None):
        return "https://%s:%d%s" % (host, port or self.port, path)

    def delivered(self, token, count=1):
        return wait_until(lambda: len(self.receiver.puts(token)) >= count and self.receiver.puts(token),
                          "the callback of %s" % token, detail=lambda: self.stack.log("gateway"))

    def log_has(self, *words):
        """One line of the gateway's log (the supervisor's and sender's too) holds every word."""
        with open(os.path.join(self.stack.tmp, "gateway.log"), errors="replace") as f:
            return any(all(w in line for w in words) for line in f)

    # ---- delivery ------------------------------------------------------

    def test_delivered_signed_judge0_body(self):
        data = self.submit(self.url("/hooks/done"), code="print('hello callback')")
        put = self.delivered(data["token"])[0]
        self.assertEqual(put["path"], "/hooks/done")
        self.assertEqual(put["headers"]["Content-Type"], "application/json")
        body = json.loads(put["body"])
        # Judge0's callback: the default fields, the texts in base64
        self.assertEqual(sorted(body), sorted(["stdout", "time", "memory", "stderr", "token", "compile_output", "message",
                                               "status"]))
        self.assertEqual(body["token"], data["token"])
        self.assertEqual(body["status"], {"id": 3, "description": "Accepted"})
        self.assertEqual(base64.b64decode(body["stdout"]), b"hello callback\n")
        sig = put["headers"]["X-Moat-Signature"]
        self.assertTrue(verify(SECRET_HOOKS, sig, put["body"]), sig)
        # the signature is over these bytes with this tenant's secret only
        self.assertFalse(verify(SECRET_STRICT, sig, put["body"]))
        self.assertFalse(verify(SECRET_HOOKS, sig, put["body"] + b" "))

    def test_async_submission_called_back(self):
        data = self.submit(self.url("/hooks/async"), query="wait=false", code="import sys; sys.exit(3)")
        body = json.loads(self.delivered(data["token"])[0]["body"])
        self.assertEqual(body["status"]["id"], 11)  # Runtime Error (NZEC)
        st, _, got = self.stack.request("GET", "/submissions/%s?fields=callback_url,status" % data["token"],
                                        token=self.stack.tokens["hooks"])
        self.assertEqual(st, 200, got)
        self.assertEqual(got["callback_url"], self.url("/hooks/async"))

    def test_batch_entries_called_back(self):
        """A batch's entries (one source: one compile, a run each) are each called back."""
        subs = [{"source_code": "print(input())", "language_id": PY, "stdin": x, "callback_url": self.url("/hooks/batch/" + x)}
                for x in ("one", "two")]
        st, _, data = self.stack.request("POST", "/submissions/batch", {"submissions": subs}, token=self.stack.tokens["hooks"])
        self.assertEqual(st, 201, data)
        for entry, x in zip(data, ("one", "two")):
            put = self.delivered(entry["token"])[0]
            self.assertEqual(put["path"], "/hooks/batch/" + x)
            self.assertEqual(base64.b64decode(json.loads(put["body"])["stdout"]), x.encode() + b"\n")

    def test_host_name_allowed_private(self):
        data = self.submit(self.url("/local/x", host="localhost"))
        put = self.delivered(data["token"])[0]
        self.assertTrue(verify(SECRET_HOOKS, put["headers"]["X-Moat-Signature"], put["body"]))

    def test_retried_after_500(self):
        data = self.submit(self.url("/hooks/flaky/1"))
        puts = self.delivered(data["token"], count=2)
        self.assertEqual([p["status"] for p in puts], [500, 200])
        self.assertEqual(puts[0]["body"], puts[1]["body"])
        for p in puts:  # each attempt signed afresh
            self.assertTrue(verify(SECRET_HOOKS, p["headers"]["X-Moat-Signature"], p["body"]))
        wait_until(lambda: self.log_has("token=%s" % data["token"], "attempt 2: delivered"), "the delivery's log line",
                   detail=lambda: self.stack.log("gateway"))

    def test_config_info_says_so(self):
        for tenant, on in (("hooks", True), ("nocb", False)):
            st, _, ci = self.stack.request("GET", "/config_info", token=self.stack.tokens[tenant])
            self.assertEqual(st, 200, ci)
            self.assertIs(ci["enable_callbacks"], on, tenant)
            self.assertEqual(ci["callbacks_max_tries"], 3 if on else 0)
            self.assertEqual(ci["callbacks_timeout"], 60.0 if on else 0)

    # ---- refused at submit time -----------------------------------------

    def refused(self, callback_url, tenant, words):
        data = self.submit(callback_url, tenant=tenant, expect=422)
        self.assertIn("callback_url", data)
        for w in words:
            self.assertIn(w, data["callback_url"][0])
            self.assertIn(w, data["message"])
        return data

    def test_refused_without_callbacks(self):
        self.refused(self.url("/hooks/x"), "nocb", ["not enabled"])

    def test_refused_http(self):
        self.refused("http://127.0.0.1:%d/hooks/x" % self.port, "hooks", ["https"])

    def test_refused_outside_prefix(self):
        self.refused(self.url("/other"), "hooks", ["prefix"])
        self.refused(self.url("/hooksX/y"), "hooks", ["prefix"])  # /hooks/ is a whole segment
        self.refused(self.url("/local.evil/x", host="localhost"), "hooks", ["prefix"])
        self.refused(self.url("/hooks/../x"), "hooks", ["normal form"])
        self.refused("https://127.0.0.1:%d@evil.example/hooks/" % self.port, "hooks", ["user information"])

    def test_refused_loopback_literal(self):
        self.refused(self.url("/x"), "strict", ["loopback"])
        self.refused(self.url("/x", host="[::1]"), "strict", ["loopback"])

    def test_batch_entry_refused(self):
        subs = [{"source_code": "print(1)", "language_id": PY, "callback_url": self.url("/x")},
                {"source_code": "print(2)", "language_id": PY}]
        st, _, data = self.stack.request("POST", "/submissions/batch", {"submissions": subs},
                                         token=self.stack.tokens["strict"])
        self.assertEqual(st, 201, data)
        self.assertIn("loopback", data[0]["callback_url"][0])
        self.assertIn("token", data[1])

    # ---- refused by the sender ------------------------------------------

    def test_sender_refuses_name_resolving_to_loopback(self):
        """localhost passes the submit-time check (a name, under a prefix), and
        the sender refuses the address it resolves to: nothing is sent."""
        url = self.url("/never", host="localhost")
        data = self.submit(url, tenant="strict")
        wait_until(lambda: self.log_has("token=%s" % data["token"], "given up: refused", "loopback address"),
                   "the sender's refusal", detail=lambda: self.stack.log("gateway"))
        self.assertEqual(self.receiver.puts(data["token"]), [])
        self.assertEqual([p for p in self.receiver.puts() if p["path"] == "/never"], [])

    def test_sender_refuses_resolved_name(self):
        """The same through the system's resolver (libcurl answers "localhost" itself)."""
        if not self.loopback_name:
            self.skipTest("this host's name does not resolve to loopback only")
        data = self.submit(self.url("/never-named", host=self.loopback_name), tenant="strict")
        wait_until(lambda: self.log_has("token=%s" % data["token"], "given up: refused", "loopback address"),
                   "the sender's refusal", detail=lambda: self.stack.log("gateway"))
        self.assertEqual(self.receiver.puts(data["token"]), [])

    # ---- never waited for -------------------------------------------------

    def test_unreachable_receiver_does_not_slow_submissions(self):
        def timed(n, url):
            worst = 0.0
            for _ in range(n):
                start = time.monotonic()
                self.submit(url)
                worst = max(worst, time.monotonic() - start)
            return worst
        baseline = timed(3, None)
        hole = "https://127.0.0.1:%d/x" % self.hole_port
        with_hole = timed(6, hole)  # each attempt hangs for timeout_ms (60 s)
        self.assertLess(with_hole, 3 * baseline + 5, "baseline %.2f s" % baseline)
        # and the sender still delivers to a receiver that answers meanwhile
        data = self.submit(self.url("/hooks/after-hole"))
        self.delivered(data["token"])

    # ---- records and restarts ---------------------------------------------

    def test_records_name_the_url(self):
        data = self.submit(self.url("/hooks/recorded"))
        self.delivered(data["token"])
        recs = wait_until(lambda: [r for r in self.stack.audit_records()
                                   if r.get("judge0", {}).get("token") == data["token"] and
                                   r.get("judge0", {}).get("callback_url")],
                          "the request record")
        self.assertEqual(recs[0]["judge0"]["callback_url"], self.url("/hooks/recorded"))

    def test_reload_reaches_the_sender(self):
        """SIGHUP (to the supervisor) reaches the sender, which loads the
        configuration again as its user, secrets included, and goes on."""
        moat = pwd.getpwnam("moat")
        os.chown(self.stack.config, 0, moat.pw_gid)
        os.chmod(self.stack.config, 0o640)
        try:
            self.stack.gateway.send_signal(signal.SIGHUP)
            wait_until(lambda: self.log_has("moat-callback-sender", "configuration reloaded"), "the sender's reload",
                       detail=lambda: self.stack.log("gateway"))
            self.assertFalse(self.log_has("moat-callback-sender", "reload failed"))
            data = self.submit(self.url("/hooks/after-reload"))
            put = self.delivered(data["token"])[0]
            self.assertTrue(verify(SECRET_HOOKS, put["headers"]["X-Moat-Signature"], put["body"]))
        finally:
            os.chmod(self.stack.config, 0o600)

    def test_sender_restarted(self):
        pids = subprocess.run(["pgrep", "-f", "moat-callback-sender --config %s" % self.stack.config],
                              capture_output=True, text=True).stdout.split()
        self.assertEqual(len(pids), 1, pids)
        os.kill(int(pids[0]), signal.SIGKILL)

        def new_sender():
            now = subprocess.run(["pgrep", "-f", "moat-callback-sender --config %s" % self.stack.config],
                                 capture_output=True, text=True).stdout.split()
            return now and now != pids
        wait_until(new_sender, "a new callback sender", detail=lambda: self.stack.log("gateway"))
        data = self.submit(self.url("/hooks/after-restart"))
        self.delivered(data["token"])


class QueueFullTest(unittest.TestCase):
    """callbacks.max_queue: past it the sender drops a callback and says so;
    the submission is answered all the same."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="moat-cb-test-")
        os.chmod(cls.tmp, 0o755)
        secret = os.path.join(cls.tmp, "q.secret")
        with open(secret, "wb") as f:
            f.write(SECRET_HOOKS)
        os.chmod(secret, 0o600)
        moat = pwd.getpwnam("moat")
        os.chown(secret, moat.pw_uid, moat.pw_gid)
        cls.hole = socket.socket()
        cls.hole.bind(("127.0.0.1", 0))
        cls.hole.listen(64)
        cb = 'callbacks: {allow: ["https://127.0.0.1:%d/"], allow_private: true, secret_file: %s}\n' % (
            cls.hole.getsockname()[1], secret)
        extra = ("callbacks:\n  sender: %s\n  max_queue: 1\n  max_in_flight: 1\n  timeout_ms: 60000\n"
                 "  connect_timeout_ms: 60000\n" % CALLBACK_SENDER)
        cls.stack = Stack(tenants=[("q", BIG + JUDGE0 + cb, "")], extra_config=extra).start()

    @classmethod
    def tearDownClass(cls):
        cls.stack.stop()
        cls.hole.close()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def test_dropped_past_max_queue(self):
        url = "https://127.0.0.1:%d/x" % self.hole.getsockname()[1]
        tokens = []
        for _ in range(2):
            st, _, data = self.stack.request("POST", "/submissions?wait=true",
                                             {"source_code": "print(1)", "language_id": PY, "callback_url": url},
                                             token=self.stack.tokens["q"])
            self.assertEqual(st, 201, data)
            tokens.append(data["token"])

        def dropped():
            with open(os.path.join(self.stack.tmp, "gateway.log"), errors="replace") as f:
                return any("token=%s" % tokens[1] in l and "queue is full" in l for l in f)
        wait_until(dropped, "the second callback dropped", detail=lambda: self.stack.log("gateway"))



class ConfigCheckTest(unittest.TestCase):
    """moat-gateway -n: the callbacks section needs the audit section, a
    tenant's callbacks need the section, and the sender must exist."""

    def check(self, **kw):
        stack = Stack(**kw)
        try:
            return subprocess.run([GATEWAY, "-c", stack.config, "-n"], capture_output=True, text=True, timeout=60)
        finally:
            stack.stop()

    def test_section_needs_audit(self):
        p = self.check(audit=False, extra_config="callbacks: {max_tries: 2}\n")
        self.assertEqual(p.returncode, 1, p.stdout)
        self.assertIn("the callbacks section needs the audit section", p.stderr)

    def test_tenant_callbacks_need_the_section(self):
        with tempfile.NamedTemporaryFile(dir="/tmp", prefix="moat-cb-test-") as f:
            f.write(SECRET_HOOKS)
            f.flush()
            cb = 'callbacks: {allow: ["https://hooks.example.com/x/"], secret_file: %s}\n' % f.name
            p = self.check(tenants=[("t", BIG + JUDGE0 + cb, "")])
        self.assertEqual(p.returncode, 1, p.stdout)
        self.assertIn("tenant t has callbacks but there is no top-level callbacks section", p.stderr)

    def test_sender_must_exist(self):
        p = self.check(extra_config="callbacks: {sender: /nonexistent/moat-callback-sender}\n")
        self.assertEqual(p.returncode, 1, p.stdout)
        self.assertIn("callbacks.sender /nonexistent/moat-callback-sender: No such file or directory", p.stderr)

if __name__ == "__main__":
    unittest.main()
