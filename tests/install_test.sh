#!/bin/sh
# Install test: `make install PREFIX=...` into a temporary prefix, move the
# whole tree elsewhere (a relocated install), then build examples/lock.c
# against it twice, once with pkg-config and once with the CMake package,
# and run both against a real redis-server started here (unix socket in
# the temp dir, stopped by PID on exit). The version in the generated
# header, the library, the pkg-config file, the CMake package and the man
# page must be the source tree's VERSION.
#
# usage: install_test.sh SOURCE_DIR BUILD_DIR [EXTRA_FLAGS]
# EXTRA_FLAGS: compiler flags the library was built with that a program
# linking it also needs (the sanitizers, in the ASan build).
set -eu
src=$1
build=$2
extra=${3:-}
tmp=$(mktemp -d /tmp/dlock-install-XXXXXX)
redis_pid=
cleanup() {
    if [ -n "$redis_pid" ]; then kill "$redis_pid" 2>/dev/null || true; wait "$redis_pid" 2>/dev/null || true; fi
    rm -rf "$tmp"
}
trap cleanup EXIT INT TERM
fail() { echo "install_test: $*" >&2; exit 1; }

make -s -C "$src" install BUILD="$build" PREFIX="$tmp/stage" >"$tmp/install.log" 2>&1 ||
    { cat "$tmp/install.log" >&2; fail "make install failed"; }
mv "$tmp/stage" "$tmp/moved"
p=$tmp/moved
pc=$(find "$p" -name dlock.pc) || true
[ -n "$pc" ] || fail "no dlock.pc installed"
for f in include/dlock.h include/dlock_version.h include/dlock_redis.h bin/dlock share/man/man1/dlock.1; do
    [ -e "$p/$f" ] || fail "$f not installed under the prefix"
done
pcdir=$(dirname "$pc")
libdir=$(PKG_CONFIG_PATH=$pcdir pkg-config --variable=libdir dlock)
[ -e "$libdir/libdlock.so" ] && [ -e "$libdir/libdlock.a" ] || fail "pkg-config libdir $libdir has no libdlock"
version=$(cat "$src/VERSION")
pcversion=$(PKG_CONFIG_PATH=$pcdir pkg-config --modversion dlock)
[ "$pcversion" = "$version" ] || fail "dlock.pc says version $pcversion, VERSION says $version"
grep -q "^\.TH .*\"dlock $version\"" "$p/share/man/man1/dlock.1" || fail "installed dlock.1 does not name dlock $version"

# A private redis-server for the examples to lock on.
redis-server --port 0 --unixsocket "$tmp/redis.sock" --unixsocketperm 700 --save "" --appendonly no \
    --dir "$tmp" --logfile "$tmp/redis.log" >/dev/null 2>&1 &
redis_pid=$!
i=0
until redis-cli -s "$tmp/redis.sock" ping >/dev/null 2>&1; do
    i=$((i + 1))
    [ $i -lt 500 ] || fail "redis-server did not start"
    sleep 0.01
done
url="unix://$tmp/redis.sock"

# pkg-config, from the relocated tree.
# shellcheck disable=SC2046,SC2086
cc $extra "$src/examples/lock.c" $(PKG_CONFIG_PATH=$pcdir pkg-config --cflags --libs dlock) -o "$tmp/lock-pc" ||
    fail "building examples/lock.c with pkg-config failed"
LD_LIBRARY_PATH=$libdir "$tmp/lock-pc" "$url" >"$tmp/out" 2>&1 || { cat "$tmp/out" >&2; fail "lock-pc failed"; }
grep -q "fencing token" "$tmp/out" || fail "lock-pc did not take the lock: $(cat "$tmp/out")"

# The installed headers alone give the version (dlock.h includes the
# generated dlock_version.h), and the library agrees with them.
cat >"$tmp/version.c" <<'EOF'
#include <stdio.h>
#include <dlock.h>
int main(void)
{
    printf("%d.%d.%d %s %s\n", DLOCK_VERSION_MAJOR, DLOCK_VERSION_MINOR, DLOCK_VERSION_PATCH, DLOCK_VERSION,
           dlock_version());
    return 0;
}
EOF
# shellcheck disable=SC2046,SC2086
cc $extra "$tmp/version.c" $(PKG_CONFIG_PATH=$pcdir pkg-config --cflags --libs dlock) -o "$tmp/version" ||
    fail "building a program that prints DLOCK_VERSION failed"
got=$(LD_LIBRARY_PATH=$libdir "$tmp/version") || fail "the version program failed"
[ "$got" = "$version $version $version" ] || fail "installed header and library say '$got', VERSION says $version"

# The CMake package, found through CMAKE_PREFIX_PATH.
mkdir "$tmp/proj"
cat >"$tmp/proj/CMakeLists.txt" <<EOF
cmake_minimum_required(VERSION 3.18)
project(uses_dlock C)
find_package(dlock $version EXACT REQUIRED)
add_executable(lock-cmake $src/examples/lock.c)
target_compile_options(lock-cmake PRIVATE $extra)
target_link_options(lock-cmake PRIVATE $extra)
target_link_libraries(lock-cmake PRIVATE dlock::dlock)
EOF
cmake -S "$tmp/proj" -B "$tmp/proj/build" -DCMAKE_PREFIX_PATH="$p" >"$tmp/cmake.log" 2>&1 &&
    cmake --build "$tmp/proj/build" >>"$tmp/cmake.log" 2>&1 || { cat "$tmp/cmake.log" >&2; fail "CMake package build failed"; }
"$tmp/proj/build/lock-cmake" "$url" >"$tmp/out" 2>&1 || { cat "$tmp/out" >&2; fail "lock-cmake failed"; }
grep -q "fencing token" "$tmp/out" || fail "lock-cmake did not take the lock: $(cat "$tmp/out")"
echo "install_test: installed, relocated, built and ran examples/lock.c with pkg-config and CMake"
