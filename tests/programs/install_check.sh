#!/usr/bin/env bash
# make install, as a user does it: install the build into a fresh prefix, then
# compile (1) a seed-assignment program with the README's line and (2) a
# program using <tsalloc.h> through pkg-config, and run both; and check that
# the installed launcher finds the installed libraries.
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
    printf("api ok\n");
    return 0;
}
C
export PKG_CONFIG_PATH="$libdir/pkgconfig"
cc "$prefix/api.c" $(pkg-config --cflags --libs tsalloc) -Wl,-rpath,"$libdir" -o "$prefix/api"
[ "$("$prefix/api")" = "api ok" ] || { echo "FAIL api client"; exit 1; }
"$prefix/bin/tsalloc" list | grep -qx tsalloc || { echo "FAIL installed launcher"; exit 1; }
[ "$("$prefix/bin/tsalloc" run -- sh -c 'echo $LD_PRELOAD')" = "$libdir/libtsalloc.so" ] \
    || { echo "FAIL launcher path"; exit 1; }
"$prefix/bin/tsalloc" run --help-options | grep -q TSALLOC_PURGE_DELAY_MS \
    || { echo "FAIL installed launcher: --help-options"; exit 1; }
echo "install: ok"
