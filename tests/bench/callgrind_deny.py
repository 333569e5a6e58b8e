#!/usr/bin/env python3
"""callgrind_deny - instructions per request of the gateway's deny paths against raw h2o.

    python3 tests/bench/callgrind_deny.py [--build-dir build] [--cases raw,rawkey,401,429]
        [--protocols h2,h1] [--requests 4000] [--keep DIR]

Run as root, under the bench lock (flock /tmp/moat-bench.lock ...).  Needs valgrind and
h2load.  Req/s on a shared 2-CPU machine moves by 2x between rounds; the instructions a
server executes per request do not, so this is the figure to compare changes by (see
tests/bench/RESULTS.md, bench_gateway).

Each case runs in its own server process under
`valgrind --tool=callgrind --toggle-collect=worker_main` (the gateway's worker threads
and raw_h2o's both start in worker_main, so start-up and the main thread are not
counted): 200 warm-up requests, then --requests more, with h2load (4 connections, one
thread; HTTP/2 with 8 streams each, HTTP/1.1 with --h1) POSTing bench_gateway's execute
body, as bench_gateway's cases do:

  raw     raw_h2o, no Authorization header               (the baseline of 401)
  rawkey  raw_h2o, tenant "limited"'s Authorization      (the baseline of 429)
  401     the gateway, no Authorization header
  429     the gateway, tenant "limited" (rate 0.001/s, burst 1; its one request is
          spent before the warm-up)

Per request = (instructions collected - SSL_accept's, inclusive) / (requests + 200):
the handshakes are not part of a request.  valgrind 3.19 does not implement
seccomp(2), and the gateway fails closed without its filter, so the gateway runs with
an LD_PRELOAD shim (built here, in the temporary directory) whose seccomp_attr_set,
seccomp_rule_add(_array) and seccomp_load do nothing: the figures are of a gateway
without its system call filter, which costs nothing per request anyway (the kernel
runs it).
"""
import argparse
import glob
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.abspath(os.path.join(HERE, "..", ".."))
WARMUP = 200
EXEC_BODY = {"language": "python", "version": "*", "files": [{"name": "main.py", "content": "print(1)"}]}
LIMITED = ("limited", "rate: {per_second: 0.001, burst: 1}\n", "")

SHIM = r"""
/* valgrind does not implement seccomp(2): no filter under callgrind */
int seccomp_load(void *ctx) { (void)ctx; return 0; }
int seccomp_attr_set(void *ctx, int a, unsigned v) { (void)ctx; (void)a; (void)v; return 0; }
int seccomp_rule_add(void *ctx, unsigned a, int s, unsigned n, ...) { (void)ctx; (void)a; (void)s; (void)n; return 0; }
int seccomp_rule_add_array(void *ctx, unsigned a, int s, unsigned n, const void *v)
{ (void)ctx; (void)a; (void)s; (void)n; (void)v; return 0; }
"""


class BenchError(Exception):
    pass


def h2load(tmp, port, token, n, proto):
    body = os.path.join(tmp, "body.json")
    with open(body, "w") as f:
        json.dump(EXEC_BODY, f)
    cmd = ["h2load", "-n", str(n), "-c", str(min(4, n)), "-t", "1", "-d", body, "-H", "content-type: application/json"]
    cmd += ["--h1"] if proto == "h1" else ["-m", "8"]
    if token:
        cmd += ["-H", "authorization: Bearer " + token]
    cmd.append("https://127.0.0.1:%d/api/v2/execute" % port)
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600).stdout
    m = re.search(r"status codes: (\d+) 2xx, (\d+) 3xx, (\d+) 4xx, (\d+) 5xx", out)
    if not m:
        raise BenchError("h2load: no status line:\n" + out[-2000:])
    return [int(x) for x in m.groups()]


def wait_port(port, proc, timeout=300):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise BenchError("the server under valgrind exited (%d)" % proc.returncode)
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.2)
    raise BenchError("the server under valgrind did not listen on %d" % port)


def per_request(out_file, requests):
    ann = subprocess.run(["callgrind_annotate", "--inclusive=yes", out_file], capture_output=True, text=True).stdout
    m = re.search(r"^\s*([\d,]+)\s.*PROGRAM TOTALS", ann, re.M)
    if not m:
        raise BenchError("callgrind_annotate: no totals in %s" % out_file)
    total = int(m.group(1).replace(",", ""))
    accept = max([int(l.split()[0].replace(",", "")) for l in ann.splitlines() if re.search(r":SSL_accept \[", l)] or [0])
    return (total - accept) / (requests + WARMUP)


def measure(moat_harness, build, tmp, case, proto, requests):
    """Instructions per request of one case over one protocol."""
    out = os.path.join(tmp, "callgrind.%s.%s.out" % (case, proto))
    open(out, "w").close()
    os.chmod(out, 0o666)  # the gateway writes it after its privilege drop
    valgrind = ["valgrind", "--tool=callgrind", "--toggle-collect=worker_main", "--vgdb=no",
                "--callgrind-out-file=" + out]
    stack = moat_harness.Stack(tenants=[LIMITED], audit=False,
                               extra_config="max_connections_per_address: 100000\nmax_connections: 100000\n")
    try:
        if case in ("raw", "rawkey"):
            port = moat_harness.free_port()
            server = subprocess.Popen(valgrind + [os.path.join(build, "tests", "bench", "raw_h2o"),
                                                  "-c", os.path.join(stack.certs, "server.pem"),
                                                  "-k", os.path.join(stack.certs, "server.key"),
                                                  "-p", str(port), "-t", "2"],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            token = stack.tokens["limited"] if case == "rawkey" else None
            want = 0  # index of the status class every response must have: 2xx
        else:
            wrapper = os.path.join(tmp, "gateway-under-valgrind.sh")
            with open(wrapper, "w") as f:
                f.write("#!/bin/sh\nLD_PRELOAD=%s exec %s %s \"$@\"\n"
                        % (os.path.join(tmp, "noseccomp.so"), " ".join(valgrind), moat_harness.GATEWAY))
            os.chmod(wrapper, 0o755)
            stack.gateway_args = [wrapper]
            gateway = moat_harness.GATEWAY
            moat_harness.GATEWAY = "/usr/bin/env"  # Popen([GATEWAY, *gateway_args, ...]): env runs the wrapper
            try:
                stack.start()
            finally:
                moat_harness.GATEWAY = gateway
            server, port = stack.gateway, stack.port
            token = stack.tokens["limited"] if case == "429" else None
            if case == "429":
                h2load(tmp, port, token, 1, "h1")  # the tenant's one admitted request
            want = 2  # 4xx
        wait_port(port, server)
        for n in (WARMUP, requests):
            codes = h2load(tmp, port, token, n, proto)
            if codes[want] != n:
                raise BenchError("%s/%s: status classes %r, want %d of class %d" % (case, proto, codes, n, want))
        server.terminate()
        server.wait(timeout=300)  # callgrind writes its file as the process exits
    finally:
        stack.stop()
    return per_request(out, requests)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build-dir", default=os.environ.get("MOAT_BUILD_DIR", os.path.join(SOURCE, "build")))
    ap.add_argument("--cases", default="raw,rawkey,401,429")
    ap.add_argument("--protocols", default="h2,h1")
    ap.add_argument("--requests", type=int, default=4000)
    ap.add_argument("--keep", help="keep the callgrind files in this directory")
    args = ap.parse_args()

    build = os.path.abspath(args.build_dir)
    os.environ["MOAT_BUILD_DIR"] = build
    sys.path.insert(0, os.path.join(SOURCE, "tests", "e2e"))
    import moat_harness  # noqa: E402  (reads MOAT_BUILD_DIR at import)

    for tool in ("valgrind", "callgrind_annotate", "h2load", "cc"):
        if shutil.which(tool) is None:
            raise BenchError("%s not found" % tool)
    if os.geteuid() != 0:
        raise BenchError("run as root (the backend runs boxes)")
    tmp = tempfile.mkdtemp(prefix="moat-callgrind-")
    os.chmod(tmp, 0o755)
    results = {}
    try:
        with open(os.path.join(tmp, "noseccomp.c"), "w") as f:
            f.write(SHIM)
        subprocess.run(["cc", "-shared", "-fPIC", "-O2", "-o", os.path.join(tmp, "noseccomp.so"),
                        os.path.join(tmp, "noseccomp.c")], check=True)
        for proto in args.protocols.split(","):
            for case in args.cases.split(","):
                results[(case, proto)] = measure(moat_harness, build, tmp, case, proto, args.requests)
                print("  %-6s %s  %8.0f instructions per request" % (case, proto, results[(case, proto)]), flush=True)
    finally:
        if args.keep:
            os.makedirs(args.keep, exist_ok=True)
            for f in glob.glob(os.path.join(tmp, "callgrind.*.out")):
                shutil.copy(f, args.keep)
        shutil.rmtree(tmp, ignore_errors=True)

    baseline_of = {"401": "raw", "429": "rawkey"}
    print("\n| case | proto | instructions per request | baseline | baseline / case |")
    print("|---|---|---|---|---|")
    for proto in args.protocols.split(","):
        for case in args.cases.split(","):
            base = baseline_of.get(case)
            if base and (base, proto) in results:
                b = results[(base, proto)]
                print("| %s | %s | %.0f | %s %.0f | %.2fx |" % (case, proto, results[(case, proto)], base, b,
                                                               b / results[(case, proto)]))
            else:
                print("| %s | %s | %.0f | - | - |" % (case, proto, results[(case, proto)]))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BenchError as e:
        print("callgrind_deny: %s" % e, file=sys.stderr)
        sys.exit(1)
