#!/usr/bin/env python3
"""bench_landlock - a job's latency with the Landlock wall against without it (issue 15 item 1).

    python3 tests/bench/bench_landlock.py [--build-dir build] [--jobs 40] [--rounds 5] [--control] [--smoke]

Run as root.  It starts two moat-backends side by side, one as shipped (Landlock
on, where the kernel has it) and one with --no-landlock, each -j 1 (one job at a
time, so a latency is one job's alone), and speaks their socket protocol directly
(no gateway: what is measured is the backend's share, where Landlock's cost is:
the ruleset built once per job in the box's init, restrict_self in each stage's
program, and the kernel's checks on every open, exec and connect that follows).
Each job is `python3 -B main.code` where the file holds `pass`: the job's fixed
cost, where a per-job cost weighs most, and a program start that opens a few
hundred files under the rules.

Per round: two fresh backends (started in turn first), then --jobs jobs on each, interleaved job by job in pairs (on,
off, then off, on, ...) so that drift in the machine's load hits both alike.  A
job's latency is from sending the EXEC_REQUEST to reading its EXEC_RESULT; each
must end OK and name its walls (namespaces+seccomp+landlock against
namespaces+seccomp).  Reported: each series' median per round and the ratio of
the medians; then the headline, the median over every pair of its on / off
ratio (two jobs run back to back see the same load, which on a shared machine
moves more between rounds than Landlock costs), and beside it the median of the
rounds' ratios and the run stage's CPU time per job (the cgroup's, in whole ms,
averaged: the program's own cost, Landlock's checks included, whatever else
the machine runs).  Goal: on / off <= 1.02.

--control runs both backends with --no-landlock (the "landlock" series too):
the method's own bias and noise, an A/A run to read the figures against.

Exit status: 0 when every job ran OK; 1 on any error; 0 with a line saying so
when the kernel has no Landlock (nothing to compare).  Missing the goal is
reported, not an error.
"""

import argparse
import os
import socket
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.abspath(os.path.join(HERE, "..", ".."))
GOAL = 1.02
WALLS = {True: "namespaces+seccomp+landlock", False: "namespaces+seccomp"}
CONTROL = False  # --control: the "landlock" backend runs without it too


def timed_job(sock_path, job_id, landlock, h):
    """Seconds from request to result, and the run stage's CPU ms (the cgroup's); the result must be
    OK and name the expected walls."""
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(120)
        s.connect(sock_path)
        started = time.monotonic()
        s.sendall(h.exec_request(job_id, "python", "pass"))
        msg = h.read_frame(s)
        took = time.monotonic() - started
    if msg is None or msg[0] != h.MSG_EXEC_RESULT:
        raise RuntimeError("job %d (landlock %s): no result: %r" % (job_id, landlock, msg and h.error_of(msg[2])))
    walls = b"".join(v for tag, v in h.parse_tlvs(msg[2]) if tag == 3).decode()
    if walls != WALLS[landlock and not CONTROL]:
        raise RuntimeError("job %d: walls %r, expected %r" % (job_id, walls, WALLS[landlock and not CONTROL]))
    run = h.run_stage_of(msg[2])
    if run["status"] != h.STATUS_OK:
        raise RuntimeError("job %d (landlock %s): status %d" % (job_id, landlock, run["status"]))
    stage = dict(h.parse_tlvs(dict(h.parse_tlvs(msg[2]))[17]))
    return took, int.from_bytes(stage[8], "big")


def backend(h, suffix, args):
    """A Stack whose backend alone runs, under a tag of its own (two in one process)."""
    stack = h.Stack(backend_args=["-j", "1", *args], audit=False)
    stack.tag = "moat-bl%d-%s" % (os.getpid(), suffix)
    stack.uid_base = h.uid_base(stack.tag)
    stack.run_dir = "/run/" + stack.tag
    stack.socket = os.path.join(stack.run_dir, "backend.sock")
    stack.start_backend()
    return stack


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build-dir", default=os.path.join(SOURCE, "build"))
    ap.add_argument("--jobs", type=int, default=40, help="jobs of each series per round")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--control", action="store_true", help="both backends without Landlock: an A/A run")
    ap.add_argument("--smoke", action="store_true", help="3 jobs, 1 round: checks it runs, the figures mean nothing")
    args = ap.parse_args()
    if args.smoke:
        args.jobs, args.rounds = 3, 1
    global CONTROL
    CONTROL = args.control
    os.environ["MOAT_BUILD_DIR"] = os.path.abspath(args.build_dir)
    sys.path.insert(0, os.path.join(SOURCE, "tests", "e2e"))
    import moat_harness as h  # noqa: E402  (reads MOAT_BUILD_DIR)

    abi = h.landlock_abi()
    if abi == 0:
        print("bench_landlock: skipped: this kernel has no Landlock (nothing to compare)")
        return 0
    stacks = {}
    try:
        job = 0
        ratios, pairs, all_on, all_off, cpu = [], [], [], [], {True: 0, False: 0}
        for r in range(args.rounds):
            # fresh backends each round, started in turn first: two backends identical but for
            # the option differ by a few % by themselves (which slot, uid and group they got)
            for landlock in ((True, False) if r % 2 == 0 else (False, True)):
                off = not landlock or args.control
                stacks[landlock] = backend(h, "on" if landlock else "off", ["--no-landlock"] if off else [])
            for landlock in (True, False, True, False):  # warm: the page cache, each backend's first boxes
                job += 1
                timed_job(stacks[landlock].socket, job, landlock, h)
            series = {True: [], False: []}
            for i in range(args.jobs):
                for landlock in ((True, False) if i % 2 == 0 else (False, True)):
                    job += 1
                    took, cpu_ms = timed_job(stacks[landlock].socket, job, landlock, h)
                    series[landlock].append(took)
                    cpu[landlock] += cpu_ms
                pairs.append(series[True][-1] / series[False][-1])
            on, off = statistics.median(series[True]), statistics.median(series[False])
            ratios.append(on / off)
            all_on += series[True]
            all_off += series[False]
            print("round %d: landlock %.2f ms, without %.2f ms (medians of %d): %.3fx" %
                  (r + 1, on * 1000, off * 1000, args.jobs, ratios[-1]), flush=True)
            for landlock in (True, False):
                stacks.pop(landlock).stop()
        ratio = statistics.median(pairs)
        if args.control:
            print("\ncontrol run: both backends without Landlock")
        print("\nLandlock ABI %d; %d rounds of %d jobs each: with landlock median %.2f ms, without %.2f ms" %
              (abi, args.rounds, args.jobs, statistics.median(all_on) * 1000, statistics.median(all_off) * 1000))
        print("median of the rounds' ratios: %.3fx" % statistics.median(ratios))
        n = args.rounds * args.jobs
        print("run stage CPU (cgroup), mean per job: with landlock %.2f ms, without %.2f ms: %.3fx" %
              (cpu[True] / n, cpu[False] / n, cpu[True] / max(cpu[False], 1)))
        print("landlock / without: %.3fx (median of %d paired ratios; goal <= %.2fx: %s)" %
              (ratio, len(pairs), GOAL, "met" if ratio <= GOAL else "MISSED"))
    except Exception as e:  # noqa: BLE001 - any failure is the benchmark's error
        print("bench_landlock: %s" % e, file=sys.stderr)
        for s in stacks.values():
            print(s.log("backend"), file=sys.stderr)
        return 1
    finally:
        for s in stacks.values():
            s.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
