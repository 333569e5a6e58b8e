#!/usr/bin/env python3
"""bench_testcases - test cases compiled once against separate executes (issue 12, item 3).

    python3 tests/bench/bench_testcases.py [--build-dir build] [--cases 20] [--rounds 5] [--smoke]

Run as root (the backend runs boxes; the gateway drops to the `moat` user).
It starts one moat-backend (-j 4) and one moat-gateway on 127.0.0.1, set up
as the e2e tests do (tests/e2e/moat_harness.py, audit on), and judges one C
program (read two numbers, print their sum) against N cases two ways:

  tests      one POST /api/v2/execute with `tests`: N cases, one compile
             stage, then one fresh box per case holding the compiled binary;
  separate   N POST /api/v2/execute of the same source, one case's stdin
             each, one after another: N compile stages and N run stages
             (what a client without `tests` does);
  parallel   the same N executes sent 4 at a time (the backend's -j): the
             separate case with the box slots all busy;
  batch      Judge0's API: one POST /submissions/batch of N entries of the
             same source (one job: one compile, a case per entry), then
             GET /submissions/batch until every entry is Accepted;
  submissions  N POST /submissions?wait=true of that source, one after
             another (N compiles: a Judge0 client's way without batches).

Each round runs tests, separate and parallel (odd rounds in that order, even
rounds reversed) and takes the ratio within the round; the median over
rounds is reported.  Every answer is checked: every case Accepted.
Goal: separate / tests >= 5x, and submissions / batch >= 5x.

Exit status: 0 when every request ran and every case was Accepted; 1 on
any error.  Missing the goal is reported, not an error.
"""

import argparse
import concurrent.futures
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.abspath(os.path.join(HERE, "..", ".."))
GOAL = 5.0

C_SUM = r"""
#include <stdio.h>
int main(void)
{
    long a, b;
    if (scanf("%ld %ld", &a, &b) != 2)
        return 1;
    printf("%ld\n", a + b);
    return 0;
}
"""


def body_tests(n):
    return {"language": "c", "version": "*", "files": [{"name": "main.c", "content": C_SUM}],
            "tests": [{"name": "c%d" % i, "stdin": "%d %d\n" % (i, i * 7), "expected_output": "%d\n" % (i * 8)}
                      for i in range(n)]}


def body_one(i):
    return {"language": "c", "version": "*", "files": [{"name": "main.c", "content": C_SUM}],
            "stdin": "%d %d\n" % (i, i * 7)}


def entry(i):
    return {"source_code": C_SUM, "language_id": 50, "stdin": "%d %d\n" % (i, i * 7), "expected_output": "%d\n" % (i * 8)}


def run_batch(stack, n):
    started = time.monotonic()
    status, _, data = stack.request("POST", "/submissions/batch", {"submissions": [entry(i) for i in range(n)]}, timeout=300)
    if status != 201:
        raise RuntimeError("batch: status %s, %s" % (status, data))
    tokens = ",".join(d["token"] for d in data)
    while True:
        status, _, data = stack.request("GET", "/submissions/batch?fields=status&tokens=" + tokens, timeout=300)
        ids = [d["status"]["id"] for d in data["submissions"]]
        if all(i >= 3 for i in ids):
            break
        time.sleep(0.005)
    took = time.monotonic() - started
    if ids != [3] * n:
        raise RuntimeError("batch: statuses %s" % ids)
    return took


def run_submissions(stack, n):
    started = time.monotonic()
    for i in range(n):
        status, _, data = stack.request("POST", "/submissions?wait=true&fields=status", entry(i), timeout=300)
        if status != 201 or data["status"]["id"] != 3:
            raise RuntimeError("submission %d: status %s, %s" % (i, status, data))
    return time.monotonic() - started


def run_tests(stack, n):
    started = time.monotonic()
    status, _, data = stack.request("POST", "/api/v2/execute", body_tests(n), timeout=300)
    took = time.monotonic() - started
    if status != 200 or data["summary"]["passed"] != n:
        raise RuntimeError("tests: status %s, %s" % (status, data.get("summary") if isinstance(data, dict) else data))
    return took


def one(stack, i):
    status, _, data = stack.request("POST", "/api/v2/execute", body_one(i), timeout=300)
    if status != 200 or data["run"]["stdout"] != "%d\n" % (i * 8):
        raise RuntimeError("separate %d: status %s, %s" % (i, status, data))


def run_separate(stack, n):
    started = time.monotonic()
    for i in range(n):
        one(stack, i)
    return time.monotonic() - started


def run_parallel(stack, n, width=4):
    started = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(max_workers=width) as pool:
        for f in [pool.submit(one, stack, i) for i in range(n)]:
            f.result()
    return time.monotonic() - started


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build-dir", default=os.path.join(SOURCE, "build"))
    ap.add_argument("--cases", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--smoke", action="store_true", help="5 cases, 1 round: checks it runs, the figures mean nothing")
    args = ap.parse_args()
    if args.smoke:
        args.cases, args.rounds = 5, 1
    os.environ["MOAT_BUILD_DIR"] = os.path.abspath(args.build_dir)
    sys.path.insert(0, os.path.join(SOURCE, "tests", "e2e"))
    from moat_harness import Stack  # noqa: E402  (reads MOAT_BUILD_DIR)

    stack = Stack(tenants=[("demo", Stack.DEFAULT_TENANT_EXTRA + "endpoints: [execute, runtimes, submissions]\n", "")]).start()
    try:
        run_tests(stack, 2)  # warm: the runtime table, the page cache of gcc
        one(stack, 0)
        run_batch(stack, 2)
        ratios, par_ratios, t_tests, t_sep, t_par, j_ratios, t_batch, t_subs = [], [], [], [], [], [], [], []
        for r in range(args.rounds):
            order = [run_tests, run_separate, run_parallel, run_batch, run_submissions]
            if r % 2:
                order.reverse()
            took = {f.__name__: f(stack, args.cases) for f in order}
            t_tests.append(took["run_tests"])
            t_sep.append(took["run_separate"])
            t_par.append(took["run_parallel"])
            ratios.append(took["run_separate"] / took["run_tests"])
            par_ratios.append(took["run_parallel"] / took["run_tests"])
            t_batch.append(took["run_batch"])
            t_subs.append(took["run_submissions"])
            j_ratios.append(took["run_submissions"] / took["run_batch"])
            print("round %d: tests %.3f s, separate %.3f s (%.2fx), parallel x4 %.3f s (%.2fx); "
                  "Judge0 batch %.3f s, submissions %.3f s (%.2fx)" %
                  (r + 1, took["run_tests"], took["run_separate"], ratios[-1], took["run_parallel"], par_ratios[-1],
                   took["run_batch"], took["run_submissions"], j_ratios[-1]), flush=True)
        ratio = statistics.median(ratios)
        print("\n%d cases, %d rounds (medians): tests %.3f s (%.1f ms a case), separate %.3f s, parallel x4 %.3f s" %
              (args.cases, args.rounds, statistics.median(t_tests), statistics.median(t_tests) * 1000 / args.cases,
               statistics.median(t_sep), statistics.median(t_par)))
        print("separate / tests: %.2fx (goal >= %.0fx: %s); parallel x4 / tests: %.2fx" %
              (ratio, GOAL, "met" if ratio >= GOAL else "MISSED", statistics.median(par_ratios)))
        j_ratio = statistics.median(j_ratios)
        print("Judge0: batch %.3f s, submissions %.3f s: submissions / batch: %.2fx (goal >= %.0fx: %s)" %
              (statistics.median(t_batch), statistics.median(t_subs), j_ratio, GOAL, "met" if j_ratio >= GOAL else "MISSED"))
    except Exception as e:  # noqa: BLE001 - any failure is the benchmark's error
        print("bench_testcases: %s" % e, file=sys.stderr)
        return 1
    finally:
        stack.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
