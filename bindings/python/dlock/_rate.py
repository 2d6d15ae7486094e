"""The rate limiter (dlock_rate): GCRA, timed by the server.

A RateLimiter is not one of the shared handles of a name, as a lock is:
its C handle is opened with settings (dlock_rate_new checks them against
the stored ones), so each rate_limiter() call opens its own. The C handle
is thread-safe, so one RateLimiter serves every thread. Asynchronous
acquires take an idle C handle of the limiter's own (the library runs
one asynchronous call per handle) and give it back from their outcome.
"""
from __future__ import annotations

import asyncio
import ctypes
import threading
from typing import Any, List, NamedTuple, Optional

from . import _aio, _errors, _native
from ._aio import bridge as _bridge
from ._args import Name, Seconds, _cname, _count, _flag, _rate_settings, _subject, _wait_ms
from ._errors import ClientClosed, check as _check
from ._handles import _Handle, _State

_lib = _native.lib


class RateStatus(NamedTuple):
    """What a limit's bucket holds, read in one atomic step: whether one
    more ``permits`` would be granted now, how many could be taken at once,
    in how many seconds the ones asked for are due (0.0 now, None never:
    more than the burst), in how many seconds the bucket is full again,
    and the settings stored with the limit."""

    allowed: bool
    remaining: int
    next_due: Optional[float]
    full_in: float
    rate: int
    per: float
    burst: int


def _status(r: "_native.RateResult") -> RateStatus:
    return RateStatus(bool(r.allowed), r.remaining,
                      None if r.retry_after_ms < 0 else r.retry_after_ms / 1000.0,
                      r.reset_ms / 1000.0, r.rate, r.interval_ms / 1000.0, r.burst)


def _open(st: _State, name: bytes, opts: "_native.RateOptions") -> _Handle:
    """A C handle of limit `name` with these settings."""
    ptr = ctypes.c_void_p()
    st.enter()
    try:
        _check(_lib.dlock_rate_new(st.ptr, name, ctypes.byref(opts), ctypes.byref(ptr)))
        with st.mu:
            return _Handle(st, "rate", name, ptr.value)
    finally:
        st.leave()


class RateLimiter:
    """A distributed rate limit, made by Client.rate_limiter(): ``rate``
    permits per ``per`` seconds, up to ``burst`` at once after a pause.
    Time is the Redis server's. ``subject`` (a str or bytes: a user, an
    address) gives each subject a bucket of its own under the same
    settings; None is the whole limit's bucket. A server that loses its
    data forgets the buckets and admits a new burst."""

    def __init__(self, st: _State, name: bytes, rate: int, interval_ms: int, burst: int, change: bool) -> None:
        self._opts = _native.RateOptions(rate=rate, interval_ms=interval_ms, burst=burst,
                                         change=1 if change else 0)
        self._h: Optional[_Handle] = _open(st, name, self._opts)
        # Spare handles open with the settings the limit had then: no
        # asynchronous acquire replaces them.
        self._opts.change = 0
        self._idle: List[_Handle] = []
        self._mu = threading.Lock()

    def _handle(self) -> _Handle:
        h = self._h
        if h is None:
            raise ClientClosed("the dlock RateLimiter was closed")
        return h

    def _rc(self, h: _Handle, fn: Any, *args: Any) -> int:
        st = h.state
        st.enter()
        try:
            return fn(h.ptr, *args)
        finally:
            st.leave()

    @property
    def name(self) -> str:
        return self._handle().name.decode("utf-8", "replace")

    def acquire(self, permits: int = 1, subject: Optional[Name] = None, wait: Seconds = None) -> int:
        """Take ``permits`` (1 to the burst) from ``subject``'s bucket, all
        or nothing, sleeping until they are due; returns the permits that
        could still be taken at once. NotAcquired, without waiting, when
        they are due only after ``wait`` seconds (None: forever; 0: now or
        not at all). InvalidArgument for more than the burst. The wait is
        one library call: Ctrl-C is handled when it returns."""
        n, s, wait_ms = _count(permits), _subject(subject), _wait_ms(wait)
        h = self._handle()
        res = _native.RateResult()
        _check(self._rc(h, _lib.dlock_rate_acquire, s, n, wait_ms, ctypes.byref(res)))
        return res.remaining

    def try_acquire(self, permits: int = 1, subject: Optional[Name] = None) -> bool:
        """Take ``permits`` now if they are due: True, or False (nothing taken)."""
        n, s = _count(permits), _subject(subject)
        h = self._handle()
        res = _native.RateResult()
        rc = self._rc(h, _lib.dlock_rate_try, s, n, ctypes.byref(res))
        if rc == _errors.ERR_TIMEOUT:
            return False
        _check(rc)
        return True

    def status(self, subject: Optional[Name] = None, permits: int = 1) -> RateStatus:
        """What taking ``permits`` from ``subject``'s bucket would give now,
        taking nothing."""
        n, s = _count(permits), _subject(subject)
        h = self._handle()
        res = _native.RateResult()
        _check(self._rc(h, _lib.dlock_rate_status, s, n, ctypes.byref(res)))
        return _status(res)

    def set(self, rate: int, per: Seconds = 1.0, burst: Optional[int] = None) -> bool:
        """Replace the limit's settings for every client, waking its
        waiters; True when the stored ones were others."""
        r, ms, b = _rate_settings(rate, per, burst)
        h = self._handle()
        opts = _native.RateOptions(rate=r, interval_ms=ms, burst=b)
        changed = ctypes.c_int()
        _check(self._rc(h, _lib.dlock_rate_set, ctypes.byref(opts), ctypes.byref(changed)))
        with self._mu:
            self._opts.rate, self._opts.interval_ms, self._opts.burst = r, ms, b
        return bool(changed.value)

    async def acquire_async(self, permits: int = 1, subject: Optional[Name] = None,
                            wait: Seconds = None) -> int:
        """acquire() for a task, on the library's asynchronous acquire: the
        waiting task holds no thread. A task cancelled while it waits may
        still have taken its permits."""
        n, s, wait_ms = _count(permits), _subject(subject), _wait_ms(wait)
        h = self._spare()

        def hook(_status: int, _token: int, _awaited: bool) -> None:
            self._spare_done(h)

        key, fut = _bridge.call_start(asyncio.get_running_loop(), hook)
        assert fut is not None
        _bridge.call_submit(
            key, lambda: self._rc(h, _lib.dlock_rate_acquire_async, s, n, wait_ms,
                                  *_bridge.via(key, "rate", _aio.on_rate)),
            lambda: self._spare_done(h))
        return await _bridge.await_call(key, fut)

    def _spare(self) -> _Handle:
        """An idle C handle of the limit for one asynchronous call. It is
        opened with the settings last known here; when another client has
        changed them since, with the ones stored now, read through the
        limiter's own handle (opening never replaces them)."""
        h = self._handle()
        with self._mu:
            if self._idle:
                return self._idle.pop()
            opts = _native.RateOptions(rate=self._opts.rate, interval_ms=self._opts.interval_ms,
                                       burst=self._opts.burst)
        try:
            return _open(h.state, h.name, opts)
        except _errors.InvalidArgument:
            res = _native.RateResult()
            _check(self._rc(h, _lib.dlock_rate_status, None, 1, ctypes.byref(res)))
            with self._mu:
                self._opts.rate, self._opts.interval_ms, self._opts.burst = res.rate, res.interval_ms, res.burst
            opts = _native.RateOptions(rate=res.rate, interval_ms=res.interval_ms, burst=res.burst)
            return _open(h.state, h.name, opts)

    def _spare_done(self, h: _Handle) -> None:
        with self._mu:
            if self._h is not None:
                self._idle.append(h)

    def close(self) -> None:
        """Let go of the limiter's C handles (each once no call is under
        way on it). The limit and its buckets stay."""
        with self._mu:
            self._h = None
            self._idle.clear()

    def __enter__(self) -> "RateLimiter":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        h = self._h
        if h is None:
            return "<dlock.RateLimiter closed>"
        return "<dlock.RateLimiter %r>" % h.name.decode("utf-8", "replace")


def rate_limiter(st: _State, name: Name, rate: Any, per: Seconds, burst: Any, change: Any) -> RateLimiter:
    b = _cname(name)
    r, ms, bu = _rate_settings(rate, per, burst)
    return RateLimiter(st, b, r, ms, bu, bool(_flag(change, "change")))
