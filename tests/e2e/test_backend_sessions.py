"""Black-box tests of moat-backend's live sessions (issue 11; PROTOCOL.md "Sessions"): real boxes, the binary
protocol spoken directly over the backend's Unix socket (moat_harness has an independent encoder), as the
gateway speaks it.

Nothing here measures how long the backend takes: the one timing assertion (output arrives before the program
ends) is a lower bound set by the program's own sleep."""

import os
import socket
import time
import unittest

from moat_harness import (CLOCK_CPU, CLOCK_IDLE, CLOCK_WALL, MSG_EXEC_RESULT, MSG_SESSION_OUTPUT, SESSION_CHUNK,
                          SESSION_WINDOW, STAGE_COMPILE, STAGE_RUN, STATUS_EL, STATUS_OK, STATUS_OL, STATUS_RE, STATUS_SG,
                          STATUS_TO, STREAM_STDERR, STREAM_STDOUT, BackendSession, Stack, exec_request, frame, read_frame,
                          run_stage_of, session_box_pids, session_credit, session_signal, session_stdin,
                          session_stdin_close, tlv, vm_rss_kib, wait_until)

SIGINT, SIGTERM, SIGSTOP = 2, 15, 19

HELLO = "name = input('name? ')\nprint('hello, ' + name)\n"
# announces itself, then waits far longer than any test
SLEEPER = "import time\nprint('ready', flush=True)\ntime.sleep(600)\n"


def output_of(events, stream=STREAM_STDOUT):
    return b"".join(e["data"] for e in events if e["type"] == "output" and e["stream"] == stream)


def of_type(events, kind):
    return [e for e in events if e["type"] == kind]


class SessionTest(unittest.TestCase):
    """One backend (default --sessions 64), one session per test."""

    @classmethod
    def setUpClass(cls):
        cls.stack = Stack(audit=False)
        cls.stack.start_backend()

    @classmethod
    def tearDownClass(cls):
        cls.stack.stop()

    def backend_log(self):
        with open(os.path.join(self.stack.tmp, "backend.log"), errors="replace") as f:
            return f.read()

    def session(self, job_id=1, **kw):
        return BackendSession(self.stack.socket, job_id, **kw)

    def assert_well_ordered(self, events, stages=(STAGE_RUN,)):
        """READY, then per stage STAGE, OUTPUT..., EXIT; every frame with the session's job id; offsets never
        decrease."""
        self.assertEqual(events[0]["type"], "ready", events)
        shape = [e["type"] for e in events if e["type"] in ("stage", "exit")]
        self.assertEqual(shape, ["stage", "exit"] * len(stages), events)
        self.assertEqual([e["stage"] for e in of_type(events, "stage")], list(stages))
        self.assertEqual([e["stage"] for e in of_type(events, "exit")], list(stages))
        self.assertEqual({e["job"] for e in events}, {events[0]["job"]})
        offsets = [e["offset"] for e in events if "offset" in e]
        self.assertEqual(offsets, sorted(offsets), events)

    def assert_refused(self, events, code, text):
        errors = of_type(events, "error")
        self.assertEqual(len(errors), 1, events)
        self.assertEqual(errors[0]["code"], code, errors[0]["message"])
        self.assertIn(text, errors[0]["message"])
        self.assertEqual(events[-1]["type"], "error")  # the last frame: then the connection closed

    def last_exit(self, events):
        exits = of_type(events, "exit")
        self.assertTrue(exits, events)
        return exits[-1]

    # ---- the conversation -------------------------------------------------------------------

    def test_demo_conversation(self):
        with self.session(11) as s:
            s.open("python", HELLO)
            events = s.output_until(b"name? ")
            s.write(b"ada\n")  # mid-run: the program is waiting for it
            events += s.rest()
        self.assert_well_ordered(events)
        ready = events[0]
        self.assertEqual((ready["language"], ready["job"]), ("python", 11))
        self.assertEqual(output_of(events), b"name? hello, ada\n")
        end = self.last_exit(events)
        self.assertEqual((end["status"], end["code"], end["clock"]), (STATUS_OK, 0, None))
        # the stdin written went back to the gateway as credit
        self.assertEqual(sum(e["bytes"] for e in of_type(events, "credit")), 4)

    def test_ready_reports_the_limits_in_force(self):
        with self.session() as s:
            s.open("python", "print(1)", wall_ms=5000, idle_ms=7000, cpu_ms=2000, stdin_bytes=99, output_bytes=12345)
            ready = s.next()
            s.rest()
        self.assertEqual(ready["type"], "ready")
        self.assertEqual((ready["wall_ms"], ready["idle_ms"], ready["cpu_ms"], ready["stdin_bytes"],
                          ready["output_bytes"]), (5000, 7000, 2000, 99, 12345))
        # ceilings above the backend's defaults leave the defaults (idle 0: no ceiling, the default's 60 s)
        with self.session() as s:
            s.open("python", "print(1)", wall_ms=10 ** 9, idle_ms=0, cpu_ms=10 ** 9, stdin_bytes=10 ** 9,
                   output_bytes=10 ** 9)
            ready = s.next()
            s.rest()
        self.assertEqual((ready["wall_ms"], ready["idle_ms"], ready["cpu_ms"], ready["stdin_bytes"],
                          ready["output_bytes"]), (900000, 60000, 30000, 1 << 20, 1 << 20))

    def test_output_streamed_before_the_program_ends(self):
        code = "import time\nprint('first', flush=True)\ntime.sleep(1)\nprint('second')\n"
        with self.session() as s:
            s.open("python", code)
            events = s.rest()
        self.assert_well_ordered(events)
        outputs = [e for e in of_type(events, "output") if e["stream"] == STREAM_STDOUT]
        self.assertTrue(outputs[0]["data"].startswith(b"first"), outputs)
        # measured on the receiving side: the program's own sleep is the lower bound
        self.assertGreaterEqual(self.last_exit(events)["t"] - outputs[0]["t"], 0.9)
        self.assertEqual(output_of(events), b"first\nsecond\n")

    def test_initial_stdin_then_live_stdin_then_close(self):
        code = "import sys\ndata = sys.stdin.read()\nprint(len(data), repr(data[:3]), repr(data[-3:]))\n"
        with self.session() as s:
            s.open("python", code, stdin=b"abc")
            s.until(lambda e: e["type"] == "stage")
            s.write(b"x" * 200000 + b"xyz")  # more than a window: the client honours credit as it goes
            s.send(session_stdin_close(1))
            events = s.rest()
        self.assertEqual(output_of(events), b"200006 'abc' 'xyz'\n")
        self.assertEqual(self.last_exit(events)["status"], STATUS_OK)

    def test_stderr_is_its_own_stream(self):
        with self.session() as s:
            s.open("python", "import sys\nprint('out', flush=True)\nprint('err', file=sys.stderr, flush=True)\n")
            events = s.rest()
        self.assertEqual(output_of(events, STREAM_STDOUT), b"out\n")
        self.assertEqual(output_of(events, STREAM_STDERR), b"err\n")

    def test_dev_stdio_reopened_by_name(self):
        # /dev/stdin, /dev/stdout and /dev/stderr are the session's pipes, reopenable by the box's uid
        code = "echo out >/dev/stdout; echo err >/dev/stderr; read x </dev/stdin; echo \"got $x\" >/dev/stdout"
        with self.session() as s:
            s.open("bash", code)
            events = s.output_until(b"out\n")
            s.write(b"ada\n")
            events += s.rest()
        self.assertEqual(output_of(events, STREAM_STDOUT), b"out\ngot ada\n")
        self.assertEqual(output_of(events, STREAM_STDERR), b"err\n")
        end = self.last_exit(events)
        self.assertEqual((end["status"], end["code"]), (STATUS_OK, 0))

    # ---- compiled languages -------------------------------------------------------------------

    def test_compiled_language_runs_compile_then_run(self):
        code = ('#include <stdio.h>\nint main(void) {\n  char n[64];\n  printf("name? ");\n  fflush(stdout);\n'
                '  if (scanf("%63s", n) == 1)\n    printf("hello, %s\\n", n);\n  return 0;\n}\n')
        with self.session(21) as s:
            s.open("c", code)
            events = s.output_until(b"name? ")
            s.write(b"ada\n")
            events += s.rest()
        self.assert_well_ordered(events, stages=(STAGE_COMPILE, STAGE_RUN))
        compile_exit, run_exit = of_type(events, "exit")
        self.assertEqual((compile_exit["status"], compile_exit["code"]), (STATUS_OK, 0))
        self.assertEqual((run_exit["status"], run_exit["code"]), (STATUS_OK, 0))
        self.assertEqual(output_of(events), b"name? hello, ada\n")

    def test_failed_compile_has_no_run_stage(self):
        with self.session() as s:
            s.open("c", "int main(void) { return undeclared; }\n")
            events = s.rest()
        self.assert_well_ordered(events, stages=(STAGE_COMPILE,))
        self.assertEqual(self.last_exit(events)["status"], STATUS_RE)
        self.assertIn(b"undeclared", output_of(events, STREAM_STDERR))

    # ---- clocks -----------------------------------------------------------------------------

    def test_wall_clock(self):
        with self.session() as s:
            s.open("python", SLEEPER, wall_ms=1000)
            events = s.rest()
        self.assert_well_ordered(events)
        end = self.last_exit(events)
        self.assertEqual((end["status"], end["clock"], end["message"]), (STATUS_TO, CLOCK_WALL,
                                                                          "wall-time limit exceeded"))
        self.assertGreaterEqual(end["offset"], 1000)

    def test_run_timeout_lowers_the_wall_clock(self):
        with self.session() as s:
            s.open("python", SLEEPER, run_timeout=800)
            events = s.rest()
        self.assertEqual(events[0]["wall_ms"], 800)
        end = self.last_exit(events)
        self.assertEqual((end["status"], end["clock"]), (STATUS_TO, CLOCK_WALL))

    def test_run_timeout_above_the_wall_clock_is_refused(self):
        with self.session() as s:
            s.open("python", "print(1)", wall_ms=5000, run_timeout=5001)
            events = s.rest()
        self.assertEqual(events, of_type(events, "error"))
        self.assert_refused(events, 3, "run_timeout cannot exceed the session's wall limit of 5000 ms")

    def test_idle_clock(self):
        with self.session() as s:
            s.open("python", SLEEPER, idle_ms=1000)
            events = s.rest()
        end = self.last_exit(events)
        self.assertEqual((end["status"], end["clock"], end["message"]), (STATUS_TO, CLOCK_IDLE,
                                                                          "idle-time limit exceeded"))

    def test_stdin_received_is_not_idleness(self):
        # the program reads and says nothing: only the stdin arriving keeps it from being idle
        code = "import sys\nfor line in sys.stdin:\n    pass\n"
        with self.session() as s:
            s.open("python", code, idle_ms=3000)
            s.until(lambda e: e["type"] == "stage")
            start = time.monotonic()
            while time.monotonic() - start < 4.5:  # longer than the idle clock, in steps far shorter
                s.write(b"line\n")
                time.sleep(0.2)
            s.send(session_stdin_close(1))
            events = s.rest()
        end = self.last_exit(events)
        self.assertEqual((end["status"], end["code"]), (STATUS_OK, 0), end)

    def test_cpu_clock(self):
        with self.session() as s:
            s.open("python", "while True:\n    pass\n", cpu_ms=300)
            events = s.rest()
        end = self.last_exit(events)
        self.assertEqual((end["status"], end["clock"], end["message"]), (STATUS_TO, CLOCK_CPU,
                                                                          "cpu-time limit exceeded"))
        self.assertGreaterEqual(end["cpu_ms"], 300)

    # ---- the gateway going away ---------------------------------------------------------------

    def test_closing_the_connection_kills_the_box(self):
        s = self.session(4242)
        s.open("python", SLEEPER)
        s.output_until(b"ready\n")
        pids = session_box_pids(self.stack.tag)
        self.assertTrue(pids)  # init and the program
        s.close()
        wait_until(lambda: not (session_box_pids(self.stack.tag) & pids), "the session's box to be killed")
        wait_until(lambda: any(l.startswith("session 4242: python ") and l.endswith(": the gateway went away")
                               for l in (line.split(" moat-backend: ", 1)[-1] for line in self.backend_log().splitlines())),
                   "the backend's log line")
        # the backend goes on serving
        with self.session() as s2:
            s2.open("python", "print(42)")
            self.assertEqual(output_of(s2.rest()), b"42\n")

    # ---- signals ----------------------------------------------------------------------------

    def test_signal_reaches_the_program(self):
        # the handler writes with os.write: print() there could meet the main thread still inside its own
        # print (CPython runs handlers within a flush, holding the buffer: "reentrant call") on a slow machine
        code = ("import os, signal, sys, time\n"
                "def on_int(signum, frame):\n    os.write(1, b'caught %d\\n' % signum)\n    sys.exit(3)\n"
                "signal.signal(signal.SIGINT, on_int)\nprint('ready', flush=True)\ntime.sleep(600)\n")  # until the signal
        with self.session() as s:
            s.open("python", code)
            events = s.output_until(b"ready\n")
            s.send(session_signal(1, SIGINT))
            events += s.rest()
        # every event in the message: a failure here once showed only stdout, which did not tell why
        self.assertEqual(output_of(events), b"ready\ncaught 2\n",
                         [{k: v for k, v in e.items() if k != "t"} for e in events])
        end = self.last_exit(events)
        self.assertEqual((end["status"], end["code"]), (STATUS_RE, 3))

    def test_signal_before_the_run_stage_is_held_for_it(self):
        # sent while the compile stage runs: delivered as the run stage starts
        with self.session() as s:
            s.open("c", "#include <unistd.h>\nint main(void) { sleep(600); return 0; }\n")
            s.send(session_signal(1, SIGTERM))
            events = s.rest()
        self.assert_well_ordered(events, stages=(STAGE_COMPILE, STAGE_RUN))
        end = self.last_exit(events)
        self.assertEqual((end["status"], end["signal"]), (STATUS_SG, SIGTERM), end)

    def test_signal_reaches_the_programs_process_group(self):
        # bash waits for a child; SIGTERM reaches both (the group), so bash ends at once
        code = "sleep 600 &\necho ready\nwait\n"
        with self.session() as s:
            s.open("bash", code)
            events = s.output_until(b"ready\n")
            s.send(session_signal(1, SIGTERM))
            events += s.rest()
        end = self.last_exit(events)
        self.assertEqual((end["status"], end["signal"]), (STATUS_SG, SIGTERM), end)

    def test_disallowed_signal_is_a_bad_request(self):
        with self.session() as s:
            s.open("python", SLEEPER)
            events = s.output_until(b"ready\n")
            pids = session_box_pids(self.stack.tag)
            s.send(frame(8, 1, tlv(1, SIGSTOP.to_bytes(4, "big"))))
            events += s.rest()
        self.assert_refused(events, 1, "signal not allowed")
        self.assertEqual(of_type(events, "exit"), [])
        wait_until(lambda: not (session_box_pids(self.stack.tag) & pids), "the box to be killed")

    # ---- caps -------------------------------------------------------------------------------

    def test_output_cap_stdout(self):
        with self.session() as s:
            s.open("python", "print('x' * 5000)\n", output_bytes=1000)
            events = s.rest()
        self.assertEqual(output_of(events), b"x" * 1000)  # up to the cap, no further
        end = self.last_exit(events)
        self.assertEqual((end["status"], end["message"]), (STATUS_OL, "stdout length exceeded"))

    def test_output_cap_stderr(self):
        with self.session() as s:
            s.open("python", "import sys\nsys.stderr.write('e' * 5000)\n", output_bytes=1000)
            events = s.rest()
        self.assertEqual(output_of(events, STREAM_STDERR), b"e" * 1000)
        self.assertEqual(self.last_exit(events)["status"], STATUS_EL)

    def test_output_cap_is_over_the_whole_session(self):
        # ten writes of 300 bytes, each under the cap, together over it (the program's pause keeps them apart)
        code = "import time\nfor i in range(10):\n    print('x' * 299, flush=True)\n    time.sleep(0.05)\n"
        with self.session() as s:
            s.open("python", code, output_bytes=1000)
            events = s.rest()
        self.assertEqual(len(output_of(events)), 1000)
        self.assertEqual(self.last_exit(events)["status"], STATUS_OL)

    def test_stdin_cap(self):
        with self.session() as s:
            s.open("python", SLEEPER, stdin_bytes=10)
            events = s.output_until(b"ready\n")
            s.write(b"123456")
            s.write(b"789012")  # 12 in all
            events += s.rest()
        self.assert_refused(events, 3, "stdin exceeds the session's limit of 10 bytes")
        self.assertEqual(of_type(events, "exit"), [])

    def test_initial_stdin_over_the_cap_is_refused_at_open(self):
        with self.session() as s:
            s.open("python", "print(1)", stdin=b"x" * 11, stdin_bytes=10)
            events = s.rest()
        self.assertEqual(events, of_type(events, "error"))
        self.assert_refused(events, 3, "stdin exceeds the session's limit of 10 bytes")

    # ---- credit -----------------------------------------------------------------------------

    def test_a_reader_that_grants_no_credit_stalls_the_program(self):
        code = ("import sys\nchunk = b'y' * 65536\nprint('go', flush=True)\n"
                "while True:\n    sys.stdout.buffer.write(chunk)\n    sys.stdout.buffer.flush()\n")
        with self.session(credit=False) as s:
            s.open("python", code, idle_ms=1000)
            events = s.until(lambda e: e["type"] == "stage")
            rss_before = vm_rss_kib(self.stack.backend.pid)
            sent = lambda: sum(len(e["data"]) for e in of_type(events, "output"))  # noqa: E731 - both streams
            while sent() < SESSION_WINDOW:
                events += s.until(lambda e: e["type"] == "output")
            self.assertEqual(sent(), SESSION_WINDOW)  # exactly the window, not a byte more
            # nothing more comes while no credit is granted; the idle clock (1 s) does not fire either: the
            # program is blocked in write(), not idle
            s.sock.settimeout(3)
            with self.assertRaises(socket.timeout):
                s.next()
            s.sock.settimeout(60)
            self.assertTrue(session_box_pids(self.stack.tag))
            # the backend buffered nothing meanwhile (the program would have written gigabytes)
            self.assertLess(vm_rss_kib(self.stack.backend.pid) - rss_before, 16 * 1024)
            # credit lets exactly that much more through
            s.send(session_credit(1, SESSION_CHUNK))
            more = s.until(lambda e: e["type"] == "output")
            self.assertLessEqual(sum(len(e["data"]) for e in of_type(more, "output")), SESSION_CHUNK)
        wait_until(lambda: not session_box_pids(self.stack.tag), "the session's box to be killed")

    def test_stdin_beyond_the_window_is_a_bad_request(self):
        # the program reads no stdin: its pipe takes 64 KiB, the window 128 KiB, then the gateway must wait
        with self.session() as s:
            s.open("python", SLEEPER)
            events = s.output_until(b"ready\n")
            try:
                for _ in range(5):
                    s.send(session_stdin(1, b"z" * SESSION_CHUNK))
            except (BrokenPipeError, ConnectionResetError):
                pass  # the backend closed after its ERROR
            events += s.rest()
        self.assert_refused(events, 1, "SESSION_STDIN beyond the 131072-byte window")

    def test_credit_beyond_the_window_is_a_bad_request(self):
        with self.session() as s:
            s.open("python", SLEEPER)
            events = s.output_until(b"ready\n")  # credited back already: the window is whole
            s.send(session_credit(1, 1))
            events += s.rest()
        self.assert_refused(events, 1, "SESSION_CREDIT beyond the 131072-byte window")

    # ---- malformed sessions -----------------------------------------------------------------

    def test_frame_of_another_job_is_a_bad_request(self):
        with self.session(5) as s:
            s.open("python", SLEEPER)
            events = s.output_until(b"ready\n")
            s.send(session_stdin(6, b"x"))
            events += s.rest()
        self.assert_refused(events, 1, "session frame for an unknown job id")
        self.assertEqual(events[-1]["job"], 5)

    def test_frame_of_the_wrong_direction_is_a_bad_request(self):
        with self.session() as s:
            s.open("python", SLEEPER)
            events = s.output_until(b"ready\n")
            s.send(frame(MSG_SESSION_OUTPUT, 1, tlv(1, b"\x01") + tlv(2, bytes(8)) + tlv(3, b"x")))
            events += s.rest()
        self.assert_refused(events, 1, "unexpected message type 9 in a session")

    def test_stdin_after_close_is_a_bad_request(self):
        with self.session() as s:
            s.open("python", SLEEPER)
            events = s.output_until(b"ready\n")
            s.send(session_stdin_close(1))
            s.send(session_stdin(1, b"late"))
            events += s.rest()
        self.assert_refused(events, 1, "SESSION_STDIN after SESSION_STDIN_CLOSE")

    def test_open_refusals(self):
        cases = [
            (dict(omit=("idle_ms",)), 1, "malformed session open: session open needs wall, idle, cpu, stdin and "
                                         "output limits"),
            (dict(wall_ms=0), 1, "the session's wall and cpu limits must be positive"),
            (dict(language="cobol"), 2, "cobol-* runtime is unknown"),
        ]
        for kw, code, text in cases:
            with self.subTest(kw=kw), self.session() as s:
                language = kw.pop("language", "python")
                s.open(language, "print(1)", **kw)
                self.assert_refused(s.rest(), code, text)


class CapacityTest(unittest.TestCase):
    """Session slots of their own: --sessions 2 refuses a third at once, and batch slots stay free."""

    @classmethod
    def setUpClass(cls):
        cls.stack = Stack(audit=False, backend_args=["-j", "1", "--sessions", "2"])
        cls.stack.start_backend()

    @classmethod
    def tearDownClass(cls):
        cls.stack.stop()

    def sleeper_when_a_slot_is_free(self, job_id):
        """A SLEEPER session that has started, once a slot is free (a used one is free again once its box is
        discarded, off the session's path: until then a session may be refused as busy)."""
        def opened():
            s = BackendSession(self.stack.socket, job_id).open("python", SLEEPER)
            first = s.next()
            if first["type"] == "error":
                s.close()
                self.assertEqual(first["code"], 4, first)
                return None
            s.output_until(b"ready\n")
            return s

        return wait_until(opened, "a free session slot")

    def test_third_session_busy_and_batch_unaffected(self):
        first = self.sleeper_when_a_slot_is_free(1)
        second = self.sleeper_when_a_slot_is_free(2)
        try:
            with BackendSession(self.stack.socket, 3) as third:
                third.open("python", "print(1)")
                events = third.rest()
            self.assertEqual(len(events), 1, events)
            self.assertEqual((events[0]["type"], events[0]["code"], events[0]["job"]), ("error", 4, 3))
            self.assertIn("every session slot is taken", events[0]["message"])
            # the one batch slot still runs a batch job while both sessions hold theirs
            with socket.socket(socket.AF_UNIX) as s:
                s.settimeout(60)
                s.connect(self.stack.socket)
                s.sendall(exec_request(9, "python", "print(40 + 2)"))
                typ, job, payload = read_frame(s)
            self.assertEqual((typ, job), (MSG_EXEC_RESULT, 9))
            self.assertEqual(run_stage_of(payload), {"stdout": b"42\n", "status": 0})
        finally:
            first.close()
            second.close()

        # closing frees the slots: sessions open again
        def opens():
            with BackendSession(self.stack.socket, 4) as s:
                s.open("python", "print('again')")
                return output_of(s.rest()) == b"again\n"

        wait_until(opens, "a session slot to be free again")

    def test_many_sessions_one_after_another(self):
        # slots are reused: more sessions in a row than there are slots (a slot is free again once its box is
        # discarded, off the session's path: until then a session may be refused as busy, never otherwise)
        for i in range(6):
            def runs():
                with BackendSession(self.stack.socket, 100 + i) as s:
                    s.open("python", "print(%d)" % i)
                    events = s.rest()
                if events[-1]["type"] == "error":
                    self.assertEqual(events[-1]["code"], 4, events)
                    return False
                self.assertEqual(output_of(events), b"%d\n" % i)
                return True

            wait_until(runs, "session %d to run" % i)


class DisabledTest(unittest.TestCase):
    def test_sessions_0_refuses_every_session_as_busy(self):
        stack = Stack(audit=False, backend_args=["--sessions", "0"])
        try:
            stack.start_backend()
            with BackendSession(stack.socket, 7) as s:
                s.open("python", "print(1)")
                events = s.rest()
            self.assertEqual(len(events), 1)
            self.assertEqual((events[0]["code"], events[0]["message"]),
                             (4, "sessions are disabled on this backend (--sessions 0)"))
            # batch still runs
            with socket.socket(socket.AF_UNIX) as c:
                c.settimeout(60)
                c.connect(stack.socket)
                c.sendall(exec_request(8, "python", "print(7)"))
                typ, _, payload = read_frame(c)
            self.assertEqual((typ, run_stage_of(payload)["stdout"]), (MSG_EXEC_RESULT, b"7\n"))
        finally:
            stack.stop()


class WarmTest(unittest.TestCase):
    def test_sessions_warm_keeps_that_many_boxes_waiting(self):
        stack = Stack(audit=False, backend_args=["--sessions", "3", "--sessions-warm", "1"])
        try:
            stack.start_backend()
            # one session box waits (its init) before any session; the other two slots are cold
            wait_until(lambda: len(session_box_pids(stack.tag)) == 1, "one warm session box")
            for i in range(3):  # the warm one, then a cold one, then whichever is free
                with BackendSession(stack.socket, i + 1) as s:
                    s.open("python", "print(%d)" % i)
                    self.assertEqual(output_of(s.rest()), b"%d\n" % i)
            # used boxes are discarded, and one is made warm again
            wait_until(lambda: len(session_box_pids(stack.tag)) == 1, "one warm session box again")
        finally:
            stack.stop()


class StopTest(unittest.TestCase):
    def test_sigterm_ends_open_sessions(self):
        stack = Stack(audit=False)
        try:
            stack.start_backend()
            s = BackendSession(stack.socket, 1).open("python", SLEEPER)
            s.output_until(b"ready\n")
            pids = session_box_pids(stack.tag)
            stack.backend.terminate()
            self.assertEqual(stack.backend.wait(timeout=60), 0)  # well within the 30 s wait for batch jobs
            # the connection closed, with no SESSION_EXIT or ERROR: the gateway sees the backend gone
            self.assertEqual([e for e in s.rest() if e["type"] not in ("output", "credit")], [])
            self.assertFalse(session_box_pids(stack.tag) & pids)
        finally:
            stack.stop()


if __name__ == "__main__":
    unittest.main()
