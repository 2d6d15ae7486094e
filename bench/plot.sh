#!/bin/sh
# Plots of a flash sale over time, from `seckill load --csv`: for each
# strategy, answers per second by kind, and the latency (p50, p99) of the
# requests answered in each 100 ms. SVG, drawn by gnuplot.
#
#   bench/plot.sh BUILD_DIR [OUT_DIR]
#       runs `make bench-seckill`'s flash scenario first, one round
#       (bench/seckill.sh with BENCH_SCENARIOS=flash BENCH_ROUNDS=1 and
#       BENCH_CSV_DIR=OUT_DIR; its BENCH_* knobs apply, PLOT_STRATEGIES
#       picks the strategies, "redis lock"), which keeps the CSVs in
#       OUT_DIR (docs/img by default) as seckill-flash-STRATEGY.csv, then
#       plots them.
#   bench/plot.sh --csv OUT_DIR LABEL=FILE.csv [LABEL=FILE.csv ...]
#       plots CSVs made before.
#
# Writes OUT_DIR/seckill-throughput.svg and OUT_DIR/seckill-latency.svg.
# gnuplot comes from Debian's gnuplot-nox, installed here when missing
# (as root, or with sudo); nothing in `make` installs it.
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)

need_gnuplot() {
    command -v gnuplot >/dev/null 2>&1 && return 0
    echo "plot: installing gnuplot-nox" >&2
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo=sudo
    $sudo apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq gnuplot-nox >&2
}

if [ "${1:-}" = --csv ]; then
    [ $# -ge 3 ] || { echo "usage: bench/plot.sh --csv OUT_DIR LABEL=FILE.csv [...]" >&2; exit 64; }
    out=$2
    shift 2
    series="$*"
else
    [ $# -ge 1 ] || { echo "usage: bench/plot.sh BUILD_DIR [OUT_DIR] | --csv OUT_DIR LABEL=FILE.csv [...]" >&2; exit 64; }
    out=${2:-$here/docs/img}
    mkdir -p "$out"
    strategies=${PLOT_STRATEGIES:-redis lock}
    BENCH_CSV_DIR=$(cd "$out" && pwd) BENCH_SCENARIOS=flash BENCH_ROUNDS=1 BENCH_STRATEGIES=$strategies \
        "$here/bench/seckill.sh" "$1"
    series=""
    for s in $strategies; do series="$series $s=$out/seckill-flash-$s.csv"; done
fi
need_gnuplot
mkdir -p "$out"

# One gnuplot program; each LABEL=FILE adds lines to both plots. Columns:
# 1 t_s, 2 sent, 3 answered, 4 s201, 5 s409, 6 s410, 7 s429, 8 other_4xx,
# 9 s5xx, 10 transport, 11 p50_ms, 12 p99_ms. Rows are 100 ms: x10 is /s.
# Log scales: the 201s of a flash sale are a few per cent of the answers.
thr=""
lat=""
i=0
for kv in $series; do
    label=${kv%%=*}
    file=${kv#*=}
    [ -r "$file" ] || { echo "plot: cannot read $file" >&2; exit 1; }
    i=$((i + 1))
    [ -z "$thr" ] || thr="$thr, "
    [ -z "$lat" ] || lat="$lat, "
    thr="$thr'$file' using 1:(\$3*10) with steps lw 2 lc $i title '$label: all answers', \
'$file' using 1:(\$4>0?\$4*10:1/0) with points pt 7 ps 0.8 lc $i title '$label: 201 created', \
'$file' using 1:(\$7>0?\$7*10:1/0) with points pt 2 ps 0.8 lc $i title '$label: 429 busy'"
    lat="$lat'$file' using 1:(\$3>0?\$11:1/0) with steps lw 2 lc $i title '$label: p50', \
'$file' using 1:(\$3>0?\$12:1/0) with steps lw 1 dt 2 lc $i title '$label: p99'"
done

gnuplot <<EOF
set datafile separator ','
set terminal svg size 900,450 dynamic font 'sans,11' background '#ffffff'
set key top right
set grid
set xlabel 'seconds since the requests were released'

set output '$out/seckill-throughput.svg'
set title 'Flash sale: answers per second, 100 ms bins (the rest of the answers are 410 sold out)'
set ylabel 'answers / s (log scale)'
set logscale y
plot $thr

set output '$out/seckill-latency.svg'
set title 'Flash sale: latency of the requests answered in each 100 ms'
set ylabel 'ms (log scale)'
plot $lat
EOF
echo "plot: wrote $out/seckill-throughput.svg and $out/seckill-latency.svg" >&2
