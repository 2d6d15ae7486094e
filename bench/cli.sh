#!/bin/sh
# `make bench-cli`: the dlock command as shell scripts and cron jobs feel
# it, next to flock(1) (a local lock, the floor for a lock tool) and, when
# etcd and etcdctl are installed, `etcdctl lock` (a distributed one), all
# in one run on one machine.
#
#   bench/cli.sh BUILD_DIR
#
# 1. Starts a private redis-server (unix socket in a temp dir) and, if
#    `etcd` and `etcdctl` are on PATH, a private etcd on two free loopback
#    ports; stops both by PID at the end, whatever happens.
# 2. For each tool, BENCH_CLI_N times (300) one after another:
#      serial    `TOOL NAME true`: start, lock, run, release, exit; the rate
#                a loop of cron-style invocations gets (runs per second);
#      start     `TOOL NAME date +%s%N`: from just before the fork to the
#                command's own clock reading (the same `date` for every
#                tool, so its exec counts alike), median and p99;
#    and BENCH_CLI_HANDOFFS times (50):
#      handoff   a holder runs `sh -c 'sleep 0.1; date +%s%N'`, a waiter
#                queued behind it runs `date +%s%N`: from the holder's last
#                clock reading to the waiter's first, which includes the
#                holder's exit, its release, the waiter's wake-up and the
#                exec of date; median and p99.
#    dlock runs as `dlock -u unix://SOCK lock -w 10 NAME -- CMD`, flock
#    as `flock -w 10 FILE CMD`, etcdctl as `etcdctl --endpoints URL lock NAME
#    -- CMD`.
# 3. Prints one JSON line per tool and measure on stdout (progress on
#    stderr) and a summary with the targets: dlock serial >= 300 runs/s,
#    dlock median hand-off <= 2.5 ms.
# 4. BENCH_CLI_ROUNDS=N (1) repeats dlock's and flock's measures N times,
#    the two tools one after the other in each round, and prints each
#    round's rates, dlock's share of flock's and the steal; the targets
#    are then judged on the medians of the rounds, NOISY (no verdict)
#    when the rounds' median steal is over 10 % of a core (etcdctl runs
#    once). On a host whose speed changes from minute to minute one run
#    says less than the spread of several; flock's rate in the same round
#    says how quick the machine was.
#
# Timing is done by one perl process (Time::HiRes); the machine is shared,
# so medians, not means.
set -eu
. "$(dirname "$0")/../scripts/servers.sh"

build=${1:-build}
dlock="$build/tools/dlock"
n=${BENCH_CLI_N:-300}
handoffs=${BENCH_CLI_HANDOFFS:-50}
rounds=${BENCH_CLI_ROUNDS:-1}
case $rounds in
    ''|*[!0-9]*|0) echo "bench: BENCH_CLI_ROUNDS must be a positive whole number, not '$rounds'" >&2; exit 2 ;;
esac

[ -x "$dlock" ] || { echo "bench: $dlock not built (run make)" >&2; exit 1; }
need redis-server redis-cli flock perl date

private_dir dlock-cli-bench
start_redis "$dir"
echo "bench: private redis-server (pid $rpid) on unix://$sock" >&2

etcd_url=""
epid=""
if command -v etcd >/dev/null 2>&1 && command -v etcdctl >/dev/null 2>&1; then
    ports=$(perl -MIO::Socket::INET -e 'my @s = map { IO::Socket::INET->new(LocalAddr => "127.0.0.1",
        LocalPort => 0, Listen => 1) } 1 .. 2; print join(" ", map { $_->sockport } @s), "\n"')
    set -- $ports
    etcd_url="http://127.0.0.1:$1"
    $daemon_session etcd --data-dir "$dir/etcd" --listen-client-urls "$etcd_url" --advertise-client-urls "$etcd_url" \
        --listen-peer-urls "http://127.0.0.1:$2" --initial-advertise-peer-urls "http://127.0.0.1:$2" \
        --initial-cluster "default=http://127.0.0.1:$2" >"$dir/etcd.log" 2>&1 &
    epid=$!
    spid="$epid" # stopped with the others at exit
    i=0
    until etcdctl --endpoints "$etcd_url" endpoint health >/dev/null 2>&1; do
        i=$((i + 1))
        [ $i -lt 100 ] || { echo "bench: etcd did not start:" >&2; tail -5 "$dir/etcd.log" >&2; exit 1; }
        sleep 0.1
    done
    echo "bench: private etcd $(etcd --version | sed -n 's/^etcd Version: //p') (pid $epid) on $etcd_url" >&2
else
    echo "bench: etcd or etcdctl not on PATH: etcdctl lock is left out (apt-get install etcd-server etcd-client)" >&2
fi

# The timing, in perl: TOOL's argv prefix comes as the arguments up to
# "--", the lock name is appended by each measure.
measure() {
    DLOCK_BENCH_N=$n DLOCK_BENCH_HANDOFFS=$handoffs perl -MTime::HiRes=time,sleep -e '
        use strict; use warnings;
        my ($tool, $mode, @pre) = @ARGV;
        my ($n, $h) = ($ENV{DLOCK_BENCH_N}, $ENV{DLOCK_BENCH_HANDOFFS});
        sub argv { my ($name, @cmd) = @_; $mode eq "flock" ? (@pre, "$ENV{TMPDIR_BENCH}/$name.lock", @cmd)
                                                           : (@pre, $name, "--", @cmd) }
        sub run_out { my @a = @_; open(my $fh, "-|", @a) or die "$a[0]: $!"; local $/; my $o = <$fh>;
                      close $fh; die "@a: status $?\n" if $?; return $o }
        sub pct { my ($p, @v) = @_; @v = sort { $a <=> $b } @v; return $v[int($p * $#v + 0.5)] }
        sub ns { my ($o) = @_; $o =~ /(\d{16,})/ or die "no clock reading in: $o\n"; return $1 }
        # serial
        my $t0 = time;
        for my $i (1 .. $n) { system(argv("bench-serial", "true")) == 0 or die "$tool: status $?\n" }
        my $serial = $n / (time - $t0);
        # start: just before the fork to the command reading its clock
        my @start;
        for my $i (1 .. $n) {
            my $before = time;
            my $o = run_out(argv("bench-start", "date", "+%s%N"));
            push @start, (ns($o) / 1e9 - $before) * 1000;
        }
        # hand-off
        my @hand;
        for my $i (1 .. $h) {
            my $name = "bench-handoff-$i";
            open(my $holder, "-|", argv($name, "sh", "-c", "sleep 0.1; date +%s%N")) or die;
            sleep 0.03;
            my $w = run_out(argv($name, "date", "+%s%N"));
            local $/; my $ho = <$holder>; close $holder;
            push @hand, (ns($w) - ns($ho)) / 1e6;
        }
        printf "{\"tool\":\"%s\",\"serial_per_s\":%.1f,\"start_p50_ms\":%.2f,\"start_p99_ms\":%.2f," .
               "\"handoff_p50_ms\":%.2f,\"handoff_p99_ms\":%.2f,\"runs\":%d,\"handoffs\":%d}\n",
               $tool, $serial, pct(0.5, @start), pct(0.99, @start), pct(0.5, @hand), pct(0.99, @hand), $n, $h;
    ' "$@"
}

export TMPDIR_BENCH="$dir"
steal_mark
echo "bench: $n serial runs, $n timed starts and $handoffs hand-offs per tool, $rounds round(s)" >&2
# Each round's "dlock_serial flock_serial dlock_handoff flock_handoff steal".
per_round=""
r=0
while [ "$r" -lt "$rounds" ]; do
    r=$((r + 1))
    # The round's own steal; the run's mark is put back after it.
    run_s0=$_steal0 run_t0=$_steal_t0
    steal_mark
    d_line=$(measure dlock other "$dlock" -u "unix://$sock" lock -w 10)
    echo "$d_line"
    f_line=$(measure flock flock flock -w 10)
    echo "$f_line"
    rs=$(steal_since)
    _steal0=$run_s0 _steal_t0=$run_t0
    per_round="$per_round$(field "$d_line" serial_per_s) $(field "$f_line" serial_per_s) $(field "$d_line" handoff_p50_ms) $(field "$f_line" handoff_p50_ms) $rs
"
    if [ "$rounds" -gt 1 ]; then
        echo "bench: round $r: dlock $(field "$d_line" serial_per_s) runs/s serial (flock" \
            "$(field "$f_line" serial_per_s)), hand-off p50 $(field "$d_line" handoff_p50_ms) ms (flock" \
            "$(field "$f_line" handoff_p50_ms)); steal $rs %" >&2
    fi
done
e_line=""
if [ -n "$etcd_url" ]; then
    e_line=$(measure etcdctl other etcdctl --endpoints "$etcd_url" lock)
    echo "$e_line"
fi

# median COLUMN [COLUMN2]: the median over the rounds of column COLUMN of
# per_round, or of column COLUMN over column COLUMN2.
median() { printf '%s' "$per_round" | median_col "$1" "${2:-0}" | awk '{ printf "%.2f", $1 }'; }
serial=$(field "$d_line" serial_per_s)
hand=$(field "$d_line" handoff_p50_ms)
{
    last=""
    [ "$rounds" -gt 1 ] && last=" (last round)"
    echo "summary$last: dlock $serial runs/s serial (flock $(field "$f_line" serial_per_s)${e_line:+, etcdctl $(field "$e_line" serial_per_s)})," \
        "start p50 $(field "$d_line" start_p50_ms) ms (flock $(field "$f_line" start_p50_ms)${e_line:+, etcdctl $(field "$e_line" start_p50_ms)})," \
        "hand-off p50 $hand ms (flock $(field "$f_line" handoff_p50_ms)${e_line:+, etcdctl $(field "$e_line" handoff_p50_ms)});" \
        "steal $(steal_since) % of a core over the run"
    # With rounds, a median steal over steal_noisy_pct gives no verdict
    # (NOISY), as bench/run.sh's paired rounds do.
    noisy=""
    if [ "$rounds" -gt 1 ]; then
        serial=$(median 1)
        hand=$(median 3)
        steal=$(median 5)
        echo "medians of $rounds rounds: dlock $serial runs/s serial (flock $(median 2); dlock/flock $(median 1 2))," \
            "hand-off p50 $hand ms (flock $(median 4)); steal $steal % of a core"
        noisy=$(noisy_verdict "$steal")
    fi
    awk -v s="$serial" -v z="$noisy" 'BEGIN { printf "target: serial >= 300 runs/s: %s\n",
        (z != "" ? z : s >= 300 ? "PASS" : "MISS") }'
    awk -v h="$hand" -v z="$noisy" 'BEGIN { printf "target: median hand-off <= 2.5 ms: %s\n",
        (z != "" ? z : h <= 2.5 ? "PASS" : "MISS") }'
} >&2
