"""Per-request run limits, compiler options and repeated runs through Judge0's
API, on real boxes (issue 12): stack_limit, max_processes_and_or_threads and
max_file_size each bite (the program fails under a low limit, and the same
program passes under a higher one in the same test: the baseline), compiler
options reach the compiler as separate words when the language's allow-list
takes them and anything else is a 422 naming the option (and the backend
refuses them too when asked directly), number_of_runs compiles once and runs
in fresh boxes, and the audit trail records every limit applied."""

import base64
import json
import socket
import struct
import subprocess
import unittest

from moat_harness import MOAT_AUDIT, MSG_ERROR, MSG_EXEC_REQUEST, Stack, error_of, frame, read_frame, tlv, wait_until

JUDGE0 = "endpoints: [execute, runtimes, submissions, languages]\n"
BIG = "rate: {per_second: 1000, burst: 1000}\nmax_in_flight: 64\n"
TENANTS = [
    ("alpha", BIG + JUDGE0, ""),
    # the tenant's own ceilings on the run stage's rlimits
    ("capped", BIG + JUDGE0 + "limits:\n  run_stack_kib: 8192\n  run_processes: 16\n  run_file_size_kib: 512\n", ""),
]
C, PYTHON = 50, 71

# Recursion that needs about depth KiB of stack; -O0 so it stays a recursion.
DEEP = r"""
#include <stdio.h>
#include <stdlib.h>
static int down(int n) { volatile char pad[1024]; pad[0] = (char)n; return n == 0 ? 0 : down(n - 1) + pad[0] % 2; }
int main(int argc, char **argv) { printf("deep %d\n", down(atoi(argv[1])) >= 0); return 0; }
"""
# Writes n KiB to a file in /tmp: past RLIMIT_FSIZE, the kernel sends SIGXFSZ.
WRITE = r"""
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
int main(int argc, char **argv) {
    static char kib[1024];
    FILE *f = fopen("/tmp/out", "w");
    memset(kib, 'x', sizeof(kib));
    for (int i = 0; i < atoi(argv[1]); i++) fwrite(kib, 1, sizeof(kib), f);
    fclose(f);
    puts("written");
    return 0;
}
"""
# Starts n threads that all wait, then joins them.
THREADS = r"""
import sys, threading
ev = threading.Event()
ts = [threading.Thread(target=ev.wait, daemon=True) for _ in range(int(sys.argv[1]))]
for t in ts:
    t.start()
ev.set()
for t in ts:
    t.join()
print("threads", len(ts))
"""
DEFINE = "#include <stdio.h>\n#ifndef X\n#define X 1\n#endif\nint main(void) { printf(\"%d\\n\", X); return 0; }\n"


class Judge0LimitsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.stack = Stack(tenants=TENANTS).start()

    @classmethod
    def tearDownClass(cls):
        cls.stack.stop()

    def call(self, body, tenant="alpha", query="wait=true&fields=*"):
        st, headers, data = self.stack.request("POST", "/submissions?" + query, body, token=self.stack.tokens[tenant])
        return st, headers, data

    def run_ok(self, body, tenant="alpha"):
        st, headers, data = self.call(body, tenant)
        self.assertEqual(st, 201, data)
        return data, headers

    def status(self, data):
        return data["status"]["id"], data["status"]["description"]

    # ---- the run stage's limits, each biting, each with its baseline ----------------------------

    def test_stack_limit_bites(self):
        body = {"source_code": DEEP, "language_id": C, "compiler_options": "-O0", "command_line_arguments": "4000"}
        low, _ = self.run_ok(dict(body, stack_limit=1024))  # 1 MiB for ~4 MiB of frames
        high, _ = self.run_ok(dict(body, stack_limit=16384))
        self.assertEqual(self.status(high), (3, "Accepted"), high)
        self.assertEqual(high["stdout"], "deep 1\n")
        self.assertEqual(self.status(low), (7, "Runtime Error (SIGSEGV)"), low)
        self.assertEqual((low["exit_signal"], low["stack_limit"], high["stack_limit"]), (11, 1024, 16384))

    def test_max_file_size_bites(self):
        body = {"source_code": WRITE, "language_id": C, "command_line_arguments": "2048"}  # 2 MiB
        low, _ = self.run_ok(dict(body, max_file_size=1024))
        high, _ = self.run_ok(dict(body, max_file_size=4096))
        self.assertEqual(self.status(high), (3, "Accepted"), high)
        self.assertEqual(high["stdout"], "written\n")
        self.assertEqual(self.status(low), (8, "Runtime Error (SIGXFSZ)"), low)
        self.assertEqual((low["exit_signal"], low["max_file_size"]), (25, 1024))

    def test_max_processes_bites(self):
        body = {"source_code": THREADS, "language_id": PYTHON, "command_line_arguments": "12"}
        low, _ = self.run_ok(dict(body, max_processes_and_or_threads=4))
        high, _ = self.run_ok(dict(body, max_processes_and_or_threads=32))
        self.assertEqual(self.status(high), (3, "Accepted"), high)
        self.assertEqual(high["stdout"], "threads 12\n")
        self.assertEqual(self.status(low), (11, "Runtime Error (NZEC)"), low)
        self.assertIn("can't start new thread", low["stderr"])
        self.assertEqual(low["max_processes_and_or_threads"], 4)

    def test_limits_above_the_box_or_the_tenant_are_refused(self):
        for field, value, bound in (("stack_limit", 65537, 65536), ("max_processes_and_or_threads", 65, 64),
                                    ("max_file_size", 9766, 9765)):
            with self.subTest(field):
                st, _, data = self.call({"source_code": "print(1)", "language_id": PYTHON, field: value})
                self.assertEqual(st, 422, data)
                self.assertEqual(data[field], ["must be less than or equal to %d" % bound])
        # the tenant's ceilings: not asked is the ceiling, above it refused by policy
        data, _ = self.run_ok({"source_code": "print(1)", "language_id": PYTHON}, tenant="capped")
        self.assertEqual((data["stack_limit"], data["max_processes_and_or_threads"], data["max_file_size"]), (8192, 16, 512))
        st, _, data = self.call({"source_code": "print(1)", "language_id": PYTHON, "max_file_size": 513}, tenant="capped")
        self.assertEqual(st, 400, data)
        self.assertIn("run_file_size_limit cannot exceed the tenant's limit of 512 KiB", data["message"])
        # and the tenant's file size ceiling bites without being asked for
        data, _ = self.run_ok({"source_code": WRITE, "language_id": C, "command_line_arguments": "1024"}, tenant="capped")
        self.assertEqual(self.status(data), (8, "Runtime Error (SIGXFSZ)"), data)

    def test_config_info_is_true(self):
        st, _, ci = self.stack.request("GET", "/config_info", token=self.stack.tokens["alpha"])
        self.assertEqual(st, 200, ci)
        self.assertEqual((ci["max_stack_limit"], ci["max_max_processes_and_or_threads"], ci["max_max_file_size"]),
                         (65536, 64, 9765))
        self.assertEqual(ci["max_number_of_runs"], 20)
        self.assertIs(ci["enable_compiler_options"], True)
        names = ci["allowed_languages_for_compile_options"]
        self.assertTrue(any(n.startswith("C (GCC ") for n in names), names)
        self.assertFalse(any(n.startswith("Python") for n in names), names)
        st, _, ci = self.stack.request("GET", "/config_info", token=self.stack.tokens["capped"])
        self.assertEqual((ci["stack_limit"], ci["max_processes_and_or_threads"], ci["max_max_file_size"]), (8192, 16, 512))

    # ---- compiler options --------------------------------------------------------------------

    def test_compiler_options_reach_the_compiler(self):
        base, _ = self.run_ok({"source_code": DEFINE, "language_id": C})
        five, _ = self.run_ok({"source_code": DEFINE, "language_id": C, "compiler_options": "-O2  -DX=5"})
        self.assertEqual((base["stdout"], five["stdout"]), ("1\n", "5\n"))
        self.assertEqual(five["compiler_options"], "-O2  -DX=5")
        opt, _ = self.run_ok({"source_code": DEFINE, "language_id": C, "compiler_options": "-O2"})
        self.assertEqual(self.status(opt), (3, "Accepted"), opt)

    def test_rust_options_of_two_words(self):
        src = "fn main() { println!(\"{}\", if cfg!(debug_assertions) { \"debug\" } else { \"release\" }); }"
        # the manifest compiles with -O; opt-level 0 turns debug assertions on: the two words reached rustc
        base, _ = self.run_ok({"source_code": src, "language_id": 73})
        ok, _ = self.run_ok({"source_code": src, "language_id": 73, "compiler_options": "-C opt-level=0 -g"})
        self.assertEqual((base["stdout"], self.status(ok), ok["stdout"]), ("release\n", (3, "Accepted"), "debug\n"), ok)
        # a word that takes an argument only with the argument the allow-list names
        for options, named in (("-C linker=/bin/sh", "-C"), ("-C", "-C"), ("-O -C opt-level=3 --out-dir /tmp", "--out-dir")):
            with self.subTest(options):
                st, _, data = self.call({"source_code": src, "language_id": 73, "compiler_options": options})
                self.assertEqual(st, 422, data)
                self.assertEqual(data["compiler_options"], ['compiler option "%s" is not allowed for language rust' % named])

    def test_dangerous_compiler_options_are_refused(self):
        refused = {
            "-fplugin=/tmp/evil.so": "-fplugin=/tmp/evil.so",
            "-O2 -wrapper /bin/sh,-c": "-wrapper",
            "@/etc/passwd": "@/etc/passwd",
            "-o /tmp/x": "-o",
            "-B/tmp": "-B/tmp",
            "-specs=/tmp/s": "-specs=/tmp/s",
            "; rm -rf /": ";",
            "-O2;rm": "-O2;rm",
        }
        for options, named in refused.items():
            with self.subTest(options):
                st, _, data = self.call({"source_code": DEFINE, "language_id": C, "compiler_options": options})
                self.assertEqual(st, 422, data)
                self.assertEqual(data["compiler_options"], ['compiler option "%s" is not allowed for language c' % named])
        st, _, data = self.call({"source_code": DEFINE, "language_id": C, "compiler_options": "-DX='a b'"})
        self.assertEqual(st, 422, data)
        self.assertIn("without quotes", data["compiler_options"][0])
        st, _, data = self.call({"source_code": "print(1)", "language_id": PYTHON, "compiler_options": "-O"})
        self.assertEqual(st, 422, data)
        self.assertEqual(data["compiler_options"],
                         ["compiler_options are not allowed for language python: it accepts no compiler options"])

    def test_backend_is_the_authority(self):
        """A gateway that skipped its checks: the backend refuses options off the allow-list, and limits
        above its own, by itself."""
        def request(options=(), limits=()):
            p = tlv(1, b"c") + tlv(2, b"*") + tlv(3, tlv(1, b"main.c") + tlv(2, DEFINE.encode()))
            for o in options:
                p += tlv(17, o.encode())
            for tag, value in limits:
                p += tlv(tag, struct.pack(">Q", value))
            return frame(MSG_EXEC_REQUEST, 5, p)
        cases = [
            (request(options=("-fplugin=/tmp/x.so",)), 1, 'compiler option "-fplugin=/tmp/x.so" is not allowed for c'),
            (request(options=("-O2", "-wrapper", "/bin/sh")), 1, 'compiler option "-wrapper" is not allowed for c'),
            (request(limits=((14, 65537),)), 3, "run_stack_limit cannot exceed the configured limit of 65536 KiB"),
            (request(limits=((15, 65),)), 3, "run_processes cannot exceed the configured limit of 64 processes and threads"),
            (request(limits=((16, 9766),)), 3, "run_file_size_limit cannot exceed the configured limit of 9765 KiB"),
        ]
        for msg, code, text in cases:
            with self.subTest(text):
                with socket.socket(socket.AF_UNIX) as s:
                    s.settimeout(30)
                    s.connect(self.stack.socket)
                    s.sendall(msg)
                    t, _, payload = read_frame(s)
                    self.assertEqual(t, MSG_ERROR)
                    self.assertEqual(error_of(payload), (code, text))

    # ---- number_of_runs ------------------------------------------------------------------------

    def test_number_of_runs(self):
        src = "#include <stdio.h>\nint main(void) { int n; if (scanf(\"%d\", &n) != 1) return 2; printf(\"%d\\n\", n * 2); return 0; }\n"
        data, headers = self.run_ok({"source_code": src, "language_id": C, "stdin": "21", "expected_output": "42",
                                     "number_of_runs": 3})
        self.assertEqual(self.status(data), (3, "Accepted"), data)
        self.assertEqual((data["number_of_runs"], data["stdout"]), (3, "42\n"))
        self.assertIsNotNone(data["time"])
        self.assertIsNotNone(data["memory"])
        rid = headers["x-request-id"]

        def result():
            return [r for r in self.stack.audit_records() if r.get("request_id") == rid and r["type"] == "result"]
        wait_until(lambda: result(), "the result record")
        rec = result()[0]
        self.assertEqual(rec["compile"]["status"], "OK")  # compiled once
        self.assertEqual(len(rec["test_runs"]), 3)  # run three times, each in its own box
        self.assertNotIn("run", rec)
        # a failing run decides
        data, _ = self.run_ok({"source_code": src, "language_id": C, "stdin": "x", "number_of_runs": 2})
        self.assertEqual((self.status(data), data["exit_code"]), ((11, "Runtime Error (NZEC)"), 2))

    # ---- the audit trail ------------------------------------------------------------------------

    def test_audit_records_the_limits_applied(self):
        data, headers = self.run_ok({"source_code": DEFINE, "language_id": C, "cpu_time_limit": 1.5, "wall_time_limit": 2,
                                     "stack_limit": 4096, "max_processes_and_or_threads": 8, "max_file_size": 100,
                                     "compiler_options": "-DX=7"})
        self.assertEqual(data["stdout"], "7\n")
        rid = headers["x-request-id"]

        def mine():
            return [r for r in self.stack.audit_records() if r.get("request_id") == rid]
        wait_until(lambda: len(mine()) >= 2, "the decision and result records")
        want = {"run_timeout_ms": 2000, "compile_timeout_ms": 10000, "run_cpu_ms": 1500, "compile_cpu_ms": -1,
                "run_stack_kib": 4096, "run_processes": 8, "run_file_size_kib": 100}
        for rec in mine():
            with self.subTest(rec["type"]):
                limits = rec["limits"]
                self.assertEqual({k: limits[k] for k in want}, want, limits)
        req = next(r for r in mine() if r["type"] == "request")
        self.assertEqual(req["compiler_options"], ["-DX=7"])
        res = next(r for r in mine() if r["type"] == "result")
        p = subprocess.run([MOAT_AUDIT, "show", self.stack.audit_dir, rid, "--raw-packet"], capture_output=True)
        self.assertEqual(p.returncode, 0, p.stderr)
        pk = json.loads(p.stdout)
        self.assertEqual({k: pk["request"]["limits"][k] for k in want}, want)
        self.assertEqual(pk["request"]["compiler_options"], ["-DX=7"])
        self.assertEqual(base64.b64decode(pk["result"]["stdout"]), b"7\n")
        self.assertRegex(res["packet"], "^[0-9a-f]{64}$")
        # not asked: -1, the backend's own (the language's) limit
        data, headers = self.run_ok({"source_code": "print(1)", "language_id": PYTHON})
        rid = headers["x-request-id"]
        wait_until(lambda: len(mine()) >= 2, "the records")
        limits = next(r for r in mine() if r["type"] == "request")["limits"]
        self.assertEqual((limits["run_cpu_ms"], limits["run_stack_kib"], limits["run_processes"], limits["run_file_size_kib"]),
                         (-1, -1, -1, -1))


if __name__ == "__main__":
    unittest.main()
