"""The permit-expirable semaphore (dlock_psem): permits with ids and leases.

A permit is not a thread's, as a lock's hold is: the C library gives each
one a record of its own (dlock_permit) that whoever has it may release,
renew or ask about. Here each is a Permit object over that record. The
record is freed by its release (in every outcome) or, for permits still
out, just before their semaphore's handle is freed (Client.close()); a
Permit keeps its pointer under a lock of its own, so a release in one
thread and a `lost` question in another never meet a freed record.
"""
from __future__ import annotations

import asyncio
import ctypes
import threading
import weakref
from typing import Any, Callable, Dict, List, Optional

from . import _aio, _client, _errors, _handles, _native, _service
from ._args import _DEFAULT, Name, Seconds, _callback, _cname, _lease_ms, _permits, _wait_ms
from ._client import _Sized, _wait_in_slices

_lib = _native.lib

PermitLostCallback = Callable[["Permit"], Any]

# psem handle pointer -> {permit pointer: Permit}: the permits still out,
# for the loss callback (which names the C record) and for freeing them
# before their handle.
_out: Dict[int, Dict[int, "Permit"]] = {}
_out_mu = threading.Lock()


class Permit:
    """One permit of an ExpirableSemaphore: its ``id``, and whether it was
    ``lost``. ``with sem.acquire() as permit:`` releases it at the end.
    Unlike a lock's hold, any thread may release or renew it."""

    __slots__ = ("sem", "id", "_ptr", "_psem", "_mu", "_flag", "__weakref__")

    def __init__(self, sem: "ExpirableSemaphore", ptr: int, psem: int) -> None:
        self.sem = sem
        #: 32 hex digits: what release_id() and renew() take, from anywhere.
        self.id: str = _lib.dlock_permit_id(ptr).decode()
        self._ptr: Optional[int] = ptr
        self._psem = psem  # the C handle it was taken through
        self._mu = threading.Lock()
        self._flag = False

    def _take(self) -> Optional[int]:
        """The C record, now this caller's alone (None if gone already)."""
        with self._mu:
            ptr, self._ptr = self._ptr, None
        if ptr is not None:
            with _out_mu:
                _out.get(self._psem, {}).pop(ptr, None)
        return ptr

    @property
    def held(self) -> bool:
        """True until released (a lost permit counts as held until then)."""
        return self._ptr is not None

    @property
    def lost(self) -> bool:
        """True once the permit can no longer be trusted: its lease ran out
        (a lease of its own, or the watchdog's renewals failed or came too
        late), or it was released by id elsewhere and found gone."""
        if self._flag:
            return True
        st = self.sem._h.state
        st.enter()
        try:
            with self._mu:
                if self._ptr is not None and _lib.dlock_permit_lost(self._ptr):
                    self._flag = True
        finally:
            st.leave()
        return self._flag

    def release(self) -> None:
        """Give the permit back. LockLost when it had expired already
        (another process may have had its place meanwhile); the permit is
        gone either way."""
        self.sem._release(self)

    def renew(self, lease: float) -> None:
        """Extend the permit's lease to ``lease`` seconds from now."""
        self.sem.renew(self.id, lease)

    async def release_async(self) -> None:
        """release() for a task, on the library's asynchronous release:
        the loop goes on while the answer comes."""
        await self.sem._release_async(self)

    def __enter__(self) -> "Permit":
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.held:
            _client._exit_release(self.sem, self, exc[0] is not None)

    def __repr__(self) -> str:
        return "<dlock.Permit %r of %r%s%s>" % (self.id, self.sem.name, " lost" if self._flag else "",
                                               "" if self.held else " released")


def free_psem(ptr: int) -> None:
    """Free a handle and the records of its permits still out (their
    places stay taken until their leases end): the library frees the handle
    only after its permits. Runs from Client.close() or the collector's
    reaping, while no call is under way on the client."""
    with _out_mu:
        permits = list(_out.pop(ptr, {}).values())
    for p in permits:
        with p._mu:
            rec, p._ptr = p._ptr, None
        if rec is not None:
            _lib.dlock_permit_free(rec)
    _lib.dlock_psem_free(ptr)


def _lost(psem: int, permit: int) -> None:
    with _out_mu:
        p = _out.get(psem, {}).get(permit)
    if p is None:
        return
    p._flag = True
    fn = p.sem.on_lost
    if fn is not None:
        _service.put(_report, fn, p)


def _report(fn: PermitLostCallback, p: Permit) -> None:
    try:
        fn(p)
    except Exception:
        _service.log.exception("dlock: exception in the on_lost callback of %r", p.sem)


@_native.PERMIT_FN
def _on_permit(_psem: Optional[int], status: int, permit: Optional[int], arg: Optional[int]) -> None:
    # The asynchronous calls' callback when the loop has no completion
    # queue (see _aio.bridge.call_start); the permit travels as the token.
    _aio.bridge.call_end(arg, status, permit or 0)


def _record(sem: "ExpirableSemaphore", ptr: int, psem: int) -> Permit:
    """A permit taken through C handle `psem`: listed under that handle,
    whose loss reports name it and which must outlive it."""
    p = Permit(sem, ptr, psem)
    with _out_mu:
        _out.setdefault(psem, {})[ptr] = p
    return p


# Called on the library's watchdog thread (ctypes takes the GIL); only
# flags and queues: the user's callback runs on the service thread.
@_native.PERMIT_LOST_FN
def _on_permit_lost(permit: Optional[int], arg: Optional[int]) -> None:
    try:
        if permit is not None and arg is not None:
            _lost(arg, permit)
    except Exception:
        _service.log.exception("dlock: loss report failed")


class ExpirableSemaphore(_Sized):
    """A semaphore whose every permit has an id and a lease, made by
    Client.expirable_semaphore(). A permit whose holder died returns to the
    pool when its lease ends, with nobody's help. ``acquire()`` returns the
    Permit; ``with sem as permit:`` takes one and gives it back."""

    _sized = "psem"

    def __init__(self, handle: _handles._Handle, wait_ms: int, lease_ms: int,
                 on_lost: Optional[PermitLostCallback]) -> None:
        # wait_ms, lease_ms: checked already, before the handle was made.
        self._h = handle
        self._wait = wait_ms
        self._lease = lease_ms
        #: Called with the Permit when the library finds it lost, on a
        #: thread of this package (as Lock.on_lost).
        self.on_lost: Optional[PermitLostCallback] = on_lost
        # The permits `with sem` took, per thread, and `async with sem`
        # per task, for their exits.
        self._with = threading.local()
        self._tasks: "weakref.WeakKeyDictionary[asyncio.Task[Any], List[Permit]]" = \
            weakref.WeakKeyDictionary()

    def acquire(self, wait: Seconds = _DEFAULT, lease: Seconds = _DEFAULT) -> Permit:
        """Take one permit: NotAcquired when none became free within
        ``wait`` seconds (None: forever). ``lease``: seconds after which the
        permit returns by itself, or None to have the client's watchdog renew
        it until release. Both default to what the semaphore was made with."""
        wait_ms = self._wait if wait is _DEFAULT else _wait_ms(wait)
        lease_ms = self._lease if lease is _DEFAULT else _lease_ms(lease)
        out = ctypes.c_void_p()
        st = self._h.state
        st.enter()
        try:
            rc = _wait_in_slices(lambda ms: _lib.dlock_psem_acquire(self._h.ptr, ms, lease_ms,
                                                                    ctypes.byref(out)), wait_ms)
            if rc == 0:
                # Recorded before close() can run (it waits for this call),
                # so that it frees the record with the handle.
                p = _record(self, out.value, self._h.ptr)
        finally:
            st.leave()
        if rc:
            _errors.fail(rc)
        return p

    def _release(self, permit: Permit) -> None:
        if permit.sem._h is not self._h:
            raise _errors.InvalidArgument("the permit %s is not of semaphore %r" % (permit.id, self.name))
        st = self._h.state
        st.enter()
        try:
            ptr = permit._take()
            if ptr is None:
                raise _errors.NotOwner("the permit %s was released already" % permit.id)
            rc = _lib.dlock_psem_release(self._h.ptr, ptr)
        finally:
            st.leave()
        if rc == _errors.ERR_LOST:
            permit._flag = True
        _errors.check(rc)

    def release(self, permit: Permit) -> None:
        """Give back ``permit`` (as permit.release())."""
        self._release(permit)

    def release_id(self, permit_id: str) -> None:
        """Give back the permit with this id, from any process (say, after
        its holder crashed); NotOwner when no live permit has it."""
        self._call(_lib.dlock_psem_release_id, _cname(permit_id, "permit id"))

    def renew(self, permit_id: str, lease: float) -> None:
        """Extend the lease of the permit with this id to ``lease`` seconds
        from now; LockLost when it had expired already."""
        ms = _lease_ms(lease, watchdog=False)
        self._call(_lib.dlock_psem_renew, _cname(permit_id, "permit id"), ms)

    @property
    def available(self) -> int:
        """Permits not held by a live permit."""
        n = ctypes.c_long()
        self._call(_lib.dlock_psem_available, ctypes.byref(n))
        return n.value

    # asyncio, on the library's asynchronous calls. A permit is nobody's
    # (any handle may release it), so each call borrows an idle C handle of
    # the name for its duration (the library runs one asynchronous call per
    # handle), as a latch's await does.
    async def acquire_async(self, wait: Seconds = _DEFAULT, lease: Seconds = _DEFAULT) -> Permit:
        """acquire() for a task: the waiting task holds no thread, and is
        woken by a release as a waiting thread is. A task cancelled while
        waiting leaves no permit taken."""
        wait_ms = self._wait if wait is _DEFAULT else _wait_ms(wait)
        lease_ms = self._lease if lease is _DEFAULT else _lease_ms(lease)
        shared = self._h
        h = _aio.bridge.spare_handle(shared)

        def hook(status: int, token: int, awaited: bool) -> None:
            # The C handle is free again once the library called back.
            _aio.bridge.spare_done(shared, h)
            if status == 0 and not awaited:
                self._give_back(token)

        key, fut = _aio.bridge.call_start(asyncio.get_running_loop(), hook)
        assert fut is not None
        _aio.bridge.call_submit(key, lambda: self._rc(lambda _p: _lib.dlock_psem_acquire_async(
            h.ptr, wait_ms, lease_ms, *_aio.bridge.via(key, "permit", _on_permit))),
            lambda: _aio.bridge.spare_done(shared, h))
        try:
            ptr = await fut
        except asyncio.CancelledError:
            _aio.bridge.divert(key)
            # Cancelled after the outcome arrived: the hook saw it awaited.
            if fut.done() and not fut.cancelled() and fut.exception() is None:
                self._give_back(fut.result())
            raise
        return _record(self, ptr, h.ptr)

    def _give_back(self, ptr: int) -> None:
        """Release a permit nobody awaits (its task was cancelled), without
        waiting for the answer; nothing if the client closed meanwhile."""
        try:
            self._call(lambda sp: _lib.dlock_psem_release(sp, ptr))
        except _errors.DlockError:
            pass

    async def _release_async(self, permit: Permit) -> None:
        if permit.sem._h is not self._h:
            raise _errors.InvalidArgument("the permit %s is not of semaphore %r" % (permit.id, self.name))
        shared = self._h
        st = shared.state
        st.enter()
        try:
            ptr = permit._take()
            if ptr is None:
                raise _errors.NotOwner("the permit %s was released already" % permit.id)
            h = _aio.bridge.spare_handle(shared)

            def hook(status: int, _token: int, _awaited: bool) -> None:
                _aio.bridge.spare_done(shared, h)
                if status == _errors.ERR_LOST:
                    permit._flag = True

            key, fut = _aio.bridge.call_start(asyncio.get_running_loop(), hook)
            assert fut is not None
            rc = _lib.dlock_psem_release_async(h.ptr, ptr, *_aio.bridge.via(key, "permit", _on_permit))
            if rc:
                # Not started: the permit is as it was, still out.
                _aio.bridge.call_drop(key)
                _aio.bridge.spare_done(shared, h)
                with permit._mu:
                    permit._ptr = ptr
                with _out_mu:
                    _out.setdefault(permit._psem, {})[ptr] = permit
        finally:
            st.leave()
        if rc:
            _errors.fail(rc)
        await _aio.bridge.await_call(key, fut)

    async def __aenter__(self) -> Permit:
        p = await self.acquire_async()
        self._tasks.setdefault(_aio.current_task(), []).append(p)
        return p

    async def __aexit__(self, *exc: Any) -> None:
        p = self._tasks[_aio.current_task()].pop()
        if not p.held:
            return
        try:
            await p.release_async()
        except _errors.DlockError as e:
            _client._release_failed(p, e, exc[0] is not None)

    def __enter__(self) -> Permit:
        p = self.acquire()
        if not hasattr(self._with, "stack"):
            self._with.stack = []
        self._with.stack.append(p)
        return p

    def __exit__(self, *exc: Any) -> None:
        stack: List[Permit] = self._with.stack
        p = stack.pop()
        if p.held:
            _client._exit_release(self, p, exc[0] is not None)

    def __repr__(self) -> str:
        return "<dlock.ExpirableSemaphore %r>" % self.name


def expirable_semaphore(client: "_client.Client", name: Name, permits: Optional[int], wait: Seconds,
                        lease: Seconds, on_lost: Optional[PermitLostCallback]) -> ExpirableSemaphore:
    if permits is not None:
        _permits(permits)
    wait_ms, lease_ms, fn = _wait_ms(wait), _lease_ms(lease), _callback(on_lost)
    h = client._handle("psem", name)
    sem = ExpirableSemaphore(h, wait_ms, lease_ms, fn)
    if permits is not None:
        sem.set_permits(permits)
    return sem
