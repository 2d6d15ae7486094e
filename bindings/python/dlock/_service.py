"""The package's own thread, and what fork() changes in a process.

One service thread per process runs what must not run where the library
calls back into Python: the users' loss callbacks (never on the library's
watchdog thread, where a slow callback would delay every renewal of the
client), the freeing of handles dropped by the garbage collector (never
inside the collector, which may run on the watchdog thread itself, in a
ctypes callback, where freeing a lock would wait for that thread), and the
outcomes of asynchronous calls that no event loop awaits.

A child made by fork() has none of its parent's threads, and a lock of
the parent may have been taken at the moment of fork(): the child gets a
service thread of its own on first use, this module's caches of the
process id and of the main thread are renewed, and every other module's
after_fork_in_child() hook (at_fork()) runs.
"""
from __future__ import annotations

import logging
import os
import queue
import threading
from typing import Any, Callable, List, Optional, Tuple

log = logging.getLogger("dlock")


class _Service:
    """The service thread, started on first use, and its queue of calls."""

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
                log.exception("dlock: exception in %r", fn)


_current = _Service()


def put(fn: Callable[..., Any], *args: Any) -> None:
    """Run fn(*args) on this process's service thread."""
    _current.put(fn, *args)


# This process's pid, kept by the fork hook below rather than asked of
# the kernel on every call (os.getpid() is a system call: two per
# lock+release pair, a third of the pair's calls). Python runs the hook in
# every child it forks, also for multiprocessing and C code that forks
# through PyOS_AfterFork_Child. Read it as _service.pid (the hook rebinds
# it), never import the name.
pid = os.getpid()
# The thread that gets signals (Ctrl-C), for the same reason; threading's
# own fork hook, registered before this one, has already named the forking
# thread main when this one runs.
main_ident = threading.main_thread().ident

_hooks: List[Callable[[], None]] = []


def at_fork(fn: Callable[[], None]) -> None:
    """Have fn() run in every child made by fork(), after this module's
    own state was renewed."""
    _hooks.append(fn)


def _after_fork_in_child() -> None:
    # The parent's service thread does not exist in the child, and its
    # queue's lock may have been taken at the moment of fork().
    global _current, pid, main_ident
    _current = _Service()
    pid = os.getpid()
    main_ident = threading.main_thread().ident
    for fn in _hooks:
        fn()


os.register_at_fork(after_in_child=_after_fork_in_child)
