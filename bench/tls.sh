#!/bin/sh
# `make bench-tls`: what TLS costs the library, measured side by side: one
# private redis-server listening on a plaintext and a TLS port, and
# dlock-bench against each in turn, same cases, same run.
#
#   bench/tls.sh BUILD_DIR
#
# Cases: uncontended and contended, 1, 8 and 64 workers, BENCH_SECONDS
# (default 5) each. Prints one JSON line per run (dlock-bench's, with
# "transport" added) and a table of pairs/s, plaintext against TLS, with
# the ratio. Certificates from scripts/tls-certs.sh (EC P-256; TLS 1.3).
set -eu
build=${1:?usage: bench/tls.sh BUILD_DIR}
here=$(cd "$(dirname "$0")/.." && pwd)
bench=$build/bench/dlock-bench
secs=${BENCH_SECONDS:-5}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/dlock-bench-tls-XXXXXX")
pid=""
cleanup() {
    [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT INT TERM

"$here/scripts/tls-certs.sh" "$tmp/certs"
ports=$(perl -MIO::Socket::INET -e 'for (1..2) { push @s, IO::Socket::INET->new(Listen => 1, LocalAddr => "127.0.0.1", LocalPort => 0) or die } print join(" ", map { $_->sockport } @s)')
set -- $ports
port=$1 tport=$2
# Its own session, as bench/run.sh does: the scheduler then does not
# group it with the benchmark's threads.
setsid redis-server --port "$port" --bind 127.0.0.1 --tls-port "$tport" \
    --tls-cert-file "$tmp/certs/server.pem" --tls-key-file "$tmp/certs/server.key" \
    --tls-ca-cert-file "$tmp/certs/ca.pem" --tls-auth-clients no \
    --save '' --appendonly no --dir "$tmp" --logfile "$tmp/redis.log" &
pid=$!
for _ in $(seq 100); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.05; done

plain_url="redis://127.0.0.1:$port"
tls_url="rediss://127.0.0.1:$tport?cacert=$tmp/certs/ca.pem"
out=$tmp/results
: >"$out"
for mode in uncontended contended; do
    for workers in 1 8 64; do
        for transport in plaintext tls; do
            url=$plain_url
            [ "$transport" = tls ] && url=$tls_url
            redis-cli -p "$port" flushall >/dev/null
            line=$("$bench" -u "$url" --mode "$mode" --workers "$workers" --seconds "$secs")
            line="{\"transport\":\"$transport\",${line#\{}"
            echo "$line"
            echo "$mode $workers $transport $(echo "$line" | sed 's/.*"ops_per_s":\([0-9.]*\).*/\1/')" >>"$out"
        done
    done
done
echo
printf '%-12s %7s %12s %12s %7s\n' mode workers plaintext tls ratio
awk '{ k = $1 " " $2; if ($3 == "plaintext") p[k] = $4; else t[k] = $4; order[k] = NR }
     END { n = 0; for (k in order) keys[++n] = k
           for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (order[keys[j]] < order[keys[i]]) { x = keys[i]; keys[i] = keys[j]; keys[j] = x }
           for (i = 1; i <= n; i++) { split(keys[i], f, " ")
               printf "%-12s %7s %12.0f %12.0f %6.2f\n", f[1], f[2], p[keys[i]], t[keys[i]], t[keys[i]] / p[keys[i]] } }' "$out"
