"""Shared helpers for moat's black-box tests.

The tests start the real binaries (moat-backend as root, moat-gateway
dropping to the `moat` user) with throwaway certificates, keys, sockets and
cgroup names, and talk to them over real TLS.  Only Debian's python3
standard library is used.
"""

import glob
import http.client
import json
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import time

BUILD = os.environ.get("MOAT_BUILD_DIR", os.path.join(os.path.dirname(__file__), "..", "..", "build"))
SOURCE = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BACKEND = os.path.join(BUILD, "backend", "moat-backend")
GATEWAY = os.path.join(BUILD, "gateway", "moat-gateway")
MOATCTL = os.path.join(BUILD, "gateway", "moatctl")
MOAT_AUDIT = os.path.join(BUILD, "audit", "moat-audit")
AUDIT_WRITER = os.path.join(BUILD, "audit", "moat-audit-writer")
CALLBACK_SENDER = os.path.join(BUILD, "gateway", "moat-callback-sender")
# The programs' defaults are the installed paths (moat-gateway(8), "Installing
# moat"); from the build tree every start names the checkout's manifests
# (moat-backend -L) and the helpers (audit.writer, callbacks.sender).
LANGUAGES = os.path.join(SOURCE, "backend", "languages")


# ---- what the manual pages show, as a shell or a client runs it -----------

def man_unescape(line):
    r"""One line of an mdoc literal display as it reads: \e is a backslash,
    \& (which guards a leading dot or quote) is nothing."""
    return re.sub(r"\\(e|&)", lambda m: "\\" if m.group(1) == "e" else "", line)


def man_literal_blocks(text):
    """The .Bd -literal ... .Ed displays of a page (or part of one), in order,
    unescaped."""
    blocks, cur = [], None
    for line in text.split("\n"):
        if cur is None:
            if line.startswith(".Bd -literal"):
                cur = []
        elif line == ".Ed":
            blocks.append("".join(man_unescape(l) + "\n" for l in cur))
            cur = None
        else:
            cur.append(line)
    return blocks


def man_page(path):
    """A page's source, path relative to the checkout (gateway/man/moatctl.8)."""
    with open(os.path.join(SOURCE, path)) as f:
        return f.read()


def man_example(path, name):
    """The display right after the page's comment line `.\\" example: NAME`."""
    text = man_page(path).split('.\\" example: %s\n' % name, 1)[1]
    return man_literal_blocks(text)[0]


def man_section(path, title):
    """The text of one .Sh or .Ss of a page, up to the next .Sh or .Ss."""
    text = man_page(path)
    m = re.search(r"^\.S[hs] " + re.escape(title) + r"\n(.*?)(?=^\.S[hs] |\Z)", text, re.M | re.S)
    assert m, "%s: no section %r" % (path, title)
    return m.group(1)


# ---- waiting for a condition, never for a fixed time ----------------------

# How long wait_until() waits by default: generous, so that a slow or busy
# machine only makes a test slower, never makes it fail.
DEADLINE_S = float(os.environ.get("MOAT_E2E_DEADLINE_S", "120"))


def reachable(program):
    """A copy of program (a file of the build tree) that every user can run, for a test that runs it as
    another user: the checkout may sit under a directory only root can enter (root's home, mode 0700,
    where a fresh machine's root clones it), and the copy does not depend on that.  The copy is made
    again when the build changed the program."""
    d = "/tmp/moat-e2e-programs"
    os.makedirs(d, mode=0o755, exist_ok=True)
    os.chmod(d, 0o755)
    st = os.stat(program)
    out = os.path.join(d, "%s-%d-%d" % (os.path.basename(program), st.st_size, st.st_mtime_ns))
    if not os.path.exists(out):
        tmp = "%s.%d" % (out, os.getpid())
        shutil.copyfile(program, tmp)
        os.chmod(tmp, 0o755)
        os.rename(tmp, out)
    return out


def wait_until(predicate, what, timeout=None, detail=None):
    """Polls predicate() until it returns a true value, and returns that value.
    After timeout seconds (default DEADLINE_S) raises AssertionError naming
    `what` (and detail(), if given: a log tail, say).  For readiness only: a
    socket accepting, a file appearing, a log line, a process state, a
    counter.  Never to measure how long something takes."""
    deadline = time.monotonic() + (DEADLINE_S if timeout is None else timeout)
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError("gave up after %g s waiting for %s%s"
                                 % (DEADLINE_S if timeout is None else timeout, what,
                                    ": " + detail() if detail else ""))
        time.sleep(0.02)  # the polling interval


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _listening_inodes(port):
    """The socket inodes listening on 127.0.0.1/0.0.0.0:port (IPv4 and IPv6)."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                next(f)
                for line in f:
                    cols = line.split()
                    if cols[3] == "0A" and int(cols[1].rsplit(":", 1)[1], 16) == port:
                        inodes.add(cols[9])
        except OSError:
            pass
    return inodes


def descendants(pid):
    """Every process below pid (children of every thread, recursively)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        try:
            tasks = os.listdir("/proc/%d/task" % p)
        except OSError:
            continue
        for t in tasks:
            try:
                with open("/proc/%d/task/%s/children" % (p, t)) as f:
                    kids = [int(c) for c in f.read().split()]
            except OSError:
                continue
            out += kids
            todo += kids
    return out


def communicate_or_kill(p, timeout):
    """p.communicate(timeout=timeout) -> (stdout, stderr); past the timeout, p's process group
    (p started with start_new_session=True) is killed and None returned."""
    try:
        return p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.communicate()
        return None


def _socket_inodes(pids):
    out = set()
    for p in pids:
        try:
            for fd in os.listdir("/proc/%d/fd" % p):
                try:
                    target = os.readlink("/proc/%d/fd/%s" % (p, fd))
                except OSError:
                    continue
                if target.startswith("socket:["):
                    out.add(target[8:-1])
        except OSError:
            pass
    return out


def listens_on(pid, port):
    """Whether process pid (or one of its children) holds a listener on port."""
    return bool(_listening_inodes(port) & _socket_inodes([pid, *descendants(pid)]))


def port_taken_by_other(port, pid):
    """Whether something other than pid's process tree listens on port."""
    return bool(_listening_inodes(port) - _socket_inodes([pid, *descendants(pid)]))


# ---- box uids: a range of its own for every backend a test starts ----------
#
# moat-backend holds its box uids exclusively (--uid-base; /run/moat-uids) and
# refuses a range another backend, an account or a process uses.  So that
# tests never collide with each other or with a moat service on the same host
# (default range 60000..), each run tag gets its own block of MAX_SLOTS (256)
# uids in the test range TEST_UID_BASE .. TEST_UID_BASE + 4096 * 16 * 256 - 1
# (1900000000..1916777215): block (pid % 4096) * 16 + the tag's number in
# this process.  Two test processes whose pids agree modulo 4096 would share
# blocks; the second then fails at start with the backend's message rather
# than silently sharing.
TEST_UID_BASE = 1900000000
UID_BLOCK = 256  # MAX_SLOTS in backend/moat_limits.h
UID_BLOCKS_PER_PROCESS = 16
_uid_blocks = {}


def uid_base(tag):
    """The first box uid of the backend run under `tag` (the same for every call with that tag)."""
    if tag not in _uid_blocks:
        if len(_uid_blocks) >= UID_BLOCKS_PER_PROCESS:
            raise AssertionError("more than %d backend tags in one test process" % UID_BLOCKS_PER_PROCESS)
        _uid_blocks[tag] = len(_uid_blocks)
    block = (os.getpid() % 4096) * UID_BLOCKS_PER_PROCESS + _uid_blocks[tag]
    return TEST_UID_BASE + block * UID_BLOCK


def landlock_abi():
    """This kernel's Landlock ABI (landlock_create_ruleset with the VERSION flag), 0 without Landlock:
    what the backend's boxes get unless it runs with --no-landlock."""
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    abi = libc.syscall(ctypes.c_long(444), ctypes.c_void_p(None), ctypes.c_long(0), ctypes.c_long(1))
    return abi if abi > 0 else 0


def expected_walls():
    """The walls a plain box of a backend started by these tests reports (moat-backend(8), "Walls")."""
    return "namespaces+seccomp+landlock" if landlock_abi() > 0 else "namespaces+seccomp"


def expected_missing():
    """What /readyz adds when a plain box lacks a wall: {"walls_missing": [...]}, or nothing."""
    return {} if landlock_abi() > 0 else {"walls_missing": ["landlock"]}


def backend_run(code, language="python", extra=(), timeout=60, tag=None):
    """Runs one job with `moat-backend run` and returns the parsed result.
    Concurrent calls need distinct tags (run dir, cgroup name, box uids)."""
    tag = tag or "moat-t%d" % os.getpid()
    cmd = [BACKEND, "run", "-L", LANGUAGES, "-r", "/run/" + tag, "-n", tag, "--uid-base", str(uid_base(tag)), "-l", language, "-c", code,
           *extra]
    p = subprocess.run(cmd, capture_output=True, timeout=timeout)
    if p.returncode != 0:
        raise AssertionError("moat-backend run failed (%d): %s" % (p.returncode, p.stderr.decode(errors="replace")))
    return json.loads(p.stdout)


# ---- a program held in its box until the test lets it go -------------------
#
# A test that needs a job running while it does something else (a slot taken,
# a request in flight) runs held_program(): it makes /tmp/moat-held in its box
# and then waits for /tmp/moat-release.  The test waits for the first with
# wait_held(tag) and writes the second with release(root), both from the host
# through /proc/<pid>/root of a process in the box (found by its cgroup, named
# after the run's tag).  Nothing depends on how long anything takes; give the
# job a run timeout of LONG_WALL_MS.

# A run timeout far above any deadline of the tests, for jobs whose end must
# not depend on the machine's load (a held job, a CPU spin that must finish);
# the backend needs "-o run_timeout=%d" % LONG_WALL_MS to allow it.
LONG_WALL_MS = 600000

# Wall clocks for tests that run real programs under their shipped CPU and memory limits on a machine
# that may be busy: a wall clock measures the machine's load as much as the program (a JVM that used
# 0.3 s of CPU took over 3 s of wall at load average 25), so such tests raise only the wall clocks, as
# `moat-backend run` options (the server ceiling and the job's own).
BUSY_MACHINE_WALL_MS = 60000
BUSY_MACHINE_WALL = ("--limit", "run_timeout=%d" % BUSY_MACHINE_WALL_MS, "--run-timeout", str(BUSY_MACHINE_WALL_MS),
                     "--limit", "compile_timeout=%d" % BUSY_MACHINE_WALL_MS, "--compile-timeout", str(BUSY_MACHINE_WALL_MS))


def held_program(then="print('released')"):
    """Python source: announce, wait to be released (polling), then run `then`."""
    return ("import os, time\nopen('/tmp/moat-held', 'w').close()\n"
            "while not os.path.exists('/tmp/moat-release'):\n    time.sleep(0.01)\n" + then + "\n")


def box_pids(tag):
    """Pids in the cgroups of the boxes of run tag `tag` (every controller, v1 or v2)."""
    pids = set()
    for procs in glob.glob("/sys/fs/cgroup/**/%s/**/cgroup.procs" % tag, recursive=True):
        try:
            with open(procs) as f:
                pids.update(int(p) for p in f.read().split())
        except (OSError, ValueError):
            pass
    return pids


def cgroup_count(tag):
    """Groups below the backend's own groups of run tag `tag` (its -n name), summed over every
    hierarchy (each v1 controller, and v2)."""
    n = 0
    for top in glob.glob("/sys/fs/cgroup/**/%s" % tag, recursive=True):
        for _, dirs, _ in os.walk(top):
            n += len(dirs)
    return n


def box_uid_pids(base):
    """Pids of the processes whose real uid is in the box range starting at `base` (MAX_SLOTS uids):
    boxes of a backend started with --uid-base base, wherever their cgroup is."""
    pids = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open("/proc/%s/status" % entry) as f:
                uid = int(next(l for l in f if l.startswith("Uid:")).split()[1])
        except (OSError, StopIteration, ValueError):
            continue
        if base <= uid < base + UID_BLOCK:
            pids.add(int(entry))
    return pids


def held_roots(tag):
    """The roots (/proc/<pid>/root) of the boxes of `tag` whose program is held, one per box."""
    roots, seen = [], set()
    for pid in sorted(box_pids(tag)):
        root = "/proc/%d/root" % pid
        try:
            st = os.stat(os.path.join(root, "tmp", "moat-held"))
        except OSError:
            continue
        if (st.st_dev, st.st_ino) not in seen:
            seen.add((st.st_dev, st.st_ino))
            roots.append(root)
    return roots


def wait_held(tag, count=1):
    """Waits until `count` boxes of `tag` hold a held_program(); returns their roots."""
    return wait_until(lambda: len(held_roots(tag)) >= count and held_roots(tag), "%d held job(s) in %s" % (count, tag))


def release(root):
    """Lets the held_program() in the box whose root is `root` go on."""
    open(os.path.join(root, "tmp", "moat-release"), "w").close()


def release_all(tag):
    for root in held_roots(tag):
        release(root)


class Stack:
    """A backend and a gateway on a free port, torn down by stop()."""

    # Generous defaults so functional tests are not rate limited; the rate
    # limit tests configure their own.
    DEFAULT_TENANT_EXTRA = "rate: {per_second: 1000, burst: 1000}\nmax_in_flight: 64\n"

    def __init__(self, tenant="demo", backend_args=(), tenants=None, extra_config="", audit=True, audit_extra="",
                 gateway_args=()):
        if tenants is None:
            tenants = [(tenant, self.DEFAULT_TENANT_EXTRA, "")]
        self.backend_args = list(backend_args)
        self.gateway_args = list(gateway_args)
        self.tmp = tempfile.mkdtemp(prefix="moat-e2e-")
        os.chmod(self.tmp, 0o755)
        self.tag = "moat-e2e-%d" % os.getpid()
        self.uid_base = uid_base(self.tag)
        self.run_dir = "/run/" + self.tag
        self.socket = os.path.join(self.run_dir, "backend.sock")
        self.port = free_port()
        self.certs = os.path.join(self.tmp, "certs")
        subprocess.run([os.path.join(SOURCE, "certs", "gen-dev-certs.sh"), self.certs], check=True,
                       capture_output=True)
        self.ca = os.path.join(self.certs, "ca.pem")
        self.audit_dir = None
        if audit:
            # the audit trail, owned by its own user (moat-audit init)
            self.audit_dir = os.path.join(self.tmp, "audit")
            subprocess.run([MOAT_AUDIT, "init", self.audit_dir], check=True, capture_output=True)
            # audit_extra: more lines of the audit section, indented by two.  A
            # small disk reserve: a CI machine may have less free disk than the
            # writer's default 64 MiB, which would count denial records instead
            # of writing them; the tests of the reserve set their own.
            if "reserve_bytes" not in audit_extra:
                audit_extra = "  reserve_bytes: 1048576\n" + audit_extra
            extra_config = f"audit:\n  dir: {self.audit_dir}\n  writer: {AUDIT_WRITER}\n" + audit_extra + extra_config
        # tenants: a list of (name, extra YAML lines for that tenant, key YAML lines)
        self.tenants = tenants or [(tenant, "", "")]
        self.tokens, self.key_ids = {}, {}
        tenant_yaml = ""
        for name, extra, key_extra in self.tenants:
            out = subprocess.run([MOATCTL, "key", "new"], check=True, capture_output=True, text=True).stdout
            fields = dict(line.split(": ", 1) for line in out.strip().splitlines())
            kid, _, sha = fields["id"].partition(" sha256: ")
            self.tokens[name], self.key_ids[name] = fields["token"], kid
            tenant_yaml += "  - name: %s\n    keys:\n      - id: %s\n        sha256: %s\n" % (name, kid, sha)
            tenant_yaml += "".join("        %s\n" % l for l in key_extra.splitlines() if l.strip())
            tenant_yaml += "".join("    %s\n" % l for l in extra.splitlines() if l.strip())
        first = self.tenants[0][0]
        self.token, self.key_id = self.tokens[first], self.key_ids[first]
        self.config = os.path.join(self.tmp, "gateway.conf")
        # Tests send many refused requests from one address: the per-address
        # rate for them (default 20/s) would turn those into 429s.  The tests
        # of that rate set their own `unauthenticated` section.
        if "unauthenticated:" not in extra_config:
            extra_config = "unauthenticated: {per_second: 100000, burst: 10000000}\n" + extra_config
        with open(self.config, "w") as f:
            f.write(f"""listen:
  address: 127.0.0.1
  port: {self.port}
tls:
  certificate: {self.certs}/server.pem
  key: {self.certs}/server.key
backend:
  socket: {self.socket}
  timeout_ms: 30000
user: moat
workers: 2
{extra_config}tenants:
""" + tenant_yaml)
        os.chmod(self.config, 0o600)
        self.backend = None
        self.gateway = None

    def start_backend(self):
        self.backend_log = open(os.path.join(self.tmp, "backend.log"), "ab")
        self.backend = subprocess.Popen(
            [BACKEND, "-L", LANGUAGES, "-s", self.socket, "-r", self.run_dir, "-u", "moat", "-g", "moat", "-n", self.tag, "-j", "4",
             "--uid-base", str(self.uid_base), *self.backend_args],
            stdout=self.backend_log, stderr=subprocess.STDOUT)
        # up once its socket accepts; dead if it exited
        wait_until(lambda: self.backend.poll() is not None or self.backend_accepts(), "the backend to start",
                   detail=lambda: self.log("backend"))
        if self.backend.poll() is not None:
            raise AssertionError("backend did not start: " + self.log("backend"))

    def backend_accepts(self):
        with socket.socket(socket.AF_UNIX) as s:
            try:
                s.connect(self.socket)
                return True
            except OSError:
                return False

    def stop_backend(self, sig=signal.SIGTERM):
        if self.backend and self.backend.poll() is None:
            self.backend.send_signal(sig)
            self.backend.wait(timeout=30)
        self.backend = None
        if getattr(self, "backend_log", None):
            self.backend_log.close()
            self.backend_log = None

    def start_gateway(self):
        # free_port() only finds a port that was free a moment ago: another
        # test on the host (a parallel ctest, another checkout) can bind it
        # first, and its gateway would answer this one's /healthz.  So the
        # port must be this gateway's own listener; if not, a new port.
        for attempt in range(3):
            self.gateway_log = open(os.path.join(self.tmp, "gateway.log"), "ab")
            self.gateway = subprocess.Popen([GATEWAY, *self.gateway_args, "-c", self.config], stdout=self.gateway_log,
                                            stderr=subprocess.STDOUT)
            # up once it answers /healthz over TLS; dead if it exited
            wait_until(lambda: self.gateway.poll() is not None or self.healthy(), "the gateway to start",
                       detail=lambda: self.log("gateway"))
            alive = self.gateway.poll() is None
            if alive and listens_on(self.gateway.pid, self.port):
                return
            if attempt == 2 or not port_taken_by_other(self.port, self.gateway.pid):
                break
            if alive:
                self.gateway.kill()
            self.gateway.wait()
            self.gateway_log.close()
            self.move_port()
        raise AssertionError("gateway did not start on port %d: %s" % (self.port, self.log("gateway")))

    def move_port(self):
        """The configuration's listen port, changed to another free one."""
        with open(self.config) as f:
            text = f.read()
        old, self.port = self.port, free_port()
        with open(self.config, "w") as f:
            f.write(text.replace("\n  port: %d\n" % old, "\n  port: %d\n" % self.port, 1))

    def healthy(self):
        try:
            return self.request("GET", "/healthz", token=None, timeout=10)[0] == 200
        except OSError:
            return False

    def start(self):
        self.start_backend()
        self.start_gateway()
        return self

    def log(self, name):
        try:
            with open(os.path.join(self.tmp, name + ".log"), errors="replace") as f:
                return f.read()[-4000:]
        except OSError:
            return "(no log)"

    def stop(self):
        if self.gateway and self.gateway.poll() is None:
            self.gateway.terminate()
            try:
                self.gateway.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.gateway.kill()
        if getattr(self, "gateway_log", None):
            self.gateway_log.close()
        self.stop_backend()
        if self.audit_dir:
            # logs and packs are append-only (chattr +a): lift that to remove them
            subprocess.run("chattr -a %s/audit-*.log %s/audit-*.pack 2>/dev/null" % (self.audit_dir, self.audit_dir),
                           shell=True)
        # MOAT_KEEP_TMP=1 keeps the logs, configuration and trail for a look afterwards
        if not os.environ.get("MOAT_KEEP_TMP"):
            shutil.rmtree(self.tmp, ignore_errors=True)

    def audit_records(self):
        """The verified audit records (moat-audit export), as dicts."""
        p = subprocess.run([MOAT_AUDIT, "export", self.audit_dir], capture_output=True, text=True)
        if p.returncode != 0:
            raise AssertionError("moat-audit export failed: " + p.stderr)
        return [json.loads(l) for l in p.stdout.splitlines() if l.strip()]

    def ssl_context(self, alpn=("h2", "http/1.1")):
        ctx = ssl.create_default_context(cafile=self.ca)
        if alpn:
            ctx.set_alpn_protocols(list(alpn))
        return ctx

    def request(self, method, path, body=None, token="default", headers=None, timeout=60):
        """One HTTP/1.1 request over TLS; returns (status, headers, parsed JSON or raw bytes)."""
        ctx = self.ssl_context(alpn=("http/1.1",))
        conn = http.client.HTTPSConnection("127.0.0.1", self.port, context=ctx, timeout=timeout)
        h = dict(headers or {})
        if token == "default":
            token = self.token
        if token is not None:
            h["Authorization"] = "Bearer " + token
        if body is not None and not isinstance(body, (bytes, str)):
            body = json.dumps(body)
            h.setdefault("Content-Type", "application/json")
        try:
            conn.request(method, path, body=body, headers=h)
            resp = conn.getresponse()
            raw = resp.read()
            try:
                data = json.loads(raw)
            except ValueError:
                data = raw
            return resp.status, {k.lower(): v for k, v in resp.getheaders()}, data
        finally:
            conn.close()

    def execute(self, language, code, **extra):
        body = {"language": language, "version": "*", "files": [{"name": "main", "content": code}]}
        body.update(extra)
        return self.request("POST", "/api/v2/execute", body)

    def curl(self, *args):
        return subprocess.run(["curl", "-sS", "--cacert", self.ca, *args], capture_output=True, text=True,
                              timeout=60)


# ---- an audit trail on a small disk of its own ----------------------------


class SmallAuditDisk:
    """A tmpfs of `size` mounted below a temporary directory of its own, holding an audit trail
    (moat-audit init): stack(**kw) is a Stack (not started) that writes it; remove() stops that
    stack, unmounts and removes everything."""

    def __init__(self, size, prefix="moat-audit-small-"):
        self.mnt = tempfile.mkdtemp(prefix=prefix)
        os.chmod(self.mnt, 0o755)
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=%s,mode=0755" % size, "tmpfs", self.mnt], check=True)
        self.dir = os.path.join(self.mnt, "audit")
        subprocess.run([MOAT_AUDIT, "init", self.dir], check=True, capture_output=True)
        self.the_stack = None

    def stack(self, reserve_bytes=None, **kw):
        """A Stack whose audit section names this trail (and reserve_bytes, if given)."""
        reserve = "" if reserve_bytes is None else "  reserve_bytes: %d\n" % reserve_bytes
        extra = "audit:\n  dir: %s\n  writer: %s\n%s" % (self.dir, AUDIT_WRITER, reserve) + kw.pop("extra_config", "")
        self.the_stack = Stack(audit=False, extra_config=extra, **kw)
        self.the_stack.audit_dir = self.dir  # audit_records() and stop() use it
        return self.the_stack

    def remove(self):
        if self.the_stack is not None:
            self.the_stack.stop()
        subprocess.run(["chattr", "-R", "-a", self.mnt], capture_output=True)
        subprocess.run(["umount", "-l", self.mnt], capture_output=True)
        shutil.rmtree(self.mnt, ignore_errors=True)


class SilentBackend:
    """A real Unix socket listener at stack.socket in moat-backend's place:
    it accepts every connection and holds it open; answer(conn), when given,
    runs on a thread of its own per connection and says what it says (a
    silent backend says nothing).  close() lets them all go."""

    def __init__(self, stack, answer=None):
        import threading
        self.stack, self.answer, self.held = stack, answer, []
        os.makedirs(stack.run_dir, mode=0o755, exist_ok=True)
        self.listener = socket.socket(socket.AF_UNIX)
        self.listener.bind(stack.socket)
        os.chmod(stack.socket, 0o666)  # the gateway connects as its own user
        self.listener.listen(16)
        self.listener.settimeout(0.2)  # serve() looks at stopping this often
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self.serve, args=(threading,), daemon=True)
        self.thread.start()

    def serve(self, threading):
        while not self.stopping.is_set():
            try:
                c, _ = self.listener.accept()
            except OSError:
                continue  # the timeout
            c.settimeout(None)
            self.held.append(c)
            if self.answer is not None:
                threading.Thread(target=self.answer, args=(c,), daemon=True).start()

    def close(self):
        self.stopping.set()
        self.thread.join(timeout=10)
        self.listener.close()
        for c in self.held:
            c.close()
        shutil.rmtree(self.stack.run_dir, ignore_errors=True)


# ---- the gateway <-> backend codec, for tests that speak to the backend ----
# (a deliberately independent implementation of backend/protocol/PROTOCOL.md)

import struct

MSG_EXEC_REQUEST, MSG_EXEC_RESULT, MSG_ERROR, MSG_RUNTIMES_QUERY, MSG_RUNTIMES = 1, 2, 3, 4, 5


def tlv(tag, value):
    return struct.pack(">HI", tag, len(value)) + value


def frame(msg_type, job_id, payload, version=1, flags=0, length=None):
    n = len(payload) if length is None else length
    return struct.pack(">BBHIQ", version, msg_type, flags, n, job_id) + payload


def exec_request(job_id, language, code, version="*", stdin=b"", args=(), run_timeout=None, isolation=None):
    p = tlv(1, language.encode()) + tlv(2, version.encode())
    p += tlv(3, tlv(1, b"main.code") + tlv(2, code.encode() if isinstance(code, str) else code))
    if stdin:
        p += tlv(4, stdin)
    for a in args:
        p += tlv(5, a.encode())
    if run_timeout is not None:
        p += tlv(6, struct.pack(">Q", run_timeout))
    if isolation is not None:  # tag 18: 1 is gVisor
        p += tlv(18, bytes([isolation]))
    return frame(MSG_EXEC_REQUEST, job_id, p)


def parse_tlvs(payload):
    out, off = [], 0
    while off < len(payload):
        tag, n = struct.unpack_from(">HI", payload, off)
        out.append((tag, payload[off + 6:off + 6 + n]))
        off += 6 + n
    return out


def read_frame(sock):
    """Returns (type, job_id, payload) or None at EOF."""
    hdr = b""
    while len(hdr) < 16:
        chunk = sock.recv(16 - len(hdr))
        if not chunk:
            return None
        hdr += chunk
    _, msg_type, _, n, job_id = struct.unpack(">BBHIQ", hdr)
    body = b""
    while len(body) < n:
        chunk = sock.recv(n - len(body))
        if not chunk:
            return None
        body += chunk
    return msg_type, job_id, body


def error_of(payload):
    f = dict(parse_tlvs(payload))
    return struct.unpack(">H", f[1])[0], f[2].decode()


def run_stage_of(payload):
    f = dict(parse_tlvs(payload))
    stage = dict(parse_tlvs(f[17]))
    return {"stdout": stage.get(1, b""), "status": stage[6][0]}


# ---- live sessions (PROTOCOL.md "Sessions"), for tests that speak to the backend ----

(MSG_SESSION_STDIN, MSG_SESSION_STDIN_CLOSE, MSG_SESSION_SIGNAL, MSG_SESSION_OUTPUT, MSG_SESSION_STAGE, MSG_SESSION_EXIT,
 MSG_SESSION_CREDIT, MSG_SESSION_OPEN, MSG_SESSION_READY) = range(6, 15)
SESSION_WINDOW = 128 * 1024  # MOAT_SESSION_WINDOW
SESSION_CHUNK = 64 * 1024  # MOAT_SESSION_CHUNK_MAX
STREAM_STDOUT, STREAM_STDERR = 1, 2
STAGE_COMPILE, STAGE_RUN = 1, 2
CLOCK_WALL, CLOCK_IDLE, CLOCK_CPU = 1, 2, 3
STATUS_OK, STATUS_RE, STATUS_SG, STATUS_TO, STATUS_OL, STATUS_EL, STATUS_XX, STATUS_ML = range(8)
# ceilings that leave the backend's defaults in force (idle 0: no ceiling of the gateway's)
SESSION_CEILINGS = {"wall_ms": 900000, "idle_ms": 0, "cpu_ms": 30000, "stdin_bytes": 1 << 20, "output_bytes": 1 << 20}


def u64(v):
    return struct.pack(">Q", v)


def session_open(job_id, language, code, version="*", stdin=b"", args=(), run_timeout=None, omit=(), isolation=None,
                 **ceilings):
    """A SESSION_OPEN frame: an exec request (file main.code) and the ceilings (SESSION_CEILINGS, overridden
    by keyword; names in `omit` are left out)."""
    p = tlv(1, language.encode()) + tlv(2, version.encode())
    p += tlv(3, tlv(1, b"main.code") + tlv(2, code.encode() if isinstance(code, str) else code))
    if stdin:
        p += tlv(4, stdin)
    for a in args:
        p += tlv(5, a.encode())
    if run_timeout is not None:
        p += tlv(6, u64(run_timeout))
    if isolation is not None:  # tag 18: 1 is gVisor
        p += tlv(18, bytes([isolation]))
    limits = dict(SESSION_CEILINGS, **ceilings)
    for tag, name in enumerate(("wall_ms", "idle_ms", "cpu_ms", "stdin_bytes", "output_bytes"), start=20):
        if name not in omit:
            p += tlv(tag, u64(limits[name]))
    return frame(MSG_SESSION_OPEN, job_id, p)


def session_stdin(job_id, data):
    return frame(MSG_SESSION_STDIN, job_id, tlv(1, data))


def session_stdin_close(job_id):
    return frame(MSG_SESSION_STDIN_CLOSE, job_id, b"")


def session_signal(job_id, sig):
    return frame(MSG_SESSION_SIGNAL, job_id, tlv(1, struct.pack(">I", sig)))


def session_credit(job_id, n):
    return frame(MSG_SESSION_CREDIT, job_id, tlv(1, struct.pack(">I", n)))


def _uint(b):
    return int.from_bytes(b, "big")


def session_event(msg_type, payload):
    """A frame from the backend as a dict: {"type": "ready" | "stage" | "output" | "exit" | "error" | "credit", ...}."""
    f = dict(parse_tlvs(payload))
    if msg_type == MSG_SESSION_READY:
        names = ("wall_ms", "idle_ms", "cpu_ms", "stdin_bytes", "output_bytes")
        return dict({"type": "ready", "language": f[1].decode(), "version": f[2].decode(),
                     "walls": f[8].decode() if 8 in f else None},
                    **{n: _uint(f[3 + i]) for i, n in enumerate(names)})
    if msg_type == MSG_SESSION_STAGE:
        return {"type": "stage", "stage": f[1][0], "offset": _uint(f[2])}
    if msg_type == MSG_SESSION_OUTPUT:
        return {"type": "output", "stream": f[1][0], "offset": _uint(f[2]), "data": f[3]}
    if msg_type == MSG_SESSION_EXIT:
        r = dict(parse_tlvs(f[4]))
        return {"type": "exit", "stage": f[1][0], "offset": _uint(f[2]), "clock": f[3][0] if 3 in f else None,
                "status": r[6][0], "code": struct.unpack(">i", r[4])[0] if 4 in r else None,
                "signal": _uint(r[5]) if 5 in r else None, "message": r[7].decode() if 7 in r else None,
                "cpu_ms": _uint(r[8]), "wall_ms": _uint(r[9])}
    if msg_type == MSG_ERROR:
        code, message = error_of(payload)
        return {"type": "error", "code": code, "message": message}
    if msg_type == MSG_SESSION_CREDIT:
        return {"type": "credit", "bytes": _uint(f[1])}
    raise AssertionError("unexpected message type %d from the backend" % msg_type)


class BackendSession:
    """One live session over its own connection to a backend's socket.  events() yields what the backend sends,
    each with "t" (time.monotonic() when it was read) and "job" (its job id); output is credited back as it
    arrives unless credit=False."""

    def __init__(self, socket_path, job_id=1, credit=True, timeout=None):
        self.job_id, self.credit = job_id, credit
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.settimeout(DEADLINE_S if timeout is None else timeout)
        self.sock.connect(socket_path)
        self.closed = False
        self.stdin_window = SESSION_WINDOW  # stdin the backend has room for
        self.backlog = []  # events read while write() waited for credit

    def open(self, language, code, **kw):
        self.sock.sendall(session_open(self.job_id, language, code, **kw))
        return self

    def send(self, data):
        self.sock.sendall(data)

    def write(self, data):
        """Stdin, in chunks of at most SESSION_CHUNK bytes, within the window: waits for the backend's credit as
        a gateway must (events read meanwhile are kept for next())."""
        for i in range(0, len(data), SESSION_CHUNK):
            chunk = data[i:i + SESSION_CHUNK]
            while self.stdin_window < len(chunk):
                event = self._read()
                if event is None:
                    raise AssertionError("the backend closed the session while stdin waited for credit")
                self.backlog.append(event)
            self.stdin_window -= len(chunk)
            self.send(session_stdin(self.job_id, chunk))

    def next(self):
        """The next event, or None once the backend closed the connection (a reset after the last frame, when
        the backend closed with our last credit unread, is a close too)."""
        if self.backlog:
            return self.backlog.pop(0)
        return self._read()

    def _read(self):
        try:
            f = read_frame(self.sock)
        except ConnectionResetError:
            f = None
        if f is None:
            self.closed = True
            return None
        event = session_event(f[0], f[2])
        event.update(t=time.monotonic(), job=f[1])
        if event["type"] == "credit":
            self.stdin_window += event["bytes"]
        if event["type"] == "output" and self.credit:
            try:
                self.send(session_credit(self.job_id, len(event["data"])))
            except (BrokenPipeError, ConnectionResetError):
                pass  # the session is over: what is left to read tells how
        return event

    def until(self, predicate, what="an event"):
        """Events up to and including the first for which predicate(event) holds."""
        seen = []
        while True:
            event = self.next()
            if event is None:
                raise AssertionError("the backend closed the session before %s; got %r" % (what, seen))
            seen.append(event)
            if predicate(event):
                return seen

    def output_until(self, text, stream=STREAM_STDOUT):
        """Events until the stream's output so far contains `text` (bytes)."""
        got = b""
        seen = []
        while text not in got:
            seen += self.until(lambda e: e["type"] == "output", "output %r" % text)
            got = b"".join(e["data"] for e in seen if e["type"] == "output" and e["stream"] == stream)
        return seen

    def rest(self):
        """Every event until the backend closes the connection."""
        seen = []
        while True:
            event = self.next()
            if event is None:
                return seen
            seen.append(event)

    def close(self):
        self.sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def session_box_pids(tag):
    """box_pids(tag) of the session slots' boxes only (cgroups session<n>), not the batch slots' warm ones."""
    def in_session_box(pid):
        try:
            with open("/proc/%d/cgroup" % pid) as f:
                return "/%s/session" % tag in f.read()
        except OSError:
            return False

    return {pid for pid in box_pids(tag) if in_session_box(pid)}


def vm_rss_kib(pid):
    """Resident memory of a process (VmRSS), in KiB."""
    with open("/proc/%d/status" % pid) as f:
        return int([l for l in f if l.startswith("VmRSS:")][0].split()[1])
