"""Reading an execution back and reviewing it (issue 12, item 4; FORMAT.md
"Reading an execution back" and "Reviews").

Against the real moat-audit-writer, spoken to over audit/wire/audit_wire.h as
the gateway's workers do (test_audit.py's client): a query returns an
execution's records and its packet, only to its own tenant (another tenant's
query is "not found", never "forbidden"); a packet or a line that is not what
was written is never served; the index is rebuilt when the writer starts; a
review is written only when it names a result of its own tenant's execution;
moat-audit show prints an execution's reviews, query --review lists what
nobody reviewed yet or filters by the latest verdict, and verify checks
reviews like every record.  GatewayTest does the same through the real
gateway (two test-only routes, tests/e2e/test_reviews_routes.c, over the C
API the real routes are to call).  Needs root (the writer drops to
moat-audit).
"""

import base64
import errno
import hashlib
import json
import os
import struct
import subprocess
import unittest

import moat_harness
import test_audit
from moat_harness import Stack, wait_until
from test_audit import audit, request

QUERY = 2  # AUDIT_WIRE_QUERY
FOUND = struct.Struct("=II")


def query(client, tenant, request_id, timeout=30):
    """(err, records, packet) of one execution read back."""
    tag = client.send({"tenant": tenant, "request_id": request_id}, flags=QUERY)
    t, seq, err, length = client.ack(timeout)
    assert t == tag and seq == 0, (t, tag, seq)
    while len(client.buf) < length:
        chunk = client.sock.recv(1 << 20)
        if not chunk:
            raise EOFError("writer closed the socket")
        client.buf += chunk
    answer, client.buf = client.buf[:length], client.buf[length:]
    if length == 0:
        return err, [], None
    rl, pl = FOUND.unpack(answer[:FOUND.size])
    assert FOUND.size + rl + pl == length
    lines = answer[FOUND.size:FOUND.size + rl].decode().splitlines()
    return err, lines, answer[FOUND.size + rl:] if pl else None


def result(i, tenant="acme"):
    return {"type": "result", "request_id": "req-%d" % i, "tenant": tenant, "key_id": "k_%s" % tenant,
            "decision": "allowed", "status": 200, "run": {"status": None, "code": 0}}


def review(line, verdict="approved", note="looks right", **kw):
    """A review of the result record whose line is line (as gw_audit_review builds it)."""
    rec = json.loads(line)
    body = {"type": "review", "request_id": rec["request_id"], "tenant": rec["tenant"], "key_id": "k_reviewer",
            "review_request_id": "rv-1", "client": "10.0.0.9", "verdict": verdict, "note": note,
            "result_seq": rec["seq"], "result_sha256": hashlib.sha256(line.encode()).hexdigest()}
    body.update(kw)
    return body


class ReviewsTest(unittest.TestCase):
    # test_audit's scratch trail and writer, without its tests
    setUp = test_audit.AuditTest.setUp
    tearDown = test_audit.AuditTest.tearDown
    start = test_audit.AuditTest.start
    verify_ok = test_audit.AuditTest.verify_ok
    log_lines = test_audit.AuditTest.log_lines

    def execution(self, c, i, tenant="acme", packet=None):
        """An execution's request and result records; the result's line."""
        self.assertNotEqual(c.call(request(i, tenant))[1], 0)
        packet = packet if packet is not None else json.dumps({"request": {"code": "print(%d)" % i}}).encode()
        self.assertNotEqual(c.call(result(i, tenant), packet)[1], 0)
        err, lines, got = query(c, tenant, "req-%d" % i)
        self.assertEqual(err, 0, self.writers[-1].stderr_text())
        self.assertEqual(got, packet)
        return [l for l in lines if json.loads(l)["type"] == "result"][-1]

    def test_query_own_tenant_only(self):
        w = self.start()
        c = w.clients[0]
        packet = b'{"request":{"code":"print(1)"},"result":{"run":{"stdout":"1\\n"}}}'
        self.execution(c, 1, packet=packet)
        err, lines, got = query(c, "acme", "req-1")
        self.assertEqual(err, 0)
        self.assertEqual([json.loads(l)["type"] for l in lines], ["request", "result"])
        self.assertEqual(got, packet)
        self.assertEqual(json.loads(lines[1])["packet"], hashlib.sha256(packet).hexdigest())
        # the lines served are the log's own lines, byte for byte
        logged = b"".join(data for _, data in self.log_lines()).decode().splitlines()
        for l in lines:
            self.assertIn(l, logged)
        # another tenant, an unknown id, a denial: not found, and nothing served
        self.assertEqual(query(c, "other", "req-1"), (errno.ENOENT, [], None))
        self.assertEqual(query(c, "acme", "req-2"), (errno.ENOENT, [], None))
        c.call(request(3, decision="denied", reason="rate", status=429))
        self.assertEqual(query(c, "acme", "req-3"), (errno.ENOENT, [], None))
        # an execution still running: its request, no packet
        c.call(request(4))
        err, lines, got = query(c, "acme", "req-4")
        self.assertEqual((err, len(lines), got), (0, 1, None))
        # a query of the wrong shape is refused; the socket goes on
        tag = c.send({"tenant": "acme"}, flags=QUERY)
        self.assertEqual(c.ack()[0:3], (tag, 0, errno.EINVAL))
        tag = c.send({"tenant": "acme", "request_id": "req-1", "x": 1}, flags=QUERY)
        self.assertEqual(c.ack()[0:3], (tag, 0, errno.EINVAL))
        self.assertEqual(query(c, "acme", "req-1")[0], 0)
        self.assertEqual(w.close()[0], 0)
        self.verify_ok()

    def test_tampered_packet_is_never_served(self):
        w = self.start()
        c = w.clients[0]
        self.execution(c, 1, packet=b"A" * 1000)
        pack = [n for n in os.listdir(self.adir) if n.endswith(".pack")][0]
        path = os.path.join(self.adir, pack)
        subprocess.run(["chattr", "-a", path], capture_output=True)
        with open(path, "r+b") as f:
            f.seek(10)
            f.write(b"B")
        err, lines, got = query(c, "acme", "req-1")
        self.assertEqual((err, lines, got), (errno.EIO, [], None))
        self.assertIn("not the one its record names", w.stderr_text())
        # a line changed in the log (the same length) is not served either
        self.execution(c, 2)
        name, data = self.log_lines()[-1]
        at = data.index(b'"k_acme"', data.index(b'"req-2"'))
        path = os.path.join(self.adir, name)
        subprocess.run(["chattr", "-a", path], capture_output=True)
        with open(path, "r+b") as f:
            f.seek(at + 1)
            f.write(b"K")
        self.assertEqual(query(c, "acme", "req-2"), (errno.EIO, [], None))
        self.assertIn("is not what was written", w.stderr_text())
        w.close()

    def test_index_rebuilt_at_start(self):
        w = self.start()
        c = w.clients[0]
        for i in range(1, 4):
            self.execution(c, i)
        self.assertEqual(w.close()[0], 0)
        w = self.start()
        c = w.clients[0]
        for i in range(1, 4):
            err, lines, got = query(c, "acme", "req-%d" % i)
            self.assertEqual((err, len(lines)), (0, 2))
            self.assertIn(b"print(%d)" % i, got)
        self.assertEqual(query(c, "other", "req-1")[0], errno.ENOENT)
        w.close()

    def test_review_only_of_its_own_tenants_result(self):
        w = self.start()
        c = w.clients[0]
        line = self.execution(c, 1)
        self.execution(c, 1, tenant="other")  # the same request id, another tenant
        refused = [
            review(line, tenant="other"),                       # names acme's result under another tenant
            review(line, result_sha256="0" * 64),               # not that line
            review(line, result_seq=json.loads(line)["seq"] - 1),
            review(line, request_id="req-9"),
            review(line, verdict="fine"),
            review(line, note="x" * 4097),
            review(line, extra=1),
            {k: v for k, v in review(line).items() if k != "note"},
        ]
        for body in refused:
            t, seq, err, _ = c.call(body)
            self.assertEqual(seq, 0, body)
            self.assertIn(err, (errno.EINVAL, errno.ENOENT), body)
        self.assertEqual(c.call(review(line, tenant="other"))[2], errno.ENOENT)
        # a review nobody waits for is refused (the writer says so; no ack comes)
        c.send(review(line), flags=1)
        # accepted: durable, acknowledged, and read back with the execution
        for verdict, note in (("needs_changes", "unbounded loop\u202e"), ("approved", "fixed \u00e9")):
            t, seq, err, _ = c.call(review(line, verdict=verdict, note=note))
            self.assertEqual(err, 0)
            self.assertGreater(seq, 0)
        err, lines, _ = query(c, "acme", "req-1")
        recs = [json.loads(l) for l in lines]
        self.assertEqual([r["type"] for r in recs], ["request", "result", "review", "review"])
        self.assertEqual(recs[3]["note"], "fixed \u00e9")
        self.assertEqual(recs[2]["result_sha256"], hashlib.sha256(line.encode()).hexdigest())
        # other's execution has no review
        self.assertEqual([json.loads(l)["type"] for l in query(c, "other", "req-1")[1]], ["request", "result"])
        self.assertIn("review refused", w.stderr_text())
        # the reviews per execution are capped
        for _ in range(30):
            self.assertEqual(c.call(review(line))[2], 0)
        self.assertEqual(c.call(review(line))[2], errno.EMLINK)
        self.assertEqual(w.close()[0], 0)
        self.verify_ok()

    def query_review(self, verdict, fmt="json"):
        p = audit("query", self.adir, "--review", verdict, "--format", fmt, "--key", self.key, check=0)
        out = p.stdout.decode()
        return [json.loads(l)["request_id"] for l in out.splitlines()] if fmt == "json" else out

    def test_cli_show_and_query_review(self):
        w = self.start()
        c = w.clients[0]
        lines = {i: self.execution(c, i) for i in (1, 2, 3)}
        self.execution(c, 4, tenant="other")
        c.call(request(5))  # still running: no result, not pending
        self.assertEqual(self.query_review("pending"), ["req-1", "req-2", "req-3", "req-4"])
        self.assertEqual(self.query_review("approved"), [])
        p = audit("query", self.adir, "--review", "pending", "--tenant", "acme", "--format", "json", "--key", self.key,
                  check=0)
        self.assertEqual([json.loads(l)["request_id"] for l in p.stdout.decode().splitlines()], ["req-1", "req-2", "req-3"])
        self.assertEqual(c.call(review(lines[1], verdict="needs_changes", note="loop\n\u202eevil"))[2], 0)
        self.assertEqual(c.call(review(lines[2], verdict="rejected"))[2], 0)
        self.assertEqual(c.call(review(lines[1], verdict="approved", note="fixed"))[2], 0)  # the latest counts
        self.assertEqual(self.query_review("pending"), ["req-3", "req-4"])
        self.assertEqual(self.query_review("approved"), ["req-1"])
        self.assertEqual(self.query_review("rejected"), ["req-2"])
        self.assertEqual(self.query_review("needs_changes"), [])
        table = self.query_review("pending", fmt="table")
        self.assertIn("req-3", table)
        self.assertIn("(2 record(s))", table)
        # show: the records, then the reviews, oldest first, the note escaped
        out = audit("show", self.adir, "req-1", "--key", self.key, check=0).stdout.decode()
        tail = out[out.index("\nreviews\n"):]
        self.assertRegex(tail, r"needs_changes +by k_reviewer of acme at \S+ \(record \d+; result record %d: the one shown above\)"
                         % json.loads(lines[1])["seq"])
        self.assertIn('note "loop\\n\\u202eevil"', tail)
        self.assertLess(tail.index("needs_changes"), tail.index("approved"))
        self.assertNotIn("\u202e", out)
        out = audit("show", self.adir, "req-3", "--key", self.key, check=0).stdout.decode()
        self.assertIn("reviews\n  (none yet)", out)
        # usage errors
        self.assertEqual(audit("query", self.adir, "--review", "fine").returncode, 2)
        self.assertEqual(audit("query", self.adir, "--review", "pending", "--type", "request").returncode, 2)
        self.assertEqual(w.close()[0], 0)
        # reviews are in the chain: verify passes, and a changed verdict is caught
        self.verify_ok()
        name, data = self.log_lines()[-1]
        copy = test_audit.AuditTest.copy_of(self, self.adir)
        with open(os.path.join(copy, name), "r+b") as f:
            at = data.index(b'"verdict":"rejected"')
            f.seek(at + len(b'"verdict":"'))
            f.write(b"approved")
        p = audit("verify", copy, "--key", self.key)
        self.assertEqual(p.returncode, 1)


TEST_GATEWAY = os.path.join(test_audit.BUILD, "tests", "moat-gateway-test-reviews")
EXECUTE = "/api/v2/execute"
BIG = "rate: {per_second: 1000, burst: 1000}\nmax_in_flight: 64\n"


class GatewayTest(unittest.TestCase):
    """The real gateway (with tests/e2e/test_reviews_routes.c's two routes,
    which call gw_audit_fetch, gw_audit_execution, gw_audit_result_of,
    gw_audit_review and gw_audit_submit as the real routes are to), the real
    writer and boxes."""

    @classmethod
    def setUpClass(cls):
        if not os.path.exists(TEST_GATEWAY):
            raise unittest.SkipTest("moat-gateway-test-reviews not built")
        cls.saved, moat_harness.GATEWAY = moat_harness.GATEWAY, TEST_GATEWAY
        cls.stack = Stack(tenants=[("demo", BIG, ""), ("other", BIG, "")]).start()

    @classmethod
    def tearDownClass(cls):
        cls.stack.stop()
        moat_harness.GATEWAY = cls.saved

    def execute(self, code, token="default"):
        body = {"language": "python", "version": "*", "files": [{"name": "main.py", "content": code}]}
        st, headers, data = self.stack.request("POST", EXECUTE, body, token=token)
        self.assertEqual(st, 200, data)
        return headers["x-request-id"], data

    def get(self, rid, token="default"):
        return self.stack.request("GET", "/test/executions/" + rid, token=token)

    def review(self, rid, body, token="default"):
        return self.stack.request("POST", "/test/reviews/" + rid, body, token=token)

    def show(self, rid):
        p = audit("show", self.stack.audit_dir, rid, check=0)
        return p.stdout.decode()

    def pending(self):
        p = audit("query", self.stack.audit_dir, "--review", "pending", "--format", "json", check=0)
        return [json.loads(l)["request_id"] for l in p.stdout.decode().splitlines()]

    def test_packet_by_request_id_and_review(self):
        rid, data = self.execute("print('hello packet')")
        self.assertEqual(data["run"]["stdout"], "hello packet\n")
        # the execution's packet, by its X-Request-Id, to its own tenant
        st, _, x = self.get(rid)
        self.assertEqual(st, 200, x)
        self.assertEqual(x["request_id"], rid)
        self.assertEqual(x["packet"]["result"]["run"]["stdout"], "hello packet\n")
        self.assertEqual(base64.b64decode(x["packet"]["request"]["files"][0]["content_base64"]), b"print('hello packet')")
        self.assertEqual([r["type"] for r in x["records"]], ["request", "result"])
        self.assertEqual(x["reviews"], [])
        # another tenant: not found, never forbidden; an unknown id too
        st, _, y = self.get(rid, token=self.stack.tokens["other"])
        self.assertEqual(st, 404, y)
        self.assertNotIn("hello", json.dumps(y))
        self.assertEqual(self.get("0123456789abcdef")[0], 404)
        st, _, y = self.review(rid, {"verdict": "approved", "note": "x"}, token=self.stack.tokens["other"])
        self.assertEqual(st, 404, y)
        # pending before, a review recorded, shown, not pending after
        self.assertIn(rid, self.pending())
        self.assertEqual(self.review(rid, {"verdict": "fine"})[0], 400)
        self.assertEqual(self.review(rid, {"verdict": "approved", "note": "x" * 4097})[0], 400)
        st, _, y = self.review(rid, {"verdict": "needs_changes", "note": "prints the wrong greeting"})
        self.assertEqual(st, 200, y)
        self.assertGreater(y["seq"], 0)
        self.assertNotIn(rid, self.pending())
        st, _, x = self.get(rid)
        self.assertEqual([(r["verdict"], r["note"], r["key_id"]) for r in x["reviews"]],
                         [("needs_changes", "prints the wrong greeting", self.stack.key_ids["demo"])])
        out = self.show(rid)
        self.assertRegex(out, r"needs_changes +by %s of demo at \S+ \(record %d; result record \d+: the one shown above\)"
                         % (self.stack.key_ids["demo"], y["seq"]))
        self.assertIn('note "prints the wrong greeting"', out)
        p = audit("verify", self.stack.audit_dir)
        self.assertEqual(p.returncode, 0, p.stderr.decode(errors="replace"))


if __name__ == "__main__":
    unittest.main()
