#!/bin/sh
# `make demo`: the seeds' oversell problem on an embedded default. Starts a
# private redis-server on a unix socket in a temp dir, runs dlock-oversell
# against it (first without a lock, then with one) and stops the server by
# PID, whatever happens.
#   demo/run.sh BUILD_DIR [dlock-oversell options, e.g. -n 1000 -w 32]
set -eu
build=${1:-build}
[ $# -gt 0 ] && shift
bin="$build/demo/dlock-oversell"
[ -x "$bin" ] || { echo "demo: $bin not built (run make)" >&2; exit 1; }

dir=$(mktemp -d "${TMPDIR:-/tmp}/dlock-demo.XXXXXX")
pid=""
cleanup() {
    if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
    rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

redis-server --port 0 --unixsocket "$dir/redis.sock" --unixsocketperm 700 \
    --save '' --appendonly no --dir "$dir" --logfile "$dir/redis.log" &
pid=$!
i=0
until [ -S "$dir/redis.sock" ]; do
    i=$((i + 1))
    if [ $i -gt 100 ] || ! kill -0 "$pid" 2>/dev/null; then
        echo "demo: redis-server did not start; its log:" >&2
        cat "$dir/redis.log" >&2 || true
        exit 1
    fi
    sleep 0.05
done
echo "demo: private redis-server (pid $pid) on unix://$dir/redis.sock"
"$bin" -u "unix://$dir/redis.sock" "$@"
