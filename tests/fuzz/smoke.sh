#!/bin/bash
# smoke.sh - builds the libFuzzer targets with clang and runs each for a
# short while from its seeds; CI's fuzzing stage (.ci/quickstart test).
#
#   tests/fuzz/smoke.sh [-t SECONDS] [-o FILE] [BUILD_DIR]
#
#   -t SECONDS  how long each fuzzer runs (default 20, or $MOAT_FUZZ_SECONDS)
#   -o FILE     also append the executions table to FILE
#   BUILD_DIR   the clang build (default build-fuzz in the checkout)
#
# Steps:
#   1. configure BUILD_DIR with CC=clang, -DMOAT_FUZZ=ON -DMOAT_SANITIZE=ON
#      and build target fuzz_all: every fuzzer (libFuzzer + ASan/UBSan) and
#      its replay driver; the build writes fuzz-targets.txt, one "<x>
#      <fuzzer>" line per target (tests/CMakeLists.txt, Section 2);
#   2. per target: fuzz_<x>_replay --write-seeds writes the seeds it makes
#      with the real code; the fuzzer runs for SECONDS (nice, one at a
#      time) over a corpus kept in BUILD_DIR/fuzz/<x> plus the seeds, with
#      -print_final_stats=1;
#   3. prints executions per target (libFuzzer's final
#      stat::number_of_executed_units) and exits non-zero if any fuzzer
#      crashed, leaked, timed out or failed a check (its log and crash
#      file are under BUILD_DIR/fuzz/).
set -euo pipefail

here=$(cd "$(dirname "$0")/../.." && pwd)
seconds=${MOAT_FUZZ_SECONDS:-20}
table=""

die() { echo "fuzz smoke: $*" >&2; exit 1; }

while getopts "t:o:" opt; do
    case $opt in
    t) seconds=$OPTARG ;;
    o) table=$OPTARG ;;
    *) die "usage: smoke.sh [-t SECONDS] [-o FILE] [BUILD_DIR]" ;;
    esac
done
shift $((OPTIND - 1))
build=${1:-$here/build-fuzz}
[[ $seconds =~ ^[1-9][0-9]*$ ]] || die "-t wants a whole number of seconds, not '$seconds'"
command -v clang >/dev/null || die "clang not found (.ci/install-deps installs it)"

build_fuzzers() {
    CC=clang cmake -S "$here" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMOAT_FUZZ=ON -DMOAT_SANITIZE=ON \
        -DMOAT_TESTS=ON >/dev/null
    nice cmake --build "$build" -j"$(nproc 2>/dev/null || echo 2)" --target fuzz_all
    [ -s "$build/fuzz-targets.txt" ] || die "$build/fuzz-targets.txt lists no targets"
}

# run_one <x> <fuzzer>: prints "<fuzzer> <executions> <exec/s>"; non-zero on a finding
run_one() {
    local x=$1 fuzzer=$2 dir="$build/fuzz/$1"
    mkdir -p "$dir/corpus" "$dir/seeds" "$dir/crashes"
    "$build/tests/fuzz_${x}_replay" --write-seeds "$dir/seeds" >/dev/null
    local rc=0
    nice -n 10 "$build/tests/$fuzzer" -max_total_time="$seconds" -print_final_stats=1 -timeout=30 -rss_limit_mb=2560 \
        -artifact_prefix="$dir/crashes/" "$dir/corpus" "$dir/seeds" >"$dir/log" 2>&1 || rc=$?
    local execs rate
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$dir/log" | tail -1)
    rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$dir/log" | tail -1)
    printf '%-22s %12s %10s\n' "$fuzzer" "${execs:-?}" "${rate:-?}"
    if [ "$rc" -ne 0 ] || [ -z "$execs" ]; then
        echo "fuzz smoke: $fuzzer failed (exit $rc); the end of $dir/log:" >&2
        tail -40 "$dir/log" >&2
        return 1
    fi
}

build_fuzzers
failed=0
out=$(mktemp)
trap 'rm -f "$out"' EXIT
{
    echo "fuzz smoke: ${seconds}s per target, $(date -u +%Y-%m-%dT%H:%MZ), nproc $(nproc), load $(cut -d' ' -f1-3 /proc/loadavg)"
    printf '%-22s %12s %10s\n' "fuzzer" "executions" "exec/s"
} | tee "$out"
while read -r x fuzzer; do
    [ -n "$x" ] || continue
    run_one "$x" "$fuzzer" | tee -a "$out" || failed=1
done <"$build/fuzz-targets.txt"
[ -z "$table" ] || cat "$out" >>"$table"
[ "$failed" -eq 0 ] || die "a fuzzer found a problem (see above)"
echo "fuzz smoke: no findings"
