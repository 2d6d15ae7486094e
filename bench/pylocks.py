#!/usr/bin/python3
"""The lock+release loop of dlock-bench, in Python, for two libraries on
one server: redis-py's Lock (Debian python3-redis) and dlock's Python
package (bindings/python, on libdlock).

    python3 pylocks.py --lib redis-py|dlock|floor -u URL --mode uncontended|contended
                       --workers N [--threads|--asyncio|--asyncio-processes]
                       [--seconds S]

Prints one JSON line in dlock-bench's shape, "lib" being "redis-py",
"dlock-py" or "py-floor", plus "p999_us", "wait_p99_us" and "wait_p999_us" (the acquire
call alone, the wait when contended), "share_min" and "share_max" (the
pairs of the least and the most served worker over the mean) and "kind":
"processes", "threads", "asyncio" or "asyncio-processes".

Workers are N processes (the default), each with its own connection or
Client (with --asyncio-processes each runs its loop as one asyncio task,
as the worker processes of an asyncio server would), or with --threads N
threads of one process sharing one redis.Redis
(its connection pool) or one dlock.Client, or with --asyncio N tasks of
one event loop sharing one redis.asyncio.Redis (its Lock: acquire polls
with asyncio.sleep(0.1)) or one dlock.Client (`async with`, on the C
library's asynchronous API: no thread per waiting task), all started and
connected before the clock starts. Each loops acquire / release with a 10 s lease and
the library's defaults otherwise:
  - redis-py: Lock(timeout=10); acquire is SET NX PX, retried every 0.1 s
    while the lock is held (it polls); release is one EVALSHA
    (compare-and-delete);
  - dlock: Client.lock(name, lease=10.0); acquire waits forever, woken by
    the release (pub/sub, no polling); release is one EVALSHA. With
    --fair, Client.fair_lock(): FIFO, a release wakes the queue's head only.
  - floor (uncontended only, no asyncio): the least any Python lock can
    do, the simplest correct lock (SET NX PX, then an EVALSHA
    compare-and-delete) sent as bytes encoded once, on a socket of its own
    per lock, each reply checked by its first byte. No library is this
    cheap; its pairs/s over redis-py's bound the ratio any Python library
    can reach against redis-py on this machine.
uncontended: each worker its own lock; contended: all on one. Timing,
warm-up (0.5 s), percentiles and handoff are defined as in dlock-bench.c,
with CLOCK_MONOTONIC shared by all processes; holds of the one lock are
ordered by the time their acquire returned, and two that overlap are
reported as broken mutual exclusion (exit 70).
"""
import argparse
import json
import math
import multiprocessing as mp
import os
import sys
import threading
import time

LEASE_S = 10
WARMUP_NS = 500_000_000
LABEL = {"redis-py": "redis-py", "dlock": "dlock-py", "floor": "py-floor"}


def parse_args(default_lib=None):
    """dlock-bench's options plus --lib and --threads; exit 64 on a mistake."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--lib", choices=sorted(LABEL), default=default_lib, required=default_lib is None)
    p.add_argument("-u", "--url", required=True)
    p.add_argument("--mode", required=True, choices=["uncontended", "contended"])
    p.add_argument("--workers", type=int, required=True)
    p.add_argument("--threads", action="store_true", help="workers are threads of one process")
    p.add_argument("--asyncio", action="store_true", help="workers are asyncio tasks of one process")
    p.add_argument("--asyncio-processes", action="store_true",
                   help="workers are processes, each one asyncio task (a server's worker processes)")
    p.add_argument("--fair", action="store_true", help="dlock only: the fair lock")
    p.add_argument("--seconds", type=float, default=5.0)
    try:
        a = p.parse_args()
    except SystemExit as e:
        sys.exit(0 if e.code == 0 else 64)
    if (not 1 <= a.workers <= 1024 or not a.seconds > 0 or (a.fair and a.lib != "dlock")
            or a.threads + a.asyncio + a.asyncio_processes > 1
            or (a.lib == "floor" and (a.mode != "uncontended" or a.asyncio or a.asyncio_processes))):
        p.print_usage(sys.stderr)
        sys.exit(64)
    return a


def resp(*words):
    """One command in the protocol's array form."""
    out = b"*%d\r\n" % len(words)
    for w in words:
        w = w if isinstance(w, bytes) else str(w).encode()
        out += b"$%d\r\n%s\r\n" % (len(w), w)
    return out


class FloorLock:
    """The floor's lock (see the module's doc): one socket, two commands
    encoded once, replies read to their end and judged by the first byte."""

    DEL = b"if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0"

    def __init__(self, url, name):
        import socket
        from urllib.parse import urlparse

        u = urlparse(url)
        if u.scheme == "unix":
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.sock.connect(u.path)
        elif u.scheme == "redis":
            self.sock = socket.create_connection((u.hostname or "127.0.0.1", u.port or 6379))
            self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        else:
            raise ValueError("the floor takes redis:// or unix:// URLs, not %r" % url)
        token = os.urandom(16).hex()
        sha = self.call(resp("SCRIPT", "LOAD", self.DEL))[1:].split(b"\r\n")[1]
        self.set_cmd = resp("SET", name, token, "NX", "PX", LEASE_S * 1000)
        self.del_cmd = resp("EVALSHA", sha, 1, name, token)

    def call(self, cmd):
        self.sock.sendall(cmd)
        r = self.sock.recv(4096)
        while not r.endswith(b"\r\n") or (r[:1] == b"$" and r[:3] != b"$-1" and r.count(b"\r\n") < 2):
            r += self.sock.recv(4096)
        return r

    def acquire(self):
        if self.call(self.set_cmd)[:1] != b"+":
            raise RuntimeError("the floor's SET NX was refused (its lock is its own)")

    def release(self):
        if self.call(self.del_cmd) != b":1\r\n":
            raise RuntimeError("the floor's compare-and-delete found the lock gone")


def connect(args):
    """A connection (redis-py) or client (dlock), checked with one round trip;
    for the floor, the URL (each of its locks connects on its own)."""
    if args.lib == "floor":
        FloorLock(args.url, "bench:floor-check").sock.close()
        return args.url
    if args.lib == "redis-py":
        import redis

        r = redis.Redis.from_url(args.url)
        r.ping()
        return r
    import dlock

    c = dlock.Client(args.url)
    c.ids("bench", 1)
    return c


def make_lock(args, conn, name):
    if args.lib == "floor":
        return FloorLock(conn, name)
    if args.lib == "redis-py":
        return conn.lock(name, timeout=LEASE_S)
    if args.fair:
        return conn.fair_lock(name, lease=float(LEASE_S))
    return conn.lock(name, lease=float(LEASE_S))


def lock_name(args, i, tag):
    pid = os.getpid() if args.threads or args.asyncio else os.getppid()  # the run's, for every worker
    if args.mode == "contended":
        return "bench:%sc:%d" % (tag, pid)
    return "bench:%su:%d:%d" % (tag, pid, i)


class Samples:
    """One worker's samples: latencies, waits, and (contended) its holds."""

    def __init__(self, i, args, t0):
        self.i = i
        self.measure_from = t0 + WARMUP_NS
        self.measure_to = self.measure_from + int(args.seconds * 1e9)
        self.contended = args.mode == "contended"
        self.lat, self.waits, self.holds = [], [], []

    def add(self, t_start, t_acq, t_rel_call, t_rel):
        """Record one pair; False once the measured window is over."""
        measured = self.measure_from <= t_rel <= self.measure_to
        if measured:
            self.lat.append(t_rel - t_start)
            self.waits.append(t_acq - t_start)
        if self.contended:
            self.holds.append((t_acq, t_rel_call, t_rel, t_start, self.i, measured))
        return t_rel <= self.measure_to

    def result(self):
        return self.lat, self.waits, self.holds


def loop(i, args, lock, t0):
    """One worker's measured loop; returns (latencies, waits, holds)."""
    s = Samples(i, args, t0)
    now = time.monotonic_ns
    while True:
        t_start = now()
        lock.acquire()
        t_acq = now()
        t_rel_call = now()
        lock.release()
        if not s.add(t_start, t_acq, t_rel_call, now()):
            return s.result()


async def aloop(i, args, acquire, release, t0):
    """loop() for one asyncio task: acquire() and release() are awaited."""
    s = Samples(i, args, t0)
    now = time.monotonic_ns
    while True:
        t_start = now()
        await acquire()
        t_acq = now()
        t_rel_call = now()
        await release()
        if not s.add(t_start, t_acq, t_rel_call, now()):
            return s.result()


async def async_calls(args, names):
    """A connection (redis.asyncio) or client, and an (acquire, release)
    pair of coroutine functions for each lock name."""
    if args.lib == "redis-py":
        import redis.asyncio as aredis

        conn = aredis.Redis.from_url(args.url)
        await conn.ping()
        locks = [conn.lock(n, timeout=LEASE_S) for n in names]
        return conn, [(lk.acquire, lk.release) for lk in locks]
    conn = connect(args)
    locks = [make_lock(args, conn, n) for n in names]
    return conn, [(lk.__aenter__, lambda lk=lk: lk.__aexit__(None, None, None)) for lk in locks]


async def async_close(args, conn):
    if args.lib == "redis-py":
        await conn.close()
    else:
        conn.close()


def run_asyncio(args):
    import asyncio

    async def main():
        conn, calls = await async_calls(args, [lock_name(args, i, "a") for i in range(args.workers)])
        t0 = time.monotonic_ns()
        results = await asyncio.gather(*(aloop(i, args, calls[i][0], calls[i][1], t0)
                                         for i in range(args.workers)))
        await async_close(args, conn)
        return results

    results = asyncio.run(main())
    return merge(results)


def process_worker(i, args, start, barrier, out):
    """One process: connect, wait for the start, loop, send back samples."""
    if args.asyncio_processes:
        import asyncio

        async def main():
            conn, calls = await async_calls(args, [lock_name(args, i, "q")])
            barrier.wait()
            result = await aloop(i, args, calls[0][0], calls[0][1], start.value)
            await async_close(args, conn)
            return result

        out.put(asyncio.run(main()))
        return
    conn = connect(args)
    lock = make_lock(args, conn, lock_name(args, i, "p"))
    barrier.wait()
    out.put(loop(i, args, lock, start.value))
    if args.lib == "dlock":
        conn.close()


def run_processes(args):
    ctx = mp.get_context("fork")
    start = ctx.Value("q", 0)
    barrier = ctx.Barrier(args.workers + 1)
    out = ctx.Queue()
    procs = [ctx.Process(target=process_worker, args=(i, args, start, barrier, out))
             for i in range(args.workers)]
    for p in procs:
        p.start()
    start.value = time.monotonic_ns()
    barrier.wait(timeout=120)
    results = [out.get(timeout=args.seconds + 120) for _ in procs]
    for p in procs:
        p.join()
        if p.exitcode != 0:
            fail("a worker failed (exit %s)" % p.exitcode)
    return merge(results)


def run_threads(args):
    conn = connect(args)
    locks = [make_lock(args, conn, lock_name(args, i, "t")) for i in range(args.workers)]
    barrier = threading.Barrier(args.workers + 1)
    start = [0]
    results, errors = [], []

    def work(i):
        try:
            barrier.wait()
            results.append(loop(i, args, locks[i], start[0]))
        except Exception as e:  # reported after the others finish
            errors.append(e)

    ts = [threading.Thread(target=work, args=(i,)) for i in range(args.workers)]
    for t in ts:
        t.start()
    start[0] = time.monotonic_ns()
    barrier.wait(timeout=120)
    for t in ts:
        t.join()
    if errors:
        fail("a worker failed: %r" % errors[0])
    if args.lib == "dlock":
        conn.close()
    return merge(results)


def merge(results):
    """The workers' (latencies, waits, holds) as one of each, plus how many
    measured pairs each worker completed."""
    lat = [x for r in results for x in r[0]]
    waits = [x for r in results for x in r[1]]
    holds = [x for r in results for x in r[2]]
    return lat, waits, holds, [len(r[0]) for r in results]


def fail(why, code=70):
    print("%s bench: %s" % (LABEL[ARGS.lib], why), file=sys.stderr)
    sys.exit(code)


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
            fail("mutual exclusion broken: two holders at once")
        if not b[5] or a[4] == b[4] or b[3] >= a[0]:
            continue
        samples.append(max(0, b[0] - a[2]))
    if not samples:
        return None
    samples.sort()
    return samples[(len(samples) - 1) // 2] / 1000.0


ARGS = None


def main(default_lib=None):
    global ARGS
    args = ARGS = parse_args(default_lib)
    try:
        connect(args)
    except ImportError as e:
        hint = "python3-redis" if args.lib != "dlock" else "PYTHONPATH=bindings/python, DLOCK_LIBRARY"
        fail("cannot import %s (%s): %s" % (args.lib, hint, e), 69)
    except Exception as e:  # any connection or auth failure
        fail("cannot use %s: %s" % (args.url, e), 69)
    if args.asyncio:
        lat, waits, holds, done = run_asyncio(args)
    else:
        lat, waits, holds, done = run_threads(args) if args.threads else run_processes(args)
    lat.sort()
    waits.sort()
    line = {
        "lib": LABEL[args.lib],
        "mode": args.mode,
        "workers": args.workers,
        "ops": len(lat),
        "seconds": round(args.seconds, 3),
        "ops_per_s": round(len(lat) / args.seconds, 1),
        "p50_us": round(percentile(lat, 0.50), 1),
        "p99_us": round(percentile(lat, 0.99), 1),
    }
    # The acquire call alone: the wait, in the contended case; and each
    # worker's pairs over the mean (1.0: all served alike).
    fair_share = len(lat) / args.workers
    line["p999_us"] = round(percentile(lat, 0.999), 1)
    line["wait_p99_us"] = round(percentile(waits, 0.99), 1)
    line["wait_p999_us"] = round(percentile(waits, 0.999), 1)
    line["share_min"] = round(min(done) / fair_share, 3) if fair_share else 0.0
    line["share_max"] = round(max(done) / fair_share, 3) if fair_share else 0.0
    if args.mode == "contended":
        h = handoff_p50(holds)
        line["handoff_p50_us"] = None if h is None else round(h, 1)
    line["kind"] = ("asyncio" if args.asyncio else "threads" if args.threads
                    else "asyncio-processes" if args.asyncio_processes else "processes")
    if args.fair:
        line["fair"] = True
    print(json.dumps(line, separators=(",", ":")))


if __name__ == "__main__":
    main()
