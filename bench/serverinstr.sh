#!/bin/sh
# How many instructions a lock pair costs the Redis server, one build
# against another: redis-server runs under valgrind's callgrind, and the
# instructions it executes while one build's dlock-bench runs are divided
# by the acquire+release pairs it served (EVALSHA calls over two).
#
#   bench/serverinstr.sh BUILD_DIR [BUILD_DIR...]
#
# Why: the server's CPU time per pair (bench/servercost.sh) moves by a few
# per cent between runs on a shared VM, as much as a change to a script
# buys. An instruction count does not depend on the machine's load:
# repeated runs of one build agree within 0.3 %. It is not time (a cache
# miss or a system call counts as little), so it ranks script changes;
# servercost.sh says what they buy.
#
# Environment: BENCH_SECONDS (3, under callgrind a server serves about a
# thousand pairs a second), BENCH_MODE (uncontended), BENCH_WORKERS (64),
# BENCH_ASYNC (1: dlock-bench --async, 0: threads).
#
# Prints one JSON line per build on stdout.
set -eu

[ $# -ge 1 ] || { echo "usage: $0 BUILD_DIR [BUILD_DIR...]" >&2; exit 64; }
for tool in valgrind callgrind_control redis-server redis-cli; do
    command -v "$tool" >/dev/null || { echo "bench: $tool not found (apt-get install valgrind redis-server)" >&2; exit 69; }
done
secs=${BENCH_SECONDS:-3}
mode=${BENCH_MODE:-uncontended}
workers=${BENCH_WORKERS:-64}
async=""
[ "${BENCH_ASYNC:-1}" = 1 ] && async=--async

dir=$(mktemp -d /tmp/dlock-serverinstr.XXXXXX)
vpid=""
cleanup() {
    [ -n "$vpid" ] && kill "$vpid" 2>/dev/null && wait "$vpid" 2>/dev/null
    rm -rf "$dir"
}
trap cleanup EXIT INT TERM

for build in "$@"; do
    bench="$build/bench/dlock-bench"
    [ -x "$bench" ] || { echo "bench: $bench not built" >&2; exit 66; }
    rm -f "$dir"/cg.out* "$dir/s"
    valgrind --tool=callgrind --callgrind-out-file="$dir/cg.out" \
        redis-server --port 0 --unixsocket "$dir/s" --save '' --appendonly no >"$dir/log" 2>&1 &
    vpid=$!
    i=0
    until redis-cli -s "$dir/s" PING >/dev/null 2>&1; do
        i=$((i + 1))
        [ $i -lt 150 ] || { echo "bench: redis-server under callgrind did not start" >&2; exit 70; }
        sleep 0.2
    done
    url="unix://$dir/s"
    # warm-up: scripts loaded, first calls made; then the counters zeroed
    "$bench" -u "$url" --mode "$mode" --workers "$workers" $async --seconds 1 >/dev/null
    redis-cli -s "$dir/s" CONFIG RESETSTAT >/dev/null
    callgrind_control -z "$vpid" >/dev/null 2>&1
    "$bench" -u "$url" --mode "$mode" --workers "$workers" $async --seconds "$secs" >/dev/null
    callgrind_control -d "$vpid" >/dev/null 2>&1
    calls=$(redis-cli -s "$dir/s" INFO commandstats | tr -d '\r' | sed -n 's/^cmdstat_evalsha:calls=\([0-9]*\),.*/\1/p')
    kill "$vpid"
    wait "$vpid" 2>/dev/null || true
    vpid=""
    # the dump after the zeroing is part 1; its header totals its events
    ir=$(sed -n 's/^summary: *\([0-9]*\).*/\1/p' "$dir/cg.out.1" | head -n 1)
    [ -n "$ir" ] || ir=$(sed -n 's/^totals: *\([0-9]*\).*/\1/p' "$dir/cg.out.1" | head -n 1)
    awk -v b="$build" -v ir="$ir" -v c="${calls:-0}" -v m="$mode" -v w="$workers" -v a="${async:-threads}" 'BEGIN {
        if (c == 0) { print "bench: no pairs counted" > "/dev/stderr"; exit 70 }
        printf "{\"build\":\"%s\",\"mode\":\"%s\",\"workers\":%d,\"api\":\"%s\",\"pairs\":%d,\"server_instructions_per_pair\":%.0f}\n",
               b, m, w, (a == "--async" ? "async" : "sync"), c / 2, ir * 2 / c }'
done
