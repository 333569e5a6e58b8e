"""systemd's readiness protocol (sd_notify), spoken by the real binaries to
a datagram socket made here, as systemd would hand it over in NOTIFY_SOCKET
(backend/common/moat_notify.h; the units in gateway/systemd and
backend/systemd are Type=notify).

- moat-backend: READY=1 arrives, and at that moment its socket accepts
  (connected once, no retry); SIGTERM gives STOPPING=1 and exit 0.  An
  abstract address ("@name") works too.
- moat-gateway with the audit trail (supervisor, gateway, audit writer):
  READY=1 arrives, and at that moment /readyz answers 200 on the first try;
  SIGHUP to the main process (what `systemctl reload` sends) gives
  RELOADING=1 (with MONOTONIC_USEC) then READY=1; the audit writer did not
  inherit NOTIFY_SOCKET; SIGTERM gives STOPPING=1 and exit 0.  The socket
  file is root's, mode 0600: the gateway still reports after its drop to
  `moat` because it connected while root.
- A NOTIFY_SOCKET that cannot be used stops either program at once with
  one line, instead of leaving systemd waiting for a READY=1.
"""

import os
import signal
import socket
import subprocess
import tempfile
import time
import unittest

from moat_harness import BACKEND, DEADLINE_S, GATEWAY, LANGUAGES, Stack, descendants, expected_missing, expected_walls, uid_base


class NotifySocket:
    """A datagram socket bound where NOTIFY_SOCKET will point (a path, or an abstract name)."""

    def __init__(self, abstract=False):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        if abstract:
            name = "moat-notify-test-%d" % os.getpid()
            self.sock.bind("\0" + name)
            self.address = "@" + name
        else:
            self.dir = tempfile.mkdtemp(prefix="moat-notify-")
            self.address = os.path.join(self.dir, "notify")
            self.sock.bind(self.address)
            os.chmod(self.address, 0o600)

    def next_state(self, proc, what):
        """The next datagram, as {KEY: VALUE}; fails if proc exits first or after DEADLINE_S."""
        deadline = time.monotonic() + DEADLINE_S
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise AssertionError("exited (%s) while waiting for %s" % (proc.returncode, what))
            self.sock.settimeout(0.2)
            try:
                data = self.sock.recv(4096)
            except socket.timeout:
                continue
            return dict(line.split("=", 1) for line in data.decode().split("\n") if line)
        raise AssertionError("gave up after %g s waiting for %s" % (DEADLINE_S, what))

    def close(self):
        self.sock.close()
        if hasattr(self, "dir"):
            os.unlink(self.address)
            os.rmdir(self.dir)


def proc_list(pid, name):
    """/proc/<pid>/<name> (environ, cmdline) as a list of strings."""
    with open("/proc/%d/%s" % (pid, name), "rb") as f:
        return [e.decode(errors="replace") for e in f.read().split(b"\0") if e]


class BackendNotifyTest(unittest.TestCase):

    def start(self, notify_address):
        self.tag = "moat-n%d" % os.getpid()
        self.run_dir = "/run/" + self.tag
        self.socket = os.path.join(self.run_dir, "backend.sock")
        env = dict(os.environ, NOTIFY_SOCKET=notify_address)
        return subprocess.Popen([BACKEND, "-L", LANGUAGES, "-s", self.socket, "-r", self.run_dir, "-u", "moat", "-g", "moat",
                                 "-n", self.tag, "-j", "1", "--sessions", "1", "--uid-base", str(uid_base(self.tag))],
                                env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)

    def ready_then_stopping(self, abstract):
        ns = NotifySocket(abstract=abstract)
        p = self.start(ns.address)
        try:
            ready = ns.next_state(p, "READY=1")
            # STATUS= names the walls its boxes get (moat-backend(8): walls)
            self.assertEqual(ready.get("READY"), "1")
            self.assertRegex(ready.get("STATUS", ""), r"^walls namespaces\+seccomp(\+landlock)?$")
            with socket.socket(socket.AF_UNIX) as s:
                s.connect(self.socket)  # at once: READY=1 means the socket accepts
            p.send_signal(signal.SIGTERM)
            self.assertEqual(ns.next_state(p, "STOPPING=1"), {"STOPPING": "1"})
            self.assertEqual(p.wait(timeout=DEADLINE_S), 0)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
            p.stdout.close()
            ns.close()

    def test_ready_when_the_socket_accepts(self):
        self.ready_then_stopping(abstract=False)

    def test_abstract_address(self):
        self.ready_then_stopping(abstract=True)

    def test_unusable_socket_stops_the_start(self):
        for address, reason in (("/nonexistent/moat-notify", "connect: No such file or directory"),
                                ("relative/notify", "not a socket path or an abstract socket name")):
            p = self.start(address)
            out, _ = p.communicate(timeout=DEADLINE_S)
            self.assertEqual(p.returncode, 1, out)
            self.assertIn("NOTIFY_SOCKET=%s" % address, out.decode())
            self.assertIn(reason, out.decode())
            self.assertFalse(os.path.exists(self.socket), "the backend must stop before it listens")


class GatewayNotifyTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.stack = Stack()
        cls.stack.start_backend()

    @classmethod
    def tearDownClass(cls):
        cls.stack.stop()

    def start_gateway(self, notify_address):
        log = open(os.path.join(self.stack.tmp, "gateway.log"), "ab")
        env = dict(os.environ, NOTIFY_SOCKET=notify_address)
        p = subprocess.Popen([GATEWAY, "-c", self.stack.config], env=env, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        return p

    def test_ready_reloading_stopping(self):
        ns = NotifySocket()
        p = self.stack.gateway = self.start_gateway(ns.address)
        try:
            self.assertEqual(ns.next_state(p, "READY=1"), {"READY": "1"}, self.stack.log("gateway"))
            # at once, one try: READY=1 means the workers serve
            status, _, body = self.stack.request("GET", "/readyz", token=None, timeout=DEADLINE_S)
            self.assertEqual((status, body), (200, {"status": "ready", "backend": "ok", "audit": "ok",
                                                    "walls": expected_walls(), **expected_missing()}))

            writers = [c for c in descendants(p.pid) if "--clients" in proc_list(c, "cmdline")]
            self.assertTrue(writers, "the audit writer runs under the supervisor")
            for w in writers:
                self.assertFalse([e for e in proc_list(w, "environ") if e.startswith("NOTIFY_SOCKET=")],
                                 "the audit writer inherited NOTIFY_SOCKET")

            p.send_signal(signal.SIGHUP)  # the main process: the supervisor forwards it
            reloading = ns.next_state(p, "RELOADING=1")
            self.assertEqual(reloading.get("RELOADING"), "1", reloading)
            self.assertGreater(int(reloading["MONOTONIC_USEC"]), 0)
            self.assertEqual(ns.next_state(p, "READY=1 after the reload"), {"READY": "1"})
            self.assertEqual(self.stack.request("GET", "/readyz", token=None, timeout=DEADLINE_S)[0], 200)

            p.send_signal(signal.SIGTERM)
            self.assertEqual(ns.next_state(p, "STOPPING=1"), {"STOPPING": "1"})
            self.assertEqual(p.wait(timeout=DEADLINE_S), 0, self.stack.log("gateway"))
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
            ns.close()

    def test_unusable_socket_stops_the_start(self):
        p = self.start_gateway("relative/notify")
        self.assertEqual(p.wait(timeout=DEADLINE_S), 1)
        self.assertIn("NOTIFY_SOCKET=relative/notify: not a socket path or an abstract socket name", self.stack.log("gateway"))


if __name__ == "__main__":
    unittest.main()
