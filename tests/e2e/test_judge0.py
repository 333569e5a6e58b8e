"""Judge0 CE's API through the real gateway and backend: the catalogue
(/languages, /statuses, /about, /config_info), submissions with wait=true
and wait=false then GET by token, Judge0's documented request and response
examples field by field, base64 both ways (binary output survives), fields=,
the statuses a run can end in, X-Auth-Token, tenant isolation of tokens,
errors in Judge0's shapes, opt-in endpoints, and the audit records."""

import base64
import hashlib
import io
import json
import os
import re
import subprocess
import time
import unittest
import zipfile

from moat_harness import MOAT_AUDIT, Stack, wait_until

BIG = "rate: {per_second: 1000, burst: 1000}\nmax_in_flight: 64\n"
JUDGE0 = "endpoints: [execute, runtimes, submissions, languages]\n"
TENANTS = [
    ("alpha", BIG + JUDGE0 + "limits:\n  run_timeout_ms: 2000\n", ""),
    ("beta", BIG + JUDGE0, ""),
    ("plain", BIG, ""),  # no Judge0 endpoints: they are opt-in
    ("pyonly", BIG + JUDGE0 + "languages:\n  - python\n", ""),
    ("single", "rate: {per_second: 1000, burst: 1000}\nmax_in_flight: 1\n" + JUDGE0, ""),
]
UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")
DEFAULT_FIELDS = ["stdout", "time", "memory", "stderr", "token", "compile_output", "message", "status"]
ALL_FIELDS = ["source_code", "language_id", "stdin", "expected_output", "stdout", "status_id", "created_at", "finished_at",
              "time", "memory", "stderr", "token", "number_of_runs", "cpu_time_limit", "cpu_extra_time", "wall_time_limit",
              "memory_limit", "stack_limit", "max_processes_and_or_threads", "enable_per_process_and_thread_time_limit",
              "enable_per_process_and_thread_memory_limit", "max_file_size", "compile_output", "exit_code", "exit_signal",
              "message", "wall_time", "compiler_options", "command_line_arguments", "redirect_stderr_to_stdout",
              "callback_url", "additional_files", "enable_network", "status", "language"]

# Judge0's documented example (docs/api: "Create a submission"), with C's current id.
HELLO_C = "#include <stdio.h>\n\nint main(void) {\n  char name[10];\n  scanf(\"%s\", name);\n  printf(\"hello, %s\\n\", name);\n  return 0;\n}"


def b64(s):
    return base64.b64encode(s if isinstance(s, bytes) else s.encode()).decode()


class Judge0Test(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.stack = Stack(tenants=TENANTS).start()

    @classmethod
    def tearDownClass(cls):
        cls.stack.stop()

    def call(self, method, path, body=None, tenant="alpha", headers=None, x_auth=False):
        token = self.stack.tokens[tenant] if tenant else None
        h = dict(headers or {})
        if x_auth and token:
            h["X-Auth-Token"], token = token, None
        return self.stack.request(method, path, body, token=token, headers=h)

    def submit(self, body, query="wait=true", tenant="alpha", **kw):
        st, headers, data = self.call("POST", "/submissions?" + query, body, tenant=tenant, **kw)
        self.assertEqual(st, 201, data)
        return data

    def result_of(self, token, query="", tenant="alpha", timeout=60):
        """Poll GET /submissions/{token} until the run is over (status 3 and above)."""
        got = {}

        def done():
            st, _, data = self.call("GET", "/submissions/%s?%s" % (token, query), tenant=tenant)
            self.assertEqual(st, 200, data)
            got.update(data)
            return data["status"]["id"] >= 3
        wait_until(done, "submission %s to finish" % token, timeout=timeout)
        return got

    def status_of(self, body, **kw):
        return self.submit(body, "wait=true&fields=status,stdout,stderr,message,exit_code,exit_signal", **kw)

    def assert_error(self, got, status, text):
        st, headers, data = got
        self.assertEqual(st, status, data)
        self.assertIn(text, data["message"])
        self.assertEqual(data["request_id"], headers["x-request-id"])
        return data

    # ---- the catalogue -------------------------------------------------------------------

    def test_languages_well_known_ids_with_installed_versions(self):
        st, _, langs = self.call("GET", "/languages")
        self.assertEqual(st, 200, langs)
        by_id = {l["id"]: l["name"] for l in langs}
        self.assertEqual(sorted(by_id), [46, 50, 54, 60, 62, 63, 64, 71, 72, 73, 82, 85])
        for l in langs:
            self.assertEqual(sorted(l), ["id", "name"])
        # named with the versions the backend really has (its runtime table)
        st, _, runtimes = self.stack.request("GET", "/api/v2/runtimes", token=self.stack.tokens["alpha"])
        versions = {r["language"]: r["version"] for r in runtimes}
        self.assertEqual(by_id[71], "Python (%s)" % versions["python"])
        self.assertEqual(by_id[50], "C (GCC %s)" % versions["c"])
        self.assertEqual(by_id[54], "C++ (GCC %s)" % versions["c++"])
        self.assertEqual(by_id[82], "SQL (SQLite %s)" % versions["sqlite3"])
        st, _, one = self.call("GET", "/languages/71")
        self.assertEqual(st, 200, one)
        self.assertEqual(one, {"id": 71, "name": by_id[71], "is_archived": False, "source_file": "script.py",
                               "compile_cmd": None, "run_cmd": None})
        for missing in ("/languages/1", "/languages/9999999", "/languages/abc"):
            data = self.assert_error(self.call("GET", missing), 404, "language not found")
            self.assertEqual(data["error"], "language not found")

    def test_languages_follow_the_tenants_policy(self):
        st, _, langs = self.call("GET", "/languages", tenant="pyonly")
        self.assertEqual([l["id"] for l in langs], [71])
        self.assert_error(self.call("GET", "/languages/50", tenant="pyonly"), 404, "language not found")
        self.assert_error(self.call("POST", "/submissions?wait=true", {"source_code": "int main(){}", "language_id": 50},
                                    tenant="pyonly"), 403, "language")

    def test_statuses(self):
        st, _, statuses = self.call("GET", "/statuses")
        self.assertEqual(st, 200)
        self.assertEqual(statuses, [{"id": i + 1, "description": d} for i, d in enumerate([
            "In Queue", "Processing", "Accepted", "Wrong Answer", "Time Limit Exceeded", "Compilation Error",
            "Runtime Error (SIGSEGV)", "Runtime Error (SIGXFSZ)", "Runtime Error (SIGFPE)", "Runtime Error (SIGABRT)",
            "Runtime Error (NZEC)", "Runtime Error (Other)", "Internal Error", "Exec Format Error"])])

    def test_about_and_config_info(self):
        st, _, about = self.call("GET", "/about")
        self.assertEqual(st, 200)
        self.assertEqual(sorted(about), ["homepage", "maintainer", "source_code", "version"])
        st, _, ci = self.call("GET", "/config_info")
        self.assertEqual(st, 200, ci)
        # the tenant's effective limits: alpha's run_timeout_ms 2000
        self.assertEqual((ci["cpu_time_limit"], ci["max_cpu_time_limit"], ci["wall_time_limit"]), (2.0, 2.0, 2.0))
        self.assertEqual(ci["max_queue_size"], 500)  # submissions.queue_max_per_tenant (its default)
        self.assertIs(ci["enable_additional_files"], True)
        self.assertEqual(ci["max_extract_size"], 16 * 1024)
        for off in ("enable_callbacks", "allow_enable_network",
                    "enable_network", "enable_batched_submissions", "enable_submission_delete"):
            self.assertIs(ci[off], False, off)
        self.assertIs(ci["enable_wait_result"], True)
        # compiler options: the languages whose manifests allow-list some (test_judge0_limits)
        self.assertIs(ci["enable_compiler_options"], True)
        self.assertTrue(any(n.startswith("C (GCC ") for n in ci["allowed_languages_for_compile_options"]), ci)
        st, _, ci = self.call("GET", "/config_info", tenant="beta")
        self.assertEqual(ci["cpu_time_limit"], 3.0)  # the gateway's default

    def test_query_parameters_are_strict(self):
        self.assert_error(self.call("GET", "/statuses?page=1"), 400, "unknown query parameter: page")
        self.assert_error(self.call("GET", "/languages?x=1"), 400, "unknown query parameter: x")

    # ---- submissions: Judge0's documented examples ----------------------------------------

    def test_documented_example_wait_true(self):
        st, headers, data = self.call("POST", "/submissions?base64_encoded=false&wait=true",
                                      {"source_code": HELLO_C, "language_id": 50, "stdin": "world"})
        self.assertEqual(st, 201, data)
        self.assertEqual(list(data), DEFAULT_FIELDS)  # Judge0's default fields, in its order
        self.assertEqual(data["stdout"], "hello, world\n")
        self.assertEqual(data["status"], {"id": 3, "description": "Accepted"})
        self.assertIsNone(data["stderr"])
        self.assertIsNone(data["compile_output"])
        self.assertIsNone(data["message"])
        self.assertRegex(data["time"], r"^\d+\.\d{3}$")
        self.assertIsInstance(data["memory"], int)
        self.assertRegex(data["token"], UUID)
        self.assertIn("x-request-id", headers)

    def test_documented_example_wait_false_then_get(self):
        body = {"source_code": HELLO_C, "language_id": 50, "stdin": "world", "expected_output": "hello, world"}
        data = self.submit(body, query="base64_encoded=false")
        self.assertEqual(list(data), ["token"])
        token = data["token"]
        self.assertRegex(token, UUID)
        got = self.result_of(token, "base64_encoded=false")
        self.assertEqual(list(got), DEFAULT_FIELDS)
        self.assertEqual((got["stdout"], got["token"], got["status"]["id"]), ("hello, world\n", token, 3))
        # every field Judge0 has, in its order, with moat's values
        st, _, full = self.call("GET", "/submissions/%s?fields=*" % token)
        self.assertEqual(st, 200, full)
        self.assertEqual(list(full), ALL_FIELDS)
        self.assertEqual((full["source_code"], full["stdin"], full["expected_output"]), (HELLO_C, "world", "hello, world"))
        self.assertEqual((full["language_id"], full["status_id"], full["exit_code"], full["exit_signal"]), (50, 3, 0, None))
        self.assertEqual(full["language"]["id"], 50)
        self.assertTrue(full["language"]["name"].startswith("C (GCC "))
        self.assertRegex(full["created_at"], r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
        self.assertGreaterEqual(full["finished_at"], full["created_at"])
        self.assertRegex(full["wall_time"], r"^\d+\.\d{3}$")
        self.assertEqual((full["cpu_time_limit"], full["wall_time_limit"]), (2.0, 2.0))  # alpha's default
        self.assertEqual(full["memory_limit"], 256 * 1024)
        self.assertEqual((full["number_of_runs"], full["enable_network"], full["redirect_stderr_to_stdout"]),
                         (1, False, False))
        # the C compile leaves no output: null, as Judge0 has it
        self.assertIsNone(full["compile_output"])

    def test_wait_false_answers_at_once(self):
        # the program's sleep is what is tested: the answer comes before the program is done
        code = "import time\ntime.sleep(1.5)\nprint('late')"
        t0 = time.monotonic()
        st, headers, data = self.call("POST", "/submissions", {"source_code": code, "language_id": 71})
        self.assertEqual(st, 201, data)
        self.assertLess(time.monotonic() - t0, 1.2)  # before the program is done
        token, rid = data["token"], headers["x-request-id"]
        st, _, now = self.call("GET", "/submissions/%s?fields=status,stdout,finished_at,token" % token)
        self.assertEqual(st, 200, now)
        self.assertEqual(now, {"status": {"id": 2, "description": "Processing"}, "stdout": None, "finished_at": None,
                               "token": token})
        done = self.result_of(token, "fields=status,stdout,finished_at")
        self.assertEqual((done["status"]["id"], done["stdout"]), (3, "late\n"))
        self.assertIsNotNone(done["finished_at"])
        # recorded like a synchronous run: the decision, then the result with its packet
        def mine():
            return [r for r in self.stack.audit_records() if r.get("request_id") == rid]
        wait_until(lambda: len(mine()) >= 2, "the decision and result records")
        res = next(r for r in mine() if r["type"] == "result")
        self.assertEqual((res["decision"], res["tenant"], res["run"]["status"]), ("allowed", "alpha", "OK"))
        queue = res["judge0"].pop("queue")  # where it was in the submissions queue (test_judge0_queue.py)
        self.assertEqual(res["judge0"], {"token": token, "status": {"id": 3, "description": "Accepted"}})
        self.assertEqual(sorted(queue), ["ahead", "seq"])
        self.assertGreater(queue["seq"], queue["ahead"])
        self.assertRegex(res["packet"], "^[0-9a-f]{64}$")
        # another tenant still cannot see it
        self.assert_error(self.call("GET", "/submissions/" + token, tenant="beta"), 404, "submission not found")

    def test_wait_false_holds_no_in_flight_slot(self):
        # "single" may have one execution in flight: queued submissions wait
        # in the submissions queue instead (its cap bounds them), so a second
        # wait=false while the first runs (its sleep, bounded by the run ceiling) is accepted, not a 429
        code = "import time\ntime.sleep(1)\nprint('one')"
        first = self.submit({"source_code": code, "language_id": 71}, query="wait=false", tenant="single")
        again = self.submit({"source_code": "print(2)", "language_id": 71}, query="wait=false", tenant="single")
        self.assertEqual(self.result_of(first["token"], tenant="single")["stdout"], "one\n")
        self.assertEqual(self.result_of(again["token"], tenant="single")["stdout"], "2\n")
        # and the slot is free for a synchronous run afterwards
        self.assertEqual(self.status_of({"source_code": "print(3)", "language_id": 71}, tenant="single")["stdout"], "3\n")

    def test_wait_false_backend_down_is_an_internal_error(self):
        self.stack.stop_backend()
        try:
            data = self.submit({"source_code": "print(1)", "language_id": 71}, query="wait=false")
            got = self.result_of(data["token"], "fields=status,message,stdout")
            self.assertEqual(got, {"status": {"id": 13, "description": "Internal Error"}, "message": "backend unavailable",
                                   "stdout": None})
        finally:
            self.stack.start_backend()

    def test_fields_select_and_order(self):
        data = self.submit({"source_code": "print(42)", "language_id": 71}, query="wait=true&fields=status_id,stdout,token")
        self.assertEqual(list(data), ["status_id", "stdout", "token"])
        self.assertEqual((data["status_id"], data["stdout"]), (3, "42\n"))
        st, _, got = self.call("GET", "/submissions/%s?fields=stdout,language_id" % data["token"])
        self.assertEqual(got, {"stdout": "42\n", "language_id": 71})
        got = self.call("GET", "/submissions/%s?fields=stdout,nope,worse" % data["token"])
        err = self.assert_error(got, 400, "invalid fields: [nope, worse]")
        self.assertEqual(err["error"], "invalid fields: [nope, worse]")
        self.assert_error(self.call("POST", "/submissions?wait=true&fields=bogus", {"source_code": "1", "language_id": 71}),
                          400, "invalid fields: [bogus]")

    # ---- base64 -------------------------------------------------------------------------------

    def test_base64_round_trip_of_binary_output(self):
        binary = bytes(range(256)) * 4
        code = "import sys\nd = sys.stdin.buffer.read()\nsys.stdout.buffer.write(d)\nsys.stderr.buffer.write(d[::-1])\n"
        data = self.submit({"source_code": b64(code), "language_id": 71, "stdin": b64(binary)},
                           query="base64_encoded=true&wait=true")
        self.assertEqual(data["status"]["id"], 3, data)
        self.assertEqual(base64.b64decode(data["stdout"], validate=True), binary)
        self.assertEqual(base64.b64decode(data["stderr"], validate=True), binary[::-1])
        # the same result by token: base64 again, or Judge0's "cannot be converted" without it
        st, _, got = self.call("GET", "/submissions/%s?base64_encoded=true&fields=stdout,source_code" % data["token"])
        self.assertEqual(st, 200, got)
        self.assertEqual(base64.b64decode(got["stdout"]), binary)
        self.assertEqual(base64.b64decode(got["source_code"]).decode(), code)
        err = self.assert_error(self.call("GET", "/submissions/%s" % data["token"]), 400, "cannot be converted to UTF-8")
        self.assertIn("base64_encoded=true", err["error"])
        # wait=true without base64: created, and Judge0's error with the token
        st, _, got = self.call("POST", "/submissions?wait=true", {"source_code": code, "language_id": 71, "stdin": "\u00ff"})
        self.assertEqual(st, 201, got)
        st, _, got = self.call("POST", "/submissions?wait=true",
                               {"source_code": "import sys; sys.stdout.buffer.write(bytes([255, 0, 1]))", "language_id": 71})
        self.assertEqual(st, 201, got)
        self.assertEqual(sorted(got), ["error", "token"])
        self.assertIn("cannot be converted to UTF-8", got["error"])
        st, _, again = self.call("GET", "/submissions/%s?base64_encoded=true&fields=stdout" % got["token"])
        self.assertEqual(base64.b64decode(again["stdout"]), b"\xff\x00\x01")

    def test_bad_base64_is_a_field_error(self):
        st, _, data = self.call("POST", "/submissions?base64_encoded=true&wait=true",
                                {"source_code": "print(1)!", "language_id": 71})
        self.assertEqual(st, 422, data)
        self.assertEqual(data["source_code"], ["is not valid base64"])

    # ---- additional_files -------------------------------------------------------------------

    @staticmethod
    def zip_of(entries):
        """A zip archive, base64: entries are (name, bytes) or (ZipInfo, bytes)."""
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
            for name, data in entries:
                z.writestr(name, data)
        return base64.b64encode(buf.getvalue()).decode()

    def test_additional_files(self):
        files = self.zip_of([("data/input.txt", b"42\n"), ("helper.py", b"def double(x):\n    return 2 * x\n")])
        code = "import helper\nprint(helper.double(int(open('data/input.txt').read())))"
        data = self.status_of({"source_code": code, "language_id": 71, "additional_files": files})
        self.assertEqual((data["status"]["id"], data["stdout"]), (3, "84\n"), data)
        # C: a header beside the source
        files = self.zip_of([("util.h", b"static int three(void) { return 3; }\n")])
        code = '#include <stdio.h>\n#include "util.h"\nint main(void) { printf("%d\\n", three()); return 0; }'
        data = self.status_of({"source_code": code, "language_id": 50, "additional_files": files})
        self.assertEqual((data["status"]["id"], data["stdout"]), (3, "3\n"), data)

    def test_additional_files_refused(self):
        link = zipfile.ZipInfo("passwd")
        link.create_system = 3
        link.external_attr = (0o120777 << 16)
        bomb = io.BytesIO()
        with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as z:
            z.writestr("zeros", b"\0" * (64 * 1024 * 1024))  # 64 MiB of zeros in about 64 KB
        cases = [
            (self.zip_of([(link, b"/etc/passwd")]), "entry 'passwd' is a symbolic link or a special file"),
            (self.zip_of([("../escape.py", b"x")]), "entry '../escape.py' must not have a '.' or '..' component"),
            (self.zip_of([("/etc/cron.d/x", b"x")]), "entry '/etc/cron.d/x'"),
            (self.zip_of([("script.py", b"print('not yours')")]), "the source's own file"),
            (base64.b64encode(bomb.getvalue()).decode(), "unpacks to more than 16777216 bytes"),
            (base64.b64encode(b"not a zip").decode(), "is not a zip archive"),
            ("%%%", "additional_files is not valid base64"),
        ]
        for files, msg in cases:
            with self.subTest(msg):
                self.assert_error(self.call("POST", "/submissions?wait=true",
                                            {"source_code": "print(1)", "language_id": 71, "additional_files": files}),
                                  400, msg)
        # within the zip's own limits, the tenant's code size still applies to all files together
        self.assert_error(self.call("POST", "/submissions?wait=true",
                                    {"source_code": "print(1)", "language_id": 71,
                                     "additional_files": self.zip_of([("big.bin", b"x" * (2 * 1024 * 1024))])}),
                          400, "files' contents total more than the tenant's limit")

    # ---- statuses a run ends in -----------------------------------------------------------

    def test_accepted_and_wrong_answer(self):
        ok = self.status_of({"source_code": "print('1 2  ')\nprint(3)\n", "language_id": 71, "expected_output": "1 2\n3"})
        self.assertEqual(ok["status"], {"id": 3, "description": "Accepted"})
        wa = self.status_of({"source_code": "print(4)", "language_id": 71, "expected_output": "5"})
        self.assertEqual(wa["status"], {"id": 4, "description": "Wrong Answer"})
        self.assertEqual(wa["stdout"], "4\n")

    def test_time_limit_exceeded(self):
        data = self.status_of({"source_code": "while True: pass", "language_id": 71, "cpu_time_limit": 0.5})
        self.assertEqual(data["status"], {"id": 5, "description": "Time Limit Exceeded"})
        self.assertEqual(data["message"], "Time limit exceeded")

    def test_compilation_error(self):
        data = self.submit({"source_code": "int main( {", "language_id": 50}, query="wait=true&fields=*")
        self.assertEqual(data["status"], {"id": 6, "description": "Compilation Error"})
        self.assertIn("error", data["compile_output"])
        self.assertIsNone(data["stdout"])
        self.assertIsNone(data["time"])

    def test_runtime_errors(self):
        cases = [
            ("import sys; sys.exit(3)", 71, 11, "Runtime Error (NZEC)", {"exit_code": 3}),
            ("int main(void) { volatile int *p = 0; return *p; }", 50, 7, "Runtime Error (SIGSEGV)", {"exit_signal": 11}),
            ("int main(void) { volatile int a = 7, z = 0; return a / z; }", 50, 9, "Runtime Error (SIGFPE)", {"exit_signal": 8}),
            ("#include <stdlib.h>\nint main(void) { abort(); }", 50, 10, "Runtime Error (SIGABRT)", {"exit_signal": 6}),
        ]
        for code, lang, sid, desc, extra in cases:
            with self.subTest(desc):
                data = self.status_of({"source_code": code, "language_id": lang})
                self.assertEqual(data["status"], {"id": sid, "description": desc}, data)
                for k, v in extra.items():
                    self.assertEqual(data[k], v, data)

    def test_stdin_args_and_redirect(self):
        code = "import sys\nprint(sys.argv[1:])\nprint('err', file=sys.stderr, flush=True)\n"
        data = self.status_of({"source_code": code, "language_id": 71, "command_line_arguments": "a 'b c' \"d\""})
        self.assertEqual((data["stdout"], data["stderr"]), ("['a', 'b c', 'd']\n", "err\n"))
        data = self.status_of({"source_code": code, "language_id": 71, "redirect_stderr_to_stdout": True})
        self.assertEqual((data["stdout"], data["stderr"]), ("[]\nerr\n", None))

    def test_memory_limit_applies(self):
        code = "x = bytearray(200 * 1024 * 1024)\nprint(len(x))"
        data = self.status_of({"source_code": code, "language_id": 71, "memory_limit": 65536})
        self.assertNotEqual(data["status"]["id"], 3, data)
        data = self.status_of({"source_code": "print(1)", "language_id": 71, "memory_limit": 65536})
        self.assertEqual(data["status"]["id"], 3, data)

    # ---- authentication, authorization, tenants ------------------------------------------

    def test_x_auth_token(self):
        data = self.submit({"source_code": "print('x')", "language_id": 71}, x_auth=True)
        self.assertEqual(data["stdout"], "x\n")
        st, _, got = self.call("GET", "/submissions/" + data["token"], x_auth=True)
        self.assertEqual(st, 200)
        st, _, _ = self.call("GET", "/languages", x_auth=True)
        self.assertEqual(st, 200)
        # a wrong key, two credentials, two headers: 401
        self.assert_error(self.stack.request("GET", "/statuses", token=None, headers={"X-Auth-Token": "moat_nope"}), 401,
                          "invalid or missing API key")
        both = {"X-Auth-Token": self.stack.tokens["alpha"]}
        self.assert_error(self.stack.request("GET", "/statuses", token=self.stack.tokens["alpha"], headers=both), 401,
                          "send one credential")
        # only on Judge0's routes: Piston's still want Authorization
        self.assert_error(self.stack.request("GET", "/api/v2/runtimes", token=None,
                                             headers={"X-Auth-Token": self.stack.tokens["alpha"]}), 401, "API key")
        self.assert_error(self.stack.request("GET", "/statuses", token=None), 401, "API key")

    def test_tokens_are_bound_to_the_tenant(self):
        data = self.submit({"source_code": "print('secret')", "language_id": 71})
        token = data["token"]
        st, _, mine = self.call("GET", "/submissions/" + token)
        self.assertEqual((st, mine["stdout"]), (200, "secret\n"))
        theirs = self.assert_error(self.call("GET", "/submissions/" + token, tenant="beta"), 404, "submission not found")
        never = self.assert_error(self.call("GET", "/submissions/00000000-0000-4000-8000-000000000000", tenant="beta"), 404,
                                  "submission not found")
        # the same answer as a token that never existed: nothing tells them apart
        self.assertEqual({k: v for k, v in theirs.items() if k != "request_id"},
                         {k: v for k, v in never.items() if k != "request_id"})
        self.assert_error(self.call("GET", "/submissions/not-a-token"), 404, "submission not found")
        self.assert_error(self.call("GET", "/submissions/" + token.upper()), 404, "submission not found")

    def test_batch_get(self):
        a = self.submit({"source_code": "print('a')", "language_id": 71})["token"]
        b = self.submit({"source_code": "print('b')", "language_id": 71})["token"]
        other = self.submit({"source_code": "print('c')", "language_id": 71}, tenant="beta")["token"]
        tokens = ",".join([a, "00000000-0000-4000-8000-000000000000", other, b, "junk"])
        st, _, got = self.call("GET", "/submissions/batch?tokens=%s&fields=stdout,token" % tokens)
        self.assertEqual(st, 200, got)
        self.assertEqual(got, {"submissions": [{"stdout": "a\n", "token": a}, None, None, {"stdout": "b\n", "token": b},
                                               None]})
        st, _, got = self.call("GET", "/submissions/batch?tokens=%s&base64_encoded=true&fields=stdout" % a, x_auth=True)
        self.assertEqual(got, {"submissions": [{"stdout": b64("a\n")}]})
        self.assert_error(self.call("GET", "/submissions/batch?tokens=" + ",".join([a] * 21)), 400,
                          "less than or equal to 20")
        self.assert_error(self.call("GET", "/submissions/batch"), 400, "at least one submission")

    def batch_results(self, tokens, tenant="alpha", query="fields=status,stdout,token"):
        got = {}

        def done():
            st, _, data = self.call("GET", "/submissions/batch?tokens=%s&%s" % (",".join(tokens), query), tenant=tenant)
            self.assertEqual(st, 200, data)
            got["all"] = data["submissions"]
            return all(x is not None and x["status"]["id"] >= 3 for x in data["submissions"])
        wait_until(done, "the batch to finish")
        return got["all"]

    def test_batch_post(self):
        entries = [
            {"source_code": "print(input())", "language_id": 71, "stdin": "one"},
            {"source_code": "print(2)", "language_id": 71, "expected_output": "3"},
            {"source_code": "int main( {", "language_id": 50},
            {"source_code": "x", "language_id": 999},
            {"source_code": "x", "language_id": 71, "enable_network": True},
        ]
        st, headers, data = self.call("POST", "/submissions/batch", {"submissions": entries})
        self.assertEqual(st, 201, data)
        self.assertEqual(len(data), 5)
        tokens = [d["token"] for d in data[:3]]
        for t in tokens:
            self.assertRegex(t, UUID)
        self.assertEqual(data[3], {"language_id": ["language with id 999 doesn't exist"]})
        self.assertEqual(data[4], {"enable_network": ["is not allowed: boxes have no network"]})
        results = self.batch_results(tokens)
        self.assertEqual([r["status"]["id"] for r in results], [3, 4, 6])
        self.assertEqual(results[0]["stdout"], "one\n")
        # every entry is an execution of its own in the trail, named by the batch's decision
        rid = headers["x-request-id"]
        def batch_decision():
            return [r for r in self.stack.audit_records() if r.get("request_id") == rid and r["type"] == "request"]
        wait_until(batch_decision, "the batch's decision record")
        named = batch_decision()[0]["judge0"]["batch"]
        self.assertEqual([n["token"] for n in named], tokens)
        def entry_records():
            ids = {n["request_id"] for n in named}
            return [r for r in self.stack.audit_records() if r.get("request_id") in ids]
        wait_until(lambda: len(entry_records()) >= 6, "each entry's decision and result")
        recs = entry_records()
        self.assertEqual(sorted(r["type"] for r in recs), ["request"] * 3 + ["result"] * 3)
        for r in recs:
            self.assertEqual((r["decision"], r["tenant"]), ("allowed", "alpha"), r)
            if r["type"] == "request":
                self.assertEqual(r["judge0"]["batch"], rid)

    def test_batch_of_one_source_is_compiled_once(self):
        src = "#include <stdio.h>\nint main(void) { int n; if (scanf(\"%d\", &n) != 1) return 3; " \
              "if (n == 13) { int *p = 0; return *p; } printf(\"%d\\n\", 2 * n); return 0; }"
        same = [{"source_code": src, "language_id": 50, "stdin": str(n), "expected_output": str(2 * n)} for n in range(1, 6)]
        same[1]["expected_output"] = "5"  # Wrong Answer
        same[2]["stdin"] = "13"  # SIGSEGV
        same[2]["expected_output"] = None
        other = {"source_code": src.replace("2 * n", "3 * n"), "language_id": 50, "stdin": "4"}  # another program
        mixed = dict(same[0], redirect_stderr_to_stdout=True)  # cases keep no interleaved output: on its own
        entries = same[:3] + [other] + same[3:] + [mixed]
        st, headers, data = self.call("POST", "/submissions/batch", {"submissions": entries})
        self.assertEqual(st, 201, data)
        tokens = [d["token"] for d in data]
        results = self.batch_results(tokens, query="fields=status,stdout,token,compile_output")
        self.assertEqual([r["status"]["id"] for r in results], [3, 4, 7, 3, 3, 3, 3])
        self.assertEqual([r["stdout"] for r in results], ["2\n", "4\n", None, "12\n", "8\n", "10\n", "2\n"])
        # the five entries of one source were one job: their result records name the group, and all
        # show the one compile stage (the same cpu, wall and memory figures, which two compiles would
        # not give); the other program and the redirected entry ran alone
        group = [tokens[i] for i in (0, 1, 2, 4, 5)]
        def results_of(toks):
            return {r["judge0"]["token"]: r for r in self.stack.audit_records()
                    if r["type"] == "result" and r.get("judge0", {}).get("token") in toks}
        wait_until(lambda: len(results_of(tokens)) == len(tokens), "every entry's result record")
        recs = results_of(tokens)
        for k, t in enumerate(group):
            self.assertEqual(recs[t]["judge0"]["group"], {"first": tokens[0], "size": 5, "case": k}, recs[t])
        compiles = [json.dumps(recs[t]["compile"], sort_keys=True) for t in group]
        self.assertEqual(len(set(compiles)), 1, compiles)
        for t in (tokens[3], tokens[6]):
            self.assertNotIn("group", recs[t]["judge0"])

    def test_batch_of_one_source_that_does_not_compile(self):
        entries = [{"source_code": "int main( {", "language_id": 54, "stdin": str(n)} for n in range(3)]
        st, _, data = self.call("POST", "/submissions/batch", {"submissions": entries})
        self.assertEqual(st, 201, data)
        results = self.batch_results([d["token"] for d in data], query="fields=status,compile_output")
        self.assertEqual([r["status"]["id"] for r in results], [6, 6, 6])
        self.assertTrue(all(r["compile_output"] for r in results), results)

    def test_batch_post_refusals(self):
        st, _, data = self.call("POST", "/submissions/batch", {"submissions": [{"source_code": "x", "language_id": 1}]})
        self.assertEqual(st, 422, data)
        self.assertEqual(data["submissions"], [{"language_id": ["language with id 1 doesn't exist"]}])
        self.assert_error(self.call("POST", "/submissions/batch", {"submissions": [{"source_code": "1", "language_id": 71}] * 21}),
                          400, "less than or equal to 20")
        self.assert_error(self.call("POST", "/submissions/batch", {"submissions": []}), 400, "at least one submission")
        self.assert_error(self.call("POST", "/submissions/batch", {"submissions": [], "x": 1}), 400, "unknown field: x")
        self.assert_error(self.call("DELETE", "/submissions/batch"), 405, "method not allowed")

    def test_batch_holds_no_slot(self):
        # each entry runs a while (the sleep is the program under test), the sync run meanwhile
        code = "import time\ntime.sleep(0.3)\nprint('%d')"
        st, _, data = self.call("POST", "/submissions/batch",
                                {"submissions": [{"source_code": code % i, "language_id": 71} for i in range(4)]},
                                tenant="single")
        self.assertEqual(st, 201, data)
        # the entries wait in the submissions queue, not in the tenant's one
        # in-flight slot: a synchronous run of the same tenant goes ahead
        self.assertEqual(self.status_of({"source_code": "print(5)", "language_id": 71}, tenant="single")["stdout"], "5\n")
        results = self.batch_results([d["token"] for d in data], tenant="single")
        self.assertEqual([r["stdout"] for r in results], ["0\n", "1\n", "2\n", "3\n"])

    def test_tokens_are_unique_and_random(self):
        tokens = {self.submit({"source_code": "1", "language_id": 71}, query="wait=false")["token"] for _ in range(5)}
        self.assertEqual(len(tokens), 5)
        for t in tokens:
            self.assertRegex(t, UUID)
            self.assertEqual(self.result_of(t)["status"]["id"], 3)

    def test_endpoints_are_opt_in(self):
        self.assert_error(self.call("GET", "/languages", tenant="plain"), 403, "not allowed")
        self.assert_error(self.call("POST", "/submissions?wait=true", {"source_code": "1", "language_id": 71}, tenant="plain"),
                          403, "not allowed")

    # ---- errors ---------------------------------------------------------------------------

    def test_field_errors_in_judges0_shape(self):
        st, headers, data = self.call("POST", "/submissions?wait=true", {"language_id": 999})
        self.assertEqual(st, 422, data)
        self.assertEqual(data["source_code"], ["can't be blank"])
        self.assertEqual(data["language_id"], ["language with id 999 doesn't exist"])
        self.assertEqual(data["request_id"], headers["x-request-id"])
        self.assertEqual(data["message"], "source_code can't be blank")
        refused = [
            ({"enable_network": True}, "enable_network", "is not allowed: boxes have no network"),
            ({"compiler_options": "-O3 -fplugin=evil.so"}, "compiler_options",
             "compiler_options are not allowed for language python: it accepts no compiler options"),
            ({"callback_url": "https://example.com/cb"}, "callback_url",
             "callbacks are not enabled for this tenant (its configuration lists no allowed URL prefixes)"),
            ({"number_of_runs": 21}, "number_of_runs", "must be between 1 and 20"),
            ({"command_line_arguments": "x; cat /etc/passwd"}, "command_line_arguments",
             "may only be words separated by spaces, optionally quoted: they are never given to a shell"),
            ({"stack_limit": 65537}, "stack_limit", "must be less than or equal to 65536"),
            ({"cpu_time_limit": -1}, "cpu_time_limit", "must be greater than 0"),
        ]
        for extra, field, msg in refused:
            with self.subTest(field):
                body = {"source_code": "print(1)", "language_id": 71}
                body.update(extra)
                st, _, data = self.call("POST", "/submissions?wait=true", body)
                self.assertEqual(st, 422, data)
                self.assertEqual(data[field], [msg])

    def test_malformed_requests(self):
        self.assert_error(self.call("POST", "/submissions?wait=true", {"source_code": "1", "language_id": 71, "x": 1}), 400,
                          "unknown field: x")
        self.assert_error(self.call("POST", "/submissions?wait=true", {"source_code": "1", "language_id": "71"}), 400,
                          "language_id must be an integer")
        self.assert_error(self.call("POST", "/submissions?wait=true", "{not json", headers={"Content-Type": "application/json"}),
                          400, "invalid JSON")
        self.assert_error(self.call("POST", "/submissions?wait=true", "a=1", headers={"Content-Type": "text/plain"}), 415,
                          "Content-Type")
        self.assert_error(self.call("POST", "/submissions?wait=maybe", {"source_code": "1", "language_id": 71}), 400,
                          "wait must be true or false")
        self.assert_error(self.call("POST", "/submissions?priority=1", {"source_code": "1", "language_id": 71}), 400,
                          "unknown query parameter: priority")
        # above the tenant's ceiling: policy's 400, as execute
        self.assert_error(self.call("POST", "/submissions?wait=true", {"source_code": "1", "language_id": 71,
                                                                       "wall_time_limit": 30}), 400, "run_timeout")
        self.assert_error(self.call("GET", "/submissions"), 405, "method not allowed")
        self.assert_error(self.call("DELETE", "/submissions/00000000-0000-4000-8000-000000000000"), 405, "method not allowed")
        self.assert_error(self.call("GET", "/submissions/a/b"), 404, "not found")

    # ---- the audit trail --------------------------------------------------------------------

    def test_audit_records_and_packet(self):
        st, headers, data = self.call("POST", "/submissions?wait=true",
                                      {"source_code": "print(input())", "language_id": 71, "stdin": "aud"})
        self.assertEqual(st, 201, data)
        rid = headers["x-request-id"]

        def mine():
            return [r for r in self.stack.audit_records() if r.get("request_id") == rid]
        wait_until(lambda: len(mine()) >= 2, "the decision and result records")
        recs = mine()
        req = next(r for r in recs if r["type"] == "request")
        res = next(r for r in recs if r["type"] == "result")
        for r in (req, res):
            self.assertEqual((r["decision"], r["tenant"], r["method"]), ("allowed", "alpha", "POST"), r)
        self.assertEqual((req["language"], req["version"]), ("python", "*"))
        self.assertEqual(req["files"][0]["name"], "script.py")
        self.assertEqual(req["files"][0]["sha256"], hashlib.sha256(b"print(input())").hexdigest())
        self.assertEqual(req["stdin_bytes"], 3)
        self.assertEqual(req["limits"]["run_timeout_ms"], 2000)
        self.assertEqual(req["judge0"], {"token": data["token"], "language_id": 71, "wait": True, "base64_encoded": False})
        self.assertEqual(res["judge0"], {"token": data["token"], "status": {"id": 3, "description": "Accepted"}})
        self.assertEqual(res["run"]["status"], "OK")
        self.assertRegex(res["packet"], "^[0-9a-f]{64}$")
        p = subprocess.run([MOAT_AUDIT, "show", self.stack.audit_dir, rid, "--raw-packet"], capture_output=True)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(hashlib.sha256(p.stdout).hexdigest(), res["packet"])
        pk = json.loads(p.stdout)
        self.assertEqual(pk["request"]["language"], "python")
        self.assertEqual(pk["result"]["token"], data["token"])
        self.assertEqual(base64.b64decode(pk["result"]["stdout"]), b"aud\n")  # texts in base64: any bytes survive
        self.assertEqual(pk["result"]["status"]["id"], 3)


if __name__ == "__main__":
    unittest.main()
