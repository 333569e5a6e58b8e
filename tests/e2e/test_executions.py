"""Result packets and reviews through the real gateway and audit writer:
GET /api/v2/executions/{id} (scope "packets") and
POST /api/v2/executions/{id}/reviews (scope "review")."""

import json
import subprocess
import unittest

from moat_harness import MOAT_AUDIT, Stack

SCOPES = Stack.DEFAULT_TENANT_EXTRA + "endpoints: [execute, runtimes, packets, review, submissions]\n"

METADATA = {"prompt": "double the line read \u00e9", "purpose": "ci check", "dependencies": ["python>=3.10"],
            "labels": {"team": "search", "ticket/id": "A-1"}}


class ExecutionsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.stack = Stack(tenants=[("a", SCOPES, ""), ("b", SCOPES, ""),
                                   ("plain", Stack.DEFAULT_TENANT_EXTRA, "")]).start()

    @classmethod
    def tearDownClass(cls):
        cls.stack.stop()

    def req(self, method, path, tenant="a", body=None, headers=None):
        return self.stack.request(method, path, body=body, token=self.stack.tokens[tenant], headers=headers)

    def execute(self, tenant="a", code="print('hi')"):
        st, h, body = self.req("POST", "/api/v2/execute", tenant,
                               {"language": "python", "version": "*", "files": [{"content": code}], "stdin": "in"})
        self.assertEqual(st, 200, body)
        return h["x-request-id"]

    def test_packet_of_an_execution(self):
        rid = self.execute(code="print(input() * 2)")
        st, h, body = self.req("GET", "/api/v2/executions/" + rid)
        self.assertEqual(st, 200, body)
        self.assertEqual(body["request_id"], rid)
        self.assertEqual(body["packet"]["request"]["language"], "python")
        self.assertEqual(body["packet"]["result"]["run"]["stdout"], "inin\n")
        self.assertEqual([r["type"] for r in body["records"]], ["request", "result"])
        self.assertEqual(body["reviews"], [])

    def packet(self, rid):
        st, h, body = self.req("GET", "/api/v2/executions/" + rid)
        self.assertEqual(st, 200, body)
        return body["packet"]

    def test_metadata_kept_verbatim_in_the_packet(self):
        body = {"language": "python", "version": "*", "files": [{"content": "print(1)"}], "metadata": METADATA}
        st, h, res = self.req("POST", "/api/v2/execute", body=body)
        self.assertEqual(st, 200, res)
        self.assertNotIn("metadata", res)  # the answer is Piston's
        packet = self.packet(h["x-request-id"])
        self.assertEqual(packet["metadata"], METADATA)
        self.assertEqual(list(packet["metadata"]), list(METADATA))  # in the order sent
        # streamed, the packet is a session's, with the same metadata
        st, h, raw = self.stack.request("POST", "/api/v2/execute", body=body, token=self.stack.tokens["a"],
                                        headers={"Accept": "application/x-ndjson"})
        self.assertEqual(st, 200, raw)
        self.assertEqual(self.packet(h["x-request-id"])["metadata"], METADATA)
        # a Judge0 submission's packet likewise
        st, h, res = self.req("POST", "/submissions?wait=true",
                              body={"source_code": "print(2)", "language_id": 71, "metadata": METADATA})
        self.assertEqual(st, 201, res)
        self.assertEqual(res["stdout"], "2\n")
        self.assertEqual(self.packet(h["x-request-id"])["metadata"], METADATA)
        # without metadata, the packet has none
        self.assertNotIn("metadata", self.packet(self.execute()))

    def test_bad_metadata_refused_naming_the_member(self):
        base = {"language": "python", "version": "*", "files": [{"content": "print(1)"}]}
        for meta, words in (("a prompt", "metadata must be an object"),
                            ({"promt": "x"}, "unknown member 'promt'"),
                            ({"labels": {"team": 1}}, "metadata.labels.team"),
                            ({"dependencies": "numpy"}, "metadata.dependencies"),
                            ({"prompt": "x" * (65 * 1024)}, "at most 65536 bytes")):
            st, h, b = self.req("POST", "/api/v2/execute", body=dict(base, metadata=meta))
            self.assertEqual(st, 400, meta)
            self.assertIn(words, b["message"])
            self.assertEqual(b["request_id"], h["x-request-id"])
            st, h, b = self.req("POST", "/submissions?wait=true",
                                body={"source_code": "print(2)", "language_id": 71, "metadata": meta})
            self.assertEqual(st, 400, meta)
            self.assertIn(words, b["message"])

    def test_not_found_never_forbidden(self):
        rid = self.execute()
        for tenant, path in (("b", rid), ("a", "0" * 16), ("a", rid.upper()), ("a", rid + "0"), ("a", "../x")):
            st, h, body = self.req("GET", "/api/v2/executions/" + path, tenant)
            self.assertEqual(st, 404, (tenant, path, body))
            self.assertEqual(body["request_id"], h["x-request-id"])
        # a tenant without the scope: 403 before anything is read
        st, h, body = self.req("GET", "/api/v2/executions/" + rid, "plain")
        self.assertEqual(st, 403)

    def test_review_recorded_shown_and_verified(self):
        rid = self.execute()
        pending = subprocess.run([MOAT_AUDIT, "query", self.stack.audit_dir, "--review", "pending"], capture_output=True,
                                 text=True)
        self.assertIn(rid, pending.stdout)
        st, h, body = self.req("POST", "/api/v2/executions/%s/reviews" % rid, body={"verdict": "approved", "note": "ok \u2713"})
        self.assertEqual(st, 200, body)
        self.assertGreater(body["review_seq"], 0)
        st, h, x = self.req("GET", "/api/v2/executions/" + rid)
        self.assertEqual([r["verdict"] for r in x["reviews"]], ["approved"])
        self.assertEqual(x["reviews"][0]["note"], "ok \u2713")
        shown = subprocess.run([MOAT_AUDIT, "show", self.stack.audit_dir, rid], capture_output=True, text=True)
        self.assertEqual(shown.returncode, 0, shown.stderr)
        self.assertIn("approved", shown.stdout)
        pending = subprocess.run([MOAT_AUDIT, "query", self.stack.audit_dir, "--review", "pending"], capture_output=True,
                                 text=True)
        self.assertNotIn(rid, pending.stdout)
        verify = subprocess.run([MOAT_AUDIT, "verify", self.stack.audit_dir], capture_output=True, text=True)
        self.assertEqual(verify.returncode, 0, verify.stderr)

    def test_bad_reviews(self):
        rid = self.execute()
        path = "/api/v2/executions/%s/reviews" % rid
        for body, status, words in (({"verdict": "lgtm"}, 400, "verdict must be"),
                                    ({"note": "x"}, 400, "verdict must be"),
                                    ({"verdict": "approved", "who": "me"}, 400, "'who'"),
                                    ({"verdict": "approved", "note": 5}, 400, "'note'"),
                                    ({"verdict": "approved", "note": "x" * 5000}, 400, "4096")):
            st, h, b = self.req("POST", path, body=body)
            self.assertEqual(st, status, body)
            self.assertIn(words, b["message"])
        st, h, b = self.req("POST", path, body="verdict=approved", headers={"Content-Type": "text/plain"})
        self.assertEqual(st, 415)
        # another tenant cannot review it (nor learn that it exists)
        st, h, b = self.req("POST", path, "b", body={"verdict": "rejected"})
        self.assertEqual(st, 404)
        st, h, x = self.req("GET", "/api/v2/executions/" + rid)
        self.assertEqual(x["reviews"], [])


if __name__ == "__main__":
    unittest.main()
