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
S37  runsc runs as root of the box (in the host's user namespace) for the
     whole stage, outside any seccomp filter: it holds only the
     capabilities it uses, not CAP_SYS_MODULE, CAP_SYS_TIME, CAP_SYS_RAWIO,
     CAP_BPF and the rest, and no inheritable ones.
Also here, not an S-check: runsc on the kvm platform (what `auto` picks
where the start-up probe runs a trivial sandbox on kvm) opens /dev/kvm in
the box's mount namespace, which had no such node: every gVisor job failed
RE 128 with runsc's "open /dev/kvm: no such file or directory"."""

import json
import os
import socket
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


# What runsc may hold (backend/box_gvisor.c runsc_caps): CHOWN, DAC_OVERRIDE, DAC_READ_SEARCH,
# FOWNER, FSETID, KILL, SETGID, SETUID, SETPCAP, SYS_CHROOT, SYS_PTRACE, SYS_ADMIN, IPC_LOCK,
# SYS_RESOURCE
RUNSC_CAPS = sum(1 << c for c in (0, 1, 2, 3, 4, 5, 6, 7, 8, 18, 19, 21, 14, 24))
NEVER = {"CAP_SYS_MODULE": 16, "CAP_SYS_RAWIO": 17, "CAP_SYS_BOOT": 22, "CAP_SYS_TIME": 25, "CAP_MKNOD": 27,
         "CAP_MAC_ADMIN": 33, "CAP_SYSLOG": 34, "CAP_PERFMON": 38, "CAP_BPF": 39}


def status_caps(pid):
    """{CapInh, CapBnd, CapEff: int} of a host process, or None once it is gone."""
    try:
        with open("/proc/%d/status" % pid) as f:
            return {k: int(v, 16) for k, v in (line.split(":\t") for line in f) if k in ("CapInh", "CapBnd", "CapEff")}
    except (OSError, ValueError):
        return None


@unittest.skipUnless(HAVE_RUNSC, "runsc is not installed (Debian: apt-get install runsc)")
class RunscCapabilitiesTest(unittest.TestCase):
    """S37: the root processes runsc leaves in the host's user namespace hold only what it uses.
    A live session under gVisor holds its box (a server-mode backend, stopped cleanly)."""

    @classmethod
    def setUpClass(cls):
        cls.stack = Stack(audit=False, backend_args=("--runsc", RUNSC, "--gvisor-platform", "ptrace"))
        cls.stack.start_backend()

    @classmethod
    def tearDownClass(cls):
        cls.stack.stop()

    def runsc_root_processes(self):
        own_userns = os.readlink("/proc/self/ns/user")
        found = {}
        for pid in box_pids(self.stack.tag):
            try:
                with open("/proc/%d/cmdline" % pid, "rb") as f:
                    argv = f.read().split(b"\0")
                same_userns = os.readlink("/proc/%d/ns/user" % pid) == own_userns
            except OSError:
                continue
            # runsc run and its gofer (the sandbox is nobody in a user namespace of its own)
            if same_userns and any(a.startswith(b"--root=/tmp/.moat-gvisor") for a in argv):
                caps = status_caps(pid)
                if caps is not None:
                    found[b" ".join(argv[:1] + argv[-4:]).decode(errors="replace")] = caps
        return found if len(found) >= 2 else None  # both: run and the gofer

    def test_s37_runsc_holds_only_the_capabilities_it_uses(self):
        code = "print('up', flush=True)\ninput()\n"
        with BackendSession(self.stack.socket, 9, timeout=JOB_TIMEOUT_S) as s:
            s.open("python", code, isolation=1)
            s.output_until(b"up")
            found = wait_until(self.runsc_root_processes, "runsc run and its gofer in the box", timeout=JOB_TIMEOUT_S)
            s.write(b"\n")
            s.rest()
        for who, caps in found.items():
            self.assertEqual(caps["CapInh"], 0, (who, caps))
            self.assertEqual(caps["CapBnd"] & ~RUNSC_CAPS, 0, (who, hex(caps["CapBnd"])))
            for name, bit in NEVER.items():
                self.assertFalse(caps["CapEff"] & (1 << bit), (who, name, hex(caps["CapEff"])))


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
