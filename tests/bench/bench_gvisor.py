#!/usr/bin/env python3
"""bench_gvisor - a job under gVisor against the plain box (issue 15 item 2).

    python3 tests/bench/bench_gvisor.py [--build-dir build] [--jobs 20] [--rounds 5] [--platform ptrace] [--smoke]

Run as root, with runsc installed (Debian: apt-get install runsc).  It starts
one moat-backend (-j 1: one job at a time, so each latency is one job's
alone) with --gvisor-platform as given (default ptrace, the platform a host
without a usable KVM gets), and speaks its socket protocol directly (no
gateway: what is measured is the backend's share).  Each job is
`python3 -B main.code` where the file holds `pass`: a job's fixed cost, the
case where gVisor's start-up weighs most.

Per round: --jobs jobs in the plain box, then --jobs under gVisor (request
tag 18), interleaved job by job (plain, gvisor, plain, ...) so that drift in
the machine's load hits both alike.  A job's latency is from sending the
EXEC_REQUEST to reading its EXEC_RESULT; each must end OK.  Reported: each
series' median and the ratio of the medians per round, then the median of
those ratios.  Goal: gvisor / plain <= 15x on ptrace.

Exit status: 0 when every job ran OK; 1 on any error.  Missing the goal is
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
GOAL = 15.0
RUNSC = "/usr/bin/runsc"


def one_job(sock_path, job_id, isolation, h):
    """Seconds from request to result, and the run stage's CPU ms."""
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(120)
        s.connect(sock_path)
        started = time.monotonic()
        s.sendall(h.exec_request(job_id, "python", "pass", isolation=isolation))
        msg = h.read_frame(s)
        took = time.monotonic() - started
    if msg is None or msg[0] != h.MSG_EXEC_RESULT:
        raise RuntimeError("job %d (%s): no result: %r" % (job_id, isolation, msg and h.error_of(msg[2])))
    run = h.run_stage_of(msg[2])
    if run["status"] != h.STATUS_OK:
        raise RuntimeError("job %d (%s): status %d" % (job_id, isolation, run["status"]))
    return took


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build-dir", default=os.path.join(SOURCE, "build"))
    ap.add_argument("--jobs", type=int, default=20, help="jobs of each series per round")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--platform", default="ptrace", choices=("ptrace", "kvm", "auto"))
    ap.add_argument("--smoke", action="store_true", help="3 jobs, 1 round: checks it runs, the figures mean nothing")
    args = ap.parse_args()
    if args.smoke:
        args.jobs, args.rounds = 3, 1
    if not os.access(RUNSC, os.X_OK):
        print("bench_gvisor: skipped: runsc is not installed (apt-get install runsc)")
        return 0
    os.environ["MOAT_BUILD_DIR"] = os.path.abspath(args.build_dir)
    sys.path.insert(0, os.path.join(SOURCE, "tests", "e2e"))
    import moat_harness as h  # noqa: E402  (reads MOAT_BUILD_DIR)

    stack = h.Stack(backend_args=["-j", "1", "--runsc", RUNSC, "--gvisor-platform", args.platform], audit=False)
    try:
        stack.start_backend()
        job = 0
        for iso in (None, 1, None, 1):  # warm: the page cache of python and runsc
            job += 1
            one_job(stack.socket, job, iso, h)
        ratios, all_plain, all_gv = [], [], []
        for r in range(args.rounds):
            plain, gv = [], []
            for i in range(args.jobs):
                for iso in ((None, 1) if i % 2 == 0 else (1, None)):
                    job += 1
                    (gv if iso else plain).append(one_job(stack.socket, job, iso, h))
            ratios.append(statistics.median(gv) / statistics.median(plain))
            all_plain += plain
            all_gv += gv
            print("round %d: plain %.1f ms, gvisor %.1f ms (medians of %d): %.2fx" %
                  (r + 1, statistics.median(plain) * 1000, statistics.median(gv) * 1000, args.jobs, ratios[-1]), flush=True)
        ratio = statistics.median(ratios)
        print("\n%d rounds of %d jobs each, platform %s: plain median %.1f ms, gvisor median %.1f ms" %
              (args.rounds, args.jobs, args.platform, statistics.median(all_plain) * 1000, statistics.median(all_gv) * 1000))
        print("gvisor / plain: %.2fx (median of the rounds' ratios; goal <= %.0fx on ptrace: %s)" %
              (ratio, GOAL, "met" if ratio <= GOAL else "MISSED"))
    except Exception as e:  # noqa: BLE001 - any failure is the benchmark's error
        print("bench_gvisor: %s" % e, file=sys.stderr)
        print(stack.log("backend"), file=sys.stderr)
        return 1
    finally:
        stack.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
