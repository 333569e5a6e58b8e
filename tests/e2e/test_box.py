"""Black-box tests of the box, through `moat-backend run` (real namespaces,
real cgroups, real limits).  Each test fails if its protection is removed."""

import glob
import json
import os
import unittest

from moat_harness import BUSY_MACHINE_WALL, LONG_WALL_MS, backend_run


def run(code, language="python", *extra):
    return backend_run(code, language, extra)["run"]


class BoxTest(unittest.TestCase):
    def test_python_hello(self):
        r = run('print("hello")')
        self.assertEqual(r["stdout"], "hello\n")
        self.assertEqual(r["code"], 0)
        self.assertIsNone(r["status"])

    def test_bash_hello_and_stdin(self):
        r = backend_run('read x; echo "got $x"; echo err >&2', "bash", ("-i", "moat\n"))["run"]
        self.assertEqual(r["stdout"], "got moat\n")
        self.assertEqual(r["stderr"], "err\n")
        self.assertEqual(r["code"], 0)

    def test_argument_with_newline_stays_one_argv_element(self):
        # S3: no user string reaches a shell
        r = backend_run("import sys, json; print(json.dumps(sys.argv[1:]))", "python",
                        ("-a", "a b\nc; echo pwned", "-a", "$(id)"))["run"]
        self.assertEqual(r["stdout"], '["a b\\nc; echo pwned", "$(id)"]\n')

    def test_infinite_loop_hits_wall_limit(self):
        r = run("while True: pass", "python", "--run-timeout", "1000")
        self.assertEqual(r["status"], "TO")
        self.assertGreaterEqual(r["wall_time"], 900)
        self.assertLess(r["wall_time"], 2000)

    def test_sleep_hits_wall_limit(self):
        # the program's sleep is what is tested: it outlasts the wall limit ten times over
        r = run("import time; time.sleep(10)", "python", "--run-timeout", "1000")
        self.assertEqual(r["status"], "TO")
        self.assertLess(r["wall_time"], 2000)
        self.assertLess(r["cpu_time"], 500)

    def test_idle_clock(self):
        # the program's sleeps are what is tested: output 0.3 s apart keeps it alive under a 500 ms idle
        # limit, then silence trips it
        r = run('import time\nprint("a", flush=True)\ntime.sleep(0.3)\nprint("b", flush=True)\ntime.sleep(10)',
                "python", "--idle-timeout", "500")
        self.assertEqual(r["status"], "TO")
        self.assertEqual(r["message"], "idle-time limit exceeded")
        self.assertEqual(r["stdout"], "a\nb\n")
        self.assertGreaterEqual(r["wall_time"], 800)
        self.assertLess(r["wall_time"], 1500)

    def test_cpu_clock(self):
        # Four busy processes under a 2000 ms CPU limit and a wall limit no
        # load can reach: the CPU clock must trip, and it must count all four
        # (had it counted one, the others would have burnt about three times
        # as much again before it tripped), however many cores are free.
        code = "import os\nfor _ in range(3):\n    if os.fork() == 0: break\nwhile True: pass\n"
        r = run(code, "python", "--limit", "run_cpu_time=2000", "--limit", "run_timeout=%d" % LONG_WALL_MS,
                "--run-timeout", str(LONG_WALL_MS))
        self.assertEqual(r["status"], "TO")
        self.assertEqual(r["message"], "cpu-time limit exceeded")
        self.assertGreaterEqual(r["cpu_time"], 1900)
        self.assertLess(r["cpu_time"], 4000)

    def test_output_cap(self):
        r = run('print("x" * 200000)')
        self.assertEqual(r["status"], "OL")
        self.assertEqual(len(r["stdout"]), 64 * 1024)

    def test_output_cap_is_configurable(self):
        # the case: 5,000 characters past a 1,024-byte cap
        r = run('print("z" * 6024)', "python", "--limit", "output=1024")
        self.assertEqual(r["status"], "OL")
        self.assertEqual(r["message"], "stdout length exceeded")
        self.assertEqual(r["stdout"], "z" * 1024)

    def test_stderr_cap(self):
        r = run('import sys; sys.stderr.write("e" * 200000)')
        self.assertEqual(r["status"], "EL")
        self.assertEqual(len(r["stderr"]), 64 * 1024)

    def test_memory_limit(self):
        r = run("a = bytearray(512 * 1024 * 1024)\nprint(len(a))")
        self.assertEqual(r["status"], "ML")
        self.assertEqual(r["message"], "memory limit exceeded")
        self.assertEqual(r["signal"], "SIGKILL")
        self.assertGreater(r["memory"], 200 * 1024 * 1024)
        self.assertLessEqual(r["memory"], 256 * 1024 * 1024)

    def test_s29_child_killed_for_memory_is_ml(self):
        # the program's own process survives and exits 0; its child was killed for memory
        code = ("import os\npid = os.fork()\nif pid == 0:\n    a = bytearray(512 * 1024 * 1024)\n    os._exit(0)\n"
                "_, st = os.waitpid(pid, 0)\nprint('child', os.WTERMSIG(st) if os.WIFSIGNALED(st) else 'exited')\n")
        r = run(code)
        self.assertEqual(r["stdout"], "child 9\n")
        self.assertEqual(r["code"], 0)
        self.assertEqual(r["status"], "ML")
        self.assertEqual(r["message"], "memory limit exceeded")

    def test_fork_bomb_stops_at_pids_limit(self):
        # the children sleep to hold their pids while the parent forks (the sleep is the program under test)
        code = ("import os, time\nn = 0\n"
                "try:\n    while True:\n        if os.fork() == 0:\n            time.sleep(5); os._exit(0)\n"
                "        n += 1\nexcept OSError as e:\n    print(n, e.errno)\n")
        r = run(code)
        self.assertEqual(r["code"], 0, r)
        n, errno = r["stdout"].split()
        self.assertEqual(int(errno), 11)  # EAGAIN
        self.assertLess(int(n), 64)

    def test_network_unreachable(self):
        code = ("import socket\nfor addr in [('127.0.0.1', 22), ('169.254.169.254', 80), ('10.0.0.1', 53)]:\n"
                "    s = socket.socket()\n    try:\n        s.connect(addr); print('connected', addr)\n"
                "    except OSError as e:\n        print(e.errno)\n"
                "try:\n    socket.getaddrinfo('debian.org', 80); print('resolved')\n"
                "except OSError as e:\n    print('dns failed')\n")
        r = run(code)
        lines = r["stdout"].split()
        self.assertNotIn("connected", r["stdout"])
        # loopback is up with nothing listening (ECONNREFUSED); elsewhere no route (ENETUNREACH)
        self.assertEqual(lines[:3], ["111", "101", "101"])
        self.assertEqual(r["stdout"].strip().splitlines()[-1], "dns failed")

    def test_host_secrets_invisible(self):
        code = ("import os\nprint(os.path.exists('/etc/shadow'), os.path.exists('/run/moat'), "
                "os.path.exists('/root'), sorted(os.listdir('/')))")
        r = run(code)
        self.assertEqual(r["stdout"].strip(),
                         "False False False ['bin', 'box', 'dev', 'etc', 'lib', 'lib64', 'proc', 'tmp', 'usr']")

    def test_identity_and_descriptors(self):
        # S8, S25: own pid namespace, slot uid, no capabilities, no_new_privs, fds 0-2 only
        code = ("import os\nfds = sorted(int(x) for x in os.listdir('/proc/self/fd'))\n"
                "st = dict(l.split(':\\t', 1) for l in open('/proc/self/status').read().splitlines())\n"
                "print(os.getpid() < 10, os.getuid() >= 60000, st['CapEff'].strip(), st['NoNewPrivs'].strip(), fds)")
        r = run(code)
        self.assertEqual(r["stdout"].strip(), "True True 0000000000000000 1 [0, 1, 2, 3]")

    def test_root_and_runtime_read_only(self):
        code = ("import os\nfor p in ['/usr/bin/evil', '/evil', '/etc/passwd']:\n"
                "    try:\n        open(p, 'w'); print('wrote', p)\n    except OSError as e:\n        print(e.errno)\n")
        r = run(code)
        self.assertNotIn("wrote", r["stdout"])

    def test_tmp_is_private_per_run(self):
        r1 = run("open('/tmp/marker', 'w').write('x'); open('/box/marker', 'w').write('y'); print('ok')")
        self.assertEqual(r1["stdout"], "ok\n")
        r2 = run("import os; print(os.path.exists('/tmp/marker'), os.path.exists('/box/marker'))")
        self.assertEqual(r2["stdout"], "False False\n")

    def test_environment_is_explicit(self):
        os.environ["MOAT_TEST_SECRET"] = "hunter2"
        r = run("import os; print(sorted(os.environ))")
        self.assertNotIn("MOAT_TEST_SECRET", r["stdout"])
        self.assertEqual(r["stdout"].strip(),
                         "['HOME', 'LANG', 'PATH', 'PYTHONDONTWRITEBYTECODE', 'PYTHONUNBUFFERED']")

    def test_no_controlling_terminal(self):
        r = run("import os\ntry:\n    os.open('/dev/tty', os.O_RDWR); print('tty')\nexcept OSError as e:\n"
                "    print(e.errno)\nprint(os.getsid(0) == os.getpid())")
        self.assertNotIn("tty", r["stdout"].split("\n")[0])
        self.assertEqual(r["stdout"].split()[-1], "True")

    def test_nonzero_exit_is_runtime_error(self):
        r = run("import sys; sys.exit(3)")
        self.assertEqual(r["code"], 3)
        self.assertEqual(r["status"], "RE")

    def test_unknown_language(self):
        from moat_harness import BACKEND, LANGUAGES, uid_base
        import subprocess
        p = subprocess.run([BACKEND, "run", "-L", LANGUAGES, "-r", "/run/moat-tu", "-n", "moat-tu", "--uid-base", str(uid_base("moat-tu")),
                            "-l", "cobol", "-c", "x"],
                           capture_output=True, text=True)
        self.assertEqual(p.returncode, 2)
        self.assertIn("cobol-* runtime is unknown", p.stderr)

    def test_limit_above_ceiling_is_refused(self):
        from moat_harness import BACKEND, LANGUAGES, uid_base
        import subprocess
        p = subprocess.run([BACKEND, "run", "-L", LANGUAGES, "-r", "/run/moat-tu", "-n", "moat-tu", "--uid-base", str(uid_base("moat-tu")),
                            "-l", "python", "-c", "x",
                            "--run-timeout", "999999"], capture_output=True, text=True)
        self.assertEqual(p.returncode, 2)
        self.assertIn("run_timeout cannot exceed the configured limit of 3000 ms", p.stderr)

    def test_no_box_left_behind(self):
        for _ in range(5):
            # each run leaves a child asleep for longer than the test: the box must not leave it behind
            run("import os\nif os.fork() == 0:\n    import time; time.sleep(30)\nprint('parent done')")
        tag = "moat-t%d" % os.getpid()
        leftovers = [d for d in glob.glob("/sys/fs/cgroup/*/**/%s/*" % tag, recursive=True) if os.path.isdir(d)]
        self.assertEqual(leftovers, [])
        with open("/proc/self/mountinfo") as f:
            self.assertNotIn("/run/%s/slots" % tag, f.read())


# A program's own stdin, stdout and stderr reopened by name (/dev/stdin etc. are symlinks to
# /proc/self/fd/N): the open checks the pipe's owner and mode, so the stage pipes must be the box's.
DEV_STDIO_BASH = "echo out >/dev/stdout; echo err >/dev/stderr; cat /dev/stdin"
DEV_STDIO_PYTHON = ("import sys\nopen('/dev/stdout', 'w').write('out\\n')\nopen('/dev/stderr', 'w').write('err\\n')\n"
                    "sys.stdout.write(open('/dev/stdin').read())\n")
# a competitive-programming template: the standard streams reopened by name
DEV_STDIO_C = r"""
#include <stdio.h>
int main(void)
{
    long a, b;
    FILE *in = fopen("/dev/stdin", "r"), *out = fopen("/dev/stdout", "w"), *err = fopen("/dev/stderr", "w");
    if (!in || !out || !err) {
        perror("fopen");
        return 1;
    }
    if (fscanf(in, "%ld %ld", &a, &b) != 2)
        return 2;
    fprintf(out, "%ld\n", a + b);
    fprintf(err, "err\n");
    return 0;
}
"""


class DevStdioTest(unittest.TestCase):
    """/dev/stdin, /dev/stdout and /dev/stderr work in a box, with and without Landlock, and the
    pipes behind them stay the box's own: its uid, mode 0600 (no other uid could open them)."""

    def check(self, d, stdout, stderr="err\n"):
        self.assertEqual(d["run"]["stderr"], stderr, d)
        self.assertEqual(d["run"]["stdout"], stdout, d)
        self.assertEqual(d["run"]["code"], 0, d)
        self.assertIsNone(d["run"]["status"], d)

    def test_bash(self):
        for extra in ((), ("--no-landlock",)):
            with self.subTest(extra=extra):
                self.check(backend_run(DEV_STDIO_BASH, "bash", ("-i", "moat\n", *extra)), "out\nmoat\n")

    def test_python(self):
        for extra in ((), ("--no-landlock",)):
            with self.subTest(extra=extra):
                self.check(backend_run(DEV_STDIO_PYTHON, "python", ("-i", "moat\n", *extra)), "out\nmoat\n")

    def test_c(self):
        d = backend_run(DEV_STDIO_C, "c", ("-i", "2 3\n", *BUSY_MACHINE_WALL), timeout=120)
        self.assertIsNone(d["compile"]["status"], d["compile"])
        self.check(d, "5\n")

    def test_compile_stage(self):
        # the compiler's stderr is the compile stage's pipe: __has_include opens it (and /dev/stdin,
        # the stage's /dev/null) by name, without reading
        src = ('#if __has_include("/dev/stderr") && __has_include("/dev/stdin")\nint main(void) { return 0; }\n'
               "#else\n#error the compiler cannot reopen its stderr\n#endif\n")
        d = backend_run(src, "c", BUSY_MACHINE_WALL, timeout=120)
        self.assertEqual((d["compile"]["status"], d["compile"]["stderr"]), (None, ""), d["compile"])
        self.assertEqual(d["run"]["code"], 0, d["run"])

    def test_without_stdin(self):
        # no stdin given: /dev/stdin is the pipe's read end at its end
        self.check(backend_run("cat /dev/stdin; echo err >/dev/stderr", "bash"), "")

    def test_pipes_are_the_boxs_own_and_private(self):
        code = ("import os, stat\nfor fd in (0, 1, 2):\n    st = os.fstat(fd)\n"
                "    print(stat.S_ISFIFO(st.st_mode), st.st_uid == os.getuid(), st.st_gid == os.getgid(), "
                "oct(st.st_mode & 0o777))\n")
        self.assertEqual(run(code)["stdout"], "True True True 0o600\n" * 3)


PROGRAMS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "programs")
LANGUAGES = {  # language: (program file, compiled)
    "python": ("hello.py", False), "bash": ("hello.sh", False), "c": ("hello.c", True), "c++": ("hello.cpp", True),
    "javascript": ("hello.js", False), "lua": ("hello.lua", False), "ruby": ("hello.rb", False),
    "perl": ("hello.pl", False), "go": ("hello.go", True), "rust": ("hello.rs", True), "java": ("Main.java", False),
    "sqlite3": ("hello.sql", False),
}


def run_file(language, name, stdin="moat\n", extra=()):
    from moat_harness import BACKEND, LANGUAGES, uid_base
    import subprocess
    tag = "moat-t%d" % os.getpid()
    p = subprocess.run([BACKEND, "run", "-L", LANGUAGES, "-r", "/run/" + tag, "-n", tag, "--uid-base", str(uid_base(tag)), "-l", language,
                        "-i", stdin, *extra,
                        os.path.join(PROGRAMS, name)], capture_output=True, timeout=120)
    if p.returncode != 0:
        raise AssertionError(p.stderr.decode(errors="replace"))
    return json.loads(p.stdout)


class LanguagesTest(unittest.TestCase):
    """Every shipped language runs hello world and reads stdin, under the
    default CPU and memory limits (Java and Go included); only the wall
    clocks are raised, so that a busy machine does not fail the test."""

    def test_every_language(self):
        for language, (name, compiled) in LANGUAGES.items():
            with self.subTest(language=language):
                d = run_file(language, name, extra=BUSY_MACHINE_WALL)
                self.assertEqual("compile" in d, compiled, d)
                if compiled:
                    self.assertIsNone(d["compile"]["status"], d["compile"])
                self.assertEqual(d["run"]["stdout"], "hello moat\n", d["run"])
                self.assertIsNone(d["run"]["status"], d["run"])

    def test_c_compile_error_skips_run(self):
        from moat_harness import backend_run
        d = backend_run("int main(void) { return undefined_thing; }", "c")
        self.assertEqual(d["compile"]["status"], "RE")
        self.assertIn("undefined_thing", d["compile"]["stderr"])
        self.assertNotIn("run", d)

    def test_s29_compiler_killed_for_memory_is_ml(self):
        # cc1 reads /dev/urandom until the cgroup OOM killer stops it; gcc itself then exits 1
        from moat_harness import backend_run
        d = backend_run('#include "/dev/urandom"\n', "c", ("--compile-memory", str(64 * 1024 * 1024)))
        self.assertEqual(d["compile"]["status"], "ML", d["compile"])
        self.assertEqual(d["compile"]["message"], "memory limit exceeded")
        self.assertIn("cc1", d["compile"]["stderr"])
        self.assertNotIn("run", d)

    def test_files_left_by_compile_stage_over_run_memory_limit_is_ml(self):
        # the compile stage leaves a 9 MiB a.out in /box (tmpfs): more than a 4 MiB run limit can hold
        from moat_harness import backend_run
        with open("/proc/swaps") as f:
            swap = len(f.read().splitlines()) > 1
        if os.path.exists("/sys/fs/cgroup/cgroup.controllers"):
            swap_accounted = bool(glob.glob("/sys/fs/cgroup/*/memory.swap.max"))
        else:
            swap_accounted = os.path.exists("/sys/fs/cgroup/memory/memory.memsw.limit_in_bytes")
        if swap and not swap_accounted:
            self.skipTest("swap is on without swap accounting in the cgroup: the kernel may swap the files out, "
                          "and then the run fits")
        d = backend_run('#include <stdio.h>\nchar big[9 << 20] = {1};\nint main(void) { puts("ran"); return big[5]; }\n',
                        "c", ("--run-memory", str(4 * 1024 * 1024)))
        self.assertIsNone(d["compile"]["status"], d["compile"])
        r = d["run"]
        self.assertEqual(r["status"], "ML", r)
        self.assertIn("files in /box and /tmp exceed the run memory limit", r["message"])
        self.assertEqual(r["stdout"], "")
        self.assertGreater(r["memory"], 9 << 20)

    def test_java_stdout_holds_only_the_program_output(self):
        # threads until the pids limit: the JVM warns ("[warning][os,thread] Failed to start thread"),
        # on stdout by default; the warning must go to stderr
        from moat_harness import backend_run
        code = ("public class Main { public static void main(String[] a) throws Exception {\n"
                "  try { while (true) { Thread t = new Thread(() -> { try { Thread.sleep(600000); }\n"
                "    catch (InterruptedException e) {} }); t.setDaemon(true); t.start(); } }\n"
                "  catch (Throwable e) { System.out.println(\"stopped\"); }\n"
                "  System.exit(0); } }\n")
        d = backend_run(code, "java", ("--limit", "run_timeout=%d" % LONG_WALL_MS, "--limit", "run_cpu_time=60000",
                                       "--run-timeout", str(LONG_WALL_MS)))
        r = d["run"]
        self.assertEqual(r["stdout"], "stopped\n", r)
        self.assertIn("[warning]", r["stderr"])  # the JVM did warn: the condition was met
        self.assertIsNone(r["status"], r)

    def test_compiled_program_shares_box_between_stages_only(self):
        from moat_harness import backend_run
        d = backend_run('#include <stdio.h>\nint main(void){FILE *f=fopen("/box/a.out","r");puts(f?"own binary":"none");'
                        'return 0;}', "c")
        self.assertEqual(d["run"]["stdout"], "own binary\n")


if __name__ == "__main__":
    unittest.main()
