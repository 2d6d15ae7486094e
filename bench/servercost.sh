#!/bin/sh
# What a lock pair costs the Redis server, one build against another: the
# server's CPU and its time inside commands per acquire+release pair.
#
#   bench/servercost.sh BUILD_DIR [BUILD_DIR...]
#
# Each build's dlock-bench runs against a private redis-server of its own;
# every server is pinned to CPU 1 and every client to CPU 0, and the
# builds take turns, round after round, so that a slow minute of the
# machine falls on all of them alike.
#
# Why: a busy client on two cores is bound by the server (the client
# waits; the server's core is full), so the server's time per pair is
# what a change to the scripts buys or costs, and the server's own
# counters (INFO cpu, INFO commandstats) read it with far less noise than
# a rate timed from outside. The pairs counted are the server's: EVALSHA
# calls over two, warm-up included, like the CPU they are set against.
#
# Prints one JSON line per build and round on stdout (progress on stderr)
# and the median of each build's rounds.
# Environment: BENCH_SECONDS (3), BENCH_ROUNDS (3), BENCH_MODE
# (uncontended), BENCH_WORKERS (64), BENCH_ASYNC (1: dlock-bench --async,
# 0: threads).
set -eu
. "$(dirname "$0")/../scripts/servers.sh"

[ $# -ge 1 ] || { echo "usage: bench/servercost.sh BUILD_DIR [BUILD_DIR...]" >&2; exit 64; }
secs=${BENCH_SECONDS:-3}
rounds=${BENCH_ROUNDS:-3}
mode=${BENCH_MODE:-uncontended}
workers=${BENCH_WORKERS:-64}
async=""
[ "${BENCH_ASYNC:-1}" = 1 ] && async=--async
need redis-server redis-cli taskset
for b in "$@"; do
    [ -x "$b/bench/dlock-bench" ] || { echo "bench: $b/bench/dlock-bench not built" >&2; exit 1; }
done

private_dir dlock-servercost
socks=""
pids=""
i=0
for b in "$@"; do
    i=$((i + 1))
    mkdir -p "$dir/$i"
    start_redis "$dir/$i" taskset -c 1
    socks="$socks $sock"
    pids="$pids $rpid"
done
spid="$pids" # stopped with the others at exit
echo "bench: $# builds, $rounds rounds of $secs s, $mode $workers ${async:-threads}; servers on CPU 1, clients on CPU 0" >&2

# used_cpu_sys + used_cpu_user of the server on socket $1, in seconds
server_cpu() {
    redis-cli -s "$1" INFO cpu | tr -d '\r' |
        awk -F: '$1 == "used_cpu_sys" || $1 == "used_cpu_user" { s += $2 } END { printf "%.6f", s }'
}

# "calls usec" of EVALSHA on socket $1
evalsha_stats() {
    redis-cli -s "$1" INFO commandstats | tr -d '\r' |
        sed -n 's/^cmdstat_evalsha:calls=\([0-9]*\),usec=\([0-9]*\),.*/\1 \2/p'
}

results="$dir/results"
: >"$results"
r=0
while [ $r -lt "$rounds" ]; do
    r=$((r + 1))
    i=0
    for b in "$@"; do
        i=$((i + 1))
        s=$(echo $socks | cut -d' ' -f$i)
        redis-cli -s "$s" FLUSHALL >/dev/null
        redis-cli -s "$s" CONFIG RESETSTAT >/dev/null
        c0=$(server_cpu "$s")
        line=$(taskset -c 0 "$b/bench/dlock-bench" -u "unix://$s" --mode "$mode" --workers "$workers" \
            --seconds "$secs" $async)
        c1=$(server_cpu "$s")
        st=$(evalsha_stats "$s")
        out=$(echo "$c0 $c1 $st $(field "$line" ops_per_s)" | awk -v b="$b" -v r="$r" '{
            pairs = $3 / 2
            printf "{\"build\":\"%s\",\"round\":%d,\"pairs\":%d,\"server_cpu_us_per_pair\":%.2f,", b, r, pairs, ($2 - $1) * 1e6 / pairs
            printf "\"in_commands_us_per_pair\":%.2f,\"ops_per_s\":%s}\n", $4 / pairs, $5 }')
        echo "$out"
        echo "$out" >>"$results"
    done
done

echo "summary (median of $rounds rounds, us per pair; JSON lines above, grep '^{'):"
for b in "$@"; do
    grep -F "\"build\":\"$b\"" "$results" | awk -v b="$b" '
        { split($0, a, /"server_cpu_us_per_pair":|,"in_commands_us_per_pair":|,"ops_per_s":|}/)
          cpu[NR] = a[2]; cmd[NR] = a[3]; ops[NR] = a[4] }
        function med(x, n,   i, j, t) { for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++)
              if (x[j] < x[i]) { t = x[i]; x[i] = x[j]; x[j] = t }
            return n % 2 ? x[(n + 1) / 2] : (x[n / 2] + x[n / 2 + 1]) / 2 }
        END { printf "  %s: server CPU %.2f, inside commands %.2f, %.0f pairs/s\n", b, med(cpu, NR), med(cmd, NR), med(ops, NR) }'
done
