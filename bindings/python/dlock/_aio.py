"""asyncio, on the library's asynchronous API: no thread waits for a task.

The library's asynchronous holds belong to a C handle, not to a thread,
so each task gets a handle of its own per lock (made on its first `async
with`, freed after its last): two tasks are two owners, and a nested
`async with` in one task re-enters.

A call made from a loop passes the library's own queue callback
(dlock_queue_on_*) and a ticket of the loop's completion queue: the
library's thread appends the outcome in C and wakes the loop through the
queue's descriptor (add_reader), and the loop takes every outcome that
came with one call. No Python runs on the library's thread, which reads
every caller's replies: before, ctypes took the GIL there once per
completion, and the thread waited for the loop's turn with the GIL. A
loop without add_reader, and the calls made with no loop, are called
back in Python (ctypes takes the GIL) and handed on with
call_soon_threadsafe or to the service thread.

Every registry of calls, loops and task handles is held by the one
Bridge of the process, ``bridge``; the public classes (_client, _multi,
_expirable) start their calls through it and pass the callbacks of this
module (on_acquired, ...) for loops without a queue.
"""
from __future__ import annotations

import asyncio
import ctypes
import itertools
import threading
import weakref
from typing import Any, Callable, Dict, List, Optional, Tuple

from . import _errors, _native, _service
from ._errors import check as _check, fail
from ._handles import _NEW, _Handle, _reap

_lib = _native.lib
_log = _service.log

# hook(status, token, awaited): run on the loop's thread (or the service
# thread) when a call's outcome is settled.
_Hook = Callable[[int, int, bool], None]
# An outcome on its way to a loop: (future, status, token, message, hook).
_Outcome = Tuple["Optional[asyncio.Future[int]]", int, int, str, Optional[_Hook]]


class _LoopQueue:
    """One event loop's completion queue (dlock_queue) and the buffer its
    outcomes are taken into."""

    __slots__ = ("ptr", "buf", "__weakref__")
    BURST = 64

    def __init__(self, ptr: int) -> None:
        self.ptr = ptr
        self.buf = (_native.Completion * self.BURST)()


class _TaskHandle:
    """A task's own C handle of one lock (or semaphore), and how many of
    its `async with` blocks are open on it."""

    __slots__ = ("handle", "shared", "uses")

    def __init__(self, handle: _Handle, shared: _Handle) -> None:
        self.handle = handle
        self.shared = shared
        self.uses = 1


def _outcome(c: "_native.Completion") -> Tuple[int, int, str]:
    """A completion's status, token and message, copied out of its C
    memory (the queue's buffer, or a diverted call's for the callback)."""
    status = c.status
    return status, c.token, c.error.decode("utf-8", "replace") if status else ""


def _free_queue(ptr: int, pid: int) -> None:
    # Not in a child made by fork(): its copy of the queue's mutex may
    # have been held by a thread that does not exist there.
    if pid == _service.pid:
        _lib.dlock_queue_free(ptr)


def call_settle(fut: "Optional[asyncio.Future[int]]", status: int, token: int, message: str,
                hook: Optional[_Hook]) -> None:
    """Settle one outcome: the hook, then the future if anybody awaits it."""
    awaited = fut is not None and not fut.done()
    if hook is not None:
        hook(status, token, awaited)
    if fut is not None and awaited:
        if status:
            fut.set_exception(_errors.from_status(status, message))
        else:
            fut.set_result(token)


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


# ---------------------------------------------------------------------------
# The bridge: every asynchronous call under way, every loop's queue, every
# task's handles.

class Bridge:
    """The process's registries of asynchronous calls: by key, the call's
    loop, future, hook and ticket (``calls``); each loop's completion queue
    (``queues``); outcomes on their way to a loop (``inbox``); and each
    task's own C handles (``task_handles``)."""

    __slots__ = ("calls", "keys", "queues_mu", "queues", "inbox_mu", "inbox", "task_mu",
                 "task_handles")

    def __init__(self) -> None:
        # key -> (loop or None, future or None, hook(status, token, awaited),
        #         the loop's queue and the call's ticket, or None)
        self.calls: Dict[int, Tuple[Optional[asyncio.AbstractEventLoop], "Optional[asyncio.Future[int]]",
                                    Optional[_Hook], "Optional[Tuple[_LoopQueue, int]]"]] = {}
        self.keys = itertools.count(1)
        self.queues_mu = threading.Lock()
        self.queues: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Optional[_LoopQueue]]" = \
            weakref.WeakKeyDictionary()
        # Outcomes on their way to a loop, by loop, while one drain is
        # scheduled there: the library's reader thread hands many replies
        # over in a burst, and waking the loop once for the burst (one
        # write to its self-pipe) instead of once per outcome saves a
        # system call and a wake-up each.
        self.inbox_mu = threading.Lock()
        self.inbox: Dict[asyncio.AbstractEventLoop, List[_Outcome]] = {}
        self.task_mu = threading.Lock()
        self.task_handles: "weakref.WeakKeyDictionary[asyncio.Task[Any], Dict[int, _TaskHandle]]" = \
            weakref.WeakKeyDictionary()

    def after_fork_in_child(self) -> None:
        # The mutex of a loop's completion queue may have been taken at
        # the moment of fork() (a library thread of the parent posting):
        # the child makes its own queues on first use.
        self.queues_mu = threading.Lock()
        self.queues = weakref.WeakKeyDictionary()

    # -- loops and their queues ------------------------------------------

    def loop_queue(self, loop: asyncio.AbstractEventLoop) -> Optional[_LoopQueue]:
        """The loop's completion queue, made and watched on first use; None
        for a loop that cannot watch a descriptor (then callbacks are used)."""
        lq = self.queues.get(loop, False)
        if lq is not False:
            return lq
        with self.queues_mu:
            lq = self.queues.get(loop, False)
            if lq is not False:
                return lq
            ptr = ctypes.c_void_p()
            _check(_lib.dlock_queue_new(ctypes.byref(ptr)))
            assert ptr.value is not None
            made: Optional[_LoopQueue] = _LoopQueue(ptr.value)
            try:
                loop.add_reader(_lib.dlock_queue_fd(ptr.value), self.drain_queue, made)
            except NotImplementedError:
                _lib.dlock_queue_free(ptr.value)
                made = None
            else:
                # Freed with the loop: a loop with calls in flight is kept
                # alive by them (calls holds it), so none is left then.
                weakref.finalize(loop, _free_queue, ptr.value, _service.pid)
                self.watch_close(loop)
            self.queues[loop] = made
            return made

    def drain_queue(self, lq: _LoopQueue) -> None:
        """On the loop's thread, when its queue's descriptor is readable:
        settle every outcome that came."""
        calls = self.calls
        while True:
            n = _lib.dlock_queue_take(lq.ptr, lq.buf, lq.BURST)
            for i in range(n):
                c = lq.buf[i]
                entry = calls.pop(c.key, None)
                if entry is None:
                    continue
                try:
                    call_settle(entry[1], *_outcome(c), entry[2])
                except Exception:  # the others of the burst are settled still
                    _log.exception("dlock: settling an asynchronous call failed")
            if n < lq.BURST:
                return

    def watch_close(self, loop: asyncio.AbstractEventLoop) -> None:
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
        calls = self.calls
        divert = self.divert

        def close() -> None:
            lp = ref()
            if lp is None:
                return
            for key in [k for k, e in calls.items() if e[0] is lp]:
                divert(key, abandoned=True)
            func(lp)

        try:
            loop.close = close  # type: ignore[method-assign]
        except AttributeError:
            pass

    # -- one call --------------------------------------------------------

    def call_start(self, loop: Optional[asyncio.AbstractEventLoop],
                   hook: Optional[_Hook]) -> "Tuple[int, Optional[asyncio.Future[int]]]":
        """A key for one asynchronous call. Its outcome goes to the future
        (on `loop`), after hook(status, token, awaited) ran on the loop's
        thread; with no loop, to the hook alone, on the service thread.
        Pass the call's callback and argument as via(key, kind,
        python_callback) gives them, and end a call that did not start with
        call_drop()."""
        key = next(self.keys)
        fut = None
        queued = None
        if loop is not None:
            fut = loop.create_future()
            lq = self.loop_queue(loop)
            if lq is not None:
                ticket = _lib.dlock_queue_ticket(lq.ptr, key)
                if not ticket:
                    raise MemoryError("dlock: no memory for an asynchronous call")
                queued = (lq, ticket)
        self.calls[key] = (loop, fut, hook, queued)
        return key, fut

    def via(self, key: int, kind: str, callback: Any) -> Tuple[Any, Any]:
        """The callback and argument for call `key`: the library's queue
        callback of `kind` and the call's ticket, or the Python callback
        and the key."""
        entry = self.calls.get(key)
        if entry is not None and entry[3] is not None:
            return _native.queue_callbacks[kind], entry[3][1]
        return callback, key

    def call_drop(self, key: int) -> None:
        """Forget a call that did not start (its ticket back to the queue)."""
        entry = self.calls.pop(key, None)
        if entry is not None and entry[3] is not None:
            _lib.dlock_queue_ticket_free(entry[3][1])

    def call_submit(self, key: int, start: Callable[[], int],
                    undo: Optional[Callable[[], None]] = None) -> None:
        """Start call `key`: start() submits it in C and returns its status.
        A call that does not start (an exception, or a status other than 0)
        is dropped and undo() run; then the exception, or the status's
        error, is raised."""
        try:
            rc = start()
        except BaseException:
            self.call_drop(key)
            if undo is not None:
                undo()
            raise
        if rc:
            self.call_drop(key)
            if undo is not None:
                undo()
            fail(rc)

    def divert(self, key: int, abandoned: bool = False) -> None:
        """On the loop's thread, for a call nobody awaits any more (its task
        was cancelled) whose outcome has not been settled: settle it here if
        it came already, else have the library thread that ends it hand it
        to the service thread, so its hook undoes it even if this loop is
        closed by then (asyncio.run cancels the tasks left, then closes the
        loop). `abandoned`: the loop is closing with the task still
        waiting, so the outcome is settled as one nobody awaits, whatever
        its future says."""
        entry = self.calls.get(key)
        if entry is None or entry[3] is None:
            return
        lq, ticket = entry[3]
        c = _native.Completion()
        if _lib.dlock_queue_divert(lq.ptr, ticket, ctypes.byref(c), _on_diverted, None):
            self.calls.pop(key, None)
            call_settle(None if abandoned else entry[1], *_outcome(c), entry[2])

    async def await_call(self, key: int, fut: "asyncio.Future[int]") -> int:
        """Await call `key`'s future; a cancelled wait diverts the call."""
        try:
            return await fut
        except asyncio.CancelledError:
            self.divert(key)
            raise

    def call_end(self, key: Optional[int], status: int, token: int) -> None:
        """On a library thread: hand the outcome over."""
        _pin_thread_state()
        entry = self.calls.pop(key, None) if key is not None else None
        if entry is None:
            return
        loop, fut, hook, _queued = entry
        message = _native.last_error() if status else ""
        if loop is None:
            _service.put(call_settle, fut, status, token, message, hook)
            return
        with self.inbox_mu:
            pending = self.inbox.setdefault(loop, [])
            pending.append((fut, status, token, message, hook))
            # A drain is scheduled already, unless the loop closed before
            # it ran: then this call finds the loop closed and hands them
            # all on.
            if len(pending) > 1 and not loop.is_closed():
                return
        try:
            loop.call_soon_threadsafe(self.drain_inbox, loop)
        except RuntimeError:  # the loop is closed: nobody awaits these
            with self.inbox_mu:
                orphans = self.inbox.pop(loop, [])
            for _fut, st, tok, msg, hk in orphans:
                _service.put(call_settle, None, st, tok, msg, hk)

    def drain_inbox(self, loop: asyncio.AbstractEventLoop) -> None:
        """On the loop's thread: settle every outcome that came for it."""
        with self.inbox_mu:
            outcomes = self.inbox.pop(loop, [])
        for outcome in outcomes:
            call_settle(*outcome)

    # -- a task's own handles ----------------------------------------------

    def task_handle(self, shared: _Handle, task: "asyncio.Task[Any]", enter: bool) -> Optional[_TaskHandle]:
        """The task's handle for `shared`'s name: one more use of it with
        `enter` (made on first use), else the one there is (or None)."""
        with self.task_mu:
            th = self.task_handles.get(task, {}).get(shared.key)
            if th is not None and enter:
                th.uses += 1
            if th is not None or not enter:
                return th
            if shared.idle:
                th = _TaskHandle(shared.idle.pop(), shared)
                self.task_handles.setdefault(task, {})[shared.key] = th
                return th
        th = _TaskHandle(new_handle(shared), shared)
        with self.task_mu:
            self.task_handles.setdefault(task, {})[shared.key] = th
        return th

    def spare_handle(self, shared: _Handle) -> _Handle:
        """An idle C handle of `shared`'s name for one asynchronous call that
        holds nothing afterwards (a latch's await); give it back with
        spare_done() from its callback."""
        with self.task_mu:
            if shared.idle:
                return shared.idle.pop()
        return new_handle(shared)

    def spare_done(self, shared: _Handle, h: _Handle) -> None:
        with self.task_mu:
            shared.idle.append(h)

    def task_handle_done(self, task: "asyncio.Task[Any]", shared_key: int, th: _TaskHandle) -> None:
        """One use fewer; after the last the C handle goes back to its name's
        idle list for the next task (no call is in flight on it then: every
        use ends after its call's callback, and nothing is held on it)."""
        with self.task_mu:
            th.uses -= 1
            if th.uses > 0:
                return
            per = self.task_handles.get(task)
            if per is not None and per.get(shared_key) is th:
                del per[shared_key]
            if not th.handle.stacks:
                th.shared.idle.append(th.handle)
                return
        _reap(th.handle.state, th.handle.key)

    async def acquire_on(self, task: "asyncio.Task[Any]", shared_key: int, th: _TaskHandle,
                         submit: Callable[[int], int], give_back: Callable[[int], None]) -> int:
        """One asynchronous acquisition on the task's handle `th`:
        submit(key) starts it in C (its status); give_back(status) undoes an
        outcome that nobody awaits any more (the task was cancelled) and
        ends the use of `th`. Returns the token; a failure ends the use of
        `th` and raises."""
        def hook(status: int, _token: int, awaited: bool) -> None:
            if not awaited:
                give_back(status)

        key, fut = self.call_start(task.get_loop(), hook)
        assert fut is not None
        self.call_submit(key, lambda: submit(key), lambda: self.task_handle_done(task, shared_key, th))
        try:
            return await fut
        except asyncio.CancelledError:
            self.divert(key)
            # Cancelled after the outcome arrived: the hook saw it awaited.
            if fut.done() and not fut.cancelled() and fut.exception() is None:
                give_back(0)
            raise
        except BaseException:
            self.task_handle_done(task, shared_key, th)
            raise


bridge = Bridge()
_service.at_fork(bridge.after_fork_in_child)


def new_handle(shared: _Handle) -> _Handle:
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


# The calls take their loop from the task (Task.get_loop()), not from
# asyncio.get_running_loop(): CPython 3.11's asks the kernel for the
# process id on every call (a fork check). asyncio.current_task() still
# does, once per enter and once per exit.
def current_task() -> "asyncio.Task[Any]":
    t = asyncio.current_task()
    if t is None:
        raise RuntimeError("dlock: async with needs a running asyncio task")
    return t


# ---------------------------------------------------------------------------
# The Python callbacks, for loops without a completion queue and calls
# made with no loop. Called on a library thread; ctypes takes the GIL.

_call_end = bridge.call_end


@_native.QUEUE_FN
def _on_diverted(c: Any, _arg: Optional[int]) -> None:
    """On a library thread: the outcome of a diverted call (divert), for
    the service thread, whose settling finds nobody awaiting it."""
    _pin_thread_state()
    done = c.contents
    entry = bridge.calls.pop(done.key, None)
    if entry is None:
        return
    _service.put(call_settle, None, *_outcome(done), entry[2])


@_native.ACQUIRED_FN
def on_acquired(_lock: Optional[int], status: int, token: int, arg: Optional[int]) -> None:
    _call_end(arg, status, token)


@_native.MULTILOCK_FN
def on_multilock(status: int, arg: Optional[int]) -> None:
    _call_end(arg, status, 0)


@_native.RELEASED_FN
def on_released(_lock: Optional[int], status: int, arg: Optional[int]) -> None:
    _call_end(arg, status, 0)


@_native.RW_ACQUIRED_FN
def on_rw_acquired(_rw: Optional[int], _mode: int, status: int, token: int, arg: Optional[int]) -> None:
    _call_end(arg, status, token)


@_native.RW_RELEASED_FN
def on_rw_released(_rw: Optional[int], _mode: int, status: int, arg: Optional[int]) -> None:
    _call_end(arg, status, 0)


@_native.SEM_FN
def on_sem(_sem: Optional[int], status: int, arg: Optional[int]) -> None:
    _call_end(arg, status, 0)


@_native.LATCH_FN
def on_latch(_latch: Optional[int], status: int, arg: Optional[int]) -> None:
    _call_end(arg, status, 0)


@_native.COUNTED_FN
def on_counted(_latch: Optional[int], status: int, remaining: int, arg: Optional[int]) -> None:
    _call_end(arg, status, remaining)


@_native.IDS_FN
def on_ids(_client: Optional[int], status: int, first: int, _count: int, arg: Optional[int]) -> None:
    _call_end(arg, status, first)


@_native.RATE_FN
def on_rate(_rate: Optional[int], status: int, res: Any, arg: Optional[int]) -> None:
    # The token dlock_queue_on_rate() gives: the permits left after a
    # grant, the milliseconds until due after a timeout.
    token = 0
    if res:
        r = res.contents
        if status == 0:
            token = r.remaining
        elif status == _errors.ERR_TIMEOUT and r.retry_after_ms > 0:
            token = r.retry_after_ms
    _call_end(arg, status, token)
