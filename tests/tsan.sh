#!/bin/bash
# tsan.sh - the gateway's threaded code under ThreadSanitizer; CI's TSan
# stage (.ci/quickstart test).
#
#   tests/tsan.sh [BUILD_DIR]        (default build-tsan in the checkout)
#
# Steps:
#   1. configure BUILD_DIR with -DMOAT_TSAN=ON (every object built with
#      -fsanitize=thread) and build the threaded unit tests and the programs
#      the e2e tests start;
#   2. run the unit tests whose code runs on more than one thread: the
#      limiter's shared buckets, the Redis limiter and its h2o adapter, the
#      Judge0 queue, sessions, metrics, the audit client, confinement, the
#      shared primitives;
#   3. run e2e tests against the TSan gateway (MOAT_BUILD_DIR=BUILD_DIR):
#      worker threads (test_gateway), the Redis heartbeat thread and shared
#      state (test_redis_shared), the audit client (test_audit_gateway),
#      scrapes reading every worker's counters (test_metrics).
# TSan stops a program at its first report (halt_on_error, exit status 66)
# and writes the report to a file in a directory every user may write (the
# gateway runs as `moat`); any report file fails the stage, whether or not
# the test noticed the program stop.  Everything runs under `setarch -R`:
# TSan's fixed shadow layout does not fit some kernels' randomised mappings.
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$here/build-tsan}
units=(test_ratelimit test_ratelimit_redis test_gateway_judge0_queue test_gateway_sessions test_gateway_metrics
    test_gateway_confine test_audit_fetch test_common)
tests='gateway_ratelimit|gateway_ratelimit_redis|gateway_judge0_queue|gateway_sessions|gateway_metrics|gateway_confine|audit_fetch|common'
programs=(moat-backend moat-gateway moatctl moat-audit moat-audit-writer moat-callback-sender)
e2e=(test_gateway test_redis_shared test_audit_gateway test_metrics)

die() { echo "tsan: $*" >&2; exit 1; }

cmake -S "$here" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMOAT_TSAN=ON -DMOAT_TESTS=ON >/dev/null
nice cmake --build "$build" -j"$(nproc 2>/dev/null || echo 2)" --target "${units[@]}" "${programs[@]}"

reports=$(mktemp -d /tmp/moat-tsan-XXXXXX)
trap 'rm -rf "$reports"' EXIT
chmod 1777 "$reports"
export TSAN_OPTIONS="halt_on_error=1 exitcode=66 second_deadlock_stack=1 log_path=$reports/report ${TSAN_OPTIONS:-}"
norandom=(setarch "$(uname -m)" -R)

# fails with the reports when any program wrote one
check_reports() {
    if compgen -G "$reports/report*" >/dev/null; then
        cat "$reports"/report* >&2
        die "ThreadSanitizer reported a problem ($1)"
    fi
}

rc=0
(cd "$build" && "${norandom[@]}" ctest --output-on-failure -R "^unit_($tests)\$" --timeout 600) || rc=$?
check_reports "unit tests"
[ "$rc" -eq 0 ] || die "the unit tests failed under TSan"
(cd "$here/tests/e2e" && MOAT_BUILD_DIR=$build PYTHONDONTWRITEBYTECODE=1 "${norandom[@]}" /usr/bin/python3 -m unittest "${e2e[@]}") ||
    rc=$?
check_reports "e2e: ${e2e[*]}"
[ "$rc" -eq 0 ] || die "the e2e tests failed under TSan"
echo "tsan: no reports"
