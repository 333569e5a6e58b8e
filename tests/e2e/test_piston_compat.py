"""Piston compatibility (issue 12, item 5), through the real gateway and boxes.

What a Piston client sends and reads must work unchanged: a failed compile
answers with the compile result in `run` too (Piston's api/v2.js does so
"for backward compatibility"); run_cpu_time and compile_cpu_time lower the
CPU clocks; files may live in sub-directories (`pkg/mod.py`); versions are
semver ranges (`^3`, `>=3 <4`, `3.x || 4`).  Fields Piston does not know
are still refused with a 400 that names them.
"""

import unittest

from moat_harness import Stack

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
