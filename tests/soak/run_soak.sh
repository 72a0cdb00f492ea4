#!/bin/sh
# make soak: runs tests/soak/soak.c under LD_PRELOAD of each design for the
# given minutes, with the trend check; writes <build>/soak/<design>.csv and,
# with matplotlib in the project's virtualenv, <build>/soak/<design>.png.
#   run_soak.sh <build dir> <minutes a design> <venv>
set -eu
build=$1 minutes=$2 venv=$3
src=$(cd "$(dirname "$0")/../.." && pwd)
out=$build/soak
mkdir -p "$out"
seconds=$(awk "BEGIN { print $minutes * 60 }")
status=0
while read -r name lib; do
    echo "== soak $name: $seconds s"
    if ! env LD_PRELOAD="$lib" TSALLOC_EXPECT_DESIGN="$name" "$build/bin/soak" "$seconds" \
        "$out/$name.csv"; then
        echo "soak $name FAILED"
        status=1
    fi
    if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c 'import matplotlib' 2>/dev/null; then
        "$venv/bin/python" "$src/tests/soak/soak_plot.py" "$out/$name.csv" "$out/$name.png" \
            && echo "   plot: $out/$name.png"
    fi
    echo "   samples: $out/$name.csv"
done <"$build/soak-designs.txt"
exit $status
