#!/usr/bin/env bash
# The launcher: lists the designs that were built, runs a command on each
# (LD_PRELOAD really set, and malloc really replaced), prints statistics with
# --stats, refuses an unknown design, and `run --help-options` lists every
# option of the table (src/base/option_list.h, given as the second argument)
# with its default and range, and each design's own ones with --design.
set -u
launcher="$1"
option_list="$2"
fail() { echo "FAIL: $*"; exit 1; }
designs=$("$launcher" list) || fail "list"
[ -n "$designs" ] || fail "no designs listed"
for d in $designs; do
    lib=$("$launcher" path "$d") || fail "path $d"
    got=$("$launcher" run --design "$d" -- sh -c 'echo "$LD_PRELOAD"')
    [ "$got" = "$lib" ] || fail "run --design $d set LD_PRELOAD=$got"
    # The statistics come from the allocator itself: proof it was in use.
    err=$("$launcher" run --design "$d" --stats -- ls / 2>&1 >/dev/null)
    echo "$err" | grep -qiE "tsalloc|bytes" || fail "--stats printed nothing for $d: $err"
    echo "ok $d"
done
if "$launcher" run --design no-such-design -- true 2>/dev/null; then fail "unknown design accepted"; fi

# Every variable of the table, read from its source rather than from the
# printer, with a default and a range on its line.
names=$(sed -n 's/^TS_OPTION([A-Z0-9_]*, "\([A-Z0-9_]*\)".*/TSALLOC_\1/p' "$option_list" |
        sort -u)
count=$(echo "$names" | wc -l)
[ "$count" -ge 15 ] || fail "read only $count options from $option_list"
help=$("$launcher" run --help-options) || fail "run --help-options"
for n in $names; do
    echo "$help" | grep -qE "^  $n +default [^ ]+ +range " || fail "--help-options lacks $n"
done
[ "$("$launcher" options)" = "$help" ] || fail "tsalloc options differs from run --help-options"
pow2=$("$launcher" run --design pow2 --help-options) || fail "--design pow2 --help-options"
echo "$pow2" | grep -q TSALLOC_POW2_LAZY || fail "pow2's options lack TSALLOC_POW2_LAZY"
echo "$pow2" | grep -q TSALLOC_PURGE_DELAY_MS && fail "pow2's options list the core's"
echo "ok --help-options: $count variables"
echo "launcher: ok"
