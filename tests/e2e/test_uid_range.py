"""Box uid ranges (S27): each moat-backend holds its own range of box uids
and gids (--uid-base N: slots use N..N+slots-1), exclusively.  A second
backend whose range overlaps a live one's, or a range an account or a running
process uses, is refused at start with one line that says why; backends with
disjoint ranges run side by side without sharing RLIMIT_NPROC.

Every backend here gets its range from moat_harness.uid_base(tag), so these
tests never meet a moat service on the host (default range 60000..)."""

import os
import pwd
import subprocess
import threading
import unittest

from moat_harness import (BACKEND, DEADLINE_S, LANGUAGES, LONG_WALL_MS, Stack, backend_run, held_program, release_all, uid_base,
                          wait_held, wait_until)

LONG_RUN = ("-o", "run_timeout=%d" % LONG_WALL_MS, "--run-timeout", str(LONG_WALL_MS))


def start_refused(args, tag):
    """Starts moat-backend with `args` (a server's, or "run" and a job's) under run tag `tag`
    where it must refuse to start; returns (exit status, its last stderr line)."""
    mode, args = (["run"], args[1:]) if args[:1] == ["run"] else ([], args)
    cmd = [BACKEND, *mode, "-L", LANGUAGES, "-r", "/run/" + tag, "-n", tag, *args]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=DEADLINE_S)
    lines = p.stderr.strip().splitlines()
    return p.returncode, lines[-1] if lines else ""


class OverlapTest(unittest.TestCase):
    """A live backend holds its range: a second one overlapping it stops at once."""

    @classmethod
    def setUpClass(cls):
        cls.stack = Stack()  # -j 4: uids base..base+3
        cls.stack.start_backend()
        cls.base = cls.stack.uid_base

    @classmethod
    def tearDownClass(cls):
        cls.stack.stop()

    def test_second_server_with_an_overlapping_range_refused(self):
        tag = "moat-t%d-overlap" % os.getpid()
        first = self.base + 2
        status, line = start_refused(["-s", "/run/%s/backend.sock" % tag, "-j", "4", "--uid-base", str(first)], tag)
        self.assertEqual(status, 1, line)
        self.assertIn("fatal: box uids %d..%d: uid %d is held by another moat-backend (pid %d, /run/moat-uids/%d.lock); "
                      "give each backend a disjoint --uid-base range" % (first, first + 3, first, self.stack.backend.pid,
                                                                         first), line)
        # it stopped before touching anything: the first backend still serves
        self.assertTrue(self.stack.backend_accepts())
        self.assertFalse(os.path.exists("/run/%s/backend.sock" % tag))

    def test_one_shot_run_with_an_overlapping_range_refused(self):
        tag = "moat-t%d-overlap-run" % os.getpid()
        first = self.base - 1  # base-1 .. base: overlaps at the first uid only
        status, line = start_refused(["run", "-j", "2", "--uid-base", str(first), "-l", "python", "-c", "print(1)"], tag)
        self.assertEqual(status, 1, line)
        self.assertIn("box uids %d..%d: uid %d is held by another moat-backend (pid %d"
                      % (first, first + 1, first + 1, self.stack.backend.pid), line)

    def test_adjacent_range_is_fine(self):
        tag = "moat-t%d-adjacent" % os.getpid()
        # the stack's backend holds -j 4 batch uids and then its 64 session slots' (--sessions' default)
        after = self.base + 4 + 64
        r = backend_run("import os; print(os.getuid())", extra=("-j", "1", "--uid-base", str(after)), tag=tag)
        self.assertEqual(r["run"]["stdout"], "%d\n" % after)


class ReleaseTest(unittest.TestCase):
    def test_stopped_backend_frees_its_range_and_removes_its_lock_files(self):
        stack = Stack()
        locks = ["/run/moat-uids/%d.lock" % (stack.uid_base + i) for i in range(4 + 64)]  # -j 4, --sessions 64
        try:
            stack.start_backend()
            self.assertTrue(all(os.path.exists(p) for p in locks))
            with open(locks[0]) as f:
                self.assertEqual(f.read(), "%d\n" % stack.backend.pid)
        finally:
            stack.stop()  # SIGTERM: a clean stop
        self.assertEqual([p for p in locks if os.path.exists(p)], [])
        # the range is free again, and a one-shot run leaves no lock file either
        tag = "moat-t%d-release" % os.getpid()
        r = backend_run("import os; print(os.getuid())", extra=("-j", "4", "--uid-base", str(stack.uid_base)), tag=tag)
        self.assertEqual(r["run"]["stdout"], "%d\n" % stack.uid_base)
        self.assertEqual([p for p in locks if os.path.exists(p)], [])


class DisjointTest(unittest.TestCase):
    def test_a_job_holding_processes_leaves_the_other_backends_budget_whole(self):
        # The case, made independent of load: A's job holds HOLD
        # processes (held in its box until the test releases it) while B's job
        # forks WANT children (each of A's and B's children sleeps far longer
        # than the test, holding its pid).  Both run under the default
        # run_processes (64, also their RLIMIT_NPROC).  With one uid for both,
        # B could fork only 64 - (HOLD + 1) - 1 = 12.
        hold, want = 50, 40
        a_code = ("import os, time\nprint(os.getuid())\nfor _ in range(%d):\n    if os.fork() == 0:\n"
                  "        time.sleep(3600)\n        os._exit(0)\n" % hold) + held_program(then="print('released')")
        b_code = ("import os, time\nprint(os.getuid())\nn = 0\nfor _ in range(%d):\n    try:\n        pid = os.fork()\n"
                  "    except OSError as e:\n        print('refused', e.errno)\n        break\n    if pid == 0:\n"
                  "        time.sleep(3600)\n        os._exit(0)\n    n += 1\nprint('forked', n)\n" % want)
        tags = {name: "moat-t%d-%s" % (os.getpid(), name) for name in ("a", "b")}
        results = {}

        def run(name, code):
            results[name] = backend_run(code, tag=tags[name], extra=("-j", "1", *LONG_RUN), timeout=4 * DEADLINE_S)["run"]

        ta = threading.Thread(target=run, args=("a", a_code))
        ta.start()
        try:
            wait_held(tags["a"])  # A's children are all forked by now
            run("b", b_code)
        finally:
            release_all(tags["a"])
            ta.join()
        a_lines, b_lines = results["a"]["stdout"].split(), results["b"]["stdout"].splitlines()
        self.assertEqual(b_lines[1:], ["forked %d" % want], results["b"])
        self.assertEqual(a_lines, [str(uid_base(tags["a"])), "released"], results["a"])
        self.assertEqual(b_lines[0], str(uid_base(tags["b"])), results["b"])


class ForeignUseTest(unittest.TestCase):
    """Anything on the host that already uses a uid or gid of the range makes start fail."""

    def refused_while(self, ids, code="import sys; print('ok', flush=True); sys.stdin.read()", args=()):
        """Starts a backend on a fresh range while a host process holds `ids(base)` (Popen's
        user/group arguments) and announces itself with a line; returns (base, that process's pid,
        its line, exit status, last stderr line).  Checks that the range starts once it is gone."""
        tag = "moat-t%d-foreign" % os.getpid()
        base = uid_base(tag)
        with subprocess.Popen(["/usr/bin/python3", "-c", code, str(base + 1), *args], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, **ids(base)) as holder:
            line_out = holder.stdout.readline().decode().strip()  # its ids are set
            try:
                status, line = start_refused(["run", "-j", "2", "--uid-base", str(base), "-l", "python", "-c",
                                              "print(1)"], tag)
            finally:
                holder.stdin.close()
                holder.wait(timeout=DEADLINE_S)
        # once the process is gone the same range starts
        r = backend_run("import os; print(os.getuid())", extra=("-j", "2"), tag=tag)
        self.assertEqual(r["run"]["stdout"], "%d\n" % base)
        return base, holder.pid, line_out, status, line

    def test_process_running_as_a_range_uid(self):
        base, pid, _, status, line = self.refused_while(lambda b: {"user": b + 1, "group": 0, "extra_groups": []})
        self.assertEqual(status, 1, line)
        self.assertIn("fatal: box uids %d..%d are in use: pid %d runs with uid %d; stop it or choose another --uid-base"
                      % (base, base + 1, pid, base + 1), line)

    def test_process_with_a_range_gid(self):
        base, pid, _, status, line = self.refused_while(lambda b: {"group": b, "extra_groups": []})
        self.assertEqual(status, 1, line)
        self.assertIn("pid %d runs with gid %d" % (pid, base), line)

    def test_one_thread_running_as_a_range_uid(self):
        # a thread can change its own uid alone (the raw system call): only
        # /proc/<pid>/task/<tid>/status shows it; the process itself stays root
        code = r"""
import ctypes, sys, threading
libc = ctypes.CDLL(None, use_errno=True)
uid = int(sys.argv[1])
def worker():
    if libc.syscall(117, uid, uid, uid) != 0:  # setresuid, this thread only
        print('setresuid failed', ctypes.get_errno(), flush=True)
    print(threading.get_native_id(), open('/proc/self/status').read().count('Uid:	0	0	0	0'), flush=True)
    sys.stdin.read()
t = threading.Thread(target=worker)
t.start()
t.join()
"""
        base, pid, out, status, line = self.refused_while(lambda b: {}, code=code)
        tid, leader_root = (int(x) for x in out.split())
        self.assertEqual(leader_root, 1, out)
        self.assertEqual(status, 1, line)
        self.assertIn("pid %d (thread %d) runs with uid %d" % (pid, tid, base + 1), line)

    def test_account_in_the_range(self):
        moat = pwd.getpwnam("moat")
        tag = "moat-t%d-account" % os.getpid()
        status, line = start_refused(["run", "-j", "1", "--uid-base", str(moat.pw_uid), "-l", "python", "-c", "print(1)"],
                                     tag)
        self.assertEqual(status, 1, line)
        self.assertIn("box uids %d..%d: uid %d is the account moat; choose another --uid-base"
                      % (moat.pw_uid, moat.pw_uid, moat.pw_uid), line)

    def test_bad_option_values(self):
        tag = "moat-t%d-badopt" % os.getpid()
        for value, text in (("0", "--uid-base: expected 1..2147483647, got \"0\""),
                            ("x", "--uid-base: expected 1..2147483647, got \"x\""),
                            ("2147483647", "box uids 2147483647..2147483648: must lie within 1..2147483647")):
            with self.subTest(value=value):
                status, line = start_refused(["run", "-j", "2", "--uid-base", value, "-l", "python", "-c", "print(1)"],
                                             tag)
                self.assertEqual(status, 1, line)
                self.assertIn(text, line)


if __name__ == "__main__":
    unittest.main()
