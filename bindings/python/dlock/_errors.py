"""Exceptions: one class per dlock_status, each also deriving from the
built-in exception a Python caller would catch for that kind of failure."""
from __future__ import annotations

import builtins
from typing import Dict, NoReturn, Optional, Type

from . import _native

# dlock_status values (include/dlock.h).
OK = 0
ERR_INVALID = -1
ERR_URL = -2
ERR_CONNECT = -3
ERR_AUTH = -4
ERR_TIMEOUT = -5
ERR_NOT_OWNER = -6
ERR_LOST = -7
ERR_REDIS = -8
ERR_NOMEM = -9
ERR_OVERFLOW = -10
ERR_SYS = -11
ERR_DEADLOCK = -12
ERR_REPLICA = -13
ERR_WRONG_KIND = -14


class DlockError(Exception):
    """A libdlock call failed. ``status`` is the dlock_status code, ``reason``
    its name (dlock_strerror) and the message dlock_last_error()'s text."""

    status: int = 0
    reason: str = ""

    def __init__(self, message: str, status: "int | None" = None) -> None:
        super().__init__(message)
        if status is not None:
            self.status = status
            self.reason = _native.strerror(status)


class InvalidArgument(DlockError, ValueError):
    """DLOCK_ERR_INVALID: a bad name, prefix, count, wait or lease."""

    status = ERR_INVALID


class InvalidURL(DlockError, ValueError):
    """DLOCK_ERR_URL: the connection URL could not be parsed."""

    status = ERR_URL


class ConnectionError(DlockError, builtins.ConnectionError):  # noqa: A001 (the issue's name)
    """DLOCK_ERR_CONNECT: Redis unreachable, the connection lost, or a
    command timed out."""

    status = ERR_CONNECT


class AuthenticationError(DlockError, PermissionError):
    """DLOCK_ERR_AUTH: AUTH or SELECT refused, or the ACL user lacks a
    permission."""

    status = ERR_AUTH


class NotAcquired(DlockError, TimeoutError):
    """DLOCK_ERR_TIMEOUT: not acquired within the wait."""

    status = ERR_TIMEOUT


class NotOwner(DlockError, RuntimeError):
    """DLOCK_ERR_NOT_OWNER: released by a thread that does not hold it."""

    status = ERR_NOT_OWNER


class LockLost(DlockError):
    """DLOCK_ERR_LOST: the hold's lease ended while it was held; another
    owner may have had the lock since."""

    status = ERR_LOST


class RedisError(DlockError):
    """DLOCK_ERR_REDIS: the server answered with an error."""

    status = ERR_REDIS


class OutOfMemory(DlockError, MemoryError):
    """DLOCK_ERR_NOMEM."""

    status = ERR_NOMEM


class IdOverflow(DlockError, OverflowError):
    """DLOCK_ERR_OVERFLOW: the day's ID sequence would pass 32 bits."""

    status = ERR_OVERFLOW


class SystemFailure(DlockError, OSError):
    """DLOCK_ERR_SYS: an operating-system call failed in the library."""

    status = ERR_SYS


class Deadlock(DlockError, RuntimeError):
    """DLOCK_ERR_DEADLOCK: a read hold asked for the write hold."""

    status = ERR_DEADLOCK


class NotReplicated(DlockError):
    """DLOCK_ERR_REPLICA: too few replicas acknowledged the acquisition
    (replica_acks); it was undone."""

    status = ERR_REPLICA


class WrongKind(DlockError, RuntimeError):
    """DLOCK_ERR_WRONG_KIND: the name is in use as another kind (a plain
    lock asked for while the name is held as a read-write lock, a semaphore
    on a lock's name, ...); the message names the kind that holds it."""

    status = ERR_WRONG_KIND


class ClientClosed(DlockError):
    """The Client (or the object made from it) was used after close()."""


class ForkedClient(DlockError):
    """A Client was used in a child process made by fork(). The library's
    background threads and connections do not survive fork(): make a new
    Client in the child."""


_BY_STATUS: Dict[int, Type[DlockError]] = {
    cls.status: cls
    for cls in (InvalidArgument, InvalidURL, ConnectionError, AuthenticationError, NotAcquired,
                NotOwner, LockLost, RedisError, OutOfMemory, IdOverflow, SystemFailure, Deadlock,
                NotReplicated, WrongKind)
}


def from_status(status: int, message: Optional[str] = None) -> DlockError:
    """The exception for a failed call, made in the thread that called, so
    it carries that call's dlock_last_error() (or `message`, read by the
    thread of an asynchronous call's callback)."""
    cls = _BY_STATUS.get(status, DlockError)
    return cls(_native.last_error() if message is None else message, status)


def fail(status: int) -> NoReturn:
    raise from_status(status)


def check(status: int) -> None:
    """Raise the status's exception unless it is DLOCK_OK."""
    if status:
        fail(status)
