"""Refusals nobody authenticated for are bounded per client address
(issue 6/11, item 17; gateway/core/denials.c): within the address's rate each is
answered and recorded as before; past it the answer is 429
too_many_failed_requests with Retry-After, and the audit trail gets one
counted summary record per address and reason instead of a record each.
Authenticated requests from the same address are never charged."""

import http.client
import json
import os
import subprocess
import unittest

from moat_harness import MOAT_AUDIT, MOATCTL, SmallAuditDisk, Stack, wait_until

FLOOD = 40
BURST = 5


class UnauthenticatedRateTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        # a rate no test run can reach between two requests (1 per 1000 s), so
        # exactly BURST refusals pass whatever the machine's speed
        cls.stack = Stack(extra_config="unauthenticated: {per_second: 0.001, burst: %d, summary_ms: 200}\n" % BURST)
        cls.stack.start()

    @classmethod
    def tearDownClass(cls):
        cls.stack.stop()

    def test_flood_of_bad_tokens_is_bounded_and_counted(self):
        statuses, ids = [], []
        for i in range(FLOOD):
            st, headers, data = self.stack.request("GET", "/api/v2/runtimes", token="moat_not_a_key_%d" % i)
            statuses.append(st)
            ids.append(headers["x-request-id"])
            if st == 429:
                self.assertEqual(data["code"], "too_many_failed_requests")
                self.assertTrue(headers.get("retry-after", "").isdigit(), headers)
        self.assertEqual(statuses, [401] * BURST + [429] * (FLOOD - BURST))
        # the tenant's own requests from the same address are not charged
        st, _, data = self.stack.request("GET", "/api/v2/runtimes")
        self.assertEqual(st, 200, data)

        def counted():
            recs = self.stack.audit_records()
            ours = set(ids)
            single = [r for r in recs if r.get("type") == "request" and r.get("request_id") in ours]
            summaries = [r for r in recs if r.get("type") == "denials" and r.get("reason") == "auth"]
            total = len(single) + sum(r["count"] for r in summaries)
            return (single, summaries) if total == FLOOD else None

        single, summaries = wait_until(counted, "one record per refusal within the rate, summaries for the rest")
        self.assertEqual(len(single), BURST)
        self.assertTrue(all(r["status"] == 401 and r["decision"] == "denied" for r in single))
        self.assertEqual(sum(r["statuses"].get("429", 0) for r in summaries), FLOOD - BURST)
        self.assertTrue(all(r["client"] == "127.0.0.1" for r in summaries), summaries)


class SmallAuditDiskTest(unittest.TestCase):
    """A flood of bad tokens against a small audit disk: once the writer's
    reserve is reached the denials are counted, not written, and an allowed
    execution still runs with its records durable; records written plus
    counted equal the requests sent."""

    RESERVE = 1 << 20

    def setUp(self):
        self.disk = SmallAuditDisk("3m")
        self.mnt, self.adir = self.disk.mnt, self.disk.dir
        # every refusal recorded one by one (no per-address rate here): the disk fills
        self.stack = self.disk.stack(reserve_bytes=self.RESERVE)
        self.stack.start()

    def tearDown(self):
        self.disk.remove()

    def free(self):
        st = os.statvfs(self.mnt)
        return st.f_bavail * st.f_frsize

    def test_flood_cannot_crowd_out_allowed_executions(self):
        conn = http.client.HTTPSConnection("127.0.0.1", self.stack.port, context=self.stack.ssl_context(("http/1.1",)),
                                           timeout=60)
        sent = 0
        try:
            def bad_token():
                conn.request("GET", "/api/v2/runtimes", headers={"Authorization": "Bearer moat_flood_%d" % sent})
                resp = conn.getresponse()
                resp.read()
                self.assertEqual(resp.status, 401)

            # until the disk is down to the writer's reserve, then well past it
            while sent < 60000 and self.free() > self.RESERVE + (32 << 10):
                bad_token()
                sent += 1
            for _ in range(2000):
                bad_token()
                sent += 1
        finally:
            conn.close()
        self.assertLess(self.free(), self.RESERVE + (512 << 10), "the flood did not reach the reserve")
        body = {"language": "python", "version": "*", "files": [{"content": "print(6 * 7)"}]}
        st, headers, data = self.stack.request("POST", "/api/v2/execute", body)
        self.assertEqual((st, data["run"]["stdout"]), (200, "42\n"), data)
        rid = headers["x-request-id"]
        self.stack.stop()  # the writer reports what it counted when it stops
        p = subprocess.run([MOAT_AUDIT, "export", self.adir], capture_output=True, text=True)
        self.assertEqual(p.returncode, 0, p.stderr)
        recs = [json.loads(l) for l in p.stdout.splitlines() if l.strip()]
        mine = [r for r in recs if r.get("request_id") == rid]
        self.assertEqual(sorted((r["type"], r["decision"]) for r in mine), [("request", "allowed"), ("result", "allowed")])
        written = sum(1 for r in recs if r.get("type") == "request" and r.get("reason") == "auth")
        dropped = sum(r["count"] for r in recs if r.get("type") == "dropped")
        self.assertGreater(dropped, 0)
        self.assertEqual(written + dropped, sent)


class PresentedKeyIdTest(unittest.TestCase):
    """A refused API key that is well formed leaves its key id in the
    denial's record (which key was tried), never its secret."""

    def test_refused_key_id_is_recorded(self):
        stack = Stack().start()
        try:
            out = subprocess.run([MOATCTL, "key", "new"], check=True, capture_output=True, text=True).stdout
            fields = dict(line.split(": ", 1) for line in out.strip().splitlines())
            token, kid = fields["token"], fields["id"].partition(" sha256: ")[0]
            st, headers, _ = stack.request("GET", "/api/v2/runtimes", token=token)  # nobody issued it here
            self.assertEqual(st, 401)
            rid = headers["x-request-id"]
            rec = wait_until(lambda: next((r for r in stack.audit_records() if r.get("request_id") == rid), None),
                             "the denial's record")
            self.assertEqual((rec["decision"], rec["reason"], rec["key_id"]), ("denied", "auth", kid))
            secret = token.split("_")[2]
            self.assertNotIn(secret, json.dumps(stack.audit_records()))
            self.assertNotIn(secret, stack.log("gateway"))
        finally:
            stack.stop()


if __name__ == "__main__":
    unittest.main()
