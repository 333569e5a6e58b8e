"""Protocol edges the second outside campaign found (issue 6/11, item 11),
each through the real gateway: a JSON body in another charset is refused
(415), an HTTP/2 :path without its leading slash is refused (400), and the
Authorization field follows RFC 9110 once (scheme in any case, trailing
white space not part of the value)."""

import json
import unittest

from moat_harness import Stack
from test_gateway_robustness import H2, h2_ctx

EXECUTE = "/api/v2/execute"
BODY = {"language": "python", "version": "*", "files": [{"content": "print(1)"}]}


class ProtocolEdgesTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.stack = Stack().start()

    @classmethod
    def tearDownClass(cls):
        cls.stack.stop()

    def execute_with(self, content_type):
        return self.stack.request("POST", EXECUTE, json.dumps(BODY), headers={"Content-Type": content_type})

    def test_json_charset_must_be_utf8(self):
        for ctype in ("application/json; charset=utf-16", "application/json;charset=ISO-8859-1",
                      "application/json; charset=\"utf-32\"", "application/jsonx", "application/json; charset"):
            st, _, data = self.execute_with(ctype)
            self.assertEqual((st, data.get("code")), (415, "unsupported_media_type"), ctype)
        for ctype in ("application/json", "application/json; charset=utf-8", "Application/JSON;charset=\"UTF-8\"",
                      "application/json ; charset=utf-8 ; foo=bar"):
            st, _, data = self.execute_with(ctype)
            self.assertEqual(st, 200, (ctype, data))

    def test_h2_path_without_leading_slash_is_refused(self):
        c = H2(self.stack.port, h2_ctx(self.stack))
        try:
            auth = [("authorization", "Bearer " + self.stack.token)]
            self.assertEqual(c.get("api/v2/runtimes", auth)["status"], 400)
            self.assertEqual(c.get("*", auth)["status"], 400)
            self.assertEqual(c.get("/api/v2/runtimes", auth)["status"], 200)  # the same request, well formed
            # HTTP/2 hands the field value over as sent, trailing white space included
            for value in ("Bearer %s ", "bearer %s\t \t"):
                st = c.get("/api/v2/runtimes", [("authorization", value % self.stack.token)])["status"]
                self.assertEqual(st, 200, value)
        finally:
            c.close()

    def test_authorization_scheme_any_case_and_trailing_white_space(self):
        for value in ("Bearer %s", "bearer %s", "BEARER  %s", "Bearer %s ", "Bearer %s\t"):
            st, _, data = self.stack.request("GET", "/api/v2/runtimes", token=None,
                                             headers={"Authorization": value % self.stack.token})
            self.assertEqual(st, 200, (value, data))
        for value in ("Bearer", "Bearer ", "Basic %s" % self.stack.token, "Bearer%s" % self.stack.token):
            st, _, data = self.stack.request("GET", "/api/v2/runtimes", token=None, headers={"Authorization": value})
            self.assertEqual((st, data.get("code")), (401, "invalid_token"), value)


if __name__ == "__main__":
    unittest.main()
