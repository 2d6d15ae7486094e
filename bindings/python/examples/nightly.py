#!/usr/bin/env python3
"""The README's example as a program: take the lock, write with its
fencing token, release. Run as `nightly.py [URL]` (default
redis://127.0.0.1:6379); the library is found through $DLOCK_LIBRARY or the
dynamic loader."""
import sys

import dlock


def write(token: int) -> None:
    # The storage you fence would refuse a token lower than one it has seen.
    print("writing the nightly report with fencing token", token)


def main() -> int:
    url = sys.argv[1] if len(sys.argv) > 1 else "redis://127.0.0.1:6379"
    try:
        with dlock.Client(url) as c:
            with c.lock("reports:nightly", wait=5.0) as hold:
                write(hold.token)
                if hold.lost:
                    print("lost the lock before finishing", file=sys.stderr)
                    return 1
    except dlock.NotAcquired:
        print("someone else is writing the report", file=sys.stderr)
        return 75
    except dlock.DlockError as e:
        print("nightly: %s: %s" % (type(e).__name__, e), file=sys.stderr)
        return 69
    return 0


if __name__ == "__main__":
    sys.exit(main())
