#!/bin/sh
# `make bench-redlock`: RedLock over three masters, dlock against
# node-redlock (the anchor that is a RedLock) on the same three private
# servers in one run, beside dlock's plain lock on one of them (what the
# majority costs).
#
#   bench/redlock.sh BUILD_DIR
#
# 1. Starts three private redis-servers (unix sockets in a temp dir, port
#    0, no persistence, each in a session of its own) and stops them by
#    PID at the end, whatever happens.
# 2. dlock-bench, BENCH_SECONDS (default 5) per case after a 0.5 s
#    warm-up, FLUSHALL on every master before each case: the plain lock on
#    the first master, uncontended with 1 and 8 workers; then --redlock
#    over the three, uncontended with 1 and 8 workers and contended with 8.
# 3. node-redlock (npm "redlock" 5.0.0-beta.2 on ioredis 5, installed with
#    npm into the temp dir or taken from BENCH_NODE_MODULES, as bench/run.sh
#    does) given the three masters, a connection each: the same RedLock
#    cases. Skipped with a message without node or npm.
# 4. Prints each result as one JSON line on stdout (progress on stderr),
#    with "steal_pct", the time the hypervisor took from this VM's CPUs
#    during the case; then a summary: dlock's RedLock pairs/s against
#    node-redlock's and against dlock's plain lock on one master.
#
# Environment: BENCH_SECONDS (5), BENCH_NODE_MODULES. redis-server and
# redis-cli are taken from PATH.
set -eu
. "$(dirname "$0")/../scripts/servers.sh"

build=${1:-build}
bin="$build/bench/dlock-bench"
here=$(cd "$(dirname "$0")/.." && pwd)
secs=${BENCH_SECONDS:-5}
[ -x "$bin" ] || { echo "bench: $bin not built (run make)" >&2; exit 1; }
need redis-server redis-cli

private_dir dlock-redlock
masters=""
socks=""
pids=""
# stop_servers stops $rpid: every master started so far.
trap 'rpid="$pids $rpid"; stop_servers' EXIT
for i in 1 2 3; do
    mkdir "$dir/m$i"
    start_redis "$dir/m$i"
    pids="$pids $rpid"
    socks="$socks $sock"
    masters="$masters${masters:+,}unix://$sock"
done
rpid=""
echo "bench: three private redis-servers $(redis-server --version | sed 's/.*v=\([^ ]*\).*/\1/')" \
    "(pids$pids); $(machine_notes)" >&2

results=""
# Run one case: COMMAND...; prints its JSON line with the steal.
run_case() {
    for _s in $socks; do redis-cli -s "$_s" FLUSHALL >/dev/null; done
    steal_mark
    if ! line=$("$@"); then
        echo "bench: failed: $*" >&2
        return 1
    fi
    line=$(printf '%s\n' "$line" | sed "s/}\$/,\"steal_pct\":$(steal_since)}/")
    echo "$line"
    results="$results$line
"
}
first=${masters%%,*}
for w in 1 8; do
    run_case "$bin" -u "$first" --mode uncontended --workers "$w" --seconds "$secs"
done
for c in "uncontended 1" "uncontended 8" "contended 8"; do
    # shellcheck disable=SC2086 # two words: the mode and the workers
    set -- $c
    run_case "$bin" -u "$masters" --redlock --mode "$1" --workers "$2" --seconds "$secs"
done
node_redlock "$dir/node"
if [ -n "$nm" ]; then
    for c in "uncontended 1" "uncontended 8" "contended 8"; do
        # shellcheck disable=SC2086
        set -- $c
        run_case env NODE_PATH="$nm" node "$here/bench/anchors/node-redlock.js" -u "$masters" \
            --mode "$1" --workers "$2" --seconds "$secs" || echo "bench: node-redlock $c failed" >&2
    done
fi

# pick LIB MODE WORKERS KIND: the case's JSON line (KIND redlock or plain).
pick() {
    printf '%s' "$results" | grep "\"lib\":\"$1\",\"mode\":\"$2\",\"workers\":$3," |
        if [ "$4" = redlock ]; then grep '"kind":"redlock"'; else grep -v '"kind":"redlock"'; fi | head -1
}
rate() { field "$(pick "$@")" ops_per_s; }
ratio() {
    awk -v a="$1" -v b="$2" 'BEGIN { if (a == "" || b == "" || b == 0) print "not measured"; else printf "%.2fx", a / b }'
}
echo "summary (BENCH_SECONDS=$secs, $(nproc) cores, RedLock over 3 masters; JSON lines above, grep '^{'):"
for c in "uncontended 1" "uncontended 8" "contended 8"; do
    # shellcheck disable=SC2086
    set -- $c
    d=$(rate dlock "$1" "$2" redlock)
    n=$(rate node-redlock "$1" "$2" redlock)
    line="  $1@$2: dlock $d pairs/s, node-redlock ${n:-(not run)}: $(ratio "$d" "$n")"
    p=$(rate dlock "$1" "$2" plain)
    [ -n "$p" ] && line="$line; $(ratio "$d" "$p") of dlock's plain lock on one master ($p)"
    w=$(field "$(pick node-redlock "$1" "$2" redlock)" wait_p99_us)
    [ "$1" = contended ] && line="$line; wait p99 $(field "$(pick dlock "$1" "$2" redlock)" wait_p99_us) against ${w:-?} us"
    echo "$line"
done
