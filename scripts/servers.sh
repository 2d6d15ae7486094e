# Sourced by demo/run.sh and bench/*.sh: start the private servers they
# run against. sh functions cannot return values, so each sets variables
# of the caller; the caller stops the processes by PID.

# Servers run in a session of their own (setsid, which keeps the PID), as
# a daemon would. With the kernel's scheduler autogroups (on in Debian), a
# server left in our session shares one CPU group with the benchmark's
# client threads and gets a fraction of a core when they are many: measured
# here, 16-17k instead of 23-31k lock pairs/s for 8 client threads, and a
# distorted floor. In its own session it competes as a real server does.
daemon_session=""
command -v setsid >/dev/null 2>&1 && daemon_session=setsid

# machine_notes: what on this machine may move the tail of a benchmark,
# for its header line. DAMON (the kernel's memory access monitor), when a
# kdamond runs, scans page tables every sampling interval and takes a CPU
# for tens of milliseconds each time: on one 2-vCPU VM, 20-35 ms
# every 545 ms, which set the p99 wait of 64 processes on one lock
# (docs/BENCHMARKS.md).
machine_notes() {
    _notes=""
    for _k in /sys/kernel/mm/damon/admin/kdamonds/[0-9]*; do
        [ "$(cat "$_k/state" 2>/dev/null)" = on ] || continue
        _us=$(cat "$_k"/contexts/0/monitoring_attrs/intervals/sample_us 2>/dev/null)
        _notes="${_notes:+$_notes, }DAMON kdamond on (sampling every ${_us:-?} us)"
    done
    echo "${_notes:-no DAMON kdamond running}"
}

# steal_mark, then steal_since: the time the hypervisor took from this
# VM's CPUs in between (/proc/stat's steal: the CPUs were ready to run,
# the host ran something else), in % of one core. On one 2-vCPU AMD EPYC VM
# (2026-11-29) it came in bursts of tens of milliseconds that stretched every lock
# hand-off falling in them (docs/BENCHMARKS.md).
steal_mark() {
    _steal0=$(awk '/^cpu / { print $9 }' /proc/stat)
    _steal_t0=$(date +%s%N)
}
steal_since() {
    awk -v s0="$_steal0" -v s1="$(awk '/^cpu / { print $9 }' /proc/stat)" -v t0="$_steal_t0" \
        -v t1="$(date +%s%N)" -v hz="$(getconf CLK_TCK)" 'BEGIN {
        printf "%.1f", (s1 - s0) / hz / ((t1 - t0) / 1e9) * 100 }'
}

# Rounds of a benchmark whose median steal is over this (% of one core)
# give no verdict (NOISY): on a host that loaded, the ratios say more
# about the host than about the code (measured; CHANGELOG.md).
steal_noisy_pct=10
# noisy_verdict STEAL: that verdict for rounds of median steal STEAL, or
# nothing when they may be judged.
noisy_verdict() {
    awk -v s="$1" -v m="$steal_noisy_pct" 'BEGIN { if (s > m) printf "NOISY (steal over %d %%: no verdict)", m }'
}

# median_col C [D]: of the lines on stdin, "median min max" of column C,
# or of column C over column D.
median_col() {
    awk -v c="$1" -v d="${2:-0}" '{ v[NR] = d ? $c / $d : $c } END {
        n = NR
        for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (v[j] < v[i]) { x = v[i]; v[i] = v[j]; v[j] = x }
        printf "%.4f %.4f %.4f\n", n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2, v[1], v[n] }'
}

# start_redis DIR [WRAPPER...]: a redis-server on the unix socket
# DIR/redis.sock (no TCP port, no persistence), run under WRAPPER if given
# (e.g. taskset -c 0). Sets rpid and sock; waits until it answers PING.
start_redis() {
    _dir=$1
    shift
    sock="$_dir/redis.sock"
    $daemon_session "$@" redis-server --port 0 --unixsocket "$sock" --unixsocketperm 700 \
        --save '' --appendonly no --dir "$_dir" --logfile "$_dir/redis.log" &
    rpid=$!
    _i=0
    until redis-cli -s "$sock" PING >/dev/null 2>&1; do
        _i=$((_i + 1))
        if [ $_i -gt 100 ] || ! kill -0 "$rpid" 2>/dev/null; then
            echo "redis-server did not start; its log:" >&2
            cat "$_dir/redis.log" >&2 || true
            return 1
        fi
        sleep 0.05
    done
}

# start_seckill PREFIX SECKILL [SERVE OPTION...]: `SECKILL serve --listen
# 127.0.0.1:0 OPTIONS` (an OPTION --listen unix:PATH wins), output in
# PREFIX.out and PREFIX.err. Sets spid, and surl and port from its
# "listening on" line: http://127.0.0.1:PORT and PORT, or unix:PATH and 0.
start_seckill() {
    _prefix=$1
    _bin=$2
    shift 2
    $daemon_session "$_bin" serve --listen 127.0.0.1:0 "$@" >"$_prefix.out" 2>"$_prefix.err" &
    spid=$!
    port=""
    surl=""
    _i=0
    while [ -z "$surl" ]; do
        _i=$((_i + 1))
        if [ $_i -gt 300 ] || ! kill -0 "$spid" 2>/dev/null; then
            echo "seckill serve did not start; its log:" >&2
            cat "$_prefix.err" >&2
            return 1
        fi
        sleep 0.05
        port=$(sed -n 's|.*listening on http://127\.0\.0\.1:\([0-9]*\).*|\1|p' "$_prefix.out")
        surl=${port:+http://127.0.0.1:$port}
        [ -n "$surl" ] || surl=$(sed -n 's|.*listening on \(unix:[^ ]*\) .*|\1|p' "$_prefix.out")
    done
    port=${port:-0}
}

# field JSON NAME: one field of a flat JSON line (numbers, booleans).
field() { printf '%s\n' "$1" | sed -n "s/.*\"$2\":\([^,}]*\).*/\1/p"; }

# least_served JSON: a benchmark line's least served worker, in pairs/s
# (its share of the mean times the mean), or nothing: the rate a lock
# promises each of its users, where the total can come from one worker
# taking it again and again.
least_served() {
    awk -v r="$(field "$1" ops_per_s)" -v s="$(field "$1" share_min)" -v n="$(field "$1" workers)" \
        'BEGIN { if (r != "" && s != "" && n > 0) printf "%.1f\n", r * s / n }'
}

# private_dir NAME: a fresh temp dir in $dir; at exit, whatever happens,
# the processes in $spid and $rpid are stopped (by PID) and it is removed.
private_dir() {
    dir=$(mktemp -d "${TMPDIR:-/tmp}/$1.XXXXXX")
    rpid=""
    spid=""
    trap stop_servers EXIT
    trap 'exit 130' INT TERM
}

stop_servers() {
    for _p in $spid $rpid; do kill "$_p" 2>/dev/null || true; wait "$_p" 2>/dev/null || true; done
    rm -rf "$dir"
}

# need TOOL...: fail with a clear message when a program is not on PATH.
need() {
    for _t in "$@"; do
        command -v "$_t" >/dev/null 2>&1 || { echo "$_t not found in PATH" >&2; return 1; }
    done
}

# python_with MODULE [INTERPRETER...]: set py to the first interpreter (of
# the ones given, then python3 and /usr/bin/python3: a pyenv python3 first
# on PATH may lack Debian's modules) that can import MODULE; empty if none.
python_with() {
    _mod=$1
    shift
    py=""
    for _cand in "$@" python3 /usr/bin/python3; do
        if command -v "$_cand" >/dev/null 2>&1 && "$_cand" -c "import $_mod" 2>/dev/null; then
            py=$_cand
            return 0
        fi
    done
}

# The version in an npm package's package.json.
pkg_version() { sed -n 's/^  "version": *"\([^"]*\)".*/\1/p' "$1/package.json"; }

# node_redlock DIR: set nm to a node_modules directory holding the
# node-redlock anchor's packages (npm "redlock" 5.0.0-beta.2 on ioredis
# 5): BENCH_NODE_MODULES if set, else installed with npm under DIR; empty,
# with the reason on stderr, when node, npm or the packages are missing.
node_redlock() {
    nm=${BENCH_NODE_MODULES:-}
    if ! command -v node >/dev/null 2>&1; then
        echo "bench: skipping node-redlock: node not found (apt-get install nodejs npm)" >&2
        nm=""
        return 0
    fi
    if [ -z "$nm" ]; then
        if ! command -v npm >/dev/null 2>&1; then
            echo "bench: skipping node-redlock: npm not found" >&2
            return 0
        fi
        mkdir -p "$1"
        if npm install --prefix "$1" --no-audit --no-fund --silent redlock@5.0.0-beta.2 ioredis@5 \
            >"$1/npm.log" 2>&1; then
            nm="$1/node_modules"
        else
            echo "bench: skipping node-redlock: npm install failed:" >&2
            tail -5 "$1/npm.log" >&2
            return 0
        fi
    fi
    if [ -d "$nm/redlock" ] && [ -d "$nm/ioredis" ]; then
        echo "bench: node-redlock $(pkg_version "$nm/redlock"), ioredis $(pkg_version "$nm/ioredis")," \
            "node $(node --version)" >&2
    else
        echo "bench: skipping node-redlock: no redlock and ioredis in $nm" >&2
        nm=""
    fi
}
