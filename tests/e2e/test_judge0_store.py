"""Judge0 results kept in a directory (the submissions section's store_dir)
through the real gateway and backend: a wait=false result survives a
gateway restart, another tenant's token stays 404, an expired record is
gone, a run the gateway was holding when it was killed (-9) reads as an
Internal Error after the restart, and the directory's ownership and mode
are checked at start and by -n."""

import glob
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import unittest

from moat_harness import GATEWAY, Stack, free_port, wait_until

JUDGE0 = "rate: {per_second: 1000, burst: 1000}\nmax_in_flight: 64\nendpoints: [execute, runtimes, submissions, languages]\n"
TENANTS = [("alpha", JUDGE0, ""), ("beta", JUDGE0, "")]
MOAT = pwd.getpwnam("moat")


def store_dir():
    d = tempfile.mkdtemp(prefix="moat-e2e-store-")
    os.chown(d, MOAT.pw_uid, MOAT.pw_gid)
    os.chmod(d, 0o700)
    return d


class Judge0StoreTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = store_dir()
        cls.stack = Stack(tenants=TENANTS, audit=False,
                          extra_config="submissions:\n  store_dir: %s\n  ttl_s: 3600\n" % cls.dir).start()

    @classmethod
    def tearDownClass(cls):
        cls.stack.stop()
        shutil.rmtree(cls.dir, ignore_errors=True)

    def call(self, method, path, body=None, tenant="alpha"):
        return self.stack.request(method, path, body, token=self.stack.tokens[tenant])

    def submit(self, code, tenant="alpha"):
        st, _, data = self.call("POST", "/submissions?wait=false", {"source_code": code, "language_id": 71}, tenant)
        self.assertEqual(st, 201, data)
        return data["token"]

    def get(self, token, tenant="alpha"):
        return self.call("GET", "/submissions/%s?fields=status,stdout,message" % token, tenant=tenant)

    def finished(self, token):
        got = {}

        def done():
            st, _, data = self.get(token)
            self.assertEqual(st, 200, data)
            got.update(data)
            return data["status"]["id"] >= 3
        wait_until(done, "submission %s to finish" % token)
        return got

    def restart(self, sig=signal.SIGTERM):
        g = self.stack.gateway
        g.send_signal(sig)
        g.wait(timeout=30)
        self.stack.gateway_log.close()
        self.stack.start_gateway()

    def record_file(self, token):
        files = glob.glob(os.path.join(self.dir, "*", token))
        self.assertEqual(len(files), 1, files)
        return files[0]

    def test_result_survives_a_restart(self):
        token = self.submit("print('kept')")
        self.assertEqual(self.finished(token)["stdout"], "kept\n")
        path = self.record_file(token)
        st = os.stat(path)
        self.assertEqual((st.st_mode & 0o777, st.st_uid), (0o600, MOAT.pw_uid))
        self.restart()
        st, _, data = self.get(token)
        self.assertEqual(st, 200, data)
        self.assertEqual((data["status"]["id"], data["stdout"]), (3, "kept\n"))
        # another tenant's token: not found, as if it never existed
        st, _, data = self.get(token, tenant="beta")
        self.assertEqual(st, 404, data)

    def test_expired_record_is_gone(self):
        token = self.submit("print('short')")
        self.finished(token)
        path = self.record_file(token)
        with open(path, "rb") as f:
            text = f.read()
        header, _, rest = text.partition(b"\n")
        magic, version, _expires, instance = header.split(b" ")
        with open(path, "wb") as f:  # as if its life ended a second after 1970
            f.write(b" ".join([magic, version, b"1000", instance]) + b"\n" + rest)
        st, _, data = self.get(token)
        self.assertEqual(st, 404, data)
        self.assertFalse(os.path.exists(path))

    def test_run_lost_in_a_kill_is_an_internal_error(self):
        # the program sleeps to be still running when the gateway is killed (far longer than the kill takes)
        token = self.submit("import time\ntime.sleep(4)\nprint('never seen')")
        st, _, data = self.get(token)
        self.assertEqual((st, data["status"]["id"]), (200, 2), data)  # Processing
        self.restart(signal.SIGKILL)
        st, _, data = self.get(token)
        self.assertEqual(st, 200, data)
        self.assertEqual(data["status"], {"id": 13, "description": "Internal Error"})
        self.assertIn("the gateway restarted", data["message"])
        # kept so: read again, the same answer
        st, _, again = self.get(token)
        self.assertEqual(again, data)

    def check_config(self, section):
        """moat-gateway -n over the stack's configuration with section in place of its submissions lines."""
        conf = os.path.join(self.stack.tmp, "check.conf")
        with open(self.stack.config) as f:
            text = f.read().replace("submissions:\n  store_dir: %s\n  ttl_s: 3600\n" % self.dir, section)
        with open(conf, "w") as f:
            f.write(text)
        os.chown(conf, 0, MOAT.pw_gid)  # -n reads it again as the gateway's user
        os.chmod(conf, 0o640)
        return subprocess.run([GATEWAY, "-n", "-c", conf], capture_output=True, text=True, timeout=60)

    def test_section_is_strict(self):
        with open(self.stack.config) as f:
            line = f.read().split("\n").index("submissions:") + 2  # the section's first key
        for section, error in [
                ("submissions:\n  bogus: 1\n", ":%d: unknown key 'bogus' in submissions" % line),
                ("submissions:\n  ttl_s: 0\n", ":%d: submissions.ttl_s must be between 1 and 2592000" % line),
                ("submissions:\n  store_dir: rel/dir\n", ":%d: submissions.store_dir must be an absolute path" % line),
                ("submissions:\n  max_bytes: 12\n", ":%d: submissions.max_bytes must be between 4096" % line),
                ("submissions:\n  max_per_tenant: 0\n", ":%d: submissions.max_per_tenant must be between 1" % line),
                ("submissions: [1]\n", "submissions"),
        ]:
            p = self.check_config(section)
            self.assertNotEqual(p.returncode, 0, section)
            self.assertIn(error, p.stderr, section)
        # without store_dir: the memory store, and nothing to check
        p = self.check_config("submissions:\n  ttl_s: 60\n  max_records: 10\n")
        self.assertEqual(p.returncode, 0, p.stderr)

    def test_directory_checked_at_start_and_by_n(self):
        bad = tempfile.mkdtemp(prefix="moat-e2e-store-bad-")  # root's, not the gateway user's
        os.chmod(bad, 0o755)
        try:
            section = "submissions:\n  store_dir: %s\n" % bad
            conf = os.path.join(self.stack.tmp, "check.conf")
            p = self.check_config(section)
            self.assertNotEqual(p.returncode, 0)
            self.assertIn("not by the gateway's user", p.stderr)
            os.chown(bad, MOAT.pw_uid, MOAT.pw_gid)
            os.chmod(bad, 0o770)
            p = self.check_config(section)
            self.assertNotEqual(p.returncode, 0)
            self.assertIn("group or others may write it", p.stderr)
            # a start refuses it too (after the drop, as the gateway's user), on a port of its own:
            # the running gateway's port would be refused first
            with open(conf) as f:
                text = f.read()
            with open(conf, "w") as f:
                f.write(text.replace("\n  port: %d\n" % self.stack.port, "\n  port: %d\n" % free_port(), 1))
            p = subprocess.run([GATEWAY, "-c", conf], capture_output=True, text=True, timeout=60)
            self.assertNotEqual(p.returncode, 0)
            self.assertIn("submissions: %s: group or others may write it" % bad, p.stderr)
            os.chmod(bad, 0o700)
            p = self.check_config(section)
            self.assertEqual(p.returncode, 0, p.stderr)
        finally:
            shutil.rmtree(bad, ignore_errors=True)


if __name__ == "__main__":
    unittest.main()
