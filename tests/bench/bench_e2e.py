#!/usr/bin/env python3
"""bench_e2e - end-to-end execution against bare exec and Isolate (issue 14, item 7).

    python3 tests/bench/bench_e2e.py [--build-dir build] [--rounds 5] [--jobs 40]
        [--clients 16] [--conc-jobs 96] [--isolate-src DIR] [--slots N] [--no-audit] [--smoke]

Run as root (the backend runs boxes; the gateway drops to the `moat` user).
It starts one moat-backend (the default slot count, 2 a CPU, unless --slots) and one
moat-gateway on 127.0.0.1, set up as the e2e tests do
(tests/e2e/moat_harness.py: real TLS, audit trail on), and runs the same
Python hello world (print("hello"), the python manifest's interpreter) in
every series:

  bare      fork + exec of `python3.11 -B -c 'print("hello")'` from this
            process (subprocess, pipes for stdout and stderr): the baseline;
  https     POST /api/v2/execute over one keep-alive TLS connection per
            client (HTTP/1.1): the whole service, box included;
  socket    the same job sent straight to the backend's Unix socket (the
            protocol of backend/protocol/PROTOCOL.md), one connection per
            client: the backend without the gateway;
  isolate   ioi/isolate v1.10.1 built from --isolate-src in this run, as
            Judge0 uses it: `isolate --init`, the file written into the
            box, `isolate --run -- python3.11 -B main.py`, `isolate
            --cleanup`, per job (with --cg when cgroup v1 control groups
            work here; the output says which).

and measures, in interleaved rounds (the order rotates each round, so that
drift in the machine's load hits every series alike):

  1. latency: `jobs` jobs one after another, p50 and p99 per series
     (goal: https p50 <= 1.1x bare p50);
  2. throughput: `conc-jobs` jobs shared by `clients` threads, each doing
     one job after another, jobs/s per series (goal: https >= 0.8x bare);
  3. time per job against Isolate's: the sequential p50s, and the inverse
     throughputs at `clients` (goal: moat <= 0.6x Isolate).

Every ratio is taken within a round; the medians over the rounds are
printed.  Beside them, the CPU time per job (user + system, the boxes and
reaped children included; kernel threads' work such as namespace teardown
is not) of each series: bare and isolate from this process's reaped
children, moat from the backend (its reaped boxes included) and the
gateway's processes.  On a busy machine CPU per job is the steadier figure.

Each job runs in a session of its own in every series (a box's program
calls setsid; bare and isolate are started with start_new_session), so
that with the kernel's autogroup scheduling every job gets the same share
of a busy machine's CPUs.

Isolate: --isolate-src is a git repository of ioi/isolate (v1.10.1 is
archived from it) or a directory holding its source.  It is built in a
temporary directory with a private configuration (box root, control group
parent and uids of this run, see isolate_setup) and never installed;
nothing of it is kept.  Without --isolate-src, or when it cannot be built
or run, that series is skipped with the reason.

Exit status: 0 when every job's output was "hello"; 1 on any error.
Missing a goal is reported, not an error.  --smoke runs a few jobs of
each series once (the figures mean nothing): ctest's bench_e2e_smoke.
"""

import argparse
import http.client
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
from bench_submissions import check, cpu_ms as proc_cpu_ms, descendants  # noqa: E402

CODE = 'print("hello")'
EXPECTED = b"hello\n"
ISOLATE_VERSION = "v1.10.1"
GOAL_P50 = 1.1
GOAL_THROUGHPUT = 0.8
GOAL_ISOLATE = 0.6
# box uids of the isolate series: apart from moat's test range
# (1900000000..1916777215, moat_harness.py) and from every system account
ISOLATE_UID_BASE = 1920000000
ISOLATE_BOXES = 64


def python_argv0():
    """The interpreter the python manifest runs (the box and bare run the same binary)."""
    langs = os.path.join(SOURCE, "backend", "languages")
    for d in sorted(os.listdir(langs)):
        if d.startswith("python"):
            with open(os.path.join(langs, d, "manifest.json")) as f:
                return json.load(f)["run"][0]
    raise RuntimeError("no python manifest in %s" % langs)


def children_cpu_ms():
    t = os.times()
    return (t.children_user + t.children_system) * 1000.0


# ---- the series: each is a factory of per-client workers ---------------------


class Bare:
    name = "bare"

    def __init__(self, argv0):
        self.argv = [argv0, "-B", "-c", CODE]

    def worker(self, index):
        return self

    def job(self):
        p = subprocess.run(self.argv, capture_output=True, start_new_session=True)
        check("bare", p.returncode == 0 and p.stdout == EXPECTED, (p.returncode, p.stdout, p.stderr))

    def cpu_ms(self):
        return children_cpu_ms()

    def close(self):
        pass


class Https:
    """POST /api/v2/execute, one keep-alive TLS connection per worker."""
    name = "https"

    def __init__(self, stack):
        self.stack = stack
        self.body = json.dumps({"language": "python", "version": "*", "files": [{"name": "main.py", "content": CODE}]})
        self.headers = {"Authorization": "Bearer " + stack.token, "Content-Type": "application/json"}
        self.conns = []

    def worker(self, index):
        conn = http.client.HTTPSConnection("127.0.0.1", self.stack.port, timeout=120,
                                           context=self.stack.ssl_context(alpn=("http/1.1",)))
        self.conns.append(conn)
        body, headers = self.body, self.headers

        class W:
            def job(self):
                conn.request("POST", "/api/v2/execute", body=body, headers=headers)
                resp = conn.getresponse()
                raw = resp.read()
                check("https", resp.status == 200, (resp.status, raw[:300]))
                data = json.loads(raw)
                check("https", data["run"]["stdout"] == EXPECTED.decode(), data)
        return W()

    def cpu_ms(self):
        return proc_cpu_ms([self.stack.backend.pid] + descendants(self.stack.gateway.pid))

    def close(self):
        for c in self.conns:
            c.close()
        self.conns = []


class Socket:
    """The job framed for the backend's Unix socket, one connection per worker."""
    name = "socket"

    def __init__(self, stack, harness):
        self.stack, self.h = stack, harness
        self.socks = []
        self.next_id = [1]

    def worker(self, index):
        s = socket.socket(socket.AF_UNIX)
        s.connect(self.stack.socket)
        self.socks.append(s)
        h, ids = self.h, self.next_id

        class W:
            def job(self):
                ids[0] += 1  # under the GIL: ids are unique, which is all that matters
                s.sendall(h.exec_request(ids[0], "python", CODE))
                got = h.read_frame(s)
                check("socket", got is not None and got[0] == h.MSG_EXEC_RESULT, got)
                check("socket", h.run_stage_of(got[2])["stdout"] == EXPECTED, got)
        return W()

    def cpu_ms(self):
        return proc_cpu_ms([self.stack.backend.pid])

    def close(self):
        for s in self.socks:
            s.close()
        self.socks = []


class Isolate:
    """isolate --init, write main.py, --run, --cleanup: one job; worker i uses box id i."""
    name = "isolate"

    def __init__(self, binary, argv0, use_cg):
        self.binary, self.argv0 = binary, argv0
        self.cg = ["--cg"] if use_cg else []

    def _isolate(self, box, *args):
        p = subprocess.run([self.binary, *self.cg, "-b", str(box), *args], capture_output=True, start_new_session=True)
        check("isolate %s" % " ".join(args[-1:]), p.returncode == 0, (p.returncode, p.stdout[-300:], p.stderr[-300:]))
        return p.stdout

    def worker(self, index):
        iso = self

        class W:
            def job(self):
                box = iso._isolate(index, "-s", "--init").decode().strip()
                with open(os.path.join(box, "box", "main.py"), "w") as f:
                    f.write(CODE + "\n")
                # Judge0's run options (its defaults: 5 s CPU, 10 s wall, 64 MB stack, 60
                # processes, 1 MB files, 128 MB of memory through the control group)
                limits = ["-t", "5", "-x", "1", "-w", "10", "-k", "64000", "-p60", "-f", "1024"]
                if iso.cg:
                    limits.append("--cg-mem=128000")
                out = iso._isolate(index, "-s", *limits, "-E", "HOME=/tmp", "-E", "PATH=/usr/bin:/bin",
                                   "-d", "/etc:noexec", "--run", "--", iso.argv0, "-B", "main.py")
                iso._isolate(index, "-s", "--cleanup")
                check("isolate", out == EXPECTED, out)
        return W()

    def cpu_ms(self):
        return children_cpu_ms()

    def close(self):
        pass


# ---- Isolate's build and private configuration --------------------------------


class IsolateSetup:
    """Builds isolate in a temporary directory against a configuration of this
    run: box root /run/moat-bench-iso-<pid> (root-owned, as isolate wants its
    box root and ancestors), control groups below moat-bench-iso-<pid> in the
    memory, cpuacct and cpuset hierarchies (cgroup v1), box uids
    ISOLATE_UID_BASE + (pid % 4096) * ISOLATE_BOXES onwards."""

    def __init__(self, src):
        self.src = src
        self.tmp = tempfile.mkdtemp(prefix="moat-bench-iso-")
        self.tag = "moat-bench-iso-%d" % os.getpid()
        self.box_root = "/run/" + self.tag
        self.cgroups = []
        self.binary = None
        self.use_cg = False
        self.why = None

    def _source(self, dest):
        if os.path.exists(os.path.join(self.src, "isolate.c")):
            shutil.copytree(self.src, dest)
            return
        git_dir = self.src if os.path.exists(os.path.join(self.src, "HEAD")) else os.path.join(self.src, ".git")
        os.makedirs(dest)
        archive = subprocess.run(["git", "--git-dir", git_dir, "archive", ISOLATE_VERSION], capture_output=True)
        check("git archive %s from %s" % (ISOLATE_VERSION, git_dir), archive.returncode == 0, archive.stderr.decode()[-300:])
        subprocess.run(["tar", "-x", "-C", dest], input=archive.stdout, check=True)

    def build(self):
        src = os.path.join(self.tmp, "src")
        self._source(src)
        with open(os.path.join(src, "Makefile")) as f:
            version = [l.split("=", 1)[1].strip() for l in f if l.startswith("VERSION=")]
        check("isolate source", version == [ISOLATE_VERSION[1:]], "Makefile VERSION %s, want %s" % (version, ISOLATE_VERSION))
        config = os.path.join(self.tmp, "isolate.cf")
        first = ISOLATE_UID_BASE + (os.getpid() % 4096) * ISOLATE_BOXES
        with open(config, "w") as f:
            f.write("box_root = %s\ncg_root = /sys/fs/cgroup\ncg_parent = %s\nfirst_uid = %d\nfirst_gid = %d\n"
                    "num_boxes = %d\n" % (self.box_root, self.tag, first, first, ISOLATE_BOXES))
        make = subprocess.run(["make", "-C", src, "isolate", "CONFIG=" + config], capture_output=True)
        check("building isolate (needs gcc and libcap-dev)", make.returncode == 0, make.stderr.decode()[-500:])
        self.binary = os.path.join(src, "isolate")
        os.makedirs(self.box_root, mode=0o700, exist_ok=True)
        self.use_cg = self._cgroups()

    def _cgroups(self):
        """The parent groups isolate --cg expects (v1 only: isolate 1.x knows no v2)."""
        root = "/sys/fs/cgroup"
        if os.path.exists(os.path.join(root, "cgroup.controllers")):
            self.why = "cgroup v2 host: isolate 1.x supports cgroup v1 only, run without --cg"
            return False
        try:
            for ctrl in ("memory", "cpuacct", "cpuset"):
                d = os.path.join(root, ctrl, self.tag)
                os.mkdir(d)
                self.cgroups.append(d)
                if ctrl == "cpuset":
                    for f in ("cpuset.cpus", "cpuset.mems"):
                        with open(os.path.join(root, ctrl, f)) as src, open(os.path.join(d, f), "w") as dst:
                            dst.write(src.read())
        except OSError as e:
            self.why = "cannot make isolate's parent control groups (%s): run without --cg" % e
            return False
        return True

    def cleanup(self):
        for d in reversed(self.cgroups):
            try:
                os.rmdir(d)
            except OSError as e:
                print("bench_e2e: %s left: %s" % (d, e), file=sys.stderr)
        if os.path.isdir(self.box_root):
            shutil.rmtree(self.box_root, ignore_errors=True)
        shutil.rmtree(self.tmp, ignore_errors=True)


# ---- measuring ------------------------------------------------------------------


def sequential(series, jobs):
    """jobs one after another on one worker: (latencies in ms, CPU ms per job)."""
    w = series.worker(0)
    w.job()  # a first job outside the figures (connection, page cache)
    cpu0 = series.cpu_ms()
    lat = []
    for _ in range(jobs):
        t = time.perf_counter()
        w.job()
        lat.append((time.perf_counter() - t) * 1000.0)
    cpu = (series.cpu_ms() - cpu0) / jobs
    series.close()
    return lat, cpu


def concurrent(series, clients, jobs):
    """jobs shared by `clients` threads: (jobs/s, CPU ms per job)."""
    workers = [series.worker(i) for i in range(clients)]
    shares = [jobs // clients + (1 if i < jobs % clients else 0) for i in range(clients)]
    errors = []
    go = threading.Barrier(clients + 1)

    def run(w, n):
        try:
            go.wait()
            for _ in range(n):
                w.job()
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)
    threads = [threading.Thread(target=run, args=(w, n)) for w, n in zip(workers, shares)]
    for t in threads:
        t.start()
    cpu0 = series.cpu_ms()
    go.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    took = time.perf_counter() - t0
    cpu = (series.cpu_ms() - cpu0) / jobs
    series.close()
    if errors:
        raise errors[0]
    return jobs / took, cpu


def pct(values, p):
    v = sorted(values)
    return v[min(len(v) - 1, int(round(p / 100.0 * (len(v) - 1))))]


def machine():
    with open("/proc/loadavg") as f:
        load = " ".join(f.read().split()[:3])
    return "nproc %d, kernel %s, load average %s" % (os.cpu_count(), os.uname().release, load)


def goal_text(ok):
    return "met" if ok else "MISSED"


def report(rounds, names):
    med = statistics.median
    print("\nmedians over %d round(s):" % len(rounds))
    print("%-8s %9s %9s %11s %9s %11s" % ("series", "p50 ms", "p99 ms", "seq CPU ms", "jobs/s", "conc CPU ms"))
    for n in names:
        print("%-8s %9.2f %9.2f %11.2f %9.1f %11.2f" % (
            n, med(r[n]["p50"] for r in rounds), med(r[n]["p99"] for r in rounds), med(r[n]["seq_cpu"] for r in rounds),
            med(r[n]["tput"] for r in rounds), med(r[n]["conc_cpu"] for r in rounds)))

    def ratio(a, b, key, inverse=False):
        vals = [(r[b][key] / r[a][key]) if inverse else (r[a][key] / r[b][key]) for r in rounds]
        return med(vals), min(vals), max(vals)

    def line(text, got, goal=None, ok=None):
        extra = "" if goal is None else "  (goal %s: %s)" % (goal, goal_text(ok))
        print("%-58s %.2fx  (rounds %.2f-%.2fx)%s" % (text, got[0], got[1], got[2], extra))

    print()
    r = ratio("https", "bare", "p50")
    line("https p50 / bare p50", r, "<= %.1fx" % GOAL_P50, r[0] <= GOAL_P50)
    line("https p99 / bare p99", ratio("https", "bare", "p99"))
    line("socket p50 / bare p50", ratio("socket", "bare", "p50"))
    r = ratio("https", "bare", "tput")
    line("https jobs/s / bare jobs/s", r, ">= %.1fx" % GOAL_THROUGHPUT, r[0] >= GOAL_THROUGHPUT)
    line("socket jobs/s / bare jobs/s", ratio("socket", "bare", "tput"))
    # what the throughput ratio would be if CPU alone bounded both (an idle machine)
    line("bare CPU/job / https CPU/job (concurrent)", ratio("https", "bare", "conc_cpu", inverse=True))
    if "isolate" in names:
        line("https p50 / isolate p50 (time per job, one at a time)", ratio("https", "isolate", "p50"))
        r = ratio("https", "isolate", "tput", inverse=True)
        line("https time/job / isolate time/job (concurrent)", r, "<= %.1fx" % GOAL_ISOLATE, r[0] <= GOAL_ISOLATE)
        line("socket time/job / isolate time/job (concurrent)", ratio("socket", "isolate", "tput", inverse=True))
        line("https CPU/job / isolate CPU/job (concurrent)", ratio("https", "isolate", "conc_cpu"))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build-dir", default=os.path.join(SOURCE, "build"))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--jobs", type=int, default=40, help="sequential jobs per series and round")
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--conc-jobs", type=int, default=96, help="jobs per series and round shared by the clients")
    ap.add_argument("--isolate-src", help="ioi/isolate git repository or source directory (v1.10.1)")
    ap.add_argument("--slots", type=int, default=0, help="the backend's -j (default: its own default, 2 a CPU)")
    ap.add_argument("--no-audit", action="store_true", help="the gateway without its audit trail (to see the trail's share)")
    ap.add_argument("--smoke", action="store_true", help="a few jobs, one round: checks it runs, the figures mean nothing")
    args = ap.parse_args()
    if args.smoke:
        args.rounds, args.jobs, args.conc_jobs, args.clients = 1, 3, 8, 4
    os.environ["MOAT_BUILD_DIR"] = os.path.abspath(args.build_dir)
    sys.path.insert(0, os.path.join(SOURCE, "tests", "e2e"))
    import moat_harness  # noqa: E402  (reads MOAT_BUILD_DIR)

    argv0 = python_argv0()
    iso = None
    series = None
    slots = args.slots or 2 * (os.cpu_count() or 1)  # default: the backend's (main.c); the harness passes -j
    tenant = "rate: {per_second: 100000, burst: 100000}\nmax_in_flight: 256\ncpu_seconds_per_minute: 100000\n"
    stack = moat_harness.Stack(tenants=[("bench", tenant, "")], backend_args=("-j", str(slots)), audit=not args.no_audit)
    try:
        if args.isolate_src:
            iso = IsolateSetup(args.isolate_src)
            try:
                iso.build()
            except (RuntimeError, OSError, subprocess.CalledProcessError) as e:
                print("bench_e2e: isolate skipped: %s" % e, flush=True)
                iso.cleanup()
                iso = None
        else:
            print("bench_e2e: isolate skipped: no --isolate-src", flush=True)
        stack.start()
        series = [Bare(argv0), Https(stack), Socket(stack, moat_harness)]
        if iso is not None:
            candidate = Isolate(iso.binary, argv0, iso.use_cg)
            try:
                sequential(candidate, 1)
            except RuntimeError as e:
                if not iso.use_cg:
                    raise
                print("bench_e2e: isolate --cg failed here (%s); without --cg" % e, flush=True)
                iso.use_cg, iso.why = False, "isolate --cg failed on this host"
                candidate = Isolate(iso.binary, argv0, False)
                sequential(candidate, 1)
            series.append(candidate)
            print("bench_e2e: isolate %s %s" % (ISOLATE_VERSION, "with --cg (cgroup v1)" if iso.use_cg else "without --cg: " + iso.why),
                  flush=True)
        print("bench_e2e: %s; %d slots; %d rounds of %d sequential jobs and %d jobs over %d clients per series"
              % (machine(), slots, args.rounds, args.jobs, args.conc_jobs, args.clients), flush=True)
        for s in series:  # warm: page cache, the gateway's runtime table
            concurrent(s, args.clients, args.clients)
        rounds = []
        for r in range(args.rounds):
            order = series[r % len(series):] + series[:r % len(series)]
            got = {}
            for s in order:
                lat, cpu = sequential(s, args.jobs)
                got[s.name] = {"p50": pct(lat, 50), "p99": pct(lat, 99), "seq_cpu": cpu}
            for s in order:
                tput, cpu = concurrent(s, args.clients, args.conc_jobs)
                got[s.name].update(tput=tput, conc_cpu=cpu)
            rounds.append(got)
            print("round %d: %s; load %s" % (r + 1, ", ".join(
                "%s p50 %.1f ms p99 %.1f ms %.1f jobs/s" % (n, g["p50"], g["p99"], g["tput"]) for n, g in got.items()),
                machine().rsplit("load average ", 1)[1]), flush=True)
        report(rounds, [s.name for s in series])
        print("\nbench_e2e: %s (at the end)" % machine())
    except Exception as e:  # noqa: BLE001 - any failure is the benchmark's error
        print("bench_e2e: %s" % e, file=sys.stderr)
        if getattr(stack, "backend", None) is not None:
            print(stack.log("backend")[-1500:], file=sys.stderr)
        return 1
    finally:
        for s in series or []:
            s.close()
        stack.stop()
        if iso is not None:
            iso.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
