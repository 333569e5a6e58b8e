"""Black-box tests of the audit writer process (moat-audit-writer) and the
reviewers' CLI (moat-audit): tests/SECURITY-CHECKS.md A4 (kill -9), A5 (hostile
strings), A6 (ownership), A8 (the window a cut tail goes unnoticed in), A9
(the trust anchor), group commit, disk full and the disk reserve, packets,
query/show/stats/export, an export verified on its own, a reviewer who is
not root.

The writer is started the way moat-gateway starts it: as root with one end
of a socketpair per client on descriptors 3.. (--clients N); it drops to
the moat-audit user.  The client below speaks audit/wire/audit_wire.h.  Log
files get chattr +a, so scratch directories are cleaned with chattr -a.
Only Debian's python3 standard library is used; needs root.
"""

import base64
import calendar
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

from moat_harness import reachable, wait_until

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
    def __init__(self, adir, nclients=1, env=None, packets=True, args=()):
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
        args = [WRITER, "--dir", adir, "--clients", str(nclients)] + ([] if packets else ["--no-packets"]) + list(args)
        self.stderr = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(args, preexec_fn=setup_fds, close_fds=False, env=e, stderr=self.stderr)
        for s in child:
            s.close()

    def stderr_text(self):
        """What the writer said so far (pread: the offset it writes at is shared)."""
        return os.pread(self.stderr.fileno(), 1 << 20, 0).decode(errors="replace")

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


def as_user(name):
    """A preexec_fn that becomes user name (no groups)."""
    pw = pwd.getpwnam(name)

    def drop():
        os.setgroups([])
        os.setgid(pw.pw_gid)
        os.setuid(pw.pw_uid)
    return drop


def checkpoint_heads(adir):
    """The head seqs checkpoints.log lists."""
    try:
        with open(os.path.join(adir, "checkpoints.log")) as f:
            return [int(l.split()[0]) for l in f]
    except FileNotFoundError:
        return []


def ms_of(t):
    """A record's time ("2026-11-29T16:40:45.123Z") in ms since the epoch."""
    sec = time.strptime(t[:19], "%Y-%m-%dT%H:%M:%S")
    return int(calendar.timegm(sec)) * 1000 + int(t[20:23])


def denials(client="203.0.113.7", reason="auth", count=3, statuses=None):
    """The gateway's summary of coalesced denials (FORMAT.md)."""
    return {"type": "denials", "client": client, "reason": reason, "count": count,
            "since": "2026-11-29T16:40:45.123Z", "until": "2026-11-29T16:40:55.001Z",
            "statuses": statuses or {"401": count}}


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
        self.init_out = audit("init", self.adir, "--user", "moat-audit", check=0).stdout.decode()
        # the reviewers' copy of verifier.key, kept apart from the trail (off the host, in life)
        self.key = os.path.join(self.tmp, "offhost", "verifier.key")
        os.mkdir(os.path.dirname(self.key))
        shutil.copy(os.path.join(self.adir, "verifier.key"), self.key)
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

    def copy_of(self, adir, name="copy"):
        """A copy of a trail, to cut or tamper with (no append-only flags)."""
        copy = os.path.join(self.tmp, name)
        shutil.copytree(adir, copy)
        subprocess.run(["chattr", "-R", "-a", copy], capture_output=True)
        return copy

    def cut(self, adir, drop):
        """Removes the last drop lines of the newest log file, as an intruder would."""
        name, data = self.log_lines(adir)[-1]
        lines = data.split(b"\n")[:-1]
        with open(os.path.join(adir, name), "wb") as f:
            f.write(b"".join(l + b"\n" for l in lines[:len(lines) - drop]))
        return [json.loads(l) for l in lines[len(lines) - drop:]]

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
        p = audit("verify", self.adir, "--key", self.key)
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
        bad.send(request(99, request_id="bad"), flags=4)  # (2 is AUDIT_WIRE_QUERY)
        bad.sock.settimeout(10)
        self.assertEqual(bad.sock.recv(1), b"")
        rc, err = w.close()
        self.assertEqual(rc, 0, err)
        self.verify_ok()
        recs = [r for r in export(self.adir) if r.get("type") == "request"]
        self.assertEqual([r["request_id"] for r in recs], ["n%d" % i for i in range(30)])
        # the seq each acknowledged record got is its place in the log
        self.assertEqual([a[1] for a in acks], [r["seq"] for i, r in enumerate(recs) if i % 3 == 2])

    # ---- disk full ---------------------------------------------------------------------------

    def small_trail(self, size):
        """A new trail on a tmpfs of size ("256k"): (its mount point, its directory)."""
        mnt = os.path.join(self.tmp, "small")
        os.mkdir(mnt)
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=%s,mode=0755" % size, "tmpfs", mnt], check=True)
        self.mounts.append(mnt)
        adir = os.path.join(mnt, "audit")
        audit("init", adir, "--user", "moat-audit", check=0)
        return mnt, adir

    def test_disk_full_then_recovers(self):
        mnt, adir = self.small_trail("256k")
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
        p = audit("show", self.adir, "rq-1", "--key", self.key, check=1)
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
        at = [i for i, l in enumerate(data) if b'"request_id":"req-3"' in l][0]  # seq at + 1
        data[at] = data[at].replace(b"globex", b"globey")
        with open(os.path.join(copy, name), "wb") as f:
            f.write(b"\n".join(data))
        p = audit("query", copy, "--format", "json", "--key", self.key)
        self.assertEqual(p.returncode, 1)
        self.assertEqual([json.loads(l)["seq"] for l in p.stdout.decode().splitlines()], list(range(1, at + 1)))
        self.assertIn(b"seq %d fails its MAC" % (at + 1), p.stderr)
        self.assertEqual(len(p.stderr.strip().splitlines()), 1)
        p = audit("verify", copy, "--key", self.key)
        self.assertEqual(p.returncode, 1)
        self.assertIn(b"audit-0000000000000001.log:%d: seq %d" % (at + 1, at + 1), p.stderr)
        # the CLI never modified anything
        self.verify_ok()

    # ---- A8: the window a cut tail goes unnoticed in ------------------------------------------

    def test_a8_checkpoint_within_the_delay(self):
        """Every record is covered by a signed checkpoint within
        checkpoint_delay_ms (default 1 s) of being written, with
        checkpoint_seconds an hour away and no more records coming; a cut
        that takes it is then caught.  Idle, nothing more is signed."""
        w = self.start(args=["--checkpoint-seconds", "3600"])
        c = w.clients[0]
        seqs = [c.call(request(i, request_id="a%d" % i))[1] for i in range(3)]
        wait_until(lambda: max(checkpoint_heads(self.adir), default=0) >= seqs[-1],
                   "a signed checkpoint over seq %d" % seqs[-1])
        p = audit("verify", self.adir, "--key", self.key, "--strict", "--json")
        self.assertEqual(p.returncode, 0, p.stderr)
        v = json.loads(p.stdout)
        self.assertEqual((v["ok"], v["uncovered"], v["covered_seq"]), (True, 0, v["last_seq"]))
        # idle: nothing more is signed or written (the wait is the behaviour under test: 2.5 delays)
        before = (checkpoint_heads(self.adir), self.log_lines())
        time.sleep(2.5)
        self.assertEqual((checkpoint_heads(self.adir), self.log_lines()), before, "the writer signs while idle")
        w.kill9()  # no checkpoint at close: what covers the records is the timed one
        recs = export(self.adir, "--key", self.key)
        last = [r for r in recs if r.get("request_id") == "a2"][0]
        ckpt = [r for r in recs if r.get("type") == "checkpoint" and r["head_seq"] >= last["seq"]][0]
        print("\n    signed checkpoint %d ms after the last record (writer's clock)"
              % (ms_of(ckpt["time"]) - ms_of(last["time"])))
        # a cut that takes the last record (and the checkpoint after it) is caught
        copy = self.copy_of(self.adir)
        self.assertEqual([r.get("request_id") for r in self.cut(copy, 2)], ["a2", None])
        p = audit("verify", copy, "--key", self.key)
        self.assertEqual(p.returncode, 1)
        self.assertIn(b"the tail was truncated", p.stderr)

    def test_a8_verify_counts_uncovered_records(self):
        """verify names the records no signed checkpoint covers yet (removing
        only those cannot be detected); --strict fails while there are any."""
        w = self.start(args=["--checkpoint-seconds", "3600", "--checkpoint-delay-ms", "3600000"])
        for i in range(3):
            self.assertNotEqual(w.clients[0].call(request(i))[1], 0)
        p = audit("verify", self.adir, "--key", self.key)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn(b"NOT COVERED: 4 record(s) at the end (seq 1-4)", p.stdout)
        p = audit("verify", self.adir, "--key", self.key, "--strict")
        self.assertEqual(p.returncode, 1)
        self.assertIn(b"--strict: 4 record(s) at the end (seq 1-4) are not covered", p.stderr)
        v = json.loads(audit("verify", self.adir, "--key", self.key, "--strict", "--json").stdout)
        self.assertEqual((v["ok"], v["verified"], v["uncovered"], v["covered_seq"], v["last_seq"]), (False, True, 4, 0, 4))
        w.kill9()
        # the window: a cut of uncovered records alone verifies
        copy = self.copy_of(self.adir)
        self.cut(copy, 2)
        p = audit("verify", copy, "--key", self.key)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn(b"NOT COVERED: 2 record(s)", p.stdout)
        # a restart and a clean stop cover them all
        w2 = self.start()
        self.assertEqual(w2.close()[0], 0)
        out = audit("verify", self.adir, "--key", self.key, "--strict", check=0).stdout
        self.assertIn(b"covered: every record", out)

    # ---- A9: the trust anchor ----------------------------------------------------------------

    def test_a9_trust_anchor(self):
        """A trail replaced whole, verifier.key included, verifies against
        its own key: verify says so loudly (stderr and --json) whenever the
        anchor comes from the directory, and fails against the reviewer's
        copy (--key) or fingerprint (--key-fingerprint).  The writer's user
        cannot read verifier.key (K0 would let it re-MAC every epoch)."""
        with open(self.key, "rb") as f:
            fp = "SHA256:" + hashlib.sha256(f.read()).hexdigest()
        self.assertIn(fp, self.init_out)  # init prints it; sha256sum of the copy gives it too
        w = self.start()
        for i in range(5):
            w.clients[0].call(request(i))
        rc, err = w.close()
        self.assertEqual(rc, 0, err)
        self.assertNotIn("can read verifier.key", err)
        # a directory made before: the writer says it can read K0
        ma = pwd.getpwnam("moat-audit")
        os.chown(os.path.join(self.adir, "verifier.key"), ma.pw_uid, ma.pw_gid)
        rc, err = self.start().close()
        self.assertIn("WARNING: this user can read verifier.key", err)
        os.chown(os.path.join(self.adir, "verifier.key"), 0, 0)
        probe = "import sys\nfor p in sys.argv[1:]:\n  try: open(p,'rb'); print('read', p)\n  except OSError: print('no', p)\n"
        p = subprocess.run(["/usr/bin/python3", "-c", probe, os.path.join(self.adir, "verifier.key"),
                            os.path.join(self.adir, "signing.key")], preexec_fn=as_user("moat-audit"), capture_output=True)
        self.assertEqual(p.stdout.decode().split(), ["no", os.path.join(self.adir, "verifier.key"),
                                                     "read", os.path.join(self.adir, "signing.key")])
        genuine = self.copy_of(self.adir, "genuine")

        # the anchor from the reviewer's copy, or checked against its fingerprint: quiet, and says which
        for how in (["--key", self.key], ["--key-fingerprint", fp], ["--key-fingerprint", fp.upper().replace("SHA256", "SHA256")]):
            p = audit("verify", genuine, *how, "--json")
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertNotIn(b"WARNING", p.stderr)
            v = json.loads(p.stdout)
            self.assertEqual((v["anchor"]["source"], v["anchor"]["fingerprint"], v["anchor"]["warning"]),
                             ("file" if how[0] == "--key" else "fingerprint", fp, None))

        # the intruder's trail: fresh keys, its own records, its own verifier.key
        forged = os.path.join(self.tmp, "forged")
        audit("init", forged, "--user", "moat-audit", check=0)
        w = self.start(forged)
        w.clients[0].call(request(1, tenant="nobody-was-here"))
        self.assertEqual(w.close()[0], 0)
        rmtree(self.adir)
        shutil.copytree(forged, self.adir)
        for how in ([], ["--key", os.path.join(self.adir, "verifier.key")],
                    ["--key", os.path.join(self.adir, ".", "verifier.key")]):
            p = audit("verify", self.adir, *how)
            self.assertEqual(p.returncode, 0, p.stderr)  # it does verify, against itself ...
            err = p.stderr.decode()
            self.assertIn("WARNING", err)  # ... and says loudly what that is worth
            self.assertIn("inside the directory being checked", err)
            v = json.loads(audit("verify", self.adir, *how, "--json").stdout)
            self.assertEqual(v["anchor"]["source"], "directory")
            self.assertIn("replaced whole", v["anchor"]["warning"])
        for cmd in ("query", "stats", "export"):  # every reader says it
            self.assertIn(b"WARNING", audit(cmd, self.adir, check=0).stderr)
        p = audit("verify", self.adir, "--key", self.key)  # the forged checkpoints fail first
        self.assertEqual(p.returncode, 1)
        self.assertIn(b"verification FAILED after 0 good records", p.stderr)
        p = audit("verify", self.adir, "--key", self.key, "--checkpoints", "/dev/null")  # and the records too
        self.assertEqual(p.returncode, 1)
        self.assertIn(b"seq 1 fails its MAC", p.stderr)
        p = audit("verify", self.adir, "--key-fingerprint", fp, "--json")
        self.assertEqual(p.returncode, 1)
        self.assertIn(b"not the " + fp.encode() + b" given", p.stderr)
        v = json.loads(p.stdout)
        self.assertFalse(v["ok"])
        self.assertIn("not the ones expected", v["problem"])
        for bad in ("SHA256:xyz", "sha256:" + fp[7:], fp[7:]):
            self.assertEqual(audit("verify", self.adir, "--key-fingerprint", bad).returncode, 2)

    # ---- reviewers: a copy, an export, the query table ----------------------------------------

    def test_reviewer_not_root_reads_a_copy(self):
        """A reviewer who is not root (user nobody) verifies and reads a copy
        of the trail, taken as a tar archive without the writer's keys, with
        the off-host key: verify needs no root, no write access and no state
        file, and changes nothing.  The live directory itself is refused with a clear error."""
        w = self.start()
        c = w.clients[0]
        c.call(request(1, request_id="rq-1"))
        c.call({"type": "result", "request_id": "rq-1", "tenant": "acme", "run": {"status": "OK"}}, b'{"code":"print(1)"}')
        self.assertEqual(w.close()[0], 0)
        nobody = pwd.getpwnam("nobody")
        home = os.path.join(self.tmp, "reviewer")
        os.mkdir(home)
        os.chown(home, nobody.pw_uid, nobody.pw_gid)
        archive = os.path.join(self.tmp, "trail.tar")
        # as moat-audit(1) says: without the writer's keys
        subprocess.run(["tar", "-C", self.adir, "--exclude=./state", "--exclude=./signing.key", "-cf", archive, "."], check=True)
        os.chmod(archive, 0o644)
        os.chmod(self.key, 0o644)
        os.chmod(os.path.dirname(self.key), 0o755)
        copy = os.path.join(home, "trail")

        def as_nobody(*args, check=0):
            args = [reachable(AUDIT) if a == AUDIT else a for a in args]  # the checkout may be root's alone
            p = subprocess.run(list(args), preexec_fn=as_user("nobody"), capture_output=True, timeout=120, cwd=home)
            if check is not None and p.returncode != check:
                raise AssertionError("%s: exit %d\n%s" % (args, p.returncode, p.stderr.decode(errors="replace")))
            return p

        as_nobody("/bin/mkdir", copy)
        as_nobody("/bin/tar", "-C", copy, "-xf", archive)
        self.assertFalse(os.path.exists(os.path.join(copy, "state")))
        before = {n: os.stat(os.path.join(copy, n)) for n in os.listdir(copy)}
        k = ["--key", self.key]
        out = as_nobody(AUDIT, "verify", copy, *k, "--strict").stdout
        self.assertIn(b"OK: ", out)
        self.assertIn(b"rq-1", as_nobody(AUDIT, "query", copy, *k).stdout)
        self.assertIn(b"print(1)", as_nobody(AUDIT, "show", copy, "rq-1", *k).stdout)
        self.assertEqual(json.loads(as_nobody(AUDIT, "stats", copy, *k, "--format", "json").stdout)["requests"], 1)
        exp = as_nobody(AUDIT, "export", copy, *k).stdout
        with open(os.path.join(home, "export.jsonl"), "wb") as f:
            f.write(exp)
        as_nobody(AUDIT, "verify", "--export", os.path.join(home, "export.jsonl"), *k, "--strict",
                  "--checkpoints", os.path.join(copy, "checkpoints.log"))
        after = {n: os.stat(os.path.join(copy, n)) for n in os.listdir(copy)}
        self.assertEqual(sorted(before), sorted(after))
        for n in before:
            self.assertEqual((before[n].st_size, before[n].st_mtime_ns), (after[n].st_size, after[n].st_mtime_ns), n)
        # the live directory (moat-audit's, mode 0700): a clear refusal, no crash
        p = as_nobody(AUDIT, "verify", self.adir, *k, check=1)
        self.assertIn(b"Permission denied", p.stderr)
        self.assertEqual(len(p.stderr.strip().splitlines()), 1)

    def test_export_verified_on_its_own(self):
        """moat-audit export's output and the verifier key are enough to
        verify: verify --export checks the chain, MACs and signatures; an
        export cut by time starts later and verifies; one filtered by tenant
        has gaps and does not; an edit is found."""
        w = self.start()
        c = w.clients[0]
        for i in range(20):
            c.call(request(i, tenant="acme" if i % 2 else "globex"))
        self.assertEqual(w.close()[0], 0)
        out = os.path.join(self.tmp, "out")
        os.mkdir(out)

        def exported(name, *filters):
            path = os.path.join(out, name)
            with open(path, "wb") as f:
                f.write(audit("export", self.adir, "--key", self.key, *filters, check=0).stdout)
            return path

        full = exported("full.jsonl")
        ckpts = os.path.join(self.adir, "checkpoints.log")
        v = json.loads(audit("verify", "--export", full, "--key", self.key, "--checkpoints", ckpts, "--strict", "--json",
                             check=0).stdout)
        self.assertEqual((v["ok"], v["first_seq"], v["uncovered"], v["anchor"]["source"]), (True, 1, 0, "file"))
        with open(full) as f:
            self.assertEqual(v["records"], len(f.read().splitlines()))
        with open(full, "rb") as f:  # from stdin too
            p = subprocess.run([AUDIT, "verify", "--export", "-", "--key", self.key], stdin=f, capture_output=True)
        self.assertEqual(p.returncode, 0, p.stderr)
        t = [r for r in export(self.adir, "--key", self.key) if r.get("request_id") == "req-10"][0]["time"]
        later = exported("later.jsonl", "--since", t)
        v = json.loads(audit("verify", "--export", later, "--key", self.key, "--json", check=0).stdout)
        self.assertTrue(v["ok"])
        self.assertGreater(v["first_seq"], 1)
        p = audit("verify", "--export", exported("acme.jsonl", "--tenant", "acme"), "--key", self.key)
        self.assertEqual(p.returncode, 1)
        self.assertIn(b"missing here", p.stderr)
        with open(full, "rb") as f:
            data = f.read().replace(b'"tenant":"globex"', b'"tenant":"globey"', 1)
        with open(full, "wb") as f:
            f.write(data)
        p = audit("verify", "--export", full, "--key", self.key)
        self.assertEqual(p.returncode, 1)
        self.assertIn(b"fails its MAC", p.stderr)
        # usage: --export takes no DIR and needs --key
        self.assertEqual(audit("verify", "--export", full).returncode, 2)
        self.assertEqual(audit("verify", self.adir, "--export", full, "--key", self.key).returncode, 2)

    def test_query_request_id_status_and_summaries(self):
        """The query table shows the request id (show's key); --status takes
        an execution's outcome as well as the HTTP status; the gateway's
        denial summaries are sealed (NOACK) and counted by stats per tenant
        (none) and reason; "dropped" is the writer's own type."""
        w = self.start()
        c = w.clients[0]
        c.call(request(1, request_id="0123456789abcdef"))
        c.call({"type": "result", "request_id": "0123456789abcdef", "tenant": "acme", "status": 200,
                "run": {"status": "TO", "code": None}})
        c.call(request(2, request_id="fedcba9876543210", decision="denied", reason="auth", status=401, tenant=None))
        c.send(denials(count=57, statuses={"401": 50, "429": 7}), flags=NOACK)
        c.send(denials(client="2001:db8:1:2::/64", reason="rate", count=5, statuses={"429": 5}), flags=NOACK)
        self.assertEqual(c.call({"type": "dropped", "count": 1})[1], 0)  # the writer's own
        rc, err = w.close()
        self.assertEqual(rc, 0, err)
        table = audit("query", self.adir, "--key", self.key, check=0).stdout.decode()
        self.assertIn("REQUEST_ID", table.splitlines()[0])
        self.assertIn("0123456789abcdef", table)
        self.assertIn("57@203.0.113.7", table)
        q = lambda *a: [(json.loads(l).get("type"), json.loads(l).get("request_id")) for l in
                        audit("query", self.adir, "--key", self.key, "--format", "json", *a, check=0).stdout.decode().splitlines()]
        self.assertEqual(q("--status", "TO"), [("result", "0123456789abcdef")])
        self.assertEqual(q("--status", "401"), [("request", "fedcba9876543210"), ("denials", None)])
        self.assertEqual(q("--status", "429"), [("denials", None), ("denials", None)])
        self.assertEqual(q("--type", "denials", "--reason", "rate"), [("denials", None)])
        st = json.loads(audit("stats", self.adir, "--key", self.key, "--format", "json", check=0).stdout)
        self.assertEqual(st["tenants"]["(none)"], {"requests": 63, "allowed": 0, "denied": 63, "reasons": {"auth": 58, "rate": 5}})
        self.assertEqual((st["requests"], st["denial_summaries"], st["dropped"]), (64, 2, 0))
        self.assertIn("2 denial summaries", audit("stats", self.adir, "--key", self.key, check=0).stdout.decode())

    # ---- the disk reserve ---------------------------------------------------------------------

    def test_disk_reserve_keeps_room_for_acknowledged_records(self):
        """Denials (sent NOACK) flood a small audit filesystem: below the
        reserve they are counted, not written, while an acknowledged record
        still goes through; the count is logged and recorded ("dropped")
        once there is room again, and written + dropped = sent."""
        mnt, adir = self.small_trail("4m")
        reserve = 1 << 20
        w = self.start(adir, packets=False, args=["--reserve-bytes", str(reserve)])
        c = w.clients[0]
        pad = "x" * 300
        sent = 12000  # about 5 MB of records: more than the 3 MiB above the reserve
        for i in range(sent):
            c.send(request(i, request_id="d%d" % i, decision="denied", reason="auth", status=401, message=pad), flags=NOACK)
        tag, seq, err, _ = c.call(request(0, request_id="acked", message=pad))
        self.assertNotEqual(seq, 0, "an acknowledged record was refused below the reserve (err %d)" % err)
        said = w.stderr_text()
        self.assertIn("disk reserve: less than %d bytes free" % reserve, said)
        free = os.statvfs(mnt).f_bavail * os.statvfs(mnt).f_frsize
        self.assertGreater(free, reserve - 64 * 1024, "denials ate into the reserve")
        print("\n    reserve reached: %d bytes free of 4 MiB, reserve %d" % (free, reserve))
        # room again: the count is recorded, and denials are written again
        subprocess.run(["mount", "-o", "remount,size=64m", mnt], check=True)
        wait_until(lambda: any(b'"type":"dropped"' in d for _, d in self.log_lines(adir)), "a dropped record")
        self.assertIn("there is room again", w.stderr_text())
        for i in range(sent, sent + 100):
            c.send(request(i, request_id="d%d" % i, decision="denied", reason="auth", status=401), flags=NOACK)
        self.assertNotEqual(c.call(request(1, request_id="acked-2"))[1], 0)
        rc, err = w.close()
        self.assertEqual(rc, 0, err)
        self.verify_ok(adir)
        recs = export(adir)
        written = sum(1 for r in recs if str(r.get("request_id", "")).startswith("d"))
        dropped = sum(r["count"] for r in recs if r.get("type") == "dropped")
        print("    %d denials sent: %d written, %d dropped (%d dropped record(s))"
              % (sent + 100, written, dropped, sum(1 for r in recs if r.get("type") == "dropped")))
        self.assertGreater(dropped, 0)
        self.assertEqual(written + dropped, sent + 100)
        self.assertEqual([r["request_id"] for r in recs if str(r.get("request_id", "")).startswith("d")][-100:],
                         ["d%d" % i for i in range(sent, sent + 100)])
        d = [r for r in recs if r.get("type") == "dropped"][0]
        self.assertLessEqual(ms_of(d["since"]), ms_of(d["until"]))
        st = json.loads(audit("stats", adir, "--format", "json", check=0).stdout)
        self.assertEqual(st["dropped"], dropped)


if __name__ == "__main__":
    unittest.main()
