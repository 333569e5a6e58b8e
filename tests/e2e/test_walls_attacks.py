"""Attacks on issue 15's two walls (Landlock in every box, gVisor on demand),
as an outside campaign would make them, through real boxes (`moat-backend
run`).  Each test names its S-check in tests/SECURITY-CHECKS.md and fails
when the fix it checks is removed.

S35  Landlock's TCP rules (ABI 4) handle IPPROTO_TCP only: an inet socket
     of another protocol (IPPROTO_MPTCP: bind and connect as if no rule
     existed; SMC, SCTP, DCCP where the kernel has them) walks around them.
     The box's seccomp allow-list takes inet sockets as TCP (stream, 0 or
     IPPROTO_TCP) or UDP (datagram, 0 or IPPROTO_UDP) only.
S36  A program cannot forge a verdict it did not earn: SIGXCPU (which the
     backend reads as its RLIMIT_CPU backstop, TO) sent to itself is a
     signal death (SG), not TO, unless the stage's CPU time passed its
     limit; under gVisor an exit code of 129..192 is that exit code (runsc
     exits 128+N for a signal N too: its log has the real wait status).
S37  runsc runs for the whole stage outside any seccomp filter: it runs
     rootless, as the slot's uid, with no capability in the host's user
     namespace (what it needs it holds in a user namespace of its own, whose
     0 is the slot's uid), so a bug in runsc or its gofer is not root: a
     devtmpfs mount, mknod, the host's clock, fail from inside its
     namespaces, as they succeed for root outside them.
Also here, not an S-check: runsc on the kvm platform (what `auto` picks
where the start-up probe runs a trivial sandbox on kvm) opens /dev/kvm in
the box's mount namespace, which had no such node: every gVisor job failed
RE 128 with runsc's "open /dev/kvm: no such file or directory"."""

import errno
import json
import os
import socket
import subprocess
import unittest

from moat_harness import BackendSession, Stack, backend_run, box_pids, wait_until
from test_escapes import PRELUDE
from test_gvisor import BACKEND_ARGS, HAVE_RUNSC, JOB_TIMEOUT_S, RUNSC, TENANTS, backend_run_raw, gv_run

IPPROTO_MPTCP = 262
IPPROTO_SMC = 256
IPPROTO_SCTP = 132
IPPROTO_UDPLITE = 136


def host_has_mptcp():
    """Whether this kernel makes MPTCP sockets (net.mptcp.enabled, CONFIG_MPTCP)."""
    try:
        socket.socket(socket.AF_INET, socket.SOCK_STREAM, IPPROTO_MPTCP).close()
        return True
    except OSError:
        return False


class InetProtocolTest(unittest.TestCase):
    """S35: no inet socket but TCP and UDP, so Landlock's TCP rules cannot be walked around."""

    PROBE = PRELUDE + """
import socket
out = {}
for fam, fname in ((socket.AF_INET, 'inet'), (socket.AF_INET6, 'inet6')):
    for typ, proto in ((socket.SOCK_STREAM, 0), (socket.SOCK_STREAM, 6), (socket.SOCK_DGRAM, 0), (socket.SOCK_DGRAM, 17),
                       (socket.SOCK_STREAM, %d), (socket.SOCK_STREAM, %d), (socket.SOCK_STREAM, %d), (socket.SOCK_DGRAM, %d),
                       (socket.SOCK_SEQPACKET, 0), (socket.SOCK_DGRAM, 1), (socket.SOCK_DGRAM, 6), (socket.SOCK_STREAM, 17)):
        key = '%%s/%%s/%%d' %% (fname, {socket.SOCK_STREAM: 'stream', socket.SOCK_DGRAM: 'dgram'}.get(typ, 'seqpacket'), proto)
        try:
            s = socket.socket(fam, typ, proto)
        except OSError as e:
            out[key] = e.errno
            continue
        try:
            s.bind(('127.0.0.1' if fam == socket.AF_INET else '::1', 0))
            out[key] = 'bound'
        except OSError as e:
            out[key] = 'socket'
fd, err = sc(41, socket.AF_INET, socket.SOCK_STREAM, 6 | (1 << 32))
out['high'] = err if fd < 0 else 'socket'
fd, err = sc(41, socket.AF_INET, socket.SOCK_STREAM | socket.SOCK_NONBLOCK | socket.SOCK_CLOEXEC, 0)
out['flags'] = err if fd < 0 else 'socket'
for typ, name in ((socket.SOCK_STREAM, 'stream'), (socket.SOCK_DGRAM, 'dgram'), (socket.SOCK_SEQPACKET, 'seqpacket')):
    try:
        socket.socket(socket.AF_UNIX, typ).close(); out['unix/' + name] = 'socket'
    except OSError as e:
        out['unix/' + name] = e.errno
print(json.dumps(out))
""" % (IPPROTO_MPTCP, IPPROTO_SMC, IPPROTO_SCTP, IPPROTO_UDPLITE)

    def test_s35_only_tcp_and_udp_inet_sockets(self):
        res = backend_run(self.PROBE)
        self.assertEqual(res["run"]["code"], 0, res)
        out = json.loads(res["run"]["stdout"])
        for fam in ("inet", "inet6"):
            # seqpacket/0 is SCTP, dgram/1 ICMP (ping), and a protocol with the other type
            for key in ("stream/%d" % IPPROTO_MPTCP, "stream/%d" % IPPROTO_SMC, "stream/%d" % IPPROTO_SCTP,
                        "dgram/%d" % IPPROTO_UDPLITE, "seqpacket/0", "dgram/1", "dgram/6", "stream/17"):
                # EPERM: the allow-list's answer, whatever this kernel has built in
                self.assertEqual(out[fam + "/" + key], 1, (fam, key, out))
            for key in ("stream/0", "stream/6", "dgram/0", "dgram/17"):
                self.assertIn(out[fam + "/" + key], ("socket", "bound"), (fam, key, out))
        # the kernel reads the protocol as an int: a high word does not hide TCP
        self.assertEqual(out["high"], "socket", out)
        self.assertEqual(out["flags"], "socket", out)
        self.assertEqual([out["unix/" + t] for t in ("stream", "dgram", "seqpacket")], ["socket"] * 3, out)

    def test_s35_mptcp_refused_where_tcp_binds(self):
        # a TCP socket binds on the box's loopback (S33: the network namespace is the wall); an
        # MPTCP one, which this kernel makes, is refused by the allow-list, as every protocol but
        # TCP and UDP is (MPTCP once walked around Landlock's TCP rules: S35's campaign)
        if not host_has_mptcp():
            self.skipTest("this kernel makes no MPTCP sockets")
        res = backend_run(PRELUDE + """
import socket
out = {}
for name, proto in (('tcp', 6), ('mptcp', %d)):
    try:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM, proto)
        s.bind(('127.0.0.1', 0))
        out[name] = 'bound'
    except OSError as e:
        out[name] = e.errno
print(json.dumps(out))
""" % IPPROTO_MPTCP)
        out = json.loads(res["run"]["stdout"])
        self.assertEqual(out, {"tcp": "bound", "mptcp": 1}, out)


class ForgedVerdictTest(unittest.TestCase):
    """S36: a program's own signal or exit code never reads as the backend's CPU clock."""

    def test_s36_self_sent_sigxcpu_is_sg_not_to(self):
        res = backend_run("import os, signal\nos.kill(os.getpid(), signal.SIGXCPU)\n")["run"]
        self.assertEqual((res["status"], res["signal"]), ("SG", "SIGXCPU"), res)
        self.assertNotIn("limit", res["message"] or "", res)

    @unittest.skipUnless(HAVE_RUNSC, "runsc is not installed (Debian: apt-get install runsc)")
    def test_s36_gvisor_exit_codes_are_not_signals(self):
        # runsc run exits 128+N for a signal N, and so does a program that exits 128+N: 152 read
        # as SIGXCPU made a TO, 137 as SIGKILL an SG; runsc's log tells them apart
        for code in (137, 152, 129, 192):
            res = gv_run("import os\nos._exit(%d)\n" % code)["run"]
            self.assertEqual((res["status"], res["code"], res["signal"]), ("RE", code, None), res)
        # and a real signal death is still one
        res = gv_run("import os, signal\nprint('x', flush=True)\nos.kill(os.getpid(), signal.SIGKILL)\n")["run"]
        self.assertEqual((res["status"], res["signal"], res["stdout"]), ("SG", "SIGKILL", "x\n"), res)


def proc_status(pid):
    """{Uid: [real, effective, saved, fs], CapInh, CapPrm, CapEff, CapBnd: int} of a host process, or None once gone."""
    try:
        with open("/proc/%d/status" % pid) as f:
            fields = dict(line.rstrip("\n").split(":\t", 1) for line in f if ":\t" in line)
        out = {k: int(fields[k], 16) for k in ("CapInh", "CapPrm", "CapEff", "CapBnd")}
        out["Uid"] = [int(x) for x in fields["Uid"].split()]
        return out
    except (OSError, ValueError, KeyError):
        return None


# What a bug in runsc would try first, as runsc's own credentials in runsc's own namespaces:
# each needs a capability of the host's user namespace (devtmpfs and mknod: CAP_SYS_ADMIN and
# CAP_MKNOD there; the clock: CAP_SYS_TIME).  Prints {name: errno or 0}.
ESCAPE = r"""
import ctypes, json, os, tempfile
libc = ctypes.CDLL(None, use_errno=True)
def errno_of(rc):
    return 0 if rc == 0 else ctypes.get_errno()
d = tempfile.mkdtemp(dir="/tmp")
out = {"mount_devtmpfs": errno_of(libc.mount(b"none", d.encode(), b"devtmpfs", 0, None))}
d2 = tempfile.mkdtemp(dir="/tmp")
try:
    os.mknod(os.path.join(d2, "null"), 0o20666, os.makedev(1, 3))
    out["mknod"] = 0
    os.unlink(os.path.join(d2, "null"))
except OSError as e:
    out["mknod"] = e.errno
os.rmdir(d2)
class timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]
now = timespec()
libc.clock_gettime(0, ctypes.byref(now))
out["clock_settime"] = errno_of(libc.clock_settime(0, ctypes.byref(now)))  # the same time: harmless if allowed
libc.umount2(d.encode(), 2)
os.rmdir(d)
print(json.dumps(out))
"""


@unittest.skipUnless(HAVE_RUNSC, "runsc is not installed (Debian: apt-get install runsc)")
class RunscCapabilitiesTest(unittest.TestCase):
    """S37: runsc, rootless, is the slot's uid with no capability of the host's; a live session
    under gVisor holds its box (a server-mode backend, stopped cleanly)."""

    @classmethod
    def setUpClass(cls):
        cls.stack = Stack(audit=False, backend_args=("--runsc", RUNSC, "--gvisor-platform", "ptrace"))
        cls.stack.start_backend()

    @classmethod
    def tearDownClass(cls):
        cls.stack.stop()

    def runsc_processes(self):
        """{pid: (argv head, status, same user namespace as ours)} of the box's runsc processes."""
        own_userns = os.readlink("/proc/self/ns/user")
        found = {}
        for pid in box_pids(self.stack.tag):
            try:
                with open("/proc/%d/cmdline" % pid, "rb") as f:
                    argv = f.read().split(b"\0")
                same = os.readlink("/proc/%d/ns/user" % pid) == own_userns
            except OSError:
                continue
            st = proc_status(pid)
            if st is not None and any(a.startswith(b"--root=/tmp/.moat-gvisor") for a in argv):
                found[pid] = (b" ".join(argv[:2]).decode(errors="replace"), st, same)
        # runsc run in ours; in runsc's own: run again (re-executed there: /proc/self/exe), the gofer
        # and the sandbox
        inner = [v for v in found.values() if not v[2]]
        return found if len(inner) >= 3 and any(v[0].startswith("/proc/self/exe") for v in inner) else None

    def test_s37_runsc_is_the_slots_uid_with_no_capability(self):
        code = "print('up', flush=True)\ninput()\n"
        with BackendSession(self.stack.socket, 9, timeout=JOB_TIMEOUT_S) as s:
            s.open("python", code, isolation=1)
            s.output_until(b"up")
            found = wait_until(self.runsc_processes, "runsc run, its gofer and its sandbox in the box",
                               timeout=JOB_TIMEOUT_S)
            # runsc run as re-executed in its own user namespace, which sees the box's files (the
            # gofer's and the sandbox's roots are emptied): its namespaces are where runsc works
            inside = next(pid for pid, (who, _, same) in found.items() if not same and who.startswith("/proc/self/exe"))
            with open("/proc/%d/uid_map" % inside) as f:
                uid_map = f.read().split()
            # the same escape attempts as runsc would make them: its user and mount namespaces, its uid
            # (nsenter -U makes it 0 there, with every capability of that namespace, as runsc has them)
            p = subprocess.run(["nsenter", "-t", str(inside), "-U", "-m", "--", "/usr/bin/python3", "-c", ESCAPE],
                               capture_output=True, text=True, timeout=60)
            s.write(b"\n")
            s.rest()
        uids = {v[1]["Uid"][0] for v in found.values()}
        self.assertEqual(len(uids), 1, found)
        slot_uid = uids.pop()
        self.assertNotEqual(slot_uid, 0, found)
        for pid, (who, st, same) in found.items():
            self.assertEqual(set(st["Uid"]), {slot_uid}, (who, st))
            if same:  # in the host's user namespace: nothing at all (the others' are their namespace's)
                self.assertEqual((st["CapInh"], st["CapPrm"], st["CapEff"], st["CapBnd"]), (0, 0, 0, 0), (who, st))
        # runsc's namespace maps exactly one uid: its 0 is the slot's uid
        self.assertEqual(uid_map, ["0", str(slot_uid), "1"])
        self.assertEqual(p.returncode, 0, p.stderr)
        attempt = json.loads(p.stdout)
        self.assertTrue(all(e in (errno.EPERM, errno.EACCES) for e in attempt.values()), attempt)
        # the same probe as root outside runsc's namespaces (a mount namespace of its own, so the
        # host's mounts are left alone) succeeds: the failures above are the missing capabilities
        ref = subprocess.run(["unshare", "-m", "--propagation", "private", "python3", "-c", ESCAPE],
                             capture_output=True, text=True, timeout=60)
        self.assertEqual(ref.returncode, 0, ref.stderr)
        self.assertEqual(json.loads(ref.stdout), {"mount_devtmpfs": 0, "mknod": 0, "clock_settime": 0})


@unittest.skipUnless(HAVE_RUNSC and os.access("/dev/kvm", os.R_OK | os.W_OK), "needs runsc and a usable /dev/kvm")
class KvmPlatformTest(unittest.TestCase):
    def test_runsc_on_kvm_finds_dev_kvm_in_the_box(self):
        # whether runsc's kvm platform works on this machine is its own matter (the start-up probe
        # decides); a job on it must not fail for a node the box never made
        rc, out, err = backend_run_raw("print('hi')", "python", ("--isolation", "gvisor", "--runsc", RUNSC, "--gvisor-platform",
                                                                 "kvm", "-o", "run_timeout=20000", "--run-timeout", "20000"))
        self.assertEqual(rc, 0, err)
        run = json.loads(out)["run"]
        self.assertNotIn("/dev/kvm", run["stderr"], run)



@unittest.skipUnless(HAVE_RUNSC, "runsc is not installed (Debian: apt-get install runsc)")
class GatewayPathsTest(unittest.TestCase):
    """The paths test_gvisor does not take, through the real gateway for a tenant with
    `isolation: gvisor`: Judge0 submissions queued (wait=false) and batched (a group of entries
    of one C source is one job, its frame built from the first entry's request), and what S36
    changes in the answer and the audit trail."""

    C_SRC = ('#include <stdio.h>\n#include <sys/utsname.h>\nint main(void){struct utsname u; int n; uname(&u);\n'
             'if (scanf("%d", &n) != 1) return 3; printf("%d %s\\n", n, u.release); return 0;}\n')

    @classmethod
    def setUpClass(cls):
        cls.stack = Stack(tenants=TENANTS, backend_args=BACKEND_ARGS).start()

    @classmethod
    def tearDownClass(cls):
        cls.stack.stop()

    def call(self, method, path, body=None):
        return self.stack.request(method, path, body, token=self.stack.tokens["walled"], timeout=JOB_TIMEOUT_S)

    def finished(self, token):
        got = {}

        def done():
            st, _, data = self.call("GET", "/submissions/%s?base64_encoded=false&fields=status,stdout,exit_code,exit_signal" % token)
            self.assertEqual(st, 200, data)
            got.update(data)
            return data["status"]["id"] >= 3
        wait_until(done, "submission %s to finish" % token, timeout=JOB_TIMEOUT_S)
        return got

    def test_judge0_queued_and_batched_submissions_run_under_gvisor(self):
        host = os.uname().release
        st, _, data = self.call("POST", "/submissions?wait=false&base64_encoded=false",
                                {"source_code": "import os; print(os.uname().release)", "language_id": 71})
        self.assertEqual(st, 201, data)
        queued = self.finished(data["token"])
        self.assertEqual(queued["status"]["id"], 3, queued)
        self.assertNotEqual(queued["stdout"].strip(), host, queued)
        entries = [{"source_code": self.C_SRC, "language_id": 50, "stdin": str(n)} for n in range(3)]
        st, _, data = self.call("POST", "/submissions/batch?base64_encoded=false", {"submissions": entries})
        self.assertEqual(st, 201, data)
        for n, t in enumerate(d["token"] for d in data):
            got = self.finished(t)
            self.assertEqual(got["status"]["id"], 3, got)
            number, release = got["stdout"].split()
            self.assertEqual(number, str(n), got)
            self.assertNotEqual(release, host, got)

    def test_s36_exit_code_is_not_a_signal_in_answer_and_audit(self):
        body = {"language": "python", "version": "*", "files": [{"name": "main.py", "content": "import os\nos._exit(137)\n"}]}
        st, headers, data = self.stack.request("POST", "/api/v2/execute", body, token=self.stack.tokens["walled"],
                                               timeout=JOB_TIMEOUT_S)
        self.assertEqual(st, 200, data)
        self.assertEqual((data["run"]["code"], data["run"]["signal"], data["walls"]), (137, None, "namespaces+gvisor"), data)
        rid = headers["x-request-id"]
        record = wait_until(lambda: next((r for r in self.stack.audit_records()
                                          if r.get("request_id") == rid and r.get("type") == "result"), None),
                            "the result record of %s" % rid)
        self.assertEqual(record["walls"], "namespaces+gvisor", record)
        self.assertNotIn("SIGKILL", json.dumps(record), record)


if __name__ == "__main__":
    unittest.main()
