#!/usr/bin/env bash
# The launcher: lists the designs that were built, runs a command on each
# (LD_PRELOAD really set, and malloc really replaced), prints statistics with
# --stats, and refuses an unknown design.
set -u
launcher="$1"
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
echo "launcher: ok"
