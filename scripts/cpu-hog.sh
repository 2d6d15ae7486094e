#!/bin/sh
# Run a command with a busy loop on every core beside it, for `make
# test-loaded`: a suite whose verdicts hang on a short lease or a tight
# deadline fails here as it would on a busy CI machine.
#
#   scripts/cpu-hog.sh [-n LOOPS] COMMAND [ARG...]
#
# LOOPS (default: nproc) shell loops run at normal priority, in this
# process's session, so that they compete with the command's processes
# for the same cores (with the kernel's scheduler autogroups, a loop in
# a session of its own would get a share of its own instead). They are
# started before COMMAND and stopped by PID after it, whatever its exit,
# and also on SIGINT, SIGTERM or SIGHUP; each loop also stops by itself
# once this script's process is gone, so that not even a SIGKILL of the
# script leaves one spinning. The exit status is COMMAND's.
set -u

loops=$(nproc 2>/dev/null || echo 2)
if [ "${1:-}" = "-n" ]; then
    loops=${2:?"-n needs a number"}
    shift 2
fi
[ $# -gt 0 ] || { echo "usage: $0 [-n LOOPS] COMMAND [ARG...]" >&2; exit 2; }
case $loops in '' | *[!0-9]*) echo "$0: bad loop count '$loops'" >&2; exit 2 ;; esac

me=$$
pids=""

stop_loops() {
    # KILL: a TERM that lands while a loop is being forked can be lost.
    [ -n "$pids" ] && kill -KILL $pids 2>/dev/null
    [ -n "$pids" ] && wait $pids 2>/dev/null
    pids=""
}
trap stop_loops EXIT
trap 'stop_loops; exit 130' INT
trap 'stop_loops; exit 143' TERM
trap 'stop_loops; exit 129' HUP

i=0
while [ "$i" -lt "$loops" ]; do
    # Pure arithmetic between the checks: the loop stays on the CPU.
    (
        while kill -0 "$me" 2>/dev/null; do
            n=0
            while [ "$n" -lt 200000 ]; do n=$((n + 1)); done
        done
    ) &
    pids="$pids $!"
    i=$((i + 1))
done
echo "cpu-hog: $loops busy loops (PIDs$pids) beside: $*" >&2

"$@"
status=$?
stop_loops
echo "cpu-hog: loops stopped; the command exited $status" >&2
exit "$status"
