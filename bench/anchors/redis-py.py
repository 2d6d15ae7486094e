#!/usr/bin/python3
"""Anchor for dlock-bench: the same uncontended/contended lock+release loop
through redis-py's Lock (Debian python3-redis).

    python3 redis-py.py -u URL --mode uncontended|contended --workers N [--seconds S] [--threads]

Prints one JSON line in dlock-bench's shape with "lib":"redis-py". The
loop, its timing and its checks are bench/pylocks.py's (shared with the
dlock Python package's benchmark, bench/python.sh): by default N processes,
each with its own connection, looping acquire/release on Lock(timeout=10)
(SET NX PX polled every 0.1 s; release one EVALSHA).
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import pylocks  # noqa: E402 (found through the path above)

if __name__ == "__main__":
    pylocks.main(default_lib="redis-py")
