#!/bin/sh
# gdb_commands.sh GDB PROGRAM SCRIPT: the gdb commands of tools/gdb/tsalloc.py
# over gdb_target, stopped in gdb_stop_here(), and over a core file of it
# written there with gcore: both must describe the same blocks and heaps.
gdb=$1 prog=$2 script=$3
command -v "$gdb" >/dev/null 2>&1 || { echo "SKIP: gdb not installed"; exit 77; }
dir=$(mktemp -d) || exit 1
trap 'rm -rf "$dir"' EXIT
cat >"$dir/look.gdb" <<EOS
source $script
echo == block live\n
ts-block gdb_live
echo == block interior\n
ts-block (char *)gdb_live + 40
echo == block freed\n
ts-block gdb_freed
echo == block large\n
ts-block (char *)gdb_large + 4096
echo == block foreign\n
ts-block &gdb_live
echo == heaps\n
ts-heaps
echo == segments\n
ts-segments
echo == stats\n
ts-stats
EOS
"$gdb" -batch -nx -ex "set debuginfod enabled off" -ex "break gdb_stop_here" -ex run \
    -ex finish -x "$dir/look.gdb" -ex "gcore $dir/core" -ex kill "$prog" >"$dir/live" 2>&1
"$gdb" -batch -nx -ex "set debuginfod enabled off" -x "$dir/look.gdb" "$prog" "$dir/core" \
    >"$dir/dead" 2>&1
fail=0
for run in live dead; do
    out="$dir/$run"
    check() {
        grep -q -- "$1" "$out" || { echo "FAIL ($run): expected: $1"; fail=1; }
    }
    check ": live, class 6, block 0x[0-9a-f]* + 0, usable 112 bytes, heap 1 "
    check ": live, class 6, block 0x[0-9a-f]* + 40, usable 112 bytes, heap 1 "
    check ": free, class 6, block 0x[0-9a-f]* + 0, usable 112 bytes, heap 1 "
    check ": live, large block, block 0x[0-9a-f]* + 4096, usable 3145728 bytes"
    check ": not tsalloc's memory"
    check "^heap 1 at 0x[0-9a-f]* (.*active): [0-9]* pages, [0-9]* bytes in live blocks"
    check "^  class  6 (   112 B):   1 pages,      1 blocks live,       112 bytes"
    check "^heap 2 at 0x[0-9a-f]* (.*active): [0-9]* pages, [0-9]* bytes in live blocks"
    check "^  class 28 (  5120 B):   1 pages,      1 blocks live,      5120 bytes"
    check "^2 heaps"
    check "^segment 0x[0-9a-f]*: small pages (64 KiB), [0-9]* of 63 in use, owner heap 1"
    check "^large_count  *1$"
    check "^heaps_live  *2$"
    if grep -q "Traceback\|Python Exception\|Error occurred" "$out"; then
        echo "FAIL ($run): a command failed"
        fail=1
    fi
    [ $fail = 0 ] || { echo "--- $run:"; cat "$out"; }
done
exit $fail
