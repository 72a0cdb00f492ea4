#!/usr/bin/env bash
# The trace recorder, end to end through the launcher:
#   programs  ls, sort and python3 recorded: same output as unrecorded, a
#             valid trace that memsim replays under glibc and libtsalloc
#   known     programs with known allocations give exactly the expected trace,
#             recording glibc and recording a design
#   threads   4 threads with cross-thread frees: the trace replays
#   fork      the parent's trace excludes the child; with %p each writes its own
#   cxx       operator new/delete, also when a design (not malloc) serves them
#   plugin    a C program whose C++ plugin brings libstdc++ RTLD_LOCAL: its
#             operator new/delete are recorded (through the malloc family)
#   install   record and replay from a `cmake --install` prefix
# Usage: record.sh PART BUILD_DIR RECORD_KNOWN_EXE RECORD_CXX_EXE PLUGIN_HOST PLUGIN
set -u
part="$1"; build="$2"; known="$3"; cxx="$4"; plugin_host="${5:-}"; plugin="${6:-}"
tsalloc="$build/bin/tsalloc"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failed=0
fail() { echo "FAIL: $*"; failed=1; }

ops_of() { grep -E '^[mcrf] ' "$1"; }

# check_header TRACE: the format's header, then the recorder's comment.
check_header() {
    [ "$(head -1 "$1")" = "tstrace 1" ] || fail "$1: first line is '$(head -1 "$1")'"
    sed -n 2p "$1" | grep -q '^# recorded by libtsalloc-record.so, pid [0-9]' \
        || fail "$1: no recorder comment on line 2"
    grep -q '^# unknown: [0-9]* frees' "$1" || fail "$1: no end-of-recording comment"
}

# expect_pair TRACE SIZE WHAT: a block of SIZE bytes is allocated into a slot
# that a later f frees.
expect_pair() {
    awk -v size="$2" '
        $1 == "m" && $3 == size && !slot { slot = $2; seen = 1; next }
        seen && $1 == "f" && $2 == slot { freed = 1 }
        END { exit !(seen && freed) }' "$1" || fail "$3: no new/delete pair of $2 bytes"
}

# replay TRACE DESIGN [THREADS REPEATS]: memsim accepts and replays it; its op
# count is the number of operation lines.
replay() {
    local out want
    out=$("$tsalloc" replay "$1" --design "$2" --threads "${3:-2}" --repeats "${4:-2}" 2>&1)
    want=$(ops_of "$1" | wc -l)
    case "$out" in
        *" ok") ;;
        *) fail "replay of $1 on $2: $out"; return ;;
    esac
    echo "$out" | grep -q "ops=$want " || fail "replay of $1 on $2: ops != $want: $out"
    echo "  replayed on $2: $out"
}

# expect_ops TRACE EXPECTED: the operation lines are exactly EXPECTED.
expect_ops() {
    local got
    got=$(ops_of "$1")
    if [ "$got" != "$2" ]; then
        fail "$1: trace differs from the expected one"
        diff <(echo "$2") <(echo "$got") | head -20
    fi
}

# record_program NAME MIN_OPS CMD...: output and exit status unchanged by
# recording; a trace with at least MIN_OPS operations, replayed on both.
record_program() {
    local name="$1" min="$2"; shift 2
    "$@" >"$work/$name.want" 2>/dev/null </dev/null
    local want_rc=$?
    "$tsalloc" record -o "$work/$name.trace" -- "$@" >"$work/$name.got" 2>"$work/$name.err" </dev/null
    local got_rc=$?
    [ $want_rc -eq $got_rc ] || fail "$name: exit $got_rc recorded, $want_rc not"
    cmp -s "$work/$name.want" "$work/$name.got" || fail "$name: output changed by recording"
    [ -s "$work/$name.err" ] && grep -q "tsalloc record" "$work/$name.err" \
        && fail "$name: recorder complained: $(cat "$work/$name.err")"
    check_header "$work/$name.trace"
    local n
    n=$(ops_of "$work/$name.trace" | wc -l)
    [ "$n" -ge "$min" ] || fail "$name: only $n operations recorded (expected >= $min)"
    echo "$name: $n operations"
    replay "$work/$name.trace" glibc
    replay "$work/$name.trace" tsalloc
}

case "$part" in
programs)
    seq 1 200000 | awk '{print ($1 * 7919) % 100003, $1}' >"$work/numbers"
    record_program ls 50 ls -la /usr/lib
    record_program sort 50 sort --parallel=4 -S 10M -k2,2 "$work/numbers"
    record_program python 1000 python3 -c 'import json; d = [{"k": i, "v": str(i) * 3} for i in range(20000)]; s = json.dumps(d); print(len(s), len(json.loads(s)))'
    # The recorder in front of a design: same output, and the design served it.
    sort -n "$work/numbers" >"$work/sort-n.want"
    TSALLOC_STATS=1 "$tsalloc" record -o "$work/design.trace" --design tsalloc -- \
        sort -n "$work/numbers" >"$work/sort-n.got" 2>"$work/design.err"
    cmp -s "$work/sort-n.want" "$work/sort-n.got" || fail "sort under record --design changed output"
    grep -q "tsalloc statistics" "$work/design.err" || fail "record --design tsalloc: design not loaded"
    check_header "$work/design.trace"
    replay "$work/design.trace" glibc
    ;;
known)
    expected='m 0 100
m 1 200
m 2 300
r 1 5000
f 0
f 2
c 0 10 32'
    page=$(getconf PAGESIZE)
    aligned="m 0 1000
m 1 640
m 2 700
m 3 800
m 4 $page
m 5 500
r 5 1000
f 0
f 1
f 2
f 3
f 4
f 5
m 0 10
f 0"
    for design in glibc tsalloc; do
        "$tsalloc" record -o "$work/known.trace" --design "$design" -- "$known" known \
            || fail "known program failed under record --design $design"
        check_header "$work/known.trace"
        expect_ops "$work/known.trace" "$expected"
        grep -q '^# end: 7 operations, 2 blocks still live' "$work/known.trace" \
            || fail "known ($design): end comment: $(grep '^# end' "$work/known.trace")"
        grep -q '^# unknown: 0 frees and 0 reallocs' "$work/known.trace" \
            || fail "known ($design): unknown pointers counted"
        "$tsalloc" record -o "$work/aligned.trace" --design "$design" -- "$known" aligned \
            || fail "aligned program failed under record --design $design"
        expect_ops "$work/aligned.trace" "$aligned"
        echo "known, aligned ($design): exact"
    done
    # The process ends when its last thread does, not by returning from main.
    "$tsalloc" record -o "$work/last.trace" -- "$known" last || fail "last-thread program failed"
    check_header "$work/last.trace"
    grep -q '^m [0-9]* 4444$' "$work/last.trace" || fail "last thread's malloc missing"
    replay "$work/known.trace" glibc 1 1
    replay "$work/aligned.trace" tsalloc 1 1
    # Relative output names are the caller's directory, not the program's.
    (cd "$work" && "$tsalloc" record -o rel.trace -- "$known" known) && [ -s "$work/rel.trace" ] \
        || fail "relative -o"
    # Errors: no output, no command, no such design, no such trace.
    "$tsalloc" record -- true 2>/dev/null && fail "record without -o accepted"
    "$tsalloc" record -o "$work/x" 2>/dev/null && fail "record without a command accepted"
    "$tsalloc" record -o "$work/x" --design no-such -- true 2>/dev/null && fail "unknown design accepted"
    "$tsalloc" replay "$work/none" 2>/dev/null && fail "replay of a missing file accepted"
    "$tsalloc" list | grep -qx record && fail "the recorder is listed as a design"
    ;;
threads)
    # bestfit shares one free list between threads: a block freed inside one
    # thread's realloc can come straight back from another thread's malloc.
    designs="glibc tsalloc"
    "$tsalloc" list | grep -qx bestfit && designs="$designs bestfit"
    for design in $designs; do
        "$tsalloc" record -o "$work/threads.trace" --design "$design" -- "$known" threads \
            || fail "threads program failed under record --design $design"
        check_header "$work/threads.trace"
        n=$(ops_of "$work/threads.trace" | wc -l)
        [ "$n" -ge 80000 ] || fail "threads ($design): $n operations"
        grep -q '^# unknown: 0 frees and 0 reallocs' "$work/threads.trace" \
            || fail "threads ($design): unknown pointers: $(grep '^# unknown' "$work/threads.trace")"
        # Every free was seen: no address came back while still in the table.
        grep '^# unseen' "$work/threads.trace" && fail "threads ($design): unseen frees"
        echo "threads ($design): $n operations"
        replay "$work/threads.trace" glibc
        replay "$work/threads.trace" tsalloc
    done
    ;;
fork)
    "$tsalloc" record -o "$work/fork.trace" -- "$known" fork || fail "fork program failed"
    expect_ops "$work/fork.trace" 'm 0 1111
m 1 3333
f 0
f 1'
    mkdir "$work/each"
    "$tsalloc" record -o "$work/each/t.%p" -- "$known" fork || fail "fork program failed (%p)"
    set -- "$work"/each/t.*
    [ $# -eq 2 ] || fail "%p: $# traces, expected 2"
    parent=$(grep -l 'fork$' "$@" | xargs grep -l '^m 0 1111$')
    child=$(grep -l '^m 0 2222$' "$@")
    [ -n "$parent" ] && [ -n "$child" ] && [ "$parent" != "$child" ] || fail "%p: traces: $*"
    if [ -n "$child" ]; then
        expect_ops "$child" 'm 0 2222
f 0'
        grep -q '^# unknown: 1 frees' "$child" || fail "%p: the child's free of the parent's block"
        replay "$child" tsalloc 1 1
    fi
    # A shell that runs other programs: only the shell records (they would
    # otherwise overwrite its trace), and dash's _exit still flushes it.
    "$tsalloc" record -o "$work/sh.trace" -- sh -c "ls / >/dev/null; '$known' known; true" \
        || fail "sh failed"
    check_header "$work/sh.trace"
    head -2 "$work/sh.trace" | grep -q ': sh -c' || fail "sh.trace is not the shell's"
    grep -q '^m [0-9]* 5000$' "$work/sh.trace" && fail "a child's operations are in the shell's trace"
    replay "$work/sh.trace" glibc 1 1
    ;;
cxx)
    for design in glibc tsalloc; do
        "$tsalloc" record -o "$work/cxx.trace" --design "$design" -- "$cxx" \
            || fail "C++ program failed under record --design $design"
        check_header "$work/cxx.trace"
        for size in 12345 2345 23456 3456 4000; do
            expect_pair "$work/cxx.trace" "$size" "cxx ($design)"
        done
        echo "cxx ($design): every form recorded"
        replay "$work/cxx.trace" tsalloc 1 1
    done
    ;;
plugin)
    "$tsalloc" record -o "$work/plugin.trace" -- "$plugin_host" "$plugin" \
        || fail "C program with a C++ plugin failed under record"
    check_header "$work/plugin.trace"
    for size in 5432 6543; do expect_pair "$work/plugin.trace" "$size" plugin; done
    echo "plugin: new/delete recorded"
    ;;
install)
    prefix="$work/prefix"
    cmake --install "$build" --prefix "$prefix" >/dev/null || { echo "FAIL: install"; exit 1; }
    "$prefix/bin/tsalloc" record -o "$work/inst.trace" -- "$known" known || fail "installed record"
    expect_ops "$work/inst.trace" "$(printf 'm 0 100\nm 1 200\nm 2 300\nr 1 5000\nf 0\nf 2\nc 0 10 32')"
    out=$("$prefix/bin/tsalloc" replay "$work/inst.trace" --design tsalloc 2>&1)
    case "$out" in *" ok") echo "installed replay: $out" ;; *) fail "installed replay: $out" ;; esac
    echo "$out" | grep -q "malloc_from=$prefix/" || fail "installed replay did not use the installed library"
    ;;
*) echo "unknown part $part"; exit 2 ;;
esac
[ $failed -eq 0 ] && echo "record $part: ok"
exit $failed
