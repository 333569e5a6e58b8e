"""Live sessions through the real gateway and real boxes: Piston's WebSocket
protocol at /api/v2/connect (spoken by python3-websockets, a real client),
watchers at /api/v2/watch, streamed execute (application/x-ndjson), the
three clocks, the caps, back-pressure and the audit transcript.

Nothing here waits for a fixed time: each check waits for the event it
needs (generous deadlines), and the one timing claim (output arrives
before the program ends) is measured against the program's own sleep."""

import asyncio
import base64
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import time
import unittest

import websockets

from moat_harness import (DEADLINE_S, MOAT_AUDIT, SilentBackend, Stack, box_pids, expected_walls, frame, man_example,
                          read_frame, wait_until)
from test_audit_gateway import writer_pid
from ws_client import connect, events_until_close, init_message, recv_event, run, stream_text, wait_for_event

LONG = "sessions: {wall_ms: 600000, idle_ms: 600000, cpu_ms: 600000}\n"
RATE = Stack.DEFAULT_TENANT_EXTRA + "endpoints: [execute, runtimes, connect, watch]\n"

DEMO = 'name = input("name? ")\nprint(f"hello, {name}")\n'


def rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


class SessionTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        tenants = [
            ("demo", RATE + LONG, ""),
            ("wall", RATE + "sessions: {wall_ms: 1500, idle_ms: 600000, cpu_ms: 600000}\n", ""),
            ("idle", RATE + "sessions: {wall_ms: 600000, idle_ms: 700, cpu_ms: 600000}\n", ""),
            ("cpu", RATE + "sessions: {wall_ms: 600000, idle_ms: 600000, cpu_ms: 500}\n", ""),
            ("caps", RATE + "sessions: {wall_ms: 600000, idle_ms: 600000, cpu_ms: 600000, stdin_bytes: 1000,"
                            " output_bytes: 1000}\n", ""),
            ("ten", RATE + LONG.replace("{", "{max_concurrent: 10, "), ""),
            ("nowatch", Stack.DEFAULT_TENANT_EXTRA + "endpoints: [execute, runtimes, connect]\n" + LONG, ""),
            ("noconnect", Stack.DEFAULT_TENANT_EXTRA + "endpoints: [execute, runtimes]\n", ""),
        ]
        cls.stack = Stack(tenants=tenants, extra_config="sessions: {init_timeout_ms: 800}\n").start()
        cls.tag = cls.stack.tag

    @classmethod
    def tearDownClass(cls):
        cls.stack.stop()

    def tok(self, tenant):
        return self.stack.tokens[tenant]

    # ---- the conversation -------------------------------------------------

    def test_demo_conversation(self):
        async def go():
            ws = await connect(self.stack)
            await ws.send(init_message("python", DEMO))
            runtime = await recv_event(ws)
            self.assertEqual(runtime["type"], "runtime")
            self.assertEqual(runtime["language"], "python")
            self.assertTrue(runtime["version"].startswith("3."))
            self.assertEqual(runtime["walls"], expected_walls())
            prompt, before = await wait_for_event(ws, lambda e: e["type"] == "data")
            self.assertEqual([e["type"] for e in before], ["stage"])
            self.assertEqual(before[0]["stage"], "run")
            self.assertEqual(prompt, dict(prompt, stream="stdout", data="name? "))
            await ws.send(json.dumps({"type": "data", "stream": "stdin", "data": "ada\n"}))
            events, code, reason = await events_until_close(ws)
            return events, code, reason

        events, code, reason = run(go())
        self.assertEqual(stream_text(events), "hello, ada\n")
        exits = [e for e in events if e["type"] == "exit"]
        self.assertEqual(len(exits), 1)
        self.assertEqual((exits[0]["stage"], exits[0]["code"], exits[0]["signal"], exits[0]["status"]), ("run", 0, None, None))
        self.assertIsNone(exits[0]["clock"])
        self.assertEqual((code, reason), (4999, "Job Completed"))

    def test_output_arrives_as_it_is_written(self):
        # one write per line (print() writes the text and its newline separately); the program's sleep
        # between them is what is measured
        code = "import sys, time\nsys.stdout.write('first\\n')\ntime.sleep(1)\nsys.stdout.write('second\\n')\n"

        async def go():
            ws = await connect(self.stack)
            await ws.send(init_message("python", code))
            first, _ = await wait_for_event(ws, lambda e: e["type"] == "data")
            exit_ev, rest = await wait_for_event(ws, lambda e: e["type"] == "exit")
            await events_until_close(ws)
            return first, exit_ev, rest

        first, exit_ev, rest = run(go())
        self.assertEqual(first["data"], "first\n")
        self.assertEqual(stream_text(rest), "second\n")
        # the program slept 1 s between its lines: the first came at least 900 ms before the end
        self.assertGreaterEqual(exit_ev["_at"] - first["_at"], 0.9)

    def test_compiled_language_has_both_stages(self):
        code = '#include <stdio.h>\nint main(void){char b[64]; if(fgets(b,64,stdin)) printf("got %s", b); return 3;}\n'

        async def go():
            ws = await connect(self.stack)
            await ws.send(init_message("c", code))
            await ws.send(json.dumps({"type": "data", "stream": "stdin", "data": "x\n"}))
            return await events_until_close(ws)

        events, code, _ = run(go())
        stages = [(e["type"], e.get("stage")) for e in events if e["type"] in ("stage", "exit")]
        self.assertEqual(stages, [("stage", "compile"), ("exit", "compile"), ("stage", "run"), ("exit", "run")])
        self.assertEqual(stream_text(events), "got x\n")
        self.assertEqual([e["code"] for e in events if e["type"] == "exit"], [0, 3])
        self.assertEqual(code, 4999)

    def test_signal_reaches_the_program(self):
        code = ("import signal, sys, time\n"
                "signal.signal(signal.SIGINT, lambda *a: (sys.stdout.write('caught\\n'), sys.exit(7)))\n"
                "sys.stdout.write('ready\\n')\nwhile True: time.sleep(0.05)\n")  # until signalled

        async def go():
            ws = await connect(self.stack, token=self.tok("demo"))
            await ws.send(init_message("python", code))
            await wait_for_event(ws, lambda e: e["type"] == "data")
            await ws.send(json.dumps({"type": "signal", "signal": "SIGINT"}))
            return await events_until_close(ws)

        events, code, _ = run(go())
        self.assertEqual(stream_text(events), "caught\n")
        self.assertEqual([e["code"] for e in events if e["type"] == "exit"], [7])
        self.assertEqual(code, 4999)

    def test_stdin_carries_nul_bytes(self):
        async def go():
            ws = await connect(self.stack)
            await ws.send(init_message("python", "import sys\nprint(list(sys.stdin.buffer.read()))\n"))
            await ws.send(json.dumps({"type": "data", "stream": "stdin", "data": "a\u0000b"}))
            await ws.send(json.dumps({"type": "stdin_close"}))
            return await events_until_close(ws)

        events, code, _ = run(go())
        self.assertEqual((stream_text(events), code), ("[97, 0, 98]\n", 4999))

    def test_stdin_close_ends_input(self):
        async def go():
            ws = await connect(self.stack)
            await ws.send(init_message("python", "import sys\nprint(len(sys.stdin.read()))\n"))
            await ws.send(json.dumps({"type": "data", "stream": "stdin", "data": "abc"}))
            await ws.send(json.dumps({"type": "stdin_close"}))
            return await events_until_close(ws)

        events, code, _ = run(go())
        self.assertEqual(stream_text(events), "3\n")
        self.assertEqual(code, 4999)

    # ---- the three clocks -------------------------------------------------

    def clocked(self, tenant, program):
        async def go():
            ws = await connect(self.stack, token=self.tok(tenant))
            await ws.send(init_message("python", program))
            return await events_until_close(ws)

        events, code, _ = run(go())
        exits = [e for e in events if e["type"] == "exit"]
        self.assertEqual(len(exits), 1, events)
        self.assertEqual(code, 4999)
        return exits[0]

    def test_wall_clock(self):
        # keeps printing, so the idle clock never fires; 1.5 s of wall clock
        x = self.clocked("wall", "import time\nwhile True:\n    print('.', flush=True)\n    time.sleep(0.1)\n")
        self.assertEqual((x["status"], x["clock"], x["signal"]), ("TO", "wall", "SIGKILL"))

    def test_idle_clock(self):
        x = self.clocked("idle", "input()\n")
        self.assertEqual((x["status"], x["clock"]), ("TO", "idle"))

    def test_cpu_clock(self):
        x = self.clocked("cpu", "while True: pass\n")
        self.assertEqual((x["status"], x["clock"]), ("TO", "cpu"))

    # ---- the client going away ----------------------------------------------

    def test_vanished_client_kills_its_box(self):
        code = "import time\nprint('up', flush=True)\ntime.sleep(600)\n"  # until its box is killed

        async def go():
            idle = box_pids(self.tag)  # the batch slots' warm boxes
            ws = await connect(self.stack)
            await ws.send(init_message("python", code))
            await wait_for_event(ws, lambda e: e["type"] == "data")
            mine = box_pids(self.tag) - idle
            ws.transport.abort()  # no close frame: the TCP connection just goes
            return mine

        mine = run(go())
        self.assertTrue(mine, "the session's box should be running")
        wait_until(lambda: not (box_pids(self.tag) & mine), "the vanished client's box to be killed")

    # ---- Piston's close codes -------------------------------------------------

    def close_code_of(self, *messages, token="default"):
        async def go():
            ws = await connect(self.stack, token=token)
            for m in messages:
                await ws.send(m if isinstance(m, str) else json.dumps(m))
            return await events_until_close(ws)

        return run(go())

    def test_close_4000_already_initialized(self):
        hold = init_message("python", "input()\n")
        events, code, reason = self.close_code_of(hold, hold)
        self.assertEqual((code, reason), (4000, "Already Initialized"))

    def test_close_4001_init_timeout(self):
        events, code, reason = self.close_code_of()
        self.assertEqual((code, reason), (4001, "Initialization Timeout"))

    def test_close_4002_error_notified(self):
        events, code, reason = self.close_code_of(init_message("no-such-language", "x"))
        self.assertEqual((code, reason), (4002, "Notified Error"))
        self.assertEqual(events[-1]["type"], "error")
        self.assertIn("message", events[-1])

    def test_close_4003_not_initialized(self):
        events, code, _ = self.close_code_of({"type": "data", "stream": "stdin", "data": "x"})
        self.assertEqual(code, 4003)
        events, code, _ = self.close_code_of({"type": "signal", "signal": "SIGINT"})
        self.assertEqual(code, 4003)

    def test_close_4004_stdin_only(self):
        events, code, reason = self.close_code_of(init_message("python", "input()\n"),
                                                  {"type": "data", "stream": "stdout", "data": "x"})
        self.assertEqual((code, reason), (4004, "Can only write to stdin"))

    def test_close_4005_invalid_signal(self):
        for sig in ("SIGSTOP", "SIGSEGV", "KILL", 9):
            events, code, reason = self.close_code_of(init_message("python", "input()\n"), {"type": "signal", "signal": sig})
            self.assertEqual((code, reason), (4005, "Invalid signal"), sig)

    def test_not_a_message_is_an_error(self):
        for bad in ("not json", "[1]", json.dumps({"type": 5}), json.dumps({"type": "bogus"})):
            events, code, _ = self.close_code_of(bad)
            self.assertEqual(code, 4002, bad)
            self.assertEqual(events[-1]["type"], "error")

    def test_policy_refusal_in_init(self):
        # "caps" allows 1000 bytes of stdin: an initial stdin of 2000 is refused before any box starts
        events, code, _ = self.close_code_of(init_message("python", "print(1)\n", stdin="x" * 2000), token=self.tok("caps"))
        self.assertEqual(code, 4002)
        self.assertEqual(events[-1]["type"], "error")

    # ---- caps ---------------------------------------------------------------

    def test_output_cap(self):
        async def go():
            ws = await connect(self.stack, token=self.tok("caps"))
            await ws.send(init_message("python", "print('y' * 5000)\n"))
            return await events_until_close(ws)

        events, code, _ = run(go())
        x = [e for e in events if e["type"] == "exit"][0]
        self.assertEqual(x["status"], "OL")
        self.assertLessEqual(len(stream_text(events)), 1000)

    def test_stdin_cap(self):
        async def go():
            ws = await connect(self.stack, token=self.tok("caps"))
            await ws.send(init_message("python", "import time\ntime.sleep(600)\n"))  # runs until refused
            await wait_for_event(ws, lambda e: e["type"] == "stage")
            await ws.send(json.dumps({"type": "data", "stream": "stdin", "data": "z" * 2000}))
            return await events_until_close(ws)

        events, code, _ = run(go())
        self.assertEqual(code, 4002)
        self.assertIn("stdin exceeds", events[-1]["message"])

    # ---- back-pressure --------------------------------------------------------

    def test_slow_reader_does_not_grow_memory(self):
        gw, be = self.stack.gateway.pid, self.stack.backend.pid
        code = "import sys\nchunk = 'x' * 65536 + '\\n'\nfor i in range(1000):\n    sys.stdout.write(chunk)\nsys.stdout.flush()\n"

        async def go():
            ws = await connect(self.stack, max_queue=1, read_limit=2 ** 16)
            await ws.send(init_message("python", code))
            await wait_for_event(ws, lambda e: e["type"] == "data")
            base = rss_kib(gw), rss_kib(be)
            # the client reads nothing for a while: 64 MB wait in the program's pipe, not in memory
            await asyncio.sleep(2)
            held = rss_kib(gw), rss_kib(be)
            pids = box_pids(self.tag)
            total = 0
            events, close, _ = await events_until_close(ws)
            total = len(stream_text(events))
            return base, held, pids, total, close, [e for e in events if e["type"] != "data"]

        base, held, pids, total, close, others = run(go())
        self.assertTrue(pids, "the program should still be running, blocked in write()")
        # a window (128 KiB) and a sink budget (256 KiB) per side, not 64 MB
        self.assertLess(held[0] - base[0], 8 * 1024, "gateway RSS grew by %d KiB" % (held[0] - base[0]))
        self.assertLess(held[1] - base[1], 8 * 1024, "backend RSS grew by %d KiB" % (held[1] - base[1]))
        self.assertEqual(close, 4999, others)
        self.assertGreater(total, 60000)

    def test_ping_flood_without_reading_is_cut(self):
        # every ping gets a pong queued for the client: one that pings and never
        # reads must not grow the gateway's memory without bound
        gw = self.stack.gateway.pid

        async def go():
            # a small receive buffer of our own (no autotuning): the kernel holds
            # little of what the gateway sends, whatever this host's tcp_rmem
            raw = socket.create_connection(("127.0.0.1", self.stack.port))
            raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16384)
            ws = await connect(self.stack, sock=raw, server_hostname="localhost")
            await ws.send(init_message("python", "input()\n"))
            await wait_for_event(ws, lambda e: e["type"] == "stage")
            base = rss_kib(gw)
            ws.transport.pause_reading()
            sent = 0
            try:
                for i in range(160000):  # 20 MB of pings, as much in pongs to queue
                    await ws.ping(i.to_bytes(4, "big") + b"p" * 121)
                    sent += 1
                    if i % 1000 == 0:
                        await asyncio.sleep(0)
            except websockets.ConnectionClosed:
                pass
            peak = rss_kib(gw)
            ws.transport.resume_reading()
            try:
                await asyncio.wait_for(ws.wait_closed(), DEADLINE_S)
            except asyncio.TimeoutError:
                pass
            return base, peak, sent, ws.closed

        base, peak, sent, closed = run(go())
        # the gateway cut it for its queue (its log says so), not for anything else
        self.assertIn("does not read: closing", self.stack.log("gateway"))
        self.assertTrue(closed, "the flooding client's connection should be closed")
        # 20 MB went in: the input buffer and at most 4 MiB of pongs, never all of it twice over
        self.assertLess(peak - base, 48 * 1024, "gateway RSS grew by %d KiB" % (peak - base))
        self.assertIsNone(self.stack.gateway.poll())

    # ---- capacity ---------------------------------------------------------------

    def test_max_concurrent_sessions(self):
        async def one():
            try:
                ws = await connect(self.stack, token=self.tok("ten"))
                return ws
            except websockets.InvalidStatusCode as e:
                return e.status_code

        async def started(ws):
            await ws.send(init_message("python", "input()\n"))
            return (await wait_for_event(ws, lambda e: e["type"] == "stage"))[0]

        async def go():
            idle = box_pids(self.tag)
            results = await asyncio.gather(*[one() for _ in range(50)])
            opened = [r for r in results if not isinstance(r, int)]
            refused = [r for r in results if isinstance(r, int)]
            await asyncio.gather(*[started(ws) for ws in opened])
            running = len({os.readlink("/proc/%d/ns/pid" % p) for p in box_pids(self.tag) - idle})
            for ws in opened:
                await ws.close()
            return len(opened), refused, running

        opened, refused, running = run(go())
        self.assertEqual(opened, 10)
        self.assertEqual(refused, [429] * 40)
        self.assertEqual(running, 10)  # ten boxes (pid namespaces), one per session

    def test_refusal_before_upgrade_says_why(self):
        st, h, body = self.stack.request("GET", "/api/v2/connect")
        self.assertEqual(st, 400)
        self.assertIn("WebSocket handshake", body["message"])
        self.assertEqual(len(body["request_id"]), 16)
        p = self.stack.curl("--http2", "-H", "Authorization: Bearer " + self.stack.token,
                            "https://localhost:%d/api/v2/connect" % self.stack.port)
        self.assertIn("HTTP/1.1", p.stdout)
        st, h, body = self.stack.request("GET", "/api/v2/connect", token=None)
        self.assertEqual(st, 401)

    def test_endpoint_allow_list(self):
        # a tenant without "connect" in its endpoints: 403 before any upgrade
        with self.assertRaises(websockets.InvalidStatusCode) as cm:
            run(connect(self.stack, token=self.tok("noconnect")))
        self.assertEqual(cm.exception.status_code, 403)

        # a tenant without "watch": its watch tokens are refused at the watcher's door
        async def go():
            ws = await connect(self.stack, token=self.tok("nowatch"))
            await ws.send(init_message("python", "input()\n"))
            await wait_for_event(ws, lambda e: e["type"] == "stage")
            await ws.send(json.dumps({"type": "watch"}))
            grant, _ = await wait_for_event(ws, lambda e: e["type"] == "watch")
            try:
                await connect(self.stack, token=grant["token"], path="/api/v2/watch")
                status = 101
            except websockets.InvalidStatusCode as e:
                status = e.status_code
            await ws.close()
            return status

        self.assertEqual(run(go()), 403)

    # ---- watchers -----------------------------------------------------------------

    def test_watcher_sees_output_and_cannot_write(self):
        program = ('import sys\nsys.stdout.write("prompt\\n")\nline = sys.stdin.readline()\n'
                   'sys.stdout.write("echo " + line.strip() + "\\n")\n')

        async def go():
            ws = await connect(self.stack)
            await ws.send(init_message("python", program))
            await wait_for_event(ws, lambda e: e["type"] == "data")
            await ws.send(json.dumps({"type": "watch"}))
            grant, _ = await wait_for_event(ws, lambda e: e["type"] == "watch")
            watcher = await connect(self.stack, token=grant["token"], path=grant["path"])
            # the watcher sees what was written before it came
            seen, _ = await wait_for_event(watcher, lambda e: e["type"] == "data")
            self.assertEqual(seen["data"], "prompt\n")
            # a second watcher tries to write: closed, and nothing reaches the program
            w2 = await connect(self.stack, token=grant["token"], path=grant["path"])
            await w2.send(json.dumps({"type": "data", "stream": "stdin", "data": "evil\n"}))
            _, w2code, _ = await events_until_close(w2)
            await ws.send(json.dumps({"type": "data", "stream": "stdin", "data": "ada\n"}))
            events, code, _ = await events_until_close(ws)
            wevents, wcode, _ = await events_until_close(watcher)
            return grant, w2code, events, code, wevents, wcode

        grant, w2code, events, code, wevents, wcode = run(go())
        self.assertTrue(grant["token"].startswith("mwt_"))
        self.assertEqual(w2code, 4006)
        self.assertEqual(stream_text(events), "echo ada\n")
        self.assertEqual(stream_text(wevents), "echo ada\n")
        self.assertEqual([e["type"] for e in wevents][-1], "exit")
        self.assertNotIn("stdin", json.dumps(wevents))
        self.assertEqual((code, wcode), (4999, 4999))

    def test_watch_token_is_checked(self):
        for token in ("mwt_" + "0" * 64, "mwt_short", self.stack.token):
            with self.assertRaises(websockets.InvalidStatusCode) as cm:
                run(connect(self.stack, token=token, path="/api/v2/watch"))
            self.assertEqual(cm.exception.status_code, 401)

    # ---- streamed execute ------------------------------------------------------

    def ndjson(self, body):
        import http.client
        conn = http.client.HTTPSConnection("127.0.0.1", self.stack.port, context=self.stack.ssl_context(alpn=("http/1.1",)),
                                           timeout=120)
        conn.request("POST", "/api/v2/execute", body=json.dumps(body),
                     headers={"Authorization": "Bearer " + self.stack.token, "Content-Type": "application/json",
                              "Accept": "application/x-ndjson"})
        resp = conn.getresponse()
        self.ndjson_request_id = resp.getheader("x-request-id")
        lines = []
        while True:
            line = resp.readline()
            if not line:
                break
            lines.append((time.monotonic(), json.loads(line)))
        conn.close()
        return resp.status, resp.getheader("content-type"), lines

    def test_streamed_execute(self):
        # the program's sleep is what is measured: the first line arrives a second before the result
        code = "import sys, time\nsys.stdout.write('first\\n')\ntime.sleep(1)\nprint(input())\n"
        st, ctype, lines = self.ndjson({"language": "python", "version": "*", "files": [{"content": code}], "stdin": "in\n"})
        self.assertEqual(st, 200)
        self.assertEqual(ctype, "application/x-ndjson")
        kinds = [l["type"] for _, l in lines]
        self.assertEqual(kinds[0], "runtime")
        self.assertEqual(kinds[-1], "result", lines[-1])
        first = next(t for t, l in lines if l["type"] == "data")
        end = next(t for t, l in lines if l["type"] == "exit")
        self.assertGreaterEqual(end - first, 0.9)
        result = lines[-1][1]
        self.assertEqual(result["run"]["stdout"], "first\nin\n")
        self.assertEqual(result["run"]["code"], 0)
        # without the Accept header, execute is unchanged
        st, h, body = self.stack.execute("python", "print(2)")
        self.assertEqual((st, body["run"]["stdout"]), (200, "2\n"))
        self.assertTrue(h["content-type"].startswith("application/json"))

    def test_streamed_execute_refusal_is_an_http_error(self):
        st, ctype, lines = self.ndjson({"language": "no-such", "version": "*", "files": [{"content": "x"}]})
        self.assertIn(st, (400, 403))

    # ---- the audit transcript ------------------------------------------------------

    def test_transcript_round_trips(self):
        # bytes that are not text, and a character split between two writes (0.2 s apart: two reads)
        code = ("import sys, time\nout = sys.stdout.buffer\nout.write(b'\\x00\\xff\\xe2\\x82'); out.flush()\n"
                "time.sleep(0.2)\nout.write(b'\\xac end\\n'); out.flush()\nline = sys.stdin.buffer.readline()\n"
                "sys.stderr.write('err:' + line.decode())\n")
        stdin = "caf\u00e9 \u2603\n"

        async def go():
            ws = await connect(self.stack)
            await ws.send(init_message("python", code))
            await wait_for_event(ws, lambda e: e["type"] == "data")
            await ws.send(json.dumps({"type": "data", "stream": "stdin", "data": stdin}))
            events, code_, _ = await events_until_close(ws)
            return ws.response_headers["x-request-id"], events, code_

        rid, events, code = run(go())
        self.assertEqual(code, 4999)
        # the euro sign split across two writes arrives whole
        self.assertIn("\u20ac end", stream_text(events))

        def raw(stream):
            p = subprocess.run([MOAT_AUDIT, "show", self.stack.audit_dir, rid, "--transcript", "--raw", stream],
                               capture_output=True)
            self.assertEqual(p.returncode, 0, p.stderr)
            return p.stdout

        wait_until(lambda: subprocess.run([MOAT_AUDIT, "show", self.stack.audit_dir, rid, "--transcript"],
                                          capture_output=True).returncode == 0, "the session's result record")
        self.assertEqual(raw("stdout"), b"\x00\xff\xe2\x82\xac end\n")
        self.assertEqual(raw("stdin"), stdin.encode())
        self.assertEqual(raw("stderr"), ("err:" + stdin).encode())
        recs = [r for r in self.stack.audit_records() if r.get("request_id") == rid]
        kinds = [(r["type"], r.get("decision")) for r in recs]
        # the upgrade, the init's decision (before the box), the result with the transcript
        self.assertEqual(kinds, [("request", "allowed"), ("request", "allowed"), ("result", "allowed")])
        self.assertIn("packet", recs[-1])
        self.assertEqual(recs[-1]["walls"], expected_walls())  # SESSION_READY's, kept for the result

    def session_result(self, rid):
        """The session's result record and its packet, once durable."""
        wait_until(lambda: any(r.get("request_id") == rid and r["type"] == "result" for r in self.stack.audit_records()),
                   "the session's result record")
        rec = next(r for r in self.stack.audit_records() if r.get("request_id") == rid and r["type"] == "result")
        p = subprocess.run([MOAT_AUDIT, "show", self.stack.audit_dir, rid, "--raw-packet"], capture_output=True)
        self.assertEqual(p.returncode, 0, p.stderr)
        return rec, json.loads(p.stdout)

    def run_session(self, language, code):
        """A session of code that reads nothing, to its end; its result record and packet."""
        async def go():
            ws = await connect(self.stack)
            await ws.send(init_message(language, code))
            _, close, _ = await events_until_close(ws)
            return ws.response_headers["x-request-id"], close

        rid, close = run(go())
        self.assertEqual(close, 4999)
        return self.session_result(rid)

    def assert_output(self, stage, out, err):
        """A result record's stage states the bytes the program wrote."""
        self.assertEqual((stage["stdout_bytes"], stage["stdout_sha256"]), (len(out), hashlib.sha256(out).hexdigest()))
        self.assertEqual((stage["stderr_bytes"], stage["stderr_sha256"]), (len(err), hashlib.sha256(err).hexdigest()))

    def test_result_record_states_the_output(self):
        # the record says what the program printed, not the empty output the
        # packet's result carries (the transcript holds the bytes): many
        # chunks on each stream, not text, interleaved
        out = b"".join(b"%05d \xff\x00 out line\n" % i for i in range(4000))
        err = b"".join(b"%05d err\n" % i for i in range(3000))
        code = ("import sys\no, e = sys.stdout.buffer, sys.stderr.buffer\n"
                "for i in range(4000):\n    o.write(b'%05d \\xff\\x00 out line\\n' % i)\n"
                "    if i < 3000: e.write(b'%05d err\\n' % i)\n    if i % 500 == 0: o.flush(); e.flush()\n")

        rec, packet = self.run_session("python", code)
        self.assertNotIn("compile", rec)
        self.assertEqual((rec["run"]["status"], rec["run"]["code"]), ("OK", 0))
        self.assert_output(rec["run"], out, err)
        chunks = [e for e in packet["transcript"] if e["event"] == "data" and e["stream"] == "stdout"]
        self.assertGreater(len(chunks), 1)  # hashed over several chunks
        self.assertEqual(packet["result"]["run"]["stdout"], "")  # audit/FORMAT.md: the transcript holds it
        # a streamed execute's record too
        st, _, lines = self.ndjson({"language": "python", "version": "*", "files": [{"content": code}]})
        self.assertEqual((st, lines[-1][1]["type"]), (200, "result"))
        self.assert_output(self.session_result(self.ndjson_request_id)[0]["run"], out, err)

    def test_result_record_states_each_stage(self):
        # a compiler warning is the compile stage's stderr, the program's output the run's
        code = '#include <stdio.h>\n#warning moat-compile-warning\nint main(void){fputs("to err\\n", stderr); puts("to out"); return 0;}\n'

        rec, packet = self.run_session("c", code)
        streams = {"compile": {"stdout": b"", "stderr": b""}, "run": {"stdout": b"", "stderr": b""}}
        at = None
        for e in packet["transcript"]:
            if e["event"] == "stage":
                at = e["stage"]
            elif e["event"] == "data" and e["stream"] != "stdin":
                streams[at][e["stream"]] += base64.b64decode(e["data_base64"])
        self.assertIn(b"moat-compile-warning", streams["compile"]["stderr"])
        self.assertEqual(streams["run"], {"stdout": b"to out\n", "stderr": b"to err\n"})
        self.assert_output(rec["compile"], streams["compile"]["stdout"], streams["compile"]["stderr"])
        self.assert_output(rec["run"], b"to out\n", b"to err\n")


    # ---- fail closed ----------------------------------------------------------------

    def with_writer_stopped(self, before_stop, after_stop):
        """Runs a session: before_stop(ws) with the audit writer working, then
        the writer frozen (SIGSTOP: nothing it is sent becomes durable) and
        after_stop(ws); returns every event and the close code."""
        writer = writer_pid(self.stack)
        self.assertIsNotNone(writer)

        async def go():
            ws = await connect(self.stack)
            await before_stop(ws)
            os.kill(writer, signal.SIGSTOP)
            try:
                await after_stop(ws)
                return await events_until_close(ws)
            finally:
                os.kill(writer, signal.SIGCONT)

        return run(go())

    def test_no_durable_decision_no_box(self):
        idle = box_pids(self.tag)

        async def nothing(ws):
            pass

        async def init(ws):
            await ws.send(init_message("python", "print('never')\n"))

        events, code, _ = self.with_writer_stopped(nothing, init)
        self.assertEqual(code, 4002)
        self.assertEqual([e["type"] for e in events], ["error"])
        self.assertIn("audit log unavailable", events[0]["message"])
        self.assertFalse(box_pids(self.tag) - idle, "no box may start")

    def test_no_durable_result_no_job_completed(self):
        async def started(ws):
            await ws.send(init_message("python", "input()\nprint('done')\n"))
            await wait_for_event(ws, lambda e: e["type"] == "stage")

        async def finish(ws):
            await ws.send(json.dumps({"type": "data", "stream": "stdin", "data": "go\n"}))

        events, code, _ = self.with_writer_stopped(started, finish)
        self.assertEqual(stream_text(events), "done\n")  # the output was live
        self.assertEqual(events[-1]["type"], "error")
        self.assertIn("could not be recorded", events[-1]["message"])
        self.assertEqual(code, 4002)  # never "Job Completed" without its record

    # ---- moat-api(7)'s clients, run as written -----------------------------------

    def page_example(self, name):
        return man_example("gateway/man/moat-api.7", name)

    def run_example(self, name, cmd, env=None):
        d = os.path.join(self.stack.tmp, "example")
        os.makedirs(os.path.join(d, ".demo"), exist_ok=True)
        subprocess.run(["cp", self.stack.ca, os.path.join(d, ".demo", "ca.pem")], check=True)
        with open(os.path.join(d, ".demo", "token"), "w") as f:
            f.write(self.stack.token + "\n")
        with open(os.path.join(d, name), "w") as f:
            f.write(self.page_example(name).replace("127.0.0.1:8443", "127.0.0.1:%d" % self.stack.port))
        p = subprocess.run(cmd + [name], cwd=d, capture_output=True, text=True, timeout=120,
                           env=dict(os.environ, **(env or {})))
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("hello, ada", p.stdout)
        self.assertIn("4999", p.stdout)

    def test_moat_api_python_client(self):
        self.run_example("session.py", ["/usr/bin/python3"])

    def test_moat_api_javascript_client(self):
        probe = subprocess.run(["node", "--experimental-websocket", "-e", "if (typeof WebSocket !== 'function') process.exit(3)"],
                               capture_output=True) if shutil.which("node") else None
        if probe is None or probe.returncode != 0:
            self.skipTest("this host's Node has no built-in WebSocket (Node 20.10+ with --experimental-websocket, or 22+)")
        self.run_example("session.mjs", ["node", "--experimental-websocket"],
                         env={"NODE_EXTRA_CA_CERTS": os.path.join(self.stack.tmp, "example", ".demo", "ca.pem")})


class NoAuditTest(unittest.TestCase):
    """Without an audit trail a session is freed the moment it ends: a client
    that closes (or vanishes) mid-run, the gateway serving on."""

    @classmethod
    def setUpClass(cls):
        cls.stack = Stack(tenants=[("demo", RATE + LONG, "")], audit=False).start()

    @classmethod
    def tearDownClass(cls):
        cls.stack.stop()

    def test_client_leaves_mid_run(self):
        for how in ("close", "abort", "close", "abort"):
            async def go():
                idle = box_pids(self.stack.tag)
                ws = await connect(self.stack)
                await ws.send(init_message("python", "input()\n"))
                await wait_for_event(ws, lambda e: e["type"] == "stage")
                mine = box_pids(self.stack.tag) - idle
                if how == "close":
                    await ws.close()
                else:
                    ws.transport.abort()
                return mine

            mine = run(go())
            wait_until(lambda: not (box_pids(self.stack.tag) & mine), "the box of a session its client left (%s)" % how)
            self.assertIsNone(self.stack.gateway.poll(), "the gateway died")
            self.assertEqual(self.stack.request("GET", "/healthz", token=None)[0], 200)

    def test_a_session_completes(self):
        async def go():
            ws = await connect(self.stack)
            await ws.send(init_message("python", "print(input())\n", stdin="x\n"))
            return await events_until_close(ws)

        events, code, _ = run(go())
        self.assertEqual((stream_text(events), code), ("x\n", 4999))


class SilentBackendTest(unittest.TestCase):
    """A backend that takes the session and never answers: the session ends
    after backend.timeout_ms with an error, like an execute's 504."""

    def setUp(self):
        self.stack = Stack(tenants=[("demo", RATE + LONG, "")])
        with open(self.stack.config) as f:
            text = f.read().replace("timeout_ms: 30000", "timeout_ms: 1000")
        with open(self.stack.config, "w") as f:
            f.write(text)

        def answer(c):
            # the runtime table gets an empty list; a session gets nothing at all
            f = read_frame(c)
            if f is not None and f[0] == 4:
                c.sendall(frame(5, f[1], b""))

        self.backend = SilentBackend(self.stack, answer)
        self.stack.start_gateway()

    def tearDown(self):
        self.stack.stop()
        self.backend.close()

    def test_no_ready_in_time(self):
        async def go():
            ws = await connect(self.stack)
            await ws.send(init_message("python", "print(1)\n"))
            return await events_until_close(ws)

        events, code, _ = run(go())
        self.assertEqual(code, 4002)
        self.assertEqual(events[-1]["type"], "error")
        self.assertEqual(events[-1]["code"], "backend_timeout")


if __name__ == "__main__":
    unittest.main()
