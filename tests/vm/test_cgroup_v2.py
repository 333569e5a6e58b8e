"""The backend's box tests on a real cgroup v2 kernel: run inside the VM that
tests/vm/cgroup-v2-vm boots (pure v2, Debian's 6.1 kernel, software
emulation), never on the v1 host.  tests/vm/cgroup-v2-tests runs them.

What is asserted, on v2 for real: limits enforced for memory, processes
and CPU; statuses, stdout, stderr and exit codes; no group left behind and
the parent group as it was found (subtree_control, processes); the backend
started from a group that holds other processes, as a systemd unit with
Delegate=yes that also runs a shell is (it must work), and from one whose
parent does not delegate a controller (it must refuse, saying what to do);
a killed backend's leaf adopted and cleaned by the next run; the server
mode, jobs through its socket.

Emulation is 10-50 times slower than the host, more on a busy machine: time
limits are raised, and no assertion depends on speed (a memory bomb may end
as ML or as TO; either way its memory stayed capped).

MOAT_VM_QUICK=1 runs the smaller set (ctest's vm_cgroup_v2); the rest is
marked full_only.
"""

import json
import os
import signal
import socket
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "e2e"))
from moat_harness import (BACKEND, LANGUAGES, MSG_EXEC_RESULT, STATUS_ML, STATUS_OK, STATUS_TO, exec_request,  # noqa: E402
                          read_frame, run_stage_of, uid_base, wait_until)

CG = "/sys/fs/cgroup"
QUICK = os.environ.get("MOAT_VM_QUICK") == "1"
full_only = unittest.skipIf(QUICK, "full set only (tests/vm/cgroup-v2-tests without --quick)")
MEMORY_LIMIT = 256 * 1024 * 1024  # the default run_memory
# memory.peak never passes memory.max; the slack only absorbs a charge the
# kernel forces past it (e.g. __GFP_NOFAIL), never a real overrun
MEMORY_SLACK = 1024 * 1024
WALL_MS = 60000  # run time limit under emulation: far above what any job here needs
RAISED = ("--limit", "run_timeout=%d" % WALL_MS, "--limit", "run_cpu_time=%d" % WALL_MS, "--run-timeout", str(WALL_MS))
BACKEND_TIMEOUT_S = 300  # one `moat-backend run` under emulation on a busy host, at most


def read(path):
    with open(path) as f:
        return f.read()


def write(path, text):
    with open(path, "w") as f:
        f.write(text)


def snapshot(group):
    """What the tests compare before and after: the group's child groups
    (recursively), its subtree_control and its processes."""
    children = []
    for root, dirs, _ in os.walk(group):
        children += [os.path.relpath(os.path.join(root, d), group) for d in dirs]
    return {"children": sorted(children), "subtree_control": read(os.path.join(group, "cgroup.subtree_control")).split(),
            "procs": sorted(read(os.path.join(group, "cgroup.procs")).split())}


def root_snapshot():
    """The root group holds the test's own processes, which come and go: compare its children and controllers."""
    s = snapshot(CG)
    del s["procs"]
    return s


def in_group(group):
    """A preexec_fn that puts the child in `group` before it execs."""
    def move():
        write(os.path.join(group, "cgroup.procs"), str(os.getpid()))
    return move


class Unit:
    """A group made as systemd makes a service's with Delegate=yes: memory,
    pids and cpu enabled in its parent, nothing in its own subtree_control,
    and a process already in it (the unit's shell; here a sleep)."""

    def __init__(self, name, parent=CG):
        self.path = os.path.join(parent, name)
        os.mkdir(self.path)
        self.shell = subprocess.Popen(["sleep", "infinity"], preexec_fn=in_group(self.path))

    def close(self):
        self.shell.kill()
        self.shell.wait()
        for root, dirs, _ in os.walk(self.path, topdown=False):
            for d in dirs:
                os.rmdir(os.path.join(root, d))
        os.rmdir(self.path)


def backend_cmd(tag, *args):
    return [BACKEND, *args, "-L", LANGUAGES, "-r", "/run/" + tag, "-n", tag, "--uid-base", str(uid_base(tag))]


def start_server(group, tag, *extra):
    """The backend's server mode started in `group`; returns it and its socket once the socket is there."""
    sock = "/run/%s.sock" % tag
    srv = subprocess.Popen(backend_cmd(tag, "-s", sock, "--sessions", "0", *extra), preexec_fn=in_group(group),
                           stderr=subprocess.PIPE, text=True)
    try:
        wait_until(lambda: os.path.exists(sock) or srv.poll() is not None, "the backend's socket",
                   timeout=BACKEND_TIMEOUT_S)
        if srv.poll() is not None:
            raise AssertionError("the backend exited (%d): %s" % (srv.returncode, srv.stderr.read()))
    except BaseException:
        srv.kill()
        srv.communicate()
        raise
    return srv, sock


def run_in(group, code, language="python", extra=(), tag="moat-vm"):
    """`moat-backend run` started in `group`; returns the run stage's result."""
    p = subprocess.run(backend_cmd(tag, "run") + ["-l", language, "-c", code, *RAISED, *extra],
                       preexec_fn=in_group(group), capture_output=True, timeout=BACKEND_TIMEOUT_S)
    if p.returncode != 0:
        raise AssertionError("moat-backend run failed (%d): %s" % (p.returncode, p.stderr.decode(errors="replace")))
    return json.loads(p.stdout)["run"]


MEMORY_BOMB = "a = bytearray(600 * 1024 * 1024)\nprint(len(a))"
# children close their output (so the run ends when the parent does) and hold their pids
FORK_BOMB = ("import os, time\nn = 0\n"
             "try:\n    while True:\n        if os.fork() == 0:\n            os.close(1); os.close(2); time.sleep(600); os._exit(0)\n"
             "        n += 1\nexcept OSError as e:\n    print(n, e.errno)\n")


class V2Test(unittest.TestCase):
    def setUp(self):
        self.assertTrue(os.path.exists(os.path.join(CG, "cgroup.controllers")), "not on cgroup v2")
        self.assertFalse(os.path.exists("/sys/fs/cgroup/memory"), "a v1 hierarchy is mounted")

    def assert_memory_capped(self, r):
        self.assertIn(r["status"], ("ML", "TO"), r)  # which one depends on the emulation's speed
        self.assertNotIn(str(600 * 1024 * 1024), r["stdout"])
        self.assertGreater(r["memory"], 100 * 1024 * 1024, r)  # it did try
        self.assertLessEqual(r["memory"], MEMORY_LIMIT + MEMORY_SLACK, r)

    # ---- alone in its group (the root group here) ----

    def test_hello_leaves_nothing_behind(self):
        before = root_snapshot()
        r = run_in(CG, 'print("hello")')
        self.assertEqual((r["stdout"], r["code"], r["status"]), ("hello\n", 0, None))
        self.assertEqual(root_snapshot(), before)

    @full_only
    def test_bash_stdin_stderr_exit_code(self):
        r = run_in(CG, 'read x; echo "got $x"; echo err >&2; exit 7', "bash", ("-i", "moat\n"))
        self.assertEqual((r["stdout"], r["stderr"], r["code"], r["status"]), ("got moat\n", "err\n", 7, "RE"))

    @full_only
    def test_signal_is_sg(self):
        r = run_in(CG, "import os, signal; os.kill(os.getpid(), signal.SIGKILL)")
        self.assertEqual((r["status"], r["signal"]), ("SG", "SIGKILL"))

    @full_only
    def test_memory_bomb_capped(self):
        self.assert_memory_capped(run_in(CG, MEMORY_BOMB))

    @full_only
    def test_fork_bomb_stops_at_pids_limit(self):
        before = root_snapshot()
        r = run_in(CG, FORK_BOMB)
        self.assertEqual(r["code"], 0, r)
        n, errno = r["stdout"].split()
        self.assertEqual(int(errno), 11)  # EAGAIN
        self.assertLess(int(n), 64)
        self.assertEqual(root_snapshot(), before)

    @full_only
    def test_bash_fork_bomb_stopped(self):
        # the script outlives the bomb for 3 s: its forks meet the pids limit; none outlives the run
        before = root_snapshot()
        r = run_in(CG, ":(){ :|:& };:; sleep 3", "bash", ("--limit", "run_timeout=20000", "--run-timeout", "20000"))
        self.assertIn("Resource temporarily unavailable", r["stderr"], r)
        self.assertEqual(root_snapshot(), before)

    @full_only
    def test_busy_loop_stopped(self):
        r = run_in(CG, "while True: pass", "python", ("--limit", "run_timeout=5000", "--run-timeout", "5000"))
        self.assertEqual(r["status"], "TO")
        self.assertIn(r["message"], ("wall-time limit exceeded", "cpu-time limit exceeded"))

    @full_only
    def test_cpu_clock_counts_every_process(self):
        # four busy processes under a 2 s CPU limit and a wall limit the CPU limit always reaches first
        code = "import os\nfor _ in range(3):\n    if os.fork() == 0: break\nwhile True: pass\n"
        r = run_in(CG, code, "python", ("--limit", "run_cpu_time=2000"))
        self.assertEqual((r["status"], r["message"]), ("TO", "cpu-time limit exceeded"))
        self.assertGreaterEqual(r["cpu_time"], 1900)

    # ---- started from a group that holds other processes ----

    def test_delegated_group_with_a_shell(self):
        unit = Unit("moat-vm-unit.service")
        try:
            before = snapshot(unit.path)
            self.assertEqual(before["procs"], [str(unit.shell.pid)])
            self.assert_memory_capped(run_in(unit.path, MEMORY_BOMB))
            self.assertEqual(snapshot(unit.path), before)  # no group, no controller, the shell back where it was
        finally:
            unit.close()

    def test_run_interrupted_leaves_the_group_as_it_was(self):
        """`moat-backend run` SIGTERMed with its program running: its keeper (backend/main.c) kills the worker
        that had moved the unit's processes into its leaf, and still leaves no group, no controller and the
        shell back where it was."""
        unit = Unit("moat-vm-term.service")
        tag = "moat-vm-t"
        instance = os.path.join(unit.path, tag)

        def program_runs():  # a box's group holds init and the program
            return any(len(read(os.path.join(root, "cgroup.procs")).split()) >= 2
                       for root, _, _ in os.walk(instance) if root != instance)
        try:
            before = snapshot(unit.path)
            p = subprocess.Popen(backend_cmd(tag, "run") + ["-l", "python", "-c", "import time\nwhile True: time.sleep(1)\n",
                                                            *RAISED],
                                 preexec_fn=in_group(unit.path), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            try:
                wait_until(lambda: p.poll() is not None or (os.path.isdir(instance) and program_runs()),
                           "the program in its box", timeout=BACKEND_TIMEOUT_S)
                p.send_signal(signal.SIGTERM)
                _, err = p.communicate(timeout=BACKEND_TIMEOUT_S)
            finally:
                if p.poll() is None:
                    p.kill()
                    p.communicate()
            self.assertEqual(p.returncode, 143, err)
            self.assertIn("interrupted by SIGTERM", err.splitlines()[-1])
            self.assertEqual(snapshot(unit.path), before)
        finally:
            unit.close()

    def test_refused_where_a_controller_is_not_delegated(self):
        parent = os.path.join(CG, "moat-vm-nocpu.slice")
        os.mkdir(parent)
        write(os.path.join(parent, "cgroup.subtree_control"), "+memory +pids")
        unit = Unit("moat-vm.service", parent)
        try:
            before = snapshot(unit.path)
            p = subprocess.run(backend_cmd("moat-vm", "run") + ["-l", "bash", "-c", "echo x"],
                               preexec_fn=in_group(unit.path), capture_output=True, text=True, timeout=BACKEND_TIMEOUT_S)
            self.assertNotEqual(p.returncode, 0)
            self.assertEqual(p.stdout, "")
            fatal = [line for line in p.stderr.split("\n") if "fatal" in line]  # after the start-up's info lines
            self.assertEqual(len(fatal), 1, p.stderr)
            self.assertIn("controller cpu not available", fatal[0])
            self.assertIn("Delegate=yes", fatal[0])
            self.assertEqual(snapshot(unit.path), before)
        finally:
            unit.close()
            os.rmdir(parent)

    @full_only
    def test_killed_backend_leaf_is_adopted(self):
        unit = Unit("moat-vm-killed.service")
        tag = "moat-vm-k"
        try:
            before = snapshot(unit.path)
            srv, _ = start_server(unit.path, tag, "-j", "1")
            srv.kill()
            srv.communicate()
            leaf = os.path.join(unit.path, tag + ".supervisor")
            self.assertEqual(read(os.path.join(leaf, "cgroup.procs")).split(), [str(unit.shell.pid)])
            # the unit's shell, now in the leaf, starts the backend again: it adopts the leaf
            r = run_in(leaf, "echo again", "bash", tag=tag)
            self.assertEqual(r["stdout"], "again\n")
            self.assertEqual(snapshot(unit.path), before)
        finally:
            unit.close()

    # ---- the server mode ----

    def test_server_in_delegated_group(self):
        unit = Unit("moat-vm-server.service")
        try:
            before = snapshot(unit.path)
            srv, sock = start_server(unit.path, "moat-vm-s", "-j", "2", "-o", "run_timeout=%d" % WALL_MS, "-o",
                                     "run_cpu_time=%d" % WALL_MS)
            try:
                with socket.socket(socket.AF_UNIX) as s:
                    s.settimeout(BACKEND_TIMEOUT_S)
                    s.connect(sock)
                    s.sendall(exec_request(1, "bash", "echo hello; exit 0", run_timeout=WALL_MS))
                    t, job, payload = read_frame(s)
                    self.assertEqual((t, job), (MSG_EXEC_RESULT, 1))
                    self.assertEqual(run_stage_of(payload), {"stdout": b"hello\n", "status": STATUS_OK})
                    s.sendall(exec_request(2, "python", MEMORY_BOMB, run_timeout=WALL_MS))
                    t, job, payload = read_frame(s)
                    self.assertEqual((t, job), (MSG_EXEC_RESULT, 2))
                    self.assertIn(run_stage_of(payload)["status"], (STATUS_ML, STATUS_TO))
                srv.send_signal(signal.SIGTERM)
                _, err = srv.communicate(timeout=BACKEND_TIMEOUT_S)
                self.assertEqual(srv.returncode, 0, err)
                self.assertNotIn("left behind", err)
            finally:
                if srv.poll() is None:
                    srv.kill()
                    srv.wait()
            self.assertEqual(snapshot(unit.path), before)
        finally:
            unit.close()


if __name__ == "__main__":
    started = time.monotonic()
    print("cgroup v2 tests on %s (%s set)" % (os.uname().release, "quick" if QUICK else "full"), flush=True)
    result = unittest.main(exit=False, verbosity=2).result
    print("took %.0f s" % (time.monotonic() - started))
    sys.exit(0 if result.wasSuccessful() else 1)
