"""moatctl over the supervisor's control socket (G39): tenants, keys and
JWT issuers in the admin store, applied atomically, audited before they take
effect, persisted, and loaded by the real gateway (with the audit trail on).

Every step here is a moatctl(8) EXAMPLES step run as written: moatctl
against a real gateway, requests over real TLS."""

import base64
import calendar
import grp
import hashlib
import hmac
import json
import os
import pwd
import re
import signal
import subprocess
import threading
import time
import unittest
from concurrent.futures import ThreadPoolExecutor

from moat_harness import GATEWAY, MOAT_AUDIT, MOATCTL, Stack, reachable, wait_until

MOAT_GID = grp.getgrnam("moat").gr_gid


def admin_stack(control_extra=""):
    """A stack whose gateway has a control section; the configuration is
    readable by the gateway's user, as a reload (which moatctl asks for)
    needs."""
    stack = Stack(extra_config="control:\n  socket: @CTL@\n" + control_extra)
    stack.control = os.path.join(stack.tmp, "control.sock")
    stack.store = os.path.join(stack.tmp, "moat-store.json")
    with open(stack.config) as f:
        text = f.read().replace("@CTL@", stack.control)
    with open(stack.config, "w") as f:
        f.write(text)
    os.chown(stack.config, 0, MOAT_GID)
    os.chmod(stack.config, 0o640)
    return stack


def moatctl(stack, *args, user=None, socket_path=None):
    cmd = [MOATCTL, "--socket", socket_path or stack.control, *args]
    if user is not None:
        pw = pwd.getpwnam(user)
        cmd[0] = reachable(MOATCTL)  # the checkout may be root's alone
        cmd = ["setpriv", "--reuid", str(pw.pw_uid), "--regid", str(pw.pw_gid), "--clear-groups", *cmd]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=180)


def ok(stack, *args):
    p = moatctl(stack, *args)
    if p.returncode != 0:
        raise AssertionError("moatctl %s: exit %d: %s" % (" ".join(args), p.returncode, p.stderr))
    return p


def new_key(stack, tenant, *extra):
    """key create: (token, key id)."""
    out = ok(stack, "--json", "key", "create", "--tenant", tenant, *extra).stdout
    reply = json.loads(out)
    return reply["token"], reply["key_id"]


def runtimes(stack, token):
    return stack.request("GET", "/api/v2/runtimes", token=token, timeout=60)[0]


class AdminTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.stack = admin_stack().start()
        ok(cls.stack, "tenant", "add", "acme", "rate.per_second=1000", "rate.burst=1000", "max_in_flight=64")

    @classmethod
    def tearDownClass(cls):
        cls.stack.stop()

    def admin_records(self):
        return [r for r in self.stack.audit_records() if r.get("type") == "admin"]

    def test_create_a_tenant_and_a_key_and_use_it(self):
        token, kid = new_key(self.stack, "acme", "--note", "ci", "--scopes", "runtimes,execute")
        self.assertEqual(runtimes(self.stack, token), 200)
        st, _, data = self.stack.execute("python", "print(6 * 7)")
        self.assertEqual(st, 200, data)
        # the scopes hold: a key for runtimes and execute only may not review
        listed = json.loads(ok(self.stack, "--json", "key", "list", "--tenant", "acme").stdout)["keys"]
        row = next(k for k in listed if k["id"] == kid)
        self.assertEqual((row["tenant"], row["state"], row["source"], row["note"]), ("acme", "active", "store", "ci"))
        self.assertEqual(sorted(row["scopes"]), ["execute", "runtimes"])
        self.assertIsNotNone(row["last_used"], row)  # the request above
        self.assertNotIn("sha256", row)
        shown = json.loads(ok(self.stack, "--json", "tenant", "show", "acme").stdout)["tenant"]
        self.assertEqual(shown["rate"], {"per_second": 1000, "burst": 1000})
        self.assertIn(kid, [k["id"] for k in shown["keys"]])
        # the store holds the hash only, is the gateway's user's, 0600
        st = os.stat(self.stack.store)
        self.assertEqual((st.st_mode & 0o777, st.st_uid), (0o600, pwd.getpwnam("moat").pw_uid))
        with open(self.stack.store) as f:
            self.assertNotIn(token, f.read())

    def test_key_list_shows_last_used_only_after_a_request(self):
        token, kid = new_key(self.stack, "acme", "--expires", "90d")
        row = lambda: next(k for k in json.loads(ok(self.stack, "--json", "key", "list").stdout)["keys"] if k["id"] == kid)
        self.assertIsNone(row()["last_used"])
        expires = time.mktime(time.strptime(row()["expires"], "%Y-%m-%dT%H:%M:%SZ")) - time.timezone
        self.assertAlmostEqual(expires - time.time(), 90 * 86400, delta=3600)
        self.assertEqual(runtimes(self.stack, token), 200)
        self.assertIsNotNone(row()["last_used"])
        # the table too
        line = next(l for l in ok(self.stack, "key", "list", "--tenant", "acme").stdout.splitlines() if l.startswith(kid))
        self.assertNotIn("never", line.split()[5])

    def test_revoke_takes_effect_when_moatctl_returns(self):
        token, kid = new_key(self.stack, "acme")
        self.assertEqual(runtimes(self.stack, token), 200)
        ok(self.stack, "key", "revoke", kid)
        st, _, data = self.stack.request("GET", "/api/v2/runtimes", token=token)
        self.assertEqual(st, 401, data)
        again = moatctl(self.stack, "key", "revoke", kid)
        self.assertEqual(again.returncode, 1)
        self.assertIn("is revoked", again.stderr)

    def test_rotation_under_load_has_no_failed_request(self):
        old, old_id = new_key(self.stack, "acme")
        statuses, stop = [], threading.Event()

        codes_401 = set()

        def load():
            while not stop.is_set():
                st, _, data = self.stack.request("GET", "/api/v2/runtimes", token=old)
                statuses.append((time.monotonic(), st))
                if st == 401:
                    codes_401.add(data.get("code") if isinstance(data, dict) else None)

        t = threading.Thread(target=load)
        t.start()
        try:
            wait_until(lambda: len(statuses) >= 5, "requests before the rotation")
            before = time.monotonic()
            reply = json.loads(ok(self.stack, "--json", "key", "rotate", old_id, "--grace", "2s").stdout)
            rotated = time.monotonic()
            self.assertEqual(reply["old_key_id"], old_id)
            new = reply["token"]
            # the new key works at once, while the old one still does
            self.assertEqual(runtimes(self.stack, new), 200)
            wait_until(lambda: any(s == 401 for _, s in statuses), "the old key to stop after its grace")
            # a few answers more after the first 401: none of them may be a 200 again
            seen = len(statuses)
            wait_until(lambda: len(statuses) >= seen + 5, "requests after the first 401")
        finally:
            stop.set()
            t.join()
        codes = [s for _, s in statuses]
        first_401 = codes.index(401)
        # ordering: every answer before the first 401 was a 200 ...
        self.assertEqual(set(codes[:first_401]), {200}, codes)
        # ... including some sent after moatctl returned (the grace), and none after the first 401 was a 200
        self.assertTrue(any(at > rotated and s == 200 for at, s in statuses), "no request during the grace")
        self.assertEqual(set(codes[first_401:]), {401}, codes)
        self.assertEqual(codes_401, {"token_expired"})  # stopped by its expiry, the end of the grace
        self.assertGreater(statuses[first_401][0], before)
        self.assertEqual(runtimes(self.stack, new), 200)
        listed = {k["id"]: k for k in json.loads(ok(self.stack, "--json", "key", "list").stdout)["keys"]}
        self.assertEqual(listed[old_id]["state"], "expired")
        self.assertEqual(listed[reply["key_id"]]["rotated_from"], old_id)

    def test_concurrent_moatctl_runs_never_corrupt_the_store(self):
        with ThreadPoolExecutor(max_workers=20) as pool:
            runs = list(pool.map(lambda i: moatctl(self.stack, "--json", "key", "create", "--tenant", "acme",
                                                   "--note", "parallel %d" % i), range(20)))
        made = []
        for p in runs:
            # each succeeds, or fails cleanly with one line
            self.assertIn(p.returncode, (0, 1), p.stderr)
            if p.returncode == 0:
                made.append(json.loads(p.stdout))
            else:
                self.assertEqual(len(p.stderr.strip().splitlines()), 1, p.stderr)
        self.assertEqual(len(made), 20, [p.stderr for p in runs if p.returncode])
        with open(self.stack.store) as f:
            store = json.load(f)
        ids = [k["id"] for k in store["keys"]]
        self.assertEqual(len(ids), len(set(ids)))
        for m in made:
            self.assertIn(m["key_id"], ids)
        for m in made[:3]:
            self.assertEqual(runtimes(self.stack, m["token"]), 200)

    def test_refusals_name_their_reason(self):
        cases = [
            (("tenant", "add", "demo"), "tenant demo is in the configuration file"),
            (("tenant", "add", "acme"), "tenant acme exists"),
            (("tenant", "set", "acme", "rate.per_second=-1"), self.stack.store + ":"),
            (("tenant", "add", "bad", "languages=7"), "languages"),
            (("key", "create", "--tenant", "nobody-such"), "no tenant nobody-such"),
            (("key", "revoke", self.stack.key_id), "is in the configuration file"),
            (("key", "rotate", "000000000000"), "no key 000000000000"),
            (("tenant", "remove", "acme"), "active key"),
        ]
        for args, message in cases:
            with self.subTest(args=args):
                p = moatctl(self.stack, *args)
                self.assertEqual(p.returncode, 1, p.stdout + p.stderr)
                self.assertIn(message, p.stderr)
                self.assertEqual(len(p.stderr.strip().splitlines()), 1, p.stderr)
        # the refused tenant never reached the store
        self.assertNotIn("bad", [t["name"] for t in json.loads(ok(self.stack, "--json", "tenant", "list").stdout)["tenants"]])

    def test_usage_errors_exit_2(self):
        for args in (("key", "create"), ("key", "rotate"), ("tenant", "set", "acme"), ("frobnicate",),
                     ("key", "create", "--tenant", "acme", "--expires", "soon")):
            with self.subTest(args=args):
                p = moatctl(self.stack, *args)
                self.assertEqual(p.returncode, 2, p.stderr)
        self.assertEqual(moatctl(self.stack, "--help").returncode, 0)

    def test_tenant_set_and_remove(self):
        ok(self.stack, "tenant", "add", "shortlived", "endpoints=[\"runtimes\"]")
        token, kid = new_key(self.stack, "shortlived")
        self.assertEqual(runtimes(self.stack, token), 200)
        ok(self.stack, "tenant", "set", "shortlived", "endpoints=[\"execute\"]")
        self.assertEqual(runtimes(self.stack, token), 403)
        ok(self.stack, "key", "revoke", kid)
        ok(self.stack, "tenant", "remove", "shortlived")
        names = [t["name"] for t in json.loads(ok(self.stack, "--json", "tenant", "list").stdout)["tenants"]]
        self.assertNotIn("shortlived", names)

    def test_jwt_issuer_add_list_remove(self):
        secret = os.urandom(48)
        key = os.path.join(self.stack.tmp, "idp.key")
        with open(key, "wb") as f:
            f.write(secret)
        os.chown(key, 0, MOAT_GID)
        os.chmod(key, 0o640)
        ok(self.stack, "jwt-issuer", "add", "idp", "iss=https://idp.example", "aud=moat", "algorithm=HS256",
           'tenants=["acme"]', 'keys=[{"kid": "k1", "file": "%s"}]' % key)

        def b64(d):
            return base64.urlsafe_b64encode(d).rstrip(b"=").decode()
        now = int(time.time())
        head = b64(json.dumps({"alg": "HS256", "typ": "JWT", "kid": "k1"}).encode())
        body = b64(json.dumps({"iss": "https://idp.example", "aud": "moat", "tenant": "acme", "iat": now,
                               "exp": now + 300, "scope": "runtimes"}).encode())
        jwt = head + "." + body + "." + b64(hmac.new(secret, (head + "." + body).encode(), hashlib.sha256).digest())
        self.assertEqual(runtimes(self.stack, jwt), 200)
        listed = json.loads(ok(self.stack, "--json", "jwt-issuer", "list").stdout)["jwt_issuers"]
        self.assertIn("idp", [i["name"] for i in listed])
        ok(self.stack, "jwt-issuer", "remove", "idp")
        self.assertEqual(runtimes(self.stack, jwt), 401)

    def test_status(self):
        reply = json.loads(ok(self.stack, "--json", "status").stdout)
        self.assertEqual(reply["gateway"]["workers_alive"], reply["gateway"]["workers"])
        self.assertEqual(reply["gateway"]["backend"], "ok")
        self.assertTrue(reply["audit_writer"]["running"])
        self.assertEqual(reply["redis"], "not configured")
        self.assertIn("backend:      ok", ok(self.stack, "status").stdout)

    def test_a_non_admin_uid_is_refused_by_the_peer_check(self):
        # the socket's mode would keep nobody out; open it to everyone so the
        # supervisor's SO_PEERCRED check is what refuses
        os.chmod(self.stack.control, 0o666)
        try:
            p = moatctl(self.stack, "key", "list", user="nobody")
        finally:
            os.chmod(self.stack.control, 0o660)
        self.assertEqual(p.returncode, 1, p.stdout + p.stderr)
        self.assertIn("refused: uid %d may not use the control socket" % pwd.getpwnam("nobody").pw_uid, p.stderr)
        self.assertEqual(p.stdout, "")
        wait_until(lambda: "is not allowed on the control socket" in self.stack.log("gateway"), "the refusal logged")
        # with the socket's own mode, nobody cannot even connect
        p = moatctl(self.stack, "key", "list", user="nobody")
        self.assertEqual(p.returncode, 3, p.stderr)

    def test_unreachable_gateway_exits_3(self):
        p = moatctl(self.stack, "status", socket_path=os.path.join(self.stack.tmp, "no-such.sock"))
        self.assertEqual(p.returncode, 3)
        self.assertIn("cannot reach the gateway", p.stderr)
        self.assertEqual(len(p.stderr.strip().splitlines()), 1)

    def test_torn_store_is_refused_and_the_running_state_stays(self):
        token, kid = new_key(self.stack, "acme")
        with open(self.stack.store) as f:
            good = f.read()
        try:
            with open(self.stack.store, "w") as f:
                f.write(good[: len(good) // 2])  # a half-written file
            self.stack.gateway.send_signal(signal.SIGHUP)
            wait_until(lambda: "reload failed: " + self.stack.store in self.stack.log("gateway"),
                       "the reload to refuse the torn store", detail=lambda: self.stack.log("gateway"))
            self.assertEqual(runtimes(self.stack, token), 200)  # the running generation
            p = moatctl(self.stack, "key", "create", "--tenant", "acme")
            self.assertEqual(p.returncode, 1)
            self.assertIn(self.stack.store, p.stderr)
            self.assertIn("not valid JSON", p.stderr)
            # a start with it refuses too (moat-gateway -n checks what a start would load)
            check = subprocess.run([GATEWAY, "-n", "-c", self.stack.config], capture_output=True, text=True)
            self.assertEqual(check.returncode, 1)
            self.assertIn(self.stack.store, check.stderr)
        finally:
            with open(self.stack.store, "w") as f:
                f.write(good)
        self.assertEqual(runtimes(self.stack, token), 200)

    def test_zz_every_action_is_in_the_audit_trail_and_it_verifies(self):
        _, kid = new_key(self.stack, "acme")
        ok(self.stack, "key", "revoke", kid)
        records = self.admin_records()
        actions = [r["action"] for r in records]
        for action in ("tenant.add", "key.create", "key.revoke"):
            self.assertIn(action, actions)
        last = [r for r in records if r.get("key_id") == kid]
        self.assertEqual([r["action"] for r in last], ["key.revoke"])
        self.assertEqual((last[0]["admin_uid"], last[0]["admin_user"]), (0, "root"))
        created = [r for r in records if r.get("new_key_id") == kid]
        self.assertEqual(len(created), 1)
        for r in records:
            self.assertNotIn("sha256", json.dumps(r))
        # refused changes are not recorded: each record is a change that took effect
        self.assertNotIn("demo", [r.get("tenant") for r in records])
        p = subprocess.run([MOAT_AUDIT, "verify", self.stack.audit_dir], capture_output=True, text=True)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)


def utc(text):
    """moatctl's time ("2026-12-07T12:00:00Z") as unix seconds."""
    return calendar.timegm(time.strptime(text, "%Y-%m-%dT%H:%M:%SZ"))


class LastUsedTest(unittest.TestCase):
    """A key's last use outlives the gateway that saw it: the supervisor
    writes it (to the minute) into the admin store every
    control.last_used_every_s, and once more as it exits; moatctl key list
    shows the later of that record and the running gateway's own."""

    def key_row(self, stack, kid):
        return next(k for k in json.loads(ok(stack, "--json", "key", "list").stdout)["keys"] if k["id"] == kid)

    def restart_gateway(self, stack):
        stack.gateway.terminate()
        stack.gateway.wait(timeout=30)
        stack.gateway_log.close()
        stack.start_gateway()

    def used_record(self, stack):
        try:
            with open(stack.store + ".used") as f:
                return json.load(f)
        except (OSError, ValueError):
            return {}

    def test_written_every_interval_and_listed_after_a_restart(self):
        stack = admin_stack("  last_used_every_s: 1\n").start()
        self.addCleanup(stack.stop)
        ok(stack, "tenant", "add", "acme")
        token, kid = new_key(stack, "acme")
        _, idle = new_key(stack, "acme")
        used_at = time.time()
        self.assertEqual(runtimes(stack, token), 200)
        wait_until(lambda: kid in self.used_record(stack), "the key's use in %s.used" % stack.store,
                   detail=lambda: stack.log("gateway"))
        stored = self.used_record(stack)[kid]
        self.assertEqual(stored % 60, 0, "to the minute")
        self.assertTrue(used_at - 60 < stored <= used_at, (stored, used_at))
        self.assertNotIn(idle, self.used_record(stack))
        st = os.stat(stack.store + ".used")
        self.assertEqual((st.st_uid, st.st_mode & 0o777), (0, 0o600))  # root's: the gateway never reads it
        self.restart_gateway(stack)
        # the new gateway has not seen the key: what is listed is the store's record
        self.assertEqual(utc(self.key_row(stack, kid)["last_used"]), stored)
        self.assertIsNone(self.key_row(stack, idle)["last_used"])
        # a record that does not parse is set aside, and the listing still works
        with open(stack.store + ".used", "w") as f:
            f.write("{not json")
        self.assertIsNone(self.key_row(stack, kid)["last_used"])
        self.assertTrue(os.path.exists(stack.store + ".used.bad"))
        self.assertIn("set aside", stack.log("gateway"))
        self.assertEqual(runtimes(stack, token), 200)
        wait_until(lambda: kid in self.used_record(stack), "a new record", detail=lambda: stack.log("gateway"))

    def test_written_as_the_gateway_stops(self):
        stack = admin_stack("  last_used_every_s: 3600\n").start()
        self.addCleanup(stack.stop)
        ok(stack, "tenant", "add", "acme")
        token, kid = new_key(stack, "acme")
        self.assertEqual(runtimes(stack, token), 200)
        self.assertEqual(self.used_record(stack), {})  # an hour to go
        self.restart_gateway(stack)
        self.assertIn(kid, self.used_record(stack))
        self.assertIsNotNone(self.key_row(stack, kid)["last_used"])

    def test_the_interval_is_bounded(self):
        for bad in ("0", "3601", "soon"):
            stack = admin_stack("  last_used_every_s: %s\n" % bad)
            try:
                p = subprocess.run([GATEWAY, "-n", "-c", stack.config], capture_output=True, text=True)
            finally:
                stack.stop()
            self.assertEqual(p.returncode, 1, p.stderr)
            self.assertIn("control.last_used_every_s", p.stderr)


class ParsedAsTheGatewaysUserTest(unittest.TestCase):
    """The supervisor keeps root but never parses the configuration as root
    after start: moatctl's listings and changes are worked out by a child
    that became the gateway's user first (admin/as_user.c).  A gateway.conf
    that only root may read is what shows it: a root parser would read it,
    the gateway's user cannot, so moatctl says so, and changes nothing."""

    def test_a_configuration_only_root_can_read_stops_moatctl(self):
        stack = admin_stack().start()
        self.addCleanup(stack.stop)
        ok(stack, "tenant", "add", "acme")
        with open(stack.store) as f:
            before = f.read()
        os.chown(stack.config, 0, 0)
        os.chmod(stack.config, 0o600)
        try:
            for args in (["key", "list"], ["key", "create", "--tenant", "acme"], ["tenant", "show", "acme"]):
                p = moatctl(stack, *args)
                self.assertEqual(p.returncode, 1, (args, p.stdout, p.stderr))
                self.assertIn(stack.config, p.stderr)
                self.assertIn("Permission denied", p.stderr)
                self.assertEqual(len(p.stderr.strip().splitlines()), 1, p.stderr)
        finally:
            os.chown(stack.config, 0, MOAT_GID)
            os.chmod(stack.config, 0o640)
        with open(stack.store) as f:
            self.assertEqual(f.read(), before)  # nothing changed
        self.assertEqual(moatctl(stack, "key", "list").returncode, 0)
        # the supervisor is still root (it keeps the control socket and starts the writer)
        sup = json.loads(ok(stack, "--json", "status").stdout)
        self.assertIn("audit_writer", sup)


class ControlUsersTest(unittest.TestCase):
    """control.users lets a listed user in besides root, and the audit record names them."""

    def test_a_listed_user_may_administer(self):
        stack = admin_stack('  mode: "0666"\n  users: [nobody]\n').start()
        try:
            p = moatctl(stack, "tenant", "add", "acme", user="nobody")
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertEqual(oct(os.stat(stack.control).st_mode & 0o777), "0o666")
            records = [r for r in stack.audit_records() if r.get("type") == "admin"]
            self.assertEqual([(r["action"], r["admin_user"], r["admin_uid"]) for r in records],
                             [("tenant.add", "nobody", pwd.getpwnam("nobody").pw_uid)])
        finally:
            stack.stop()


class ControlCheckTest(unittest.TestCase):
    """`moat-gateway -n` (and a start) refuses a control section it could not serve."""

    def check(self, control_extra, prepare=None):
        stack = admin_stack(control_extra)
        try:
            if prepare:
                prepare(stack)
            return subprocess.run([GATEWAY, "-n", "-c", stack.config], capture_output=True, text=True)
        finally:
            stack.stop()

    def test_control_section_checked(self):
        self.assertEqual(self.check("").returncode, 0)
        p = self.check("  group: no-such-group-here\n")
        self.assertEqual(p.returncode, 1)
        self.assertIn("control.group: no group no-such-group-here", p.stderr)
        p = self.check("  users: [no-such-user-here]\n")
        self.assertIn("control.users: no user no-such-user-here", p.stderr)

        def open_dir(stack):
            os.chmod(stack.tmp, 0o777)  # writable by everyone, no sticky bit
        p = self.check("", open_dir)
        self.assertEqual(p.returncode, 1)
        self.assertIn("writable by everyone without the sticky bit", p.stderr)

        def no_audit(stack):
            with open(stack.config) as f:
                text = f.read()
            with open(stack.config, "w") as f:
                f.write(re.sub(r"^audit:\n(  .*\n)*", "", text, flags=re.M))
        p = self.check("", no_audit)
        self.assertEqual(p.returncode, 1)
        self.assertIn("control needs the audit section", p.stderr)


class AuditFirstTest(unittest.TestCase):
    """Fail closed: with the audit writer unable to make a record durable,
    no change is made."""

    def test_no_audit_no_change(self):
        stack = admin_stack().start()
        try:
            ok(stack, "tenant", "add", "acme")
            writer = json.loads(ok(stack, "--json", "status").stdout)["audit_writer"]["pid"]
            # stop the writer (it cannot acknowledge) while the supervisor waits to restart it
            os.kill(writer, signal.SIGSTOP)
            try:
                p = moatctl(stack, "key", "create", "--tenant", "acme")
            finally:
                os.kill(writer, signal.SIGCONT)
            self.assertEqual(p.returncode, 1, p.stdout + p.stderr)
            self.assertIn("audit writer", p.stderr)
            with open(stack.store) as f:
                self.assertEqual(json.load(f)["keys"], [])
        finally:
            stack.stop()


if __name__ == "__main__":
    unittest.main()
