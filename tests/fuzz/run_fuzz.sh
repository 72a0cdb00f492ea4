#!/bin/sh
# make fuzz: builds the libFuzzer target of each design with clang and runs
# it for a while, then prints the edges reached in each file of src/.
#   run_fuzz.sh <build dir> <designs|all> <seconds a design> <jobs>
# A crash leaves its input in <build dir>/fuzz/<design>/crash-*: add it to
# tests/fuzz/corpus/ once fixed, so make test replays it ever after.
set -eu
build=$1 designs=$2 seconds=$3 jobs=$4
src=$(cd "$(dirname "$0")/../.." && pwd)
if [ "$designs" = all ]; then
    designs=$(cat "$build/fuzz-designs.txt")
fi
status=0
for d in $designs; do
    [ "$d" = core ] && d=tsalloc
    cmake --build "$build" -j "$jobs" --target "fuzz_$d"
    work=$build/fuzz/$d
    mkdir -p "$work/corpus"
    log=$work/log.txt
    echo "== fuzz_$d: $seconds s (log: $log)"
    # -print_coverage=1 lists every instrumented function with its edges.
    if ! "$build/bin/fuzz_$d" -max_total_time="$seconds" -max_len=4096 -len_control=0 -rss_limit_mb=4096 \
        -print_final_stats=1 -print_coverage=1 -artifact_prefix="$work/" \
        "$work/corpus" "$src/tests/fuzz/corpus" >"$log" 2>&1; then
        status=1
        echo "fuzz_$d FAILED: see $log and $work/crash-*"
        grep -m5 -E 'ERROR|CHECK|fuzz\[|differ' "$log" || true
    fi
    python3 "$src/tests/fuzz/coverage.py" "$log" "$src/src/"
done
exit $status
