#!/usr/bin/env bash
# The packages a user builds against:
#   cmake  `cmake --install` into a temporary prefix, then a consumer project
#          with find_package(tsalloc 0.6 CONFIG REQUIRED): tsalloc::tsalloc
#          (ts_version() gives the project's version), tsalloc::tsalloc_static,
#          and a per-design target, each program run; a version the package
#          does not satisfy is refused
#   deb    `cpack -G DEB` (what make deb runs), unpacked with dpkg -x into a
#          scratch root: headers, libraries, launcher, man pages and docs are
#          in it, and a program built against it runs on it (skipped when
#          dpkg-deb is missing)
# Usage: package_check.sh PART BUILD_DIR SOURCE_DIR
set -u
part="$1"; build=$(cd "$2" && pwd); src=$(cd "$3" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
version=$(sed -n 's/^project(tsalloc VERSION \([0-9.]*\).*/\1/p' "$src/CMakeLists.txt")
[ -n "$version" ] || fail "no project(VERSION) in $src/CMakeLists.txt"
major_minor=${version%.*}

# consumer DIR WANTED_VERSION: a CMake project using three of the targets.
consumer() {
    mkdir -p "$1"
    cat >"$1/CMakeLists.txt" <<CM
cmake_minimum_required(VERSION 3.20)
project(consumer C)
find_package(tsalloc $2 CONFIG REQUIRED)
add_executable(api api.c)
target_link_libraries(api PRIVATE tsalloc::tsalloc)
add_executable(api_static api.c)
target_link_libraries(api_static PRIVATE tsalloc::tsalloc_static)
add_executable(plain_bins plain.c)
target_link_libraries(plain_bins PRIVATE tsalloc::bins)
CM
    cat >"$1/api.c" <<'C'
#include <stdio.h>
#include <tsalloc.h>
int main(void) {
    void *p = ts_malloc(64);
    printf("%s %d\n", ts_version(), p != NULL && ts_usable_size(p) >= 64);
    ts_free(p);
    return 0;
}
C
    cat >"$1/plain.c" <<'C'
#include <stdio.h>
#include <stdlib.h>
int main(void) {
    void *p = malloc(64);
    printf("plain %d\n", p != NULL);
    free(p);
    return 0;
}
C
}

case "$part" in
cmake)
    prefix="$work/prefix"
    cmake --install "$build" --prefix "$prefix" >/dev/null || fail "cmake --install"
    consumer "$work/c" "$major_minor"
    cmake -S "$work/c" -B "$work/c/b" -DCMAKE_PREFIX_PATH="$prefix" >"$work/log" 2>&1 \
        || { cat "$work/log"; fail "find_package(tsalloc $major_minor) failed"; }
    cmake --build "$work/c/b" >"$work/log" 2>&1 || { cat "$work/log"; fail "consumer build"; }
    [ "$("$work/c/b/api")" = "$version 1" ] || fail "tsalloc::tsalloc: $("$work/c/b/api")"
    [ "$("$work/c/b/api_static")" = "$version 1" ] || fail "tsalloc::tsalloc_static"
    ldd "$work/c/b/api_static" | grep -q libtsalloc && fail "api_static links a shared tsalloc"
    out=$(TSALLOC_STATS=1 "$work/c/b/plain_bins" 2>&1)
    echo "$out" | grep -q "tsalloc (bins)" || fail "tsalloc::bins: malloc not the design's: $out"
    # Any earlier version of the same major is accepted (0.1, the first);
    # one this package does not satisfy (the next major) is refused.
    consumer "$work/e" "${version%%.*}.1"
    cmake -S "$work/e" -B "$work/e/b" -DCMAKE_PREFIX_PATH="$prefix" >"$work/log" 2>&1 \
        || { cat "$work/log"; fail "find_package(tsalloc ${version%%.*}.1) failed"; }
    consumer "$work/d" "$((${version%%.*} + 1)).0"
    if cmake -S "$work/d" -B "$work/d/b" -DCMAKE_PREFIX_PATH="$prefix" >/dev/null 2>&1; then
        fail "find_package accepted a version the package does not have"
    fi
    ;;
deb)
    if ! command -v dpkg-deb >/dev/null; then
        echo "SKIP: dpkg-deb is missing (apt-get install dpkg): make deb cannot be checked"
        exit 0
    fi
    (cd "$build" && cpack -G DEB -B "$work/pkg" >"$work/log" 2>&1) \
        || { cat "$work/log"; fail "cpack -G DEB"; }
    deb=$(ls "$work"/pkg/tsalloc_"$version"_*.deb 2>/dev/null | head -1)
    [ -n "$deb" ] || { ls -R "$work/pkg"; fail "no tsalloc_${version}_*.deb"; }
    dpkg-deb --info "$deb" | grep -q "Version: $version" || fail "package version"
    root="$work/root"
    dpkg -x "$deb" "$root" || fail "dpkg -x"
    for f in usr/include/tsalloc.h usr/bin/tsalloc usr/share/man/man1/tsalloc.1 \
             usr/share/man/man3/tsalloc.3 usr/share/doc/tsalloc/README.md \
             usr/share/tsalloc/tsbench/__main__.py usr/libexec/tsalloc/tsb-memsim; do
        [ -e "$root/$f" ] || fail "$f is not in the package"
    done
    lib=$(dirname "$(find "$root" -name libtsalloc.so | head -1)")
    [ -f "$lib/libtsalloc.so" ] || fail "no libtsalloc.so in the package"
    [ -f "$lib/cmake/tsalloc/tsallocConfig.cmake" ] || fail "no CMake package in the package"
    [ -f "$lib/pkgconfig/tsalloc-bins.pc" ] || fail "no per-design .pc in the package"
    consumer "$work/c" "$major_minor"
    cc -I"$root/usr/include" "$work/c/api.c" -L"$lib" -ltsalloc -Wl,-rpath,"$lib" \
       -o "$work/api" || fail "build against the package"
    [ "$("$work/api")" = "$version 1" ] || fail "program on the package: $("$work/api")"
    [ "$("$root/usr/bin/tsalloc" --version)" = "tsalloc $version" ] || fail "launcher --version"
    [ "$("$root/usr/bin/tsalloc" run -- sh -c 'echo $LD_PRELOAD')" = "$lib/libtsalloc.so" ] \
        || fail "the packaged launcher does not find the packaged library"
    ;;
*) echo "package_check.sh: unknown part $part"; exit 2 ;;
esac
echo "package $part: ok"
