"""What Python callers pass, checked and turned into the library's
arguments: seconds into milliseconds, names into bytes.

Checked here, before any call into the library, so that a wrong type is a
TypeError and a bad value a ValueError (InvalidArgument) that speaks
seconds, as the Python API does.
"""
from __future__ import annotations

import ctypes
import math
from typing import Any, Optional, Union

from . import _native
from ._errors import InvalidArgument

Name = Union[str, bytes]
Seconds = Optional[float]

_LONG_MAX = (1 << (8 * ctypes.sizeof(ctypes.c_long) - 1)) - 1
_INT_MAX = (1 << 31) - 1
_FOREVER = _native.WAIT_FOREVER
_WATCHDOG = _native.LEASE_WATCHDOG


class _Default:
    def __repr__(self) -> str:
        return "<default>"


_DEFAULT: Any = _Default()


def _ms(seconds: float, what: str) -> int:
    """A non-negative number of seconds as whole milliseconds, rounded up so
    that a short positive time never becomes 0 (which means something else
    to the library)."""
    try:
        s = float(seconds)
    except (TypeError, ValueError):
        raise TypeError("%s must be a number of seconds, not %r" % (what, seconds)) from None
    if s != s or s < 0:
        raise InvalidArgument("%s must be >= 0 seconds, not %r" % (what, seconds))
    if s == math.inf:
        return _LONG_MAX
    return min(math.ceil(s * 1000), _LONG_MAX)


def _busy_poll_us(value: Seconds) -> int:
    """busy_poll as dlock_options.busy_poll_us: None the default, 0 never
    (-1 there), else microseconds, at most 10 ms."""
    if value is None:
        return 0
    try:
        s = float(value)
    except (TypeError, ValueError):
        raise TypeError("busy_poll must be a number of seconds, not %r" % (value,)) from None
    if s != s or s < 0 or s > 0.01:
        raise InvalidArgument("busy_poll must be 0 (never) to 0.01 seconds, not %r" % (value,))
    return -1 if s == 0 else max(1, round(s * 1e6))


def _wait_ms(wait: Seconds) -> int:
    """None (or infinity): forever; 0: try once; else seconds."""
    if wait is None:
        return _FOREVER
    ms = _ms(wait, "wait")
    return _FOREVER if ms == _LONG_MAX else ms


def _lease_ms(lease: Seconds) -> int:
    """None: renewed by the watchdog until release; else a lease in seconds
    after which the hold ends by itself (the library checks the range)."""
    if lease is None:
        return _WATCHDOG
    ms = _ms(lease, "lease")
    if ms == 0:
        raise InvalidArgument("lease must be > 0 seconds, or None for the watchdog")
    return ms


def _option_ms(value: Seconds, what: str, limit: int) -> int:
    if value is None:
        return 0
    ms = _ms(value, what)
    if ms == 0 or ms > limit:
        raise InvalidArgument("%s must be > 0 and at most %d ms, not %r s" % (what, limit, value))
    return ms


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

