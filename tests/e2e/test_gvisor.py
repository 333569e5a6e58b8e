"""gVisor stages (issue 15 item 2): the box running its program under Debian's
runsc, through `moat-backend run` and through the real gateway.

Skipped with the reason when runsc is not installed, or cannot run a trivial
sandbox on this host by itself (require_runsc); the missing-runsc cases run
anyway.  Every job runs on the ptrace platform (--gvisor-platform ptrace:
the kvm probe is a start-up decision with its own test) under
BUSY_MACHINE_WALL's wall clocks: ptrace is slow, and a wall clock measures
the machine's load.  Every moat-backend started here has a hard timeout
that kills its whole process group (runsc, its sentry and gofer are in the
boxes' pid namespaces, which die with their init)."""

import json
import os
import shutil
import signal
import subprocess
import tempfile
import unittest

from moat_harness import (BACKEND, BUSY_MACHINE_WALL, LANGUAGES, communicate_or_kill, STATUS_OK, STATUS_SG, BackendSession, Stack, session_signal,
                          uid_base, wait_until)
from test_escapes import PRELUDE as ESCAPES_PRELUDE

RUNSC = shutil.which("runsc") or "/usr/bin/runsc"
HAVE_RUNSC = os.access(RUNSC, os.X_OK)
GVISOR = ("--isolation", "gvisor", "--runsc", RUNSC, "--gvisor-platform", "ptrace")
JOB_TIMEOUT_S = 240


_runsc_works = None


def require_runsc():
    """SkipTest unless runsc is installed and runs a trivial sandbox on this host by itself (ptrace, no moat):
    a host whose kernel runsc cannot use shows nothing about moat's part."""
    global _runsc_works
    if not HAVE_RUNSC:
        raise unittest.SkipTest("runsc is not installed (Debian: apt-get install runsc)")
    if _runsc_works is None:
        tmp = tempfile.mkdtemp(prefix="moat-gv-check-")
        try:
            os.makedirs(os.path.join(tmp, "bundle"))
            config = {"ociVersion": "1.0.0", "root": {"path": "/", "readonly": True},
                      "process": {"args": ["/bin/true"], "cwd": "/", "user": {"uid": 65534, "gid": 65534},
                                  "env": ["PATH=/usr/bin:/bin"]},
                      "linux": {"namespaces": [{"type": t} for t in ("pid", "network", "ipc", "uts", "mount")]}}
            with open(os.path.join(tmp, "bundle", "config.json"), "w") as f:
                json.dump(config, f)
            p = subprocess.Popen([RUNSC, "--root=" + os.path.join(tmp, "state"), "--network=none", "--platform=ptrace",
                                  "--ignore-cgroups", "run", "--bundle", os.path.join(tmp, "bundle"), "check"],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
            got = communicate_or_kill(p, JOB_TIMEOUT_S)
            _runsc_works = (p.returncode == 0, got[1].decode(errors="replace")[-300:]) if got else (False, "timed out")
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    if not _runsc_works[0]:
        raise unittest.SkipTest("runsc cannot run a trivial sandbox on this host (ptrace): " + _runsc_works[1])


def backend_run_raw(code, language="python", extra=(), tag="moat-gv-t%d" % os.getpid(), languages=LANGUAGES):
    """`moat-backend run` in a process group of its own, killed whole at JOB_TIMEOUT_S.
    Returns (exit status, stdout, stderr)."""
    cmd = [BACKEND, "run", "-L", languages, "-r", "/run/" + tag, "-n", tag, "--uid-base", str(uid_base(tag)), "-l", language,
           "-c", code, *extra]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    got = communicate_or_kill(p, JOB_TIMEOUT_S)
    if got is None:
        raise AssertionError("moat-backend run did not finish in %d s" % JOB_TIMEOUT_S)
    out, err = got
    return p.returncode, out.decode(errors="replace"), err.decode(errors="replace")


def gv_run(code, language="python", *extra, isolation=GVISOR):
    rc, out, err = backend_run_raw(code, language, (*isolation, *BUSY_MACHINE_WALL, *extra))
    if rc != 0:
        raise AssertionError("moat-backend run failed (%d): %s" % (rc, err))
    return json.loads(out)


class GVisorBoxTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        require_runsc()

    def test_program_meets_gvisors_kernel(self):
        # the probe: what the program sees as its kernel is gVisor's, not the host's; the same
        # program in a plain box sees the host's (so this fails if runsc is not in the way)
        probe = "import os\nprint(open('/proc/version').read().strip())\nprint(os.uname().release)\n"
        with open("/proc/version") as f:
            host_version = f.read().strip()
        res = gv_run(probe)
        r = res["run"]
        self.assertIsNone(r["status"], r)
        # the result says which walls held it: gVisor's in place of the backend's seccomp and Landlock
        self.assertEqual(res["walls"], "namespaces+gvisor")
        version, release = r["stdout"].splitlines()
        self.assertNotEqual(version, host_version)
        self.assertNotEqual(release, os.uname().release)
        plain = gv_run(probe, isolation=())
        self.assertEqual(plain["run"]["stdout"].splitlines()[0], host_version)
        self.assertTrue(plain["walls"].startswith("namespaces+seccomp"), plain["walls"])

    def test_python_hello(self):
        r = gv_run('import sys\nprint("hello")\nprint(sys.stdin.read())', "python", "-i", "from stdin")["run"]
        self.assertEqual(r["stdout"], "hello\nfrom stdin\n")
        self.assertEqual(r["code"], 0)
        self.assertIsNone(r["status"])

    def test_dev_stdio_reopened_by_name(self):
        # gVisor's own /proc/self/fd/N reopens the stage pipes runsc passes through (it did before they
        # were the slot uid's too: this holds it, the plain-box tests in test_box.py show the fix)
        from test_box import DEV_STDIO_BASH, DEV_STDIO_PYTHON
        for language, code in (("bash", DEV_STDIO_BASH), ("python", DEV_STDIO_PYTHON)):
            with self.subTest(language=language):
                r = gv_run(code, language, "-i", "moat\n")["run"]
                self.assertEqual((r["stdout"], r["stderr"]), ("out\nmoat\n", "err\n"), r)
                self.assertEqual(r["code"], 0, r)

    def test_c_compile_and_run_share_box(self):
        # the compile stage's binary in /box is what the run stage executes, both under gVisor
        res = gv_run('#include <stdio.h>\n#include <sys/utsname.h>\n'
                     'int main(void){struct utsname u; uname(&u); printf("hello %s\\n", u.release); return 0;}', "c")
        self.assertIsNone(res["compile"]["status"], res["compile"])
        self.assertEqual(res["run"]["code"], 0, res["run"])
        self.assertTrue(res["run"]["stdout"].startswith("hello "))
        self.assertNotEqual(res["run"]["stdout"].split()[1], os.uname().release)

    def test_arguments_reach_the_program_unchanged(self):
        # the request's args go into the OCI bundle's JSON: quotes, backslashes, control bytes and
        # a would-be JSON field stay one argv element each, byte for byte
        args = ['a"b', "back\\slash", "new\nline\ttab\x01\x7f", '", "user": {"uid": 0}, "x": "', "\u00e9\U0001F600", ""]
        extra = []
        for a in args:
            extra += ["-a", a]
        r = gv_run("import sys, json, os\nprint(json.dumps(sys.argv[1:]))", "python", *extra)["run"]
        self.assertEqual(json.loads(r["stdout"]), args)

    def test_exit_code_is_re(self):
        r = gv_run("import sys; sys.exit(3)")["run"]
        self.assertEqual(r["status"], "RE")
        self.assertEqual(r["code"], 3)
        self.assertIsNone(r["signal"])

    def test_signal_is_sg(self):
        r = gv_run("import os, signal; os.kill(os.getpid(), signal.SIGSEGV)")["run"]
        self.assertEqual(r["status"], "SG", r)
        self.assertEqual(r["signal"], "SIGSEGV")
        self.assertIsNone(r["code"])

    def test_memory_limit_is_ml(self):
        r = gv_run("a = bytearray(400 * 1024 * 1024)\nprint(len(a))", "python", "--run-memory", str(128 * 1024 * 1024))["run"]
        self.assertEqual(r["status"], "ML", r)
        self.assertEqual(r["stdout"], "")
        self.assertLessEqual(r["memory"], 128 * 1024 * 1024)

    def test_fork_bomb_is_held(self):
        # the stage's process limit (16 here, so that memory stays far from its limit) holds inside
        # gVisor: fork fails, the program goes on and reports where it stopped (the children sleep to hold
        # their pids meanwhile)
        r = gv_run("import os, time\nn = 0\ntry:\n    while True:\n        if os.fork() == 0:\n            time.sleep(60)\n"
                   "            os._exit(0)\n        n += 1\nexcept OSError as e:\n    print('stopped', n, e.errno)\n",
                   "python", "--limit", "run_processes=16")["run"]
        self.assertIsNone(r["status"], r)
        words = r["stdout"].split()
        self.assertEqual(words[0], "stopped")
        self.assertLess(int(words[1]), 16)
        self.assertEqual(int(words[2]), 11)  # EAGAIN

    def test_busy_loop_hits_cpu_clock(self):
        r = gv_run("while True: pass", "python", "--limit", "run_cpu_time=1000")["run"]
        self.assertEqual(r["status"], "TO")
        self.assertEqual(r["message"], "cpu-time limit exceeded")
        self.assertGreaterEqual(r["cpu_time"], 1000)

    def test_sleep_hits_wall_clock(self):
        # a wall limit the job asks for below the busy-machine ceiling; the sleep outlasts it 30 times
        rc, out, err = backend_run_raw("import time; time.sleep(60)", "python", (*GVISOR, "--run-timeout", "2000"))
        self.assertEqual(rc, 0, err)
        r = json.loads(out)["run"]
        self.assertEqual(r["status"], "TO")
        self.assertEqual(r["message"], "wall-time limit exceeded")
        self.assertLess(r["cpu_time"], 2000)

    def test_silence_hits_idle_clock(self):
        # output, then silence: the idle clock (3 s) ends it long before the busy-machine wall clock (60 s);
        # on a loaded machine the start-up alone may outlast the idle clock, so the output is not asserted
        r = gv_run("import time\nprint('a', flush=True)\ntime.sleep(120)\n", "python", "--idle-timeout", "3000")["run"]
        self.assertEqual(r["status"], "TO", r)
        self.assertEqual(r["message"], "idle-time limit exceeded")
        self.assertIn(r["stdout"], ("", "a\n"))
        self.assertLess(r["wall_time"], 60000)

    def test_output_flood_is_ol(self):
        r = gv_run("import sys\nwhile True: sys.stdout.write('x' * 65536)")["run"]
        self.assertEqual(r["status"], "OL")
        self.assertLessEqual(len(r["stdout"]), 64 * 1024)

    def test_no_network(self):
        r = gv_run("import socket\ns = socket.socket()\ns.settimeout(5)\ntry:\n    s.connect(('1.1.1.1', 80))\n"
                   "    print('connected')\nexcept OSError as e:\n    print('refused', e.errno)\n"
                   "print(sorted(n for _, n in socket.if_nameindex()))\n")["run"]
        self.assertIsNone(r["status"], r)
        lines = r["stdout"].splitlines()
        self.assertTrue(lines[0].startswith("refused"), r["stdout"])
        self.assertEqual(lines[1], "['lo']")

    def test_box_writable_runtime_read_only(self):
        r = gv_run("import os\nfor p in ('/box/made', '/usr/bin/made', '/etc/made', '/made'):\n    try:\n"
                   "        open(p, 'w').write('x')\n        print(p, 'written')\n    except OSError as e:\n"
                   "        print(p, 'refused')\n")["run"]
        self.assertEqual(r["stdout"].splitlines(),
                         ["/box/made written", "/usr/bin/made refused", "/etc/made refused", "/made refused"])

    def test_runsc_missing_is_a_clear_error(self):
        rc, out, err = backend_run_raw("print(1)", "python", ("--isolation", "gvisor", "--runsc", "/nonexistent/runsc"))
        self.assertEqual(rc, 2)
        self.assertEqual(out, "")
        self.assertIn("requires gVisor isolation but runsc is not installed on the backend", err)
        # and a plain job on the same backend runs
        rc, out, err = backend_run_raw("print(1)", "python", ("--runsc", "/nonexistent/runsc"))
        self.assertEqual(rc, 0, err)
        self.assertEqual(json.loads(out)["run"]["stdout"], "1\n")

    def test_platform_is_chosen_and_logged(self):
        # auto: kvm where /dev/kvm exists and a trivial sandbox runs on it within 10 s, else ptrace, and the
        # log says which and why; the job waits for the probe, never hangs on a kvm that does (as on a
        # nested host), and the probe's runsc is gone once the backend is
        tag = "moat-gv-auto%d" % os.getpid()
        rc, out, err = backend_run_raw("import os; print(os.uname().release)", "python",
                                       ("--isolation", "gvisor", "--runsc", RUNSC, "--gvisor-platform", "auto", *BUSY_MACHINE_WALL),
                                       tag=tag)
        self.assertEqual(rc, 0, err)
        self.assertNotEqual(json.loads(out)["run"]["stdout"].strip(), os.uname().release)
        if os.access("/dev/kvm", os.R_OK | os.W_OK):
            self.assertRegex(err, r"gVisor: (runsc on kvm ran a trivial sandbox in \d+ ms: using kvm|"
                                  r"runsc on kvm did not finish a trivial sandbox in \d+ ms \(killed\): using ptrace|"
                                  r"runsc on kvm failed a trivial sandbox \(wait status \d+\): using ptrace)")
        else:
            self.assertIn("platform ptrace (auto: no /dev/kvm)", err)
        left = subprocess.run(["pgrep", "-f", "/run/%s/gvisor-probe" % tag], capture_output=True, text=True).stdout
        shutil.rmtree("/run/" + tag, ignore_errors=True)
        self.assertEqual(left, "")
        # an explicit platform is the operator's, logged as such
        rc, out, err = backend_run_raw("print(1)", "python", GVISOR)
        self.assertEqual(rc, 0, err)
        self.assertIn("platform ptrace (--gvisor-platform)", err)

    def test_language_manifest_asks_for_gvisor(self):
        # a manifest's "isolation": "gvisor" runs the language under gVisor whatever the job asks
        tmp = tempfile.mkdtemp(prefix="moat-gv-langs-")
        try:
            src = os.path.join(LANGUAGES, "python-3.11")
            dst = os.path.join(tmp, "python-3.11")
            shutil.copytree(src, dst)
            with open(os.path.join(dst, "manifest.json")) as f:
                manifest = json.load(f)
            manifest["isolation"] = "gvisor"
            with open(os.path.join(dst, "manifest.json"), "w") as f:
                json.dump(manifest, f)
            probe = "import os; print(os.uname().release)"
            rc, out, err = backend_run_raw(probe, "python", ("--gvisor-platform", "ptrace", *BUSY_MACHINE_WALL), languages=tmp)
            self.assertEqual(rc, 0, err)
            self.assertNotEqual(json.loads(out)["run"]["stdout"].strip(), os.uname().release)
            # without runsc the language is skipped at start, never run with one wall
            rc, out, err = backend_run_raw(probe, "python", ("--runsc", "/nonexistent/runsc"), languages=tmp)
            self.assertNotEqual(rc, 0)
            self.assertIn("asks for gVisor and runsc is not installed", err)
        finally:
            shutil.rmtree(tmp)


# The escape suite's probes (test_escapes.py) that apply to a gVisor stage: what the program must not
# reach holds under gVisor as in the plain box.  What does not apply: the backend's seccomp allow-list
# and Landlock (runsc replaces them with gVisor's kernel; their errnos are gVisor's), the plain box's
# /dev, /proc masks and mount table (gVisor's own), and the host side channels (the program's calls
# reach the sentry, not the host's kernel).
PRELUDE = ESCAPES_PRELUDE + r"""
def s(b):
    return ctypes.addressof(ctypes.create_string_buffer(b))
"""
# x86-64 numbers of calls that would reach past the box if they worked; each must fail
HOST_CALLS = {
    "mount": 165, "umount2": 166, "pivot_root": 155, "chroot": 161, "setns": 308, "bpf": 321, "perf_event_open": 298,
    "init_module": 175, "finit_module": 313, "delete_module": 176, "kexec_load": 246, "kexec_file_load": 320,
    "reboot": 169, "swapon": 167, "swapoff": 168, "acct": 163, "settimeofday": 164, "clock_settime": 227, "adjtimex": 159,
    "iopl": 172, "ioperm": 173, "quotactl": 179, "open_by_handle_at": 304, "syslog": 103, "fsopen": 430, "open_tree": 428,
}


def gv_probe(body):
    r = gv_run(PRELUDE + body + "\nprint(json.dumps(out))")["run"]
    if r["code"] != 0:
        raise AssertionError("probe failed: %r" % r)
    return json.loads(r["stdout"])


class GVisorEscapeTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        require_runsc()

    def test_s18_host_calls_fail(self):
        # arguments that would act if the call were allowed: a real mount of a tmpfs, chroot to /tmp, ...
        out = gv_probe("out = {}\nfor name, nr in %r.items():\n    out[name] = sc(nr)\n"
                       "out['mount_tmpfs'] = sc(165, s(b'none'), s(b'/tmp'), s(b'tmpfs'), 0, 0)\n"
                       "out['chroot_tmp'] = sc(161, s(b'/tmp'))\n" % HOST_CALLS)
        for name, (ret, err) in out.items():
            self.assertEqual(ret, -1, name)
            self.assertNotEqual(err, 0, name)

    def test_s7_runtime_and_exe_not_writable(self):
        out = gv_probe("out = {}\nfor p in ('/proc/self/exe', '/usr/bin/python3.11', '/usr/lib/python3.11/os.py', '/etc/passwd'):\n"
                       "    try:\n        open(p, 'r+b'); out[p] = 'opened'\n    except OSError as e:\n        out[p] = e.errno\n")
        self.assertNotIn("opened", out.values())

    def test_s9_no_cgroupfs(self):
        out = gv_probe("os.makedirs('/tmp/cg', exist_ok=True)\n"
                       "out = {'mount': sc(165, s(b'cgroup'), s(b'/tmp/cg'), s(b'cgroup'), 0, s(b'memory'))[0]}\n")
        self.assertEqual(out, {"mount": -1})

    def test_s1_s2_planted_links_and_fifos_do_not_reach_the_host(self):
        plant = ("import os\nos.symlink('/etc/shadow', '/box/x')\nos.symlink('/proc/1/root', '/box/y')\n"
                 "os.mkfifo('/box/fifo')\nprint('planted')\n")
        with open("/etc/shadow", "rb") as f:
            before = f.read()
        for _ in range(2):
            self.assertEqual(gv_run(plant)["run"]["stdout"], "planted\n")
        self.assertEqual(gv_run("import os; print(sorted(os.listdir('/box')))")["run"]["stdout"], "['main.code']\n")
        with open("/etc/shadow", "rb") as f:
            self.assertEqual(f.read(), before)

    def test_s16_disk_fill_stops(self):
        # gVisor's /tmp is its own tmpfs, in the sentry's memory: the file size limit (10 MB) stops it
        r = gv_run("n = 0\ntry:\n    with open('/tmp/fill', 'wb') as f:\n        while True:\n"
                   "            f.write(b'x' * (1 << 20)); f.flush(); n += 1\nexcept OSError as e:\n    print(n, e.errno)\n")["run"]
        n, err = r["stdout"].split()
        self.assertIn(int(err), (27, 28))  # EFBIG or ENOSPC
        self.assertLessEqual(int(n), 64)

    def test_s5_environment(self):
        os.environ["MOAT_SECRET_TOKEN"] = "must-not-leak"
        out = gv_probe("out = dict(os.environ)")
        self.assertNotIn("MOAT_SECRET_TOKEN", out)
        self.assertEqual(out["HOME"], "/box")

    def test_s30_host_kernel_facts_not_seen(self):
        # what the host's /proc would tell (its boot command line, its kernel's symbols) is gVisor's here
        out = gv_probe("out = {}\nfor p in ('/proc/cmdline', '/proc/kallsyms', '/proc/modules'):\n    try:\n"
                       "        out[p] = open(p).read()[:4096]\n    except OSError as e:\n        out[p] = e.errno\n")
        for p, seen in out.items():
            try:
                with open(p) as f:
                    host = f.read()[:4096]
            except OSError:
                continue
            if host:
                self.assertNotEqual(seen, host, p)

    def test_s23_identity(self):
        # rootless runsc maps one uid, the slot's, to 0 of its user namespace: the program is that
        # uid 0 of gVisor's kernel with no capability at all (the bundle's sets are empty), so it
        # can do nothing the slot's uid could not; the host sees only the slot's uid (S37)
        out = gv_probe("import socket\nout = {'uid': os.getuid(), 'gid': os.getgid(), 'groups': os.getgroups(), "
                       "'hostname': socket.gethostname(), 'pid1': open('/proc/1/cmdline').read().split('\\0')[0], "
                       "'caps': [l.split()[1] for l in open('/proc/self/status') if l.startswith('Cap')], "
                       "'pids': sorted(int(p) for p in os.listdir('/proc') if p.isdigit())}\n")
        self.assertEqual((out["uid"], out["gid"]), (0, 0))
        self.assertEqual(set(out["caps"]), {"0000000000000000"}, out["caps"])
        self.assertEqual(out["groups"], [])
        self.assertEqual(out["hostname"], "box")
        # the program is alone: gVisor's init is the program itself, no runsc, no host process
        self.assertEqual(out["pids"], [1])


class GVisorSessionTest(unittest.TestCase):
    """A live session under gVisor (SESSION_OPEN tag 18): stdin as it arrives, output as it is written, a signal
    relayed to the program."""

    @classmethod
    def setUpClass(cls):
        require_runsc()
        cls.stack = Stack(audit=False, backend_args=("--runsc", RUNSC, "--gvisor-platform", "ptrace"))
        cls.stack.start_backend()

    @classmethod
    def tearDownClass(cls):
        cls.stack.stop()

    def test_conversation(self):
        code = "import os\nprint('name?', flush=True)\nprint('hello', input(), os.uname().release)\n"
        with BackendSession(self.stack.socket, 7, timeout=JOB_TIMEOUT_S) as s:
            s.open("python", code, isolation=1)
            events = s.output_until(b"name?")
            s.write(b"ada\n")
            events += s.rest()
        out = b"".join(e["data"] for e in events if e["type"] == "output").decode()
        self.assertTrue(out.startswith("name?\nhello ada "), out)
        self.assertNotEqual(out.split()[-1], os.uname().release)
        end = [e for e in events if e["type"] == "exit"][-1]
        self.assertEqual((end["status"], end["code"]), (STATUS_OK, 0))
        self.assertEqual((events[0]["type"], events[0]["walls"]), ("ready", "namespaces+gvisor"))

    def test_signal_reaches_the_program(self):
        code = "import time\nprint('up', flush=True)\ntime.sleep(120)\n"  # until the signal ends it
        with BackendSession(self.stack.socket, 8, timeout=JOB_TIMEOUT_S) as s:
            s.open("python", code, isolation=1)
            s.output_until(b"up")
            s.send(session_signal(8, signal.SIGTERM))
            events = s.rest()
        end = [e for e in events if e["type"] == "exit"][-1]
        self.assertEqual((end["status"], end["signal"]), (STATUS_SG, signal.SIGTERM), end)


BIG = "rate: {per_second: 1000, burst: 1000}\nmax_in_flight: 64\nlimits:\n  run_timeout_ms: 60000\n"
JUDGE0 = "endpoints: [execute, runtimes, submissions, languages]\n"
TENANTS = [("walled", BIG + JUDGE0 + "isolation: gvisor\n", ""), ("plain", BIG + JUDGE0, "")]
BACKEND_ARGS = ("--runsc", RUNSC, "--gvisor-platform", "ptrace", "--limit", "run_timeout=60000")
PROBE = "import os; print(os.uname().release)"


class GVisorGatewayTest(unittest.TestCase):
    """A tenant's `isolation: gvisor` through the real gateway."""

    @classmethod
    def setUpClass(cls):
        require_runsc()
        cls.stack = Stack(tenants=TENANTS, backend_args=BACKEND_ARGS).start()

    @classmethod
    def tearDownClass(cls):
        cls.stack.stop()

    def execute(self, tenant, code=PROBE, **extra):
        body = {"language": "python", "version": "*", "files": [{"name": "main.py", "content": code}]}
        body.update(extra)
        return self.stack.request("POST", "/api/v2/execute", body, token=self.stack.tokens[tenant], timeout=JOB_TIMEOUT_S)

    def test_tenant_runs_under_gvisor_and_plain_tenant_does_not(self):
        st, headers, walled = self.execute("walled")
        self.assertEqual(st, 200, walled)
        self.assertNotEqual(walled["run"]["stdout"].strip(), os.uname().release)
        st, _, plain = self.execute("plain")
        self.assertEqual(st, 200, plain)
        self.assertEqual(plain["run"]["stdout"].strip(), os.uname().release)
        # the walls that held each: in the answer and in the audit trail's result record
        self.assertEqual(walled["walls"], "namespaces+gvisor")
        self.assertTrue(plain["walls"].startswith("namespaces+seccomp"), plain["walls"])
        rid = headers["x-request-id"]
        record = wait_until(lambda: next((r for r in self.stack.audit_records()
                                          if r.get("request_id") == rid and r.get("type") == "result"), None),
                            "the result record of %s" % rid)
        self.assertEqual(record["walls"], "namespaces+gvisor")

    def test_request_body_cannot_lower_the_wall(self):
        # a body field named isolation (any spelling of a weaker wall) is not the tenant's setting:
        # either refused or ignored, never obeyed
        for value in ("namespaces", "none", 0, {"isolation": "namespaces"}):
            st, _, data = self.execute("walled", isolation=value)
            if st == 200:
                self.assertNotEqual(data["run"]["stdout"].strip(), os.uname().release, value)
            else:
                self.assertEqual(st, 400, data)
        st, _, data = self.stack.request("POST", "/submissions?wait=true&base64_encoded=false",
                                         {"source_code": PROBE, "language_id": 71, "isolation": "namespaces"},
                                         token=self.stack.tokens["walled"], timeout=JOB_TIMEOUT_S)
        if st == 201:
            self.assertNotEqual(data["stdout"].strip(), os.uname().release, data)
        else:
            self.assertIn(st, (400, 422), data)

    def test_judge0_submission_runs_under_gvisor(self):
        st, _, data = self.stack.request("POST", "/submissions?wait=true&base64_encoded=false",
                                         {"source_code": PROBE, "language_id": 71}, token=self.stack.tokens["walled"],
                                         timeout=JOB_TIMEOUT_S)
        self.assertEqual(st, 201, data)
        self.assertNotEqual(data["stdout"].strip(), os.uname().release)

    def test_test_cases_run_under_gvisor(self):
        # compiled once under gVisor, each case in a fresh gVisor box holding the binary the compile left
        src = ('#include <stdio.h>\n#include <sys/utsname.h>\nint main(void){struct utsname u; long a, b; uname(&u);\n'
               'if (scanf("%ld %ld", &a, &b) != 2) return 1; printf("%ld %s\\n", a + b, u.release); return 0;}\n')
        tests = [{"name": "c%d" % i, "stdin": "%d 1\n" % i} for i in range(2)]
        body = {"language": "c", "version": "*", "files": [{"name": "main.c", "content": src}], "tests": tests}
        st, _, data = self.stack.request("POST", "/api/v2/execute", body, token=self.stack.tokens["walled"], timeout=JOB_TIMEOUT_S)
        self.assertEqual(st, 200, data)
        outs = [t["stdout"].split() for t in data["tests"]]
        self.assertEqual([o[0] for o in outs], ["1", "2"], data)
        for o in outs:
            self.assertNotEqual(o[1], os.uname().release)

    def test_runtimes_list_isolation(self):
        st, _, data = self.stack.request("GET", "/api/v2/runtimes", token=self.stack.tokens["plain"])
        self.assertEqual(st, 200, data)
        python = [r for r in data if r["language"] == "python"]
        self.assertTrue(python)
        self.assertEqual(python[0]["isolation"], ["namespaces", "gvisor"])


class GVisorMissingGatewayTest(unittest.TestCase):
    """No runsc on the backend: the gVisor tenant's jobs are refused with a clear error (never run in a plain
    box), the runtimes list only the plain box.  Runs without runsc installed too."""

    @classmethod
    def setUpClass(cls):
        cls.stack = Stack(tenants=TENANTS, backend_args=("--runsc", "/nonexistent/runsc", "--limit", "run_timeout=60000")).start()

    @classmethod
    def tearDownClass(cls):
        cls.stack.stop()

    def test_refused_with_503(self):
        body = {"language": "python", "version": "*", "files": [{"name": "main.py", "content": PROBE}]}
        st, _, data = self.stack.request("POST", "/api/v2/execute", body, token=self.stack.tokens["walled"])
        self.assertEqual(st, 503, data)
        self.assertEqual(data["code"], "isolation_unavailable")
        self.assertIn("this tenant requires gVisor isolation but runsc is not installed on the backend", data["message"])
        self.assertTrue(data["request_id"])
        st, _, data = self.stack.request("POST", "/api/v2/execute", body, token=self.stack.tokens["plain"])
        self.assertEqual(st, 200, data)

    def test_runtimes_list_only_the_plain_box(self):
        st, _, data = self.stack.request("GET", "/api/v2/runtimes", token=self.stack.tokens["plain"])
        self.assertEqual(st, 200, data)
        for r in data:
            self.assertEqual(r["isolation"], ["namespaces"], r)


if __name__ == "__main__":
    unittest.main()
