#!/usr/bin/env python3
"""bench_walls - a job's cost of each wall, Landlock and gVisor, in one run (issue 15).

    python3 tests/bench/bench_walls.py [--build-dir build] [--jobs 40] [--rounds 5] [--platform ptrace]
                                       [--no-gvisor] [--control] [--smoke]

Run as root (runsc installed for the gVisor arm: Debian apt-get install runsc).
Three arms, measured in the same run, interleaved job by job:

  on      the plain box as shipped (Landlock on, where the kernel has it)
  off     the plain box of a backend started with --no-landlock
  gvisor  the gVisor box (request tag 18, isolation gvisor) of a third backend,
          as shipped but for --runsc and --gvisor-platform

Three moat-backends side by side, each -j 1 (one job at a time, so a latency
is one job's alone), spoken to through their sockets (no gateway: what is
measured is the backend's share, where the walls cost). Each job is
`python3 -B main.code` where the file holds `pass`: a job's fixed cost, where a
per-job cost weighs most (Landlock's checks on the few hundred files a Python start
opens, runsc's sandbox start).

Per round: three fresh backends, the gVisor one first, then on and off started
in turn first (two backends identical but for the option differ by a few % by
themselves: which slots, uids and groups they got), two warm jobs of each arm,
then --jobs steps. The gVisor jobs have a backend of their own: run on the
"on" one, each left it a gVisor box to tear down and a fresh box to make
before its next plain job, which an A/A run showed as on/off 1.4x. A step is a
gVisor job then the pair (on, off), or (off, on) every other step: the pair
back to back, so drift in the machine's load hits both alike, and the job
right after the gVisor one (runsc's teardown still settling) is on and off in
turn. A job's latency is from sending the EXEC_REQUEST to reading its
EXEC_RESULT; each must end OK and name its walls. The backends are stopped at
the end of each round.

Reported, for each ratio, the headline: the median of paired ratios (jobs run
back to back see the same load, which on a shared machine moves more between
rounds than Landlock costs). gVisor / plain pairs a step's gVisor job with its
on job. Landlock on / off pairs two steps, one of each order: the geometric
mean of their two on/off ratios, so that what running first in a pair costs
(the job right after the gVisor one runs beside runsc's teardown; printed as
"a pair's second job against its first") cancels out; taken step by step,
those ratios fall in two clusters and their median lands anywhere in the gap
between. Beside each headline: the median of the rounds' ratios of medians,
and the run stage's CPU time per job (the box cgroup's, in whole ms, averaged:
the program's own cost, a wall's checks included, whatever else the machine
runs). Goals: Landlock on / off <= 1.02x, gVisor / plain (on) <= 15x on
ptrace. The machine facts (nproc, kernel, Landlock ABI, runsc version, load
average at the start and the end) are printed with the figures.

--control runs the on and off backends both with --no-landlock: the method's
own bias and noise, an A/A run to read the Landlock figure against (the noise
is about +-2%, the size of the goal). --no-gvisor leaves the gVisor arm out.
The gVisor arm is left out, with the reason printed, when runsc is not
installed or cannot run a trivial sandbox on this host by itself; the Landlock
comparison is left out, with the reason, on a kernel without Landlock (both
arms would be the same box).

Exit status: 0 when every job ran OK (an arm left out for a reason printed is
not an error); 1 on any error.  Missing a goal is reported, not an error.
"""

import argparse
import os
import socket
import statistics
import subprocess
import sys
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.abspath(os.path.join(HERE, "..", ".."))
GOAL_LANDLOCK = 1.02
GOAL_GVISOR = 15.0
ISOLATION_GVISOR = 1  # request tag 18


def walls_of(arm, landlock):
    """The walls a job of the arm must name; landlock: the "on" backend runs with Landlock."""
    if arm == "gvisor":
        return "namespaces+gvisor"
    return "namespaces+seccomp+landlock" if arm == "on" and landlock else "namespaces+seccomp"


def timed_job(h, sock_path, job_id, arm, walls):
    """Seconds from request to result, and the run stage's CPU ms (the cgroup's); the result must be OK and
    name the expected walls."""
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(120)
        s.connect(sock_path)
        started = time.monotonic()
        s.sendall(h.exec_request(job_id, "python", "pass", isolation=ISOLATION_GVISOR if arm == "gvisor" else None))
        msg = h.read_frame(s)
        took = time.monotonic() - started
    if msg is None or msg[0] != h.MSG_EXEC_RESULT:
        raise RuntimeError("job %d (%s): no result: %r" % (job_id, arm, msg and h.error_of(msg[2])))
    got = b"".join(v for tag, v in h.parse_tlvs(msg[2]) if tag == 3).decode()
    if got != walls:
        raise RuntimeError("job %d (%s): walls %r, expected %r" % (job_id, arm, got, walls))
    status = h.run_stage_of(msg[2])["status"]
    if status != h.STATUS_OK:
        raise RuntimeError("job %d (%s): status %d" % (job_id, arm, status))
    stage = dict(h.parse_tlvs(dict(h.parse_tlvs(msg[2]))[17]))
    return took, int.from_bytes(stage[8], "big")


def backend(h, suffix, args):
    """A Stack whose backend alone runs, under a tag of its own (three in one process)."""
    stack = h.Stack(backend_args=["-j", "1", *args], audit=False)
    stack.tag = "moat-bw%d-%s" % (os.getpid(), suffix)
    stack.uid_base = h.uid_base(stack.tag)
    stack.run_dir = "/run/" + stack.tag
    stack.socket = os.path.join(stack.run_dir, "backend.sock")
    stack.start_backend()
    return stack


def gvisor_reason(args):
    """None when the gVisor arm runs, else why not (test_gvisor's check: runsc installed and running a trivial
    sandbox on ptrace by itself)."""
    if args.no_gvisor:
        return "--no-gvisor"
    import test_gvisor  # noqa: E402  (tests/e2e)
    try:
        test_gvisor.require_runsc()
    except unittest.SkipTest as e:
        return str(e)
    return None


class Series:
    """Every arm's latencies and CPU ms, per round and over the run, and the steps' paired ratios."""

    def __init__(self, arms):
        self.arms = arms
        self.all = {a: [] for a in arms}
        self.cpu = {a: 0 for a in arms}
        self.pairs = {"landlock": [], "gvisor": []}
        self.rounds = {"landlock": [], "gvisor": []}
        self.second = []  # a pair's second job / its first
        self.last = None

    def step(self, i, took):
        """Step i's latencies, {arm: seconds}: its paired ratios.  On and off are compared over two steps, one of
        each order ((on/off * on'/off') ** 0.5), so the cost of running first in a pair cancels out."""
        if "on" in took and "off" in took:
            self.second.append(took["off"] / took["on"] if i % 2 == 0 else took["on"] / took["off"])
            if i % 2 == 1:
                self.pairs["landlock"].append((took["on"] / took["off"] * self.last["on"] / self.last["off"]) ** 0.5)
            self.last = took
        if "gvisor" in took:
            self.pairs["gvisor"].append(took["gvisor"] / took["on"])

    def round(self, r, jobs, lat):
        """One round's latencies, {arm: [seconds]}: its medians and ratios, printed."""
        med = {a: statistics.median(lat[a]) for a in self.arms}
        for a in self.arms:
            self.all[a] += lat[a]
        line = "round %d (medians of %d):" % (r + 1, jobs)
        line += "".join(" %s %.2f ms," % (a, med[a] * 1000) for a in self.arms)
        if "off" in med:
            self.rounds["landlock"].append(med["on"] / med["off"])
            line += " on/off %.3fx," % self.rounds["landlock"][-1]
        if "gvisor" in med:
            self.rounds["gvisor"].append(med["gvisor"] / med["on"])
            line += " gvisor/on %.2fx," % self.rounds["gvisor"][-1]
        print(line.rstrip(","), flush=True)


def report(s, args):
    """The run's figures: medians, CPU per job, the two ratios against their goals."""
    n = len(s.all["on"])
    print("\n%d rounds of %d jobs of each arm:" % (args.rounds, args.jobs))
    for a in s.arms:
        print("  %-7s median %7.2f ms, run stage CPU (cgroup) mean %.2f ms per job" %
              (a, statistics.median(s.all[a]) * 1000, s.cpu[a] / n))
    if "off" in s.arms:
        ratio = statistics.median(s.pairs["landlock"])
        print("a pair's second job against its first: %.3fx (median)" % statistics.median(s.second))
        print("Landlock on / off%s: %.3fx (median of %d ratios of two steps; goal <= %.2fx: %s); median of the rounds' "
              "ratios %.3fx; CPU per job %.3fx" %
              (" (control: both without Landlock)" if args.control else "", ratio, len(s.pairs["landlock"]), GOAL_LANDLOCK,
               "met" if ratio <= GOAL_LANDLOCK else "MISSED", statistics.median(s.rounds["landlock"]),
               s.cpu["on"] / max(s.cpu["off"], 1)))
    if "gvisor" in s.arms:
        ratio = statistics.median(s.pairs["gvisor"])
        print("gVisor (%s) / plain (on): %.2fx (median of %d paired ratios; goal <= %.0fx on ptrace: %s); median of "
              "the rounds' ratios %.2fx; CPU per job %.2fx" %
              (args.platform, ratio, len(s.pairs["gvisor"]), GOAL_GVISOR, "met" if ratio <= GOAL_GVISOR else "MISSED",
               statistics.median(s.rounds["gvisor"]), s.cpu["gvisor"] / max(s.cpu["on"], 1)))


def run(h, args, arms, runsc_args, landlock):
    """Every round; the Series."""
    s = Series(arms)
    stacks = {}
    try:
        job = 0
        for r in range(args.rounds):
            for arm in ["gvisor"] + (["on", "off"] if r % 2 == 0 else ["off", "on"]):
                if arm in arms:
                    off = arm == "off" or (arm == "on" and not landlock)
                    stacks[arm] = backend(h, arm, (runsc_args if arm == "gvisor" else []) + (["--no-landlock"] if off else []))

            def one(arm):
                nonlocal job
                job += 1
                return timed_job(h, stacks[arm].socket, job, arm, walls_of(arm, landlock))

            for arm in arms * 2:  # warm: page cache, first boxes
                one(arm)
            lat = {a: [] for a in arms}
            for i in range(args.jobs):
                order = ["gvisor"] + (["on", "off"] if i % 2 == 0 else ["off", "on"])
                took = {}
                for arm in (a for a in order if a in arms):
                    took[arm], cpu_ms = one(arm)
                    lat[arm].append(took[arm])
                    s.cpu[arm] += cpu_ms
                s.step(i, took)
            s.round(r, args.jobs, lat)
            for arm in list(stacks):
                stacks.pop(arm).stop()
        return s
    except Exception:
        for arm, stack in stacks.items():
            print("%s backend:\n%s" % (arm, stack.log("backend")), file=sys.stderr)
        raise
    finally:
        for stack in stacks.values():
            stack.stop()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build-dir", default=os.path.join(SOURCE, "build"))
    ap.add_argument("--jobs", type=int, default=40, help="jobs of each arm per round")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--platform", default="ptrace", choices=("ptrace", "kvm", "auto"), help="the gVisor platform")
    ap.add_argument("--no-gvisor", action="store_true", help="leave the gVisor arm out")
    ap.add_argument("--control", action="store_true", help="both backends without Landlock: an A/A run")
    ap.add_argument("--smoke", action="store_true", help="3 jobs, 1 round: checks it runs, the figures mean nothing")
    args = ap.parse_args()
    args.jobs, args.rounds = (3, 1) if args.smoke else (args.jobs, args.rounds)
    if args.jobs < 2 or args.rounds < 1:
        ap.error("--jobs must be at least 2 (on/off pairs two steps) and --rounds at least 1")
    os.environ["MOAT_BUILD_DIR"] = os.path.abspath(args.build_dir)
    sys.path.insert(0, os.path.join(SOURCE, "tests", "e2e"))
    import moat_harness as h  # noqa: E402  (reads MOAT_BUILD_DIR)
    from bench_e2e import machine  # noqa: E402

    print("bench_walls: %s%s" % (time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                                 " (smoke: the figures mean nothing)" if args.smoke else ""))
    print("machine at the start: %s" % machine())
    arms = ["on"]
    abi = h.landlock_abi()
    if abi == 0:
        print("bench_walls: Landlock arm skipped: this kernel has no Landlock (on and off would be the same box)")
    else:
        arms.append("off")
        control = "; control run: the on and off backends both with --no-landlock"
        print("Landlock ABI %d%s" % (abi, control if args.control else ""))
    runsc_args = []
    reason = gvisor_reason(args)
    if reason:
        print("bench_walls: gVisor arm skipped: %s" % reason.strip())
    else:
        arms.append("gvisor")
        runsc = __import__("test_gvisor").RUNSC
        version = subprocess.run([runsc, "--version"], capture_output=True, text=True).stdout.split("\n")[0]
        print("%s, platform %s" % (version, args.platform))
        runsc_args = ["--runsc", runsc, "--gvisor-platform", args.platform]
    try:
        s = run(h, args, arms, runsc_args, abi > 0 and not args.control)
    except Exception as e:  # noqa: BLE001 - any failure is the benchmark's error
        print("bench_walls: %s" % e, file=sys.stderr)
        return 1
    report(s, args)
    print("machine at the end: %s" % machine())
    return 0


if __name__ == "__main__":
    sys.exit(main())
