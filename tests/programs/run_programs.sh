#!/usr/bin/env bash
# Real programs under LD_PRELOAD of one tsalloc library: each must produce the
# same output as under glibc's malloc. Usage: run_programs.sh /path/libtsalloc-X.so
# Programs missing from the machine are skipped with a note; at least four must run.
set -u
lib="$1"
[ -f "$lib" ] || { echo "no such library: $lib"; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
ran=0
failed=0

# compare NAME CMD...: run CMD with glibc and with the library, compare stdout.
compare() {
    local name="$1"; shift
    if ! command -v "$1" >/dev/null 2>&1; then echo "skip $name: $1 not installed"; return; fi
    "$@" >"$work/want" 2>"$work/want.err" </dev/null
    local want_rc=$?
    LD_PRELOAD="$lib" "$@" >"$work/got" 2>"$work/got.err" </dev/null
    local got_rc=$?
    ran=$((ran + 1))
    if [ $want_rc -ne $got_rc ] || ! cmp -s "$work/want" "$work/got"; then
        echo "FAIL $name: exit $got_rc (glibc $want_rc)"; head -c 2000 "$work/got.err"
        diff <(head -c 4000 "$work/want") <(head -c 4000 "$work/got") | head -20
        failed=$((failed + 1))
    else
        echo "ok   $name"
    fi
}

seq 1 200000 | awk '{print ($1 * 7919) % 100003, $1}' >"$work/numbers"
head -c 3000000 /dev/urandom >"$work/random.bin"

compare "ls" ls -la /usr/lib /usr/include
compare "sort" sort -n -k1,1 -k2,2 "$work/numbers"
compare "sort-parallel" sort --parallel=4 -S 10M -k2,2 "$work/numbers"
compare "gzip" sh -c "gzip -c '$work/random.bin' | gzip -dc | md5sum"
compare "awk" awk '{s[$1 % 1000] += $2} END {for (k in s) n++; print n}' "$work/numbers"
compare "python-json" python3 -c 'import json; d = [{"k": i, "v": str(i) * 3} for i in range(100000)]; print(len(json.dumps(d)), sum(len(json.loads(json.dumps(x))["v"]) for x in d[:5000]))'
compare "python-threads" python3 -c 'import concurrent.futures as f; print(sum(f.ThreadPoolExecutor(8).map(lambda x: len(str(list(range(x)))), range(1500))))'
cat >"$work/hello.cpp" <<'CPP'
#include <iostream>
#include <map>
#include <string>
#include <vector>
int main() {
    std::map<std::string, std::vector<int>> m;
    for (int i = 0; i < 100000; i++) m[std::to_string(i % 997)].push_back(i);
    long s = 0;
    for (auto &kv : m) s += kv.second.size() * kv.first.size();
    std::cout << m.size() << " " << s << std::endl;
}
CPP
# The compiler itself runs on the library; the program it builds runs on it too.
if command -v g++ >/dev/null 2>&1; then
    if LD_PRELOAD="$lib" g++ -O1 -o "$work/hello" "$work/hello.cpp" 2>"$work/gxx.err"; then
        compare "g++-built-program" "$work/hello"
    else
        echo "FAIL g++ under the library"; head -c 2000 "$work/gxx.err"; failed=$((failed + 1)); ran=$((ran + 1))
    fi
fi
compare "git" git -C "$(dirname "$0")" log --oneline -n 5 --stat
compare "cmake" cmake -E echo_append cmake-runs

echo "programs: $ran ran, $failed failed"
[ $failed -eq 0 ] && [ $ran -ge 4 ]
