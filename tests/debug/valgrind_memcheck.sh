#!/bin/sh
# valgrind_memcheck.sh VALGRIND PROGRAM [PRELOAD]: memcheck over vg_program
# (linked with libtsalloc.a, or with PRELOAD as its malloc, or Valgrind's own
# malloc without either: the reference), run so that
# Valgrind keeps tsalloc's malloc in place. The planted bugs must each be
# reported as they would be with glibc's malloc, and the clean run must
# report nothing.
vg=$1 prog=$2 preload=${3:-}
command -v "$vg" >/dev/null 2>&1 || { echo "SKIP: valgrind not installed"; exit 77; }
out=$(mktemp) || exit 1
trap 'rm -f "$out"' EXIT
run() {
    LD_PRELOAD=$preload "$vg" --soname-synonyms=somalloc=nouserintercepts --leak-check=full \
        --error-exitcode=99 "$prog" "$@" >"$out" 2>&1
}
fail=0
expect() { # expect TEXT [TIMES]: TEXT on exactly TIMES lines (default 1)
    n=$(grep -c -- "$1" "$out")
    [ "$n" = "${2:-1}" ] || { echo "FAIL: expected ${2:-1} time(s), got $n: $1"; fail=1; }
}

run bugs
expect "definitely lost: 300 bytes in 3 blocks"
expect "Invalid read of size 1"
expect "inside a block of size 64 free'd"
expect "Invalid write of size 1"
expect "0 bytes after a.*block of size 40 alloc'd"
expect "Conditional jump or move depends on uninitialised value"
expect "are definitely lost in loss record" 3
[ $fail = 0 ] || cat "$out"

run clean
status=$?
expect "ERROR SUMMARY: 0 errors from 0 contexts"
if [ $status != 0 ] || grep -q "definitely lost\|Invalid\|uninitialised" "$out"; then
    echo "FAIL: the clean program (exit $status) got reports"
    fail=1
fi
[ $fail = 0 ] || cat "$out"
exit $fail
