"""Session settings in the configuration (issue 11): the top-level sessions
section and each tenant's sessions ceilings, checked with `moat-gateway -n`
exactly as test_tenants.ConfigCheckTest checks the other sections (its
check(), setUp() and tearDown() are borrowed, not copied): what loads, and
every bad value refused with one PATH:LINE: reason line.  Needs root and
the moat user, like the other e2e modules.
"""

import unittest

import test_tenants

TENANT = "tenants:\n  - name: t\n    endpoints: [execute, runtimes, connect, watch]\n"


class SessionConfigTest(unittest.TestCase):
    setUp = test_tenants.ConfigCheckTest.setUp
    tearDown = test_tenants.ConfigCheckTest.tearDown
    check = test_tenants.ConfigCheckTest.check

    def assert_ok(self, text):
        p, _ = self.check(self.BASE + text)
        self.assertEqual((p.returncode, p.stdout.strip()), (0, "configuration OK"), p.stderr)

    def test_defaults_and_explicit_values_load(self):
        cases = [
            TENANT,
            "sessions: {init_timeout_ms: 1000, max_sessions: 1, watch_token_ttl_s: 1, max_watchers: 0}\n" + TENANT,
            "sessions: {init_timeout_ms: 60000, max_sessions: 65536, watch_token_ttl_s: 86400, max_watchers: 256}\n",
            "sessions: {}\n",
            TENANT + "    sessions: {max_concurrent: 1, wall_ms: 1, idle_ms: 1, cpu_ms: 1, stdin_bytes: 1, output_bytes: 1}\n",
            TENANT + "    sessions:\n      max_concurrent: 65536\n      wall_ms: 86400000\n      idle_ms: 86400000\n"
            "      cpu_ms: 86400000\n      stdin_bytes: 4194304\n      output_bytes: 4194304\n",
            # the example's layout: a flow mapping over two lines
            TENANT + "    sessions: {max_concurrent: 10, wall_ms: 900000, idle_ms: 60000, cpu_ms: 30000,\n"
            "               stdin_bytes: 1048576, output_bytes: 1048576}\n",
        ]
        for text in cases:
            with self.subTest(text=text):
                self.assert_ok(text)

    def test_errors_name_file_line_and_reason(self):
        top = "sessions:\n  %s\n"
        tenant = TENANT + "    sessions:\n      %s\n"
        cases = [
            (top % "init_timeout_ms: 0", ":3: sessions.init_timeout_ms must be between 1 and 60000"),
            (top % "init_timeout_ms: 60001", ":3: sessions.init_timeout_ms must be between 1 and 60000"),
            (top % "max_sessions: 0", ":3: sessions.max_sessions must be between 1 and 65536"),
            (top % "max_sessions: 65537", ":3: sessions.max_sessions must be between 1 and 65536"),
            (top % "max_sessions: -1", ":3: sessions.max_sessions must be a non-negative integer"),
            (top % "watch_token_ttl_s: 0", ":3: sessions.watch_token_ttl_s must be between 1 and 86400"),
            (top % "watch_token_ttl_s: 86401", ":3: sessions.watch_token_ttl_s must be between 1 and 86400"),
            (top % "max_watchers: 257", ":3: sessions.max_watchers must be between 0 and 256"),
            (top % "max_watchers: many", ":3: sessions.max_watchers must be a non-negative integer"),
            (top % "max_watchers: [1]", ":3: sessions.max_watchers must be a scalar"),
            (top % "idle_ms: 1000", ":3: unknown key 'idle_ms' in sessions"),
            ("sessions: 5\n", ":2: sessions must be a mapping"),
            ("sessions: {max_sessions: 5, max_sessions: 6}\n", ":2: duplicate key 'max_sessions' in sessions"),
            (tenant % "max_concurrent: 0", ":6: sessions.max_concurrent must be between 1 and 65536"),
            (tenant % "max_concurrent: 65537", ":6: sessions.max_concurrent must be between 1 and 65536"),
            (tenant % "wall_ms: 0", ":6: sessions.wall_ms must be between 1 and 86400000"),
            (tenant % "wall_ms: 86400001", ":6: sessions.wall_ms must be between 1 and 86400000"),
            (tenant % "idle_ms: 0", ":6: sessions.idle_ms must be between 1 and 86400000"),
            (tenant % "cpu_ms: 0", ":6: sessions.cpu_ms must be between 1 and 86400000"),
            (tenant % "cpu_ms: 1.5", ":6: sessions.cpu_ms must be a non-negative integer"),
            (tenant % "stdin_bytes: 0", ":6: sessions.stdin_bytes must be between 1 and 4194304"),
            (tenant % "stdin_bytes: 4194305", ":6: sessions.stdin_bytes must be between 1 and 4194304"),
            (tenant % "output_bytes: 0", ":6: sessions.output_bytes must be between 1 and 4194304"),
            (tenant % "output_bytes: 99999999999999999999999", ":6: sessions.output_bytes must be a non-negative integer"),
            (tenant % "max_sessions: 3", ":6: unknown key 'max_sessions' in tenant sessions"),
            (TENANT + "    sessions: [1]\n", ":5: tenant sessions must be a mapping"),
            ("tenants:\n  - name: t\n    endpoints: [execute, sessions]\n", ":4: endpoints: unknown endpoint 'sessions'"),
        ]
        for text, want in cases:
            with self.subTest(want=want):
                p, path = self.check(self.BASE + text)
                self.assertEqual(p.returncode, 1, p.stdout)
                self.assertIn(path + want, p.stderr)
                self.assertEqual(len(p.stderr.strip().splitlines()), 1, p.stderr)

    def test_endpoint_names_in_lists_and_scopes(self):
        """connect and watch are endpoint names wherever endpoints are named."""
        key = "    keys:\n      - {id: 0123456789ab, sha256: %s, scopes: [%s]}\n" % ("0" * 64, "%s")
        self.assert_ok(TENANT + key % "connect, watch")
        self.assert_ok("tenants:\n  - name: t\n    endpoints: [connect]\n" + key % "connect")
        p, path = self.check(self.BASE + TENANT + key % "connect, admin")
        self.assertEqual(p.returncode, 1)
        self.assertIn(path + ":6: key scopes: unknown endpoint 'admin' (execute, runtimes, connect, watch, submissions, languages, packets, review)", p.stderr)


if __name__ == "__main__":
    unittest.main()
