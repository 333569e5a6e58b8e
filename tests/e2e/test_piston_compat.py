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


if __name__ == "__main__":
    unittest.main()
