"""A client's C state and its C handles: what the public objects stand on.

_State is one Client's pointer, the count of library calls under way on
it (close() waits for them, fork() and close() refuse new ones) and its
live handles. _Handle is one C handle (dlock_lock, dlock_rwlock, ...)
shared by every Python object of its name and kind, with the holds of each
thread on it. The library's loss reports arrive here, on its watchdog
thread, and are handed to the service thread (_service).
"""
from __future__ import annotations

import atexit
import collections
import itertools
import os
import threading
import weakref
from typing import TYPE_CHECKING, Any, Deque, Dict, List, Optional, Set, Tuple

from . import _native, _service
from ._errors import ClientClosed, ForkedClient

if TYPE_CHECKING:
    from ._client import Hold

_lib = _native.lib
_log = _service.log

_READ, _WRITE = _native.READ, _native.WRITE


# ---------------------------------------------------------------------------
# Client state, shared with the finalizers (which must not keep the Client
# alive).

class _State:
    def __init__(self) -> None:
        self.ptr: Optional[int] = None
        self.pid = _service.pid
        self.mu = threading.Lock()
        self.idle = threading.Condition(self.mu)
        # One item per library call under way on the client or its
        # handles (enter, leave).
        self.calls: Deque[None] = collections.deque()
        self.closed = False
        # Live C handles: key -> (free function, pointer).
        self.ptrs: Dict[int, Tuple[Any, int]] = {}
        # Handles by (kind, name), shared by every object of that name, so
        # that the holds of one thread are one owner for the library and
        # re-entry works across c.lock(name) calls.
        self.shared: "weakref.WeakValueDictionary[Tuple[str, bytes], _Handle]" = \
            weakref.WeakValueDictionary()
        # Handles with holds open, kept alive while they are held even when
        # the caller dropped every object that refers to them.
        self.pinned: Set["_Handle"] = set()

    # The count of calls under way is kept without the lock: every pair of
    # lock and release passes here four times, and the lock's two
    # sections a call were a seventh of a pair's user-space instructions
    # (measured; CHANGELOG.md). deque.append and pop are atomic, and
    # each side writes its mark before it reads the other's: a call
    # appends, then reads `closed`; close() sets `closed`, then counts. So
    # either close() counts the call and waits for it, or the call sees
    # `closed` and backs out. A call that leaves after close() began
    # takes the lock to wake it.
    def enter(self) -> None:
        if _service.pid != self.pid:
            raise ForkedClient(
                "this dlock Client was made in process %d and used in process %d, a child made "
                "by fork(); libdlock's threads and connections do not survive fork(): make a new "
                "Client in the child" % (self.pid, os.getpid()))
        self.calls.append(None)
        if self.closed:
            self.leave()
            raise ClientClosed("the dlock Client was closed")

    def leave(self) -> None:
        self.calls.pop()
        if self.closed:
            with self.mu:
                self.idle.notify_all()

    def call(self, fn: Any, *args: Any) -> int:
        """fn(client, *args) while the client is known to be open."""
        self.enter()
        try:
            return fn(self.ptr, *args)
        finally:
            self.leave()

    def free_handle(self, key: int) -> None:
        """Free one C handle unless close() already took it."""
        if os.getpid() != self.pid:
            return
        with self.mu:
            entry = self.ptrs.pop(key, None)
            if entry is None or self.closed:
                return
            self.calls.append(None)
        try:
            entry[0](entry[1])
        finally:
            self.leave()

    def close(self, wait: bool = True) -> bool:
        """Free every handle, then the client. With wait=False (at exit)
        give up, leaking, rather than wait for calls still under way."""
        if os.getpid() != self.pid:
            return False
        with self.mu:
            if self.ptr is None:
                return True
            self.closed = True
            if self.calls and not wait:
                return False
            while self.calls:
                self.idle.wait()
            if self.ptr is None:  # closed by another thread meanwhile
                return True
            entries = list(self.ptrs.values())
            self.ptrs.clear()
            ptr, self.ptr = self.ptr, None
        if ptr is not None:
            # Asynchronous acquisitions still waiting (async with) end now,
            # and their callbacks run, before any handle is freed.
            _lib.dlock_client_drain(ptr)
        for free, p in entries:
            free(p)
        if ptr is not None:
            _lib.dlock_client_free(ptr)
        self.pinned.clear()
        return True



_live_states: "weakref.WeakSet[_State]" = weakref.WeakSet()
_exit_registered = False


def _close_at_exit() -> None:
    for st in list(_live_states):
        st.close(wait=False)


def register(st: _State) -> None:
    """Have `st` closed at exit (without waiting for calls under way)."""
    # Registered when the first client is made, hence after threading's
    # own exit handler: runs before the interpreter finalizes, while the
    # library's threads may still call back into Python.
    global _exit_registered
    _live_states.add(st)
    if not _exit_registered:
        atexit.register(_close_at_exit)
        _exit_registered = True


# ---------------------------------------------------------------------------
# C handles and loss reports.

_keys = itertools.count(1)
# key -> the handle, for the loss callbacks (arg = key).
_by_key: Dict[int, "weakref.ref[_Handle]"] = {}


def _free_psem(ptr: int) -> None:
    from . import _expirable  # (it imports this module)
    _expirable.free_psem(ptr)


_FREE = {
    "lock": _lib.dlock_lock_free,
    "fair": _lib.dlock_lock_free,
    "rw": _lib.dlock_rwlock_free,
    "sem": _lib.dlock_semaphore_free,
    "psem": _free_psem,
    "latch": _lib.dlock_latch_free,
    "rate": _lib.dlock_rate_free,
}
_NEW = {
    "lock": _lib.dlock_lock_new,
    "fair": _lib.dlock_lock_new_fair,
    "rw": _lib.dlock_rwlock_new,
    "sem": _lib.dlock_semaphore_new,
    "psem": _lib.dlock_psem_new,
    "latch": _lib.dlock_latch_new,
}


def _reap(state: _State, key: int) -> None:
    _by_key.pop(key, None)
    state.free_handle(key)


def _queue_reap(state: _State, key: int) -> None:
    _service.put(_reap, state, key)


class _Handle:
    """One C handle (dlock_lock, dlock_rwlock, ...) and the Python holds of
    it, per thread."""

    __slots__ = ("state", "kind", "name", "ptr", "key", "mu", "stacks", "idle", "__weakref__")

    def __init__(self, state: _State, kind: str, name: bytes, ptr: int) -> None:
        self.state = state
        self.kind = kind
        self.name = name
        self.ptr = ptr
        self.key = next(_keys)
        self.mu = threading.Lock()
        # (thread ident, mode) -> the open holds of that thread, oldest first.
        self.stacks: Dict[Tuple[int, Optional[int]], List[Hold]] = {}
        # Handles of this name that tasks used and gave back (asyncio),
        # kept for the next task: making one costs more than a round trip.
        self.idle: List["_Handle"] = []
        _by_key[self.key] = weakref.ref(self)
        state.ptrs[self.key] = (_FREE[kind], ptr)
        weakref.finalize(self, _queue_reap, state, self.key)
        if kind in ("lock", "fair"):
            _lib.dlock_lock_on_lost(ptr, _on_lost, self.key)
        elif kind == "rw":
            _lib.dlock_rwlock_on_lost(ptr, _on_rw_lost, self.key)
        elif kind == "psem":
            from . import _expirable  # (it imports this module)
            _lib.dlock_psem_on_lost(ptr, _expirable._on_permit_lost, ptr)

    def push(self, hold: "Hold") -> None:
        with self.mu:
            self.stacks.setdefault((hold._thread, hold._mode), []).append(hold)
            self.state.pinned.add(self)

    def pop(self, mode: Optional[int], ended: bool, lost: bool,
            thread: Optional[int] = None) -> Optional["Hold"]:
        """The calling thread (or `thread`) released one hold (or, with
        ended, all of them: the library forgot the hold). Returns the hold
        taken off."""
        key = (threading.get_ident() if thread is None else thread, mode)
        with self.mu:
            stack = self.stacks.get(key)
            if not stack:
                return None
            last = stack.pop()
            gone = stack if ended else None
            if ended or not stack:
                del self.stacks[key]
                if not self.stacks:
                    self.state.pinned.discard(self)
        last._open = False
        if lost:
            last._flag = True
        if gone:
            for h in gone:
                h._open = False
                if lost:
                    h._flag = True
        return last

    def mark_lost(self, mode: Optional[int], token: int) -> List["Hold"]:
        """The library found a hold gone: flag the holds it names. A read
        hold's report carries no token (0), so every read hold of this
        handle is flagged; the watchdog renews them together, and what ends
        one (a pause, a force unlock, an unreachable server) ends all."""
        with self.mu:
            found = [h for (_, m), stack in self.stacks.items() if m == mode
                     for h in stack if mode == _READ or h.token == token]
        for h in found:
            h._flag = True
        return found


def _report(holds: List["Hold"]) -> None:
    """On the service thread: each lock object's callback, once, with its
    outermost lost hold."""
    seen: Set[int] = set()
    for h in holds:
        owner = getattr(h.lock, "_rw", h.lock)  # both sides of an RWLock: once
        if id(owner) in seen:
            continue
        seen.add(id(owner))
        fn = getattr(h.lock, "_origin", h.lock).on_lost
        if fn is not None:
            try:
                fn(h)
            except Exception:
                _log.exception("dlock: exception in the on_lost callback of %r", h.lock)


def _lost(key: Optional[int], mode: Optional[int], token: int) -> None:
    ref = _by_key.get(key) if key is not None else None
    h = ref() if ref is not None else None
    if h is None:
        return
    holds = h.mark_lost(mode, token)
    if holds:
        _service.put(_report, holds)


# Called on the library's watchdog thread; ctypes takes the GIL for them.
# They only flag and queue: the user's callback runs on the service thread.
@_native.LOST_FN
def _on_lost(_lock: Optional[int], token: int, arg: Optional[int]) -> None:
    try:
        _lost(arg, None, token)
    except Exception:
        _log.exception("dlock: loss report failed")


@_native.RW_LOST_FN
def _on_rw_lost(_rw: Optional[int], mode: int, token: int, arg: Optional[int]) -> None:
    try:
        _lost(arg, mode, token)
    except Exception:
        _log.exception("dlock: loss report failed")

