"""The request pipeline (gateway/core/pipeline.c) end to end: a route added
without any audit code is authenticated, admitted and audited anyway, and
policy decides one way for /api/v2/runtimes and execute (a runtime a tenant
is shown may be run under any of its names)."""

import os
import unittest

import moat_harness
from moat_harness import BUILD, Stack, wait_until

TEST_GATEWAY = os.path.join(BUILD, "tests", "moat-gateway-test-routes")
BIG = "rate: {per_second: 1000, burst: 1000}\nmax_in_flight: 64\n"


class NewRouteIsAuditedTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not os.path.exists(TEST_GATEWAY):
            raise unittest.SkipTest("moat-gateway-test-routes not built")
        cls.saved, moat_harness.GATEWAY = moat_harness.GATEWAY, TEST_GATEWAY
        cls.stack = Stack(tenants=[("demo", BIG, ""), ("blocked", BIG + "endpoints: [execute]\n", "")]).start()

    @classmethod
    def tearDownClass(cls):
        cls.stack.stop()
        moat_harness.GATEWAY = cls.saved

    def records_for(self, request_id):
        # a denial's record is not waited for: it reaches the log within
        # about 10 ms, so poll for it (with a generous deadline)
        return wait_until(lambda: [r for r in self.stack.audit_records() if r.get("request_id") == request_id],
                          "the audit record of request %s" % request_id)

    def test_allowed_request_on_the_new_route_is_recorded(self):
        st, headers, data = self.stack.request("POST", "/test/echo", {"x": "hello"})
        self.assertEqual(st, 200, data)
        self.assertGreater(data["echoed_bytes"], 0)
        recs = self.records_for(headers["x-request-id"])
        self.assertEqual(len(recs), 1, recs)
        self.assertEqual((recs[0]["type"], recs[0]["decision"], recs[0]["tenant"], recs[0]["endpoint"]),
                         ("request", "allowed", "demo", "/test/echo"))

    def test_new_route_authenticates_and_records_the_denial(self):
        st, headers, data = self.stack.request("POST", "/test/echo", {"x": 1}, token=None)
        self.assertEqual(st, 401, data)
        self.assertEqual(data["request_id"], headers["x-request-id"])
        recs = self.records_for(headers["x-request-id"])
        self.assertEqual([(r["decision"], r["reason"], r["endpoint"]) for r in recs], [("denied", "auth", "/test/echo")])

    def test_new_route_is_authorized_by_policy(self):
        st, headers, data = self.stack.request("POST", "/test/echo", {}, token=self.stack.tokens["blocked"])
        self.assertEqual(st, 403, data)
        recs = self.records_for(headers["x-request-id"])
        self.assertEqual([(r["decision"], r["reason"]) for r in recs], [("denied", "endpoint")])

    def test_new_route_wrong_method(self):
        st, headers, data = self.stack.request("GET", "/test/echo")
        self.assertEqual((st, headers.get("allow")), (405, "POST"))


class PolicyOwnsLanguagesTest(unittest.TestCase):
    """A tenant whose policy names a runtime by an alias is shown the
    runtime under its canonical name, and may run it by that name, by the
    alias, or by any other alias; other runtimes stay refused."""

    @classmethod
    def setUpClass(cls):
        cls.stack = Stack(tenants=[("aliased", BIG + "languages:\n  - {language: py, version: \"3\"}\n", "")]).start()

    @classmethod
    def tearDownClass(cls):
        cls.stack.stop()

    def run_as(self, language, version="*"):
        body = {"language": language, "version": version, "files": [{"content": "print(6 * 7)"}]}
        return self.stack.request("POST", "/api/v2/execute", body, token=self.stack.tokens["aliased"])

    def test_runtimes_and_execute_agree(self):
        st, _, listed = self.stack.request("GET", "/api/v2/runtimes", token=self.stack.tokens["aliased"])
        self.assertEqual(st, 200, listed)
        self.assertEqual([r["language"] for r in listed], ["python"])
        for rt in listed:
            for name in [rt["language"]] + rt["aliases"]:
                st, _, data = self.run_as(name, rt["version"].split(".")[0])
                self.assertEqual((st, data.get("run", {}).get("stdout")), (200, "42\n"), (name, data))

    def test_other_languages_stay_refused(self):
        st, _, data = self.run_as("bash")
        self.assertEqual(st, 403, data)
        self.assertIn('language "bash" is not allowed', data["message"])


if __name__ == "__main__":
    unittest.main()
