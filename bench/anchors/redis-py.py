#!/usr/bin/python3
"""Anchor for dlock-bench: the same uncontended/contended lock+release loop
through redis-py's Lock (Debian python3-redis).

    python3 redis-py.py -u URL --mode uncontended|contended --workers N [--seconds S]

Prints one JSON line in dlock-bench's shape with "lib":"redis-py".

Workers are N processes (the GIL makes threads pointless for this), each
with its own connection, started and connected before the clock starts.
Each loops lock.acquire() / lock.release() on redis-py's Lock with a 10 s
lease and the library's defaults otherwise: acquire is SET NX PX, retried
every 0.1 s while the lock is held (it polls); release is one EVALSHA
(compare-and-delete). Timing, warm-up (0.5 s), percentiles and handoff are
defined as in dlock-bench.c, with CLOCK_MONOTONIC shared by all processes;
holds of the one lock are ordered by the time their acquire returned, and
two that overlap are reported as broken mutual exclusion (exit 70).
"""
import argparse
import json
import math
import multiprocessing as mp
import os
import sys
import time

LEASE_S = 10
WARMUP_NS = 500_000_000


def parse_args():
    """The same options as dlock-bench; exit 64 on a mistake."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-u", "--url", required=True)
    p.add_argument("--mode", required=True, choices=["uncontended", "contended"])
    p.add_argument("--workers", type=int, required=True)
    p.add_argument("--seconds", type=float, default=5.0)
    try:
        a = p.parse_args()
    except SystemExit as e:
        sys.exit(0 if e.code == 0 else 64)
    if not 1 <= a.workers <= 1024 or not a.seconds > 0:
        p.print_usage(sys.stderr)
        sys.exit(64)
    return a


def worker(i, args, start, barrier, out):
    """One process: connect, wait for the start, loop, send back samples."""
    import redis  # imported here so the parent's error message stays simple

    r = redis.Redis.from_url(args.url)
    r.ping()
    if args.mode == "contended":
        name = "bench:pc:%d" % os.getppid()
    else:
        name = "bench:pu:%d:%d" % (os.getppid(), i)
    lock = r.lock(name, timeout=LEASE_S)
    barrier.wait()
    t0 = start.value
    measure_from = t0 + WARMUP_NS
    measure_to = measure_from + int(args.seconds * 1e9)
    lat, holds = [], []
    now = time.monotonic_ns
    while True:
        t_start = now()
        lock.acquire()
        t_acq = now()
        t_rel_call = now()
        lock.release()
        t_rel = now()
        measured = measure_from <= t_rel <= measure_to
        if measured:
            lat.append(t_rel - t_start)
        if args.mode == "contended":
            holds.append((t_acq, t_rel_call, t_rel, t_start, i, measured))
        if t_rel > measure_to:
            break
    out.put((lat, holds))


def percentile(sorted_ns, q):
    """Nearest-rank percentile in microseconds."""
    if not sorted_ns:
        return 0.0
    rank = max(1, math.ceil(q * len(sorted_ns)))
    return sorted_ns[min(rank, len(sorted_ns)) - 1] / 1000.0


def handoff_p50(holds):
    """Median release-to-next-waiter time (us), None without handoffs;
    exits 70 if two holds overlapped."""
    holds.sort()
    samples = []
    for a, b in zip(holds, holds[1:]):
        if b[0] < a[1]:
            print("redis-py anchor: mutual exclusion broken: two holders at once", file=sys.stderr)
            sys.exit(70)
        if not b[5] or a[4] == b[4] or b[3] >= a[0]:
            continue
        samples.append(max(0, b[0] - a[2]))
    if not samples:
        return None
    samples.sort()
    return samples[(len(samples) - 1) // 2] / 1000.0


def main():
    args = parse_args()
    try:
        import redis

        redis.Redis.from_url(args.url).ping()
    except ImportError:
        print("redis-py anchor: python3 module redis missing (apt-get install python3-redis)", file=sys.stderr)
        sys.exit(69)
    except Exception as e:  # any connection or auth failure
        print("redis-py anchor: cannot use %s: %s" % (args.url, e), file=sys.stderr)
        sys.exit(69)
    ctx = mp.get_context("fork")
    start = ctx.Value("q", 0)
    barrier = ctx.Barrier(args.workers + 1)
    out = ctx.Queue()
    procs = [ctx.Process(target=worker, args=(i, args, start, barrier, out)) for i in range(args.workers)]
    for p in procs:
        p.start()
    start.value = time.monotonic_ns()
    barrier.wait(timeout=120)
    lat, holds = [], []
    for _ in procs:
        l, h = out.get(timeout=args.seconds + 120)
        lat.extend(l)
        holds.extend(h)
    for p in procs:
        p.join()
        if p.exitcode != 0:
            print("redis-py anchor: a worker failed (exit %s)" % p.exitcode, file=sys.stderr)
            sys.exit(70)
    lat.sort()
    line = {
        "lib": "redis-py",
        "mode": args.mode,
        "workers": args.workers,
        "ops": len(lat),
        "seconds": round(args.seconds, 3),
        "ops_per_s": round(len(lat) / args.seconds, 1),
        "p50_us": round(percentile(lat, 0.50), 1),
        "p99_us": round(percentile(lat, 0.99), 1),
    }
    if args.mode == "contended":
        h = handoff_p50(holds)
        line["handoff_p50_us"] = None if h is None else round(h, 1)
    print(json.dumps(line, separators=(",", ":")))


if __name__ == "__main__":
    main()
