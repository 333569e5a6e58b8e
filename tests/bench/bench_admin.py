#!/usr/bin/env python3
"""bench_admin - what a moatctl change costs (issue 13, items 1-3).

    python3 tests/bench/bench_admin.py [--build-dir build-rel] [--rounds 20] [--smoke]

Run as root.  It starts one moat-backend and one moat-gateway with the audit
trail and a control section (as tests/e2e/test_admin.py does) and times,
interleaved round by round:

  status   `moatctl status`: a moatctl process, the control socket, the peer
           check and one question to the gateway over the supervisor's
           socketpair (the baseline: everything a change does but the change)
  create   `moatctl key create`: the same plus the store read and locked,
           the configuration parsed twice (running, candidate), the admin
           record made durable by the audit writer (fsync), the store
           written (fsync, rename, fsync of the directory) and the gateway's
           reload acknowledged
  revoke   `moatctl key revoke` of the key just made, then one request with
           it, which must be a 401 (checked every round)

and, once, 20 `key create` started at the same time (the supervisor serves
them one by one): their wall time.  Medians and the ratio create / status
are printed.  Exit status: 0 when every command succeeded and every revoked
key was refused; 1 otherwise.
"""

import argparse
import concurrent.futures
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.abspath(os.path.join(HERE, "..", ".."))


def timed(fn):
    t0 = time.monotonic()
    out = fn()
    return (time.monotonic() - t0) * 1000.0, out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build-dir", default=os.path.join(SOURCE, "build-rel"))
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--smoke", action="store_true", help="3 rounds: checks it runs, the figures mean nothing")
    args = ap.parse_args()
    if args.smoke:
        args.rounds = 3
    os.environ["MOAT_BUILD_DIR"] = os.path.abspath(args.build_dir)
    sys.path.insert(0, os.path.join(SOURCE, "tests", "e2e"))
    from test_admin import admin_stack, moatctl  # noqa: E402  (reads MOAT_BUILD_DIR)

    stack = admin_stack().start()
    failures = 0
    series = {"status": [], "create": [], "revoke": []}
    try:
        if moatctl(stack, "tenant", "add", "bench", "rate.per_second=1000", "rate.burst=1000").returncode != 0:
            raise SystemExit("bench_admin: tenant add failed")
        for r in range(args.rounds):
            steps = ["status", "create"] if r % 2 == 0 else ["create", "status"]
            for step in steps:
                if step == "status":
                    ms, p = timed(lambda: moatctl(stack, "status"))
                    series["status"].append(ms)
                else:
                    ms, p = timed(lambda: moatctl(stack, "--json", "key", "create", "--tenant", "bench"))
                    series["create"].append(ms)
                    made = json.loads(p.stdout) if p.returncode == 0 else None
                failures += p.returncode != 0
            if made is None:
                continue
            ms, p = timed(lambda: moatctl(stack, "key", "revoke", made["key_id"]))
            series["revoke"].append(ms)
            status = stack.request("GET", "/api/v2/runtimes", token=made["token"])[0]
            if p.returncode != 0 or status != 401:
                print("bench_admin: revoked key answered %d (moatctl exit %d)" % (status, p.returncode))
                failures += 1
        with concurrent.futures.ThreadPoolExecutor(max_workers=20) as pool:
            wall, runs = timed(lambda: list(pool.map(
                lambda i: moatctl(stack, "key", "create", "--tenant", "bench"), range(20))))
        failures += sum(p.returncode != 0 for p in runs)
    finally:
        stack.stop()

    med = {k: statistics.median(v) for k, v in series.items() if v}
    print("bench_admin: %d rounds (median ms)" % args.rounds)
    for k in ("status", "create", "revoke"):
        if k in med:
            print("  %-7s %8.1f ms" % (k, med[k]))
    if "status" in med and "create" in med:
        print("  create / status: %.2fx" % (med["create"] / med["status"]))
    print("  20 key creates at once: %.0f ms wall (%.1f ms each)" % (wall, wall / 20))
    print("  failures: %d" % failures)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
