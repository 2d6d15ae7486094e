"""The Python face of libdlock: Client and the objects it makes."""
from __future__ import annotations

import asyncio
import collections
import ctypes
import itertools
import logging
import math
import os
import queue
import threading
import time
import weakref
from typing import (TYPE_CHECKING, Any, Callable, Deque, Dict, List, NamedTuple, Optional, Set, Tuple,
                    Union)

from . import _errors, _native
from ._errors import ClientClosed, ForkedClient, InvalidArgument, fail

if TYPE_CHECKING:
    from ._expirable import ExpirableSemaphore

_lib = _native.lib
_log = logging.getLogger("dlock")

Name = Union[str, bytes]
Seconds = Optional[float]
LostCallback = Callable[["Hold"], Any]

_LONG_MAX = (1 << (8 * ctypes.sizeof(ctypes.c_long) - 1)) - 1
_INT_MAX = (1 << 31) - 1
_FOREVER = -1  # DLOCK_WAIT_FOREVER
_WATCHDOG = 0  # DLOCK_LEASE_WATCHDOG
_READ, _WRITE = 0, 1  # dlock_rw_mode
_MODE_NAMES = {None: "lock", _READ: "read", _WRITE: "write"}

# A wait in the main thread is cut into calls of at most this long, so that
# Ctrl-C (and any other signal handler) runs within that time: Python runs
# handlers between bytecodes, never while a foreign call is inside the
# library. Fair locks are not cut: a fair waiter that stops waiting leaves
# the queue and would lose its place.
_SLICE_MS = 1000


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


def _check(status: int) -> None:
    if status:
        fail(status)


# ---------------------------------------------------------------------------
# One service thread per process runs the loss callbacks (never on the
# library's watchdog thread, where a slow callback would delay every
# renewal of the client) and frees handles dropped by the garbage collector
# (never inside the collector, which may run on the watchdog thread itself,
# in a ctypes callback, where freeing a lock would wait for that thread).

class _Service:
    def __init__(self) -> None:
        self.q: "queue.SimpleQueue[Tuple[Callable[..., Any], tuple]]" = queue.SimpleQueue()
        self.thread: Optional[threading.Thread] = None
        self.mu = threading.Lock()

    def put(self, fn: Callable[..., Any], *args: Any) -> None:
        if self.thread is None:
            with self.mu:
                if self.thread is None:
                    t = threading.Thread(target=self._run, name="dlock-service", daemon=True)
                    t.start()
                    self.thread = t
        self.q.put((fn, args))

    def _run(self) -> None:
        while True:
            fn, args = self.q.get()
            try:
                fn(*args)
            except Exception:
                _log.exception("dlock: exception in %r", fn)


_service = _Service()


# This process's pid, kept by the fork hook below rather than asked of
# the kernel on every call (os.getpid() is a system call: two per
# lock+release pair, a third of the pair's calls). Python runs the hook in
# every child it forks, also for multiprocessing and C code that forks
# through PyOS_AfterFork_Child.
_pid = os.getpid()
# The thread that gets signals (Ctrl-C), for the same reason; threading's
# own fork hook, registered before this one, has already named the forking
# thread main when this one runs.
_main_ident = threading.main_thread().ident


def _after_fork_in_child() -> None:
    # The parent's service thread does not exist in the child, and its
    # queue's lock may have been taken at the moment of fork(); so may
    # the mutex of a loop's completion queue (a library thread of the
    # parent posting): the child makes its own on first use.
    global _service, _pid, _main_ident, _queues
    _service = _Service()
    _pid = os.getpid()
    _main_ident = threading.main_thread().ident
    _queues = weakref.WeakKeyDictionary()


os.register_at_fork(after_in_child=_after_fork_in_child)


# ---------------------------------------------------------------------------
# Client state, shared with the finalizers (which must not keep the Client
# alive).

class _State:
    def __init__(self) -> None:
        self.ptr: Optional[int] = None
        self.pid = _pid
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
        if _pid != self.pid:
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


def _close_at_exit() -> None:
    for st in list(_live_states):
        st.close(wait=False)


# Registered when the first client is made, hence after threading's own
# exit handler: runs before the interpreter finalizes, while the library's
# threads may still call back into Python.
_exit_registered = False


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


# ---------------------------------------------------------------------------
# asyncio, on the library's asynchronous API: no thread waits for a task.
# The library's asynchronous holds belong to a C handle, not to a thread,
# so each task gets a handle of its own per lock (made on its first `async
# with`, freed after its last): two tasks are two owners, and a nested
# `async with` in one task re-enters.
#
# A call made from a loop passes the library's own queue callback
# (dlock_queue_on_*) and a ticket of the loop's completion queue: the
# library's thread appends the outcome in C and wakes the loop through the
# queue's descriptor (add_reader), and the loop takes every outcome that
# came with one call. No Python runs on the library's thread, which reads
# every caller's replies: before, ctypes took the GIL there once per
# completion, and the thread waited for the loop's turn with the GIL. A
# loop without add_reader, and the calls made with no loop, are called
# back in Python (ctypes takes the GIL) and handed on with
# call_soon_threadsafe or to the service thread.

# key -> (loop or None, future or None, hook(status, token, awaited),
#         the loop's queue and the call's ticket, or None)
_Hook = Callable[[int, int, bool], None]
_calls: Dict[int, Tuple[Optional[asyncio.AbstractEventLoop], "Optional[asyncio.Future[int]]",
                        Optional[_Hook], "Optional[Tuple[_LoopQueue, int]]"]] = {}
_call_keys = itertools.count(1)


class _LoopQueue:
    """One event loop's completion queue (dlock_queue) and the buffer its
    outcomes are taken into."""

    __slots__ = ("ptr", "buf", "__weakref__")
    BURST = 64

    def __init__(self, ptr: int) -> None:
        self.ptr = ptr
        self.buf = (_native.Completion * self.BURST)()


_queues_mu = threading.Lock()
_queues: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Optional[_LoopQueue]]" = \
    weakref.WeakKeyDictionary()


def _loop_queue(loop: asyncio.AbstractEventLoop) -> Optional[_LoopQueue]:
    """The loop's completion queue, made and watched on first use; None for
    a loop that cannot watch a descriptor (then callbacks are used)."""
    lq = _queues.get(loop, False)
    if lq is not False:
        return lq
    with _queues_mu:
        lq = _queues.get(loop, False)
        if lq is not False:
            return lq
        ptr = ctypes.c_void_p()
        _check(_lib.dlock_queue_new(ctypes.byref(ptr)))
        assert ptr.value is not None
        made: Optional[_LoopQueue] = _LoopQueue(ptr.value)
        try:
            loop.add_reader(_lib.dlock_queue_fd(ptr.value), _drain_queue, made)
        except NotImplementedError:
            _lib.dlock_queue_free(ptr.value)
            made = None
        else:
            # Freed with the loop: a loop with calls in flight is kept
            # alive by them (_calls holds it), so none is left then.
            weakref.finalize(loop, _free_queue, ptr.value, _pid)
            _watch_close(loop)
        _queues[loop] = made
        return made


def _free_queue(ptr: int, pid: int) -> None:
    # Not in a child made by fork(): its copy of the queue's mutex may
    # have been held by a thread that does not exist there.
    if pid == _pid:
        _lib.dlock_queue_free(ptr)


def _call_start(loop: Optional[asyncio.AbstractEventLoop],
                hook: Optional[_Hook]) -> "Tuple[int, Optional[asyncio.Future[int]]]":
    """A key for one asynchronous call. Its outcome goes to the future (on
    `loop`), after hook(status, token, awaited) ran on the loop's thread;
    with no loop, to the hook alone, on the service thread. Pass the
    call's callback and argument as _via(key, kind, python_callback)
    gives them, and end a call that did not start with _call_drop()."""
    key = next(_call_keys)
    fut = None
    queued = None
    if loop is not None:
        fut = loop.create_future()
        lq = _loop_queue(loop)
        if lq is not None:
            ticket = _lib.dlock_queue_ticket(lq.ptr, key)
            if not ticket:
                raise MemoryError("dlock: no memory for an asynchronous call")
            queued = (lq, ticket)
    _calls[key] = (loop, fut, hook, queued)
    return key, fut


def _via(key: int, kind: str, callback: Any) -> Tuple[Any, Any]:
    """The callback and argument for call `key`: the library's queue
    callback of `kind` and the call's ticket, or the Python callback and
    the key."""
    entry = _calls.get(key)
    if entry is not None and entry[3] is not None:
        return _native.queue_callbacks[kind], entry[3][1]
    return callback, key


def _call_drop(key: int) -> None:
    """Forget a call that did not start (its ticket back to the queue)."""
    entry = _calls.pop(key, None)
    if entry is not None and entry[3] is not None:
        _lib.dlock_queue_ticket_free(entry[3][1])


def _call_submit(key: int, start: Callable[[], int], undo: Optional[Callable[[], None]] = None) -> None:
    """Start call `key`: start() submits it in C and returns its status.
    A call that does not start (an exception, or a status other than 0)
    is dropped and undo() run; then the exception, or the status's error,
    is raised."""
    try:
        rc = start()
    except BaseException:
        _call_drop(key)
        if undo is not None:
            undo()
        raise
    if rc:
        _call_drop(key)
        if undo is not None:
            undo()
        fail(rc)


def _outcome(c: "_native.Completion") -> Tuple[int, int, str]:
    """A completion's status, token and message, copied out of its C
    memory (the queue's buffer, or a diverted call's for the callback)."""
    status = c.status
    return status, c.token, c.error.decode("utf-8", "replace") if status else ""


def _drain_queue(lq: _LoopQueue) -> None:
    """On the loop's thread, when its queue's descriptor is readable:
    settle every outcome that came."""
    while True:
        n = _lib.dlock_queue_take(lq.ptr, lq.buf, lq.BURST)
        for i in range(n):
            c = lq.buf[i]
            entry = _calls.pop(c.key, None)
            if entry is None:
                continue
            try:
                _call_settle(entry[1], *_outcome(c), entry[2])
            except Exception:  # the others of the burst are settled still
                _log.exception("dlock: settling an asynchronous call failed")
        if n < lq.BURST:
            return


def _divert(key: int, abandoned: bool = False) -> None:
    """On the loop's thread, for a call nobody awaits any more (its task
    was cancelled) whose outcome has not been settled: settle it here if
    it came already, else have the library thread that ends it hand it to
    the service thread, so its hook undoes it even if this loop is closed
    by then (asyncio.run cancels the tasks left, then closes the loop).
    `abandoned`: the loop is closing with the task still waiting, so the
    outcome is settled as one nobody awaits, whatever its future says."""
    entry = _calls.get(key)
    if entry is None or entry[3] is None:
        return
    lq, ticket = entry[3]
    c = _native.Completion()
    if _lib.dlock_queue_divert(lq.ptr, ticket, ctypes.byref(c), _on_diverted, None):
        _calls.pop(key, None)
        _call_settle(None if abandoned else entry[1], *_outcome(c), entry[2])


def _watch_close(loop: asyncio.AbstractEventLoop) -> None:
    """Have the loop's close() divert the calls its tasks still wait for:
    a loop closed with tasks left waiting (not cancelled first, as
    asyncio.run does) would otherwise leave their outcomes in its queue,
    and an acquisition among them would keep its lock. A loop whose
    close() cannot be wrapped (a compiled loop class without instance
    attributes, or one wrapped already by someone else) is left as it
    is."""
    # Neither the wrapper nor what it calls refers to the loop: a cycle
    # through the loop's own attribute would keep it, and its queue's
    # descriptor, until the cyclic collector runs.
    original = loop.close
    func = getattr(original, "__func__", None) if getattr(original, "__self__", None) is loop else None
    ref = weakref.ref(loop)
    if func is None:
        return

    def close() -> None:
        lp = ref()
        if lp is None:
            return
        for key in [k for k, e in _calls.items() if e[0] is lp]:
            _divert(key, abandoned=True)
        func(lp)

    try:
        loop.close = close  # type: ignore[method-assign]
    except AttributeError:
        pass


async def _await_call(key: int, fut: "asyncio.Future[int]") -> int:
    """Await call `key`'s future; a cancelled wait diverts the call."""
    try:
        return await fut
    except asyncio.CancelledError:
        _divert(key)
        raise


# Outcomes on their way to a loop, by loop, while one drain is scheduled
# there: the library's reader thread hands many replies over in a burst,
# and waking the loop once for the burst (one write to its self-pipe)
# instead of once per outcome saves a system call and a wake-up each.
_Outcome = Tuple["Optional[asyncio.Future[int]]", int, int, str, Optional[_Hook]]
_inbox_mu = threading.Lock()
_inbox: Dict[asyncio.AbstractEventLoop, List[_Outcome]] = {}


# A library thread that calls back is not a Python thread: for each call
# ctypes makes a Python thread state and deletes it at the return, and in
# CPython 3.11 that maps and unmaps the state's frame stack, whose unmap
# makes every other CPU flush its TLB (an interrupt each). A thread that
# completes thousands of calls a second keeps one state instead: taking
# one more hold on it (PyGILState_Ensure, never released) outlives the
# callback's own. One small state stays per library thread; the
# interpreter frees them at exit.
_pinned = threading.local()
_gil_ensure = ctypes.pythonapi.PyGILState_Ensure
_gil_ensure.restype = ctypes.c_int
_gil_ensure.argtypes = []


def _pin_thread_state() -> None:
    if not getattr(_pinned, "done", False):
        _gil_ensure()
        _pinned.done = True


def _call_end(key: Optional[int], status: int, token: int) -> None:
    """On a library thread: hand the outcome over."""
    _pin_thread_state()
    entry = _calls.pop(key, None) if key is not None else None
    if entry is None:
        return
    loop, fut, hook, _queued = entry
    message = _native.last_error() if status else ""
    if loop is None:
        _service.put(_call_settle, fut, status, token, message, hook)
        return
    with _inbox_mu:
        pending = _inbox.setdefault(loop, [])
        pending.append((fut, status, token, message, hook))
        # A drain is scheduled already, unless the loop closed before it
        # ran: then this call finds the loop closed and hands them all on.
        if len(pending) > 1 and not loop.is_closed():
            return
    try:
        loop.call_soon_threadsafe(_drain_inbox, loop)
    except RuntimeError:  # the loop is closed: nobody awaits these
        with _inbox_mu:
            orphans = _inbox.pop(loop, [])
        for _fut, st, tok, msg, hk in orphans:
            _service.put(_call_settle, None, st, tok, msg, hk)


def _drain_inbox(loop: asyncio.AbstractEventLoop) -> None:
    """On the loop's thread: settle every outcome that came for it."""
    with _inbox_mu:
        outcomes = _inbox.pop(loop, [])
    for outcome in outcomes:
        _call_settle(*outcome)


def _call_settle(fut: "Optional[asyncio.Future[int]]", status: int, token: int, message: str,
                 hook: Optional[_Hook]) -> None:
    awaited = fut is not None and not fut.done()
    if hook is not None:
        hook(status, token, awaited)
    if fut is not None and awaited:
        if status:
            fut.set_exception(_errors.from_status(status, message))
        else:
            fut.set_result(token)


@_native.QUEUE_FN
def _on_diverted(c: Any, _arg: Optional[int]) -> None:
    """On a library thread: the outcome of a diverted call (_divert), for
    the service thread, whose settling finds nobody awaiting it."""
    _pin_thread_state()
    done = c.contents
    entry = _calls.pop(done.key, None)
    if entry is None:
        return
    _service.put(_call_settle, None, *_outcome(done), entry[2])


@_native.ACQUIRED_FN
def _on_acquired(_lock: Optional[int], status: int, token: int, arg: Optional[int]) -> None:
    _call_end(arg, status, token)


@_native.MULTILOCK_FN
def _on_multilock(status: int, arg: Optional[int]) -> None:
    _call_end(arg, status, 0)


@_native.RELEASED_FN
def _on_released(_lock: Optional[int], status: int, arg: Optional[int]) -> None:
    _call_end(arg, status, 0)


@_native.RW_ACQUIRED_FN
def _on_rw_acquired(_rw: Optional[int], _mode: int, status: int, token: int, arg: Optional[int]) -> None:
    _call_end(arg, status, token)


@_native.RW_RELEASED_FN
def _on_rw_released(_rw: Optional[int], _mode: int, status: int, arg: Optional[int]) -> None:
    _call_end(arg, status, 0)


@_native.SEM_FN
def _on_sem(_sem: Optional[int], status: int, arg: Optional[int]) -> None:
    _call_end(arg, status, 0)


@_native.LATCH_FN
def _on_latch(_latch: Optional[int], status: int, arg: Optional[int]) -> None:
    _call_end(arg, status, 0)


@_native.COUNTED_FN
def _on_counted(_latch: Optional[int], status: int, remaining: int, arg: Optional[int]) -> None:
    _call_end(arg, status, remaining)


@_native.IDS_FN
def _on_ids(_client: Optional[int], status: int, first: int, _count: int, arg: Optional[int]) -> None:
    _call_end(arg, status, first)


class _TaskHandle:
    """A task's own C handle of one lock (or semaphore), and how many of
    its `async with` blocks are open on it."""

    __slots__ = ("handle", "shared", "uses")

    def __init__(self, handle: "_Handle", shared: "_Handle") -> None:
        self.handle = handle
        self.shared = shared
        self.uses = 1


_task_mu = threading.Lock()
_task_handles: "weakref.WeakKeyDictionary[asyncio.Task[Any], Dict[int, _TaskHandle]]" = \
    weakref.WeakKeyDictionary()


def _task_handle(shared: "_Handle", task: "asyncio.Task[Any]", enter: bool) -> Optional[_TaskHandle]:
    """The task's handle for `shared`'s name: one more use of it with
    `enter` (made on first use), else the one there is (or None)."""
    with _task_mu:
        th = _task_handles.get(task, {}).get(shared.key)
        if th is not None and enter:
            th.uses += 1
        if th is not None or not enter:
            return th
        if shared.idle:
            th = _TaskHandle(shared.idle.pop(), shared)
            _task_handles.setdefault(task, {})[shared.key] = th
            return th
    th = _TaskHandle(_new_handle(shared), shared)
    with _task_mu:
        _task_handles.setdefault(task, {})[shared.key] = th
    return th


def _new_handle(shared: "_Handle") -> "_Handle":
    """A C handle of its own for `shared`'s name and kind."""
    st = shared.state
    ptr = ctypes.c_void_p()
    st.enter()
    try:
        _check(_NEW[shared.kind](st.ptr, shared.name, ctypes.byref(ptr)))
        with st.mu:
            return _Handle(st, shared.kind, shared.name, ptr.value)
    finally:
        st.leave()


def _spare_handle(shared: "_Handle") -> "_Handle":
    """An idle C handle of `shared`'s name for one asynchronous call that
    holds nothing afterwards (a latch's await); give it back with
    _spare_done() from its callback."""
    with _task_mu:
        if shared.idle:
            return shared.idle.pop()
    return _new_handle(shared)


def _spare_done(shared: "_Handle", h: "_Handle") -> None:
    with _task_mu:
        shared.idle.append(h)


def _task_handle_done(task: "asyncio.Task[Any]", shared_key: int, th: _TaskHandle) -> None:
    """One use fewer; after the last the C handle goes back to its name's
    idle list for the next task (no call is in flight on it then: every
    use ends after its call's callback, and nothing is held on it)."""
    with _task_mu:
        th.uses -= 1
        if th.uses > 0:
            return
        per = _task_handles.get(task)
        if per is not None and per.get(shared_key) is th:
            del per[shared_key]
        if not th.handle.stacks:
            th.shared.idle.append(th.handle)
            return
    _reap(th.handle.state, th.handle.key)


async def _acquire_on(task: "asyncio.Task[Any]", shared_key: int, th: _TaskHandle,
                      submit: Callable[[int], int], give_back: Callable[[int], None]) -> int:
    """One asynchronous acquisition on the task's handle `th`: submit(key)
    starts it in C (its status); give_back(status) undoes an outcome that
    nobody awaits any more (the task was cancelled) and ends the use of
    `th`. Returns the token; a failure ends the use of `th` and raises."""
    def hook(status: int, _token: int, awaited: bool) -> None:
        if not awaited:
            give_back(status)

    key, fut = _call_start(task.get_loop(), hook)
    assert fut is not None
    _call_submit(key, lambda: submit(key), lambda: _task_handle_done(task, shared_key, th))
    try:
        return await fut
    except asyncio.CancelledError:
        _divert(key)
        # Cancelled after the outcome arrived: the hook saw it awaited.
        if fut.done() and not fut.cancelled() and fut.exception() is None:
            give_back(0)
        raise
    except BaseException:
        _task_handle_done(task, shared_key, th)
        raise


# The calls below take their loop from the task (Task.get_loop()), not
# from asyncio.get_running_loop(): CPython 3.11's asks the kernel for the
# process id on every call (a fork check). asyncio.current_task() still
# does, once per enter and once per exit.
def _current_task() -> "asyncio.Task[Any]":
    t = asyncio.current_task()
    if t is None:
        raise RuntimeError("dlock: async with needs a running asyncio task")
    return t


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

    def __init__(self, handle: _Handle, wait: Seconds, lease: Seconds,
                 on_lost: Optional[LostCallback]) -> None:
        self._h = handle
        self._wait = _wait_ms(wait)
        self._lease = _lease_ms(lease)
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
            if (0 <= wait_ms <= _SLICE_MS or threading.get_ident() != _main_ident
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
        task = _current_task()
        shared_key = self._h.key
        th = _task_handle(self._h, task, enter=True)
        assert th is not None
        view = self._view(th.handle)

        def give_back(status: int) -> None:
            if status == 0:
                view._release_in_background(lambda: _task_handle_done(task, shared_key, th))
            else:
                _task_handle_done(task, shared_key, th)

        token = await _acquire_on(
            task, shared_key, th,
            lambda key: view._rc(lambda ptr: self._c_acquire_async(ptr, self._wait, self._lease, key)),
            give_back)
        hold = Hold(view, token, self._mode)
        th.handle.push(hold)
        return hold

    def _release_in_background(self, then: Callable[[], None]) -> None:
        """Release an asynchronous hold nobody awaits; then() afterwards."""
        key, _ = _call_start(None, lambda _st, _tok, _aw: then())
        try:
            rc = self._rc(lambda ptr: self._c_release_async(ptr, key))
        except _errors.DlockError:
            rc = -1
        if rc:
            _call_drop(key)
            then()

    async def __aexit__(self, *exc: Any) -> None:
        key, fut, rc = self._release_start(_current_task())
        try:
            if rc:
                fail(rc)
            await _await_call(key, fut)
        except _errors.DlockError as e:
            _release_failed(self, e, exc[0] is not None)

    def _release_start(self, task: "asyncio.Task[Any]") -> "Tuple[int, asyncio.Future[int], int]":
        """Start the release of `task`'s latest hold: the call's key and
        future, and a status that is not 0 when it did not start. The
        hold's bookkeeping is done when the release ends, whether anybody
        awaits it or not (a cancelled exit still releases)."""
        shared_key = self._h.key
        th = _task_handle(self._h, task, enter=False)
        if th is None:
            raise RuntimeError("dlock: async exit from a task that did not enter")
        mode, ident = self._mode, threading.get_ident()
        view = self._view(th.handle)

        def hook(status: int, _token: int, _awaited: bool) -> None:
            # A failure other than a loss leaves the hold as it was, as a
            # synchronous release does.
            if status in (0, _errors.ERR_LOST):
                th.handle.pop(mode, ended=status != 0, lost=status != 0, thread=ident)
                _task_handle_done(task, shared_key, th)

        key, fut = _call_start(task.get_loop(), hook)
        assert fut is not None
        try:
            rc = view._rc(lambda ptr: self._c_release_async(ptr, key))
        except BaseException:
            _call_drop(key)
            raise
        if rc:
            _call_drop(key)
            hook(rc, 0, True)
        return key, fut, rc


def _now_ms() -> int:
    return time.monotonic_ns() // 1_000_000


def _wait_in_slices(call: Callable[[int], int], wait_ms: int, sliced: bool = True) -> int:
    """call(ms) for a wait of wait_ms, which in the main thread is cut into
    calls of at most _SLICE_MS (see there) unless ``sliced`` is False;
    returns the status of the last call."""
    if 0 <= wait_ms <= _SLICE_MS or not sliced or threading.get_ident() != _main_ident:
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
        return _lib.dlock_lock_acquire_async(ptr, wait_ms, lease_ms, *_via(key, "acquired", _on_acquired))

    def _c_release_async(self, ptr: int, key: int) -> int:
        return _lib.dlock_lock_release_async(ptr, *_via(key, "released", _on_released))

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
        _lib.dlock_lock_set_fence_floor(self._h.ptr, floor)

    def __repr__(self) -> str:
        return "<dlock.Lock %r%s>" % (self.name, " fair" if self.fair else "")


class RWLockMode(_Exclusive):
    """The read or the write side of an RWLock, used like a Lock."""

    def __init__(self, rw: "RWLock", mode: int, wait: Seconds, lease: Seconds) -> None:
        super().__init__(rw._h, wait, lease, None)
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
                                               *_via(key, "rw_acquired", _on_rw_acquired))

    def _c_release_async(self, ptr: int, key: int) -> int:
        return _lib.dlock_rwlock_release_async(ptr, self._mode, *_via(key, "rw_released", _on_rw_released))

    def __repr__(self) -> str:
        return "<dlock.RWLock %r %s>" % (self.name, _MODE_NAMES[self._mode])


class RWLock(_OnHandle):
    """Many readers or one writer, made by Client.rw_lock(). ``read()`` and
    ``write()`` give the two sides, each used like a Lock. A thread holding
    a read hold that asks for the write hold gets Deadlock."""

    def __init__(self, handle: _Handle, on_lost: Optional[LostCallback]) -> None:
        self._h = handle
        #: Called with the lost Hold (see Lock.on_lost); hold.mode tells
        #: which side.
        self.on_lost = on_lost

    def read(self, wait: Seconds = None, lease: Seconds = None) -> RWLockMode:
        return RWLockMode(self, _READ, wait, lease)

    def write(self, wait: Seconds = None, lease: Seconds = None) -> RWLockMode:
        return RWLockMode(self, _WRITE, wait, lease)

    def set_fence_floor(self, floor: int) -> None:
        """As Lock.set_fence_floor, for the write holds."""
        _lib.dlock_rwlock_set_fence_floor(self._h.ptr, floor)

    def __repr__(self) -> str:
        return "<dlock.RWLock %r>" % self.name


class Semaphore(_OnHandle):
    """A counting semaphore without owners (any process may release), made
    by Client.semaphore(). ``with sem:`` takes one permit and returns it."""

    def __init__(self, handle: _Handle, wait: Seconds) -> None:
        self._h = handle
        self._wait = _wait_ms(wait)

    def set_permits(self, permits: int) -> bool:
        """Set the number of permits if the semaphore does not exist yet;
        True when this call set it."""
        was = ctypes.c_int()
        self._call(_lib.dlock_semaphore_set_permits, permits, ctypes.byref(was))
        return bool(was.value)

    def acquire(self, permits: int = 1, wait: Seconds = _DEFAULT) -> None:
        """Take ``permits``, all or nothing; NotAcquired when too few became
        free within ``wait`` seconds (None: forever)."""
        wait_ms = self._wait if wait is _DEFAULT else _wait_ms(wait)
        self._call(_lib.dlock_semaphore_acquire, permits, wait_ms)

    def release(self, permits: int = 1) -> None:
        self._call(_lib.dlock_semaphore_release, permits)

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
        task = _current_task()
        shared_key = self._h.key
        th = _task_handle(self._h, task, enter=True)
        assert th is not None
        ptr = th.handle.ptr

        def give_back(status: int) -> None:
            if status != 0:
                _task_handle_done(task, shared_key, th)
                return
            k, _ = _call_start(None, lambda _st, _tok, _aw: _task_handle_done(task, shared_key, th))
            if self._rc(lambda _p: _lib.dlock_semaphore_release_async(ptr, 1, _on_sem, k)):
                _call_drop(k)
                _task_handle_done(task, shared_key, th)

        await _acquire_on(
            task, shared_key, th,
            lambda key: self._rc(lambda _p: _lib.dlock_semaphore_acquire_async(
                ptr, 1, self._wait, *_via(key, "semaphore", _on_sem))),
            give_back)
        return self

    async def __aexit__(self, *exc: Any) -> None:
        task = _current_task()
        shared_key = self._h.key
        th = _task_handle(self._h, task, enter=False)
        if th is None:
            raise RuntimeError("dlock: async exit from a task that did not enter")

        def hook(status: int, _token: int, _awaited: bool) -> None:
            if status == 0:
                _task_handle_done(task, shared_key, th)

        key, fut = _call_start(task.get_loop(), hook)
        assert fut is not None
        _call_submit(key, lambda: self._rc(lambda _p: _lib.dlock_semaphore_release_async(
            th.handle.ptr, 1, *_via(key, "semaphore", _on_sem))))
        await _await_call(key, fut)

    def __repr__(self) -> str:
        return "<dlock.Semaphore %r>" % self.name


class Latch(_OnHandle):
    """A count-down latch, made by Client.latch(): processes wait() until
    others have counted it down to zero."""

    def __init__(self, handle: _Handle) -> None:
        self._h = handle

    def set(self, count: int) -> bool:
        """Set the count if the latch is not set; True when this call set it."""
        was = ctypes.c_int()
        self._call(_lib.dlock_latch_set, count, ctypes.byref(was))
        return bool(was.value)

    def count_down(self) -> int:
        """Count down by one; returns the count left."""
        left = ctypes.c_long()
        self._call(_lib.dlock_latch_count_down, ctypes.byref(left))
        return left.value

    def wait(self, timeout: Seconds = None) -> bool:
        """Wait until the count is zero: True, or False when ``timeout``
        seconds passed first (as threading.Event.wait)."""
        rc = self._rc(_lib.dlock_latch_await, _wait_ms(timeout))
        if rc == _errors.ERR_TIMEOUT:
            return False
        _check(rc)
        return True

    async def wait_async(self, timeout: Seconds = None) -> bool:
        """wait() for a task, on the library's asynchronous await: the
        waiting task holds no thread, and is woken by the last count-down."""
        wait_ms = _wait_ms(timeout)
        try:
            await self._spare_call(
                lambda h, key: _lib.dlock_latch_await_async(h.ptr, wait_ms, *_via(key, "latch", _on_latch)))
        except _errors.NotAcquired:
            return False
        return True

    async def count_down_async(self) -> int:
        """count_down() for a task, on the library's asynchronous
        count-down: the count left. A task cancelled while it waits for
        the answer may still have counted down."""
        return await self._spare_call(
            lambda h, key: _lib.dlock_latch_count_down_async(h.ptr, *_via(key, "counted", _on_counted)))

    async def _spare_call(self, submit: "Callable[[_Handle, int], int]") -> int:
        """One asynchronous call of the latch on an idle C handle of its
        own (a handle takes one such call at a time): submit(handle, key)
        starts it (its status); returns the call's token."""
        shared = self._h
        h = _spare_handle(shared)

        def hook(_status: int, _token: int, _awaited: bool) -> None:
            _spare_done(shared, h)

        key, fut = _call_start(asyncio.get_running_loop(), hook)
        assert fut is not None
        _call_submit(key, lambda: self._rc(lambda _p: submit(h, key)), lambda: _spare_done(shared, h))
        return await _await_call(key, fut)

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
        global _exit_registered
        self._state = _State()
        o = _native.Options()
        o.connect_timeout_ms = _option_ms(connect_timeout, "connect_timeout", _INT_MAX)
        o.command_timeout_ms = _option_ms(command_timeout, "command_timeout", _INT_MAX)
        o.watchdog_lease_ms = _option_ms(watchdog_lease, "watchdog_lease", _LONG_MAX)
        o.fair_waiter_timeout_ms = _option_ms(fair_waiter_timeout, "fair_waiter_timeout", _LONG_MAX)
        o.offline_ok = 1 if offline_ok else 0
        o.replica_acks = int(replica_acks)
        o.replica_timeout_ms = _option_ms(replica_timeout, "replica_timeout", _INT_MAX)
        o.safety_margin_pct = int(safety_margin_pct or 0)
        o.username = None if username is None else _cname(username, "username")
        o.password = None if password is None else _cname(password, "password")
        o.busy_poll_us = _busy_poll_us(busy_poll)
        ptr = ctypes.c_void_p()
        _check(_lib.dlock_client_new(_cname(url, "url"), ctypes.byref(o), ctypes.byref(ptr)))
        self._state.ptr = ptr.value
        self._id = _lib.dlock_client_id(ptr.value).decode()
        _live_states.add(self._state)
        weakref.finalize(self, self._state.close, False)
        if not _exit_registered:
            import atexit
            atexit.register(_close_at_exit)
            _exit_registered = True

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
        return Lock(self._handle("lock", name), wait, lease, on_lost)

    def fair_lock(self, name: Name, wait: Seconds = None, lease: Seconds = None,
                  on_lost: Optional[LostCallback] = None) -> Lock:
        """The fair (FIFO) lock ``name``; do not mix with lock() on one name.
        A fair wait in the main thread is not cut short by Ctrl-C: give it
        a wait bound."""
        return Lock(self._handle("fair", name), wait, lease, on_lost)

    def rw_lock(self, name: Name, on_lost: Optional[LostCallback] = None) -> RWLock:
        """The read-write lock ``name``: ``rw.read()`` and ``rw.write()``."""
        return RWLock(self._handle("rw", name), on_lost)

    def semaphore(self, name: Name, permits: Optional[int] = None,
                  wait: Seconds = None) -> Semaphore:
        """The semaphore ``name``, created with ``permits`` if it does not
        exist yet (every process may pass the same number at start-up)."""
        sem = Semaphore(self._handle("sem", name), wait)
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

    def latch(self, name: Name) -> Latch:
        """The count-down latch ``name``."""
        return Latch(self._handle("latch", name))

    def _call(self, fn: Any, *args: Any) -> None:
        _check(self._state.call(fn, *args))

    def ids(self, prefix: Name, n: int = 1) -> List[int]:
        """``n`` (1 to 1,000,000) unique 64-bit IDs for ``prefix``:
        (seconds since 2022-01-01Z) << 32 | the day's sequence."""
        if not isinstance(n, int) or not 1 <= n <= 1_000_000:
            raise InvalidArgument("n must be an int from 1 to 1000000, not %r" % (n,))
        out = (ctypes.c_uint64 * n)()
        self._call(_lib.dlock_id_next, _cname(prefix, "prefix"), out, n)
        return list(out)

    async def ids_async(self, prefix: Name, n: int = 1) -> List[int]:
        """ids() for a task, on the library's asynchronous batch: many
        tasks' batches may be in flight at once, none holding a thread."""
        if not isinstance(n, int) or not 1 <= n <= 1_000_000:
            raise InvalidArgument("n must be an int from 1 to 1000000, not %r" % (n,))
        b = _cname(prefix, "prefix")
        key, fut = _call_start(asyncio.get_running_loop(), None)
        assert fut is not None
        _call_submit(key, lambda: self._state.call(_lib.dlock_id_next_async, b, n, *_via(key, "ids", _on_ids)))
        first = await _await_call(key, fut)
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
