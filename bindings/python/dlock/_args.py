"""What Python callers pass, checked and turned into the library's
arguments: seconds into milliseconds, counts into C longs, names into bytes.

Checked here, before any call into the library, so that a wrong type is a
TypeError and a bad value an InvalidArgument (a ValueError) whose message
speaks seconds, as the Python API does, not the library's milliseconds.
ctypes itself would take a str for nothing, cut an int too big for a C
long to its low bits, and take True for 1. The library still checks
everything again.

Times are seconds: an int, a float (or any real number but a bool) or a
datetime.timedelta.
"""
from __future__ import annotations

import ctypes
import datetime
import math
import numbers
from typing import Any, Optional, Union

from . import _native
from ._errors import InvalidArgument

Name = Union[str, bytes]
Seconds = Optional[float]

_LONG_MAX = (1 << (8 * ctypes.sizeof(ctypes.c_long) - 1)) - 1
_INT_MAX = (1 << 31) - 1
_UINT64_MAX = (1 << 64) - 1
_FOREVER = _native.WAIT_FOREVER
_WATCHDOG = _native.LEASE_WATCHDOG
_LEASE_MAX_MS = _native.LEASE_MAX_MS

# The shortest leases the library takes (dlock.h: a lock's lease is 3 ms
# to DLOCK_LEASE_MAX_MS, a RedLock's at least 10 ms, the client's watchdog
# lease at least 30 ms, a fair waiter's timeout 20 ms to half the maximum).
LEASE_MIN_MS = 3
REDLOCK_LEASE_MIN_MS = 10
_WATCHDOG_LEASE_MIN_MS = 30
_FAIR_WAITER_MIN_MS = 20


class _Default:
    def __repr__(self) -> str:
        return "<default>"


_DEFAULT: Any = _Default()


def _kind(value: Any) -> str:
    return "%s %r" % (type(value).__name__, value)


def _seconds(value: Any, what: str) -> float:
    """A number of seconds as a float (maybe NaN or infinite); TypeError
    for anything else, a bool or a string of digits among them."""
    t = type(value)
    if t is float or t is int:  # the usual case, first
        try:
            return float(value)
        except OverflowError:  # an int past a float's range
            return math.inf
    if isinstance(value, datetime.timedelta):
        return value.total_seconds()
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        try:
            return float(value)
        except OverflowError:
            return math.inf if value > 0 else -math.inf
    raise TypeError("%s must be a number of seconds (int, float or timedelta), not %s" % (what, _kind(value)))


def _s(ms: int) -> str:
    """Milliseconds as seconds, for a message."""
    return ("%.3f" % (ms / 1000.0)).rstrip("0").rstrip(".")


def _busy_poll_us(value: Seconds) -> int:
    """busy_poll as dlock_options.busy_poll_us: None the default, 0 never
    (-1 there), else microseconds, at most 10 ms."""
    if value is None:
        return 0
    s = _seconds(value, "busy_poll")
    if s != s or s < 0 or s > 0.01:
        raise InvalidArgument("busy_poll must be 0 (never) to 0.01 seconds, not %r" % (value,))
    return -1 if s == 0 else max(1, round(s * 1e6))


def _wait_ms(wait: Seconds, what: str = "wait") -> int:
    """None (or infinity): forever; 0: try once; else seconds."""
    if wait is None:
        return _FOREVER
    s = _seconds(wait, what)
    if s != s or s < 0:
        raise InvalidArgument("%s must be >= 0 seconds (0: try once, None: forever), not %r" % (what, wait))
    if s == math.inf:
        return _FOREVER
    ms = math.ceil(s * 1000)
    return _FOREVER if ms >= _LONG_MAX else ms


def _lease_ms(lease: Seconds, what: str = "lease", min_ms: int = LEASE_MIN_MS,
              watchdog: bool = True) -> int:
    """None: renewed by the watchdog until release (where `watchdog`);
    else a lease in seconds, min_ms to DLOCK_LEASE_MAX_MS, after which the
    hold ends by itself."""
    if lease is None and watchdog:
        return _WATCHDOG
    s = None if lease is None else _seconds(lease, what)
    ms = 0 if s is None or s != s or s <= 0 or s == math.inf else math.ceil(s * 1000)
    if not min_ms <= ms <= _LEASE_MAX_MS:
        raise InvalidArgument("%s must be %s to %s seconds (about %.1f days)%s, not %r" % (
            what, _s(min_ms), _s(_LEASE_MAX_MS), math.floor(_LEASE_MAX_MS / 8640000.0) / 10,
            ", or None for the watchdog" if watchdog else "", lease))
    return ms


def _option_ms(value: Seconds, what: str, max_ms: int, min_ms: int = 1) -> int:
    """A Client option in seconds as milliseconds: None the library's
    default (0), else min_ms to max_ms."""
    if value is None:
        return 0
    s = _seconds(value, what)
    ms = 0 if s != s or s <= 0 or s == math.inf else math.ceil(s * 1000)
    if not min_ms <= ms <= max_ms:
        raise InvalidArgument("%s must be %s to %s seconds, or None for the default, not %r"
                              % (what, _s(min_ms), _s(max_ms), value))
    return ms


def _watchdog_lease_ms(value: Seconds) -> int:
    return _option_ms(value, "watchdog_lease", _LEASE_MAX_MS, _WATCHDOG_LEASE_MIN_MS)


def _fair_waiter_ms(value: Seconds) -> int:
    # The queue's keys live twice as long as this timeout.
    return _option_ms(value, "fair_waiter_timeout", _LEASE_MAX_MS // 2, _FAIR_WAITER_MIN_MS)


def _int(value: Any, what: str, low: int, high: int) -> int:
    """An integer from low to high: TypeError for a bool, a float or a
    str; InvalidArgument (ValueError) out of range."""
    if type(value) is not int:
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise TypeError("%s must be an int, not %s" % (what, _kind(value)))
        value = int(value)
    if not low <= value <= high:
        raise InvalidArgument("%s must be %d to %d, not %d" % (what, low, high, value))
    return value


def _count(value: Any, what: str = "permits") -> int:
    """A count of permits (or a latch's count): 1 to 2^31-1."""
    return _int(value, what, 1, _INT_MAX)


def _permits(value: Any) -> int:
    """The permits a semaphore is made with. The library takes 0, but a
    semaphore of no permits can never be acquired until someone releases
    one it never took: a mistake far more often than a design."""
    if type(value) is int and value == 0:
        raise InvalidArgument("permits must be 1 to %d, not 0: a semaphore of 0 permits could never be "
                              "acquired" % _INT_MAX)
    return _count(value)


def _fence_floor(value: Any) -> int:
    return _int(value, "floor", 0, _UINT64_MAX)


def _flag(value: Any, what: str) -> int:
    """A bool, as the library's int flag (1 or 0)."""
    if type(value) is not bool:
        raise TypeError("%s must be True or False, not %s" % (what, _kind(value)))
    return 1 if value else 0


def _callback(fn: Any, what: str = "on_lost") -> Any:
    if fn is not None and not callable(fn):
        raise TypeError("%s must be callable or None, not %s" % (what, _kind(fn)))
    return fn


def _cname(name: Name, what: str = "name") -> bytes:
    """A name as the library takes it. A NUL would silently cut the name in
    C, so it is refused here; the library checks everything else."""
    if isinstance(name, str):
        try:
            b = name.encode("utf-8")
        except UnicodeEncodeError as e:
            raise InvalidArgument("%s is not valid UTF-8: %s" % (what, e)) from None
    elif isinstance(name, bytes):
        b = name
    else:
        raise TypeError("%s must be str or bytes, not %s" % (what, type(name).__name__))
    if b"\0" in b:
        raise InvalidArgument("%s contains a NUL character" % what)
    return b


def _rate_settings(rate: Any, per: Seconds, burst: Any) -> "tuple[int, int, int]":
    """A rate limit's settings as dlock_rate_options: `rate` permits (an
    int) per `per` seconds, a whole number of milliseconds up to
    DLOCK_RATE_INTERVAL_MAX_MS; `burst` an int, None for the rate; and
    burst * interval within DLOCK_RATE_SPAN_MAX."""
    n = _count(rate, "rate")
    s = _seconds(per, "per")
    ms = round(s * 1000) if s == s and 0 < s < math.inf else 0
    if not 1 <= ms <= _native.RATE_INTERVAL_MAX_MS or abs(s * 1000 - ms) > 1e-6 * max(1, ms):
        raise InvalidArgument("per must be a whole number of milliseconds from 0.001 to %s seconds "
                              "(about %.1f days), not %r" % (
                                  _s(_native.RATE_INTERVAL_MAX_MS),
                                  math.floor(_native.RATE_INTERVAL_MAX_MS / 8640000.0) / 10, per))
    b = n if burst is None else _count(burst, "burst")
    if b * ms > _native.RATE_SPAN_MAX:
        raise InvalidArgument("burst * per may be at most %d permit-milliseconds (a burst of 46,000 over "
                              "a day), not %d * %s s" % (_native.RATE_SPAN_MAX, b, _s(ms)))
    return n, ms, b


def _subject(subject: Any) -> Optional[bytes]:
    """A rate limit's subject: None for the whole limit's bucket, else a
    str or bytes of 1 to 512 bytes without NUL."""
    if subject is None:
        return None
    b = _cname(subject, "subject")
    if not 1 <= len(b) <= 512:
        raise InvalidArgument("subject must be 1 to 512 bytes, not %d" % len(b))
    return b
