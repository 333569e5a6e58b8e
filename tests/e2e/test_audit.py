"""Black-box tests of the audit writer process (moat-audit-writer) and the
reviewers' CLI (moat-audit): tests/SECURITY-CHECKS.md A4 (kill -9), A5 (hostile
strings), A6 (ownership), group commit, disk full, packets, query/show/
stats/export.

The writer is started the way moat-gateway starts it: as root with one end
of a socketpair per client on descriptors 3.. (--clients N); it drops to
the moat-audit user.  The client below speaks audit/wire/audit_wire.h.  Log
files get chattr +a, so scratch directories are cleaned with chattr -a.
Only Debian's python3 standard library is used; needs root.
"""

import base64
import fcntl
import hashlib
import json
import os
import pwd
import shutil
import signal
import socket
import struct
import subprocess
import tempfile
import threading
import time
import unittest

from moat_harness import wait_until

BUILD = os.environ.get("MOAT_BUILD_DIR", os.path.join(os.path.dirname(__file__), "..", "..", "build"))
WRITER = os.path.join(BUILD, "audit", "moat-audit-writer")
AUDIT = os.path.join(BUILD, "audit", "moat-audit")

MAGIC = 0x4D415544
NOACK = 1  # AUDIT_WIRE_NOACK
REQ = struct.Struct("=IIIIQ")
ACK = struct.Struct("=QQII")
FS_IOC_GETFLAGS = 0x80086601
FS_APPEND_FL = 0x20


def append_only(path):
    """True/False for the append-only flag, None when the fs cannot say."""
    fd = os.open(path, os.O_RDONLY)
    try:
        buf = fcntl.ioctl(fd, FS_IOC_GETFLAGS, b"\0" * 8)
        return bool(struct.unpack("=l", buf[:4] if len(buf) == 4 else buf[:4])[0] & FS_APPEND_FL)
    except OSError:
        return None
    finally:
        os.close(fd)


def rmtree(path):
    subprocess.run(["chattr", "-R", "-a", path], capture_output=True)
    shutil.rmtree(path, ignore_errors=True)


class Client:
    """One socket to the writer: pipelined requests, acks in order."""

    def __init__(self, sock):
        self.sock = sock
        self.tag = 0
        self.buf = b""

    def send(self, body, packet=b"", flags=0):
        if not isinstance(body, bytes):
            body = json.dumps(body).encode()
        self.tag += 1
        self.sock.sendall(REQ.pack(MAGIC, len(body), len(packet), flags, self.tag) + body + packet)
        return self.tag

    def ack(self, timeout=30):
        self.sock.settimeout(timeout)
        while len(self.buf) < ACK.size:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise EOFError("writer closed the socket")
            self.buf += chunk
        a, self.buf = ACK.unpack(self.buf[:ACK.size]), self.buf[ACK.size:]
        return a  # tag, seq, err, reserved

    def call(self, body, packet=b""):
        tag = self.send(body, packet)
        a = self.ack()
        assert a[0] == tag, (a, tag)
        return a


class Writer:
    def __init__(self, adir, nclients=1, env=None, packets=True):
        self.adir = adir
        pairs = [socket.socketpair() for _ in range(nclients)]
        child = [b for _, b in pairs]
        self.clients = [Client(a) for a, _ in pairs]
        fds = [s.fileno() for s in child]

        def setup_fds():
            high = [os.dup2(fd, 200 + i) for i, fd in enumerate(fds)]
            for i, fd in enumerate(high):
                os.dup2(fd, 3 + i)
                os.close(fd)

        e = dict(os.environ)
        e.update(env or {})
        args = [WRITER, "--dir", adir, "--clients", str(nclients)] + ([] if packets else ["--no-packets"])
        self.stderr = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(args, preexec_fn=setup_fds, close_fds=False, env=e, stderr=self.stderr)
        for s in child:
            s.close()

    def close(self, timeout=30):
        for c in self.clients:
            c.sock.close()
        rc = self.proc.wait(timeout)
        self.stderr.seek(0)
        err = self.stderr.read().decode(errors="replace")
        self.stderr.close()
        return rc, err

    def kill9(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)
        self.stderr.close()
        for c in self.clients:
            c.sock.close()


def audit(*args, check=None):
    p = subprocess.run([AUDIT, *args], capture_output=True, timeout=120)
    if check is not None and p.returncode != check:
        raise AssertionError("moat-audit %s: exit %d\n%s" % (" ".join(args), p.returncode, p.stderr.decode(errors="replace")))
    return p


def export(adir, *extra):
    p = audit("export", adir, *extra, check=0)
    return [json.loads(l) for l in p.stdout.decode().splitlines()]


def request(i, tenant="acme", **kw):
    body = {"type": "request", "request_id": "req-%d" % i, "tenant": tenant, "key_id": "k_%s" % tenant,
            "client": "10.0.0.%d" % (i % 250), "endpoint": "execute", "method": "POST", "decision": "allowed",
            "status": 200, "language": "python"}
    body.update(kw)
    return body


class AuditTest(unittest.TestCase):
    def setUp(self):
        if os.geteuid() != 0:
            self.skipTest("needs root")
        for b in (WRITER, AUDIT):
            if not os.path.exists(b):
                self.skipTest("%s not built" % b)
        self.tmp = tempfile.mkdtemp(prefix="moat-audit-e2e-")
        os.chmod(self.tmp, 0o755)
        self.adir = os.path.join(self.tmp, "audit")
        audit("init", self.adir, "--user", "moat-audit", check=0)
        self.writers = []
        self.mounts = []

    def tearDown(self):
        for w in self.writers:
            if w.proc.poll() is None:
                w.proc.kill()
                w.proc.wait()
            w.stderr.close()
            for c in w.clients:
                c.sock.close()
        for m in reversed(self.mounts):
            subprocess.run(["umount", "-l", m], capture_output=True)
        rmtree(self.tmp)

    def start(self, adir=None, **kw):
        w = Writer(adir or self.adir, **kw)
        self.writers.append(w)
        return w

    def verify_ok(self, adir=None):
        p = audit("verify", adir or self.adir)
        self.assertEqual(p.returncode, 0, p.stderr.decode(errors="replace"))
        return p.stdout.decode()

    def log_lines(self, adir=None):
        adir = adir or self.adir
        out = []
        for name in sorted(os.listdir(adir)):
            if name.startswith("audit-") and name.endswith(".log"):
                with open(os.path.join(adir, name), "rb") as f:
                    out.append((name, f.read()))
        return out

    # ---- A4 -----------------------------------------------------------------------

    def test_a4_kill9_mid_stream(self):
        """kill -9 while records stream in: every acknowledged record is in
        the log and verifies; a torn tail is repaired on restart."""
        acked = {}
        w = self.start(nclients=2, env={"MOAT_AUDIT_EPOCH_RECORDS": "50", "MOAT_AUDIT_CHECKPOINT_RECORDS": "40"})
        stop = threading.Event()

        def pump(c, base):
            i, window = 0, []
            try:
                while not stop.is_set():
                    for _ in range(8):
                        rid = "req-%d-%d" % (base, i)
                        window.append((c.send(request(i, request_id=rid)), rid))
                        i += 1
                    for tag, rid in window:
                        t, seq, err, _ = c.ack(10)
                        self.assertEqual(t, tag)
                        if seq:
                            acked[rid] = seq
                    window = []
            except (EOFError, OSError):
                pass

        threads = [threading.Thread(target=pump, args=(c, k)) for k, c in enumerate(w.clients)]
        for t in threads:
            t.start()
        # mid-stream: well past several epochs (50 records) and checkpoints (40) while both clients still send
        wait_until(lambda: len(acked) >= 1000, "1000 records acknowledged")
        w.kill9()
        stop.set()
        for t in threads:
            t.join(30)
        self.assertGreater(len(acked), 100)
        print("\n    %d records acknowledged before kill -9" % len(acked))

        # what a crash mid-write looks like: a torn line at the end
        newest = os.path.join(self.adir, self.log_lines()[-1][0])
        with open(newest, "ab") as f:  # O_APPEND: allowed despite chattr +a
            f.write(b'{"seq":999999,"time":"2026-11-29T16:40:45.1')
        p = audit("verify", self.adir)
        self.assertEqual(p.returncode, 1)
        self.assertIn(b"torn", p.stderr)
        self.assertEqual(len(p.stderr.decode().strip().splitlines()), 1)

        # restart: repaired, chain goes on
        w2 = self.start()
        self.assertNotEqual(w2.clients[0].call(request(1, request_id="after-restart"))[1], 0)
        rc, err = w2.close()
        self.assertEqual(rc, 0, err)
        out = self.verify_ok()
        self.assertIn("1 repaired torn line", out)
        recs = export(self.adir)
        by_rid = {r.get("request_id"): r["seq"] for r in recs if "request_id" in r}
        for rid, seq in acked.items():
            self.assertEqual(by_rid.get(rid), seq, "acknowledged record %s (seq %d) lost" % (rid, seq))
        self.assertEqual([r["seq"] for r in recs], list(range(1, len(recs) + 1)))
        self.assertIn("after-restart", by_rid)
        self.assertTrue(any(r.get("type") == "repair" for r in recs))

    # ---- A5 -------------------------------------------------------------------------

    def test_a5_hostile_tenant_strings(self):
        nasty = ["cr\rlf\nboth\r\n", "nul\u0000inside", 'quote"s and \\backslash\\', "line\u2028sep\u2029para",
                 '"},{"seq":1,"mac":"00"}\n{"seq":2', "esc\x1b[2Jdel\x7f", "\u00e9\u4e2d\U0001f600", "tab\there"]
        w = self.start()
        c = w.clients[0]
        for i, t in enumerate(nasty):
            t_, seq, err, _ = c.call(request(i, tenant=t, request_id="n%d" % i))
            self.assertNotEqual(seq, 0, "tenant %r refused (err %d)" % (t, err))
        # raw invalid UTF-8 inside a JSON string: refused, never logged raw
        for i, raw in enumerate([b"\xff\xfe", b"\xc0\xaf", b"\xed\xa0\x80", b"ok\x80", b"\xe2\x80"]):
            body = b'{"type":"request","request_id":"bad%d","tenant":"x' % i + raw + b'y"}'
            tag, seq, err, _ = c.call(body)
            self.assertEqual(seq, 0)
            self.assertNotEqual(err, 0)
        # raw control bytes in JSON strings are not JSON either
        tag, seq, err, _ = c.call(b'{"type":"request","tenant":"a\nb"}')
        self.assertEqual(seq, 0)
        # the writer's own fields and types
        for body in ({"type": "request", "mac": "00"}, {"type": "request", "prev": "00"}, {"type": "repair"},
                     {"type": "checkpoint", "head_seq": 1}, ["not", "an", "object"]):
            self.assertEqual(c.call(body)[1], 0, body)
        # still working
        self.assertNotEqual(c.call(request(99))[1], 0)
        rc, err = w.close()
        self.assertEqual(rc, 0, err)
        self.verify_ok()
        for name, data in self.log_lines():
            for line in data.split(b"\n")[:-1]:
                self.assertTrue(all(0x20 <= b < 0x7F for b in line), line)
                json.loads(line)
        recs = {r.get("request_id"): r for r in export(self.adir)}
        for i, t in enumerate(nasty):
            self.assertEqual(recs["n%d" % i]["tenant"], t)
        self.assertFalse(any(k and k.startswith("bad") for k in recs))
        # filters take the raw string too
        got = export(self.adir, "--tenant", nasty[0])
        self.assertEqual([r["request_id"] for r in got], ["n0"])
        # the table escapes control characters: nothing raw reaches a terminal
        p = audit("query", self.adir, check=0)
        for b in p.stdout:
            self.assertTrue(b >= 0x20 or b == 0x0A, p.stdout)
        self.assertNotIn(b"\x1b", p.stdout)
        self.assertNotIn("\u2028".encode(), p.stdout)

    # ---- A6 ----------------------------------------------------------------------------

    def test_a6_owner_mode_append_only(self):
        w = self.start()
        self.assertNotEqual(w.clients[0].call(request(1))[1], 0)
        ma = pwd.getpwnam("moat-audit")
        name = self.log_lines()[0][0]
        path = os.path.join(self.adir, name)
        st = os.stat(path)
        self.assertEqual((st.st_uid, st.st_mode & 0o777), (ma.pw_uid, 0o600))
        self.assertEqual(os.stat(self.adir).st_mode & 0o777, 0o700)
        flag = append_only(path)
        if flag is None:
            print("\n    note: FS_IOC_GETFLAGS unsupported here; append-only not checked")
        else:
            self.assertTrue(flag, "log file lacks the append-only flag")
        moat = pwd.getpwnam("moat")

        def as_moat():
            os.setgroups([])
            os.setgid(moat.pw_gid)
            os.setuid(moat.pw_uid)

        probe = ("import os,sys\np=sys.argv[1]\nbad=[]\n"
                 "for what,f in [('open',lambda:os.open(p,os.O_WRONLY)),('append',lambda:os.open(p,os.O_WRONLY|os.O_APPEND)),"
                 "('truncate',lambda:os.truncate(p,0)),('unlink',lambda:os.unlink(p)),('read',lambda:os.open(p,os.O_RDONLY))]:\n"
                 "  try:\n    f(); bad.append(what)\n  except OSError: pass\nprint(','.join(bad))\n")
        p = subprocess.run(["/usr/bin/python3", "-c", probe, path], preexec_fn=as_moat, capture_output=True, timeout=30)
        self.assertEqual(p.stdout.strip(), b"", "user moat could: %s" % p.stdout)
        rc, err = w.close()
        self.assertEqual(rc, 0, err)
        self.verify_ok()

    # ---- group commit --------------------------------------------------------------------

    def test_group_commit_8_clients(self):
        n_per, nclients = 400, 8
        w = self.start(nclients=nclients)
        results = [[] for _ in range(nclients)]

        def run(k):
            c = w.clients[k]
            i = 0
            while i < n_per:
                tags = [c.send(request(i + j, tenant="t%d" % k, request_id="c%d-%d" % (k, i + j))) for j in range(16)]
                for tag in tags:
                    results[k].append(c.ack())
                    self.assertEqual(results[k][-1][0], tag)
                i += 16

        t0 = time.monotonic()
        threads = [threading.Thread(target=run, args=(k,)) for k in range(nclients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        dt = time.monotonic() - t0
        total = sum(len(r) for r in results)
        self.assertEqual(total, n_per * nclients)
        seqs = [a[1] for r in results for a in r]
        self.assertTrue(all(a[1] != 0 and a[2] == 0 for r in results for a in r))
        self.assertEqual(len(set(seqs)), len(seqs))
        print("\n    group commit: %d records from %d clients in %.2f s = %.0f records/s" % (total, nclients, dt, total / dt))
        rc, err = w.close()
        self.assertEqual(rc, 0, err)
        self.verify_ok()
        self.assertEqual(len(self.log_lines()), 1)
        recs = export(self.adir)
        self.assertEqual([r["seq"] for r in recs], list(range(1, len(recs) + 1)))
        self.assertTrue(set(seqs) <= {r["seq"] for r in recs})
        st = json.loads(audit("stats", self.adir, "--format", "json", check=0).stdout)
        self.assertEqual(st["requests"], n_per * nclients)
        self.assertEqual(st["tenants"]["t3"]["allowed"], n_per)

    def test_noack_records_are_written_not_acknowledged(self):
        """Records sent with AUDIT_WIRE_NOACK (denials nobody waits for) are
        sealed in order with the others, and only the others are
        acknowledged, in order; an unknown flag bit is a protocol error."""
        w = self.start(nclients=2)
        c = w.clients[0]
        sent = []
        for i in range(30):
            noack = i % 3 != 2
            tag = c.send(request(i, request_id="n%d" % i), flags=NOACK if noack else 0)
            sent.append((tag, noack))
        acks = [c.ack() for t, noack in sent if not noack]
        self.assertEqual([a[0] for a in acks], [t for t, noack in sent if not noack])
        self.assertTrue(all(a[1] != 0 and a[2] == 0 for a in acks), acks)
        # nothing more comes back for the NOACK records
        c.sock.settimeout(0.5)
        with self.assertRaises(socket.timeout):
            c.sock.recv(1)
        # a flag bit the protocol does not define: the writer closes that client
        bad = w.clients[1]
        bad.send(request(99, request_id="bad"), flags=2)
        bad.sock.settimeout(10)
        self.assertEqual(bad.sock.recv(1), b"")
        rc, err = w.close()
        self.assertEqual(rc, 0, err)
        self.verify_ok()
        ids = [r["request_id"] for r in export(self.adir) if r.get("type") == "request"]
        self.assertEqual(ids, ["n%d" % i for i in range(30)])
        # the seq each acknowledged record got is its place in the log
        self.assertEqual([a[1] for a in acks], [i + 1 + 1 for i in range(30) if i % 3 == 2])

    # ---- disk full ---------------------------------------------------------------------------

    def test_disk_full_then_recovers(self):
        mnt = os.path.join(self.tmp, "small")
        os.mkdir(mnt)
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k,mode=0755", "tmpfs", mnt], check=True)
        self.mounts.append(mnt)
        adir = os.path.join(mnt, "audit")
        audit("init", adir, "--user", "moat-audit", check=0)
        w = self.start(adir, env={"MOAT_AUDIT_EPOCH_RECORDS": "40", "MOAT_AUDIT_CHECKPOINT_RECORDS": "25"})
        c = w.clients[0]
        ok, failed, i = {}, 0, 0
        pad = "x" * 300
        while failed < 50 and i < 20000:
            tag, seq, err, _ = c.call(request(i, request_id="f%d" % i, message=pad))
            if seq:
                self.assertEqual(err, 0)
                self.assertEqual(failed, 0, "ok ack after failures started, before space was freed")
                ok["f%d" % i] = seq
            else:
                self.assertNotEqual(err, 0)
                failed += 1
            i += 1
        self.assertEqual(failed, 50, "the disk never filled")
        self.assertIsNone(w.proc.poll(), "the writer died on a full disk")
        print("\n    disk full after %d records" % len(ok))
        subprocess.run(["mount", "-o", "remount,size=4m", mnt], check=True)
        for j in range(200):
            tag, seq, err, _ = c.call(request(j, request_id="g%d" % j, message=pad))
            self.assertNotEqual(seq, 0, "no recovery after freeing space (err %d)" % err)
            ok["g%d" % j] = seq
        rc, err = w.close()
        self.assertEqual(rc, 0, err)
        self.verify_ok(adir)
        recs = {r.get("request_id"): r["seq"] for r in export(adir) if "request_id" in r}
        for rid, seq in ok.items():
            self.assertEqual(recs.get(rid), seq)

    # ---- packets and show -----------------------------------------------------------------------

    def test_packets_show_round_trip(self):
        code = "print('h\u00e9llo \u4e16\u754c')\nfor i in range(3):\n\tprint(i)\n"
        binary = bytes(range(256)) * 3
        packet = json.dumps({
            "request_id": "rq-1", "tenant": "acme",
            "request": {"language": "python", "version": "3.11",
                        "files": [{"name": "main.py", "content_base64": base64.b64encode(code.encode()).decode()},
                                  {"name": "blob.bin", "content_base64": base64.b64encode(binary).decode()}],
                        "stdin_base64": base64.b64encode(b"line1\nline2").decode(), "args": ["-v", "a b"],
                        "run_timeout_ms": 3000, "compile_timeout_ms": 10000, "run_memory_bytes": 1 << 28,
                        "compile_memory_bytes": 1 << 28},
            "result": {"run": {"stdout": "h\u00e9llo\n0\n1\n2\n", "stderr": "", "code": 0, "status": "ok"}}}).encode()
        raw_packet = b"\x00\x01binary packet\xff\xfe" * 10
        w = self.start()
        c = w.clients[0]
        c.call(request(1, request_id="rq-1"))
        seq = c.call({"type": "result", "request_id": "rq-1", "tenant": "acme", "run": {"status": "ok"}}, packet)[1]
        self.assertNotEqual(seq, 0)
        c.call({"type": "result", "request_id": "rq-raw"}, raw_packet)
        rc, err = w.close()
        self.assertEqual(rc, 0, err)
        h = hashlib.sha256(packet).hexdigest()
        rec = [r for r in export(self.adir) if r.get("packet") == h]
        self.assertEqual(len(rec), 1)
        # packets are appended to the pack beside the log file; the record says where
        name, off, size = rec[0]["packet_at"].split(":")
        self.assertRegex(name, r"^audit-\d{16}\.pack$")
        path = os.path.join(self.adir, name)
        self.assertEqual(os.stat(path).st_mode & 0o777, 0o600)
        with open(path, "rb") as f:
            f.seek(int(off))
            self.assertEqual(f.read(int(size)), packet)
        p = audit("show", self.adir, "rq-1", check=0)
        out = p.stdout.decode()
        self.assertIn("record seq", out)
        self.assertIn("SHA-256 matches", out)
        block = [l.split("| ", 1)[1] for l in out.splitlines() if "| " in l]
        self.assertIn("print('h\u00e9llo \u4e16\u754c')", block)
        self.assertIn("\tprint(i)", block)
        self.assertIn(base64.b64encode(binary).decode(), out)  # binary: base64 as stored
        self.assertIn("line2", block)
        self.assertIn("\\ no newline at end", out)  # stdin had no final newline
        self.assertEqual(audit("show", self.adir, "rq-1", "--raw-packet", check=0).stdout, packet)
        self.assertEqual(audit("show", self.adir, "rq-raw", "--raw-packet", check=0).stdout, raw_packet)
        self.assertEqual(audit("show", self.adir, "no-such", check=1).stdout.count(b"record seq"), 0)
        # a tampered packet is reported
        subprocess.run(["chattr", "-a", path], capture_output=True)
        with open(path, "r+b") as f:
            f.seek(int(off) + 10)
            f.write(b"X")
        p = audit("show", self.adir, "rq-1", check=1)
        self.assertIn(b"does not match", p.stderr)
        self.assertEqual(len(p.stderr.strip().splitlines()), 1)

    # ---- query / stats / export / verify ---------------------------------------------------------

    def test_cli_query_stats_export(self):
        w = self.start()
        c = w.clients[0]
        c.call(request(1, tenant="acme"))
        c.call(request(2, tenant="acme", decision="denied", reason="rate", status=429))
        c.call(request(3, tenant="globex", decision="denied", reason="auth", status=401, key_id=None))
        c.call(request(4, tenant="globex", language="c"))
        c.call({"type": "result", "request_id": "req-4", "tenant": "globex", "run": {"status": "ok", "code": 0}})
        rc, err = w.close()
        self.assertEqual(rc, 0, err)
        recs = export(self.adir)
        q = lambda *a: [json.loads(l)["request_id"] for l in
                        audit("query", self.adir, "--format", "json", *a, check=0).stdout.decode().splitlines()]
        self.assertEqual(q("--tenant", "acme"), ["req-1", "req-2"])
        self.assertEqual(q("--decision", "denied"), ["req-2", "req-3"])
        self.assertEqual(q("--reason", "auth"), ["req-3"])
        self.assertEqual(q("--status", "429"), ["req-2"])
        self.assertEqual(q("--language", "c"), ["req-4"])
        self.assertEqual(q("--key-id", "k_acme"), ["req-1", "req-2"])
        self.assertEqual(q("--type", "result"), ["req-4"])
        t = recs[1]["time"]
        self.assertEqual(len(q("--until", "2000-01-01T00:00:00Z")), 0)
        self.assertEqual(len(q("--since", "2000-01-01T00:00:00Z", "--tenant", "acme")), 2)
        self.assertEqual(len(q("--since", str(int(time.time()) + 3600))), 0)
        self.assertEqual(len(q("--since", t, "--tenant", "acme")), 2)
        # json output is the lines as stored
        lines = [l for _, d in self.log_lines() for l in d.decode().splitlines()]
        self.assertEqual(audit("export", self.adir, check=0).stdout.decode().splitlines(), lines)
        table = audit("query", self.adir, check=0).stdout.decode()
        self.assertIn("DECISION/REASON", table)
        self.assertIn("denied/rate", table)
        st = json.loads(audit("stats", self.adir, "--format", "json", check=0).stdout)
        self.assertEqual(st["tenants"]["acme"], {"requests": 2, "allowed": 1, "denied": 1, "reasons": {"rate": 1}})
        self.assertEqual(st["tenants"]["globex"]["reasons"], {"auth": 1})
        self.assertIn("globex", audit("stats", self.adir, check=0).stdout.decode())
        # usage errors: one line on stderr, exit 2
        for args in (["query", self.adir, "--since", "yesterday"], ["query", self.adir, "--bogus", "1"],
                     ["show", self.adir], ["frobnicate", self.adir], ["query", self.adir, "--format", "xml"],
                     ["verify", self.adir, "--key", "/nonexistent"]):
            p = audit(*args)
            self.assertEqual(p.returncode, 2, args)
            self.assertEqual(len(p.stderr.strip().splitlines()), 1, (args, p.stderr))
        self.assertEqual(audit("--help").returncode, 0)
        self.assertIn(b"query", audit("query", "--help").stdout)

        # tamper with a copy: query prints what verified, then fails
        copy = os.path.join(self.tmp, "copy")
        shutil.copytree(self.adir, copy)
        subprocess.run(["chattr", "-R", "-a", copy], capture_output=True)
        name = self.log_lines(copy)[0][0]
        with open(os.path.join(copy, name), "rb") as f:
            data = f.read().split(b"\n")
        data[3] = data[3].replace(b"globex", b"globey")
        with open(os.path.join(copy, name), "wb") as f:
            f.write(b"\n".join(data))
        p = audit("query", copy, "--format", "json", "--key", os.path.join(self.adir, "verifier.key"))
        self.assertEqual(p.returncode, 1)
        self.assertEqual([json.loads(l)["seq"] for l in p.stdout.decode().splitlines()], [1, 2, 3])
        self.assertIn(b"seq 4 fails its MAC", p.stderr)
        self.assertEqual(len(p.stderr.strip().splitlines()), 1)
        p = audit("verify", copy)
        self.assertEqual(p.returncode, 1)
        self.assertIn(b"audit-0000000000000001.log:4: seq 4", p.stderr)
        # the CLI never modified anything
        self.verify_ok()


if __name__ == "__main__":
    unittest.main()
