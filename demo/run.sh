#!/bin/sh
# `make demo`: the flash sale, on the embedded default.
#
#   demo/run.sh BUILD_DIR
#
# Act 1 (a few seconds): the seeds' problem. dlock-oversell sells a stock
# with a read-check-deduct race, first without a lock (it oversells), then
# under one dlock lock (exactly the stock), on a private redis-server.
#
# Act 2: the flash sale. For each strategy (redis, then lock) it starts
# `seckill serve` with no --redis (so the service starts its own private
# redis-server) and a SQLite file in a temp dir, then
#   seckill load   --stock 1000 --users 20000 --concurrency 200
#                  (one new voucher with 1000 units; 20000 users, all
#                  released at once over 200 keep-alive connections)
#   seckill verify --db ... --redis ... --voucher ID
#                  (waits for the order stream to drain, then checks the
#                  invariants and that Redis and the database agree)
# and prints both runs side by side. Everything runs on loopback and unix
# sockets; every process is stopped by PID and the temp dir removed,
# whatever happens.
#
# Act 3 (a second or two): the admission limits. DEMO_LIMIT_STOCK (100)
# users each send 20 orders at once to a serve with --rate-per-user 1/s:
# each user's first admitted order buys, the others get 429 rate_limited
# before reaching the stock, and the sale sells exactly its stock.
#
# Environment: DEMO_USERS (20000), DEMO_STOCK (1000), DEMO_CONCURRENCY (200),
# DEMO_LIMIT_STOCK (100).
# Exit status 0 only when every sale sold exactly its stock (and the two
# of act 2 verified).
set -eu
. "$(dirname "$0")/../scripts/servers.sh"
build=${1:-build}
seckill="$build/seckill/seckill"
oversell="$build/demo/dlock-oversell"
users=${DEMO_USERS:-20000}
stock=${DEMO_STOCK:-1000}
conc=${DEMO_CONCURRENCY:-200}
for b in "$seckill" "$oversell"; do
    [ -x "$b" ] || { echo "demo: $b not built (run make)" >&2; exit 1; }
done

private_dir dlock-demo

# ---- act 1: the oversell the lock prevents --------------------------------
echo "== act 1: the seeds' oversell, without and with a lock"
start_redis "$dir"
"$oversell" -u "unix://$sock" -n 200 -w 16
kill "$rpid" 2>/dev/null || true
wait "$rpid" 2>/dev/null || true
rpid=""

# ---- act 2: the flash sale, both strategies --------------------------------
# sale STRATEGY: serve, load, verify; leaves $dir/STRATEGY/{load,verify}.out.
sale() {
    s=$1
    d="$dir/$s"
    mkdir -p "$d"
    start_seckill "$d/serve" "$seckill" --db "sqlite://$d/seckill.db" --secret-file "$dir/secret" \
        --strategy "$s"
    # From serve's start-up line: "..., redis unix:///.../redis.sock
    # (private redis-server pid N), db ...".
    redis=$(sed -n 's/.* redis \(unix:[^ ]*\) (private redis-server pid [0-9]*).*/\1/p' "$d/serve.err")
    if [ -z "$redis" ]; then
        echo "demo: cannot find the private redis-server in serve's start-up line:" >&2
        cat "$d/serve.err" >&2
        exit 1
    fi
    echo
    echo "== act 2, strategy $s: $users users at once for $stock units (seckill on :$port, Redis $redis)"
    st=0
    "$seckill" load --url "http://127.0.0.1:$port" --stock "$stock" --users "$users" \
        --concurrency "$conc" --secret-file "$dir/secret" >"$d/load.out" || st=$?
    grep -v '^{' "$d/load.out" || true
    [ $st -eq 0 ] || echo "demo: seckill load exited $st" >&2
    json=$(grep '^{' "$d/load.out" || true)
    voucher=$(field "$json" voucher)
    st=0
    "$seckill" verify --db "sqlite://$d/seckill.db" --redis "$redis" --voucher "${voucher:-0}" \
        --wait 60 >"$d/verify.out" || st=$?
    echo "  verify: $(cat "$d/verify.out")"
    echo "$st" >"$d/verify.status"
    kill "$spid" 2>/dev/null || true
    wait "$spid" 2>/dev/null || true
    spid=""
}

sale redis
sale lock

# ---- act 3: admission limits ---------------------------------------------------
# A short sale under --rate-per-user 1/s: every user hammers (20 orders at
# once); the first admitted one buys, the rest are refused before the
# stock (429 rate_limited), and the sale still sells exactly its stock.
limits() {
    d="$dir/limits"
    mkdir -p "$d"
    start_seckill "$d/serve" "$seckill" --db "sqlite://$d/seckill.db" --secret-file "$dir/secret" \
        --rate-per-user 1/s
    echo
    echo "== act 3, admission limits: $lstock users each send 20 orders at once for $lstock units," \
        "under --rate-per-user 1/s"
    st=0
    "$seckill" load --url "http://127.0.0.1:$port" --stock "$lstock" --users "$lstock" --attempts 20 \
        --concurrency 50 --secret-file "$dir/secret" >"$d/load.out" || st=$?
    grep -v '^{' "$d/load.out" || true
    [ $st -eq 0 ] || echo "demo: seckill load exited $st" >&2
    json=$(grep '^{' "$d/load.out" || true)
    created=$(field "$json" created)
    limited=$(field "$json" rate_limited)
    echo "$st ${created:-0} ${limited:-0}" >"$d/result"
    kill "$spid" 2>/dev/null || true
    wait "$spid" 2>/dev/null || true
    spid=""
}
lstock=${DEMO_LIMIT_STOCK:-100}
limits

# ---- side by side ------------------------------------------------------------
row() { # LABEL FIELD [FORMAT]
    r=$(field "$(grep '^{' "$dir/redis/load.out" || true)" "$2")
    l=$(field "$(grep '^{' "$dir/lock/load.out" || true)" "$2")
    printf "  %-26s %12s %12s\n" "$1" "${r:--}" "${l:--}"
}
orders() { sed -n 's/.*orders \([0-9]*\) (.*/\1/p' "$dir/$1/verify.out" | head -1; }
verdict() { [ "$(cat "$dir/$1/verify.status")" = 0 ] && echo OK || echo "FAIL($(cat "$dir/$1/verify.status"))"; }
echo
echo "== $users users, $stock units, $conc connections, SQLite + private Redis, $(nproc) cores"
printf "  %-26s %12s %12s\n" "" "redis" "lock"
row "201 created" created
row "410 sold_out" sold_out
row "409 already_ordered" already_ordered
row "429 busy" busy
row "5xx" server_error
row "transport errors" transport_error
row "requests/s" requests_per_s
row "latency p50 ms" p50_ms
row "latency p99 ms" p99_ms
row "latency p999 ms" p999_ms
printf "  %-26s %12s %12s\n" "orders in the database" "$(orders redis)" "$(orders lock)"
printf "  %-26s %12s %12s\n" "seckill verify" "$(verdict redis)" "$(verdict lock)"
for s in redis lock; do
    [ "$(cat "$dir/$s/verify.status")" = 0 ] && [ "$(orders "$s")" = "$stock" ] || exit 1
done
echo "Both strategies sold exactly $stock units, one per user, and the database agrees."
read -r lst lcreated llimited <"$dir/limits/result"
[ "$lst" = 0 ] && [ "$lcreated" = "$lstock" ] && [ "$llimited" -gt 0 ] || exit 1
echo "Under --rate-per-user 1/s, $llimited orders were refused before the stock and the sale still sold" \
    "exactly $lstock units."
