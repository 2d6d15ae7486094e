"""dlock: distributed locks on Redis, for Python, on the C library libdlock.

    import dlock
    c = dlock.Client("redis://127.0.0.1:6379")
    with c.lock("reports:nightly", wait=5.0) as hold:
        write(hold.token)          # fencing token
        if hold.lost: ...          # the watchdog lost it (also c.lock(..., on_lost=fn))

Reentrant locks with fencing tokens, renewed by a watchdog and told when
lost; fair locks, read-write locks, semaphores (also with permits that
expire), latches, multi-locks, RedLock over independent masters, rate
limits and global IDs.
Waiting sleeps until a release is announced (no polling) and releases the
GIL. Every failure raises a DlockError subclass carrying the library's
explanation. The C library is found through $DLOCK_LIBRARY or the dynamic
loader (see README.md).

How the modules fit, from the C library up:

- _native: loads libdlock with ctypes, mirrors dlock.h's structs and
  declares every function the package calls (tests/check_header.py,
  the ctest entry python_header, checks this copy against dlock.h).
- _errors: one exception class per dlock_status.
- _args: what callers pass, checked (TypeError, ValueError) and turned
  into the library's arguments (milliseconds, bytes).
- _service: the package's service thread (loss callbacks, frees) and
  what fork() renews in a child.
- _handles: a Client's C state (the guard of calls under way, close) and
  the C handles shared by every object of one name, with their holds and
  loss reports.
- _aio: the asyncio bridge: asynchronous calls, each loop's completion
  queue, each task's own handles.
- _client: the public Client, Lock, RWLock, Semaphore, Latch and Hold.
- _expirable (ExpirableSemaphore, Permit), _multi (MultiLock, RedLock)
  and _rate (RateLimiter) build on _client the same way.
"""
from ._errors import (AuthenticationError, ClientClosed, ConnectionError, Deadlock, DlockError,
                      ForkedClient, IdOverflow, InvalidArgument, InvalidURL, LockLost, NotAcquired,
                      NotOwner, NotReplicated, OutOfMemory, RedisError, SystemFailure, WrongKind)
from ._client import (Client, Hold, Latch, Lock, LockInfo, RWLock, RWLockInfo, RWLockMode,
                      Semaphore, check_id_prefix, check_name)
from ._expirable import ExpirableSemaphore, Permit
from ._multi import MultiLock, RedLock, RedLockHold
from ._rate import RateLimiter, RateStatus
from . import _native

# The package's own version, kept equal to the C library's VERSION file of
# the tree it ships in (a test checks). The library loaded may be another
# build: library_version() says which.
__version__ = "0.3.0"

#: How the C library was loaded: the path from $DLOCK_LIBRARY, or the
#: soname the dynamic loader resolved.
library_path: str = _native.path


def library_version() -> str:
    """The version of the libdlock loaded (dlock_version())."""
    return _native.lib.dlock_version().decode()


__all__ = [
    "Client", "Lock", "RWLock", "RWLockMode", "Semaphore", "Latch", "Hold", "LockInfo",
    "ExpirableSemaphore", "Permit", "MultiLock", "RedLock", "RedLockHold",
    "RWLockInfo", "RateLimiter", "RateStatus", "check_name", "check_id_prefix", "library_version", "library_path",
    "DlockError", "InvalidArgument", "InvalidURL", "ConnectionError", "AuthenticationError",
    "NotAcquired", "NotOwner", "LockLost", "RedisError", "OutOfMemory", "IdOverflow",
    "SystemFailure", "Deadlock", "NotReplicated", "WrongKind", "ClientClosed", "ForkedClient",
]
