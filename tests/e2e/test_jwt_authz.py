"""JWT authorization through the real gateway (G24): an issuer speaks only
for the tenants it is bound to, a token's scopes come from its scopes claim
(and never exceed the tenant's endpoints), and no token outlives its
issuer's max_lifetime_s.  The verifier's rules one by one are unit-tested
in tests/unit/test_jwt_auth.c; this shows the gateway applies them."""

import base64
import hashlib
import hmac
import json
import os
import shutil
import tempfile
import time
import unittest

from moat_harness import Stack, wait_until

BIG = "rate: {per_second: 1000, burst: 1000}\nmax_in_flight: 64\n"


def b64url(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def mint(secret, kid, claims):
    """An HS256 token, signed the way any issuer would."""
    head = b64url(json.dumps({"alg": "HS256", "typ": "JWT", "kid": kid}).encode())
    body = b64url(json.dumps(claims).encode())
    sig = hmac.new(secret, (head + "." + body).encode(), hashlib.sha256).digest()
    return head + "." + body + "." + b64url(sig)


class JwtAuthzTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.keys = tempfile.mkdtemp(prefix="moat-jwtz-")
        cls.secret_a, cls.secret_b = os.urandom(48), os.urandom(48)
        for name, secret in (("a.key", cls.secret_a), ("b.key", cls.secret_b)):
            with open(os.path.join(cls.keys, name), "wb") as f:
                f.write(secret)
            os.chmod(os.path.join(cls.keys, name), 0o600)
        # issuer a speaks for team-a only, issuer b for team-b only (and caps
        # lifetimes at ten minutes); team-a's API key may only list runtimes,
        # team-b may only list runtimes whatever the credential
        issuers = f"""jwt_issuers:
  - name: a
    iss: https://a.example
    aud: moat
    algorithm: HS256
    tenants: [team-a]
    keys:
      - {{kid: a1, file: {cls.keys}/a.key}}
  - name: b
    iss: https://b.example
    aud: moat
    algorithm: HS256
    tenants: [team-b]
    max_lifetime_s: 600
    keys:
      - {{kid: b1, file: {cls.keys}/b.key}}
"""
        cls.stack = Stack(tenants=[("team-a", BIG, "scopes: [runtimes]"), ("team-b", BIG + "endpoints: [runtimes]\n", "")],
                          extra_config=issuers).start()

    @classmethod
    def tearDownClass(cls):
        cls.stack.stop()
        shutil.rmtree(cls.keys, ignore_errors=True)

    def token(self, issuer="a", tenant="team-a", scope="execute runtimes", lifetime=300, **extra):
        now = int(time.time())
        claims = {"iss": "https://%s.example" % issuer, "aud": "moat", "tenant": tenant, "iat": now,
                  "exp": now + lifetime}
        if scope is not None:
            claims["scope"] = scope
        claims.update(extra)
        claims = {k: v for k, v in claims.items() if v is not None}
        secret, kid = (self.secret_a, "a1") if issuer == "a" else (self.secret_b, "b1")
        return mint(secret, kid, claims)

    def execute(self, token):
        return self.stack.request("POST", "/api/v2/execute",
                                  {"language": "python", "version": "*", "files": [{"content": "print(6 * 7)"}]},
                                  token=token)

    def runtimes(self, token):
        return self.stack.request("GET", "/api/v2/runtimes", token=token)

    def note_of(self, headers):
        """The reason the gateway logged for this request (after its request id)."""
        rid = headers["x-request-id"]

        def line():
            with open(os.path.join(self.stack.tmp, "gateway.log"), errors="replace") as f:
                return next((l for l in f if "id=" + rid in l), None)
        return wait_until(line, "the log line of request " + rid)

    def test_controls(self):
        """What the refusals below are measured against: a good token works."""
        st, _, data = self.execute(self.token())
        self.assertEqual((st, data["run"]["stdout"]), (200, "42\n"), data)
        self.assertEqual(self.runtimes(self.token(issuer="b", tenant="team-b"))[0], 200)

    def test_an_issuer_names_only_its_tenants(self):
        for issuer, tenant in (("a", "team-b"), ("b", "team-a")):
            with self.subTest(issuer=issuer, tenant=tenant):
                st, headers, data = self.runtimes(self.token(issuer=issuer, tenant=tenant))
                self.assertEqual(st, 401, data)
                self.assertIn("tenant not bound to this issuer", self.note_of(headers))

    def test_scopes_come_from_the_token(self):
        # the finding: team-a's API key may not execute, and a JWT with scope
        # "runtimes" must not either
        self.assertEqual(self.execute(self.stack.tokens["team-a"])[0], 403)
        runtimes_only = self.token(scope="runtimes")
        st, _, data = self.execute(runtimes_only)
        self.assertEqual(st, 403, data)
        self.assertIn("outside the credential's scopes", data["message"])
        self.assertEqual(self.runtimes(runtimes_only)[0], 200)
        # the array form, and names for other services that grant nothing here
        self.assertEqual(self.execute(self.token(scope=["execute"]))[0], 200)
        self.assertEqual(self.execute(self.token(scope="openid profile runtimes"))[0], 403)
        # no scopes claim: no scopes (fail closed)
        for token in (self.token(scope=None), self.token(scope="")):
            self.assertEqual(self.execute(token)[0], 403)
            self.assertEqual(self.runtimes(token)[0], 403)
        # a malformed claim is no token at all
        self.assertEqual(self.runtimes(self.token(scope={"runtimes": True}))[0], 401)

    def test_scopes_never_exceed_the_tenant(self):
        token = self.token(issuer="b", tenant="team-b", scope="execute runtimes")
        st, _, data = self.execute(token)
        self.assertEqual(st, 403, data)
        self.assertIn("not allowed for this tenant", data["message"])
        self.assertEqual(self.runtimes(token)[0], 200)

    def test_lifetimes_are_capped(self):
        now = int(time.time())
        cases = {
            "exp at the end of time": self.token(exp=2 ** 63 - 1),
            "over the default hour": self.token(lifetime=3600 + 120),
            "over issuer b's ten minutes": self.token(issuer="b", tenant="team-b", lifetime=600 + 120),
            "iat missing": self.token(iat=None),
            "iat old, exp far": self.token(iat=now - 10 * 86400, exp=now + 3000),
        }
        for why, token in cases.items():
            with self.subTest(why=why):
                st, headers, data = self.runtimes(token)
                self.assertEqual(st, 401, data)
                self.assertRegex(self.note_of(headers), "max_lifetime_s|iat missing")
        # a ten-minute token is fine for issuer b
        self.assertEqual(self.runtimes(self.token(issuer="b", tenant="team-b", lifetime=540))[0], 200)


if __name__ == "__main__":
    unittest.main()
