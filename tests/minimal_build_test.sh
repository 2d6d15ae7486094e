#!/bin/sh
# Minimal build test: configure and build this source tree with seckill,
# the tests and the benchmarks off, in a temporary directory, where
# pkg-config can find hiredis and OpenSSL and nothing else, and check that the shared
# and static library and the dlock CLI came out of it and that the CLI runs.
# A lookup of libmicrohttpd, cmocka, SQLite, libpq, Jansson or libcrypto
# that crept back outside the part needing it fails the configure step.
# It is a Release build (-O3), the one a packager makes: -Werror holds at
# that level too, where GCC's flow analysis finds warnings -O2 does not.
#
# usage: minimal_build_test.sh SOURCE_DIR [C_COMPILER]
set -eu
src=$1
cc=${2:-cc}
tmp=$(mktemp -d /tmp/dlock-minimal-XXXXXX)
trap 'rm -rf "$tmp"' EXIT INT TERM
fail() { echo "minimal_build_test: $*" >&2; exit 1; }

# A pkg-config search path holding hiredis's and OpenSSL's files only.
mkdir "$tmp/pc"
for m in hiredis openssl libssl libcrypto; do
    pcdir=$(pkg-config --variable=pcfiledir $m) || fail "pkg-config does not know $m"
    cp "$pcdir/$m.pc" "$tmp/pc/"
done

start=$(date +%s)
PKG_CONFIG_LIBDIR=$tmp/pc PKG_CONFIG_PATH= cmake -S "$src" -B "$tmp/build" -DCMAKE_C_COMPILER="$cc" \
    -DCMAKE_BUILD_TYPE=Release -DDLOCK_BUILD_SECKILL=OFF -DDLOCK_BUILD_TESTS=OFF -DDLOCK_BUILD_BENCH=OFF >"$tmp/log" 2>&1 ||
    { cat "$tmp/log" >&2; fail "configure failed"; }
cmake --build "$tmp/build" -j 2 >>"$tmp/log" 2>&1 || { cat "$tmp/log" >&2; fail "build failed"; }

for f in libdlock.so libdlock.a tools/dlock; do
    [ -e "$tmp/build/$f" ] || fail "$f was not built"
done
for f in seckill/seckill bench/dlock-bench tests/test_lock; do
    [ -e "$tmp/build/$f" ] && fail "$f was built although its part is off"
done
if grep -Eq '^(MHD|SQLITE3|LIBPQ|JANSSON|CMOCKA)_FOUND' "$tmp/build/CMakeCache.txt"; then
    fail "the minimal configuration looked up a dependency of an optional part"
fi
version=$(cat "$src/VERSION")
out=$("$tmp/build/tools/dlock" --version) || fail "dlock --version failed"
[ "$out" = "dlock $version" ] || fail "dlock --version says '$out', VERSION says $version"
echo "minimal_build_test: library and dlock built (Release) with hiredis and OpenSSL only in $(($(date +%s) - start)) s"
