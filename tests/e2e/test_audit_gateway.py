"""The audit trail through the real gateway (moat-backend + moat-gateway
with its root supervisor and moat-audit-writer, as tests/e2e/moat_harness.py
starts them): one `request` record per request with the right decision and
reason on every deny path; an allowed execution's request and result records
with hashes that match what the client sent and got; packets that round-trip
byte for byte; fail closed on a full audit disk (nothing runs) and recovery
without a restart; the writer killed under the gateway (tests/SECURITY-CHECKS.md
F8) with no acknowledged record lost; concurrent workers with an intact
chain; and A6 (the gateway's user cannot rewrite the log).

Denial records are written without holding the response (only an allowed
execution waits for durability), so the tests poll the log for them.
Only Debian's python3 standard library is used; needs root.
"""

import base64
import hashlib
import json
import os
import pwd
import signal
import struct
import subprocess
import threading
import time
import unittest

from moat_harness import (LONG_WALL_MS, MOAT_AUDIT, SmallAuditDisk, Stack, expected_walls, held_program, held_roots,
                          release_all, wait_held, wait_until)

BIG = "rate: {per_second: 1000, burst: 1000}\nmax_in_flight: 64\n"

TENANTS = [
    ("main", BIG + """endpoints: [execute, runtimes]
languages:
  - python
limits:
  run_timeout_ms: 2000
content_rules:
  - {name: no-os-system, pattern: "os\\\\.system"}
""", ""),
    ("execonly", BIG + "endpoints: [execute]\n", ""),
    ("scoped", BIG, "scopes: [runtimes]"),
    ("expired", BIG, "expires: 2020-01-01T00:00:00Z"),
    ("limited", "rate: {per_second: 0.001, burst: 1}\n", ""),
    # its jobs may run as long as a held job needs (test_deny_concurrency)
    ("single", "rate: {per_second: 1000, burst: 1000}\nmax_in_flight: 1\nlimits:\n  run_timeout_ms: %d\n" % LONG_WALL_MS,
     ""),
    # a CPU spin must finish however busy the machine: a long wall limit
    ("quota", "rate: {per_second: 1000, burst: 1000}\ncpu_seconds_per_minute: 1\nlimits:\n  run_timeout_ms: %d\n" % LONG_WALL_MS,
     ""),
]

EXECUTE = "/api/v2/execute"
RUNTIMES = "/api/v2/runtimes"


def audit_cli(*args):
    return subprocess.run([MOAT_AUDIT, *args], capture_output=True, timeout=120)


def tlv(tag, value):
    return struct.pack(">HI", tag, len(value)) + value


def canonical_request(language, version, files, stdin=b"", args=(), limits=None):
    """The EXEC_REQUEST payload the backend receives (backend/protocol/
    PROTOCOL.md), built independently of the gateway's encoder, for
    request_sha256."""
    p = tlv(1, language.encode()) + tlv(2, version.encode())
    for name, content in files:
        p += tlv(3, tlv(1, name.encode()) + tlv(2, content))
    if stdin:
        p += tlv(4, stdin)
    for a in args:
        p += tlv(5, a.encode())
    for tag, key in ((6, "run_timeout_ms"), (7, "compile_timeout_ms"), (8, "run_memory_bytes"),
                     (9, "compile_memory_bytes")):
        p += tlv(tag, struct.pack(">Q", limits[key]))
    return p


def sha256(b):
    return hashlib.sha256(b).hexdigest()


def children(pid):
    """Pids whose parent is pid."""
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open("/proc/%s/stat" % d) as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                        out.append(int(d))
            except (OSError, IndexError, ValueError):
                pass
    return out


def cmdline(pid):
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            return [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
    except OSError:
        return []


def writer_pid(stack):
    """The moat-audit-writer serving this stack (a child of its supervisor,
    with --dir set to the stack's audit directory), or None."""
    for pid in children(stack.gateway.pid):
        argv = cmdline(pid)
        if argv and argv[0].endswith("moat-audit-writer") and "--dir" in argv and \
                argv[argv.index("--dir") + 1] == stack.audit_dir:
            return pid
    return None


def gateway_worker_pid(stack):
    """The moat-gateway process that serves requests (the supervisor's child)."""
    for pid in children(stack.gateway.pid):
        argv = cmdline(pid)
        if argv and argv[0].endswith("moat-gateway"):
            return pid
    return None


class AuditStackMixin:
    """Helpers over self.stack."""

    def records(self):
        return self.stack.audit_records()

    def wait_records(self, request_ids, per_id=1):
        """Polls the verified log until every id has at least per_id records
        (an int, or a dict id -> count); returns {id: [records]}."""
        want = per_id if isinstance(per_id, dict) else {i: per_id for i in request_ids}
        state = {}

        def all_there():
            got = {}
            for r in self.records():
                if r.get("request_id") in want:
                    got.setdefault(r["request_id"], []).append(r)
            state["missing"] = [i for i in want if len(got.get(i, [])) < want[i]]
            return None if state["missing"] else got

        return wait_until(all_there, "the audit records of %d request(s)" % len(want),
                          detail=lambda: "%d missing, e.g. %s" % (len(state["missing"]), state["missing"][:3]))

    def absence_window(self):
        """Waits out the span within which a record would have reached the log
        if it was going to: the gateway sends records within 10 ms and the
        writer syncs them within 100 ms.  Only for checking that no further
        record comes: a slow machine can make a check after it miss a late
        record, never fail a correct gateway."""
        time.sleep(0.3)

    def verify(self):
        p = audit_cli("verify", self.stack.audit_dir)
        self.assertEqual(p.returncode, 0, p.stderr.decode(errors="replace"))

    def assert_contiguous(self, recs):
        seqs = [r["seq"] for r in recs]
        self.assertEqual(seqs, list(range(1, len(seqs) + 1)), "seq not contiguous from 1")


class CadenceTest(AuditStackMixin, unittest.TestCase):
    """The writer's cadences and disk reserve from gateway.conf reach
    moat-audit-writer and shape the trail: a checkpoint every 5 records, a
    new key epoch every 7."""

    @classmethod
    def setUpClass(cls):
        if os.geteuid() != 0:
            raise unittest.SkipTest("needs root")
        cls.stack = Stack(audit_extra="  checkpoint_records: 5\n  epoch_records: 7\n  packet_retention_days: 0\n"
                                      "  checkpoint_delay_ms: 250\n  reserve_bytes: 2097152\n").start()

    @classmethod
    def tearDownClass(cls):
        cls.stack.stop()

    def test_cadences(self):
        argv = cmdline(writer_pid(self.stack))
        for flag, value in (("--checkpoint-records", "5"), ("--epoch-records", "7"), ("--packet-retention-days", "0"),
                            ("--checkpoint-delay-ms", "250"), ("--reserve-bytes", "2097152")):
            self.assertIn(flag, argv)
            self.assertEqual(argv[argv.index(flag) + 1], value)
        self.assertNotIn("--rotate-bytes", argv)  # not set: the writer's default
        ids = [self.stack.request("GET", "/api/v2/nope", token=None)[1]["x-request-id"] for _ in range(30)]
        self.wait_records(ids)
        recs = self.records()
        ckpt = [r["seq"] for r in recs if r.get("type") == "checkpoint"]
        self.assertGreaterEqual(len(ckpt), 6, ckpt)
        # 5 records, then the checkpoint over them
        self.assertTrue(all(b - a <= 6 for a, b in zip(ckpt, ckpt[1:])), ckpt)
        self.assertGreaterEqual(max(r["epoch"] for r in recs), 4)
        self.verify()


class DenyAndAllowTest(AuditStackMixin, unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if os.geteuid() != 0:
            raise unittest.SkipTest("needs root")
        cls.stack = Stack(tenants=TENANTS, backend_args=["-o", "run_timeout=%d" % LONG_WALL_MS]).start()

    @classmethod
    def tearDownClass(cls):
        cls.stack.stop()

    def as_(self, tenant, method, path, body=None, headers=None, token="tenant"):
        if token == "tenant":
            token = self.stack.tokens[tenant]
        return self.stack.request(method, path, body, token=token, headers=headers)

    def run_as(self, tenant, code, **extra):
        body = {"language": "python", "version": "*", "files": [{"name": "main.py", "content": code}]}
        body.update(extra)
        return self.as_(tenant, "POST", EXECUTE, body)

    # ---- 1. every deny path ----------------------------------------------------------------

    def check_denial(self, got, status, reason, tenant=None, rule=None, endpoint=None):
        st, headers, data = got
        self.assertEqual(st, status, data)
        rid = headers["x-request-id"]
        self.assertEqual(data["request_id"], rid)
        recs = self.wait_records([rid])[rid]
        self.absence_window()  # a second record would have arrived by now
        recs = [r for r in self.records() if r.get("request_id") == rid]
        self.assertEqual(len(recs), 1, recs)
        r = recs[0]
        self.assertEqual((r["type"], r["decision"], r["reason"], r["status"]), ("request", "denied", reason, status), r)
        self.assertEqual(r["message"], data["message"])
        self.assertEqual(r["client"], "127.0.0.1")
        if tenant is not None:
            self.assertEqual((r["tenant"], r["key_id"]), (tenant, self.stack.key_ids[tenant]), r)
        else:
            self.assertIsNone(r["tenant"], r)
        if rule is not None:
            self.assertEqual(r.get("rule"), rule, r)
        else:
            self.assertNotIn("rule", r)
        if endpoint is not None:
            self.assertEqual(r["endpoint"], endpoint)
        line = json.dumps(r)
        for token in self.stack.tokens.values():
            self.assertNotIn(token, line)
            self.assertNotIn(token.rsplit("_", 1)[-1], line)
        return r

    def test_deny_no_token(self):
        r = self.check_denial(self.as_("main", "POST", EXECUTE, {"language": "python"}, token=None), 401, "auth")
        self.assertIsNone(r["key_id"])

    def test_deny_bad_token(self):
        good = self.stack.tokens["main"]
        bad = good[:-6] + ("AAAAAA" if not good.endswith("AAAAAA") else "BBBBBB")
        r = self.check_denial(self.as_("main", "POST", EXECUTE, {"language": "python"}, token=bad), 401, "auth")
        self.assertNotIn(bad, json.dumps(r))
        # nor anywhere in the log files
        for name in os.listdir(self.stack.audit_dir):
            if name.startswith("audit-"):
                with open(os.path.join(self.stack.audit_dir, name), "rb") as f:
                    text = f.read()
                self.assertNotIn(bad.encode(), text)
                self.assertNotIn(good.encode(), text)

    def test_deny_expired_key(self):
        r = self.check_denial(self.as_("expired", "GET", RUNTIMES), 401, "auth")
        self.assertEqual(r["key_id"], self.stack.key_ids["expired"])

    def test_deny_unknown_path(self):
        r = self.check_denial(self.as_("main", "GET", "/api/v2/nope"), 404, "endpoint", endpoint="/api/v2/nope")
        self.assertEqual(r["method"], "GET")

    def test_deny_hostile_endpoint(self):
        """Client bytes in a denial record: quotes, a backslash, control
        characters and DEL take the gateway's fast (jansson-free) encoder;
        bytes that are not ASCII, valid UTF-8 or not, take the jansson one.
        Either way: one record, a line of printable ASCII only, the endpoint
        read back as the gateway saw it, and the chain verifies."""
        cases = [
            ("/api/v2/q%22b%5Cs%01c%0Ad%7Fe", "/api/v2/q\"b\\s\x01c\nd\x7fe"),
            ("/api/v2/caf%C3%A9", "/api/v2/caf\u00e9"),
            ("/api/v2/bad%FFutf8", "/api/v2/bad\ufffdutf8"),
        ]
        for path, endpoint in cases:
            with self.subTest(path=path):
                self.check_denial(self.as_("main", "GET", path), 404, "endpoint", tenant=None, endpoint=endpoint)
        for name in sorted(os.listdir(self.stack.audit_dir)):
            if name.startswith("audit-"):
                with open(os.path.join(self.stack.audit_dir, name), "rb") as f:
                    for line in f.read().split(b"\n")[:-1]:
                        self.assertTrue(all(0x20 <= c < 0x7f for c in line), line)
        self.verify()

    def test_deny_wrong_method(self):
        self.check_denial(self.as_("main", "GET", EXECUTE), 405, "endpoint")

    def test_deny_endpoint_not_allowed(self):
        r = self.check_denial(self.as_("execonly", "GET", RUNTIMES), 403, "endpoint", tenant="execonly")
        self.assertTrue(r["endpoint"].endswith("runtimes"), r)

    def test_deny_scope(self):
        self.check_denial(self.run_as("scoped", "print(1)"), 403, "endpoint", tenant="scoped")

    def test_deny_language(self):
        body = {"language": "bash", "version": "*", "files": [{"content": "echo a"}]}
        self.check_denial(self.as_("main", "POST", EXECUTE, body), 403, "language", tenant="main")

    def test_deny_limit_above_ceiling(self):
        self.check_denial(self.run_as("main", "print(1)", run_timeout=2001), 400, "limit", tenant="main")

    def test_deny_bad_json(self):
        self.check_denial(self.as_("main", "POST", EXECUTE, '{"language": "python", ',
                                   headers={"Content-Type": "application/json"}), 400, "filter", tenant="main")

    def test_deny_unknown_field(self):
        self.check_denial(self.run_as("main", "print(1)", bogus=1), 400, "filter", tenant="main")

    def test_deny_content_type(self):
        body = json.dumps({"language": "python", "version": "*", "files": [{"content": "print(1)"}]})
        self.check_denial(self.as_("main", "POST", EXECUTE, body, headers={"Content-Type": "text/plain"}), 415,
                          "filter", tenant="main")

    def test_deny_content_rule(self):
        self.check_denial(self.run_as("main", "import os\nos.system('id')"), 422, "content", tenant="main",
                          rule="no-os-system")

    def test_deny_rate(self):
        self.assertEqual(self.as_("limited", "GET", RUNTIMES)[0], 200)
        self.check_denial(self.as_("limited", "GET", RUNTIMES), 429, "rate", tenant="limited")

    def test_deny_concurrency(self):
        results = {}

        def slow():
            results["slow"] = self.run_as("single", held_program(), run_timeout=LONG_WALL_MS)

        t = threading.Thread(target=slow)
        t.start()
        try:
            wait_held(self.stack.tag)  # the tenant's one request in flight is running
            self.check_denial(self.run_as("single", "print(1)"), 429, "concurrency", tenant="single")
        finally:
            release_all(self.stack.tag)
            t.join()
        self.assertEqual(results["slow"][0], 200)

    def test_deny_quota(self):
        st, _, data = self.run_as("quota", "import time\nt = time.process_time()\n"
                                           "while time.process_time() - t < 1.2: pass\n", run_timeout=LONG_WALL_MS)
        self.assertEqual(st, 200, data)
        self.assertIsNone(data["run"]["status"], data)  # the spin finished: its 1.2 s of CPU are charged
        self.check_denial(self.run_as("quota", "print(1)"), 429, "quota", tenant="quota")

    # ---- 2. an allowed execution ------------------------------------------------------------

    def test_allowed_execution_records(self):
        code = "import sys\nprint('h\u00e9llo')\nsys.stdout.write(sys.stdin.read().upper())\n"
        extra = b"x = 1\n\x00\xff binary\n"
        stdin = "some input\n"
        body = {"language": "python", "version": "*", "stdin": stdin, "args": ["a", "b c"], "compile_timeout": 5000,
                "files": [{"name": "main.py", "content": code},
                          {"name": "extra.bin", "encoding": "base64", "content": base64.b64encode(extra).decode()}]}
        st, headers, data = self.as_("main", "POST", EXECUTE, body)
        self.assertEqual(st, 200, data)
        self.assertEqual(data["run"]["stdout"], "h\u00e9llo\nSOME INPUT\n")
        rid = headers["x-request-id"]
        recs = self.wait_records([rid], per_id=2)[rid]
        self.absence_window()  # a third record would have arrived by now
        recs = [r for r in self.records() if r.get("request_id") == rid]
        self.assertEqual(sorted(r["type"] for r in recs), ["request", "result"], recs)
        req = next(r for r in recs if r["type"] == "request")
        res = next(r for r in recs if r["type"] == "result")
        self.assertLess(req["seq"], res["seq"])
        for r in (req, res):
            self.assertEqual((r["decision"], r["reason"], r["status"]), ("allowed", None, 200), r)
            self.assertEqual((r["tenant"], r["key_id"]), ("main", self.stack.key_ids["main"]))
            self.assertTrue(r["endpoint"].endswith("execute"), r)
            self.assertEqual(r["method"], "POST")
        self.assertEqual((req["language"], req["version"]), ("python", "*"))
        self.assertEqual(req["files"], [
            {"name": "main.py", "bytes": len(code.encode()), "sha256": sha256(code.encode())},
            {"name": "extra.bin", "bytes": len(extra), "sha256": sha256(extra)}])
        self.assertEqual((req["stdin_bytes"], req["args"]), (len(stdin), 2))
        lim = req["limits"]
        # the tenant's default run timeout, the client's compile timeout, the server's memory defaults
        self.assertEqual((lim["run_timeout_ms"], lim["compile_timeout_ms"]), (2000, 5000))
        self.assertGreater(lim["run_memory_bytes"], 0)
        self.assertGreater(lim["compile_memory_bytes"], 0)
        canon = canonical_request("python", "*", [("main.py", code.encode()), ("extra.bin", extra)], stdin.encode(),
                                  ["a", "b c"], lim)
        self.assertEqual(req["request_sha256"], sha256(canon))
        self.assertNotIn("compile", res)  # python has no compile stage
        run, got = res["run"], data["run"]
        out = got["stdout"].encode()
        self.assertEqual((run["status"], run["code"], run["signal"]), ("OK", 0, None))
        self.assertEqual((run["cpu_ms"], run["wall_ms"], run["memory_bytes"]),
                         (got["cpu_time"], got["wall_time"], got["memory"]))
        self.assertEqual((run["stdout_bytes"], run["stdout_sha256"]), (len(out), sha256(out)))
        self.assertEqual((run["stderr_bytes"], run["stderr_sha256"]), (0, sha256(b"")))
        self.assertRegex(res["packet"], "^[0-9a-f]{64}$")
        self.assertNotIn("packet", req)
        # the packet named by the record is where the record says, in the pack beside the log
        name, off, size = res["packet_at"].split(":")
        with open(os.path.join(self.stack.audit_dir, name), "rb") as f:
            f.seek(int(off))
            self.assertEqual(sha256(f.read(int(size))), res["packet"])

    # ---- 3. packets round-trip -------------------------------------------------------------

    def test_packet_round_trip(self):
        binary = bytes(range(256)) * 3
        text = "h\u00e9llo w\u00f6rld \u4e16\u754c \U0001F600\U0001F680 \"quoted\" \\ \t tab\r\n\x7f\u2028 end"
        stdin = "".join(chr(c) for c in range(0, 0x80)) + "\u00ff\u0100\U0001F600" + "\x00\x01"
        code = ("import sys,hashlib\n"
                "for n in ('bin.dat','text.txt'):\n"
                "    print(n, hashlib.sha256(open(n,'rb').read()).hexdigest())\n"
                "d = sys.stdin.buffer.read()\n"
                "print('stdin', len(d), hashlib.sha256(d).hexdigest())\n"
                "sys.stdout.write('\U0001F600 out\\n')\n")
        files = [{"name": "main.py", "content": code},
                 {"name": "bin.dat", "encoding": "base64", "content": base64.b64encode(binary).decode()},
                 {"name": "text.txt", "content": text}]
        body = {"language": "python", "version": "*", "files": files, "stdin": stdin, "args": ["\u00e9", "x\ny"]}
        st, headers, data = self.as_("main", "POST", EXECUTE, body)
        self.assertEqual(st, 200, data)
        # the program saw the bytes we sent
        self.assertEqual(data["run"]["stdout"].splitlines(), [
            "bin.dat " + sha256(binary), "text.txt " + sha256(text.encode()),
            "stdin %d %s" % (len(stdin.encode()), sha256(stdin.encode())), "\U0001F600 out"])
        rid = headers["x-request-id"]
        res = next(r for r in self.wait_records([rid], per_id=2)[rid] if r["type"] == "result")
        p = audit_cli("show", self.stack.audit_dir, rid, "--raw-packet")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(sha256(p.stdout), res["packet"])
        pk = json.loads(p.stdout)
        self.assertEqual((pk["request_id"], pk["tenant"]), (rid, "main"))
        q = pk["request"]
        self.assertEqual((q["language"], q["version"]), ("python", "*"))
        self.assertEqual([f["name"] for f in q["files"]], ["main.py", "bin.dat", "text.txt"])
        got = [base64.b64decode(f["content_base64"], validate=True) for f in q["files"]]
        self.assertEqual(got, [code.encode(), binary, text.encode()])
        self.assertEqual(base64.b64decode(q["stdin_base64"], validate=True), stdin.encode())
        self.assertEqual(q["args"], ["\u00e9", "x\ny"])
        self.assertEqual(q["run_timeout_ms"], 2000)
        self.assertEqual(pk["result"], data)
        # the human-readable show works too and names the packet as verified
        p = audit_cli("show", self.stack.audit_dir, rid)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn(res["packet"].encode(), p.stdout)
        # the walls that held the job: in the answer, the record, and what show prints
        self.assertEqual((data["walls"], res["walls"]), (expected_walls(), expected_walls()))
        self.assertIn(expected_walls().encode(), p.stdout)

    # ---- 6. concurrent writers under load ---------------------------------------------------

    def test_concurrent_mixed_load_chain_intact(self):
        token = self.stack.tokens["main"]
        outcomes, errors, lock = [], [], threading.Lock()

        def client(n):
            try:
                for i in range(25):
                    kind = ("exec", "runtimes", "401", "exec", "bad")[(n + i) % 5]
                    if kind == "exec":
                        got = self.stack.request("POST", EXECUTE, {"language": "python", "version": "*", "files": [
                            {"name": "main.py", "content": "print(%d)" % (n * 100 + i)}]}, token=token)
                    elif kind == "runtimes":
                        got = self.stack.request("GET", RUNTIMES, token=token)
                    elif kind == "401":
                        got = self.stack.request("GET", RUNTIMES, token=None)
                    else:
                        got = self.stack.request("POST", EXECUTE, {"language": "python"}, token=token)
                    with lock:
                        outcomes.append((kind, got[0], got[1]["x-request-id"], got[2]))
            except Exception as e:  # noqa: BLE001 - reported below
                with lock:
                    errors.append(repr(e))

        threads = [threading.Thread(target=client, args=(n,)) for n in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(300)
        self.assertEqual(errors, [])
        self.assertEqual(len(outcomes), 200)
        want_status = {"exec": 200, "runtimes": 200, "401": 401, "bad": 400}
        for kind, st, rid, data in outcomes:
            self.assertEqual(st, want_status[kind], (kind, data))
        want = {rid: 2 if kind == "exec" else 1 for kind, _, rid, _ in outcomes}
        got = self.wait_records(want, per_id=want)
        self.absence_window()  # so that the exact counts below would see a stray record
        self.verify()
        recs = self.records()
        self.assert_contiguous(recs)
        by_id = {}
        for r in recs:
            if r.get("request_id") in want:
                by_id.setdefault(r["request_id"], []).append(r)
        for kind, st, rid, data in outcomes:
            rs = by_id[rid]
            if kind == "exec":
                self.assertEqual(sorted(r["type"] for r in rs), ["request", "result"], rs)
                res = next(r for r in rs if r["type"] == "result")
                out = data["run"]["stdout"].encode()
                self.assertEqual(res["run"]["stdout_sha256"], sha256(out))
                self.assertLess(next(r for r in rs if r["type"] == "request")["seq"], res["seq"])
            else:
                self.assertEqual(len(rs), 1, rs)
                self.assertEqual(rs[0]["decision"], "allowed" if st == 200 else "denied")
                self.assertEqual(rs[0]["status"], st)
        print("\n    %d requests, %d records, verify OK" % (len(outcomes), len(recs)))

    # ---- 7. A6 through the stack -------------------------------------------------------------

    def test_a6_gateway_user_cannot_touch_the_log(self):
        self.assertEqual(self.run_as("main", "print(1)")[0], 200)
        adir = self.stack.audit_dir
        logs = [os.path.join(adir, n) for n in sorted(os.listdir(adir)) if n.startswith("audit-")]
        self.assertTrue(logs)
        moat = pwd.getpwnam("moat")
        audit_user = pwd.getpwnam("moat-audit")
        self.assertEqual(os.stat(adir).st_mode & 0o777, 0o700)
        for path in logs + [os.path.join(adir, n) for n in ("state", "signing.key", "checkpoints.log")]:
            st = os.stat(path)
            self.assertEqual((st.st_uid, st.st_mode & 0o077), (audit_user.pw_uid, 0), path)
        # the request handlers run as moat and hold no descriptor into the audit directory
        gw = gateway_worker_pid(self.stack)
        self.assertIsNotNone(gw)
        with open("/proc/%d/status" % gw) as f:
            uids = next(l for l in f if l.startswith("Uid:")).split()[1:]
        self.assertEqual(set(map(int, uids)), {moat.pw_uid})
        for fd in os.listdir("/proc/%d/fd" % gw):
            try:
                target = os.readlink("/proc/%d/fd/%s" % (gw, fd))
            except OSError:
                continue
            self.assertFalse(target.startswith(adir), "the gateway holds %s" % target)

        def as_moat():
            os.setgroups([])
            os.setgid(moat.pw_gid)
            os.setuid(moat.pw_uid)

        probe = ("import os,sys\nbad=[]\n"
                 "for p in sys.argv[1:]:\n"
                 "  for what,f in [('open',lambda:os.open(p,os.O_WRONLY)),('append',lambda:os.open(p,os.O_WRONLY|os.O_APPEND)),"
                 "('truncate',lambda:os.truncate(p,0)),('unlink',lambda:os.unlink(p)),('read',lambda:os.open(p,os.O_RDONLY)),"
                 "('rename',lambda:os.rename(p,p+'.x'))]:\n"
                 "    try:\n      f(); bad.append(what+' '+p)\n    except OSError: pass\n"
                 "try:\n  os.open(os.path.join(os.path.dirname(sys.argv[1]),'new.log'),os.O_WRONLY|os.O_CREAT,0o600); bad.append('create')\n"
                 "except OSError: pass\n"
                 "print(','.join(bad))\n")
        targets = logs + [os.path.join(adir, "state"), os.path.join(adir, "checkpoints.log")]
        p = subprocess.run(["/usr/bin/python3", "-c", probe, *targets], preexec_fn=as_moat, capture_output=True,
                           timeout=30)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(p.stdout.strip(), b"", "user moat could: %s" % p.stdout)
        self.verify()


class WriterKilledTest(AuditStackMixin, unittest.TestCase):
    """F8: kill -9 the audit writer under load."""

    def setUp(self):
        if os.geteuid() != 0:
            self.skipTest("needs root")
        self.stack = Stack().start()

    def tearDown(self):
        self.stack.stop()

    def test_writer_killed_fail_closed_then_recovers(self):
        body = {"language": "python", "version": "*", "files": [{"name": "main.py", "content": "print(7)"}]}
        self.assertEqual(self.stack.request("POST", EXECUTE, body)[0], 200)
        old = writer_pid(self.stack)
        self.assertIsNotNone(old, "no moat-audit-writer for this stack")
        outcomes, errors, lock, stop = [], [], threading.Lock(), threading.Event()

        def client():
            try:
                while not stop.is_set():
                    t0 = time.time()
                    st, h, data = self.stack.request("POST", EXECUTE, body, timeout=30)
                    with lock:
                        outcomes.append((t0, time.time(), st, h["x-request-id"], data))
            except Exception as e:  # noqa: BLE001
                with lock:
                    errors.append(repr(e))

        def served(since):
            with lock:
                return [o for o in outcomes if o[0] > since and o[2] == 200]

        threads = [threading.Thread(target=client) for _ in range(3)]
        for t in threads:
            t.start()
        try:
            wait_until(lambda: len(served(0)) >= 3, "requests served before the kill")
            killed_at = time.time()
            os.kill(old, signal.SIGKILL)
            wait_until(lambda: writer_pid(self.stack) != old, "the killed writer to be gone")
            dead_at = time.time()
            # a new writer serves the gateway and requests (started after the writer died) succeed again
            first = wait_until(lambda: served(dead_at), "a successful request after the kill",
                               detail=lambda: repr(sorted(set(o[2] for o in outcomes))))
            recovered = first[0][1] - killed_at
            wait_until(lambda: len(served(dead_at)) >= 6, "more requests served after the recovery")
        finally:
            stop.set()
            for t in threads:
                t.join(60)
        self.assertEqual(errors, [])
        new = writer_pid(self.stack)
        self.assertIsNotNone(new)
        self.assertNotEqual(new, old)
        statuses = [o[2] for o in outcomes]
        self.assertTrue(set(statuses) <= {200, 503}, statuses)
        for _, _, st, _, data in outcomes:
            if st == 503:
                self.assertIn("audit", data["message"])
        n503 = statuses.count(503)
        print("\n    %d requests around the kill: %d x 200, %d x 503; recovered after %.2f s"
              % (len(outcomes), statuses.count(200), n503, recovered))
        # no acknowledged record lost: every 200 has its request and result records
        ok = {o[3]: o[4] for o in outcomes if o[2] == 200}
        got = self.wait_records(list(ok), per_id=2)
        self.absence_window()  # so that the exact counts below would see a stray record
        self.verify()
        recs = self.records()
        self.assert_contiguous(recs)
        for rid, data in ok.items():
            rs = [r for r in recs if r.get("request_id") == rid]
            self.assertEqual(sorted(r["type"] for r in rs), ["request", "result"], rs)
            res = next(r for r in rs if r["type"] == "result")
            self.assertEqual(res["run"]["stdout_sha256"], sha256(data["run"]["stdout"].encode()))
        # the restarted writer announced itself
        self.assertGreaterEqual(sum(1 for r in recs if r.get("type") == "start"), 2)
        self.assertEqual(len(got), len(ok))


class DiskFullTest(AuditStackMixin, unittest.TestCase):
    """F8: a full audit disk refuses executions (503, nothing runs) and
    recovers once space is freed, without a restart."""

    def setUp(self):
        if os.geteuid() != 0:
            self.skipTest("needs root")
        self.disk = SmallAuditDisk("1m", prefix="moat-audit-full-")
        self.mnt, self.adir = self.disk.mnt, self.disk.dir
        self.stack = self.disk.stack()
        self.stack.start()

    def tearDown(self):
        self.disk.remove()

    def jobs_in_log(self):
        with open(os.path.join(self.stack.tmp, "backend.log"), errors="replace") as f:
            return sum(1 for l in f if "moat-backend: job " in l)  # after the line's time

    def test_disk_full_refuses_then_recovers(self):
        quick = {"language": "python", "version": "*", "files": [{"name": "main.py", "content": "print(1)"}]}
        st, h, _ = self.stack.request("POST", EXECUTE, quick)
        self.assertEqual(st, 200)
        before_full = h["x-request-id"]
        filler = os.path.join(self.mnt, "filler")
        subprocess.run(["dd", "if=/dev/zero", "of=" + filler, "bs=64k"], capture_output=True)
        self.assertEqual(os.statvfs(self.mnt).f_bavail, 0, "the tmpfs is not full")
        # Denials (never waited for) are not written below the disk reserve
        # (64 MiB, more than this tmpfs): the writer counts them.  The log's
        # last page may still have room for an execution's records; then
        # executions get 503.
        for _ in range(30):
            self.stack.request("GET", RUNTIMES, token=None)
        first_503 = None
        for i in range(30):
            st, _, data = self.stack.request("POST", EXECUTE, quick)
            if st == 503:
                first_503 = i
                break
            self.assertEqual(st, 200, data)
        self.assertIsNotNone(first_503, "executions still succeed on a full audit disk")
        # The program would wait to be released, which this test never does: had it run, the answer
        # would come only after its run timeout (200 with status TO) and the backend would have
        # logged the job before the gateway could answer at all.  A 503 and no job: refused before
        # it ran.
        jobs = self.jobs_in_log()
        held = {"language": "python", "version": "*",
                "files": [{"name": "main.py", "content": held_program(then="print('ran')")}]}
        for _ in range(3):
            st, h, data = self.stack.request("POST", EXECUTE, held)
            self.assertEqual(st, 503, data)
            self.assertEqual(h["content-type"], "application/json")
            self.assertIn("audit", data["message"])
            self.assertEqual(data["request_id"], h["x-request-id"])
        self.assertEqual(held_roots(self.stack.tag), [], "a refused program is running")
        self.assertEqual(self.jobs_in_log(), jobs, "the backend ran a job while the audit disk was full")
        writer = writer_pid(self.stack)
        self.assertIsNotNone(writer, "the writer died on a full disk")
        # free the space: requests succeed again, with no restart
        os.unlink(filler)

        def executes():
            st, h, data = self.stack.request("POST", EXECUTE, quick)
            self.assertIn(st, (200, 503), data)
            return (h, data) if st == 200 else None

        h, data = wait_until(executes, "an execution to succeed once space is freed")
        after = h["x-request-id"]
        self.assertEqual(data["run"]["stdout"], "1\n")
        self.assertEqual(writer_pid(self.stack), writer, "the writer was restarted")
        self.wait_records([after, before_full], per_id=2)
        self.verify()
        recs = self.records()
        self.assert_contiguous(recs)
        repairs = [r for r in recs if r.get("type") == "repair"]
        print("\n    disk full: 503 after %d more execution(s); %d repair record(s); recovered"
              % (first_503, len(repairs)))


if __name__ == "__main__":
    unittest.main()
