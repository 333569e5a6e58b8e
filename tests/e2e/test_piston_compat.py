"""Piston compatibility (issue 12, item 5), through the real gateway and boxes.

What a Piston client sends and reads must work unchanged: a failed compile
answers with the compile result in `run` too (Piston's api/v2.js does so
"for backward compatibility"); run_cpu_time and compile_cpu_time lower the
CPU clocks; files may live in sub-directories (`pkg/mod.py`); versions are
semver ranges (`^3`, `>=3 <4`, `3.x || 4`).  Fields Piston does not know
are still refused with a 400 that names them.
"""

import socket
import time
import unittest

from moat_harness import MSG_ERROR, MSG_EXEC_REQUEST, Stack, error_of, frame, read_frame, tlv

C_BROKEN = "int main(void) { return undefined_name; }\n"
BUSY = "while True:\n    pass\n"


class PistonCompatTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.stack = Stack().start()

    @classmethod
    def tearDownClass(cls):
        cls.stack.stop()

    def execute(self, body):
        return self.stack.request("POST", "/api/v2/execute", body)

    def run_ok(self, body):
        status, _, data = self.execute(body)
        self.assertEqual(status, 200, data)
        return data

    def refused(self, body, needle, want=400):
        status, _, data = self.execute(body)
        self.assertEqual(status, want, data)
        self.assertIn(needle, data["message"])
        return data

    # ---- a failed compile --------------------------------------------------

    def test_failed_compile_repeats_compile_as_run(self):
        data = self.run_ok({"language": "c", "version": "*", "files": [{"name": "main.c", "content": C_BROKEN}]})
        self.assertEqual(data["compile"]["code"], 1, data)
        self.assertIn("undefined_name", data["compile"]["stderr"])
        self.assertEqual(data["run"], data["compile"])

    def test_successful_compile_keeps_its_own_run(self):
        data = self.run_ok({"language": "c", "version": "*",
                            "files": [{"name": "main.c", "content": "#include <stdio.h>\nint main(void){puts(\"hi\");}\n"}]})
        self.assertEqual(data["compile"]["code"], 0, data)
        self.assertEqual(data["run"]["stdout"], "hi\n")
        self.assertNotEqual(data["run"], data["compile"])

    # ---- run_cpu_time / compile_cpu_time -------------------------------------

    def test_run_cpu_time_lowers_the_cpu_clock(self):
        data = self.run_ok({"language": "python", "version": "*", "files": [{"content": BUSY}], "run_cpu_time": 300})
        run = data["run"]
        self.assertEqual(run["status"], "TO", run)
        self.assertEqual(run["message"], "cpu-time limit exceeded")
        self.assertGreaterEqual(run["cpu_time"], 250)
        self.assertLess(run["wall_time"], 2500)  # not the 3000 ms wall clock

    def test_compile_cpu_time_lowers_the_compile_clock(self):
        data = self.run_ok({"language": "c", "version": "*", "compile_cpu_time": 1,
                            "files": [{"name": "main.c", "content": "#include <stdio.h>\nint main(void){puts(\"hi\");}\n"}]})
        self.assertEqual(data["compile"]["status"], "TO", data)
        self.assertEqual(data["run"], data["compile"])

    def test_cpu_time_within_ceiling_runs(self):
        data = self.run_ok({"language": "python", "version": "*", "files": [{"content": "print(6*7)"}],
                            "run_cpu_time": 3000, "compile_cpu_time": 10000})
        self.assertEqual(data["run"]["stdout"], "42\n")

    def test_cpu_time_refusals_name_the_field(self):
        base = {"language": "python", "version": "*", "files": [{"content": "print(1)"}]}
        # the tenant's ceiling (its run_timeout ceiling: a CPU clock never outruns the wall clock)
        self.refused(dict(base, run_cpu_time=3001), "run_cpu_time cannot exceed the tenant's limit of 3000 ms")
        self.refused(dict(base, compile_cpu_time=10001), "compile_cpu_time cannot exceed the tenant's limit of 10000 ms")
        self.refused(dict(base, run_cpu_time=0), "run_cpu_time must be -1 or a positive integer")
        self.refused(dict(base, compile_cpu_time=-2), "compile_cpu_time must be -1")
        self.refused(dict(base, run_cpu_time="100"), "run_cpu_time must be an integer")

    # ---- nested file paths -------------------------------------------------

    def test_python_imports_a_module_from_a_package_dir(self):
        data = self.run_ok({"language": "python", "version": "3", "files": [
            {"name": "main.py", "content": "from pkg.mod import answer\nfrom pkg import other\nprint(answer(), other.X)\n"},
            {"name": "pkg/mod.py", "content": "def answer():\n    return 42\n"},
            {"name": "pkg/other.py", "content": "X = 'shared dir'\n"}]})  # two files, one directory
        self.assertEqual(data["run"]["stdout"], "42 shared dir\n", data)

    def test_c_includes_a_header_from_src(self):
        data = self.run_ok({"language": "c", "version": "*", "files": [
            {"name": "main.c", "content": '#include <stdio.h>\n#include "src/util.h"\nint main(void){printf("%d\\n", twice(21));}\n'},
            {"name": "src/util.h", "content": "static int twice(int x) { return 2 * x; }\n"}]})
        self.assertEqual(data["compile"]["code"], 0, data)
        self.assertEqual(data["run"]["stdout"], "42\n", data)

    def test_nested_entry_file_gets_its_extension_in_its_directory(self):
        # the entry rule still holds below a directory: "src/prog" is compiled as "src/main.c", next to its header
        data = self.run_ok({"language": "c", "version": "*", "files": [
            {"name": "src/prog", "content": '#include <stdio.h>\n#include "util.h"\nint main(void){puts(WORD);}\n'},
            {"name": "src/util.h", "content": '#define WORD "nested"\n'}]})
        self.assertEqual(data["compile"]["code"], 0, data)
        self.assertEqual(data["run"]["stdout"], "nested\n", data)

    def test_box_holds_only_directories_and_regular_files_the_program_owns(self):
        # what the request made: regular files, directories of the slot's uid (writable), no link
        code = ("import os\n"
                "for d, dirs, files in os.walk('.'):\n"
                "    for n in sorted(dirs + files):\n"
                "        p = os.path.join(d, n); st = os.lstat(p)\n"
                "        kind = 'link' if os.path.islink(p) else 'dir' if os.path.isdir(p) else 'file'\n"
                "        print(p, kind, st.st_uid == os.getuid() if kind == 'dir' else '')\n"
                "open('a/b/new.txt', 'w').write('ok')\n")
        data = self.run_ok({"language": "python", "version": "*", "files": [
            {"name": "main.py", "content": code}, {"name": "a/b/c.txt", "content": "x"}, {"name": "a/d.txt", "content": "y"}]})
        self.assertEqual(data["run"]["code"], 0, data)
        self.assertEqual(data["run"]["stdout"].splitlines(), [
            "./a dir True", "./main.py file ", "./a/b dir True", "./a/d.txt file ", "./a/b/c.txt file "])

    def test_s26_path_tricks_are_a_400_naming_the_file(self):
        cases = {
            "../x": "files[1].name must not have a '.' or '..' component (\"../x\")",
            "a/../../x": "must not have a '.' or '..' component (\"a/../../x\")",
            "a/./b": "must not have a '.' or '..' component (\"a/./b\")",
            "/etc/x": "files[1].name must be a relative path (no leading '/') (\"/etc/x\")",
            "a//b": "files[1].name must not have an empty component ('//' or a trailing '/') (\"a//b\")",
            "a/": "must not have an empty component",
            "1/2/3/4/5/6/7/8/9": "files[1].name must not have more than 8 components",
            "pkg/-o": "files[1].name must not begin with '-' or '@', nor may any of its directories (\"pkg/-o\")",
            "@opts/x": "must not begin with '-' or '@'",
            "a/\nb": "files[1].name must not hold control characters",
        }
        for name, needle in cases.items():
            with self.subTest(name=name):
                data = self.refused({"language": "python", "version": "*",
                                     "files": [{"name": "main.py", "content": "print(1)"}, {"name": name, "content": "x"}]}, needle)
                self.assertEqual(data["code"], "invalid_request")

    def test_s26_a_name_that_is_both_file_and_directory_is_a_400(self):
        for files, needle in (
                (["main.py", "pkg", "pkg/mod.py"], 'files[1].name "pkg" is a file, and a directory of files[2].name "pkg/mod.py"'),
                (["main.py", "a/b/c", "a/b"], 'files[2].name "a/b" is a file, and a directory of files[1].name "a/b/c"')):
            with self.subTest(files=files):
                self.refused({"language": "python", "version": "*",
                              "files": [{"name": n, "content": "print(1)"} for n in files]}, needle)

    def test_s26_backend_refuses_path_tricks_itself(self):
        # straight to the backend's socket, past the gateway: it checks again (moat_path.h)
        def request(*names):
            p = tlv(1, b"python") + tlv(2, b"*")
            for n in names:
                p += tlv(3, tlv(1, n.encode()) + tlv(2, b"print(1)"))
            return frame(MSG_EXEC_REQUEST, 7, p)
        for names, want in ((("main.py", "../x"), "files[1].name must not have a '.' or '..' component (\"../x\")"),
                            (("main.py", "/etc/x"), "files[1].name must be a relative path"),
                            (("main.py", "a//b"), "files[1].name must not have an empty component"),
                            (("main.py", "d/-o"), "files[1].name must not begin with '-' or '@'"),
                            (("pkg", "pkg/x.py"), "files[0].name and files[1].name: one is a file and a directory of the other")):
            with self.subTest(names=names):
                s = socket.socket(socket.AF_UNIX)
                s.settimeout(30)
                s.connect(self.stack.socket)
                try:
                    s.sendall(request(*names))
                    t, _, body = read_frame(s)
                    self.assertEqual(t, MSG_ERROR)
                    code, message = error_of(body)
                    self.assertEqual(code, 1)
                    self.assertIn(want, message)
                finally:
                    s.close()

    # ---- semver ranges -------------------------------------------------------

    def test_semver_ranges_pick_the_installed_version(self):
        installed = self.python_version()
        major, minor = installed.split(".")[:2]
        for selector in ("^%s.%s" % (major, int(minor) - 1), ">=%s" % major, "~%s.%s" % (major, minor), "%s.x" % major,
                         ">=%s.0 <%d" % (major, int(major) + 1), "%s || %d" % (major, int(major) + 1), "*",
                         "%s.0 - %s" % (major, major)):
            with self.subTest(selector=selector):
                data = self.run_ok({"language": "python", "version": selector, "files": [{"content": "print(42)"}]})
                self.assertEqual(data["version"], installed, data)
                self.assertEqual(data["run"]["stdout"], "42\n")

    def test_a_range_that_picks_nothing_is_unknown(self):
        major = int(self.python_version().split(".")[0])
        self.refused({"language": "python", "version": ">=%d" % (major + 1), "files": [{"content": "1"}]},
                     "python->=%d runtime is unknown" % (major + 1))

    def test_a_selector_that_does_not_parse_is_a_400(self):
        for selector in (">=", "^3 ||<", "3.x.4 >1"):
            with self.subTest(selector=selector):
                self.refused({"language": "python", "version": selector, "files": [{"content": "1"}]},
                             "version \"%s\" is neither a version nor a semver range" % selector)

    def python_version(self):
        status, _, data = self.stack.request("GET", "/api/v2/runtimes")
        self.assertEqual(status, 200, data)
        return next(r["version"] for r in data if r["language"] == "python")


class SemverPolicyTest(unittest.TestCase):
    """A range is judged as the version it picks: a pinned policy cannot be widened by a range."""

    @classmethod
    def setUpClass(cls):
        extra = Stack.DEFAULT_TENANT_EXTRA
        cls.stack = Stack(tenants=[
            ("major", extra + "languages:\n  - {language: python, version: \"3\"}\n", ""),
            ("pinned", extra + "languages:\n  - {language: python, version: \"3.10\"}\n", ""),
        ]).start()

    @classmethod
    def tearDownClass(cls):
        cls.stack.stop()

    def execute(self, tenant, version):
        return self.stack.request("POST", "/api/v2/execute", {"language": "python", "version": version,
                                                              "files": [{"content": "print(42)"}]},
                                  token=self.stack.tokens[tenant])

    def test_range_within_the_policy_runs(self):
        for version in ("^3.9", ">=3 <4", "~3", "3 || 4"):
            with self.subTest(version=version):
                status, _, data = self.execute("major", version)
                self.assertEqual(status, 200, data)
                self.assertEqual(data["run"]["stdout"], "42\n")

    def test_range_that_picks_a_version_outside_the_policy_is_403(self):
        # ">=3.10" could be read as "3.10 and up"; it picks the installed 3.11, which "3.10" does not allow
        for version in (">=3.10", "^3.10", "3.10 - 3.99"):
            with self.subTest(version=version):
                status, _, data = self.execute("pinned", version)
                self.assertEqual(status, 403, data)
                self.assertIn("is not allowed for this tenant", data["message"])

    def test_range_that_picks_nothing_is_judged_as_sent(self):
        # no installed version: the range itself reaches policy, which allows a range only under "*"
        status, _, data = self.execute("major", ">=99")
        self.assertEqual(status, 403, data)
        self.assertIn('version ">=99" of language "python" is not allowed', data["message"])


class SessionCpuTest(unittest.TestCase):
    """A live session's init takes run_cpu_time too: it lowers the session's cpu clock (SESSION_OPEN tag 10)."""

    @classmethod
    def setUpClass(cls):
        cls.stack = Stack(tenants=[("live", Stack.DEFAULT_TENANT_EXTRA + "endpoints: [execute, runtimes, connect]\n"
                                    "sessions: {wall_ms: 60000, idle_ms: 60000, cpu_ms: 5000}\n", "")]).start()

    @classmethod
    def tearDownClass(cls):
        cls.stack.stop()

    def test_session_run_cpu_time_lowers_the_session_cpu_clock(self):
        # Piston's init takes the execute's fields: run_cpu_time reaches SESSION_OPEN (tag 10)
        from ws_client import connect, events_until_close, init_message, run

        async def go(**extra):
            ws = await connect(self.stack)
            await ws.send(init_message("python", BUSY, **extra))
            return await events_until_close(ws)

        started = time.monotonic()
        events, code, _ = run(go(run_cpu_time=300))
        exits = [e for e in events if e["type"] == "exit"]
        self.assertEqual(code, 4999, events)
        self.assertEqual((exits[-1]["status"], exits[-1]["clock"]), ("TO", "cpu"), events)
        self.assertLess(time.monotonic() - started, 4)  # 300 ms of CPU, not the session's 5000
        events, code, _ = run(go(run_cpu_time=5001))
        self.assertEqual(code, 4002, events)
        self.assertIn("run_cpu_time cannot exceed the tenant's limit of 5000 ms", events[-1]["message"])


class BackendCpuCeilingTest(unittest.TestCase):
    """The backend's own CPU limit is a ceiling too: a request may only lower it."""

    @classmethod
    def setUpClass(cls):
        cls.stack = Stack(backend_args=["--limit", "run_cpu_time=500"]).start()

    @classmethod
    def tearDownClass(cls):
        cls.stack.stop()

    def test_above_the_backends_cpu_limit_is_refused(self):
        status, _, data = self.stack.request("POST", "/api/v2/execute", {
            "language": "python", "version": "*", "files": [{"content": BUSY}], "run_cpu_time": 1000})
        self.assertEqual(status, 400, data)
        self.assertIn("run_cpu_time cannot exceed the configured limit of 500 ms", data["message"])
        status, _, data = self.stack.request("POST", "/api/v2/execute", {
            "language": "python", "version": "*", "files": [{"content": BUSY}], "run_cpu_time": 200})
        self.assertEqual(status, 200, data)
        self.assertEqual(data["run"]["message"], "cpu-time limit exceeded")
        self.assertLess(data["run"]["cpu_time"], 500)


if __name__ == "__main__":
    unittest.main()
