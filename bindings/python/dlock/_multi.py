"""Locks over several locks or servers: MultiLock (dlock_multilock_*) and
RedLock (dlock_redlock_*).

Both may span clients, so every call enters each client it touches (a
close() of any of them waits for the call, or the call raises
ClientClosed). A RedLock's C handle refers to all its masters' clients:
it is freed once, by the first of them to close or by the collector,
before any of those clients is freed.
"""
from __future__ import annotations

import asyncio
import ctypes
import threading
import weakref
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from . import _aio, _client, _errors, _handles, _native, _service
from ._args import (_DEFAULT, REDLOCK_LEASE_MIN_MS, Name, Seconds, _callback, _cname, _fence_floor,
                    _lease_ms, _wait_ms)
from ._client import Client, Hold, Lock, _wait_in_slices
from ._handles import _State

_lib = _native.lib


def _enter_all(states: List[_State]) -> None:
    """Enter every state, or none (raising what the first refusal raised)."""
    done: List[_State] = []
    try:
        for st in states:
            st.enter()
            done.append(st)
    except BaseException:
        for st in done:
            st.leave()
        raise


def _leave_all(states: List[_State]) -> None:
    for st in states:
        st.leave()


def _states(clients: Sequence[_State]) -> List[_State]:
    """Distinct states, in first-seen order."""
    out: List[_State] = []
    for st in clients:
        if not any(st is o for o in out):
            out.append(st)
    return out


class MultiLock:
    """Several locks (plain or fair, of one client or several) taken
    together by the calling thread (or, with ``async with``, the running
    task), or none of them: ``with dlock.MultiLock([a, b]) as holds:``.
    They are taken in one global
    order whatever order they are given in, so two multi-locks over
    overlapping sets cannot deadlock. Each lock's hold is an ordinary Hold
    of that lock (its token, its loss, its re-entry)."""

    def __init__(self, locks: Sequence[Lock], wait: Seconds = None, lease: Seconds = None) -> None:
        self.locks = list(locks)
        if not self.locks:
            raise _errors.InvalidArgument("a multi-lock needs at least one lock")
        for lk in self.locks:
            if type(lk) is not Lock:
                raise TypeError("a multi-lock takes Lock objects (Client.lock or fair_lock), not %s"
                                % type(lk).__name__)
        self._wait = _wait_ms(wait)
        self._lease = _lease_ms(lease)
        self._states = _states([lk._h.state for lk in self.locks])
        # A fair lock's wait is not cut in the main thread (see Lock).
        self._sliced = all(lk._sliced() for lk in self.locks)

    def acquire(self, wait: Seconds = _DEFAULT, lease: Seconds = _DEFAULT) -> List[Hold]:
        """Take every lock, or none: NotAcquired when they were not all
        free together within ``wait`` seconds (for the whole call). Returns
        one Hold per lock, in the order given."""
        wait_ms = self._wait if wait is _DEFAULT else _wait_ms(wait)
        lease_ms = self._lease if lease is _DEFAULT else _lease_ms(lease)
        n = len(self.locks)
        tokens = (ctypes.c_uint64 * n)()
        _enter_all(self._states)
        try:
            ptrs = (ctypes.c_void_p * n)(*[lk._h.ptr for lk in self.locks])
            rc = _wait_in_slices(lambda ms: _lib.dlock_multilock_acquire(ptrs, n, ms, lease_ms, tokens),
                                 wait_ms, self._sliced)
        finally:
            _leave_all(self._states)
        if rc:
            _errors.fail(rc)
        holds = []
        for i, lk in enumerate(self.locks):
            h = Hold(lk, tokens[i], None)
            lk._h.push(h)
            holds.append(h)
        return holds

    def release(self) -> None:
        """Release one hold of each lock, the last taken first; every lock
        is tried, and the first failure is raised (LockLost: that hold had
        been lost)."""
        first: Optional[_errors.DlockError] = None
        for lk in reversed(self.locks):
            try:
                lk._release(None)
            except _errors.DlockError as e:
                if first is None:
                    first = e
        if first is not None:
            raise first

    def __enter__(self) -> List[Hold]:
        return self.acquire()

    def __exit__(self, *exc: Any) -> None:
        _client._exit_release(self, None, exc[0] is not None)

    async def __aenter__(self) -> List[Hold]:
        """Take every lock for the running task, or none, without blocking
        the loop (the library's asynchronous multi-lock, one lock after
        another in the global order). The holds are the task's, as ``async
        with lock`` makes them: an ``async with`` of one of the locks
        inside re-enters. Unlike ``acquire()``, a server error is not
        retried within the wait: it is raised, with nothing held."""
        task = _aio.current_task()
        made: List[_aio._TaskHandle] = []

        def done_all() -> None:
            for lk, th in zip(self.locks, made):
                _aio.bridge.task_handle_done(task, lk._h.key, th)

        try:
            for lk in self.locks:
                th = _aio.bridge.task_handle(lk._h, task, enter=True)
                assert th is not None
                made.append(th)
        except BaseException:
            done_all()
            raise
        views = [lk._view(th.handle) for lk, th in zip(self.locks, made)]
        n = len(self.locks)
        tokens = (ctypes.c_uint64 * n)()

        def hook(status: int, _token: int, awaited: bool, _tokens: Any = tokens) -> None:
            # `_tokens` keeps the array the library writes alive until the
            # call ends, awaited or not. An outcome nobody awaits (the task
            # was cancelled) is undone: every lock given back.
            if awaited:
                return
            if status:
                done_all()
                return
            for lk, th, v in zip(self.locks, made, views):
                v._release_in_background(
                    lambda k=lk._h.key, t=th: _aio.bridge.task_handle_done(task, k, t))

        key, fut = _aio.bridge.call_start(task.get_loop(), hook)
        assert fut is not None

        def start() -> int:
            _enter_all(self._states)
            try:
                ptrs = (ctypes.c_void_p * n)(*[th.handle.ptr for th in made])
                return int(_lib.dlock_multilock_acquire_async(
                    ptrs, n, self._wait, self._lease, tokens,
                    *_aio.bridge.via(key, "multilock", _aio.on_multilock)))
            finally:
                _leave_all(self._states)

        _aio.bridge.call_submit(key, start, done_all)
        try:
            await fut
        except asyncio.CancelledError:
            _aio.bridge.divert(key)
            # Cancelled after the outcome arrived: the hook saw it awaited.
            if fut.done() and not fut.cancelled() and fut.exception() is None:
                hook(0, 0, False)
            raise
        except BaseException:
            done_all()
            raise
        holds = []
        for i, (v, th) in enumerate(zip(views, made)):
            h = Hold(v, tokens[i], None)
            th.handle.push(h)
            holds.append(h)
        return holds

    async def __aexit__(self, *exc: Any) -> None:
        """Release the task's hold of every lock, all at once (each lock
        has a handle of its own for the task); every release ends even when
        the exit is cancelled. The first failure is raised, unless the
        block is raising already."""
        task = _aio.current_task()
        first: Optional[_errors.DlockError] = None
        started = []
        for lk in reversed(self.locks):
            key, fut, rc = lk._release_start(task)
            if rc:
                first = first or _errors.from_status(rc)
            else:
                started.append((key, fut))
        for i, (key, fut) in enumerate(started):
            try:
                await fut
            except asyncio.CancelledError:
                for k, _f in started[i:]:
                    _aio.bridge.divert(k)
                raise
            except _errors.DlockError as e:
                first = first or e
        if first is not None:
            _client._release_failed(self, first, exc[0] is not None)

    def _release(self, _what: Any) -> None:
        self.release()

    def __repr__(self) -> str:
        return "<dlock.MultiLock %s>" % ", ".join(repr(lk.name) for lk in self.locks)


class _Shared:
    """A C handle over several clients, freed once. The mutex is held
    through the free, so that a client closing meanwhile frees itself only
    after the handle that uses it."""

    def __init__(self, ptr: int, states: List[_State], key: int) -> None:
        self.ptr: Optional[int] = ptr
        self.states = states
        self.key = key
        self.mu = threading.Lock()
        for st in states:
            with st.mu:
                st.ptrs[key] = (self.free, ptr)

    def free(self, _ptr: Optional[int] = None) -> None:
        with self.mu:
            if self.ptr is None:
                return
            _lib.dlock_redlock_free(self.ptr)
            self.ptr = None
        for st in self.states:
            with st.mu:
                st.ptrs.pop(self.key, None)

    def reap(self) -> None:
        """The collector's free (on the service thread): not in a child
        made by fork(), whose copies of the clients are not its own."""
        if all(st.pid == _service.pid for st in self.states):
            self.free()


# key -> the RedLock, for the loss callback (arg = key).
_redlocks: Dict[int, "weakref.ref[RedLock]"] = {}

RedLockLostCallback = Callable[["RedLockHold"], Any]


@_native.REDLOCK_LOST_FN
def _on_redlock_lost(_rl: Optional[int], arg: Optional[int]) -> None:
    # On a library watchdog thread (ctypes takes the GIL): flag and queue.
    try:
        ref = _redlocks.get(arg) if arg is not None else None
        rl = ref() if ref is not None else None
        hold = rl._hold if rl is not None else None
        if hold is None:
            return
        hold._flag = True
        fn = rl.on_lost
        if fn is not None:
            _service.put(_report, fn, hold)
    except Exception:
        _service.log.exception("dlock: loss report failed")


def _report(fn: RedLockLostCallback, hold: "RedLockHold") -> None:
    try:
        fn(hold)
    except Exception:
        _service.log.exception("dlock: exception in the on_lost callback of %r", hold.lock)


class RedLockHold:
    """One RedLock acquisition: ``token`` (the highest fencing token of the
    granting masters), ``validity`` (seconds the lock was surely held for,
    counted from before the acquisition was sent) and ``lost``."""

    __slots__ = ("lock", "token", "validity", "_flag", "_open")

    def __init__(self, lock: "RedLock", token: int, validity: float) -> None:
        self.lock = lock
        self.token = token
        self.validity = validity
        self._flag = False
        self._open = True

    @property
    def lost(self) -> bool:
        """True once fewer than a majority of masters are known or trusted
        (by this process's clock) to still hold it."""
        if not self._flag and self._open and self.lock._lost_now():
            self._flag = True
        return self._flag

    @property
    def held(self) -> bool:
        return self._open

    def release(self) -> None:
        self.lock.release()

    def __enter__(self) -> "RedLockHold":
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._open:
            _client._exit_release(self.lock, None, exc[0] is not None)

    def __repr__(self) -> str:
        return "<dlock.RedLockHold %r token=%d%s%s>" % (
            self.lock.name, self.token, " lost" if self._flag else "", "" if self._open else " released")


class RedLock:
    """A lock over independent masters (each a Client of its own server,
    not replicas of one another), held when a majority granted it:
    ``with dlock.RedLock([c1, c2, c3], "name") as hold:`` (or ``async
    with``). Not reentrant; one hold at a time. Any thread may release it;
    calls on one RedLock run one at a time (a release waits for an acquire
    under way; a call during an asynchronous one raises InvalidArgument).
    Give the
    masters' clients a command timeout well under the lease: a stalled
    master delays a round by up to that long."""

    def __init__(self, masters: Sequence[Client], name: Name, wait: Seconds = None,
                 lease: Seconds = None, on_lost: Optional[RedLockLostCallback] = None) -> None:
        masters = list(masters)
        for m in masters:
            if not isinstance(m, Client):
                raise TypeError("RedLock's masters are dlock.Client objects, not %s" % type(m).__name__)
        if not masters:
            raise _errors.InvalidArgument("a RedLock needs at least one master")
        self._name = _cname(name)
        self._wait = _wait_ms(wait)
        self._lease = _lease_ms(lease, min_ms=REDLOCK_LEASE_MIN_MS)
        #: Called with the RedLockHold when the library finds it lost, on a
        #: thread of this package (as Lock.on_lost).
        self.on_lost = _callback(on_lost)
        self._hold: Optional[RedLockHold] = None
        self._mu = threading.Lock()
        self._busy = False  # an asynchronous call is under way
        self._states = _states([m._state for m in masters])
        out = ctypes.c_void_p()
        _enter_all(self._states)
        try:
            ptrs = (ctypes.c_void_p * len(masters))(*[m._state.ptr for m in masters])
            _errors.check(_lib.dlock_redlock_new(ptrs, len(masters), self._name, ctypes.byref(out)))
            key = next(_handles._keys)
            self._shared = _Shared(out.value, self._states, key)
        finally:
            _leave_all(self._states)
        _redlocks[key] = weakref.ref(self)
        _lib.dlock_redlock_on_lost(out.value, _on_redlock_lost, key)
        weakref.finalize(self, _queue_reap, self._shared)

    @property
    def name(self) -> str:
        return self._name.decode("utf-8", "replace")

    def _run(self, fn: Callable[[int], int], calls: bool = True) -> int:
        """fn(handle) with every master's client entered, one call at a time
        (`calls` False: a question that may come during an asynchronous
        call, which no other call may)."""
        with self._mu:
            if calls and self._busy:
                raise _errors.InvalidArgument("RedLock %r has an asynchronous call under way" % self.name)
            _enter_all(self._states)
            try:
                ptr = self._shared.ptr
                if ptr is None:
                    raise _errors.ClientClosed("a client of this RedLock was closed")
                return fn(ptr)
            finally:
                _leave_all(self._states)

    def acquire(self, wait: Seconds = _DEFAULT, lease: Seconds = _DEFAULT) -> RedLockHold:
        """Acquire on all masters at once; held when a majority granted it
        within a positive validity. Failed rounds retry after 20-200 ms, or
        when the holder's release reaches the first master, until ``wait``
        ends (NotAcquired; ConnectionError when no master answered).
        ``lease`` None: each master's share is renewed by its client's
        watchdog, and the hold is lost when fewer than a majority remain."""
        wait_ms = self._wait if wait is _DEFAULT else _wait_ms(wait)
        lease_ms = self._lease if lease is _DEFAULT else _lease_ms(lease, min_ms=REDLOCK_LEASE_MIN_MS)
        validity = ctypes.c_long()
        token = ctypes.c_uint64()
        rc = self._run(lambda ptr: _wait_in_slices(
            lambda ms: _lib.dlock_redlock_acquire(ptr, ms, lease_ms, ctypes.byref(validity),
                                                  ctypes.byref(token)), wait_ms))
        if rc:
            _errors.fail(rc)
        self._hold = RedLockHold(self, token.value, validity.value / 1000.0)
        return self._hold

    def extend(self, lease: float) -> float:
        """Extend an explicit lease on all masters to ``lease`` seconds;
        returns the new validity in seconds. LockLost when fewer than a
        majority renewed in time."""
        ms = _lease_ms(lease, min_ms=REDLOCK_LEASE_MIN_MS, watchdog=False)
        validity = ctypes.c_long()
        _errors.check(self._run(lambda ptr: _lib.dlock_redlock_extend(ptr, ms, ctypes.byref(validity))))
        if self._hold is not None:
            self._hold.validity = validity.value / 1000.0
        return validity.value / 1000.0

    def release(self) -> None:
        """Release on every master. LockLost when fewer than a majority
        still held it (another may have held it meanwhile); the hold ends
        either way."""
        rc = self._run(_lib.dlock_redlock_release)
        hold = self._hold
        if hold is not None and rc in (0, _errors.ERR_LOST):
            self._hold = None
            hold._open = False
            if rc:
                hold._flag = True
        _errors.check(rc)

    def _release(self, _what: Any) -> None:
        self.release()

    def _lost_now(self) -> bool:
        return bool(self._run(_lib.dlock_redlock_lost, calls=False))

    @property
    def lost(self) -> bool:
        """The current (or latest) hold's ``lost``."""
        return self._hold.lost if self._hold is not None else False

    def set_fence_floor(self, floor: int) -> None:
        """As Lock.set_fence_floor, passed to every master."""
        f = _fence_floor(floor)
        self._run(lambda ptr: _lib.dlock_redlock_set_fence_floor(ptr, f) or 0)

    def __enter__(self) -> RedLockHold:
        return self.acquire()

    def __exit__(self, *exc: Any) -> None:
        if self._hold is not None:
            _client._exit_release(self, None, exc[0] is not None)

    # asyncio, on the library's asynchronous RedLock calls: a waiting task
    # holds no thread. The hold is the RedLock's, as ever: one at a time;
    # tasks that contend use RedLock objects of their own.
    def _start(self, hook: Callable[[int, int, bool], None], loop: Optional[asyncio.AbstractEventLoop],
               submit: Callable[[int, int], int]) -> "Tuple[int, Optional[asyncio.Future[int]]]":
        """Start one asynchronous call, submit(handle, key), marked under
        way until its hook (which clears the mark) has run."""
        def done(status: int, token: int, awaited: bool) -> None:
            self._busy = False
            hook(status, token, awaited)

        key, fut = _aio.bridge.call_start(loop, done)

        def call(ptr: int) -> int:
            self._busy = True
            rc = submit(ptr, key)
            if rc:
                self._busy = False
            return rc

        _aio.bridge.call_submit(key, lambda: self._run(call))
        return key, fut

    async def acquire_async(self, wait: Seconds = _DEFAULT, lease: Seconds = _DEFAULT) -> RedLockHold:
        """acquire() for a task, without blocking the loop. A task cancelled
        while waiting leaves nothing held (a hold granted after the
        cancellation is released in the background)."""
        wait_ms = self._wait if wait is _DEFAULT else _wait_ms(wait)
        lease_ms = self._lease if lease is _DEFAULT else _lease_ms(lease, min_ms=REDLOCK_LEASE_MIN_MS)

        def hook(status: int, _token: int, awaited: bool) -> None:
            if status == 0 and not awaited:
                self._release_in_background()

        key, fut = self._start(hook, asyncio.get_running_loop(), lambda ptr, k: _lib.dlock_redlock_acquire_async(
            ptr, wait_ms, lease_ms, *_aio.bridge.via(k, "redlock_acquired", _aio.on_acquired)))
        assert fut is not None
        try:
            token = await fut
        except asyncio.CancelledError:
            _aio.bridge.divert(key)
            # Cancelled after the outcome arrived: the hook saw it awaited.
            if fut.done() and not fut.cancelled() and fut.exception() is None:
                self._release_in_background()
            raise
        validity = self._run(_lib.dlock_redlock_validity)
        self._hold = RedLockHold(self, token, validity / 1000.0)
        return self._hold

    def _release_in_background(self) -> None:
        """Release a hold nobody awaits (its task was cancelled)."""
        try:
            self._start(lambda _st, _tok, _aw: None, None, lambda ptr, k: _lib.dlock_redlock_release_async(
                ptr, *_aio.bridge.via(k, "redlock_released", _aio.on_released)))
        except _errors.DlockError:
            pass  # the client closed: the hold ends with its lease

    async def release_async(self) -> None:
        """release() for a task, without blocking the loop; the release
        ends even when the awaiting task is cancelled."""
        hold = self._hold

        def hook(status: int, _token: int, _awaited: bool) -> None:
            if hold is not None and status in (0, _errors.ERR_LOST):
                if self._hold is hold:
                    self._hold = None
                hold._open = False
                if status:
                    hold._flag = True

        key, fut = self._start(hook, asyncio.get_running_loop(), lambda ptr, k: _lib.dlock_redlock_release_async(
            ptr, *_aio.bridge.via(k, "redlock_released", _aio.on_released)))
        assert fut is not None
        await _aio.bridge.await_call(key, fut)

    async def __aenter__(self) -> RedLockHold:
        return await self.acquire_async()

    async def __aexit__(self, *exc: Any) -> None:
        if self._hold is None:
            return
        try:
            await self.release_async()
        except _errors.DlockError as e:
            _client._release_failed(self, e, exc[0] is not None)

    def __repr__(self) -> str:
        return "<dlock.RedLock %r over %d masters>" % (self.name, len(self._states))


def _reap(shared: _Shared) -> None:
    _redlocks.pop(shared.key, None)
    shared.reap()


def _queue_reap(shared: _Shared) -> None:
    # Never inside the collector (see _client's service thread).
    _service.put(_reap, shared)
