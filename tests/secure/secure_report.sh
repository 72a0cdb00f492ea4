#!/bin/sh
# make secure-report: the heap-attack probes of tests/secure/attacks.c under
# glibc, jemalloc, tcmalloc, mimalloc, Scudo, tsalloc and tsalloc-secure (each
# by LD_PRELOAD; an allocator whose library is missing is skipped with a
# note), as a table of caught/missed with totals.
#   secure_report.sh BUILD [PEER_DIR]
# SCUDO=/path/libclang_rt.scudo_standalone-x86_64.so names Scudo's library
# (Debian's libclang-rt-16-dev ships it; extract it with dpkg -x).
# MIMALLOC_SECURE=/path/libmimalloc-secure.so adds mimalloc built with
# MI_SECURE=ON (a build option of its sources; no distribution ships it).
set -eu
build=${1:?usage: secure_report.sh BUILD [PEER_DIR]}
peers=${2:-/usr/lib/x86_64-linux-gnu}
probe=$build/bin/secure_attacks
[ -x "$probe" ] || { echo "secure-report: $probe is missing (make build)"; exit 1; }
scudo=${SCUDO:-/usr/lib/llvm-16/lib/clang/16/lib/linux/libclang_rt.scudo_standalone-x86_64.so}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

names=""
add() { # add NAME LIB (LIB empty: glibc)
    if [ -n "$2" ] && [ ! -e "$2" ]; then
        echo "secure-report: $1 skipped: $2 not found"
        return
    fi
    LD_PRELOAD=$2 "$probe" --report >"$out/$1" 2>/dev/null || true
    names="$names $1"
}
add glibc ""
add jemalloc "$peers/libjemalloc.so.2"
add tcmalloc "$peers/libtcmalloc_minimal.so.4"
add mimalloc "$peers/libmimalloc.so.2"
[ -z "${MIMALLOC_SECURE:-}" ] || add mi-secure "$MIMALLOC_SECURE"
add scudo "$scudo"
add tsalloc "$build/lib/libtsalloc.so"
add secure "$build/lib/libtsalloc-secure.so"

first=$(echo $names | cut -d' ' -f1)
printf '%-24s %8s' attack size
for n in $names; do printf ' %8s' "$n"; done
echo
grep -v '^total' "$out/$first" | while read -r attack size _; do
    printf '%-24s %8s' "$attack" "$size"
    for n in $names; do
        r=$(awk -v a="$attack" -v s="$size" '$1 == a && $2 == s { print $3 }' "$out/$n")
        case $r in caught) r=caught ;; missed) r=- ;; *) r='?' ;; esac
        printf ' %8s' "$r"
    done
    echo
done
printf '%-33s' "caught (of probes)"
for n in $names; do
    printf ' %8s' "$(awk '$1 == "total" { print $2 "/" $3 }' "$out/$n")"
done
echo
