#!/bin/sh
# The rate limiter (dlock_rate) against the floor of the simplest limiter
# there is, a fixed window, all in one run on one private server.
#
#   bench/rate.sh BUILD_DIR
#
# 1. Starts a private redis-server (unix socket, no persistence), stopped
#    by PID at the end whatever happens.
# 2. The floor: redis-benchmark (-c 8, one request in flight per
#    connection) runs a fixed-window limiter's one round trip,
#      EVALSHA <INCR KEYS[1]; PEXPIRE on the first> 1 win:R 1000
#    on a random key R of 10^8 (a fresh window each, as the library's
#    random subjects below). BENCH_FLOOR_ROUNDS rounds (default 2), the
#    best kept. A fixed window is cheaper than GCRA and wrong at its
#    edges (twice the rate across one); it is the cost to beat, not a
#    rival.
# 3. dlock-rate, BENCH_SECONDS (default 5) each: sync, 8 threads deciding
#    dlock_rate_try() on random subjects of a limit none reaches; async,
#    64 dlock_rate_acquire_async() calls in flight from one thread (and 8).
#    Targets printed: sync@8 >= 0.8x the floor, async@64 >= 1.5x.
# 4. Accuracy: 8 processes for 10 s taking permits of one limit of 100 per
#    second, burst 10, waiting for each: admitted is printed beside the
#    bound 10 + 100 x (seconds by the server's clock), target 1000 to 1010.
#
# Prints one JSON line per case on stdout, then the summary.
set -eu
. "$(dirname "$0")/../scripts/servers.sh"

[ $# -ge 1 ] || { echo "usage: bench/rate.sh BUILD_DIR" >&2; exit 64; }
bin=$1/bench/dlock-rate
[ -x "$bin" ] || { echo "bench: $bin not built" >&2; exit 1; }
secs=${BENCH_SECONDS:-5}
rounds=${BENCH_FLOOR_ROUNDS:-2}
need redis-server redis-cli redis-benchmark

private_dir dlock-rate
start_redis "$dir"
fixed='local n = redis.call("INCR", KEYS[1]) if n == 1 then redis.call("PEXPIRE", KEYS[1], ARGV[1]) end return n'
sha=$(redis-cli -s "$sock" SCRIPT LOAD "$fixed")
floor=0
i=0
while [ $i -lt "$rounds" ]; do
    i=$((i + 1))
    rps=$(redis-benchmark -s "$sock" -c 8 -P 1 -n $((20000 * secs)) -r 100000000 -q --csv \
        EVALSHA "$sha" 1 win:__rand_int__ 1000 | tail -1 | cut -d, -f2 | tr -d '"')
    printf '{"lib":"redis-benchmark","mode":"fixed-window floor","workers":8,"round":%d,"decisions_per_s":%s}\n' \
        "$i" "$rps"
    floor=$(awk -v a="$floor" -v b="$rps" 'BEGIN { print (b > a ? b : a) }')
done
redis-cli -s "$sock" FLUSHALL >/dev/null
s8=$("$bin" -u "unix://$sock" -m sync -w 8 -s "$secs")
echo "$s8"
redis-cli -s "$sock" FLUSHALL >/dev/null
a8=$("$bin" -u "unix://$sock" -m async -w 8 -s "$secs")
echo "$a8"
redis-cli -s "$sock" FLUSHALL >/dev/null
a64=$("$bin" -u "unix://$sock" -m async -w 64 -s "$secs")
echo "$a64"
acc=$("$bin" -u "unix://$sock" -m accuracy -w 8 -s 10 -r 100 -b 10)
echo "$acc"

ratio() { awk -v a="$(field "$1" decisions_per_s)" -v f="$floor" 'BEGIN { printf "%.2f", a / f }'; }
verdict() { awk -v r="$1" -v t="$2" 'BEGIN { print (r >= t ? "ok" : "MISS") }'; }
echo "summary ($(date -u +%Y-%m-%d), $(git -C "$(dirname "$0")" rev-parse --short HEAD 2>/dev/null || echo '?'), $(nproc) CPUs)"
echo "  floor (redis-benchmark fixed window INCR+PEXPIRE, -c 8, best of $rounds): $floor decisions/s"
r=$(ratio "$s8")
echo "  sync@8:   $(field "$s8" decisions_per_s)/s = ${r}x the floor (target >= 0.8x: $(verdict "$r" 0.8))"
r=$(ratio "$a8")
echo "  async@8:  $(field "$a8" decisions_per_s)/s = ${r}x the floor"
r=$(ratio "$a64")
echo "  async@64: $(field "$a64" decisions_per_s)/s = ${r}x the floor (target >= 1.5x: $(verdict "$r" 1.5))"
n=$(field "$acc" admitted)
echo "  accuracy: 8 processes, 10 s, 100/s burst 10: admitted $n in $(field "$acc" server_ms) ms" \
    "(bound $(field "$acc" bound); target 1000 to 1010: $(awk -v n="$n" 'BEGIN { print (n >= 1000 && n <= 1010 ? "ok" : "MISS") }'))"
