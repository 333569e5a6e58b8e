"""`moat-backend run` ended from outside never leaves its box running.

The one-shot CLI (moat-backend(8), SIGNALS) is a keeper process and a worker
(backend/main.c, "run: the keeper").  Each test starts a run whose program
waits forever in its box, waits until the box is seen running, ends the run
in one way and then asserts, once the run has exited, that nothing of the box
remains: no process in its cgroups, no process with one of its box uids, no
pid the box had, none of the instance's cgroup directories, and not its run
directory.

  - SIGTERM, SIGINT, SIGHUP to the run: it exits 128 + the signal's number
    with one line on stderr saying it was interrupted, and has removed
    everything before it exits.
  - SIGKILL of the worker (an OOM kill, say): the same, exit 137.
  - SIGKILL of the run itself (nothing can clean up in the killed process):
    the boxes die with it (PR_SET_PDEATHSIG in box_init.c; waited for, with
    the harness's generous deadline), and the next run with the same
    instance name removes the cgroups left behind.
  - gVisor (skipped without a working runsc): SIGTERM leaves no runsc,
    sentry or gofer behind.

And the server mode, with a live session's program running in its box:
SIGTERM ends the session and every box before the backend exits; SIGKILL
cannot clean up, but the boxes die with the backend (the same
PR_SET_PDEATHSIG) and its next start removes the cgroups.

Nothing here measures time: every wait is for a state, with DEADLINE_S.
"""

import glob
import os
import signal
import subprocess
import unittest

from moat_harness import (BACKEND, BUSY_MACHINE_WALL, DEADLINE_S, communicate_or_kill, LANGUAGES, LONG_WALL_MS, BackendSession, Stack, box_pids,
                          box_uid_pids, cgroup_count, held_program, uid_base, wait_held, wait_until)
from test_gvisor import GVISOR, require_runsc

LONG = ("-o", "run_timeout=%d" % LONG_WALL_MS, "--run-timeout", str(LONG_WALL_MS))


def tag_for(name):
    return "moat-rs%d-%s" % (os.getpid(), name)


def start_run(tag, code=None, extra=LONG):
    """A `moat-backend run` of a program that waits forever, in a process group of its own."""
    cmd = [BACKEND, "run", "-L", LANGUAGES, "-r", "/run/" + tag, "-n", tag, "--uid-base", str(uid_base(tag)), "-l", "python",
           "-c", code or held_program(), *extra]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)


def finish(p):
    """Waits for the run's exit (killing its group if it never comes); returns (status, stderr text)."""
    got = communicate_or_kill(p, DEADLINE_S)
    if got is None:
        raise AssertionError("moat-backend run did not exit in %g s" % DEADLINE_S)
    return p.returncode, got[1].decode(errors="replace")


def children(pid):
    try:
        with open("/proc/%d/task/%d/children" % (pid, pid)) as f:
            return [int(c) for c in f.read().split()]
    except OSError:
        return []


def alive(pid):
    """A process that exists and is not a zombie."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def cgroup_dirs(tag):
    return glob.glob("/sys/fs/cgroup/**/%s" % tag, recursive=True)


class RunSignals(unittest.TestCase):

    def box_running(self, tag):
        """Waits until the held program runs in the box; returns every pid the box has."""
        wait_held(tag)
        pids = box_pids(tag) | box_uid_pids(uid_base(tag))
        self.assertTrue(pids)
        return pids

    def run_ended_by(self, tag, end, code=None, extra=LONG, running=None):
        """Starts a run, waits until its box runs (running(tag), box_running by default), calls end(run)
        and waits for the run's exit.  Returns (exit status, stderr, the box's pids)."""
        p = start_run(tag, code, extra)
        try:
            pids = (running or self.box_running)(tag)
            end(p)
            status, err = finish(p)
        finally:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.communicate()
        return status, err, pids

    def assert_nothing_left(self, tag, pids):
        self.assertEqual(box_pids(tag), set(), "processes left in the box's cgroups")
        self.assertEqual(box_uid_pids(uid_base(tag)), set(), "processes left with the box's uids")
        self.assertEqual([p for p in pids if alive(p)], [], "box pids still running")
        self.assertEqual(cgroup_count(tag), 0)
        self.assertEqual(cgroup_dirs(tag), [], "cgroups of the instance left behind")
        self.assertFalse(os.path.exists("/run/" + tag), "its run directory left behind")

    def assert_interrupted(self, sig, to_group=False):
        tag = tag_for(signal.Signals(sig).name.lower() + ("-group" if to_group else ""))
        status, err, pids = self.run_ended_by(tag, lambda p: os.killpg(p.pid, sig) if to_group else p.send_signal(sig))
        self.assertEqual(status, 128 + sig, err)
        said = [line for line in err.splitlines() if "interrupted" in line]
        self.assertEqual(said, ["moat-backend: run: interrupted by %s: its box was killed" % signal.Signals(sig).name], err)
        self.assertEqual(err.splitlines()[-1], said[0])
        self.assert_nothing_left(tag, pids)

    def test_sigterm_ends_the_box(self):
        self.assert_interrupted(signal.SIGTERM)

    def test_sigint_ends_the_box(self):
        self.assert_interrupted(signal.SIGINT)

    def test_sighup_ends_the_box(self):
        self.assert_interrupted(signal.SIGHUP)

    def test_sigint_to_the_whole_group_as_ctrl_c(self):
        """A terminal's Ctrl-C signals every process of the foreground group, the worker too."""
        self.assert_interrupted(signal.SIGINT, to_group=True)

    def test_worker_killed(self):
        def kill_worker(p):
            workers = children(p.pid)
            self.assertEqual(len(workers), 1, "the keeper has one child, the worker")
            os.kill(workers[0], signal.SIGKILL)
        tag = tag_for("worker")
        status, err, pids = self.run_ended_by(tag, kill_worker)
        self.assertEqual(status, 137, err)
        self.assertEqual(err.splitlines()[-1], "moat-backend: run: worker killed by SIGKILL: its box was killed")
        self.assert_nothing_left(tag, pids)

    def test_run_sigkilled_boxes_die_and_next_start_cleans(self):
        tag = tag_for("kill")
        # the keeper only: the worker and the boxes must follow by themselves
        status, _, pids = self.run_ended_by(tag, lambda p: p.kill())
        self.assertEqual(status, -signal.SIGKILL)
        wait_until(lambda: not [q for q in pids if alive(q)] and not box_uid_pids(uid_base(tag)),
                   "the boxes of a SIGKILLed run to die")
        status, err = finish(start_run(tag, code="print('next')", extra=()))
        self.assertEqual(status, 0, err)
        self.assert_nothing_left(tag, pids)

    def test_gvisor_sigterm_leaves_no_runsc(self):
        require_runsc()

        def sandbox(tag):
            """The box's pids once they include runsc's sentry (runsc-sandbox boot) and gofer."""
            pids, cmds = box_pids(tag), []
            for q in pids:
                try:
                    with open("/proc/%d/cmdline" % q, "rb") as f:
                        cmds.append(f.read())
                except OSError:
                    pass
            return pids if any(b"boot" in c for c in cmds) and any(b"gofer" in c for c in cmds) else None

        tag = tag_for("gvisor")
        # the program sleeps until the signal to the backend ends it
        status, err, pids = self.run_ended_by(tag, lambda p: p.send_signal(signal.SIGTERM),
                                              code="import time\nwhile True:\n    time.sleep(1)\n",
                                              extra=(*GVISOR, *BUSY_MACHINE_WALL, *LONG),
                                              running=lambda t: wait_until(lambda: sandbox(t), "runsc's sentry and gofer in the box"))
        self.assertEqual(status, 143, err)
        self.assert_nothing_left(tag, pids)  # runsc, its sentry and gofer among them



class ServerSignals(unittest.TestCase):
    """A server-mode backend ended with a live session's program running in its box."""

    def setUp(self):
        self.stack = Stack(audit=False)
        self.stack.start_backend()
        self.addCleanup(self.stack.stop)

    def session_running(self):
        """Opens a session whose program runs until killed; returns it and the box's pids once it runs.  Not one
        that waits for input: the end of its stdin, when the backend dies, would end it by itself."""
        s = BackendSession(self.stack.socket, 7)
        self.addCleanup(s.sock.close)
        s.open("python", "import time\nprint('up', flush=True)\nwhile True:\n    time.sleep(1)\n")
        s.output_until(b"up")
        pids = box_pids(self.stack.tag) | box_uid_pids(self.stack.uid_base)
        self.assertTrue(pids)
        return s, pids

    def end_backend(self, sig):
        self.stack.backend.send_signal(sig)
        status = self.stack.backend.wait(timeout=DEADLINE_S)
        self.stack.stop_backend()  # it has exited: only its log is closed
        return status

    def assert_nothing_left(self, pids):
        tag = self.stack.tag
        self.assertEqual(box_pids(tag), set(), "processes left in the boxes' cgroups")
        self.assertEqual(box_uid_pids(self.stack.uid_base), set(), "processes left with the box uids")
        self.assertEqual([p for p in pids if alive(p)], [], "box pids still running")
        self.assertEqual(cgroup_dirs(tag), [], "cgroups of the instance left behind")

    def test_sigterm_ends_the_session_and_every_box(self):
        _, pids = self.session_running()
        self.assertEqual(self.end_backend(signal.SIGTERM), 0, self.stack.log("backend"))
        self.assert_nothing_left(pids)

    def test_sigkill_boxes_die_and_next_start_cleans(self):
        _, pids = self.session_running()
        self.assertEqual(self.end_backend(signal.SIGKILL), -signal.SIGKILL)
        wait_until(lambda: not [p for p in pids if alive(p)] and not box_uid_pids(self.stack.uid_base),
                   "the boxes of a SIGKILLed backend to die")
        self.stack.start_backend()
        self.assertEqual(self.end_backend(signal.SIGTERM), 0, self.stack.log("backend"))
        self.assert_nothing_left(pids)


if __name__ == "__main__":
    unittest.main()
