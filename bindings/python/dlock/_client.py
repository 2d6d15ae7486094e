"""The Python face of libdlock: Client and the objects it makes (Lock,
RWLock, Semaphore, Latch and their Holds).

These classes stand on _handles (a client's C state and its shared C
handles), take their arguments through _args, run their ``async with``
on the asyncio bridge of _aio and report losses through the service
thread of _service. See the package's docstring for the whole map.
"""
from __future__ import annotations

import asyncio
import ctypes
import os
import threading
import time
import weakref
from typing import TYPE_CHECKING, Any, Callable, List, NamedTuple, Optional, Tuple

from . import _aio, _errors, _handles, _native, _service
from ._aio import bridge as _bridge
from ._aio import (on_acquired as _on_acquired, on_counted as _on_counted, on_ids as _on_ids,
                   on_latch as _on_latch, on_released as _on_released,
                   on_rw_acquired as _on_rw_acquired, on_rw_released as _on_rw_released,
                   on_sem as _on_sem)
from ._args import (_DEFAULT, _FOREVER, _INT_MAX, Name, Seconds, _busy_poll_us, _callback, _cname,
                    _count, _fair_waiter_ms, _fence_floor, _flag, _int, _lease_ms, _option_ms, _permits,
                    _wait_ms, _watchdog_lease_ms)
from ._errors import check as _check, fail
from ._handles import _FREE, _NEW, _READ, _WRITE, _Handle, _State

if TYPE_CHECKING:
    from ._expirable import ExpirableSemaphore
    from ._rate import RateLimiter

_lib = _native.lib
_log = _service.log

LostCallback = Callable[["Hold"], Any]

_MODE_NAMES = {None: "lock", _READ: "read", _WRITE: "write"}

_READ, _WRITE = 0, 1  # dlock_rw_mode
_MODE_NAMES = {None: "lock", _READ: "read", _WRITE: "write"}

# A wait in the main thread is cut into calls of at most this long, so that
# Ctrl-C (and any other signal handler) runs within that time: Python runs
# handlers between bytecodes, never while a foreign call is inside the
# library. Fair locks are not cut: a fair waiter that stops waiting leaves
# the queue and would lose its place.
_SLICE_MS = 1000



# ---------------------------------------------------------------------------
# Public objects.

class Hold:
    """One acquisition: its fencing ``token`` and whether it was ``lost``.

    Returned by ``acquire()`` and by ``with lock as hold``. Holds belong to
    the thread that acquired them.
    """

    __slots__ = ("lock", "token", "_mode", "_thread", "_flag", "_open", "__weakref__")

    def __init__(self, lock: "_Exclusive", token: int, mode: Optional[int]) -> None:
        self.lock = lock
        #: The fencing token: greater than every token handed out before
        #: for this name (for a read hold: the latest write hold's token).
        self.token = token
        self._mode = mode
        self._thread = threading.get_ident()
        self._flag = False
        self._open = True

    @property
    def mode(self) -> str:
        """"lock" for plain and fair locks, "read" or "write"."""
        return _MODE_NAMES[self._mode]

    @property
    def lost(self) -> bool:
        """True once this hold can no longer be trusted: the watchdog found
        it gone (expired during a pause, force-unlocked, taken over), or its
        trusted time (the lease less the safety margin) is over by this
        process's clock. Asked from the holding thread it is exact by the
        clock even before the watchdog thread has run; asked from another
        thread it says what the loss callback has reported."""
        if self._flag:
            return True
        if not self._open or threading.get_ident() != self._thread:
            return False
        if self.lock._query_lost(self._mode):
            self._flag = True
        return self._flag

    @property
    def held(self) -> bool:
        """True until released (a lost hold still counts as held until its
        release, which raises LockLost)."""
        return self._open

    def release(self) -> None:
        """Release this hold (one level of re-entry), from its thread."""
        self.lock._release(self._mode)

    def __enter__(self) -> "Hold":
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._open:
            _exit_release(self.lock, self._mode, exc[0] is not None)

    def __repr__(self) -> str:
        return "<dlock.Hold %s %r token=%d%s%s>" % (
            self.mode, self.lock.name, self.token, " lost" if self._flag else "",
            "" if self._open else " released")


def _exit_release(lock: Any, what: Any, raising: bool) -> None:
    """Release at the end of a with block: lock._release(what), ``what``
    being a hold's mode or (an expirable semaphore's) the permit. A failed
    release (the hold was lost: the block may have run without the lock) is
    raised, unless the block is raising already: its exception goes on and
    the release's is only logged."""
    try:
        lock._release(what)
    except _errors.DlockError as e:
        _release_failed(lock, e, raising)


def _release_failed(what: Any, err: "_errors.DlockError", raising: bool) -> None:
    """A release at the end of a ``with`` or ``async with`` block failed
    with `err`: raised, unless the block is raising already (then its
    exception goes on and this one is only logged)."""
    if not raising:
        raise err
    _log.warning("dlock: release of %r failed while an exception was raised", what, exc_info=err)


class _OnHandle:
    """An object over one shared C handle: its name and guarded calls."""

    _h: _Handle

    @property
    def name(self) -> str:
        return self._h.name.decode("utf-8", "replace")

    def _rc(self, fn: Any, *args: Any) -> int:
        """fn(handle, *args) while the client is known to be open."""
        st = self._h.state
        st.enter()
        try:
            return fn(self._h.ptr, *args)
        finally:
            st.leave()

    def _call(self, fn: Any, *args: Any) -> None:
        _check(self._rc(fn, *args))


class _Exclusive(_OnHandle):
    """What a plain lock, a fair lock and one mode of a read-write lock
    share: acquire with wait and lease, release, holds per thread."""

    _mode: Optional[int] = None

    def __init__(self, handle: _Handle, wait_ms: int, lease_ms: int,
                 on_lost: Optional[LostCallback]) -> None:
        # wait_ms, lease_ms: checked already (_wait_ms, _lease_ms), so
        # that a bad argument is refused before the handle is made.
        self._h = handle
        self._wait = wait_ms
        self._lease = lease_ms
        #: Called with the Hold when the library finds it lost, on a
        #: thread of this package (not the library's watchdog thread), so
        #: it may take its time and call into the library.
        self.on_lost: Optional[LostCallback] = on_lost

    # The three calls each kind makes in C.
    def _c_acquire(self, wait_ms: int, lease_ms: int, token: ctypes.c_uint64) -> int:
        raise NotImplementedError

    def _c_release(self) -> int:
        raise NotImplementedError

    def _c_lost(self) -> int:
        raise NotImplementedError

    def _sliced(self) -> bool:
        return True

    def acquire(self, wait: Seconds = _DEFAULT, lease: Seconds = _DEFAULT) -> Hold:
        """Acquire for the calling thread and return the Hold.

        ``wait``: seconds to wait (0: try once; None: forever); ``lease``:
        seconds after which the hold ends by itself, or None to have the
        client's watchdog renew it until release. Both default to what the
        lock was made with. Raises NotAcquired when the wait ends first.
        Re-entry by the holding thread returns at once with the same token.
        """
        wait_ms = self._wait if wait is _DEFAULT else _wait_ms(wait)
        lease_ms = self._lease if lease is _DEFAULT else _lease_ms(lease)
        st = self._h.state
        token = ctypes.c_uint64()
        st.enter()
        try:
            # The main thread waits in slices, so that Ctrl-C is seen
            # between them; the first is tried here, which is all an
            # acquisition that does not wait long needs.
            if (0 <= wait_ms <= _SLICE_MS or threading.get_ident() != _service.main_ident
                    or not self._sliced()):
                rc = self._c_acquire(wait_ms, lease_ms, token)
            else:
                deadline = None if wait_ms == _FOREVER else _now_ms() + wait_ms
                rc = self._c_acquire(_SLICE_MS, lease_ms, token)
                if rc == _errors.ERR_TIMEOUT:
                    rc = _slices_after(lambda ms: self._c_acquire(ms, lease_ms, token), deadline)
        finally:
            st.leave()
        if rc:
            fail(rc)
        hold = Hold(self, token.value, self._mode)
        self._h.push(hold)
        return hold

    def release(self) -> None:
        """Release the calling thread's latest hold (one level of re-entry).
        Raises NotOwner when this thread holds nothing here, LockLost when
        the hold had been lost (the hold is gone either way)."""
        self._release(self._mode)

    def _release(self, mode: Optional[int]) -> None:
        # _rc's guard, written out: every release passes here, and _rc
        # would cost a closure and two calls more on every release.
        st = self._h.state
        st.enter()
        try:
            rc = self._c_release()
        finally:
            st.leave()
        if rc == 0:
            self._h.pop(mode, False, False)
        else:
            if rc == _errors.ERR_LOST:
                self._h.pop(mode, True, True)
            fail(rc)

    def _query_lost(self, mode: Optional[int]) -> bool:
        return bool(self._rc(lambda _ptr: self._c_lost()))

    @property
    def lost(self) -> bool:
        """True when the calling thread's current or latest hold was lost
        (see Hold.lost)."""
        return self._query_lost(self._mode)

    def __enter__(self) -> Hold:
        return self.acquire()

    def __exit__(self, *exc: Any) -> None:
        _exit_release(self, self._mode, exc[0] is not None)

    # The two asynchronous calls each kind makes in C, on handle `ptr`.
    def _c_acquire_async(self, ptr: int, wait_ms: int, lease_ms: int, key: int) -> int:
        raise NotImplementedError

    def _c_release_async(self, ptr: int, key: int) -> int:
        raise NotImplementedError

    def _view(self, handle: _Handle) -> "_Exclusive":
        """This object over a task's handle: what its holds refer to (its
        lost query, its release), reporting losses to this object."""
        v = object.__new__(type(self))
        v.__dict__.update(self.__dict__)
        v._h = handle
        v._origin = self
        return v

    async def __aenter__(self) -> Hold:
        """Acquire for the running task, without blocking the loop: the
        task's holds are its own (other tasks wait), and a nested ``async
        with`` of the same lock in the task re-enters."""
        task = _aio.current_task()
        shared_key = self._h.key
        th = _bridge.task_handle(self._h, task, enter=True)
        assert th is not None
        view = self._view(th.handle)

        def give_back(status: int) -> None:
            if status == 0:
                view._release_in_background(lambda: _bridge.task_handle_done(task, shared_key, th))
            else:
                _bridge.task_handle_done(task, shared_key, th)

        token = await _bridge.acquire_on(
            task, shared_key, th,
            lambda key: view._rc(lambda ptr: self._c_acquire_async(ptr, self._wait, self._lease, key)),
            give_back)
        hold = Hold(view, token, self._mode)
        th.handle.push(hold)
        return hold

    def _release_in_background(self, then: Callable[[], None]) -> None:
        """Release an asynchronous hold nobody awaits; then() afterwards."""
        key, _ = _bridge.call_start(None, lambda _st, _tok, _aw: then())
        try:
            rc = self._rc(lambda ptr: self._c_release_async(ptr, key))
        except _errors.DlockError:
            rc = -1
        if rc:
            _bridge.call_drop(key)
            then()

    async def __aexit__(self, *exc: Any) -> None:
        key, fut, rc = self._release_start(_aio.current_task())
        try:
            if rc:
                fail(rc)
            await _bridge.await_call(key, fut)
        except _errors.DlockError as e:
            _release_failed(self, e, exc[0] is not None)

    def _release_start(self, task: "asyncio.Task[Any]") -> "Tuple[int, asyncio.Future[int], int]":
        """Start the release of `task`'s latest hold: the call's key and
        future, and a status that is not 0 when it did not start. The
        hold's bookkeeping is done when the release ends, whether anybody
        awaits it or not (a cancelled exit still releases)."""
        shared_key = self._h.key
        th = _bridge.task_handle(self._h, task, enter=False)
        if th is None:
            raise RuntimeError("dlock: async exit from a task that did not enter")
        mode, ident = self._mode, threading.get_ident()
        view = self._view(th.handle)

        def hook(status: int, _token: int, _awaited: bool) -> None:
            # A failure other than a loss leaves the hold as it was, as a
            # synchronous release does.
            if status in (0, _errors.ERR_LOST):
                th.handle.pop(mode, ended=status != 0, lost=status != 0, thread=ident)
                _bridge.task_handle_done(task, shared_key, th)

        key, fut = _bridge.call_start(task.get_loop(), hook)
        assert fut is not None
        try:
            rc = view._rc(lambda ptr: self._c_release_async(ptr, key))
        except BaseException:
            _bridge.call_drop(key)
            raise
        if rc:
            _bridge.call_drop(key)
            hook(rc, 0, True)
        return key, fut, rc


def _now_ms() -> int:
    return time.monotonic_ns() // 1_000_000


def _wait_in_slices(call: Callable[[int], int], wait_ms: int, sliced: bool = True) -> int:
    """call(ms) for a wait of wait_ms, which in the main thread is cut into
    calls of at most _SLICE_MS (see there) unless ``sliced`` is False;
    returns the status of the last call."""
    if 0 <= wait_ms <= _SLICE_MS or not sliced or threading.get_ident() != _service.main_ident:
        return call(wait_ms)
    deadline = None if wait_ms == _FOREVER else _now_ms() + wait_ms
    rc = call(_SLICE_MS)
    return _slices_after(call, deadline) if rc == _errors.ERR_TIMEOUT else rc


def _slices_after(call: Callable[[int], int], deadline: Optional[int]) -> int:
    """The slices after a first one that timed out, until ``deadline``
    (None: none). Lock.acquire makes its first call itself: most waits end
    in it, and an acquisition without a lambda is cheaper."""
    while True:
        left = _SLICE_MS if deadline is None else max(0, min(_SLICE_MS, deadline - _now_ms()))
        rc = call(left)
        if rc != _errors.ERR_TIMEOUT or (deadline is not None and _now_ms() >= deadline):
            return rc


class Lock(_Exclusive):
    """A reentrant distributed lock (plain or fair), made by Client.lock()
    and Client.fair_lock(). Use it as ``with lock as hold:`` (or ``async
    with``), or with acquire()/release(). Every Lock of one name and kind
    from one Client is one owner per thread, so re-entry works across them.
    """

    def _c_acquire(self, wait_ms: int, lease_ms: int, token: ctypes.c_uint64) -> int:
        return _lib.dlock_lock_acquire(self._h.ptr, wait_ms, lease_ms, token)

    def _c_release(self) -> int:
        return _lib.dlock_lock_release(self._h.ptr)

    def _c_lost(self) -> int:
        return _lib.dlock_lock_lost(self._h.ptr)

    def _c_acquire_async(self, ptr: int, wait_ms: int, lease_ms: int, key: int) -> int:
        return _lib.dlock_lock_acquire_async(ptr, wait_ms, lease_ms, *_bridge.via(key, "acquired", _on_acquired))

    def _c_release_async(self, ptr: int, key: int) -> int:
        return _lib.dlock_lock_release_async(ptr, *_bridge.via(key, "released", _on_released))

    def _sliced(self) -> bool:
        return self._h.kind != "fair"

    @property
    def fair(self) -> bool:
        return self._h.kind == "fair"

    def owned(self) -> bool:
        """True when the calling thread holds this lock (any Lock object of
        this client and name; holds of ``async with`` belong to their task
        and do not count)."""
        return bool(self._h.stacks.get((threading.get_ident(), None)))

    def locked(self) -> bool:
        """True when anybody holds the lock now, as the server says (one
        round trip; the answer may be old by the time it is read)."""
        i = _native.LockInfo()
        _check(self._h.state.call(_lib.dlock_lock_inspect, self._h.name, ctypes.byref(i)))
        return bool(i.held)

    def set_fence_floor(self, floor: int) -> None:
        """Every later acquisition gets a token greater than ``floor`` (the
        highest token your fenced resource has accepted)."""
        _lib.dlock_lock_set_fence_floor(self._h.ptr, _fence_floor(floor))

    def __repr__(self) -> str:
        return "<dlock.Lock %r%s>" % (self.name, " fair" if self.fair else "")


class RWLockMode(_Exclusive):
    """The read or the write side of an RWLock, used like a Lock."""

    def __init__(self, rw: "RWLock", mode: int, wait: Seconds, lease: Seconds) -> None:
        super().__init__(rw._h, _wait_ms(wait), _lease_ms(lease), None)
        self._rw = rw
        self._mode = mode

    @property  # type: ignore[override]
    def on_lost(self) -> Optional[LostCallback]:
        return self._rw.on_lost

    @on_lost.setter
    def on_lost(self, fn: Optional[LostCallback]) -> None:
        if hasattr(self, "_rw"):
            self._rw.on_lost = fn

    def _c_acquire(self, wait_ms: int, lease_ms: int, token: ctypes.c_uint64) -> int:
        return _lib.dlock_rwlock_acquire(self._h.ptr, self._mode, wait_ms, lease_ms, token)

    def _c_release(self) -> int:
        return _lib.dlock_rwlock_release(self._h.ptr, self._mode)

    def _c_lost(self) -> int:
        return _lib.dlock_rwlock_lost(self._h.ptr, self._mode)

    def _c_acquire_async(self, ptr: int, wait_ms: int, lease_ms: int, key: int) -> int:
        return _lib.dlock_rwlock_acquire_async(ptr, self._mode, wait_ms, lease_ms,
                                               *_bridge.via(key, "rw_acquired", _on_rw_acquired))

    def _c_release_async(self, ptr: int, key: int) -> int:
        return _lib.dlock_rwlock_release_async(ptr, self._mode, *_bridge.via(key, "rw_released", _on_rw_released))

    def __repr__(self) -> str:
        return "<dlock.RWLock %r %s>" % (self.name, _MODE_NAMES[self._mode])


class RWLock(_OnHandle):
    """Many readers or one writer, made by Client.rw_lock(). ``read()`` and
    ``write()`` give the two sides, each used like a Lock. A thread holding
    a read hold that asks for the write hold gets Deadlock."""

    def __init__(self, handle: _Handle, on_lost: Optional[LostCallback]) -> None:
        self._h = handle
        #: Called with the lost Hold (see Lock.on_lost); hold.mode tells
        #: which side (checked callable by Client.rw_lock).
        self.on_lost = on_lost

    def read(self, wait: Seconds = None, lease: Seconds = None) -> RWLockMode:
        return RWLockMode(self, _READ, wait, lease)

    def write(self, wait: Seconds = None, lease: Seconds = None) -> RWLockMode:
        return RWLockMode(self, _WRITE, wait, lease)

    def set_fence_floor(self, floor: int) -> None:
        """As Lock.set_fence_floor, for the write holds."""
        _lib.dlock_rwlock_set_fence_floor(self._h.ptr, _fence_floor(floor))

    def __repr__(self) -> str:
        return "<dlock.RWLock %r>" % self.name


class _Sized(_OnHandle):
    """The size calls both semaphores have, on their C functions
    (`_sized`: the prefix, "semaphore" or "psem")."""

    _sized = ""

    def set_permits(self, permits: int) -> bool:
        """Set the number of permits if the semaphore does not exist yet;
        True when this call set it. Another number than the stored one is
        refused (InvalidArgument naming both): resize() changes it."""
        n = _permits(permits)
        was = ctypes.c_int()
        self._call(getattr(_lib, "dlock_%s_set_permits" % self._sized), n, ctypes.byref(was))
        return bool(was.value)

    def resize(self, permits: int) -> None:
        """Make the semaphore ``permits`` large, whatever it was (Redisson's
        setPermits): permits held beyond a smaller size stay held until
        released."""
        self._call(getattr(_lib, "dlock_%s_resize" % self._sized), _permits(permits))

    def add_permits(self, change: int) -> None:
        """Grow (or, with a negative ``change``, shrink) the semaphore by
        ``change`` permits (Redisson's addPermits)."""
        if isinstance(change, bool) or not isinstance(change, int):
            raise TypeError("change must be an int, not %s" % type(change).__name__)
        self._call(getattr(_lib, "dlock_%s_add_permits" % self._sized), change)


class Semaphore(_Sized):
    """A counting semaphore without owners (any process may release), made
    by Client.semaphore(). ``with sem:`` takes one permit and returns it."""

    _sized = "semaphore"

    def __init__(self, handle: _Handle, wait_ms: int) -> None:
        self._h = handle
        self._wait = wait_ms

    def acquire(self, permits: int = 1, wait: Seconds = _DEFAULT) -> None:
        """Take ``permits``, all or nothing; NotAcquired when too few became
        free within ``wait`` seconds (None: forever)."""
        n = _count(permits)
        wait_ms = self._wait if wait is _DEFAULT else _wait_ms(wait)
        self._call(_lib.dlock_semaphore_acquire, n, wait_ms)

    def release(self, permits: int = 1) -> None:
        self._call(_lib.dlock_semaphore_release, _count(permits))

    @property
    def available(self) -> int:
        n = ctypes.c_long()
        self._call(_lib.dlock_semaphore_available, ctypes.byref(n))
        return n.value

    def __enter__(self) -> "Semaphore":
        self.acquire()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()

    # One permit, through the library's asynchronous calls on a handle of
    # the task's own (the library runs one asynchronous call per handle).
    async def __aenter__(self) -> "Semaphore":
        task = _aio.current_task()
        shared_key = self._h.key
        th = _bridge.task_handle(self._h, task, enter=True)
        assert th is not None
        ptr = th.handle.ptr

        def give_back(status: int) -> None:
            if status != 0:
                _bridge.task_handle_done(task, shared_key, th)
                return
            k, _ = _bridge.call_start(None, lambda _st, _tok, _aw: _bridge.task_handle_done(task, shared_key, th))
            if self._rc(lambda _p: _lib.dlock_semaphore_release_async(ptr, 1, _on_sem, k)):
                _bridge.call_drop(k)
                _bridge.task_handle_done(task, shared_key, th)

        await _bridge.acquire_on(
            task, shared_key, th,
            lambda key: self._rc(lambda _p: _lib.dlock_semaphore_acquire_async(
                ptr, 1, self._wait, *_bridge.via(key, "semaphore", _on_sem))),
            give_back)
        return self

    async def __aexit__(self, *exc: Any) -> None:
        task = _aio.current_task()
        shared_key = self._h.key
        th = _bridge.task_handle(self._h, task, enter=False)
        if th is None:
            raise RuntimeError("dlock: async exit from a task that did not enter")

        def hook(status: int, _token: int, _awaited: bool) -> None:
            if status == 0:
                _bridge.task_handle_done(task, shared_key, th)

        key, fut = _bridge.call_start(task.get_loop(), hook)
        assert fut is not None
        _bridge.call_submit(key, lambda: self._rc(lambda _p: _lib.dlock_semaphore_release_async(
            th.handle.ptr, 1, *_bridge.via(key, "semaphore", _on_sem))))
        await _bridge.await_call(key, fut)

    def __repr__(self) -> str:
        return "<dlock.Semaphore %r>" % self.name


class Latch(_OnHandle):
    """A count-down latch, made by Client.latch(): processes wait() until
    others have counted it down to zero."""

    def __init__(self, handle: _Handle) -> None:
        self._h = handle

    def set(self, count: int) -> bool:
        """Set the count if the latch is not set; True when this call set it."""
        n = _count(count, "count")
        was = ctypes.c_int()
        self._call(_lib.dlock_latch_set, n, ctypes.byref(was))
        return bool(was.value)

    def count_down(self) -> int:
        """Count down by one; returns the count left."""
        left = ctypes.c_long()
        self._call(_lib.dlock_latch_count_down, ctypes.byref(left))
        return left.value

    def wait(self, timeout: Seconds = None) -> bool:
        """Wait until the count is zero: True, or False when ``timeout``
        seconds passed first (as threading.Event.wait)."""
        rc = self._rc(_lib.dlock_latch_await, _wait_ms(timeout, "timeout"))
        if rc == _errors.ERR_TIMEOUT:
            return False
        _check(rc)
        return True

    async def wait_async(self, timeout: Seconds = None) -> bool:
        """wait() for a task, on the library's asynchronous await: the
        waiting task holds no thread, and is woken by the last count-down."""
        wait_ms = _wait_ms(timeout, "timeout")
        try:
            await self._spare_call(
                lambda h, key: _lib.dlock_latch_await_async(h.ptr, wait_ms, *_bridge.via(key, "latch", _on_latch)))
        except _errors.NotAcquired:
            return False
        return True

    async def count_down_async(self) -> int:
        """count_down() for a task, on the library's asynchronous
        count-down: the count left. A task cancelled while it waits for
        the answer may still have counted down."""
        return await self._spare_call(
            lambda h, key: _lib.dlock_latch_count_down_async(h.ptr, *_bridge.via(key, "counted", _on_counted)))

    async def _spare_call(self, submit: "Callable[[_Handle, int], int]") -> int:
        """One asynchronous call of the latch on an idle C handle of its
        own (a handle takes one such call at a time): submit(handle, key)
        starts it (its status); returns the call's token."""
        shared = self._h
        h = _bridge.spare_handle(shared)

        def hook(_status: int, _token: int, _awaited: bool) -> None:
            _bridge.spare_done(shared, h)

        key, fut = _bridge.call_start(asyncio.get_running_loop(), hook)
        assert fut is not None
        _bridge.call_submit(key, lambda: self._rc(lambda _p: submit(h, key)), lambda: _bridge.spare_done(shared, h))
        return await _bridge.await_call(key, fut)

    @property
    def count(self) -> int:
        n = ctypes.c_long()
        self._call(_lib.dlock_latch_count, ctypes.byref(n))
        return n.value

    def __repr__(self) -> str:
        return "<dlock.Latch %r>" % self.name


class LockInfo(NamedTuple):
    """What Client.inspect() reports of a plain or fair lock."""

    held: bool
    holder: str  #: owner string "<client id>:<thread>:<handle>", "" when free
    hold_count: int
    ttl: Optional[float]  #: remaining lease in seconds, None when free
    last_token: int


class RWLockInfo(NamedTuple):
    """What Client.inspect_rw() reports of a read-write lock."""

    held: bool
    writer: str
    write_count: int
    readers: int
    ttl: Optional[float]
    last_token: int


def _ttl(ms: int) -> Optional[float]:
    return None if ms < 0 else ms / 1000.0


class Client:
    """A connection to one Redis deployment, shared by every thread.

    ``url``: every URL libdlock takes: ``redis://[[user]:password@]host[:port][/db]``,
    ``unix:///path.sock[?db=N]``, ``redis-sentinel://host[:port],.../MASTER``,
    ``redis-cluster://host[:port],...``. Times are seconds as floats; None
    keeps the library's default. ``username``/``password`` replace the
    URL's credentials (keep them out of URLs you log). ``busy_poll``: how
    long the thread reading the connection's replies polls the socket
    before it sleeps (default 100 us, 0 never, at most 0.01 s); a program
    whose own threads keep every CPU busy does better with 0.

    Connects before returning: InvalidURL, ConnectionError or
    AuthenticationError tell what went wrong. One Client per process is
    the normal use; it is thread-safe. It must not be used across fork():
    in a child it raises ForkedClient; make a new one there. close() (or a
    with block) stops its threads; holds still open are abandoned to
    their leases.
    """

    def __init__(self, url: str, *, connect_timeout: Seconds = None,
                 command_timeout: Seconds = None, watchdog_lease: Seconds = None,
                 fair_waiter_timeout: Seconds = None, offline_ok: bool = False,
                 replica_acks: int = 0, replica_timeout: Seconds = None,
                 safety_margin_pct: Optional[int] = None, username: Optional[str] = None,
                 password: Optional[str] = None, busy_poll: Seconds = None) -> None:
        self._state = _State()
        o = _native.Options()
        o.connect_timeout_ms = _option_ms(connect_timeout, "connect_timeout", _INT_MAX)
        o.command_timeout_ms = _option_ms(command_timeout, "command_timeout", _INT_MAX)
        o.watchdog_lease_ms = _watchdog_lease_ms(watchdog_lease)
        o.fair_waiter_timeout_ms = _fair_waiter_ms(fair_waiter_timeout)
        o.offline_ok = _flag(offline_ok, "offline_ok")
        o.replica_acks = _int(replica_acks, "replica_acks", 0, _INT_MAX)
        o.replica_timeout_ms = _option_ms(replica_timeout, "replica_timeout", _INT_MAX)
        o.safety_margin_pct = (0 if safety_margin_pct is None
                               else _int(safety_margin_pct, "safety_margin_pct", 1, 50))
        o.username = None if username is None else _cname(username, "username")
        o.password = None if password is None else _cname(password, "password")
        o.busy_poll_us = _busy_poll_us(busy_poll)
        ptr = ctypes.c_void_p()
        _check(_lib.dlock_client_new(_cname(url, "url"), ctypes.byref(o), ctypes.byref(ptr)))
        self._state.ptr = ptr.value
        self._id = _lib.dlock_client_id(ptr.value).decode()
        _handles.register(self._state)
        weakref.finalize(self, self._state.close, False)

    @property
    def client_id(self) -> str:
        """32 hex digits, the owner prefix of this client's holds."""
        return self._id

    @property
    def closed(self) -> bool:
        return self._state.closed

    def close(self) -> None:
        """Stop the client's threads and close its connections, after any
        calls still under way in other threads return. Holds still open are
        not released: their leases run out on the server."""
        if os.getpid() != self._state.pid:
            return  # the child owns no part of it (see ForkedClient)
        self._state.close(wait=True)

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _handle(self, kind: str, name: Name) -> _Handle:
        key = (kind, _cname(name))
        st = self._state
        ptr = ctypes.c_void_p()
        st.enter()
        try:
            h = st.shared.get(key)
            if h is not None:
                return h
            _check(_NEW[kind](st.ptr, key[1], ctypes.byref(ptr)))
            with st.mu:
                h = st.shared.get(key)
                if h is None:
                    h = _Handle(st, kind, key[1], ptr.value)
                    st.shared[key] = h
                    ptr = None
        finally:
            st.leave()
        if ptr is not None:  # another thread made it meanwhile
            _FREE[kind](ptr)
        return h

    def lock(self, name: Name, wait: Seconds = None, lease: Seconds = None,
             on_lost: Optional[LostCallback] = None) -> Lock:
        """The reentrant lock ``name``. ``wait`` (seconds, None: forever)
        and ``lease`` (seconds, None: renewed by the watchdog) are the
        defaults of its acquisitions; ``on_lost(hold)`` is called when a
        hold is found lost."""
        wait_ms, lease_ms, fn = _wait_ms(wait), _lease_ms(lease), _callback(on_lost)
        return Lock(self._handle("lock", name), wait_ms, lease_ms, fn)

    def fair_lock(self, name: Name, wait: Seconds = None, lease: Seconds = None,
                  on_lost: Optional[LostCallback] = None) -> Lock:
        """The fair (FIFO) lock ``name``; do not mix with lock() on one name.
        A fair wait in the main thread is not cut short by Ctrl-C: give it
        a wait bound."""
        wait_ms, lease_ms, fn = _wait_ms(wait), _lease_ms(lease), _callback(on_lost)
        return Lock(self._handle("fair", name), wait_ms, lease_ms, fn)

    def rw_lock(self, name: Name, on_lost: Optional[LostCallback] = None) -> RWLock:
        """The read-write lock ``name``: ``rw.read()`` and ``rw.write()``."""
        fn = _callback(on_lost)
        return RWLock(self._handle("rw", name), fn)

    def semaphore(self, name: Name, permits: Optional[int] = None,
                  wait: Seconds = None) -> Semaphore:
        """The semaphore ``name``, created with ``permits`` if it does not
        exist yet (every process may pass the same number at start-up)."""
        if permits is not None:
            _permits(permits)
        wait_ms = _wait_ms(wait)
        sem = Semaphore(self._handle("sem", name), wait_ms)
        if permits is not None:
            sem.set_permits(permits)
        return sem

    def expirable_semaphore(self, name: Name, permits: Optional[int] = None, wait: Seconds = None,
                            lease: Seconds = None,
                            on_lost: "Optional[Callable[[Any], Any]]" = None) -> "ExpirableSemaphore":
        """The permit-expirable semaphore ``name``, created with ``permits``
        if it does not exist yet: each permit has an id and a lease, and
        returns by itself when its holder dies. ``wait`` and ``lease`` are
        the defaults of its acquisitions (lease None: renewed by the
        watchdog until release); ``on_lost(permit)`` is called when a
        permit is found lost."""
        from ._expirable import expirable_semaphore
        return expirable_semaphore(self, name, permits, wait, lease, on_lost)

    def rate_limiter(self, name: Name, rate: int, per: Seconds = 1.0, burst: Optional[int] = None,
                     change: bool = False) -> "RateLimiter":
        """The rate limit ``name``: ``rate`` permits per ``per`` seconds (a
        whole number of milliseconds), up to ``burst`` (None: ``rate``) at
        once. Stores the settings when the limit has none; when it is
        stored with others, InvalidArgument naming both, unless ``change``,
        which replaces them for every client."""
        from ._rate import rate_limiter
        return rate_limiter(self._state, name, rate, per, burst, change)

    def latch(self, name: Name) -> Latch:
        """The count-down latch ``name``."""
        return Latch(self._handle("latch", name))

    def _call(self, fn: Any, *args: Any) -> None:
        _check(self._state.call(fn, *args))

    def ids(self, prefix: Name, n: int = 1) -> List[int]:
        """``n`` (1 to 1,000,000) unique 64-bit IDs for ``prefix``:
        (seconds since 2022-01-01Z) << 32 | the day's sequence."""
        n = _int(n, "n", 1, 1_000_000)
        out = (ctypes.c_uint64 * n)()
        self._call(_lib.dlock_id_next, _cname(prefix, "prefix"), out, n)
        return list(out)

    async def ids_async(self, prefix: Name, n: int = 1) -> List[int]:
        """ids() for a task, on the library's asynchronous batch: many
        tasks' batches may be in flight at once, none holding a thread."""
        n = _int(n, "n", 1, 1_000_000)
        b = _cname(prefix, "prefix")
        key, fut = _bridge.call_start(asyncio.get_running_loop(), None)
        assert fut is not None
        _bridge.call_submit(key, lambda: self._state.call(_lib.dlock_id_next_async, b, n,
                                                          *_bridge.via(key, "ids", _on_ids)))
        first = await _bridge.await_call(key, fut)
        return list(range(first, first + n))

    def inspect(self, name: Name) -> LockInfo:
        """The state of lock ``name`` (plain or fair), read without change."""
        i = _native.LockInfo()
        self._call(_lib.dlock_lock_inspect, _cname(name), ctypes.byref(i))
        return LockInfo(bool(i.held), i.holder.decode(errors="replace"), i.hold_count,
                        _ttl(i.ttl_ms), i.last_token)

    def inspect_rw(self, name: Name) -> RWLockInfo:
        """The state of read-write lock ``name``."""
        i = _native.RWLockInfo()
        self._call(_lib.dlock_rwlock_inspect, _cname(name), ctypes.byref(i))
        return RWLockInfo(bool(i.held), i.writer.decode(errors="replace"), i.write_count,
                          i.readers, _ttl(i.ttl_ms), i.last_token)

    def force_unlock(self, name: Name) -> bool:
        """Break lock ``name`` and read-write lock ``name`` whoever holds
        them, and wake their waiters; the holders are told their holds are
        lost. True when anything was held. For operators."""
        b = _cname(name)
        a, r = ctypes.c_int(), ctypes.c_int()
        self._call(_lib.dlock_lock_force_unlock, b, ctypes.byref(a))
        self._call(_lib.dlock_rwlock_force_unlock, b, ctypes.byref(r))
        return bool(a.value or r.value)

    def __repr__(self) -> str:
        return "<dlock.Client %s%s>" % (self._id, " closed" if self._state.closed else "")


def check_name(name: Name) -> None:
    """Raise InvalidArgument, with the library's reason, unless ``name`` is a
    valid lock, semaphore or latch name (1 to 512 bytes, no braces, no
    control characters). Needs no Redis."""
    _check(_lib.dlock_check_name(_cname(name)))


def check_id_prefix(prefix: Name) -> None:
    """The same for an ID prefix: 1 to 64 of [A-Za-z0-9_.-]."""
    _check(_lib.dlock_check_id_prefix(_cname(prefix, "prefix")))
