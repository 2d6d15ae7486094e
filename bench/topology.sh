#!/bin/sh
# Lock throughput on a 3-master Redis Cluster against one redis-server, in
# the same run, with the same dlock-bench:
#
#   bench/topology.sh BUILD_DIR
#
# Starts one redis-server (TCP on loopback, no persistence) and a 3-master,
# 3-replica cluster through scripts/redis-topology.sh, all stopped at exit.
# Runs dlock-bench uncontended (each worker its own lock, so lock names
# spread over the cluster's slots and masters) and contended (one lock,
# one master) with 8 and 64 workers against each, alternating single and
# cluster for BENCH_ROUNDS rounds (default 2; the best of each is kept), and
# prints every result as a JSON line with "target":"single"|"cluster",
# then a summary of cluster/single ratios.
#
# On a 2-core machine the cluster cannot win: its 6 servers and the
# benchmark share the same two cores that one server and the benchmark
# share. docs/BENCHMARKS.md records what this shows and estimates the
# scaling on 3 machines.
#
# Environment: BENCH_SECONDS (5), BENCH_ROUNDS (2).
set -eu

build=${1:-build}
bin="$build/bench/dlock-bench"
here=$(cd "$(dirname "$0")/.." && pwd)
secs=${BENCH_SECONDS:-5}
rounds=${BENCH_ROUNDS:-2}
[ -x "$bin" ] || { echo "bench: $bin not built (run make)" >&2; exit 1; }

dir=$(mktemp -d /tmp/dlock-bench-topo.XXXXXX)
single_pid=""
cleanup() {
    [ -n "$single_pid" ] && kill "$single_pid" 2>/dev/null
    "$here/scripts/redis-topology.sh" stop "$dir/cluster" >/dev/null 2>&1 || true
    rm -rf "$dir"
}
trap cleanup EXIT INT TERM

# One server on a free loopback port (the cluster's nodes are on TCP too):
# a random port, tried again if the server cannot bind it. In a session of
# its own, like the cluster's daemonized nodes (see scripts/servers.sh).
tries=0
while :; do
    tries=$((tries + 1))
    [ $tries -le 20 ] || { echo "bench: no free port for redis-server" >&2; exit 1; }
    port=$(awk -v s="$$$tries" 'BEGIN { srand(s); print 20000 + int(rand() * 30000) }')
    setsid redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$dir" \
        --logfile "$dir/single.log" --daemonize no &
    single_pid=$!
    i=0
    while [ $i -lt 100 ] && kill -0 "$single_pid" 2>/dev/null && ! redis-cli -p "$port" ping >/dev/null 2>&1; do
        i=$((i + 1))
        sleep 0.05
    done
    redis-cli -p "$port" ping >/dev/null 2>&1 && kill -0 "$single_pid" 2>/dev/null && break
    kill "$single_pid" 2>/dev/null || true
    single_pid=""
done
single_url="redis://127.0.0.1:$port"

mkdir -p "$dir/cluster"
cluster_url=$("$here/scripts/redis-topology.sh" cluster start "$dir/cluster" | sed -n 's/^URL //p')
[ -n "$cluster_url" ] || { echo "bench: the cluster did not start" >&2; exit 1; }
echo "bench: single $single_url, cluster $cluster_url" >&2

results="$dir/results"
: >"$results"
r=1
while [ $r -le "$rounds" ]; do
    for mode in uncontended contended; do
        for workers in 8 64; do
            for target in single cluster; do
                url=$single_url
                [ $target = cluster ] && url=$cluster_url
                echo "bench: round $r: $target $mode $workers" >&2
                line=$("$bin" -u "$url" --mode "$mode" --workers "$workers" --seconds "$secs")
                printf '%s\n' "$line" | sed "s/^{/{\"target\":\"$target\",\"round\":$r,/" | tee -a "$results"
            done
        done
    done
    r=$((r + 1))
done

# Best of the rounds per case, and the cluster/single ratio.
echo "summary (best of $rounds rounds, lock+release pairs/s):"
for mode in uncontended contended; do
    for workers in 8 64; do
        best() {
            grep "\"target\":\"$1\"" "$results" | grep "\"mode\":\"$mode\"" | grep "\"workers\":$workers," |
                sed 's/.*"ops_per_s":\([0-9.]*\).*/\1/' | sort -n | tail -1
        }
        s=$(best single)
        c=$(best cluster)
        awk -v m="$mode" -v w="$workers" -v s="$s" -v c="$c" \
            'BEGIN { printf "  %-11s %2d workers: single %9.1f  cluster %9.1f  cluster/single %.2f\n", m, w, s, c, c / s }'
    done
done
