#!/bin/sh
# Model-check the lock protocol (model/lock.pml) with Spin: the real model
# must pass every property, and each mutant must fail the property it
# breaks, its counterexample printed. docs/design/model.md says what the
# model covers.
#
#   model/check.sh          small bounds (ctest model_check, `make test`)
#   model/check.sh large    larger bounds (`make model`; tens of minutes)
#
# Exits 0 when every verdict is as expected, 1 when one is not, 77 (ctest's
# skip) when spin or a C compiler is missing. MODEL_MEMLIM (MB, 2048 by
# default) caps each verifier's memory; a search cut short by it counts
# as a failure, never as a pass.
set -u

bounds=${1:-small}
here=$(cd "$(dirname "$0")" && pwd)
memlim=${MODEL_MEMLIM:-2048}
cc=${CC:-cc}

if ! command -v spin >/dev/null 2>&1; then
    echo "SKIP: spin is not installed (Debian: apt-get install spin)"
    exit 77
fi
if ! command -v "$cc" >/dev/null 2>&1; then
    echo "SKIP: no C compiler ($cc) to build Spin's verifier"
    exit 77
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/dlock-model-XXXXXX") || exit 1
trap 'rm -rf "$work"' EXIT INT TERM
cp "$here/lock.pml" "$work/" || exit 1
cd "$work" || exit 1

failed=0
passed=0

# The counterexample as the model's own event lines, runs of plain ticks
# folded ("tick x3": three ticks of every clock).
trail() {
    # shellcheck disable=SC2086
    spin -t -T $1 lock.pml 2>&1 | awk '
        /^tick$/ { n++; next }
        { if (n) { printf("    tick x%d\n", n); n = 0 } }
        /^spin: trail ends/ { print "    " $0; exit }
        /^[A-Z]/ || /^<<<</ || /^tick \(/ { print "    " $0 }'
}

# run NAME KIND EXPECT FLAGS...: KIND safety (assertions) or live (the
# LTL claim p3 under weak fairness); EXPECT pass, or the text the failing
# run's trail must show (its property's name).
run() {
    name=$1 kind=$2 expect=$3
    shift 3
    flags="$*"
    start=$(date +%s)
    # shellcheck disable=SC2086
    if ! spin -a $flags lock.pml >spin.out 2>&1; then
        echo "FAIL $name: spin -a $flags"
        cat spin.out
        failed=$((failed + 1))
        return
    fi
    case $kind in
    safety) ccflags="-DSAFETY" panflags="$pansize" ;;
    live) ccflags="-DNFAIR=3" panflags="-a -f $pansize" ;;
    esac
    case "$flags" in
    *HC4*) ccflags="$ccflags -DHC4" ;;
    esac
    # A mutant's search is breadth-first: it stops at the first violation,
    # whose counterexample is then as short as can be (a depth-first one
    # wanders for thousands of steps first).
    if [ "$expect" != pass ] && [ "$kind" = safety ]; then
        ccflags="$ccflags -DBFS"
    fi
    # shellcheck disable=SC2086
    if ! "$cc" $opt -w -DMEMLIM="$memlim" $ccflags -o pan pan.c 2>cc.out; then
        echo "FAIL $name: the verifier did not compile"
        cat cc.out
        failed=$((failed + 1))
        return
    fi
    # shellcheck disable=SC2086
    ./pan $panflags >pan.out 2>&1
    secs=$(($(date +%s) - start))
    errors=$(sed -n 's/.*errors: \([0-9]*\).*/\1/p' pan.out | head -1)
    stored=$(sed -n 's/^ *\([0-9.e+]*\) states, stored.*/\1/p' pan.out | head -1)
    trans=$(sed -n 's/^ *\([0-9.e+]*\) transitions.*/\1/p' pan.out | head -1)
    mem=$(sed -n 's/^ *\([0-9.]*\).*total actual memory usage.*/\1/p' pan.out | head -1)
    stats="states ${stored:-?}, transitions ${trans:-?}, ${mem:-?} MB, ${secs} s"
    cut=0
    grep -Eq 'out of memory|MEMLIM|max search depth too small|Search not completed' pan.out && cut=1
    if [ "$expect" = pass ]; then
        if [ "${errors:-x}" = 0 ] && [ $cut = 0 ]; then
            echo "ok   $name: passes ($stats)"
            passed=$((passed + 1))
        else
            echo "FAIL $name: expected to pass ($stats)"
            grep -E 'error|VIOLATED|assert|MEMLIM|memory|depth' pan.out | head -5
            [ "${errors:-0}" != 0 ] && trail "$flags"
            failed=$((failed + 1))
        fi
        return
    fi
    if [ "${errors:-0}" = 0 ]; then
        echo "FAIL $name: the mutant PASSES, expected '$expect' ($stats)"
        failed=$((failed + 1))
        return
    fi
    trail "$flags" >trail.out
    if grep -q "$expect" trail.out || { [ "$kind" = live ] && grep -q 'acceptance cycle' pan.out; }; then
        echo "ok   $name: fails as expected, $expect ($stats); its counterexample:"
        cat trail.out
        passed=$((passed + 1))
    else
        echo "FAIL $name: failed, but not with '$expect' ($stats):"
        cat trail.out
        failed=$((failed + 1))
    fi
}

# The configurations. Each switches on some of the faults: all at once
# make a state space too large for a test run (docs/design/model.md has
# the numbers).
none="-DBREAKS=0 -DRESTARTS=0 -DGIVEUPS=0 -DREENTER=0"
core="-DLEASE=3 -DBREAKS=0 -DRESTARTS=0 -DGIVEUPS=1 -DREENTER=0"
breaks="-DLEASE=3 $none -DBREAKS=1"
restart="-DLEASE=3 $none -DRESTARTS=1 -DNOWATCHDOG"
restartwd="-DLEASE=3 $none -DRESTARTS=1"
reenter="-DLEASE=3 $none -DBREAKS=1 -DREENTER=1 -DNOWATCHDOG"
wide="-DLEASE=5 -DBREAKS=0 -DRESTARTS=0 -DGIVEUPS=1 -DREENTER=0 -DNOWATCHDOG"
rounds="-DLEASE=3 $none -DROUNDS=2"

# Small bounds: pan.c unoptimised (it compiles in a tenth of the time,
# and these searches are short), a small hash table and stack.
case $bounds in
small)
    opt=-O0 pansize="-m200000 -w22"
    echo "model/lock.pml, small bounds (2 clients)"
    run "real, waits and give-ups (lease 3)" safety pass $core
    run "real, a broken connection and its resend" safety pass $breaks
    run "real, a server restart (with or without its data), explicit leases" safety pass $restart
    run "real, re-entry, resends, explicit leases" safety pass $reenter
    run "real, lease 5, explicit leases (hand-offs a tick old taken)" safety pass $wide
    run "real, P3 no lost wake-up (2 rounds each)" live pass -DLIVE -DROUNDS=2
    run "real, P3 no lost wake-up (3 clients)" live pass -DLIVE -DNC=3
    run "M1 trusted time from the reply" safety "P1 VIOLATED" $breaks -DMUTANT_M1
    run "M2 release without the owner check" safety "P1 VIOLATED" $rounds -DMUTANT_M2
    run "M3 resend without its operation id" safety "P4 VIOLATED" $reenter -DMUTANT_M3
    run "M4 no give-back of a late answer" safety "P1 VIOLATED" $breaks -DMUTANT_M4
    run "M5 release wakes nobody" live "p3" -DLIVE -DROUNDS=2 -DMUTANT_M5
    run "M6 no drift allowance" safety "P1 VIOLATED" $breaks -DMUTANT_M6
    ;;
# Large bounds: hash compaction (-DHC4) keeps each state in a few bytes
# (two rounds at lease 3 outgrow 4 GB stored whole); a collision could
# hide a state, with a probability pan reports as "hash conflicts".
large)
    opt=-O2 pansize="-m10000000 -w26"
    echo "model/lock.pml, large bounds"
    run "real, a server restart, with the watchdog" safety pass $restartwd
    run "real, 2 rounds each (lease 3)" safety pass $rounds -DHC4
    run "real, 3 clients, waits and give-ups" safety pass $core -DNC=3 -DHC4
    run "real, every fault at once (lease 3)" safety pass -DLEASE=3 -DHC4
    run "real, breaks, restarts, re-entry (lease 4)" safety pass -DLEASE=4 -DGIVEUPS=0 -DNOWATCHDOG -DHC4
    run "real, P3 no lost wake-up (3 clients, 2 rounds)" live pass -DLIVE -DNC=3 -DROUNDS=2 -DHC4
    ;;
*)
    echo "usage: $0 [small|large]" >&2
    exit 2
    ;;
esac

echo "$passed passed, $failed failed"
[ $failed = 0 ]
