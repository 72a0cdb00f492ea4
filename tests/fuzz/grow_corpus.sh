#!/bin/sh
# make fuzz-corpus: adds to tests/fuzz/corpus the inputs that earlier
# make fuzz runs left in <build dir>/fuzz/<design>/corpus and that reach an
# edge the corpus does not (libFuzzer's merge with -use_counters=0: hit
# counts do not count), design by design, so that each design's merge
# starts from what the last one added. make test replays every input of
# the corpus on every design: new edges only keeps it small.
#   grow_corpus.sh <build dir> <designs|all> <jobs>
set -eu
build=$1 designs=$2 jobs=$3
src=$(cd "$(dirname "$0")/../.." && pwd)
corpus=$src/tests/fuzz/corpus
if [ "$designs" = all ]; then
    designs=$(cat "$build/fuzz-designs.txt")
fi
for d in $designs; do
    [ "$d" = core ] && d=tsalloc
    work=$build/fuzz/$d
    if [ ! -d "$work/corpus" ]; then
        echo "fuzz_$d: no inputs in $work/corpus (make fuzz FUZZ_DESIGN=$d first)"
        continue
    fi
    cmake --build "$build" -j "$jobs" --target "fuzz_$d"
    before=$(ls "$corpus" | wc -l)
    "$build/bin/fuzz_$d" -merge=1 -use_counters=0 -max_len=4096 -rss_limit_mb=4096 \
        "$corpus" "$work/corpus" >"$work/merge.log" 2>&1
    echo "fuzz_$d: $(($(ls "$corpus" | wc -l) - before)) inputs added to tests/fuzz/corpus"
done
