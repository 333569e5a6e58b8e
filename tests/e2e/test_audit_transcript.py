"""moat-audit show --transcript (issue 11): a session's transcript replayed
from its audit packet.

A real trail (moat-audit init, the real moat-audit-writer over its wire,
with test_audit's helpers: its Writer, audit(), request() and AuditTest's
setUp/tearDown/start, borrowed rather than copied) holds the records of a
session whose result packet is the one FORMAT.md describes ("kind":
"session").  The replay prints one line per event with the data escaped;
--raw STREAM gives back each stream's bytes exactly (NUL bytes, invalid
UTF-8, terminal escapes); a request without a session packet, a tampered
packet and malformed transcripts are refused with one line.  Needs root
(the writer drops to moat-audit), like test_audit.
"""

import base64
import hashlib
import json
import os
import subprocess
import unittest

import test_audit
from test_audit import audit, request

B64 = lambda b: base64.b64encode(b).decode()

# Each stream in pieces, as a session sends them: a prompt without a newline,
# bytes a terminal would act on, NUL bytes, invalid UTF-8, a chunk split
# inside a UTF-8 character, and an empty write.
STDOUT = [b"name? ", b"hello, ada\n", b"\x00\x01\x02 nul and controls \x1b[2J\r\n", b"caf\xc3", b"\xa9 \xff\xfe bad utf-8\n"]
STDERR = [b"warn: \"quoted\" \\ back\tslash\n", b"\x80\x00"]
STDIN = [b"ada\n", b"", b"\x00\xff raw stdin \xe2\x80\xae rtl\n"]


def event(at, name, **fields):
    e = {"at_ms": at, "event": name}
    e.update(fields)
    return e


def data(at, stream, chunk):
    return event(at, "data", stream=stream, data_base64=B64(chunk))


def transcript():
    """A session's events in order: compile and run stages, output, stdin, a signal, stdin closed, the exits."""
    return [
        event(0, "stage", stage="compile"),
        event(40, "exit", stage="compile", status=None, clock=None, code=0, signal=None),
        event(41, "stage", stage="run"),
        data(52, "stdout", STDOUT[0]),
        data(503, "stdin", STDIN[0]),
        data(505, "stdout", STDOUT[1]),
        data(505, "stderr", STDERR[0]),
        data(506, "stdin", STDIN[1]),
        data(507, "stdout", STDOUT[2]),
        event(510, "signal", signal="SIGINT"),
        data(512, "stdin", STDIN[2]),
        data(520, "stdout", STDOUT[3]),
        data(521, "stdout", STDOUT[4]),
        data(530, "stderr", STDERR[1]),
        event(600, "stdin_close"),
        event(61000, "exit", stage="run", status="TO", clock="idle", code=None, signal="SIGKILL"),
    ]


def session_packet(rid, events):
    return json.dumps({
        "request_id": rid, "tenant": "acme", "kind": "session",
        "request": {"language": "python", "version": "3.11",
                    "files": [{"name": "main.py", "content_base64": B64(b"print(input('name? '))\n")}],
                    "stdin_base64": "", "args": [], "run_timeout_ms": -1, "compile_timeout_ms": 10000,
                    "run_memory_bytes": 1 << 28, "compile_memory_bytes": 1 << 28},
        "limits": {"wall_ms": 900000, "idle_ms": 60000, "cpu_ms": 30000, "stdin_bytes": 1 << 20, "output_bytes": 1 << 20},
        "transcript": events,
        "result": {"language": "python", "version": "3.11.2",
                   "run": {"stdout": b"".join(STDOUT).decode(errors="replace"), "stderr": "", "output": "", "code": None,
                           "signal": "SIGKILL", "status": "TO", "message": "idle", "cpu_time": 12, "wall_time": 61000,
                           "memory": 1 << 20}},
    }, separators=(",", ":")).encode()


class TranscriptTest(unittest.TestCase):
    setUp = test_audit.AuditTest.setUp
    tearDown = test_audit.AuditTest.tearDown
    start = test_audit.AuditTest.start

    def trail(self, sessions, others=()):
        """Writes each (request_id, packet) of sessions, and of others, as a request record and a result record with the packet."""
        w = self.start()
        c = w.clients[0]
        for rid, packet in list(sessions) + list(others):
            c.call(request(1, request_id=rid, endpoint="/api/v2/connect", method="GET"))
            self.assertNotEqual(c.call({"type": "result", "request_id": rid, "tenant": "acme"}, packet)[1], 0)
        rc, err = w.close()
        self.assertEqual(rc, 0, err)

    def show(self, rid, *extra, check=0):
        return audit("show", self.adir, rid, "--key", self.key, "--transcript", *extra, check=check)

    def test_replay_lines(self):
        self.trail([("s-1", session_packet("s-1", transcript()))])
        p = self.show("s-1")
        self.assertEqual(p.stderr, b"")
        want = [
            '+0 ms  stage  compile',
            '+40 ms  exit  compile code=0',
            '+41 ms  stage  run',
            '+52 ms  stdout  "name? "',
            '+503 ms  stdin  "ada\\n"',
            '+505 ms  stdout  "hello, ada\\n"',
            '+505 ms  stderr  "warn: \\"quoted\\" \\\\ back\\tslash\\n"',
            '+506 ms  stdin  ""',
            '+507 ms  stdout  "\\u0000\\u0001\\u0002 nul and controls \\u001b[2J\\r\\n"',
            '+510 ms  signal  SIGINT',
            '+512 ms  stdin  "\\u0000\\xff raw stdin \\u202e rtl\\n"',
            '+520 ms  stdout  "caf\\xc3"',
            '+521 ms  stdout  "\\xa9 \\xff\\xfe bad utf-8\\n"',
            '+530 ms  stderr  "\\x80\\u0000"',
            '+600 ms  stdin_close',
            '+61000 ms  exit  run status=TO clock=idle signal=SIGKILL',
        ]
        self.assertEqual(p.stdout.decode("ascii").splitlines(), want)
        # nothing a terminal acts on reaches it: printable ASCII and newlines only
        self.assertTrue(all(0x20 <= b < 0x7f or b == 0x0a for b in p.stdout), p.stdout)

    def test_raw_streams_byte_for_byte(self):
        self.trail([("s-1", session_packet("s-1", transcript()))])
        for stream, chunks in (("stdout", STDOUT), ("stderr", STDERR), ("stdin", STDIN)):
            with self.subTest(stream=stream):
                p = self.show("s-1", "--raw", stream)
                self.assertEqual(p.stdout, b"".join(chunks))
                self.assertEqual(p.stderr, b"")

    def test_large_binary_stream(self):
        """Every byte value, in many chunks, comes back exactly."""
        blob = bytes(range(256)) * 64 + os.urandom(8192)
        chunks = [blob[i:i + 1000] for i in range(0, len(blob), 1000)]
        events = [event(0, "stage", stage="run")] + [data(i, "stdout", c) for i, c in enumerate(chunks)]
        self.trail([("big", session_packet("big", events))])
        self.assertEqual(self.show("big", "--raw", "stdout").stdout, blob)
        self.assertEqual(self.show("big", "--raw", "stdin").stdout, b"")
        # shown: printable UTF-8 as it is, no control character (C0, DEL, C1) but the newlines between lines
        text = self.show("big").stdout.decode("utf-8")
        self.assertEqual(len(text.split("\n")), len(events) + 1)
        self.assertFalse([c for c in text if c != "\n" and (ord(c) < 0x20 or 0x7f <= ord(c) <= 0x9f)])

    def test_not_a_session(self):
        execute_packet = json.dumps({"request_id": "x-1", "tenant": "acme", "request": {"language": "python"},
                                     "result": {"run": {"stdout": "hi\n"}}}).encode()
        self.trail([], others=[("x-1", execute_packet), ("bin-1", b"\x00\xffnot json")])
        w = self.start()
        w.clients[0].call(request(9, request_id="nopacket"))
        self.assertEqual(w.close()[0], 0)
        for rid, why in (("x-1", "its packet is not a session's"), ("bin-1", "its packet is not a session's"),
                         ("nopacket", "it has no packet")):
            with self.subTest(rid=rid):
                for extra in ((), ("--raw", "stdout")):
                    p = self.show(rid, *extra, check=1)
                    self.assertEqual(p.stdout, b"")
                    err = p.stderr.decode()
                    self.assertEqual(len(err.strip().splitlines()), 1, err)
                    self.assertIn("request %s has no session packet (%s)" % (rid, why), err)
        p = self.show("no-such", check=1)
        self.assertIn(b"no verified record of request no-such", p.stderr)

    def test_malformed_transcripts_refused(self):
        ok = transcript()
        bad = {
            "unknown event": ok[:3] + [event(60, "resize", cols=80)],
            "going back": ok[:5] + [data(100, "stdout", b"late")],
            "unknown stream": ok[:3] + [data(60, "stdtty", b"x")],
            "extra field": ok[:3] + [dict(data(60, "stdout", b"x"), offset=3)],
            "missing field": ok[:3] + [event(60, "exit", stage="run", status=None, clock=None, code=0)],
            "bad base64": ok[:3] + [event(60, "data", stream="stdout", data_base64="a=b=")],
            "bad clock": ok[:3] + [event(60, "exit", stage="run", status="TO", clock="sundial", code=None, signal=None)],
            "code as text": ok[:3] + [event(60, "exit", stage="run", status=None, clock=None, code="0", signal=None)],
            "no at_ms": ok[:3] + [{"event": "stdin_close"}],
            "not an object": ok[:3] + [["stdin_close"]],
        }
        packets = [("bad-%d" % i, session_packet("bad-%d" % i, events)) for i, events in enumerate(bad.values())]
        self.trail(packets + [("no-transcript", session_packet("no-transcript", {"events": []}))])
        for (rid, _), what in zip(packets, bad):
            with self.subTest(what=what):
                for extra in ((), ("--raw", "stdout")):
                    p = self.show(rid, *extra, check=1)
                    self.assertEqual(p.stdout, b"", "nothing is printed unless the whole transcript decodes")
                    err = p.stderr.decode()
                    self.assertEqual(len(err.strip().splitlines()), 1, err)
                    self.assertIn("show: transcript[", err)
        p = self.show("no-transcript", check=1)
        self.assertIn(b"transcript is not an array", p.stderr)

    def test_tampered_packet(self):
        packet = session_packet("s-1", transcript())
        self.trail([("s-1", packet)])
        rec = [json.loads(l) for l in audit("export", self.adir, check=0).stdout.decode().splitlines()]
        at = [r["packet_at"] for r in rec if r.get("packet") == hashlib.sha256(packet).hexdigest()][0]
        name, off, _ = at.split(":")
        path = os.path.join(self.adir, name)
        subprocess.run(["chattr", "-a", path], capture_output=True)
        where = int(off) + packet.index(B64(STDOUT[1]).encode())  # one character of stdout's base64
        with open(path, "r+b") as f:
            f.seek(where)
            was = f.read(1)
            f.seek(where)
            f.write(b"B" if was == b"A" else b"A")
        for extra in ((), ("--raw", "stdout")):
            p = self.show("s-1", *extra, check=1)
            self.assertEqual(p.stdout, b"")
            self.assertIn(b"does not match the record's reference", p.stderr)
            self.assertEqual(len(p.stderr.strip().splitlines()), 1)

    def test_usage(self):
        for args, why in ((("--raw", "stdout"), b"--raw STREAM goes with --transcript"),
                          (("--transcript", "--raw", "stdtty"), b"--raw is stdin, stdout or stderr"),
                          (("--transcript", "--raw-packet"), b"exclude each other")):
            with self.subTest(args=args):
                p = audit("show", self.adir, "s-1", *args, check=2)
                self.assertIn(why, p.stderr)
        self.assertIn(b"--transcript", audit("--help", check=0).stdout)


if __name__ == "__main__":
    unittest.main()
