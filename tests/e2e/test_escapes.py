"""Security checks from tests/SECURITY-CHECKS.md (S-series) run inside real boxes.

Probes are Python programs that make raw system calls through ctypes, so
each check reaches the kernel exactly as hostile native code would.  Every
test fails if the protection it names is removed (seccomp rule, mount flag,
namespace, credential drop)."""

import json
import os
import shutil
import subprocess
import tempfile
import threading
import unittest

from moat_harness import (DEADLINE_S, LONG_WALL_MS, UID_BLOCK, backend_run, box_pids, held_program, landlock_abi,
                          release_all, uid_base, wait_held)

PRELUDE = r"""
import ctypes, errno, json, os
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def sc(nr, *args):
    ctypes.set_errno(0)
    r = libc.syscall(ctypes.c_long(nr), *[ctypes.c_long(a) for a in args])
    return r, ctypes.get_errno()
"""

# x86-64 numbers of calls the allow-list must refuse (S18), with the errno
# each must return.
DENIED = {
    "mount": 165, "umount2": 166, "pivot_root": 155, "chroot": 161, "unshare": 272, "setns": 308,
    "ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311, "kcmp": 312, "pidfd_getfd": 438,
    "bpf": 321, "perf_event_open": 298, "keyctl": 250, "add_key": 248, "request_key": 249,
    "init_module": 175, "finit_module": 313, "delete_module": 176, "kexec_load": 246, "kexec_file_load": 320,
    "reboot": 169, "swapon": 167, "swapoff": 168, "acct": 163, "settimeofday": 164, "clock_settime": 227,
    "adjtimex": 159, "clock_adjtime": 305, "sethostname": 170, "setdomainname": 171, "iopl": 172,
    "ioperm": 173, "quotactl": 179, "userfaultfd": 323, "open_by_handle_at": 304, "name_to_handle_at": 303,
    "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433, "move_mount": 429, "open_tree": 428,
    "mount_setattr": 442, "lookup_dcookie": 212, "syslog": 103, "uselib": 134, "ustat": 136, "sysfs": 139,
    "vhangup": 153, "io_setup": 206, "fanotify_init": 300, "migrate_pages": 256, "move_pages": 279,
    "mbind": 237, "vmsplice": 278, "memfd_secret": 447, "landlock_create_ruleset": 444,
}
ENOSYS_CALLS = {"clone3": 435, "io_uring_setup": 425}


def probe(body, language="python", *extra):
    res = backend_run(PRELUDE + body, language, extra)["run"]
    return res


def probe_json(body):
    res = probe(body + "\nprint(json.dumps(out))")
    if res["code"] != 0:
        raise AssertionError("probe failed: %r" % res)
    return json.loads(res["stdout"])


class SeccompTest(unittest.TestCase):
    def test_s18_denied_calls_return_eperm(self):
        out = probe_json("out = {}\nfor name, nr in %r.items():\n    out[name] = sc(nr)\n" % DENIED)
        wrong = {k: v for k, v in out.items() if v != [-1, 1]}  # -1, EPERM
        self.assertEqual(wrong, {})

    def test_s12_s20_enosys_calls(self):
        out = probe_json("out = {name: sc(nr) for name, nr in %r.items()}" % ENOSYS_CALLS)
        self.assertEqual(out, {"clone3": [-1, 38], "io_uring_setup": [-1, 38]})

    def test_s19_allowed_calls_reach_the_kernel(self):
        # a bad pointer gives EFAULT only if the filter let the call through
        out = probe_json("""
out = {
  'write': sc(1, 1, 1, 10), 'openat': sc(257, -100, 1, 0), 'newfstatat': sc(262, -100, 1, 1, 0),
  'uname': sc(63, 1), 'clock_gettime': sc(228, 0, 1), 'getrandom': sc(318, 1, 8, 0), 'pipe2': sc(293, 1, 0),
  'rt_sigaction': sc(13, 10, 1, 0, 8), 'getcwd': sc(79, 1, 100), 'sysinfo': sc(99, 1),
}
""")
        self.assertEqual({k: v[1] for k, v in out.items()}, {k: 14 for k in out})  # EFAULT

    def test_s10_s20_namespace_flags_on_clone_denied(self):
        out = probe_json("""
CLONE_NEWUSER, CLONE_NEWNS, CLONE_NEWNET, SIGCHLD = 0x10000000, 0x00020000, 0x40000000, 17
out = {'user': sc(56, CLONE_NEWUSER | SIGCHLD, 0, 0, 0, 0), 'ns': sc(56, CLONE_NEWNS | SIGCHLD, 0, 0, 0, 0),
       'net': sc(56, CLONE_NEWNET | SIGCHLD, 0, 0, 0, 0), 'unshare_user': sc(272, CLONE_NEWUSER)}
pid = os.fork()      # plain clone still works
if pid == 0:
    os._exit(7)
out['fork'] = os.waitpid(pid, 0)[1] >> 8
""")
        self.assertEqual(out, {"user": [-1, 1], "ns": [-1, 1], "net": [-1, 1], "unshare_user": [-1, 1],
                               "fork": 7})

    def test_s11_tiocsti_denied_even_with_high_bits(self):
        out = probe_json("""
TIOCSTI = 0x5412
c = ctypes.c_char(b'x')
out = {'plain': sc(16, 0, TIOCSTI, ctypes.addressof(c)), 'high': sc(16, 0, (0x123 << 32) | TIOCSTI, ctypes.addressof(c)),
       'tiocgwinsz': sc(16, 1, 0x5413, 1)}
""")
        self.assertEqual(out["plain"], [-1, 1])
        self.assertEqual(out["high"], [-1, 1])
        self.assertNotEqual(out["tiocgwinsz"][1], 1)  # other ioctls pass (ENOTTY on a pipe)

    def test_s21_personality(self):
        out = probe_json("out = {'query': sc(135, 0xffffffff)[1], 'linux': sc(135, 0)[1], "
                         "'linux32': sc(135, 0x0008), 'readimpliesexec': sc(135, 0x0400000)}")
        self.assertEqual(out, {"query": 0, "linux": 0, "linux32": [-1, 1], "readimpliesexec": [-1, 1]})

    def test_s22_socket_families(self):
        out = probe_json("""
fams = {'unix': 1, 'inet': 2, 'inet6': 10, 'netlink': 16, 'packet': 17, 'key': 15, 'alg': 38, 'vsock': 40,
        'bluetooth': 31, 'can': 29, 'xdp': 44}
out = {}
for name, fam in fams.items():
    r, e = sc(41, fam, 1 if name != 'netlink' else 3, 0)
    out[name] = 'ok' if r >= 0 else e
""")
        self.assertEqual(out["unix"], "ok")
        self.assertEqual(out["inet"], "ok")
        self.assertEqual(out["inet6"], "ok")
        for fam in ("netlink", "packet", "key", "alg", "vsock", "bluetooth", "can", "xdp"):
            self.assertEqual(out[fam], 1, fam)  # EPERM

    def test_s15_32bit_syscall_kills(self):
        # mov eax, 20 (getpid on i386); int 0x80; ret.  Some kernels have no
        # 32-bit entry (ia32_emulation off): there `int 0x80` faults before
        # any filter sees it, bare as in a box.  The same probe runs bare
        # first; only a host where it returns bare can show the filter.
        body = """
import mmap
code = bytes([0xb8, 20, 0, 0, 0, 0xcd, 0x80, 0xc3])
m = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
m.write(code)
f = ctypes.CFUNCTYPE(ctypes.c_int)(ctypes.addressof(ctypes.c_char.from_buffer(m)))
print('returned', f())
"""
        bare = subprocess.run(["/usr/bin/python3", "-c", PRELUDE + body], capture_output=True, text=True, timeout=60)
        res = probe(body)
        self.assertNotIn("returned", res["stdout"], res)
        if bare.returncode != 0 or "returned" not in bare.stdout:
            self.assertIsNotNone(res["signal"], res)
            self.skipTest("int 0x80 does not return on this host even outside a box (rc %d): "
                          "no 32-bit entry for the filter to guard" % bare.returncode)
        self.assertEqual(res["signal"], "SIGSYS", res)

    def test_s15_x32_syscall_kills(self):
        res = probe("print('x32', sc(0x40000000 | 39))")
        self.assertEqual(res["signal"], "SIGSYS", res)

    def test_s25_status_of_a_boxed_process(self):
        out = probe_json("""
st = dict(l.split(':\\t', 1) for l in open('/proc/self/status').read().splitlines())
out = {k: st[k].strip() for k in ('CapEff', 'CapPrm', 'CapBnd', 'NoNewPrivs', 'Seccomp')}
out['pid_small'] = os.getpid() < 10
out['uid'] = [os.getuid() - %d, os.getgid() - os.getuid(), os.getgroups()]
""" % uid_base("moat-t%d" % os.getpid()))
        self.assertEqual(out["CapEff"], "0000000000000000")
        self.assertEqual(out["CapPrm"], "0000000000000000")
        self.assertEqual(out["NoNewPrivs"], "1")
        self.assertEqual(out["Seccomp"], "2")
        self.assertTrue(out["pid_small"])
        slot, gid_minus_uid, groups = out["uid"]  # a uid of this backend's range, gid alike, no groups
        self.assertTrue(0 <= slot < UID_BLOCK, out["uid"])
        self.assertEqual((gid_minus_uid, groups), (0, []))


class FilesystemTest(unittest.TestCase):
    def test_s24_walk_the_root(self):
        out = probe_json("""
out = {'top': sorted(os.listdir('/')), 'dev': sorted(os.listdir('/dev')), 'etc': sorted(os.listdir('/etc')),
       'run': os.path.exists('/run'), 'sys': os.path.exists('/sys'), 'home': os.path.exists('/home'),
       'var': os.path.exists('/var'), 'shm': os.path.exists('/dev/shm')}
""")
        self.assertEqual(out["top"], ["bin", "box", "dev", "etc", "lib", "lib64", "proc", "tmp", "usr"])
        self.assertEqual(out["dev"], ["fd", "null", "random", "stderr", "stdin", "stdout", "urandom", "zero"])
        self.assertEqual(out["etc"], ["alternatives", "group", "passwd"])
        self.assertEqual([out[k] for k in ("run", "sys", "home", "var", "shm")], [False] * 5)

    def test_s6_every_mount_is_nosuid_and_runtime_read_only(self):
        out = probe_json("""
out = {}
for line in open('/proc/self/mountinfo'):
    f = line.split()
    out[f[4]] = f[5].split(',')
""")
        for mnt, opts in out.items():
            self.assertIn("nosuid", opts, mnt)
        for mnt in ("/", "/usr/bin", "/usr/lib", "/dev", "/etc/alternatives"):
            self.assertIn("ro", out[mnt], mnt)
        for mnt in ("/box", "/tmp"):
            self.assertIn("rw", out[mnt], mnt)
            self.assertIn("nodev", out[mnt], mnt)

    def test_s7_runtime_and_exe_not_writable(self):
        out = probe_json("""
out = {}
for p in ('/proc/self/exe', '/usr/bin/python3.11', '/usr/lib/python3.11/os.py', '/etc/passwd'):
    try:
        open(p, 'r+b'); out[p] = 'opened'
    except OSError as e:
        out[p] = e.errno
""")
        self.assertNotIn("opened", out.values())

    def test_s9_cgroupfs_and_release_agent(self):
        out = probe_json("""
os.makedirs('/tmp/cg', exist_ok=True)
out = {'mount': sc(165, ctypes.addressof(ctypes.create_string_buffer(b'cgroup')),
                   ctypes.addressof(ctypes.create_string_buffer(b'/tmp/cg')),
                   ctypes.addressof(ctypes.create_string_buffer(b'cgroup')), 0,
                   ctypes.addressof(ctypes.create_string_buffer(b'memory'))),
       'unshare': sc(272, 0x00020000 | 0x10000000 | 0x02000000),
       'sysfs': os.path.exists('/sys/fs/cgroup')}
""")
        self.assertEqual(out, {"mount": [-1, 1], "unshare": [-1, 1], "sysfs": False})

    def test_s1_s2_planted_links_and_fifos_do_not_reach_the_host(self):
        # a job plants symlinks, a hard link and a FIFO where the host writes
        # files; the next job in the same slot starts from a fresh /box
        plant = """
import os
os.symlink('/etc/shadow', '/box/x')
os.symlink('/proc/1/root', '/box/y')
os.mkfifo('/box/fifo')
open('/box/own', 'w').close()
os.link('/box/own', '/box/hard')
try:
    os.link('/box/main.code', '/box/hard2'); print('linked a root-owned file')
except PermissionError:
    pass
print('planted')
"""
        with open("/etc/shadow", "rb") as f:
            before = f.read()
        for _ in range(3):
            self.assertEqual(backend_run(plant)["run"]["stdout"], "planted\n")
        r = backend_run("import os; print(sorted(os.listdir('/box')))")["run"]
        self.assertEqual(r["stdout"], "['main.code']\n")
        with open("/etc/shadow", "rb") as f:
            self.assertEqual(f.read(), before)

    def test_s16_disk_fill_stops_at_tmpfs_size(self):
        res = probe("""
n = 0
try:
    with open('/tmp/fill', 'wb') as f:
        while True:
            f.write(b'x' * (1 << 20)); f.flush(); n += 1
except OSError as e:
    print(n, e.errno)
""")
        n, err = res["stdout"].split()
        self.assertIn(int(err), (27, 28))  # EFBIG (fsize rlimit) or ENOSPC (tmpfs full)
        self.assertLessEqual(int(n), 64)

    def test_s5_environment(self):
        os.environ["MOAT_SECRET_TOKEN"] = "must-not-leak"
        out = probe_json("out = dict(os.environ)")
        self.assertNotIn("MOAT_SECRET_TOKEN", out)
        self.assertEqual(out["HOME"], "/box")


def bare(body, as_nobody=False):
    """The probe PRELUDE + body run outside any box, with the same python; its stdout as JSON."""
    ids = {"user": 65534, "group": 65534, "extra_groups": []} if as_nobody else {}
    p = subprocess.run(["/usr/bin/python3", "-c", PRELUDE + body + "\nprint(json.dumps(out))"], capture_output=True,
                       text=True, timeout=DEADLINE_S, **ids)
    if p.returncode != 0:
        raise AssertionError("bare probe failed: " + p.stderr)
    return json.loads(p.stdout)


class SideChannelTest(unittest.TestCase):
    """S28: the runtime's files are the same inodes in every box (read-only
    binds) and share the host's page cache; a box must not be able to watch
    or probe them for what another box does with them.  Each probe runs bare
    first: a call the host's kernel lacks cannot be shown denied."""

    def compare(self, body, expect_in_box):
        """Runs body bare (as root) and boxed; returns {call: boxed result} for the calls that
        reached the kernel bare (not ENOSYS), asserting each boxed result is expect_in_box."""
        outside, inside = bare(body), probe_json(body)
        shown = {k: v for k, v in outside.items() if v != 38}
        if not shown:
            self.skipTest("none of %s exists on this kernel" % sorted(outside))
        for name in shown:
            self.assertEqual(inside[name], expect_in_box, "%s: bare %r, in a box %r" % (name, outside[name], inside[name]))
        return inside

    def test_s28_inotify_and_fanotify_denied(self):
        # a box watching /usr/lib/python3.11 saw which modules a concurrent job imported
        body = r"""
path = ctypes.create_string_buffer(b'/usr/lib/python3.11')
res = lambda r: 'ok' if r[0] >= 0 else r[1]
fd = sc(294, 0)                                  # inotify_init1
nf = sc(300, 0, 0)                               # fanotify_init(FAN_CLASS_NOTIF, O_RDONLY)
out = {'inotify_init': res(sc(253)), 'inotify_init1': res(fd),
       'inotify_add_watch': res(sc(254, fd[0], ctypes.addressof(path), 0x20)),   # IN_OPEN
       'fanotify_init': res(nf),
       'fanotify_mark': res(sc(301, nf[0], 1, 0x20, -100, ctypes.addressof(path)))}  # FAN_MARK_ADD, FAN_OPEN
"""
        self.compare(body, 1)  # EPERM

    def test_s28_page_cache_probes_denied(self):
        # RWF_NOWAIT reads, cachestat: is this page of a shared file cached,
        # i.e. has another box just used it?
        body = r"""
fd = os.open('/usr/lib/python3.11/os.py', os.O_RDONLY)
buf = ctypes.create_string_buffer(64)
iov = (ctypes.c_void_p * 2)(ctypes.addressof(buf), 64)
rng = (ctypes.c_uint64 * 2)(0, 0)
cst = (ctypes.c_uint64 * 5)()
res = lambda r: 'reached' if r[0] >= 0 or r[1] == 11 else r[1]  # EAGAIN: not cached, but asked
out = {'preadv2_nowait': res(sc(327, fd, ctypes.addressof(iov), 1, 0, 0, 8)),
       'preadv2_nowait_high_bits': res(sc(327, fd, ctypes.addressof(iov), 1, 0, 0, (1 << 40) | 8)),
       'cachestat': res(sc(451, fd, ctypes.addressof(rng), ctypes.addressof(cst), 0))}
"""
        self.compare(body, 1)  # EPERM
        # a plain preadv2 (no flags) still reads
        out = probe_json(body.replace("(1 << 40) | 8", "0") + "\nout = out['preadv2_nowait_high_bits']")
        self.assertEqual(out, "reached")

    def test_s28_runtime_reads_leave_no_access_time(self):
        # a file of our own in /usr/lib, which python's runtime binds
        fd, path = tempfile.mkstemp(prefix="moat-s28-", dir="/usr/lib")
        try:
            os.write(fd, b"x")
            os.fchmod(fd, 0o644)
            os.close(fd)
            st = os.stat(path)
            old = st.st_mtime_ns - 2 * 86400 * 10**9  # older than mtime and a day: relatime would update it
            os.utime(path, ns=(old, st.st_mtime_ns))
            out = probe_json("out = {'read': open(%r).read(), 'opts': [l.split()[5] for l in open('/proc/self/mountinfo')"
                             " if l.split()[4] == '/usr/lib']}" % path)
            in_box = os.stat(path).st_atime_ns
            with open(path) as f:
                f.read()
            outside = os.stat(path).st_atime_ns
        finally:
            os.unlink(path)
        self.assertEqual(out["read"], "x")
        self.assertIn("noatime", out["opts"][0].split(","), out)
        self.assertEqual(in_box, old, "a read in a box changed the access time")
        if outside == old:
            self.skipTest("this host's filesystem does not update access times even outside a box")


# /proc paths masked in a box (backend/box_init.c proc_masked), and the
# read-only ones (proc_read_only)
PROC_MASKED = [
    "acpi", "asound", "kcore", "keys", "latency_stats", "timer_list", "timer_stats", "sched_debug", "scsi",
    "cmdline", "config.gz", "bootconfig", "kallsyms", "modules", "sys/kernel/random/boot_id",
    "pressure", "diskstats", "partitions", "swaps", "mdstat", "interrupts", "softirqs", "schedstat", "lock_stat",
    "locks", "key-users", "vmstat", "zoneinfo", "buddyinfo", "pagetypeinfo", "slabinfo", "vmallocinfo", "iomem",
    "ioports", "kmsg", "kpagecgroup", "kpagecount", "kpageflags", "sys/fs/file-nr", "sys/fs/inode-nr",
    "sys/fs/inode-state", "sys/fs/dentry-state"]
PROC_READ_ONLY = ["bus", "fs", "irq", "sys", "sysrq-trigger"]
# what language runtimes read, which must stay
PROC_KEPT = ["self/status", "self/maps", "self/mountinfo", "self/cgroup", "cpuinfo", "meminfo", "stat", "uptime",
             "loadavg", "cgroups", "mounts", "filesystems", "sys/kernel/hostname"]

PROC_READ = r"""
out = {}
for rel in %r:
    p = '/proc/' + rel
    try:
        if os.path.isdir(p):
            out[rel] = 'dir %%d' %% len(os.listdir(p))
        else:
            fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK)
            try:
                out[rel] = 'file %%d' %% len(os.read(fd, 4096))
            finally:
                os.close(fd)
    except FileNotFoundError:
        out[rel] = 'absent'
    except OSError as e:
        out[rel] = 'error %%d' %% e.errno
"""


def has_content(result):
    kind, _, n = result.partition(" ")
    return kind in ("dir", "file") and int(n) > 0


class ProcMaskTest(unittest.TestCase):
    """S30: what /proc tells a box about the host.  The bare probe runs as
    `nobody`, so that a path a box cannot read only for lack of privilege is
    not mistaken for a masked one."""

    def test_s30_host_information_masked(self):
        outside = bare(PROC_READ % PROC_MASKED, as_nobody=True)
        inside = probe_json(PROC_READ % PROC_MASKED)
        shown = sorted(rel for rel in PROC_MASKED if has_content(outside[rel]))
        # every Linux has a world-readable, non-empty /proc/cmdline: the check always shows something
        self.assertIn("cmdline", shown, outside)
        leaked = {rel: (outside[rel], inside[rel]) for rel in shown if has_content(inside[rel])}
        self.assertEqual(leaked, {}, "masked paths with content in a box (bare, boxed)")

    def test_s30_what_runtimes_read_is_kept(self):
        outside = bare(PROC_READ % PROC_KEPT, as_nobody=True)
        inside = probe_json(PROC_READ % PROC_KEPT)
        lost = {rel: (outside[rel], inside[rel]) for rel in PROC_KEPT if has_content(outside[rel])
                and not has_content(inside[rel])}
        self.assertEqual(lost, {})

    def test_s30_runc_read_only_paths(self):
        out = probe_json("out = {f[4]: f[5].split(',') for f in (l.split() for l in open('/proc/self/mountinfo'))}")
        present = [rel for rel in PROC_READ_ONLY if os.path.exists("/proc/" + rel)]
        self.assertIn("sys", present)
        for rel in present:
            self.assertIn("ro", out.get("/proc/" + rel, []), rel)

    def test_s30_masks_are_read_only(self):
        # a mask is a bind of the box's /dev/null: read-only, nosuid and
        # noexec whether it carries /dev's flags or was remounted (box_init.c
        # mask_proc_path); a writable mask would let a box write through it
        out = probe_json("out = {f[4]: f[5].split(',') for f in (l.split() for l in open('/proc/self/mountinfo'))}")
        masks = {rel: out["/proc/" + rel] for rel in PROC_MASKED if "/proc/" + rel in out}
        self.assertIn("cmdline", masks, out)
        for rel, opts in masks.items():
            for flag in ("ro", "nosuid", "noexec"):
                self.assertIn(flag, opts, (rel, opts))

    def test_s30_mountinfo_names_no_host_device_but_the_runtime(self):
        # /dev's nodes are made in the box (mknod), not bound from the host's
        # devtmpfs.  The runtime binds still name the host filesystem they
        # come from (a bind shares its superblock; moat-backend(8)).
        out = probe_json("out = [l.split() for l in open('/proc/self/mountinfo')]")
        with open(os.path.join(os.path.dirname(__file__), "..", "..", "backend", "languages", "python-3.11",
                               "manifest.json")) as f:
            runtime = json.load(f)["runtime"]
        devices = {}
        for fields in out:
            sep = fields.index("-")
            fstype, source = fields[sep + 1], fields[sep + 2]
            self.assertNotEqual(fstype, "devtmpfs", fields)
            if not fields[2].startswith("0:"):  # a block device's filesystem
                devices[fields[4]] = source
        self.assertLessEqual(set(devices), set(runtime), devices)

    def test_s30_runtimes_still_work(self):
        # they count CPUs and read memory and uptime through /proc
        long_run = ("-o", "run_timeout=%d" % LONG_WALL_MS, "--run-timeout", str(LONG_WALL_MS))
        cpus = os.cpu_count()
        py = backend_run("import os; print(os.cpu_count())", extra=long_run)["run"]
        self.assertEqual(py["stdout"], "%d\n" % cpus, py)
        js = backend_run("const os = require('os');\n"
                         "console.log(os.cpus().length, os.totalmem() > 0, os.uptime() > 0, os.loadavg().length)",
                         "javascript", extra=long_run)["run"]
        self.assertEqual(js["stdout"], "%d true true 3\n" % cpus, js)
        java = backend_run("class M { public static void main(String[] a) {\n"
                           "  System.out.println(Runtime.getRuntime().availableProcessors()); } }", "java",
                           extra=long_run)["run"]
        self.assertEqual(java["stdout"], "%d\n" % cpus, java)


PROBE = r"""
import json, os, socket
st = dict(l.split(':\t', 1) for l in open('/proc/self/status').read().splitlines())
ifaces = [l.split(':')[0].strip() for l in open('/proc/net/dev').read().splitlines()[2:]]
out = {
    'uid_is_root': os.getuid() == 0,
    'pid_is_small': os.getpid() < 10,
    'hostname': socket.gethostname(),
    'interfaces': sorted(ifaces),
    'cap_eff_zero': st['CapEff'].strip() == '0000000000000000',
    'no_new_privs': st['NoNewPrivs'].strip(),
    'seccomp': st['Seccomp'].strip(),
    'sees_shadow': os.path.exists('/etc/shadow'),
    'writable_usr': os.access('/usr/bin', os.W_OK),
    'python_works': True,
    'tmp_writable': os.access('/tmp', os.W_OK),
}
print(json.dumps(out, sort_keys=True))
"""


# S33's probe: a TCP server on the box's loopback answered by the box itself, a closed port, far
# addresses over TCP (a 2 s timeout: a route would make them hang, not fail) and UDP, the interfaces.
NETWORK_PROBE = r"""
import socket, threading
out = {}
def serve_once(family, host):
    try:
        srv = socket.socket(family, socket.SOCK_STREAM)
        srv.bind((host, 0)); srv.listen(1)
    except OSError as e:
        return e.errno
    port = srv.getsockname()[1]
    def answer():
        c, _ = srv.accept(); c.sendall(c.recv(4).replace(b'ping', b'pong')); c.close()
    t = threading.Thread(target=answer); t.start()
    try:
        cl = socket.create_connection((host, port), timeout=5); cl.sendall(b'ping')
        got = cl.recv(4).decode()
    except OSError as e:
        got = e.errno
    t.join(5)
    return got
out['v4'] = serve_once(socket.AF_INET, '127.0.0.1')
v6 = serve_once(socket.AF_INET6, '::1') if socket.has_ipv6 else 'no ipv6'
out['v6'] = 'no ipv6' if v6 in (97, 99) else v6  # EAFNOSUPPORT, EADDRNOTAVAIL: a kernel without IPv6
try:
    socket.create_connection(('127.0.0.1', 9), timeout=5); out['closed_port'] = 0
except OSError as e:
    out['closed_port'] = e.errno
for far in ('1.1.1.1', '10.0.0.1', '169.254.169.254'):
    s = socket.socket(); s.settimeout(2)
    try:
        s.connect((far, 80)); out[far] = 0
    except socket.timeout:
        out[far] = 'timeout'
    except OSError as e:
        out[far] = e.errno
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
try:
    u.sendto(b'x', ('1.1.1.1', 53)); out['udp 1.1.1.1'] = 0
except OSError as e:
    out['udp 1.1.1.1'] = e.errno
try:  # the namespace's interfaces (if_nameindex would need netlink, which the allow-list refuses)
    out['interfaces'] = sorted(l.split(':')[0].strip() for l in open('/proc/net/dev').read().splitlines()[2:])
except OSError as e:
    out['interfaces'] = e.errno
"""


class LandlockTest(unittest.TestCase):
    """S32: what only Landlock refuses.  Each probe runs twice, in a box with Landlock and in
    one whose backend runs with --no-landlock: the mounts, namespaces and seccomp are the same, so
    a difference is Landlock's alone."""

    def compare(self, body, min_abi):
        abi = landlock_abi()
        if abi < min_abi:
            self.skipTest("this kernel's Landlock ABI is %d, the check needs %d" % (abi, min_abi))
        on = backend_run(PRELUDE + body + "\nprint(json.dumps(out))")
        off = backend_run(PRELUDE + body + "\nprint(json.dumps(out))", extra=("--no-landlock",))
        self.assertEqual((on["walls"], off["walls"]), ("namespaces+seccomp+landlock", "namespaces+seccomp"))
        for r in (on, off):
            self.assertEqual(r["run"]["code"], 0, r)
        return json.loads(on["run"]["stdout"]), json.loads(off["run"]["stdout"])

    def test_s32_proc_writes_only_landlock_refuses(self):
        # /proc is mounted read-write (the box's own); its uid owns its /proc/self files
        on, off = self.compare("""
out = {}
for p, data in (('/proc/self/mem', None), ('/proc/self/oom_score_adj', b'1000')):
    try:
        with open(p, 'r+b', buffering=0) as f:
            if data:
                f.write(data)
        out[p] = 'written'
    except OSError as e:
        out[p] = e.errno
out['read'] = len(open('/proc/self/status').read()) > 0
out['box'] = open('/box/x', 'w').write('x') == 1
""", 1)
        self.assertEqual(on, {"/proc/self/mem": 13, "/proc/self/oom_score_adj": 13, "read": True, "box": True})
        self.assertEqual(off, {"/proc/self/mem": "written", "/proc/self/oom_score_adj": "written", "read": True, "box": True})

class NetworkWallTest(unittest.TestCase):
    """S33: the box's network namespace is its network wall.  The same in a box with Landlock and in
    one whose backend runs with --no-landlock (Landlock handles no TCP: a refusal there would say
    EACCES for an unreachable address, and forbid the box its own loopback)."""

    def run_probe(self, extra=()):
        res = backend_run(PRELUDE + NETWORK_PROBE + "\nprint(json.dumps(out))", extra=extra)
        self.assertEqual(res["run"]["code"], 0, res)
        return json.loads(res["run"]["stdout"])

    def test_s33_loopback_serves_the_box_nothing_else_is_reachable(self):
        runs = [self.run_probe()] + ([self.run_probe(("--no-landlock",))] if landlock_abi() > 0 else [])
        for got in runs:
            self.assertEqual(got["v4"], "pong", got)
            self.assertIn(got["v6"], ("pong", "no ipv6"), got)
            self.assertEqual(got["closed_port"], 111, got)  # ECONNREFUSED: lo is up, nothing listens
            for far in ("1.1.1.1", "10.0.0.1", "169.254.169.254", "udp 1.1.1.1"):
                self.assertEqual(got[far], 101, (far, got))  # ENETUNREACH, as with no network at all
            self.assertEqual(got["interfaces"], ["lo"], got)

    def test_s33_the_host_reaches_what_the_box_cannot(self):
        # the same probe outside the box: the host's own namespace routes what the box's does not,
        # so the box's ENETUNREACH is its namespace's (skipped where the host has no route either)
        outside = bare(NETWORK_PROBE)
        if outside["1.1.1.1"] == 101 and outside["10.0.0.1"] == 101:
            self.skipTest("this host has no route to 1.1.1.1 or 10.0.0.1 either: nothing to tell apart")
        inside = self.run_probe()
        self.assertEqual((inside["1.1.1.1"], inside["10.0.0.1"]), (101, 101), inside)
        self.assertNotEqual(outside["interfaces"], ["lo"], outside)


class LandlockScopeTest(unittest.TestCase):
    """S33 (ABI >= 6): a process of the box's uid, in its network and pid namespaces but outside its
    Landlock domain (put there from the host with nsenter, as nothing in a box can be), listens on
    an abstract socket; the box's program connects to it and signals it.  Landlock's scopes refuse
    both; the same run on a backend with --no-landlock reaches it."""

    # the outsider sleeps to stay up (its socket bound) while the probe runs, far longer than the test
    OUTSIDER = r"""
import socket, sys, time
s = socket.socket(socket.AF_UNIX)
s.bind('\0moat-outsider')
s.listen(1)
print('ready', flush=True)
time.sleep(600)
"""
    PROBE = """
import json, os, socket
out = {}
s = socket.socket(socket.AF_UNIX)
try:
    s.connect('\\0moat-outsider'); out['connect'] = 0
except OSError as e:
    out['connect'] = e.errno
# hidepid=2 shows a process only to those that may ptrace it, which Landlock limits to its domain
out['seen'] = sum(1 for p in os.listdir('/proc') if p.isdigit() and b'moat-outsider' in open('/proc/%s/cmdline' % p, 'rb').read())
try:
    os.kill(int(open('/tmp/outsider-pid').read()), 0); out['signal'] = 0
except OSError as e:
    out['signal'] = e.errno
print(json.dumps(out))
"""

    def scoped(self, extra):
        tag = "moat-t%d-scope%s" % (os.getpid(), "off" if extra else "on")
        long_run = ("-o", "run_timeout=%d" % LONG_WALL_MS, "--run-timeout", str(LONG_WALL_MS), *extra)
        result = {}

        def run():
            result["r"] = backend_run(held_program(then=self.PROBE), tag=tag, extra=long_run, timeout=4 * DEADLINE_S)

        t = threading.Thread(target=run)
        t.start()
        outsider = None
        try:
            wait_held(tag)
            prog = [p for p in box_pids(tag) if os.stat("/proc/%d" % p).st_uid != 0]
            self.assertEqual(len(prog), 1, prog)
            st = os.stat("/proc/%d" % prog[0])
            outsider = subprocess.Popen(["nsenter", "-t", str(prog[0]), "--net", "--pid", "--setgid", str(st.st_gid),
                                         "--setuid", str(st.st_uid), "/usr/bin/python3", "-c", self.OUTSIDER],
                                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            self.assertEqual(outsider.stdout.readline(), b"ready\n")
            # its pid in the box's namespace (nsenter forked it): the last of NSpid
            with open("/proc/%d/task/%d/children" % (outsider.pid, outsider.pid)) as f:
                child = int(f.read().split()[0])
            with open("/proc/%d/status" % child) as f:
                nspid = [l.split()[-1] for l in f if l.startswith("NSpid:")][0]
            with open("/proc/%d/root/tmp/outsider-pid" % prog[0], "w") as f:
                f.write(nspid)
            release_all(tag)
            t.join()
        finally:
            release_all(tag)
            t.join()
            if outsider is not None:
                outsider.kill()
                outsider.wait()
        r = result["r"]
        self.assertEqual(r["run"]["code"], 0, r)
        return r["walls"], json.loads(r["run"]["stdout"])

    def test_s33_abstract_socket_and_signal_scopes_only_landlock_refuses(self):
        abi = landlock_abi()
        if abi < 6:
            self.skipTest("this kernel's Landlock ABI is %d, scopes need 6" % abi)
        if shutil.which("nsenter") is None:
            self.skipTest("nsenter (util-linux) is not installed")
        self.assertEqual(self.scoped(()), ("namespaces+seccomp+landlock", {"connect": 1, "seen": 0, "signal": 1}))
        self.assertEqual(self.scoped(("--no-landlock",)), ("namespaces+seccomp", {"connect": 0, "seen": 1, "signal": 0}))


class ProbeDiffTest(unittest.TestCase):
    def test_s23_same_probe_bare_and_boxed_differs_only_as_intended(self):
        bare = json.loads(subprocess.run(["/usr/bin/python3", "-c", PROBE], capture_output=True, text=True,
                                         check=True).stdout)
        boxed = json.loads(backend_run(PROBE)["run"]["stdout"])
        diff = sorted(k for k in bare if bare[k] != boxed[k])
        self.assertEqual(diff, ["cap_eff_zero", "hostname", "interfaces", "no_new_privs", "pid_is_small", "seccomp",
                                "sees_shadow", "uid_is_root", "writable_usr"])
        self.assertEqual(boxed["interfaces"], ["lo"])  # present but down: no route anywhere
        self.assertEqual(boxed["hostname"], "box")
        self.assertEqual((boxed["python_works"], boxed["tmp_writable"]), (True, True))


class ConcurrentBoxesTest(unittest.TestCase):
    def test_s13_two_boxes_cannot_reach_each_other(self):
        # box A listens on an abstract unix socket; box B, running at the same
        # time, tries to connect and to signal.  The test orders them from the
        # host (held_program): B starts once A listens, A ends once B is done.
        a_code = PRELUDE + """
import socket
s = socket.socket(socket.AF_UNIX)
s.bind('\\0moat-s13')
s.listen(1)
""" + held_program(then="print('alive')")
        b_code = PRELUDE + held_program(then="""
import socket
s = socket.socket(socket.AF_UNIX)
try:
    s.connect('\\0moat-s13'); print('connected')
except OSError as e:
    print('refused', e.errno)
others = [p for p in os.listdir('/proc') if p.isdigit() and int(p) != os.getpid()]
print('visible', len(others))
print('kill', sc(62, -1, 9))
""")
        results = {}
        tags = {name: "moat-t%d-%s" % (os.getpid(), name) for name in "ab"}
        long_run = ("-o", "run_timeout=%d" % LONG_WALL_MS, "--run-timeout", str(LONG_WALL_MS))

        def run(name, code):
            results[name] = backend_run(code, tag=tags[name], extra=long_run, timeout=4 * DEADLINE_S)["run"]

        ta = threading.Thread(target=run, args=("a", a_code))
        tb = threading.Thread(target=run, args=("b", b_code))
        ta.start()
        tb.start()
        try:
            wait_held(tags["a"])  # A listens
            wait_held(tags["b"])
            release_all(tags["b"])
            tb.join()
        finally:
            release_all(tags["b"])
            release_all(tags["a"])
            ta.join()
            tb.join()
        self.assertEqual(results["a"]["stdout"], "alive\n", results["a"])
        lines = results["b"]["stdout"].splitlines()
        self.assertEqual(lines[0], "refused 111")  # ECONNREFUSED: separate network namespace
        self.assertEqual(lines[1], "visible 0")


if __name__ == "__main__":
    unittest.main()
