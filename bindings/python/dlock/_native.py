"""Loading libdlock with ctypes and declaring the functions the package calls.

ctypes rather than cffi: it is in the standard library, so the package
builds and installs with nothing but setuptools, generates no code, and a
call through a CDLL releases the GIL for as long as the library runs (a
thread waiting for a lock does not stop the interpreter's other threads).
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
from typing import Any, Dict, List, Optional

# The ABI this module was written against: dlock.h of 0.2.x. A library of
# another major version may have other struct layouts.
ABI_MAJOR = 0

# Structures the library fills or reads get this much zeroed room after the
# fields declared here, so a later library that appends fields reads zeros
# (its defaults) or writes into the padding, never past the allocation.
_SPARE = 256

# Constants of dlock.h that the package uses, under their C names in
# DEFINES and ENUMS: tests/check_header.py compares each with the header.
WAIT_FOREVER = -1  # DLOCK_WAIT_FOREVER
LEASE_WATCHDOG = 0  # DLOCK_LEASE_WATCHDOG
LEASE_MAX_MS = 2147483647  # DLOCK_LEASE_MAX_MS
QUEUE_ERROR_MAX = 512  # DLOCK_QUEUE_ERROR_MAX
READ, WRITE = 0, 1  # dlock_rw_mode
RATE_INTERVAL_MAX_MS = 2147483647  # DLOCK_RATE_INTERVAL_MAX_MS
RATE_SPAN_MAX = 4000000000000  # DLOCK_RATE_SPAN_MAX
DEFINES = {
    "DLOCK_WAIT_FOREVER": WAIT_FOREVER,
    "DLOCK_LEASE_WATCHDOG": LEASE_WATCHDOG,
    "DLOCK_LEASE_MAX_MS": LEASE_MAX_MS,
    "DLOCK_QUEUE_ERROR_MAX": QUEUE_ERROR_MAX,
    "DLOCK_RATE_INTERVAL_MAX_MS": RATE_INTERVAL_MAX_MS,
    "DLOCK_RATE_SPAN_MAX": RATE_SPAN_MAX,
    "DLOCK_VERSION_MAJOR": ABI_MAJOR,  # dlock_version.h, which dlock.h includes
}
# Enums by their C type name (the status codes are _errors' ERR_*).
ENUMS = {"dlock_rw_mode": {"DLOCK_READ": READ, "DLOCK_WRITE": WRITE}}

c_long = ctypes.c_long
c_int = ctypes.c_int
c_char_p = ctypes.c_char_p
c_void_p = ctypes.c_void_p
c_uint64 = ctypes.c_uint64


class Options(ctypes.Structure):
    """struct dlock_options; zero in a field means the library's default."""

    _fields_ = [
        ("connect_timeout_ms", c_int),
        ("command_timeout_ms", c_int),
        ("watchdog_lease_ms", c_long),
        ("fair_waiter_timeout_ms", c_long),
        ("offline_ok", c_int),
        ("replica_acks", c_int),
        ("replica_timeout_ms", c_int),
        ("safety_margin_pct", c_int),
        ("username", c_char_p),
        ("password", c_char_p),
        ("busy_poll_us", c_int),
        ("_spare", ctypes.c_char * _SPARE),
    ]


class LockInfo(ctypes.Structure):
    """struct dlock_lock_info."""

    _fields_ = [
        ("held", c_int),
        ("holder", ctypes.c_char * 96),
        ("hold_count", c_long),
        ("ttl_ms", c_long),
        ("last_token", c_uint64),
        ("_spare", ctypes.c_char * _SPARE),
    ]


class RWLockInfo(ctypes.Structure):
    """struct dlock_rwlock_info."""

    _fields_ = [
        ("held", c_int),
        ("writer", ctypes.c_char * 96),
        ("write_count", c_long),
        ("readers", c_long),
        ("ttl_ms", c_long),
        ("last_token", c_uint64),
        ("_spare", ctypes.c_char * _SPARE),
    ]


class RateOptions(ctypes.Structure):
    """struct dlock_rate_options; zero in a field means the library's default."""

    _fields_ = [
        ("rate", c_long),
        ("interval_ms", c_long),
        ("burst", c_long),
        ("change", c_int),
        ("_spare", ctypes.c_char * _SPARE),
    ]


class RateResult(ctypes.Structure):
    """struct dlock_rate_result."""

    _fields_ = [
        ("allowed", c_int),
        ("remaining", c_long),
        ("retry_after_ms", c_long),
        ("reset_ms", c_long),
        ("rate", c_long),
        ("interval_ms", c_long),
        ("burst", c_long),
        ("_spare", ctypes.c_char * _SPARE),
    ]


# void (*)(dlock_lock *, uint64_t token, void *arg)
LOST_FN = ctypes.CFUNCTYPE(None, c_void_p, c_uint64, c_void_p)
# void (*)(dlock_rwlock *, dlock_rw_mode, uint64_t token, void *arg)
RW_LOST_FN = ctypes.CFUNCTYPE(None, c_void_p, c_int, c_uint64, c_void_p)

# The asynchronous API's completions (dlock.h): lock, read-write, semaphore.
ACQUIRED_FN = ctypes.CFUNCTYPE(None, c_void_p, c_int, c_uint64, c_void_p)
RELEASED_FN = ctypes.CFUNCTYPE(None, c_void_p, c_int, c_void_p)
RW_ACQUIRED_FN = ctypes.CFUNCTYPE(None, c_void_p, c_int, c_int, c_uint64, c_void_p)
RW_RELEASED_FN = ctypes.CFUNCTYPE(None, c_void_p, c_int, c_int, c_void_p)
SEM_FN = ctypes.CFUNCTYPE(None, c_void_p, c_int, c_void_p)
LATCH_FN = ctypes.CFUNCTYPE(None, c_void_p, c_int, c_void_p)
MULTILOCK_FN = ctypes.CFUNCTYPE(None, c_int, c_void_p)
# void (*)(dlock_latch *, dlock_status, long remaining, void *arg)
COUNTED_FN = ctypes.CFUNCTYPE(None, c_void_p, c_int, c_long, c_void_p)
# void (*)(dlock_client *, dlock_status, uint64_t first, size_t count, void *arg)
IDS_FN = ctypes.CFUNCTYPE(None, c_void_p, c_int, c_uint64, ctypes.c_size_t, c_void_p)
# void (*)(dlock_permit *, void *arg) and void (*)(dlock_redlock *, void *arg)
PERMIT_LOST_FN = ctypes.CFUNCTYPE(None, c_void_p, c_void_p)
# void (*)(dlock_psem *, dlock_status, dlock_permit *, void *arg)
PERMIT_FN = ctypes.CFUNCTYPE(None, c_void_p, c_int, c_void_p, c_void_p)
REDLOCK_LOST_FN = ctypes.CFUNCTYPE(None, c_void_p, c_void_p)
# void (*)(dlock_rate *, dlock_status, const dlock_rate_result *, void *arg)
RATE_FN = ctypes.CFUNCTYPE(None, c_void_p, c_int, ctypes.POINTER(RateResult), c_void_p)



class Completion(ctypes.Structure):
    """struct dlock_completion: one outcome taken from a dlock_queue."""

    _fields_ = [
        ("key", c_uint64),
        ("status", c_int),
        ("token", c_uint64),
        ("error", ctypes.c_char * QUEUE_ERROR_MAX),
    ]


# The structs above by their C names, with the fields each mirrors (all
# but the spare room). The library's struct must have exactly these
# fields, in this order, at these offsets (tests/check_header.py).
STRUCTS = {
    "dlock_options": Options,
    "dlock_lock_info": LockInfo,
    "dlock_rwlock_info": RWLockInfo,
    "dlock_completion": Completion,
    "dlock_rate_options": RateOptions,
    "dlock_rate_result": RateResult,
}


_P = ctypes.POINTER
# void (*)(const dlock_completion *, void *arg)
QUEUE_FN = ctypes.CFUNCTYPE(None, _P(Completion), c_void_p)
# name: (result type, argument types)
_PROTOTYPES = {
    "dlock_strerror": (c_char_p, [c_int]),
    "dlock_last_error": (c_char_p, []),
    "dlock_version": (c_char_p, []),
    "dlock_check_name": (c_int, [c_char_p]),
    "dlock_check_id_prefix": (c_int, [c_char_p]),
    "dlock_client_new": (c_int, [c_char_p, _P(Options), _P(c_void_p)]),
    "dlock_client_free": (None, [c_void_p]),
    "dlock_client_id": (c_char_p, [c_void_p]),
    "dlock_client_drain": (None, [c_void_p]),
    "dlock_lock_new": (c_int, [c_void_p, c_char_p, _P(c_void_p)]),
    "dlock_lock_new_fair": (c_int, [c_void_p, c_char_p, _P(c_void_p)]),
    "dlock_lock_free": (None, [c_void_p]),
    "dlock_lock_acquire": (c_int, [c_void_p, c_long, c_long, _P(c_uint64)]),
    "dlock_lock_release": (c_int, [c_void_p]),
    "dlock_lock_set_fence_floor": (None, [c_void_p, c_uint64]),
    "dlock_lock_lost": (c_int, [c_void_p]),
    "dlock_lock_on_lost": (None, [c_void_p, LOST_FN, c_void_p]),
    "dlock_lock_acquire_async": (c_int, [c_void_p, c_long, c_long, ACQUIRED_FN, c_void_p]),
    "dlock_lock_release_async": (c_int, [c_void_p, RELEASED_FN, c_void_p]),
    "dlock_lock_inspect": (c_int, [c_void_p, c_char_p, _P(LockInfo)]),
    "dlock_lock_force_unlock": (c_int, [c_void_p, c_char_p, _P(c_int)]),
    "dlock_id_next": (c_int, [c_void_p, c_char_p, _P(c_uint64), ctypes.c_size_t]),
    "dlock_id_next_async": (c_int, [c_void_p, c_char_p, ctypes.c_size_t, IDS_FN, c_void_p]),
    "dlock_semaphore_new": (c_int, [c_void_p, c_char_p, _P(c_void_p)]),
    "dlock_semaphore_free": (None, [c_void_p]),
    "dlock_semaphore_set_permits": (c_int, [c_void_p, c_long, _P(c_int)]),
    "dlock_semaphore_resize": (c_int, [c_void_p, c_long]),
    "dlock_semaphore_add_permits": (c_int, [c_void_p, c_long]),
    "dlock_semaphore_acquire": (c_int, [c_void_p, c_long, c_long]),
    "dlock_semaphore_release": (c_int, [c_void_p, c_long]),
    "dlock_semaphore_available": (c_int, [c_void_p, _P(c_long)]),
    "dlock_semaphore_acquire_async": (c_int, [c_void_p, c_long, c_long, SEM_FN, c_void_p]),
    "dlock_semaphore_release_async": (c_int, [c_void_p, c_long, SEM_FN, c_void_p]),
    "dlock_latch_await_async": (c_int, [c_void_p, c_long, LATCH_FN, c_void_p]),
    "dlock_latch_count_down_async": (c_int, [c_void_p, COUNTED_FN, c_void_p]),
    "dlock_latch_new": (c_int, [c_void_p, c_char_p, _P(c_void_p)]),
    "dlock_latch_free": (None, [c_void_p]),
    "dlock_latch_set": (c_int, [c_void_p, c_long, _P(c_int)]),
    "dlock_latch_count_down": (c_int, [c_void_p, _P(c_long)]),
    "dlock_latch_await": (c_int, [c_void_p, c_long]),
    "dlock_latch_count": (c_int, [c_void_p, _P(c_long)]),
    "dlock_rwlock_new": (c_int, [c_void_p, c_char_p, _P(c_void_p)]),
    "dlock_rwlock_free": (None, [c_void_p]),
    "dlock_rwlock_acquire": (c_int, [c_void_p, c_int, c_long, c_long, _P(c_uint64)]),
    "dlock_rwlock_release": (c_int, [c_void_p, c_int]),
    "dlock_rwlock_set_fence_floor": (None, [c_void_p, c_uint64]),
    "dlock_rwlock_lost": (c_int, [c_void_p, c_int]),
    "dlock_rwlock_on_lost": (None, [c_void_p, RW_LOST_FN, c_void_p]),
    "dlock_rwlock_acquire_async": (c_int, [c_void_p, c_int, c_long, c_long, RW_ACQUIRED_FN, c_void_p]),
    "dlock_rwlock_release_async": (c_int, [c_void_p, c_int, RW_RELEASED_FN, c_void_p]),
    "dlock_rwlock_inspect": (c_int, [c_void_p, c_char_p, _P(RWLockInfo)]),
    "dlock_rwlock_force_unlock": (c_int, [c_void_p, c_char_p, _P(c_int)]),
    "dlock_psem_new": (c_int, [c_void_p, c_char_p, _P(c_void_p)]),
    "dlock_psem_free": (None, [c_void_p]),
    "dlock_psem_set_permits": (c_int, [c_void_p, c_long, _P(c_int)]),
    "dlock_psem_resize": (c_int, [c_void_p, c_long]),
    "dlock_psem_add_permits": (c_int, [c_void_p, c_long]),
    "dlock_psem_acquire": (c_int, [c_void_p, c_long, c_long, _P(c_void_p)]),
    "dlock_permit_id": (c_char_p, [c_void_p]),
    "dlock_permit_lost": (c_int, [c_void_p]),
    "dlock_permit_free": (None, [c_void_p]),
    "dlock_psem_on_lost": (None, [c_void_p, PERMIT_LOST_FN, c_void_p]),
    "dlock_psem_release": (c_int, [c_void_p, c_void_p]),
    "dlock_psem_release_id": (c_int, [c_void_p, c_char_p]),
    "dlock_psem_renew": (c_int, [c_void_p, c_char_p, c_long]),
    "dlock_psem_available": (c_int, [c_void_p, _P(c_long)]),
    "dlock_psem_acquire_async": (c_int, [c_void_p, c_long, c_long, PERMIT_FN, c_void_p]),
    "dlock_psem_release_async": (c_int, [c_void_p, c_void_p, PERMIT_FN, c_void_p]),
    "dlock_multilock_acquire": (c_int, [_P(c_void_p), ctypes.c_size_t, c_long, c_long, _P(c_uint64)]),
    "dlock_multilock_acquire_async": (c_int, [_P(c_void_p), ctypes.c_size_t, c_long, c_long, _P(c_uint64),
                                              MULTILOCK_FN, c_void_p]),
    "dlock_redlock_new": (c_int, [_P(c_void_p), ctypes.c_size_t, c_char_p, _P(c_void_p)]),
    "dlock_redlock_free": (None, [c_void_p]),
    "dlock_redlock_acquire": (c_int, [c_void_p, c_long, c_long, _P(c_long), _P(c_uint64)]),
    "dlock_redlock_extend": (c_int, [c_void_p, c_long, _P(c_long)]),
    "dlock_redlock_release": (c_int, [c_void_p]),
    "dlock_redlock_set_fence_floor": (None, [c_void_p, c_uint64]),
    "dlock_redlock_lost": (c_int, [c_void_p]),
    "dlock_redlock_on_lost": (None, [c_void_p, REDLOCK_LOST_FN, c_void_p]),
    # A RedLock's callbacks have the lock's shapes (a handle, the status,
    # a token): the same function pointer types serve.
    "dlock_redlock_acquire_async": (c_int, [c_void_p, c_long, c_long, ACQUIRED_FN, c_void_p]),
    "dlock_redlock_release_async": (c_int, [c_void_p, RELEASED_FN, c_void_p]),
    "dlock_redlock_validity": (c_long, [c_void_p]),
    "dlock_rate_new": (c_int, [c_void_p, c_char_p, _P(RateOptions), _P(c_void_p)]),
    "dlock_rate_free": (None, [c_void_p]),
    "dlock_rate_set": (c_int, [c_void_p, _P(RateOptions), _P(c_int)]),
    "dlock_rate_acquire": (c_int, [c_void_p, c_char_p, c_long, c_long, _P(RateResult)]),
    "dlock_rate_try": (c_int, [c_void_p, c_char_p, c_long, _P(RateResult)]),
    "dlock_rate_status": (c_int, [c_void_p, c_char_p, c_long, _P(RateResult)]),
    "dlock_rate_acquire_async": (c_int, [c_void_p, c_char_p, c_long, c_long, RATE_FN, c_void_p]),
    "dlock_queue_new": (c_int, [_P(c_void_p)]),
    "dlock_queue_fd": (c_int, [c_void_p]),
    "dlock_queue_free": (None, [c_void_p]),
    "dlock_queue_ticket": (c_void_p, [c_void_p, c_uint64]),
    "dlock_queue_ticket_free": (None, [c_void_p]),
    "dlock_queue_take": (ctypes.c_size_t, [c_void_p, _P(Completion), ctypes.c_size_t]),
    "dlock_queue_divert": (c_int, [c_void_p, c_void_p, _P(Completion), QUEUE_FN, c_void_p]),
}

# The library's own callbacks that post to a completion queue (dlock.h,
# dlock_queue_on_*), as function pointers of each kind's type: passed
# with a ticket, a completion reaches its loop without running Python on
# the library's thread.
_QUEUE_CALLBACKS = {
    "acquired": ("dlock_queue_on_acquired", ACQUIRED_FN),
    "released": ("dlock_queue_on_released", RELEASED_FN),
    "rw_acquired": ("dlock_queue_on_rw_acquired", RW_ACQUIRED_FN),
    "rw_released": ("dlock_queue_on_rw_released", RW_RELEASED_FN),
    "semaphore": ("dlock_queue_on_semaphore", SEM_FN),
    "permit": ("dlock_queue_on_permit", PERMIT_FN),
    "latch": ("dlock_queue_on_latch", LATCH_FN),
    "counted": ("dlock_queue_on_counted", COUNTED_FN),
    "ids": ("dlock_queue_on_ids", IDS_FN),
    "multilock": ("dlock_queue_on_multilock", MULTILOCK_FN),
    "redlock_acquired": ("dlock_queue_on_redlock_acquired", ACQUIRED_FN),
    "redlock_released": ("dlock_queue_on_redlock_released", RELEASED_FN),
    "rate": ("dlock_queue_on_rate", RATE_FN),
}


def candidates() -> List[str]:
    """Where the library is looked for, in order: $DLOCK_LIBRARY (a file,
    or a directory holding libdlock.so.0), then the dynamic loader's own
    search (LD_LIBRARY_PATH, ld.so.cache, the system directories) under the
    soname, then whatever ctypes.util.find_library finds."""
    out = []
    env = os.environ.get("DLOCK_LIBRARY")
    if env:
        if os.path.isdir(env):
            out += [os.path.join(env, "libdlock.so.0"), os.path.join(env, "libdlock.so")]
        else:
            out.append(env)
        # An explicit choice is not second-guessed by a system copy.
        return out
    out += ["libdlock.so.%d" % ABI_MAJOR, "libdlock.so"]
    found = ctypes.util.find_library("dlock")
    if found:
        out.append(found)
    return out


def load() -> ctypes.CDLL:
    """The library with its prototypes set; ImportError saying where it
    looked when it cannot be loaded or is of another ABI."""
    tried = []
    lib: Optional[ctypes.CDLL] = None
    for name in candidates():
        try:
            lib = ctypes.CDLL(name)
            break
        except OSError as e:
            tried.append("%s (%s)" % (name, e))
    if lib is None:
        raise ImportError(
            "dlock: cannot load libdlock: tried " + "; ".join(tried)
            + ". Install the C library (cmake --install; then ldconfig) or set "
            "DLOCK_LIBRARY to the path of libdlock.so"
        )
    try:
        for fn, (restype, argtypes) in _PROTOTYPES.items():
            f = getattr(lib, fn)
            f.restype = restype
            f.argtypes = argtypes
    except AttributeError as e:
        raise ImportError("dlock: %s is not libdlock or too old: %s" % (lib._name, e)) from None
    version = lib.dlock_version().decode()
    if int(version.split(".")[0]) != ABI_MAJOR:
        raise ImportError("dlock: %s is libdlock %s; this package needs %d.x"
                          % (lib._name, version, ABI_MAJOR))
    return lib


lib = load()
queue_callbacks: Dict[str, Any] = {
    kind: fntype(ctypes.cast(getattr(lib, sym), c_void_p).value)
    for kind, (sym, fntype) in _QUEUE_CALLBACKS.items()
}
# The path the loader actually used (for error messages and dlock.library_path).
path: str = lib._name


def strerror(status: int) -> str:
    return lib.dlock_strerror(status).decode()


def last_error() -> str:
    """This thread's last failure, as the library explained it."""
    return lib.dlock_last_error().decode(errors="replace")
