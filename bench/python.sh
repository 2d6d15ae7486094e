#!/bin/sh
# `make bench` (after bench/run.sh): dlock's Python package against
# redis-py's Lock, in one run on one private server, with the targets of
# issue 16.
#
#   bench/python.sh BUILD_DIR
#
# The package is taken from bindings/python with BUILD_DIR's libdlock.so
# (PYTHONPATH, DLOCK_LIBRARY); redis-py from Debian's python3-redis. The
# loop is bench/pylocks.py's, the one the redis-py anchor of bench/run.sh
# runs: uncontended (each worker its own lock) and contended (one lock),
# 8 and 64 workers, as processes (each with its own connection or Client),
# as threads of one process (sharing one connection pool or Client) and as
# asyncio tasks of one process (redis.asyncio's Lock; dlock's `async with`),
# BENCH_SECONDS (5) each after a 0.5 s warm-up, the two libraries one
# right after the other in every case, FLUSHALL before each. Each result
# is one JSON line on stdout (progress on stderr), then a summary with the
# ratios and the targets:
#   uncontended (8 and 64 workers): dlock >= 2x redis-py pairs/s
#   contended at 64 workers:        dlock >= 10x redis-py pairs/s
#   contended at 64 workers:        dlock's p99 wait (the acquire call)
#                                   at least 10x shorter than redis-py's
# The contended cases also run dlock's fair lock (--fair), shown beside
# them without a target of its own: a plain-lock release wakes one waiter
# in every process that waits, a fair release only the queue's head. The
# uncontended cases of processes and threads also run pylocks.py's floor
# (--lib floor: SET NX PX and a compare-and-delete as bytes encoded once
# on a bare socket, no library), which bounds the ratio to redis-py that
# any Python lock could show on this machine.
# Status is 0 even on MISS unless BENCH_STRICT=1.
#
# With BENCH_PY_ROUNDS=R (1) each case runs R times, the libraries
# alternated within each round; the summary reads each library's median
# run (by pairs/s) and prints the ratio of every round beside it, as
# consecutive runs of one build differ by up to a fifth on a small VM.
#
# Environment: BENCH_SECONDS (5), BENCH_STRICT (0), BENCH_PY_ROUNDS (1), BENCH_PYTHON (the
# interpreter; default the first of python3, /usr/bin/python3 that has
# the redis module), BENCH_PY_WORKERS ("8 64"), BENCH_PY_KINDS
# ("processes threads asyncio"; also "asyncio-processes": processes of
# one asyncio task each, as an asyncio server's worker processes).
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
. "$here/scripts/servers.sh"

build=${1:-build}
lib=$(cd "$build" && pwd)/libdlock.so
secs=${BENCH_SECONDS:-5}
strict=${BENCH_STRICT:-0}
workers_list=${BENCH_PY_WORKERS:-8 64}
kinds=${BENCH_PY_KINDS:-processes threads asyncio}
rounds=${BENCH_PY_ROUNDS:-1}
case $rounds in '' | *[!0-9]* | 0) echo "bench-python: BENCH_PY_ROUNDS must be a positive number" >&2; exit 64 ;; esac

[ -f "$lib" ] || { echo "bench-python: $lib not built (run make)" >&2; exit 1; }
need redis-server redis-cli
# shellcheck disable=SC2086 # BENCH_PYTHON: one interpreter or none
python_with redis ${BENCH_PYTHON:-}
if [ -z "$py" ]; then
    echo "bench-python: skipped: no python3 with the redis module (apt-get install python3-redis)" >&2
    exit 0
fi
export PYTHONPATH="$here/bindings/python${PYTHONPATH:+:$PYTHONPATH}" DLOCK_LIBRARY="$lib"
"$py" -c 'import dlock' || { echo "bench-python: cannot import dlock with $lib" >&2; exit 1; }

private_dir dlock-pybench
start_redis "$dir"
echo "bench-python: redis-server $(redis-server --version | sed 's/.*v=\([^ ]*\).*/\1/') (pid $rpid)," \
    "$("$py" --version), redis-py $("$py" -c 'import redis; print(redis.__version__)')," \
    "dlock $("$py" -c 'import dlock; print(dlock.__version__, "on libdlock", dlock.library_version())')," \
    "load average $(cut -d' ' -f1-3 /proc/loadavg), $(machine_notes)" >&2

results=""
steal_mark
for kind in $kinds; do
    flag=""
    [ "$kind" = threads ] && flag=--threads
    [ "$kind" = asyncio ] && flag=--asyncio
    [ "$kind" = asyncio-processes ] && flag=--asyncio-processes
    for mode in uncontended contended; do
        for workers in $workers_list; do
            libs="redis-py dlock"
            [ "$mode" = contended ] && libs="$libs dlock-fair"
            [ "$mode" = uncontended ] && case $kind in processes|threads) libs="$libs floor" ;; esac
            round=0
            while [ $round -lt "$rounds" ]; do
                round=$((round + 1))
                for which in $libs; do
                    redis-cli -s "$sock" FLUSHALL >/dev/null
                    extra=$flag
                    [ "$which" = dlock-fair ] && extra="$flag --fair"
                    # shellcheck disable=SC2086 # $extra is options or nothing
                    if ! line=$("$py" "$here/bench/pylocks.py" --lib "${which%-fair}" -u "unix://$sock" \
                        --mode "$mode" --workers "$workers" --seconds "$secs" $extra); then
                        echo "bench-python: failed: $which $mode $workers $kind" >&2
                        exit 1
                    fi
                    echo "$line"
                    results="$results$line
"
                done
            done
        done
    done
done

# ---- summary ------------------------------------------------------------
# runs LIB MODE WORKERS KIND [fair]: that case's lines, in the order run
runs() {
    printf '%s' "$results" | grep "\"lib\":\"$1\",\"mode\":\"$2\",\"workers\":$3," |
        grep "\"kind\":\"$4\"" | if [ -n "${5:-}" ]; then grep '"fair":true'; else grep -v '"fair"'; fi
}
# pick LIB MODE WORKERS KIND [fair]: the median run by pairs/s (the lower
# of the two middle ones for an even count)
pick() {
    runs "$@" | awk '{ match($0, /"ops_per_s":[0-9.]+/); print substr($0, RSTART + 12, RLENGTH - 12) "\t" $0 }' |
        sort -n | cut -f2- | awk '{ l[NR] = $0 } END { if (NR) print l[int((NR + 1) / 2)] }'
}
# per_round MODE WORKERS KIND: dlock's pairs/s over redis-py's, round by
# round ("" with one round)
per_round() {
    [ "$rounds" -gt 1 ] || return 0
    d=$(runs dlock-py "$@" | sed -n 's/.*"ops_per_s":\([0-9.]*\).*/\1/p' | tr '\n' ' ')
    r=$(runs redis-py "$@" | sed -n 's/.*"ops_per_s":\([0-9.]*\).*/\1/p' | tr '\n' ' ')
    awk -v a="$d" -v b="$r" 'BEGIN { n = split(a, x, " "); split(b, y, " ")
        printf " (rounds:"; for (i = 1; i <= n; i++) printf " %.1fx", (y[i] > 0 ? x[i] / y[i] : 0); printf ")" }'
}
# ratio LIB_A_VALUE LIB_B_VALUE TARGET: "<a/b>x (target >= Tx): PASS|MISS"
ratio() {
    awk -v a="$1" -v b="$2" -v t="$3" 'BEGIN {
        if (a == "" || b == "" || b == 0) { print "not measured"; exit }
        r = a / b
        printf "%.1fx (target >= %dx): %s\n", r, t, (r >= t ? "PASS" : "MISS") }'
}
verdicts=""
echo "summary (BENCH_SECONDS=$secs, BENCH_PY_ROUNDS=$rounds (medians), $(nproc) cores, load average now $(cut -d' ' -f1-3 /proc/loadavg)," \
    "steal $(steal_since) % of a core over the run;" \
    "JSON lines above, grep '^{'):"
for kind in $kinds; do
    for workers in $workers_list; do
        r=$(field "$(pick redis-py uncontended "$workers" "$kind")" ops_per_s)
        d=$(field "$(pick dlock-py uncontended "$workers" "$kind")" ops_per_s)
        v=$(ratio "$d" "$r" 2)
        verdicts="$verdicts $v"
        echo "  $kind uncontended@$workers: dlock $d / redis-py $r pairs/s = $v$(per_round uncontended "$workers" "$kind")"
        f=$(field "$(pick py-floor uncontended "$workers" "$kind")" ops_per_s)
        if [ -n "$f" ]; then
            echo "  $kind uncontended@$workers, the floor (no library; no target): $f pairs/s, $(ratio "$f" "$r" 2 |
                cut -d' ' -f1) redis-py's; dlock at $(awk -v a="$d" -v b="$f" 'BEGIN { printf "%.2f", a / b }')" \
                "of it, redis-py at $(awk -v a="$r" -v b="$f" 'BEGIN { printf "%.2f", a / b }')"
        fi
    done
    for workers in $workers_list; do
        rl=$(pick redis-py contended "$workers" "$kind")
        dl=$(pick dlock-py contended "$workers" "$kind")
        r=$(field "$rl" ops_per_s)
        d=$(field "$dl" ops_per_s)
        rw=$(field "$rl" wait_p99_us)
        dw=$(field "$dl" wait_p99_us)
        if [ "$workers" = 64 ]; then
            v=$(ratio "$d" "$r" 10)
            w=$(ratio "$rw" "$dw" 10)
            verdicts="$verdicts $v $w"
            echo "  $kind contended@$workers: dlock $d / redis-py $r pairs/s = $v$(per_round contended "$workers" "$kind")"
            echo "  $kind contended@$workers p99 wait: redis-py $rw / dlock $dw us = $w"
            echo "  $kind contended@$workers p999 wait: redis-py $(field "$rl" wait_p999_us) / dlock" \
                "$(field "$dl" wait_p999_us) us; pairs of the least / most served worker over the mean:" \
                "redis-py $(field "$rl" share_min) / $(field "$rl" share_max)," \
                "dlock $(field "$dl" share_min) / $(field "$dl" share_max)"
            dls=$(least_served "$dl")
            rls=$(least_served "$rl")
            echo "  $kind contended@$workers, the least served worker's pairs/s (no target): dlock" \
                "$dls / redis-py $rls = $(ratio "$dls" "$rls" 10 | cut -d' ' -f1)"
            fl=$(pick dlock-py contended "$workers" "$kind" fair)
            echo "  $kind contended@$workers, dlock's fair lock (no target; the same loop on fair_lock):" \
                "$(field "$fl" ops_per_s) pairs/s = $(ratio "$(field "$fl" ops_per_s)" "$r" 10 | cut -d' ' -f1)" \
                "of redis-py; p99 wait $(field "$fl" wait_p99_us) us, $(ratio "$rw" "$(field "$fl" wait_p99_us)" 10)"
        else
            echo "  $kind contended@$workers: dlock $d / redis-py $r pairs/s," \
                "p99 wait dlock $dw us / redis-py $rw us (no target)"
        fi
    done
done
if [ "$strict" = 1 ]; then
    case "$verdicts" in *MISS*|*"not measured"*) exit 1 ;; esac
fi
exit 0
