"""Test cases, compiled once (issue 12, item 3), through the real gateway and boxes.

`tests` on POST /api/v2/execute: one compile stage, then one fresh box per
case holding what the compile left in /box (never another case's files or
processes); a verdict per case (Accepted, Wrong Answer with the first
differing line, Time Limit Exceeded with its clock, Memory Limit Exceeded,
Runtime Error, Output Limit Exceeded, Compilation Error, Skipped) and a
summary; limits per case (only lowering) and for the whole job
(tests_timeout).  Bad input is a 400 naming the field.
"""

import time
import unittest

from moat_harness import Stack, wait_until

# Reads its first argument to decide what to do, so one binary serves every case.
C_JUDGE = r"""
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <dirent.h>

static int others(void)
{
    /* processes of this box but us: the box's init (1) is not listed (hidepid) */
    DIR *d = opendir("/proc");
    struct dirent *e;
    int n = 0;
    while (d && (e = readdir(d)) != NULL) {
        int pid = atoi(e->d_name);
        if (pid > 0 && pid != getpid())
            n++;
    }
    if (d)
        closedir(d);
    return n;
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "sum";
    if (strcmp(mode, "sum") == 0) {
        long a, b;
        if (scanf("%ld %ld", &a, &b) != 2)
            return 2;
        printf("%ld\n", a + b);
    } else if (strcmp(mode, "float") == 0) {
        printf("%.9f\n", 1.0 / 3.0);
    } else if (strcmp(mode, "loop") == 0) {
        for (volatile unsigned long i = 0;; i++)
            ;
    } else if (strcmp(mode, "sleep") == 0) {
        sleep(atoi(argc > 2 ? argv[2] : "10"));
        puts("woke");
    } else if (strcmp(mode, "memory") == 0) {
        size_t n = 512u << 20;
        volatile char *p = malloc(n); /* volatile: every page is really touched */
        for (size_t i = 0; p && i < n; i += 4096)
            p[i] = 1;
        puts("allocated");
    } else if (strcmp(mode, "exit") == 0) {
        return 3;
    } else if (strcmp(mode, "abort") == 0) {
        abort();
    } else if (strcmp(mode, "flood") == 0) {
        for (;;)
            fputs("yyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyy\n", stdout);
    } else if (strcmp(mode, "leave") == 0) {
        /* a file in /box and /tmp, and a process that outlives us */
        FILE *f = fopen("/box/left-behind", "w");
        FILE *g = fopen("/tmp/left-behind", "w");
        if (!f || !g)
            return 4;
        fputs("x", f);
        fputs("x", g);
        fclose(f);
        fclose(g);
        if (fork() == 0) {
            setsid();
            sleep(30);
            _exit(0);
        }
        puts("left");
    } else if (strcmp(mode, "look") == 0) {
        struct stat st;
        printf("box=%d tmp=%d others=%d\n", stat("/box/left-behind", &st) == 0, stat("/tmp/left-behind", &st) == 0, others());
    }
    return 0;
}
"""

C_BROKEN = "int main(void) { return undefined_name; }\n"


def case(name, args=None, **kw):
    c = {"name": name}
    if args is not None:
        c["args"] = args
    c.update(kw)
    return c


class TestCasesTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.stack = Stack().start()

    @classmethod
    def tearDownClass(cls):
        cls.stack.stop()

    def execute(self, body):
        return self.stack.request("POST", "/api/v2/execute", body, timeout=120)

    def judge(self, tests, source=C_JUDGE, language="c", **extra):
        body = {"language": language, "version": "*", "files": [{"name": "main.c", "content": source}], "tests": tests}
        body.update(extra)
        status, _, data = self.execute(body)
        self.assertEqual(status, 200, data)
        self.assertEqual(len(data["tests"]), len(tests), data)
        return data

    def refused(self, body, needle):
        status, _, data = self.execute(body)
        self.assertEqual(status, 400, data)
        self.assertIn(needle, data["message"])

    # ---- verdicts ------------------------------------------------------------

    def test_accepted_and_wrong_answer(self):
        data = self.judge([
            case("ok", ["sum"], stdin="2 3\n", expected_output="5\n"),
            case("trailing space ok", ["sum"], stdin="2 3\n", expected_output="5   \r\n\n\n"),
            case("wrong", ["sum"], stdin="2 3\n", expected_output="6\n"),
            case("no expectation", ["sum"], stdin="1 1\n"),
        ])
        t = data["tests"]
        self.assertEqual([c["verdict"] for c in t], ["Accepted", "Accepted", "Wrong Answer", "Accepted"], t)
        self.assertEqual(t[0]["stdout"], "5\n")
        self.assertEqual(t[0]["code"], 0)
        self.assertEqual(t[2]["diff"], {"line": 1, "expected": "6", "got": "5"})
        self.assertEqual(data["summary"], {"passed": 3, "total": 4, "verdict": "Wrong Answer", "first_failure": "wrong",
                                           "first_failure_index": 2})
        # `run` is the first case's run stage, `compile` the one compile
        self.assertEqual(data["run"]["stdout"], "5\n")
        self.assertEqual(data["compile"]["code"], 0)

    def test_program_reopening_its_streams_by_name(self):
        # a competitive-programming template: fopen("/dev/stdin") etc., in every case's fresh box
        from test_box import DEV_STDIO_C
        data = self.judge([case("one", stdin="2 3\n", expected_output="5\n"),
                           case("two", stdin="40 2\n", expected_output="42\n")], source=DEV_STDIO_C)
        t = data["tests"]
        self.assertEqual([c["verdict"] for c in t], ["Accepted", "Accepted"], t)
        self.assertEqual([c["stderr"] for c in t], ["err\n", "err\n"], t)

    def test_compare_modes(self):
        data = self.judge([
            case("exact differs on a trailing newline", ["sum"], stdin="1 2", expected_output="3", compare="exact"),
            case("tokens", ["sum"], stdin="1 2", expected_output="  3  ", compare="tokens"),
            case("float within", ["float"], expected_output="0.3333334", compare="float", tolerance=1e-6),
            case("float outside", ["float"], expected_output="0.334", compare="float", tolerance=1e-6),
        ])
        self.assertEqual([c["verdict"] for c in data["tests"]], ["Wrong Answer", "Accepted", "Accepted", "Wrong Answer"])

    def test_time_limit_names_its_clock(self):
        data = self.judge([
            case("cpu", ["loop"], run_cpu_time=200),
            case("wall", ["sleep", "10"], run_timeout=300),
            case("fine", ["sum"], stdin="4 4", expected_output="8"),
        ])
        t = data["tests"]
        self.assertEqual(t[0]["verdict"], "Time Limit Exceeded", t[0])
        self.assertEqual(t[0]["clock"], "cpu")
        self.assertEqual(t[1]["verdict"], "Time Limit Exceeded", t[1])
        self.assertEqual(t[1]["clock"], "wall")
        self.assertLess(t[1]["wall_time"], 2000)
        # a case's limits are its own: the next case ran normally
        self.assertEqual(t[2]["verdict"], "Accepted")

    def test_memory_runtime_and_output_limit(self):
        data = self.judge([
            case("memory", ["memory"], run_memory_limit=64 * 1024 * 1024),
            case("exit code", ["exit"]),
            case("signal", ["abort"]),
            case("flood", ["flood"]),
        ])
        t = data["tests"]
        self.assertEqual([c["verdict"] for c in t],
                         ["Memory Limit Exceeded", "Runtime Error", "Runtime Error", "Output Limit Exceeded"],
                         [(c["verdict"], c["message"], c["memory"]) for c in t])
        self.assertEqual(len(t[3]["stdout"]), 64 * 1024)
        self.assertEqual(t[1]["code"], 3)
        self.assertEqual(t[2]["signal"], "SIGABRT")
        self.assertEqual(data["summary"]["passed"], 0)
        self.assertEqual(data["summary"]["first_failure"], "memory")

    def test_compilation_error(self):
        data = self.judge([case("a", ["sum"], stdin="1 1", expected_output="2"), case("b")], source=C_BROKEN)
        self.assertEqual([c["verdict"] for c in data["tests"]], ["Compilation Error"] * 2)
        self.assertIn("undefined_name", data["compile"]["stderr"])
        self.assertEqual(data["run"], data["compile"])
        self.assertEqual(data["summary"]["verdict"], "Compilation Error")

    # ---- isolation -----------------------------------------------------------

    def test_a_case_sees_no_other_cases_files_or_processes(self):
        data = self.judge([case("leave", ["leave"]), case("look", ["look"])])
        t = data["tests"]
        self.assertEqual(t[0]["stdout"], "left\n", t[0])
        self.assertEqual(t[1]["stdout"], "box=0 tmp=0 others=0\n", t[1])

    def test_interpreted_cases_are_fresh_too(self):
        src = ("import os, sys\n"
               "if sys.argv[1:] == ['leave']:\n"
               "    open('/box/left', 'w').write('x')\n"
               "print(os.path.exists('/box/left'))\n")
        data = self.judge([case("leave", ["leave"]), case("look", [])], source=src, language="python",
                          files=[{"name": "main.py", "content": src}])
        self.assertEqual([c["stdout"] for c in data["tests"]], ["True\n", "False\n"])
        self.assertNotIn("compile", data)

    # ---- compiled once -------------------------------------------------------

    def test_compiled_once(self):
        n = 12
        started = time.monotonic()
        data = self.judge([case("c%d" % i, ["sum"], stdin="%d 1" % i, expected_output=str(i + 1)) for i in range(n)])
        elapsed_ms = (time.monotonic() - started) * 1000
        self.assertEqual(data["summary"]["passed"], n, data["summary"])
        # one compile stage in the answer, and none hidden in the cases: the
        # whole job took less than compiling n times would have
        self.assertIn("compile", data)
        compile_ms = data["compile"]["wall_time"]
        self.assertGreater(compile_ms, 0)
        self.assertLess(elapsed_ms, compile_ms * n, (elapsed_ms, compile_ms))
        # the binary the cases ran is the one compile's
        for c in data["tests"]:
            self.assertNotIn("compile", c)

    # ---- limits --------------------------------------------------------------

    def test_job_wall_budget_skips_the_rest(self):
        data = self.judge([case("s%d" % i, ["sleep", "1"], expected_output="woke") for i in range(6)], tests_timeout=2500)
        verdicts = [c["verdict"] for c in data["tests"]]
        self.assertIn("Skipped", verdicts, verdicts)
        self.assertEqual(verdicts[0], "Accepted")
        self.assertLess(verdicts.count("Accepted"), 6)
        skipped = [c for c in data["tests"] if c["verdict"] == "Skipped"]
        self.assertNotIn("stdout", skipped[0])

    def test_job_budget_fits_the_gateways_backend_timeout(self):
        # the harness's backend timeout is 30 s: less the 10 s compile ceiling and a second
        body = {"language": "c", "version": "*", "files": [{"name": "main.c", "content": C_JUDGE}],
                "tests_timeout": 100000, "tests": [case("a", ["sum"], stdin="1 1")]}
        self.refused(body, "tests_timeout cannot exceed 19000 ms")
        # not asked: that budget, recorded in the decision
        data = self.judge([case("a", ["sum"], stdin="1 1", expected_output="2")])
        self.assertEqual(data["summary"]["passed"], 1)

    def test_case_limit_cannot_raise_the_request_limit(self):
        body = {"language": "c", "version": "*", "files": [{"name": "main.c", "content": C_JUDGE}], "run_timeout": 1000,
                "tests": [case("a", ["sum"], run_timeout=2000)]}
        self.refused(body, "tests[0].run_timeout cannot exceed")

    # ---- bad input -----------------------------------------------------------

    def test_bad_input_is_a_400_naming_the_field(self):
        base = {"language": "python", "version": "*", "files": [{"content": "print(1)"}]}
        cases = [
            ({"tests": {}}, "tests must be an array"),
            ({"tests": []}, "tests must hold between 1 and 64 cases"),
            ({"tests": [{}] * 65}, "tests must hold between 1 and 64 cases"),
            ({"tests": [1]}, "tests[0] must be an object"),
            ({"tests": [{"nmae": "x"}]}, "tests[0]: unknown field 'nmae'"),
            ({"tests": [{"compare": "fuzzy"}]}, "tests[0].compare must be one of"),
            ({"tests": [{"tolerance": 0.1}]}, "tests[0].tolerance goes with compare \"float\" only"),
            ({"tests": [{"compare": "float", "tolerance": -1}]}, "tests[0].tolerance must be a non-negative number"),
            ({"tests": [{"run_timeout": 0}]}, "tests[0].run_timeout must be -1 or a positive integer"),
            ({"tests": [{}, {"args": [1]}]}, "tests[1].args[0] must be a string"),
            ({"tests": [{"expected_output": 5}]}, "tests[0].expected_output must be a string"),
            ({"tests": [{"name": ""}]}, "tests[0].name must be 1 to"),
            ({"tests_timeout": 100}, "tests_timeout goes with tests only"),
            ({"tests": [{}], "tests_timeout": 0}, "tests_timeout must be -1 or a positive integer"),
        ]
        for extra, needle in cases:
            with self.subTest(needle=needle):
                body = dict(base)
                body.update(extra)
                self.refused(body, needle)

    def test_tests_are_not_streamed(self):
        body = {"language": "python", "version": "*", "files": [{"content": "print(1)"}], "tests": [{}]}
        status, _, data = self.stack.request("POST", "/api/v2/execute", body,
                                             headers={"Accept": "application/x-ndjson"})
        self.assertEqual(status, 400, data)
        self.assertIn("tests cannot be streamed", data["message"])

    # ---- audit ---------------------------------------------------------------

    def test_records_carry_the_cases(self):
        data = self.judge([case("ok", ["sum"], stdin="1 1", expected_output="2"), case("bad", ["exit"])])
        self.assertEqual(data["summary"]["passed"], 1)
        seen = {}

        def both_records():
            records = seen["records"] = self.stack.audit_records()
            seen["decided"] = [r for r in records if isinstance(r.get("tests"), dict) and r["tests"].get("count") == 2]
            seen["results"] = [r for r in records if isinstance(r.get("tests"), dict) and "verdicts" in r["tests"]]
            return seen["decided"] and seen["results"]
        wait_until(both_records, "the decision and result records with the tests", detail=lambda: seen.get("records", [])[-3:])
        records, decided, results = seen["records"], seen["decided"], seen["results"]
        self.assertTrue(decided, records[-3:])
        self.assertEqual(len(decided[-1]["tests"]["cases"][0]["stdin_sha256"]), 64)
        self.assertTrue(results, records[-3:])
        self.assertEqual(results[-1]["tests"]["verdicts"], ["Accepted", "Runtime Error"])
        self.assertEqual(results[-1]["tests"]["summary"]["passed"], 1)


if __name__ == "__main__":
    unittest.main()
