"""Black-box tests of moat-backend's socket: peer credentials, strict frame
and message validation, the busy queue, and that many runs leave nothing
behind.  Speaks the wire format directly (moat_harness has an independent
encoder), as a compromised or buggy gateway would."""

import glob
import os
import socket
import struct
import threading
import unittest

from moat_harness import (LONG_WALL_MS, MSG_ERROR, MSG_EXEC_REQUEST, MSG_EXEC_RESULT, UID_BLOCK, Stack, error_of,
                          exec_request, frame, held_program, read_frame, release_all, run_stage_of, tlv, wait_held,
                          wait_until)


def connect(stack):
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(30)
    s.connect(stack.socket)
    return s


class BackendSocketTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        # socket group nogroup, so the unprivileged `nobody` can connect and be refused by SO_PEERCRED
        cls.stack = Stack(backend_args=["-g", "nogroup"])
        cls.stack.start_backend()

    @classmethod
    def tearDownClass(cls):
        cls.stack.stop()

    def assert_error_then_close(self, s, code, text):
        f = read_frame(s)
        self.assertIsNotNone(f)
        self.assertEqual(f[0], MSG_ERROR)
        got_code, message = error_of(f[2])
        self.assertEqual(got_code, code, message)
        self.assertIn(text, message)
        self.assertIsNone(read_frame(s))  # the backend closed the connection

    def test_round_trip(self):
        with connect(self.stack) as s:
            s.sendall(exec_request(7, "python", "print(40 + 2)"))
            t, job, payload = read_frame(s)
            self.assertEqual((t, job), (MSG_EXEC_RESULT, 7))
            self.assertEqual(run_stage_of(payload), {"stdout": b"42\n", "status": 0})
            # the connection carries the next request too
            s.sendall(exec_request(8, "bash", "echo again"))
            t, job, payload = read_frame(s)
            self.assertEqual((t, job, run_stage_of(payload)["stdout"]), (MSG_EXEC_RESULT, 8, b"again\n"))

    def test_bad_version_byte(self):
        with connect(self.stack) as s:
            s.sendall(frame(MSG_EXEC_REQUEST, 1, b"", version=9))
            self.assert_error_then_close(s, 1, "unsupported protocol version")

    def test_unknown_type_and_reserved_flags(self):
        with connect(self.stack) as s:
            s.sendall(frame(77, 1, b""))
            self.assert_error_then_close(s, 1, "unknown message type")
        with connect(self.stack) as s:
            s.sendall(frame(MSG_EXEC_REQUEST, 1, b"", flags=1))
            self.assert_error_then_close(s, 1, "reserved flags set")

    def test_oversized_frame_refused_before_reading_it(self):
        with connect(self.stack) as s:
            s.sendall(frame(MSG_EXEC_REQUEST, 1, b"", length=0xFFFFFFFF))
            self.assert_error_then_close(s, 1, "frame exceeds the size cap")

    def test_a_result_sent_to_the_backend_is_refused(self):
        with connect(self.stack) as s:
            s.sendall(frame(MSG_EXEC_RESULT, 1, b""))
            self.assert_error_then_close(s, 1, "unexpected message type")

    def test_malformed_payloads(self):
        cases = {
            "field length exceeds message": struct.pack(">HI", 1, 100) + b"py",
            "unknown field": tlv(99, b"x"),
            "unknown field in exec request": tlv(19, b"x"),  # 12 and 13 are the test cases', 14-17 the run rlimits and compiler options, 18 the isolation
            "duplicate field": tlv(1, b"python") + tlv(1, b"python") + tlv(2, b"*"),
            "NUL byte in string field": tlv(1, b"py\x00thon") + tlv(2, b"*"),
            "exec request needs at least one file": tlv(1, b"python") + tlv(2, b"*"),
            "integer field has the wrong width": tlv(1, b"python") + tlv(2, b"*") + tlv(6, b"\x01"),
            "truncated field header": tlv(1, b"python") + b"\x00\x02",
        }
        for why, payload in cases.items():
            with self.subTest(why=why), connect(self.stack) as s:
                s.sendall(frame(MSG_EXEC_REQUEST, 3, payload))
                self.assert_error_then_close(s, 1, why)

    def test_file_name_with_slash_refused(self):
        payload = tlv(1, b"python") + tlv(2, b"*") + tlv(3, tlv(1, b"../etc/x") + tlv(2, b"print(1)"))
        with connect(self.stack) as s:
            s.sendall(frame(MSG_EXEC_REQUEST, 4, payload))
            t, _, body = read_frame(s)
            self.assertEqual(t, MSG_ERROR)
            self.assertEqual(error_of(body), (1, "files[0].name must not have a '.' or '..' component (\"../etc/x\")"))

    def test_truncated_frame_is_dropped_without_harm(self):
        with connect(self.stack) as s:
            s.sendall(exec_request(5, "python", "print(1)")[:30])
            s.shutdown(socket.SHUT_WR)
            self.assertIsNone(read_frame(s))
        self.test_round_trip()  # still serving

    def test_peer_uid_not_allowed(self):
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # become `nobody` (in group nogroup: may connect, is not allowed)
            try:
                os.close(r)
                os.setgroups([])
                os.setgid(65534)
                os.setuid(65534)
                s = socket.socket(socket.AF_UNIX)
                s.settimeout(10)
                s.connect(self.stack.socket)
                f = read_frame(s)
                msg = error_of(f[2])[1] if f and f[0] == MSG_ERROR else "no error frame"
                os.write(w, msg.encode())
            except Exception as e:  # noqa: BLE001 - report anything to the parent
                os.write(w, ("exception: %r" % e).encode())
            os._exit(0)
        os.close(w)
        os.waitpid(pid, 0)
        with os.fdopen(r) as f:
            self.assertEqual(f.read(), "peer not allowed")


class BusyTest(unittest.TestCase):
    def test_busy_when_every_slot_and_queue_place_is_taken(self):
        stack = Stack(backend_args=["-j", "1", "-q", "0", "-o", "run_timeout=%d" % LONG_WALL_MS])
        try:
            stack.start_backend()
            results = {}

            def slow():
                with connect(stack) as s:
                    s.sendall(exec_request(1, "python", held_program(), run_timeout=LONG_WALL_MS))
                    results["slow"] = read_frame(s)

            t = threading.Thread(target=slow)
            t.start()
            try:
                wait_held(stack.tag)  # the one slot is taken
                with connect(stack) as s:
                    s.sendall(exec_request(2, "python", "print(1)"))
                    typ, _, body = read_frame(s)
            finally:
                release_all(stack.tag)
                t.join()
            self.assertEqual(typ, MSG_ERROR)
            code, message = error_of(body)
            self.assertEqual(code, 4)
            self.assertIn("busy", message)
            self.assertEqual(results["slow"][0], MSG_EXEC_RESULT)
        finally:
            stack.stop()


class NothingLeftBehindTest(unittest.TestCase):
    def test_200_runs_leave_no_process_mount_or_cgroup(self):
        stack = Stack(backend_args=["-j", "2"])
        try:
            stack.start_backend()
            with connect(stack) as s:
                for i in range(200):
                    # every run leaves a background process (asleep for longer than the test) and a file behind
                    s.sendall(exec_request(i, "python", "import os\nif os.fork() == 0:\n    import time; time.sleep(60)\n"
                                                        "open('/tmp/x', 'w').write('x')\nprint('ok')"))
                    typ, job, body = read_frame(s)
                    self.assertEqual((typ, job, run_stage_of(body)["stdout"]), (MSG_EXEC_RESULT, i, b"ok\n"))

            def boxes():
                groups = [d for d in glob.glob("/sys/fs/cgroup/*/**/%s/*" % stack.tag, recursive=True)
                          if os.path.isdir(d)]
                procs = set()
                for d in groups:
                    try:
                        with open(os.path.join(d, "cgroup.procs")) as f:
                            procs.update(f.read().split())
                    except OSError:  # removed meanwhile
                        pass
                return sorted({os.path.basename(d) for d in groups}), procs

            # the maintenance threads discard the last boxes and warm new ones
            wait_until(lambda: boxes()[0] == ["slot0", "slot1"] and len(boxes()[1]) == 2,
                       "only the two warm boxes left", detail=lambda: repr(boxes()))
            names, procs = boxes()
            # one warm box per slot, in each v1 controller, and nothing else
            self.assertEqual(names, ["slot0", "slot1"])
            self.assertEqual(len(procs), 2, procs)  # the two waiting inits, no program
            for pid in procs:
                with open("/proc/%s/status" % pid) as f:
                    uid_line = [l for l in f if l.startswith("Uid:")][0]
                self.assertEqual(uid_line.split()[1], "0")
            with open("/proc/self/mountinfo") as f:
                self.assertNotIn(stack.run_dir, f.read())
            # no program of this backend's boxes is left (boxes of other
            # backends on the machine, in other cgroups, are not ours)
            box_uids = []
            for p in glob.glob("/proc/[0-9]*"):
                try:
                    with open(p + "/status") as f:
                        uid = int([l for l in f if l.startswith("Uid:")][0].split()[1])
                    with open(p + "/cgroup") as f:
                        ours = stack.tag in f.read()
                except (OSError, IndexError):
                    continue
                if stack.uid_base <= uid < stack.uid_base + UID_BLOCK and ours:  # a box uid of this stack
                    box_uids.append(p)
            self.assertEqual(box_uids, [])
        finally:
            stack.stop()


if __name__ == "__main__":
    unittest.main()
