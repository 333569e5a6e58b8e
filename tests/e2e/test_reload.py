"""SIGHUP reload of root-owned files (G9): `moat-gateway -n` tries the reload
as the gateway's user and fails when it would fail; with the quickstart
demo's layout (root:moat 0640 files in a root:moat 0750 directory) the
key-rotation recipe of moatctl(8) works as written, and a JWT signing key
rotates the same way.  Reloads run in the confined gateway, so they also
show that a reload needs no call the seccomp filter refuses."""

import base64
import grp
import hashlib
import hmac
import json
import os
import re
import shutil
import signal
import subprocess
import textwrap
import time
import unittest

from moat_harness import BUILD, GATEWAY, Stack, man_literal_blocks, man_section, wait_until

MOAT_GID = grp.getgrnam("moat").gr_gid


def root_moat(path, mode=0o640):
    """What the quickstart does to the demo's files: owner root, group moat."""
    os.chown(path, 0, MOAT_GID)
    os.chmod(path, mode)


def check(conf):
    """moat-gateway -n, as the quickstart and moatctl(8)'s recipe run it."""
    return subprocess.run([GATEWAY, "-n", "-c", conf], capture_output=True, text=True)


def demo_layout(stack, name="etc-moat-demo"):
    """Moves the stack's configuration, certificate and key into a directory
    laid out like the demo's /etc/moat-demo, and returns that directory."""
    conf_dir = os.path.join(stack.tmp, name)
    os.mkdir(conf_dir)
    root_moat(conf_dir, 0o750)
    for f in ("server.pem", "server.key"):
        shutil.copy(os.path.join(stack.certs, f), conf_dir)
        root_moat(os.path.join(conf_dir, f))
    with open(stack.config) as f:
        text = f.read().replace(stack.certs + "/server.", conf_dir + "/server.")
    stack.config = os.path.join(conf_dir, "gateway.conf")
    with open(stack.config, "w") as f:
        f.write(text)
    root_moat(stack.config)
    return conf_dir


def log_text(stack):
    with open(os.path.join(stack.tmp, "gateway.log"), errors="replace") as f:
        return f.read()


def wait_reloads(stack, count):
    """Waits until the gateway has reloaded count times; fails at once on a failed reload."""
    def reloaded():
        text = log_text(stack)
        if "reload failed" in text:
            raise AssertionError("reload failed: " + text[-2000:])
        return text.count("configuration reloaded") >= count
    wait_until(reloaded, "%d reload(s) in the gateway's log" % count, detail=lambda: log_text(stack)[-2000:])


def recipe_blocks():
    """The shell blocks of moatctl(8)'s "Rotating a key by hand", in order."""
    section = man_section("gateway/man/moatctl.8", "Rotating a key by hand")
    blocks = [textwrap.dedent(b) for b in man_literal_blocks(section)]
    assert len(blocks) == 3, blocks
    return blocks


class CheckTest(unittest.TestCase):
    """-n says OK only when a reload as the gateway's user would load the files."""

    def setUp(self):
        self.stack = Stack(tenants=[("demo", "", "")])
        self.conf_dir = demo_layout(self.stack)

    def tearDown(self):
        self.stack.stop()

    def test_demo_layout_passes(self):
        p = check(self.stack.config)
        self.assertEqual((p.returncode, p.stdout.strip()), (0, "configuration OK"), p.stderr)
        self.assertNotIn("reload", p.stderr)

    def test_root_only_config_fails(self):
        os.chmod(self.stack.config, 0o600)
        p = check(self.stack.config)
        self.assertEqual(p.returncode, 1, p.stdout + p.stderr)
        self.assertNotIn("configuration OK", p.stdout)
        self.assertIn(self.stack.config + ": Permission denied; a SIGHUP reload would fail", p.stderr)
        self.assertIn("as user moat", p.stderr)

    def test_unsearchable_directory_fails(self):
        os.chmod(self.conf_dir, 0o700)
        p = check(self.stack.config)
        self.assertEqual(p.returncode, 1, p.stdout + p.stderr)
        self.assertIn("a SIGHUP reload would fail", p.stderr)

    def test_root_only_jwt_key_file_fails(self):
        key = os.path.join(self.conf_dir, "hs.key")
        with open(key, "wb") as f:
            f.write(os.urandom(48))
        os.chmod(key, 0o600)
        with open(self.stack.config, "a") as f:
            f.write("jwt_issuers:\n  - {name: i, iss: https://i.example, aud: moat, algorithm: HS256, tenants: [demo],"
                    " keys: [{kid: k1, file: %s}]}\n" % key)
        p = check(self.stack.config)
        self.assertEqual(p.returncode, 1, p.stdout + p.stderr)
        self.assertIn("key file %s: Permission denied; a SIGHUP reload would fail" % key, p.stderr)
        root_moat(key)
        p = check(self.stack.config)
        self.assertEqual(p.returncode, 0, p.stderr)

    def test_root_only_tls_key_is_a_note(self):
        # a reload keeps the running certificate then: worth saying, not a failure
        os.chmod(os.path.join(self.conf_dir, "server.key"), 0o600)
        p = check(self.stack.config)
        self.assertEqual((p.returncode, p.stdout.strip()), (0, "configuration OK"), p.stderr)
        self.assertIn("a SIGHUP reload would keep the running certificate and key", p.stderr)

    def test_relative_path(self):
        p = subprocess.run([GATEWAY, "-n", "-c", "gateway.conf"], capture_output=True, text=True, cwd=self.conf_dir)
        self.assertEqual((p.returncode, p.stdout.strip()), (0, "configuration OK"), p.stderr)
        # after the drop the gateway's working directory is /: it must keep an absolute path for SIGHUP
        self.stack.config = "gateway.conf"
        cwd = os.getcwd()
        os.chdir(self.conf_dir)
        try:
            self.stack.start()
        finally:
            os.chdir(cwd)
        self.stack.gateway.send_signal(signal.SIGHUP)
        wait_reloads(self.stack, 1)


class RotationTest(unittest.TestCase):
    """moatctl(8)'s recipe against a stack laid out like the demo."""

    def setUp(self):
        self.stack = Stack(tenants=[("demo", "", "")])
        self.conf_dir = demo_layout(self.stack)
        self.demo = os.path.join(self.stack.tmp, "dot-demo")
        os.mkdir(self.demo, 0o700)
        p = check(self.stack.config)  # what the quickstart runs before it starts the gateway
        self.assertEqual((p.returncode, p.stdout.strip()), (0, "configuration OK"), p.stderr)
        self.stack.start()
        with open(os.path.join(self.demo, "token"), "w") as f:
            f.write(self.stack.token + "\n")
        with open(os.path.join(self.demo, "gateway.pid"), "w") as f:
            f.write("%d\n" % self.stack.gateway.pid)

    def tearDown(self):
        self.stack.stop()

    def run_block(self, block):
        """One block of the recipe, its paths moved to this stack."""
        script = (block.replace("/etc/moat-demo/", self.conf_dir + "/")
                  .replace(".demo/", self.demo + "/")
                  .replace("build/gateway/", os.path.join(BUILD, "gateway") + "/"))
        p = subprocess.run(["bash", "-euo", "pipefail", "-c", script], capture_output=True, text=True)
        self.assertEqual(p.returncode, 0, "%s\n%s%s" % (script, p.stdout, p.stderr))

    def status(self, token):
        return self.stack.request("GET", "/api/v2/runtimes", token=token)[0]

    def token_file(self):
        with open(os.path.join(self.demo, "token")) as f:
            return f.read().strip()

    def test_man_page_recipe(self):
        old = self.stack.token
        add, switch, remove = recipe_blocks()
        self.run_block(add)
        wait_reloads(self.stack, 1)
        with open(os.path.join(self.demo, "new-key")) as f:
            new = re.search(r"^token: (\S+)$", f.read(), re.M).group(1)
        self.assertEqual((self.status(old), self.status(new)), (200, 200))
        self.run_block(switch)
        self.assertEqual(self.token_file(), new)
        self.run_block(remove)
        wait_reloads(self.stack, 2)
        self.assertEqual((self.status(old), self.status(new)), (401, 200))
        # the file is still the demo's: owner root, group moat, 0640
        st = os.stat(self.stack.config)
        self.assertEqual((st.st_uid, st.st_gid, st.st_mode & 0o777), (0, MOAT_GID, 0o640))
        self.assertFalse(os.path.exists(os.path.join(self.demo, "new-key")))


def b64url(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def hs256(secret, kid):
    now = int(time.time())
    head = b64url(json.dumps({"alg": "HS256", "kid": kid}).encode())
    body = b64url(json.dumps({"iss": "https://i.example", "aud": "moat", "tenant": "demo", "scope": "runtimes",
                              "iat": now, "exp": now + 300}).encode())
    return head + "." + body + "." + b64url(hmac.new(secret, (head + "." + body).encode(), hashlib.sha256).digest())


class JwtKeyRotationTest(unittest.TestCase):
    """A JWT signing key added and removed by SIGHUP: its file is read by the
    confined gateway as moat."""

    def setUp(self):
        self.stack = Stack(tenants=[("demo", "", "")])
        self.conf_dir = demo_layout(self.stack)
        self.secrets = {}
        for kid in ("k1", "k2"):
            self.secrets[kid] = os.urandom(48)
            path = os.path.join(self.conf_dir, kid + ".key")
            with open(path, "wb") as f:
                f.write(self.secrets[kid])
            root_moat(path)
        with open(self.stack.config) as f:
            self.base = f.read()
        self.write(["k1"])
        self.stack.start()

    def tearDown(self):
        self.stack.stop()

    def write(self, kids):
        keys = "".join("      - {kid: %s, file: %s/%s.key}\n" % (k, self.conf_dir, k) for k in kids)
        with open(self.stack.config, "w") as f:  # in place: owner and mode stay
            f.write(self.base + "jwt_issuers:\n  - name: i\n    iss: https://i.example\n    aud: moat\n"
                                "    algorithm: HS256\n    tenants: [demo]\n    keys:\n" + keys)
        p = check(self.stack.config)
        self.assertEqual(p.returncode, 0, p.stderr)

    def hup(self, count):
        self.stack.gateway.send_signal(signal.SIGHUP)
        wait_reloads(self.stack, count)

    def status(self, kid):
        return self.stack.request("GET", "/api/v2/runtimes", token=hs256(self.secrets[kid], kid))[0]

    def test_add_then_remove_a_signing_key(self):
        self.assertEqual((self.status("k1"), self.status("k2")), (200, 401))
        self.write(["k1", "k2"])
        self.hup(1)
        self.assertEqual((self.status("k1"), self.status("k2")), (200, 200))
        self.write(["k2"])
        self.hup(2)
        self.assertEqual((self.status("k1"), self.status("k2")), (401, 200))


if __name__ == "__main__":
    unittest.main()
