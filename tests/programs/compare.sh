#!/usr/bin/env bash
# tsalloc compare, end to end on the build tree's launcher:
#   command  a deterministic command under glibc and two designs: every
#            report file is written, the table names every allocator, and
#            the exit status is 0; a command whose output depends on the
#            allocator loaded is reported WRONG for that allocator (exit 1)
#   trace    a trace recorded with `tsalloc record` replayed on every
#            allocator by `tsalloc compare --trace` and `tsbench --trace`
# Usage: compare.sh PART BUILD_DIR
set -u
part="$1"; build="$2"
tsalloc="$build/bin/tsalloc"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failed=0
fail() { echo "FAIL: $*"; failed=1; }

# report_ok DIR OUT NAMES...: the report files exist, and the table of OUT
# has a row for each allocator named.
report_ok() {
    local dir="$1" out="$2"; shift 2
    for f in report.html runs.csv summary.csv results.json results.md; do
        [ -s "$dir/$f" ] || fail "$dir/$f is missing"
    done
    for a in "$@"; do
        echo "$out" | grep -qE "^  $a +[0-9]" || fail "no timed row for $a"
        grep -q "\"$a\"" "$dir/results.json" || fail "$a not in results.json"
    done
}

case "$part" in
command)
    seq 1 20000 | awk '{print ($1 * 7919) % 10007}' >"$work/numbers"
    out=$("$tsalloc" compare --designs tsalloc,bins --runs 2 --out "$work/same" \
          --stdin "$work/numbers" -- sort -n 2>&1)
    rc=$?
    echo "$out"
    [ $rc -eq 0 ] || fail "compare of sort -n exited $rc"
    report_ok "$work/same" "$out" glibc tsalloc bins
    echo "$out" | grep -q "WRONG" && fail "sort -n reported WRONG"
    echo "$out" | grep -q "note: sort exited with status 0 under every allocator" \
        || fail "no note of the exit status"
    # Under bins (its library in LD_PRELOAD) this prints something else.
    out=$("$tsalloc" compare --designs tsalloc,bins --runs 2 --out "$work/differs" -- \
          sh -c 'case "$LD_PRELOAD" in *bins*) echo other;; *) echo same;; esac' 2>&1)
    rc=$?
    echo "$out"
    [ $rc -eq 1 ] || fail "a differing output gave exit $rc, not 1"
    echo "$out" | grep -qE "^  bins +WRONG: output=" || fail "bins not reported WRONG"
    echo "$out" | grep -qE "^  tsalloc +[0-9]" || fail "tsalloc not timed"
    grep -q '"status": "wrong"' "$work/differs/results.json" || fail "no wrong cell in results.json"
    # The exit status is part of what must match.
    out=$("$tsalloc" compare --designs bins --runs 1 --out "$work/exit" -- \
          sh -c 'case "$LD_PRELOAD" in *bins*) exit 3;; esac' 2>&1)
    echo "$out" | grep -qE "^  bins +WRONG: output=exit3/" || fail "exit status not compared"
    # Usage errors.
    "$tsalloc" compare --designs no-such -- true >/dev/null 2>&1
    [ $? -eq 2 ] || fail "an unknown design is not a usage error"
    "$tsalloc" compare >/dev/null 2>&1
    [ $? -eq 2 ] || fail "compare without a command is not a usage error"
    "$tsalloc" compare -- no-such-command-here >/dev/null 2>&1
    [ $? -eq 2 ] || fail "a command that does not exist is not a usage error"
    ;;
trace)
    "$tsalloc" record -o "$work/sort.trace" -- sort /etc/services >/dev/null \
        || fail "record failed"
    ops=$(grep -cE '^[mcrf] ' "$work/sort.trace")
    [ "$ops" -ge 20 ] || fail "only $ops operations recorded"
    out=$("$tsalloc" compare --designs tsalloc,bins --runs 2 --repeats 3 --out "$work/t" \
          --trace "$work/sort.trace" 2>&1)
    rc=$?
    echo "$out"
    [ $rc -eq 0 ] || fail "compare --trace exited $rc"
    report_ok "$work/t" "$out" glibc tsalloc bins
    echo "$out" | grep -q "^== sort.trace: trace sort.trace replayed by memsim, 3 repeat" \
        || fail "no block for the trace"
    # memsim replayed every operation of the trace (its check is the same for all).
    grep -q "ops=$ops " "$work/t/runs.csv" || fail "memsim did not replay $ops operations"
    out=$("$build/bin/tsbench" --allocators glibc,tsalloc --runs 1 --no-plots \
          --out "$work/b" --trace "s=$work/sort.trace" --trace "missing=$work/none" 2>&1)
    rc=$?
    echo "$out"
    [ $rc -eq 0 ] || fail "tsbench --trace exited $rc"
    echo "$out" | grep -qE "^  tsalloc +[0-9]" || fail "tsbench --trace: tsalloc not timed"
    echo "$out" | grep -q "missing skipped: no such trace" || fail "a missing trace not skipped"
    ;;
*) echo "compare.sh: unknown part $part"; exit 2 ;;
esac
[ $failed -eq 0 ] && echo "compare $part: ok"
exit $failed
