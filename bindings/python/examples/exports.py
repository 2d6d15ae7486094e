#!/usr/bin/env python3
"""At most PERMITS exports at once, over every host that runs this: a
permit-expirable semaphore whose permits return by themselves when their
holder dies (after the lease), so a crashed worker never keeps a slot.
Run as `exports.py [URL [PERMITS]]` (default redis://127.0.0.1:6379, 2);
prints one line per export it ran."""
import sys
import threading
import time

import dlock


def export(n: int, permit: dlock.Permit) -> None:
    time.sleep(0.05)  # the work the limit protects
    if permit.lost:  # the lease ran out: another worker may have the slot
        raise RuntimeError("export %d overran its permit" % n)
    # One write per line: print() writes the line and its end apart, and
    # the workers are threads.
    sys.stdout.write("export %d done under permit %s\n" % (n, permit.id[:8]))
    sys.stdout.flush()


def main() -> int:
    url = sys.argv[1] if len(sys.argv) > 1 else "redis://127.0.0.1:6379"
    permits = int(sys.argv[2]) if len(sys.argv) > 2 else 2
    try:
        with dlock.Client(url) as c:
            # Every process passes the same size; the first one sets it.
            slots = c.expirable_semaphore("exports", permits, wait=30.0, lease=60.0)

            def worker(n: int) -> None:
                with slots as permit:
                    export(n, permit)

            ts = [threading.Thread(target=worker, args=(n,)) for n in range(6)]
            for t in ts:
                t.start()
            for t in ts:
                t.join()
    except dlock.DlockError as e:
        print("exports: %s: %s" % (type(e).__name__, e), file=sys.stderr)
        return 69
    return 0


if __name__ == "__main__":
    sys.exit(main())
