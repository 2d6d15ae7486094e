#!/bin/sh
# `make bench`: libdlock's lock+release rate against the floor set by
# redis-benchmark, all in one run on one private server.
#
#   bench/run.sh BUILD_DIR
#
# 1. Starts a private redis-server (unix socket in a temp dir, port 0, no
#    persistence) and stops it by PID at the end, whatever happens.
# 2. The floor: redis-benchmark (-c 8, one request in flight per connection)
#    sends the very requests the library sends for one lock+release pair:
#      EVALSHA <acquire.lua> 2 dlock:{b:R} dlock:{b:R}:fence OWNER 10000 0
#      EVALSHA <release.lua> 2 dlock:{b:R} dlock:{b:R}:ch OWNER 10000 1 publish
#    (KEYS/ARGV as in src/lock.c; scripts loaded from src/lua with SCRIPT
#    LOAD). R is __rand_int__ over 10^8 values, so each acquire is a fresh,
#    uncontended lock. redis-benchmark runs one command per invocation, so
#    the two are run one after the other, alternating for BENCH_FLOOR_ROUNDS
#    rounds (default 2), and the best rate of each is kept. Floor pair
#    rate = 1 / (1/acquire_rate + 1/release_rate).
#    Caveats: a release on a random key finds it not held, so it runs the
#    script's short path (HGET, return -1) instead of HGET+DEL+PUBLISH: the
#    floor is a little fast, i.e. the target a little harder. And
#    redis-benchmark draws an independent number for each __rand_int__, so
#    a request's two keys differ (same shape and size; no effect on a
#    standalone server).
# 3. dlock-bench for uncontended and contended with 1, 8 and 64 workers,
#    BENCH_SECONDS (default 5) each after a 0.5 s warm-up; FLUSHALL before
#    each case so expiring floor keys do not steal server time.
# 4. Prints every result as one JSON line on stdout (progress goes to
#    stderr), then a summary, also on stdout, with the two targets:
#    uncontended@8 >= 80% of the floor, contended@64 >= 50% of
#    contended@8. Status is 0 even on MISS unless BENCH_STRICT=1.
#
# Environment: BENCH_SECONDS (5), BENCH_FLOOR_N (requests per floor run,
# default 20000 * BENCH_SECONDS), BENCH_FLOOR_ROUNDS (2), BENCH_STRICT (0),
# BENCH_PIN (0; 1 pins redis-server to CPU 0 and every client to CPU 1 with
# taskset, so clients cannot preempt the server: not the default setup,
# an experiment to show how much of the gap is CPU sharing).
# redis-server, redis-cli and redis-benchmark are taken from PATH.
set -eu
. "$(dirname "$0")/../scripts/servers.sh"

build=${1:-build}
bin="$build/bench/dlock-bench"
here=$(cd "$(dirname "$0")/.." && pwd)
secs=${BENCH_SECONDS:-5}
rounds=${BENCH_FLOOR_ROUNDS:-2}
floor_n=${BENCH_FLOOR_N:-$(awk -v s="$secs" 'BEGIN { n = int(s * 20000)
    print (n < 1000 ? 1000 : n) }')}
strict=${BENCH_STRICT:-0}
on_server=""
on_client=""
if [ "${BENCH_PIN:-0}" = 1 ]; then
    on_server="taskset -c 0"
    on_client="taskset -c 1"
fi

[ -x "$bin" ] || { echo "bench: $bin not built (run make)" >&2; exit 1; }
need redis-server redis-cli redis-benchmark

private_dir dlock-bench

# shellcheck disable=SC2086
start_redis "$dir" $on_server
version=$(redis-server --version | sed 's/.*v=\([^ ]*\).*/\1/')
echo "bench: private redis-server $version (pid $rpid) on unix://$sock" >&2

# ---- the floor --------------------------------------------------------
acq_sha=$(redis-cli -s "$sock" -x SCRIPT LOAD <"$here/src/lua/acquire.lua")
rel_sha=$(redis-cli -s "$sock" -x SCRIPT LOAD <"$here/src/lua/release.lua")
case "$acq_sha$rel_sha" in
    *[!0-9a-f]*|"") echo "bench: SCRIPT LOAD failed: $acq_sha $rel_sha" >&2; exit 1 ;;
esac
owner=0123456789abcdef0123456789abcdef:1 # the shape of "<client id>:<thread>"
# The shapes are right when a lock taken this way is released this way.
got=$(redis-cli -s "$sock" EVALSHA "$acq_sha" 2 'dlock:{b:check}' 'dlock:{b:check}:fence' \
    "$owner" 10000 0 | head -1)
got="$got $(redis-cli -s "$sock" EVALSHA "$rel_sha" 2 'dlock:{b:check}' 'dlock:{b:check}:ch' \
    "$owner" 10000 1 publish)"
[ "$got" = "1 0" ] || { echo "bench: acquire/release check answered '$got', not '1 0'" >&2; exit 1; }

# Run one redis-benchmark; print "rps p50_ms p99_ms" from its CSV line.
floor_run() {
    $on_client redis-benchmark -s "$sock" -c 8 -P 1 -n "$floor_n" -r 100000000 -q --csv "$@" |
        awk -F'","' 'END { print $2, $5, $7 }'
}
best_acq="0 0 0"
best_rel="0 0 0"
r=0
echo "bench: floor: $rounds rounds of $floor_n acquire + $floor_n release requests, -c 8" >&2
while [ $r -lt "$rounds" ]; do
    r=$((r + 1))
    a=$(floor_run EVALSHA "$acq_sha" 2 'dlock:{b:__rand_int__}' 'dlock:{b:__rand_int__}:fence' \
        "$owner" 10000 0)
    l=$(floor_run EVALSHA "$rel_sha" 2 'dlock:{b:__rand_int__}' 'dlock:{b:__rand_int__}:ch' \
        "$owner" 10000 1 publish)
    echo "bench: floor round $r: acquire $a, release $l (rps p50_ms p99_ms)" >&2
    best_acq=$(echo "$best_acq $a" | awk '{ if ($4 > $1) print $4, $5, $6; else print $1, $2, $3 }')
    best_rel=$(echo "$best_rel $l" | awk '{ if ($4 > $1) print $4, $5, $6; else print $1, $2, $3 }')
done
floor=$(echo "$best_acq $best_rel $floor_n" | awk '{
    pair = 1 / (1 / $1 + 1 / $4)
    printf "{\"lib\":\"redis-benchmark\",\"mode\":\"floor\",\"workers\":8,\"ops\":%d,", $7
    printf "\"seconds\":%.3f,\"ops_per_s\":%.1f,", $7 / pair, pair
    printf "\"p50_us\":%.1f,\"p99_us\":%.1f,", ($2 + $5) * 1000, ($3 + $6) * 1000
    printf "\"acquire_ops_per_s\":%.1f,\"release_ops_per_s\":%.1f}\n", $1, $4 }')
echo "$floor"

# ---- libdlock ---------------------------------------------------------
results=""
for mode in uncontended contended; do
    for workers in 1 8 64; do
        redis-cli -s "$sock" FLUSHALL >/dev/null
        line=$($on_client "$bin" -u "unix://$sock" --mode "$mode" --workers "$workers" --seconds "$secs")
        echo "$line"
        results="$results$line
"
    done
done

# ---- summary ----------------------------------------------------------
pick() { printf '%s' "$results" | grep "\"mode\":\"$1\",\"workers\":$2," | head -1; }
floor_rate=$(field "$floor" ops_per_s)
u8=$(field "$(pick uncontended 8)" ops_per_s)
c8=$(field "$(pick contended 8)" ops_per_s)
c64=$(field "$(pick contended 64)" ops_per_s)
# "<a as % of b> <what b is> (target >= t%): PASS|MISS"
verdict() {
    awk -v a="$1" -v b="$2" -v t="$3" -v w="$4" 'BEGIN {
        p = 100 * a / b
        printf "%.1f%% %s (target >= %d%%): %s\n", p, w, t, (p >= t ? "PASS" : "MISS") }'
}
v1=$(verdict "$u8" "$floor_rate" 80 "of the floor")
v2=$(verdict "$c64" "$c8" 50 "of contended@8 ($c8 pairs/s)")
pinned=""
[ -n "$on_server" ] && pinned=", pinned: server CPU 0, clients CPU 1"
echo "summary (BENCH_SECONDS=$secs, $(nproc) cores$pinned; JSON lines above, grep '^{'):"
echo "  floor (redis-benchmark acquire+release pair): $floor_rate pairs/s"
echo "  uncontended@8: $u8 pairs/s = $v1"
echo "  contended@64:  $c64 pairs/s = $v2"
if [ "$strict" = 1 ]; then
    case "$v1$v2" in *MISS*) exit 1 ;; esac
fi
exit 0
