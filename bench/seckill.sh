#!/bin/sh
# `make bench-seckill`: the flash-sale service end to end against the floor
# set by redis-benchmark running the very same order script, all in one run
# on one private redis-server.
#
#   bench/seckill.sh BUILD_DIR
#
# 1. Starts a private redis-server (unix socket in a temp dir, port 0, no
#    persistence) and stops it, and every seckill process, by PID at the
#    end, whatever happens.
# 2. Two scenarios:
#      flash  BENCH_USERS users (100000), one attempt each, for
#             BENCH_STOCK units (1000): a real flash sale, where almost
#             every answer is "sold out";
#      open   BENCH_OPEN_USERS users (100000) for as many units: every
#             request is an accepted order that is also persisted. The
#             lock strategy, one database commit per order (about 2k/s),
#             gets at most BENCH_OPEN_LOCK_USERS (20000) of them, so that
#             a round stays near ten seconds; rates are per second
#             either way.
# 3. Per scenario, BENCH_ROUNDS times (3), alternating:
#      floor  redis-benchmark -c C -n N -r 100000000 EVALSHA <seckill_order.lua>
#             5 seckill:{v:B}:stock :window :buyers :orders :pending
#             B 0 __rand_int__ __rand_int__ NOW (one order per call: user,
#             order id, clock), on a voucher B warmed with the scenario's
#             stock (so the same share of requests is accepted);
#      redis  `seckill serve --strategy redis` (SQLite, its default
#             --threads for the strategy unless BENCH_SERVE_THREADS is
#             set, --event-loop poll: the service as it runs behind a
#             proxy that keeps a pool of busy connections; with
#             BENCH_SERVE_MAX_CONNECTIONS, --max-connections that many
#             and the default's choice of loop instead; on loopback TCP,
#             or with BENCH_SERVE_LISTEN=unix on a unix socket, the
#             transport the floor's redis-benchmark uses, as behind a
#             proxy on the same host) and `seckill load --stock S --users
#             N --concurrency C`, then `seckill verify` (waits for the
#             writer);
#      lock   the same with --strategy lock.
#    C is BENCH_CONCURRENCY (64) for both redis-benchmark and seckill load.
#    The best rate of each over the rounds is compared (for the floor too,
#    the strict side): on a shared machine outside load only ever slows a
#    measurement down, so the best round is the closest to the capacity.
#    BENCH_STRATEGIES ("redis lock") and BENCH_SCENARIOS ("flash open")
#    choose what runs. With BENCH_CSV_DIR, each sale's `seckill load --csv`
#    time series goes to BENCH_CSV_DIR/seckill-SCENARIO-STRATEGY.csv (the
#    last round's; bench/plot.sh draws them).
# 4. Prints one JSON line per measurement on stdout (progress on stderr)
#    and a summary with the targets: redis strategy >= 40% of the floor;
#    issue 14's, redis / lock strategy >= 1.2 in the flash scenario and
#    redis strategy >= 65% of the floor in the open one.
#    Each line also has cpu_us_per_request: the CPU time (user + system)
#    that redis-server and the client (redis-benchmark), or redis-server,
#    `seckill serve` (HTTP threads and writer) and `seckill load`, spent per
#    request. Outside load changes wall-clock rates a lot and CPU per
#    request little, so on a shared machine the second ratio in the summary
#    (floor CPU / service CPU, lowest of the rounds) is the steadier one.
#    Status 0 even on MISS unless BENCH_STRICT=1; non-zero if a sale did not
#    verify.
#
# The machine is shared and has 2 cores: the load generator, the HTTP
# server, the order writer and redis-server all compete for them, exactly
# as redis-benchmark and redis-server do for the floor.
set -eu
. "$(dirname "$0")/../scripts/servers.sh"

build=${1:-build}
here=$(cd "$(dirname "$0")/.." && pwd)
seckill="$build/seckill/seckill"
users=${BENCH_USERS:-100000}
stock=${BENCH_STOCK:-1000}
open_users=${BENCH_OPEN_USERS:-100000}
open_lock_users=${BENCH_OPEN_LOCK_USERS:-20000}
conc=${BENCH_CONCURRENCY:-64}
threads_opt=${BENCH_SERVE_THREADS:+--threads $BENCH_SERVE_THREADS}
if [ -n "${BENCH_SERVE_MAX_CONNECTIONS:-}" ]; then
    loop_opt="--max-connections $BENCH_SERVE_MAX_CONNECTIONS"
    loop="max-connections $BENCH_SERVE_MAX_CONNECTIONS"
else
    loop_opt="--event-loop poll"
    loop=poll
fi
case "${BENCH_SERVE_LISTEN:-tcp}" in
    tcp) listen=tcp ;;
    unix) listen=unix ;;
    *) echo "bench: BENCH_SERVE_LISTEN is tcp or unix, not '$BENCH_SERVE_LISTEN'" >&2; exit 1 ;;
esac
scenarios=${BENCH_SCENARIOS:-flash open}
strategies=${BENCH_STRATEGIES:-redis lock}
rounds=${BENCH_ROUNDS:-3}
strict=${BENCH_STRICT:-0}

[ -x "$seckill" ] || { echo "bench: $seckill not built (run make)" >&2; exit 1; }
need redis-server redis-cli redis-benchmark

private_dir seckill-bench

start_redis "$dir"
echo "bench: private redis-server $(redis-server --version | sed 's/.*v=\([^ ]*\).*/\1/') (pid $rpid) on unix://$sock" >&2
sha=$(redis-cli -s "$sock" -x SCRIPT LOAD <"$here/seckill/lua/seckill_order.lua")
case "$sha" in *[!0-9a-f]*|"") echo "bench: SCRIPT LOAD failed: $sha" >&2; exit 1 ;; esac

# floor SCENARIO STOCK N: redis-benchmark on voucher 999000001, warmed as
# the service would warm it.
floor() {
    redis-cli -s "$sock" FLUSHALL >/dev/null
    b=999000001
    k="seckill:{v:$b}"
    redis-cli -s "$sock" SET "$k:stock" "$2" >/dev/null
    redis-cli -s "$sock" HSET "$k:window" begin 0 end 4102444800 >/dev/null
    now=$(date +%s)
    # A sanity check first: the script accepts one order on this layout.
    got=$(redis-cli -s "$sock" EVALSHA "$sha" 5 "$k:stock" "$k:window" "$k:buyers" "$k:orders" "$k:pending" \
        "$b" 0 0 1 "$now" | head -1)
    [ "$got" = 0 ] || { echo "bench: the order script answered '$got', not 0" >&2; exit 1; }
    redis-cli -s "$sock" SET "$k:stock" "$2" >/dev/null
    csv=$(redis-benchmark -s "$sock" -c "$conc" -P 1 -n "$3" -r 100000000 -q --csv EVALSHA "$sha" 5 \
        "$k:stock" "$k:window" "$k:buyers" "$k:orders" "$k:pending" "$b" 0 __rand_int__ __rand_int__ "$now" |
        awk -F'","' 'END { print $2, $5, $7 }')
    accepted=$(redis-cli -s "$sock" XLEN "$k:orders")
    echo "$csv" | awk -v s="$1" -v n="$3" -v c="$conc" -v a="$accepted" '{
        printf "{\"tool\":\"redis-benchmark\",\"scenario\":\"%s\",\"requests\":%d,\"concurrency\":%d,", s, n, c
        printf "\"requests_per_s\":%.1f,\"p50_ms\":%.3f,\"p99_ms\":%.3f,\"accepted\":%d}\n", $1, $2, $3, a - 1 }'
}

# e2e SCENARIO STRATEGY STOCK N: serve, load, verify; one JSON line.
e2e() {
    redis-cli -s "$sock" FLUSHALL >/dev/null
    db="$dir/$1-$2.db"
    listen_opt=""
    [ "$listen" = unix ] && listen_opt="--listen unix:$dir/http.sock"
    start_seckill "$dir/serve" "$seckill" --redis "unix://$sock" --db "sqlite://$db" --strategy "$2" \
        --secret-file "$dir/secret" $threads_opt $loop_opt $listen_opt
    # The thread count it chose, from its "(strategy S, N threads)" line.
    threads=$(sed -n 's/.*strategy [a-z]*, \([0-9]*\) threads.*/\1/p' "$dir/serve.out")
    st=0
    "$seckill" load --url "$surl" --stock "$3" --users "$4" --concurrency "$conc" \
        --secret-file "$dir/secret" ${BENCH_CSV_DIR:+--csv "$BENCH_CSV_DIR/seckill-$1-$2.csv"} \
        >"$dir/load.out" || st=$?
    json=$(grep '^{' "$dir/load.out" || true)
    v=$(field "$json" voucher)
    vst=0
    "$seckill" verify --db "sqlite://$db" --redis "unix://$sock" --voucher "${v:-0}" --wait 300 \
        >"$dir/verify.out" || vst=$?
    kill "$spid" 2>/dev/null || true
    wait "$spid" 2>/dev/null || true
    spid=""
    [ $st -eq 0 ] && [ $vst -eq 0 ] || {
        echo "bench: $2/$1: load exited $st, verify exited $vst:" >&2
        cat "$dir/load.out" "$dir/verify.out" >&2
        touch "$dir/bad"
    }
    printf '%s\n' "$json" | sed "s/^{\"tool\":\"seckill-load\",/{\"tool\":\"seckill-load\",\"scenario\":\"$1\",\"strategy\":\"$2\",\"serve_threads\":${threads:-0},\"serve_loop\":\"$loop\",\"serve_listen\":\"$listen\",\"verified\":$([ $vst -eq 0 ] && echo true || echo false),/"
}

# best A B: the larger of two rates (B may be empty: a failed run).
best() { awk -v a="$1" -v b="${2:-0}" 'BEGIN { print (b > a ? b : a) }'; }
# least A B: the smaller of two positive numbers (0 means none yet).
least() { awk -v a="$1" -v b="${2:-0}" 'BEGIN { print (a == 0 || (b > 0 && b < a) ? b : a) }'; }

# cpu_mark: CPU seconds used so far by the waited-for children of this
# shell (times) plus the running redis-server (/proc, clock ticks), into
# $cpu. It must run in this shell: in a subshell (a pipeline, $(...))
# `times` sees no children.
cpu_mark() {
    times >"$dir/times"
    read -r _t <"/proc/$rpid/stat"
    echo "$_t" >"$dir/rstat"
    cpu=$(awk -v hz="$(getconf CLK_TCK)" 'NR == FNR && FNR == 2 { split($1, u, "m"); split($2, s, "m")
        c = u[1] * 60 + u[2] + s[1] * 60 + s[2] } FILENAME ~ /rstat$/ { r = ($14 + $15) / hz }
        END { printf "%.3f", c + r }' "$dir/times" "$dir/rstat")
}
# with_cpu LINE CPU0 CPU1 N: LINE with "cpu_us_per_request" added.
with_cpu() {
    _c=$(awk -v a="$2" -v b="$3" -v n="$4" 'BEGIN { printf "%.1f", (b - a) * 1e6 / n }')
    printf '%s\n' "$1" | sed "s/^{/{\"cpu_us_per_request\":$_c,/"
}

summary=""
steal_mark
for sc in $scenarios; do
    case "$sc" in
        flash) s=$stock; n=$users ;;
        open) s=$open_users; n=$open_users ;;
        *) echo "bench: unknown scenario $sc" >&2; exit 1 ;;
    esac
    echo "bench: $sc: $n users for $s units, concurrency $conc, $rounds rounds" >&2
    fr=0
    rr=0
    lr=0
    fc=0
    rc=0
    lc=0
    round=0
    while [ $round -lt "$rounds" ]; do
        round=$((round + 1))
        cpu_mark
        c0=$cpu
        floor "$sc" "$s" "$n" >"$dir/line"
        cpu_mark
        line=$(with_cpu "$(cat "$dir/line")" "$c0" "$cpu" "$n")
        echo "$line"
        fr=$(best "$fr" "$(field "$line" requests_per_s)")
        fc=$(least "$fc" "$(field "$line" cpu_us_per_request)")
        # Not in $(...): a subshell would not see spid in the EXIT trap,
        # nor would its children count in `times`.
        for strat in $strategies; do
            sn=$n
            ss=$s
            if [ "$sc" = open ] && [ "$strat" = lock ] && [ "$n" -gt "$open_lock_users" ]; then
                sn=$open_lock_users
                ss=$open_lock_users
            fi
            cpu_mark
            c0=$cpu
            e2e "$sc" "$strat" "$ss" "$sn" >"$dir/line"
            cpu_mark
            line=$(with_cpu "$(cat "$dir/line")" "$c0" "$cpu" "$sn")
            echo "$line"
            x=$(field "$line" requests_per_s)
            y=$(field "$line" cpu_us_per_request)
            if [ "$strat" = redis ]; then rr=$(best "$rr" "$x"); rc=$(least "$rc" "$y"); fi
            if [ "$strat" = lock ]; then lr=$(best "$lr" "$x"); lc=$(least "$lc" "$y"); fi
        done
    done
    summary="$summary$(awk -v s="$sc" -v f="$fr" -v r="$rr" -v l="$lr" -v fc="$fc" -v rc="$rc" -v lc="$lc" 'BEGIN {
        p = 100 * r / f
        q = rc > 0 ? 100 * fc / rc : 0
        printf "  %-6s rate: floor %7.0f req/s, redis %7.0f = %5.1f%% (target >= 40%%): %s, lock %7.0f = %5.1f%%\n",
            s, f, r, p, (p >= 40 ? "PASS" : "MISS"), l, 100 * l / f
        printf "  %-6s CPU per request: floor %6.1f us, redis %6.1f us (floor/redis = %5.1f%%: %s), lock %6.1f us\n",
            s, fc, rc, q, (q >= 40 ? "PASS" : "MISS"), lc
        # Issue 14: a flash sale answered mostly without Redis, and the
        # open sale closer to its script.
        if (s == "flash" && l > 0)
            printf "  %-6s issue 14: redis / lock strategy = %.2f (target >= 1.2): %s\n", s, r / l, (r >= 1.2 * l ? "PASS" : "MISS")
        if (s == "open")
            printf "  %-6s issue 14: redis strategy / floor = %.2f (target >= 0.65): %s\n", s, r / f, (r >= 0.65 * f ? "PASS" : "MISS") }')
"
done
echo "summary: best of $rounds rounds ($(nproc) cores, concurrency $conc, serve threads ${BENCH_SERVE_THREADS:-per strategy}, loop $loop, listen $listen," \
    "steal $(steal_since) % of a core over the run; JSON lines above, grep '^{'):"
printf '%s' "$summary"
[ -e "$dir/bad" ] && exit 1
if [ "$strict" = 1 ]; then
    case "$summary" in *MISS*) exit 1 ;; esac
fi
exit 0
