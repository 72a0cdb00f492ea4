#!/usr/bin/env bash
# make install, as a user does it: install the build into a fresh prefix, then
# compile (1) a seed-assignment program with the README's line, (2) a
# program using <tsalloc.h> through pkg-config and (3) a plain malloc program
# against each design's pkg-config file, and run them; check that the
# installed launcher finds the installed libraries, tools and tsbench
# (`tsalloc compare`), and that the man pages are installed.
# Usage: install_check.sh BUILD_DIR SOURCE_DIR
set -eu
build="$1"; src="$2"
prefix=$(mktemp -d)
trap 'rm -rf "$prefix"' EXIT
cmake --install "$build" --prefix "$prefix" >/dev/null
libdir=$(dirname "$(find "$prefix" -name libtsalloc-classic.so | head -1)")
cc -O2 -pthread -I"$prefix/include" "$src/tests/programs/seed_client.c" -L"$libdir" \
   -ltsalloc-classic -Wl,-rpath,"$libdir" -o "$prefix/seed_client"
out=$("$prefix/seed_client")
echo "$out" | grep -q "^data segment [1-9]" || { echo "FAIL seed client: $out"; exit 1; }
cat >"$prefix/api.c" <<'C'
#include <stdio.h>
#include <string.h>
#include <tsalloc.h>
int main(void) {
    char *p = ts_malloc(100);
    if (!p || ts_usable_size(p) < 100) return 1;
    memset(p, 7, 100);
    p = ts_realloc(p, 5000);
    if (!p || p[99] != 7) return 2;
    ts_free(p);
    printf("api ok %s\n", ts_version());
    return 0;
}
C
export PKG_CONFIG_PATH="$libdir/pkgconfig"
cc "$prefix/api.c" $(pkg-config --cflags --libs tsalloc) -Wl,-rpath,"$libdir" -o "$prefix/api"
version=$(pkg-config --modversion tsalloc)
[ "$("$prefix/api")" = "api ok $version" ] || { echo "FAIL api client: $("$prefix/api")"; exit 1; }
[ "$("$prefix/bin/tsalloc" --version)" = "tsalloc $version" ] || { echo "FAIL --version"; exit 1; }
# One .pc per design: the program's malloc is the design's (its statistics at exit).
cat >"$prefix/plain.c" <<'C'
#include <stdio.h>
#include <stdlib.h>
int main(void) {
    void *p = malloc(1000);
    printf("plain %d\n", p != NULL);
    free(p);
    return 0;
}
C
for d in $("$prefix/bin/tsalloc" list); do
    pc=tsalloc-$d; [ "$d" = tsalloc ] && pc=tsalloc
    cc "$prefix/plain.c" $(pkg-config --cflags --libs "$pc") -Wl,-rpath,"$libdir" \
       -o "$prefix/plain-$d" || { echo "FAIL pkg-config $pc"; exit 1; }
    out=$(TSALLOC_STATS=1 "$prefix/plain-$d" 2>&1)
    echo "$out" | grep -q "^plain 1" || { echo "FAIL $pc client: $out"; exit 1; }
    echo "$out" | grep -qiE "tsalloc|bytes" || { echo "FAIL $pc client: not on $d: $out"; exit 1; }
done
for page in man1/tsalloc.1 man3/tsalloc.3; do
    [ -s "$prefix/share/man/$page" ] || { echo "FAIL man page $page not installed"; exit 1; }
done
# compare from the install: tsbench, memsim and the libraries all found there.
out=$(cd "$prefix" && "$prefix/bin/tsalloc" compare --designs bins --runs 1 --out "$prefix/r" \
      -- echo hi 2>&1) || { echo "FAIL installed compare: $out"; exit 1; }
echo "$out" | grep -qE "^  bins +[0-9]" || { echo "FAIL installed compare: $out"; exit 1; }
[ -s "$prefix/r/report.html" ] || { echo "FAIL installed compare: no report"; exit 1; }
"$prefix/bin/tsalloc" list | grep -qx tsalloc || { echo "FAIL installed launcher"; exit 1; }
[ "$("$prefix/bin/tsalloc" run -- sh -c 'echo $LD_PRELOAD')" = "$libdir/libtsalloc.so" ] \
    || { echo "FAIL launcher path"; exit 1; }
"$prefix/bin/tsalloc" run --help-options | grep -q TSALLOC_PURGE_DELAY_MS \
    || { echo "FAIL installed launcher: --help-options"; exit 1; }
echo "install: ok"
