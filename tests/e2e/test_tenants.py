"""Tenants, policy and rate limits through the real gateway and backend:
per-tenant endpoint and language allow-lists, limit ceilings, content
rules, key scopes and expiry, GCRA rate limits with RateLimit headers, the
in-flight cap and the CPU budget, and isolation between tenants."""

import grp
import os
import subprocess
import threading
import time
import unittest

from moat_harness import GATEWAY, LONG_WALL_MS, Stack, held_program, release_all, wait_held

BIG = "rate: {per_second: 1000, burst: 1000}\nmax_in_flight: 64\n"

TENANTS = [
    ("alpha", BIG + """endpoints: [execute, runtimes]
languages:
  - python
limits:
  run_timeout_ms: 2000
content_rules:
  - {name: no-os-system, pattern: "os\\\\.system"}
""", ""),
    ("beta", BIG + "endpoints: [execute]\nlanguages:\n  - {language: bash, version: \"5\"}\n", ""),
    ("limited", "rate: {per_second: 0.5, burst: 3}\n", ""),
    ("scoped", BIG, "scopes: [runtimes]"),
    ("expired", BIG, "expires: 2020-01-01T00:00:00Z"),
    # its jobs may run as long as a held job needs (test_in_flight_cap)
    ("single", "rate: {per_second: 1000, burst: 1000}\nmax_in_flight: 1\nlimits:\n  run_timeout_ms: %d\n" % LONG_WALL_MS,
     ""),
    # a CPU spin must finish however busy the machine: a long wall limit
    ("quota", "rate: {per_second: 1000, burst: 1000}\ncpu_seconds_per_minute: 1\nlimits:\n  run_timeout_ms: %d\n" % LONG_WALL_MS,
     ""),
]


class TenantTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.stack = Stack(tenants=TENANTS, backend_args=["-o", "run_timeout=%d" % LONG_WALL_MS]).start()

    @classmethod
    def tearDownClass(cls):
        cls.stack.stop()

    def run_as(self, tenant, language, code, version="*", **extra):
        body = {"language": language, "version": version, "files": [{"content": code}]}
        body.update(extra)
        return self.stack.request("POST", "/api/v2/execute", body, token=self.stack.tokens[tenant])

    def runtimes_as(self, tenant):
        return self.stack.request("GET", "/api/v2/runtimes", token=self.stack.tokens[tenant])

    def assert_error(self, got, status, text):
        st, headers, data = got
        self.assertEqual(st, status, data)
        self.assertIn(text, data["message"])
        self.assertEqual(data["request_id"], headers["x-request-id"])

    def test_language_allow_list(self):
        st, _, data = self.run_as("alpha", "python", "print('a')")
        self.assertEqual((st, data["run"]["stdout"]), (200, "a\n"))
        self.assert_error(self.run_as("alpha", "bash", "echo a"), 403, 'language "bash" is not allowed')
        st, _, data = self.run_as("beta", "bash", "echo b", version="5.2")
        self.assertEqual((st, data["run"]["stdout"]), (200, "b\n"))
        # "*" could resolve to a version outside the tenant's "5": refused
        self.assert_error(self.run_as("beta", "bash", "echo b", version="*"), 403, "not allowed")
        self.assert_error(self.run_as("beta", "python", "print(1)"), 403, "not allowed")

    def test_runtimes_lists_only_the_tenants_languages(self):
        st, _, data = self.runtimes_as("alpha")
        self.assertEqual(st, 200)
        self.assertEqual([r["language"] for r in data], ["python"])

    def test_endpoint_allow_list(self):
        self.assert_error(self.runtimes_as("beta"), 403, "endpoint is not allowed for this tenant")

    def test_key_scopes(self):
        self.assertEqual(self.runtimes_as("scoped")[0], 200)
        self.assert_error(self.run_as("scoped", "python", "print(1)"), 403, "outside the credential's scopes")

    def test_expired_key(self):
        self.assert_error(self.runtimes_as("expired"), 401, "expired")

    def test_limit_ceiling_and_default(self):
        self.assert_error(self.run_as("alpha", "python", "print(1)", run_timeout=2001), 400,
                          "run_timeout cannot exceed the tenant's limit of 2000 ms")
        # no run_timeout: the tenant's 2000 ms applies, not the gateway's default 3000 (the sleep is the
        # program under test: it must outlast the limit)
        st, _, data = self.run_as("alpha", "python", "import time; time.sleep(5)")
        self.assertEqual(st, 200)
        self.assertEqual(data["run"]["status"], "TO")
        self.assertLess(data["run"]["wall_time"], 2600)
        self.assertGreaterEqual(data["run"]["wall_time"], 1900)

    def test_content_rule(self):
        self.assert_error(self.run_as("alpha", "python", "import os\nos.system('id')"), 422, 'no-os-system')

    def test_rate_limit_burst_then_429_and_isolation(self):
        statuses = []
        for _ in range(3):
            st, headers, _ = self.runtimes_as("limited")
            statuses.append(st)
            self.assertEqual(headers["ratelimit-limit"], "3")
        self.assertEqual(statuses, [200, 200, 200])
        st, headers, data = self.runtimes_as("limited")
        self.assertEqual(st, 429, data)
        self.assertIn("rate limit", data["message"])
        self.assertEqual(headers["ratelimit-remaining"], "0")
        self.assertGreaterEqual(int(headers["retry-after"]), 1)
        self.assertLessEqual(int(headers["retry-after"]), 2)
        # another tenant is not slowed down by limited's burst
        self.assertEqual(self.runtimes_as("alpha")[0], 200)
        # after Retry-After the steady rate passes again: waiting out the rate-limit window is what
        # is tested (a late wake-up only leaves more tokens)
        time.sleep(int(headers["retry-after"]))
        self.assertEqual(self.runtimes_as("limited")[0], 200)

    def test_in_flight_cap(self):
        results = {}

        def slow():
            results["slow"] = self.run_as("single", "python", held_program(), run_timeout=LONG_WALL_MS)

        t = threading.Thread(target=slow)
        t.start()
        try:
            wait_held(self.stack.tag)  # the tenant's one request in flight is running
            second = self.run_as("single", "python", "print(1)")
        finally:
            release_all(self.stack.tag)
            t.join()
        self.assert_error(second, 429, "in flight")
        self.assertEqual(results["slow"][0], 200)
        # the slot came back
        self.assertEqual(self.run_as("single", "python", "print(2)")[0], 200)

    def test_cpu_budget(self):
        # one second of CPU per minute: a 1.5 s spin is allowed (charged
        # afterwards), then the tenant is out of budget
        st, _, data = self.run_as("quota", "python", "import time\nt = time.process_time()\n"
                                                     "while time.process_time() - t < 1.5: pass\n",
                                  run_timeout=LONG_WALL_MS)
        self.assertEqual(st, 200, data)
        self.assertIsNone(data["run"]["status"], data)  # the spin finished, however busy the machine
        self.assertGreaterEqual(data["run"]["cpu_time"], 1000)
        st, headers, data = self.run_as("quota", "python", "print(1)")
        self.assertEqual(st, 429, data)
        self.assertIn("CPU-time budget", data["message"])
        self.assertGreater(int(headers["retry-after"]), 30)


class ConfigCheckTest(unittest.TestCase):
    def check(self, text, mode=0o640):
        # root:moat 0640 in a directory moat may search: -n also loads it as moat, as SIGHUP will
        path = os.path.join(self.tmp, "gw.conf")
        with open(path, "w") as f:
            f.write(text)
        os.chown(path, 0, grp.getgrnam("moat").gr_gid)
        os.chmod(path, mode)
        return subprocess.run([GATEWAY, "-n", "-c", path], capture_output=True, text=True), path

    def setUp(self):
        import tempfile
        from moat_harness import SOURCE
        self.tmp = tempfile.mkdtemp(prefix="moat-conf-")
        subprocess.run([os.path.join(SOURCE, "certs", "gen-dev-certs.sh"), self.tmp], check=True, capture_output=True)
        os.chmod(self.tmp, 0o755)
        self.BASE = "tls: {certificate: %s/server.pem, key: %s/server.key}\n" % (self.tmp, self.tmp)

    def tearDown(self):
        import shutil
        shutil.rmtree(self.tmp, ignore_errors=True)

    def test_ok(self):
        p, _ = self.check(self.BASE + "tenants:\n  - name: t\n    languages: [python]\n")
        self.assertEqual((p.returncode, p.stdout.strip()), (0, "configuration OK"), p.stderr)

    def test_errors_name_file_line_and_reason(self):
        cases = [
            ("tenants:\n  - name: t\n    languages: [python]\n    rate: {per_second: fast}\n",
             ":5: rate.per_second must be a number"),
            ("tenants:\n  - name: t\n    endpoints: [execute, admin]\n", ":4: endpoints: unknown endpoint 'admin'"),
            ("tenants:\n  - name: t\n    content_rules:\n      - {name: bad, pattern: \"(\"}\n",
             ":5: content rule:"),
            ("tenants:\n  - name: t\n    limits: {run_timeout_ms: 0}\n", ":4: limits.run_timeout_ms must be between"),
            ("tenants:\n  - name: t\n    wat: 1\n", ":4: unknown key 'wat' in tenant"),
            ("audit:\n  dir: /var/lib/moat/audit\n  checkpoint_records: 0\n",
             ":4: audit.checkpoint_records must be between 1 and 10000000"),
            ("audit:\n  dir: /var/lib/moat/audit\n  rotate_bytes: lots\n", ":4: audit.rotate_bytes must be"),
        ]
        for text, want in cases:
            with self.subTest(want=want):
                p, path = self.check(self.BASE + text)
                self.assertEqual(p.returncode, 1)
                self.assertIn(path + want, p.stderr)
                self.assertEqual(len(p.stderr.strip().splitlines()), 1, p.stderr)

    def test_refuses_group_writable_config(self):
        p, path = self.check(self.BASE, mode=0o620)
        self.assertEqual(p.returncode, 1)
        self.assertIn("writable by group or others", p.stderr)


if __name__ == "__main__":
    unittest.main()


def b64url(data):
    import base64
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def mint(header, claims, sign):
    import json as _json
    signing_input = (b64url(_json.dumps(header).encode()) + "." + b64url(_json.dumps(claims).encode())).encode()
    return signing_input.decode() + "." + b64url(sign(signing_input))


class JwtTest(unittest.TestCase):
    """JWTs from configured issuers through the real gateway (the verifier
    itself is unit-tested in tests/unit/test_jwt_auth.c)."""

    @classmethod
    def setUpClass(cls):
        import tempfile
        cls.keys = tempfile.mkdtemp(prefix="moat-jwt-")
        cls.secret = os.urandom(48)
        with open(os.path.join(cls.keys, "hs.key"), "wb") as f:
            f.write(cls.secret)
        subprocess.run(["openssl", "genrsa", "-out", os.path.join(cls.keys, "rsa.pem"), "2048"], check=True,
                       capture_output=True)
        subprocess.run(["openssl", "rsa", "-in", os.path.join(cls.keys, "rsa.pem"), "-pubout", "-out",
                        os.path.join(cls.keys, "rsa.pub")], check=True, capture_output=True)
        for name in ("hs.key", "rsa.pem", "rsa.pub"):
            os.chmod(os.path.join(cls.keys, name), 0o600)
        issuers = f"""jwt_issuers:
  - name: hs
    iss: https://hs.example
    aud: moat
    algorithm: HS256
    tenant_claim: tenant
    tenants: [team-a, team-b]
    leeway_s: 5
    keys:
      - {{kid: hs1, file: {cls.keys}/hs.key}}
  - name: rs
    iss: https://rs.example
    aud: moat
    algorithm: RS256
    tenants: [team-a]
    keys:
      - {{kid: rs1, file: {cls.keys}/rsa.pub}}
"""
        cls.stack = Stack(tenants=[("team-a", BIG, ""), ("team-b", BIG + "languages: [bash]\n", "")],
                          extra_config=issuers).start()

    @classmethod
    def tearDownClass(cls):
        import shutil
        cls.stack.stop()
        shutil.rmtree(cls.keys, ignore_errors=True)

    def hs(self, claims, header=None, key=None):
        import hashlib
        import hmac
        h = header or {"alg": "HS256", "typ": "JWT", "kid": "hs1"}
        return mint(h, claims, lambda m: hmac.new(key or self.secret, m, hashlib.sha256).digest())

    def rs(self, claims):
        def sign(m):
            return subprocess.run(["openssl", "dgst", "-sha256", "-sign", os.path.join(self.keys, "rsa.pem")], input=m,
                                  capture_output=True, check=True).stdout
        return mint({"alg": "RS256", "kid": "rs1"}, claims, sign)

    def claims(self, iss="https://hs.example", tenant="team-a", **extra):
        now = int(time.time())
        c = {"iss": iss, "aud": "moat", "tenant": tenant, "sub": "agent-7", "exp": now + 300, "iat": now,
             "scope": "execute runtimes"}
        c.update(extra)
        return c

    def call(self, token, language="python", code="print(7)"):
        return self.stack.request("POST", "/api/v2/execute",
                                  {"language": language, "version": "*", "files": [{"content": code}]}, token=token)

    def test_valid_tokens_pick_the_tenant_from_the_claim(self):
        st, _, data = self.call(self.hs(self.claims()))
        self.assertEqual((st, data["run"]["stdout"]), (200, "7\n"))
        st, _, data = self.call(self.rs(self.claims(iss="https://rs.example")))
        self.assertEqual((st, data["run"]["stdout"]), (200, "7\n"))
        # team-b's policy applies to team-b's token
        self.assertEqual(self.call(self.hs(self.claims(tenant="team-b")))[0], 403)

    def test_rejected_tokens(self):
        with open(os.path.join(self.keys, "rsa.pub"), "rb") as f:
            rsa_pub = f.read()
        cases = {
            "unknown tenant": self.hs(self.claims(tenant="nobody")),
            "expired": self.hs(self.claims(exp=int(time.time()) - 60)),
            "no exp": self.hs({k: v for k, v in self.claims().items() if k != "exp"}),
            "future nbf": self.hs(self.claims(nbf=int(time.time()) + 600)),
            "wrong aud": self.hs(self.claims(aud="other")),
            "wrong iss": self.hs(self.claims(iss="https://evil.example")),
            "alg none": mint({"alg": "none", "kid": "hs1"}, self.claims(), lambda m: b""),
            "wrong key": self.hs(self.claims(), key=os.urandom(48)),
            "path kid": self.hs(self.claims(), header={"alg": "HS256", "kid": "../../etc/passwd"}),
            # G5: HS256 MAC'd with the RS256 issuer's public key
            "alg confusion": self.hs(self.claims(iss="https://rs.example"), header={"alg": "HS256", "kid": "rs1"},
                                     key=rsa_pub),
        }
        for why, token in cases.items():
            with self.subTest(why=why):
                st, headers, data = self.call(token)
                self.assertEqual(st, 401, data)
                self.assertEqual(data["request_id"], headers["x-request-id"])
