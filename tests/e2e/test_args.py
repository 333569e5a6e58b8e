"""S26: no user string is read as an option by a language's tools.

A file name reaches a compiler or interpreter on its command line, and an
argument reaches the program through one: a name like "@o" makes gcc read
the file "o" as more options (-wrapper then runs the tenant's code during
the compile stage, under the compile limits), "--version" makes python
print its version instead of running the file, "inspect" makes node start
its debugger.  The backend refuses names that begin with '-' or '@' (so
does the gateway, with a 400), passes every file as "./name" (and after
"--" where the tool knows it), and puts the arguments after the script or
the compiled program, so they are the program's.

Every language is run for real through `moat-backend run` (and the gateway
once): its program prints its arguments one per line, so what the tool took
for itself is missing from the output.
"""

import json
import os
import shutil
import subprocess
import tempfile
import unittest

from moat_harness import BACKEND, BUSY_MACHINE_WALL, LANGUAGES, Stack, uid_base

# Arguments every tool here would take as its own option, @-file or end of options.
OPTION_ARGS = ["-e", "--version", "@x", "-", "--", "-c", "-o", "--help", "-v"]

# language: (entry file name, program printing each argument as "[arg]" on a line)
PROGRAMS = {
    "python": ("main.py", "import sys\nfor a in sys.argv[1:]:\n    print('[%s]' % a)\n"),
    "bash": ("main.sh", 'for a in "$@"; do printf "[%s]\\n" "$a"; done\n'),
    "c": ("main.c", '#include <stdio.h>\nint main(int c, char **v) { for (int i = 1; i < c; i++) printf("[%s]\\n", v[i]); '
                    "return 0; }\n"),
    "c++": ("main.cpp", '#include <cstdio>\nint main(int c, char **v) { for (int i = 1; i < c; i++) std::printf("[%s]\\n", '
                        "v[i]); return 0; }\n"),
    "javascript": ("main.js", "for (const a of process.argv.slice(2)) console.log('[' + a + ']');\n"),
    "lua": ("main.lua", "for _, a in ipairs(arg) do print('[' .. a .. ']') end\n"),
    "ruby": ("main.rb", 'ARGV.each { |a| puts "[#{a}]" }\n'),
    "perl": ("main.pl", 'print "[$_]\\n" for @ARGV;\n'),
    "go": ("main.go", 'package main\n\nimport (\n\t"fmt"\n\t"os"\n)\n\n'
                      'func main() {\n\tfor _, a := range os.Args[1:] {\n\t\tfmt.Printf("[%s]\\n", a)\n\t}\n}\n'),
    "rust": ("main.rs", 'fn main() { for a in std::env::args().skip(1) { println!("[{}]", a); } }\n'),
    "java": ("Main.java", 'public class Main { public static void main(String[] a) { for (String s : a) '
                          'System.out.println("[" + s + "]"); } }\n'),
    # the sqlite3 shell takes no program arguments: its manifest passes none
    "sqlite3": ("main.sql", "select '[' || (6 * 7) || ']';\n"),
}
COMPILED = {"c", "c++", "go", "rust"}

# Names each tool would read as an option (or, with '@', as a file of options).
OPTION_NAMES = ["-e", "--version", "@x"]

# gcc's @file attack: "@o" names the option file "o", whose -wrapper runs a
# shell during the compile stage.  The marker is computed by that shell, so
# a compiler error quoting the file cannot show it.
WRAPPER_OPTIONS = "-wrapper '/bin/sh,-c,echo moat-$((40+2)) >&2'\n"
WRAPPER_MARKER = "moat-42"


def expected(language, args):
    if language == "sqlite3":
        return "[42]\n"
    return "".join("[%s]\n" % a for a in args)


class Job:
    """One job's files in a temp dir, run with `moat-backend run`."""

    def __init__(self, files):
        self.dir = tempfile.mkdtemp(prefix="moat-args-")
        self.paths = []
        for name, content in files:
            path = os.path.join(self.dir, name)
            with open(path, "w") as f:
                f.write(content)
            self.paths.append(path)

    def run(self, language, args=(), extra=()):
        """(exit status, parsed result or None, stderr)"""
        tag = "moat-a%d" % os.getpid()
        cmd = [BACKEND, "run", "-L", LANGUAGES, "-r", "/run/" + tag, "-n", tag, "--uid-base", str(uid_base(tag)), "-l", language, *extra]
        cmd += ["--arg=" + a for a in args]
        # the paths are absolute: none reads as an option of moat-backend itself
        p = subprocess.run(cmd + self.paths, capture_output=True, timeout=300)
        result = json.loads(p.stdout) if p.returncode == 0 else None
        return p.returncode, result, p.stderr.decode(errors="replace")

    def close(self):
        shutil.rmtree(self.dir, ignore_errors=True)


def run_job(language, files, args=()):
    job = Job(files)
    try:
        return job.run(language, args, BUSY_MACHINE_WALL)
    finally:
        job.close()


class ArgumentsTest(unittest.TestCase):
    """Option-like arguments reach the program, never the interpreter or compiler."""

    def test_s26_option_like_arguments_reach_the_program(self):
        for language, (name, program) in PROGRAMS.items():
            with self.subTest(language=language):
                rc, d, err = run_job(language, [(name, program)], OPTION_ARGS)
                self.assertEqual(rc, 0, err)
                if language in COMPILED:
                    self.assertIsNone(d["compile"]["status"], d["compile"])
                self.assertEqual(d["run"]["stdout"], expected(language, OPTION_ARGS), d["run"])
                self.assertIsNone(d["run"]["status"], d["run"])


class FileNamesTest(unittest.TestCase):
    """Option-like file names are refused by the backend, whatever the gateway checked."""

    def assert_refused(self, rc, d, err, index):
        self.assertEqual(rc, 2, d)
        self.assertIn("files[%d].name must not begin with '-' or '@'" % index, err)
        self.assertNotIn(WRAPPER_MARKER, err)

    def test_s26_option_like_entry_file_is_refused(self):
        # python would print its version, gcc read an option file, java
        # take "--version" for its own: each language, each name
        for language, (_, program) in PROGRAMS.items():
            for bad in OPTION_NAMES:
                with self.subTest(language=language, name=bad):
                    self.assert_refused(*run_job(language, [(bad, program)], ["ran"]), 0)

    def test_s26_option_like_second_file_is_refused(self):
        for language, (name, program) in PROGRAMS.items():
            for bad in OPTION_NAMES:
                with self.subTest(language=language, name=bad):
                    self.assert_refused(*run_job(language, [(name, program), (bad, "-v\n")], ["ran"]), 1)

    def test_s26_gcc_option_file_payload_does_not_run(self):
        # the sandbox finding: files "@o" and "o" ran the tenant's shell in the compile stage
        for language in ("c", "c++"):
            name, program = PROGRAMS[language]
            with self.subTest(language=language):
                rc, d, err = run_job(language, [(name, program), ("@o", "int unused;\n"), ("o", WRAPPER_OPTIONS)])
                self.assert_refused(rc, d, err, 1)

    def test_s26_names_are_passed_as_paths(self):
        # "inspect" starts node's debugger when it is node's first word: as
        # "./inspect" it is the program.  Names that begin with '-' or '@'
        # never get this far; this shows the "./" every name gets.
        rc, d, err = run_job("javascript", [("inspect", PROGRAMS["javascript"][1])], ["ran"])
        self.assertEqual(rc, 0, err)
        self.assertEqual(d["run"]["stdout"], "[ran]\n", d["run"])
        self.assertIsNone(d["run"]["status"], d["run"])


class GatewayTest(unittest.TestCase):
    """The gateway refuses the same names with a clear 400, and passes option-like arguments on."""

    @classmethod
    def setUpClass(cls):
        cls.stack = Stack().start()

    @classmethod
    def tearDownClass(cls):
        cls.stack.stop()

    def test_s26_option_like_name_is_a_400_naming_the_rule(self):
        name, program = PROGRAMS["c"]
        for bad in OPTION_NAMES + ["@o"]:
            with self.subTest(name=bad):
                status, _, body = self.stack.request("POST", "/api/v2/execute", {
                    "language": "c", "version": "*",
                    "files": [{"name": name, "content": program}, {"name": bad, "content": WRAPPER_OPTIONS}]})
                self.assertEqual(status, 400, body)
                self.assertEqual(body["code"], "invalid_request", body)
                self.assertIn("files[1].name must not begin with '-' or '@'", body["message"])

    def test_s26_option_like_arguments_reach_the_program(self):
        name, program = PROGRAMS["python"]
        status, _, body = self.stack.request("POST", "/api/v2/execute", {
            "language": "python", "version": "*", "files": [{"name": name, "content": program}],
            "args": OPTION_ARGS})
        self.assertEqual(status, 200, body)
        self.assertEqual(body["run"]["stdout"], expected("python", OPTION_ARGS), body)


if __name__ == "__main__":
    unittest.main()
