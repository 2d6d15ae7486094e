#!/bin/sh
# What distinct names locked once leave in Redis: each build's
# dlock-names locks BENCH_NAMES names (default 1000000) once each and
# releases them, against a private redis-server of its own, and the
# server's used_memory and DBSIZE are read before and after.
#
#   bench/names.sh BUILD_DIR [BUILD_DIR...]
#
# Why: a fencing counter per name, never expiring, grew by one key per
# name ever locked (a sale locking lock:order:<user> for ten million
# users kept ten million keys); with one counter per hash slot the keys
# left stop at 16384 whatever the number of names.
#
# Prints one JSON line per build on stdout. Environment: BENCH_NAMES
# (1000000), BENCH_WORKERS (8).
set -eu
. "$(dirname "$0")/../scripts/servers.sh"

[ $# -ge 1 ] || { echo "usage: bench/names.sh BUILD_DIR [BUILD_DIR...]" >&2; exit 64; }
n=${BENCH_NAMES:-1000000}
workers=${BENCH_WORKERS:-8}
need redis-server redis-cli
for b in "$@"; do
    [ -x "$b/bench/dlock-names" ] || { echo "bench: $b/bench/dlock-names not built" >&2; exit 1; }
done

private_dir dlock-names
used_memory() { redis-cli -s "$sock" INFO memory | tr -d '\r' | sed -n 's/^used_memory:\([0-9]*\)$/\1/p'; }
i=0
for b in "$@"; do
    i=$((i + 1))
    mkdir -p "$dir/$i"
    start_redis "$dir/$i"
    mem0=$(used_memory)
    keys0=$(redis-cli -s "$sock" DBSIZE)
    echo "bench: $b: $n names, $workers workers" >&2
    run=$("$b/bench/dlock-names" -u "unix://$sock" -n "$n" -w "$workers")
    mem1=$(used_memory)
    keys1=$(redis-cli -s "$sock" DBSIZE)
    printf '{"build":"%s","used_memory_before":%s,"dbsize_before":%s,"used_memory_after":%s,"dbsize_after":%s,%s\n' \
        "$b" "$mem0" "$keys0" "$mem1" "$keys1" "${run#\{}"
    kill "$rpid" 2>/dev/null || true
    wait "$rpid" 2>/dev/null || true
    rpid=""
done
