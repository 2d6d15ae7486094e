"""What Python callers pass: a wrong type is a TypeError and a bad value
an InvalidArgument (a ValueError), raised before any call into the
library, with messages in seconds.

"Before any call into the library" is checked on a closed Client: any call
into the library would raise ClientClosed, so a TypeError or ValueError
from it came first. Client options are checked against a URL nobody
listens on: a check that let them through would fail with
ConnectionError instead.
"""
from __future__ import annotations

import asyncio
import datetime
import fractions
import math
import re
from typing import Any, Callable, Iterator, List, Tuple

import pytest

import dlock

NOWHERE = "unix:///nonexistent/dlock-py-args.sock"

NOT_SECONDS = ["5", b"5", True, False, [1], object(), 1j]
BAD_WAITS = [-1, -0.001, math.nan, -math.inf]
GOOD_WAITS = [0, 0.0, 0.25, fractions.Fraction(1, 4), datetime.timedelta(milliseconds=250)]
BAD_LEASES = [0, 0.0, -1, 0.001, math.nan, math.inf, 1e7, 30 * 86400.0, datetime.timedelta(days=30)]
NOT_INTS = ["3", b"3", 2.0, 2.5, True, [2]]


@pytest.fixture
def closed(redis: Any) -> Iterator[Tuple[dlock.Client, Any]]:
    """A closed client and objects made from it while it was open."""
    c = dlock.Client(redis.url)
    objs = {
        "lock": c.lock("py:args:lock"),
        "fair": c.fair_lock("py:args:fair"),
        "rw": c.rw_lock("py:args:rw"),
        "sem": c.semaphore("py:args:sem"),
        "psem": c.expirable_semaphore("py:args:psem"),
        "latch": c.latch("py:args:latch"),
        "redlock": dlock.RedLock([c], "py:args:redlock"),
    }
    objs["multi"] = dlock.MultiLock([objs["lock"]])
    c.close()
    yield c, objs


def keyword_calls(c: dlock.Client, o: Any, kw: str) -> List[Tuple[str, Callable[[Any], Any]]]:
    """The places that take both a wait and a lease, called with `kw`."""
    makers: List[Tuple[str, Callable[..., Any]]] = [
        ("Lock.acquire", o["lock"].acquire), ("fair Lock.acquire", o["fair"].acquire),
        ("Client.lock", lambda **k: c.lock("x", **k)), ("Client.fair_lock", lambda **k: c.fair_lock("x", **k)),
        ("RWLock.read", o["rw"].read), ("RWLock.write().acquire", lambda **k: o["rw"].write().acquire(**k)),
        ("Client.expirable_semaphore", lambda **k: c.expirable_semaphore("x", **k)),
        ("ExpirableSemaphore.acquire", o["psem"].acquire),
        ("MultiLock", lambda **k: dlock.MultiLock([o["lock"]], **k)), ("MultiLock.acquire", o["multi"].acquire),
        ("RedLock.acquire", o["redlock"].acquire),
    ]
    return [("%s(%s=)" % (what, kw), (lambda f: lambda v: f(**{kw: v}))(f)) for what, f in makers]


def wait_calls(c: dlock.Client, o: Any) -> List[Tuple[str, Callable[[Any], Any]]]:
    """Every place that takes a wait (or a timeout) in seconds."""
    return keyword_calls(c, o, "wait") + [
        ("Client.semaphore(wait=)", lambda w: c.semaphore("x", wait=w)),
        ("Semaphore.acquire(wait=)", lambda w: o["sem"].acquire(wait=w)),
        ("Latch.wait(timeout)", lambda w: o["latch"].wait(w)),
    ]


def lease_calls(c: dlock.Client, o: Any) -> List[Tuple[str, Callable[[Any], Any]]]:
    """Every place that takes a lease in seconds."""
    return keyword_calls(c, o, "lease") + [
        ("ExpirableSemaphore.renew()", lambda s: o["psem"].renew("0" * 32, s)),
        ("RedLock(lease=)", lambda s: dlock.RedLock([c], "x", lease=s)),
        ("RedLock.extend()", lambda s: o["redlock"].extend(s)),
    ]


def count_calls(c: dlock.Client, o: Any) -> List[Tuple[str, Callable[[Any], Any]]]:
    """Every place that takes a count of permits (or a latch's count)."""
    return [
        ("Client.semaphore(permits=)", lambda n: c.semaphore("x", permits=n)),
        ("Semaphore.set_permits()", lambda n: o["sem"].set_permits(n)),
        ("Semaphore.acquire(permits)", lambda n: o["sem"].acquire(n)),
        ("Semaphore.release(permits)", lambda n: o["sem"].release(n)),
        ("Client.expirable_semaphore(permits=)", lambda n: c.expirable_semaphore("x", permits=n)),
        ("ExpirableSemaphore.set_permits()", lambda n: o["psem"].set_permits(n)),
        ("Latch.set()", lambda n: o["latch"].set(n)),
        ("Client.ids(n=)", lambda n: c.ids("p", n)),
    ]


def refused(calls: List[Tuple[str, Callable[[Any], Any]]], values: List[Any], error: Any,
            match: str) -> List[Tuple[str, BaseException]]:
    """Every call with every value raises `error` with a message matching
    `match`; returns (what was called, the exception) for each."""
    out = []
    for what, call in calls:
        for v in values:
            try:
                call(v)
            except error as e:
                assert re.search(match, str(e)), (what, v, str(e))
                out.append((what, e))
            except Exception as e:
                pytest.fail("%s with %r raised %r, not %s" % (what, v, e, error.__name__))
            else:
                pytest.fail("%s took %r" % (what, v))
    return out


def test_waits_of_the_wrong_type_are_type_errors(closed):
    refused(wait_calls(*closed), NOT_SECONDS, TypeError, "must be a number of seconds")


def test_bad_waits_are_value_errors(closed):
    for _what, e in refused(wait_calls(*closed), BAD_WAITS, dlock.InvalidArgument, ">= 0 seconds"):
        assert isinstance(e, ValueError)


def test_good_waits_reach_the_library(closed):
    """Ints, floats, fractions and timedeltas are seconds; on the closed
    client the call then gets as far as the library's guard."""
    calls = [(what, call) for what, call in wait_calls(*closed)
             # these only make an object: nothing to call yet
             if not what.startswith(("Client.", "RWLock.read", "MultiLock("))]
    refused(calls, GOOD_WAITS + [None, math.inf, 10 ** 400], dlock.ClientClosed, "closed")


def test_leases_of_the_wrong_type_are_type_errors(closed):
    refused(lease_calls(*closed), NOT_SECONDS, TypeError, "must be a number of seconds")


def test_bad_leases_are_value_errors_in_seconds(closed):
    for what, e in refused(lease_calls(*closed), BAD_LEASES, dlock.InvalidArgument, "2147483.647 seconds"):
        assert " ms" not in str(e), (what, str(e))


def test_lease_none_is_the_watchdog_except_where_a_lease_is_asked_for(closed):
    c, o = closed
    for what, call in [("renew", lambda: o["psem"].renew("0" * 32, None)),
                       ("extend", lambda: o["redlock"].extend(None))]:
        with pytest.raises(dlock.InvalidArgument, match="seconds") as e:
            call()
        assert "watchdog" not in str(e.value), what
    with pytest.raises(dlock.ClientClosed):
        o["lock"].acquire(lease=None)


def test_a_redlock_lease_is_at_least_10_ms(closed):
    c, o = closed
    with pytest.raises(dlock.InvalidArgument, match="0.01 to 2147483.647 seconds"):
        o["redlock"].acquire(lease=0.005)
    with pytest.raises(dlock.ClientClosed):
        o["lock"].acquire(lease=0.005)  # a lock's may be 3 ms


def test_counts_of_the_wrong_type_are_type_errors(closed):
    calls = count_calls(*closed)
    refused(calls, NOT_INTS, TypeError, "must be an int")
    # Client.semaphore(permits=None) and the like leave the count as it is.
    refused([(w, c) for w, c in calls if not w.startswith("Client.")], [None], TypeError, "must be an int")


def test_bad_counts_are_value_errors(closed):
    # 2**70 would have been cut to its low bits by ctypes.
    refused(count_calls(*closed), [0, -1, 2 ** 31, 2 ** 70], dlock.InvalidArgument, "must be 1 to")


def test_a_semaphore_of_no_permits_is_refused(client, name):
    with pytest.raises(dlock.InvalidArgument, match="0 permits could never be acquired"):
        client.semaphore(name, permits=0)
    with pytest.raises(dlock.InvalidArgument, match="0 permits"):
        client.expirable_semaphore(name + ":e", permits=0)
    # Nothing was made: the first real call sets it.
    assert client.semaphore(name).set_permits(2)
    assert client.semaphore(name).available == 2


def test_names_must_be_str_or_bytes(closed):
    c, o = closed
    for bad in (5, None, 1.5, ["a"], bytearray(b"a")):
        for call in (c.lock, c.fair_lock, c.rw_lock, c.semaphore, c.expirable_semaphore, c.latch,
                     c.inspect, c.inspect_rw, c.force_unlock, dlock.check_name,
                     lambda n: c.ids(n), lambda n: dlock.RedLock([c], n)):
            with pytest.raises(TypeError, match="must be str or bytes"):
                call(bad)


def test_callbacks_must_be_callable(closed):
    c, o = closed
    for bad in ("print", 5, True):
        for call in (lambda f: c.lock("x", on_lost=f), lambda f: c.fair_lock("x", on_lost=f),
                     lambda f: c.rw_lock("x", on_lost=f), lambda f: c.expirable_semaphore("x", on_lost=f),
                     lambda f: dlock.RedLock([c], "x", on_lost=f)):
            with pytest.raises(TypeError, match="on_lost must be callable"):
                call(bad)


def test_fence_floors_are_64_bit_unsigned(closed):
    c, o = closed
    for obj in (o["lock"], o["rw"], o["redlock"]):
        for bad in ("1", 1.0, True, None):
            with pytest.raises(TypeError, match="floor must be an int"):
                obj.set_fence_floor(bad)
        for bad in (-1, 2 ** 64):  # ctypes would wrap -1 to 2**64-1
            with pytest.raises(dlock.InvalidArgument, match="floor must be 0 to 18446744073709551615"):
                obj.set_fence_floor(bad)


@pytest.mark.parametrize("option,bad,error", [
    ("connect_timeout", "2", TypeError), ("connect_timeout", True, TypeError),
    ("connect_timeout", 0, dlock.InvalidArgument), ("connect_timeout", -1, dlock.InvalidArgument),
    ("connect_timeout", math.nan, dlock.InvalidArgument), ("connect_timeout", 3e6, dlock.InvalidArgument),
    ("command_timeout", "5", TypeError), ("command_timeout", 0, dlock.InvalidArgument),
    ("watchdog_lease", "30", TypeError), ("watchdog_lease", 0.01, dlock.InvalidArgument),
    ("watchdog_lease", 1e8, dlock.InvalidArgument), ("watchdog_lease", math.inf, dlock.InvalidArgument),
    ("fair_waiter_timeout", 0.001, dlock.InvalidArgument), ("fair_waiter_timeout", 2e6, dlock.InvalidArgument),
    ("replica_timeout", False, TypeError), ("replica_timeout", -0.1, dlock.InvalidArgument),
    ("replica_acks", "1", TypeError), ("replica_acks", True, TypeError), ("replica_acks", 1.0, TypeError),
    ("replica_acks", -1, dlock.InvalidArgument), ("replica_acks", 2 ** 40, dlock.InvalidArgument),
    ("safety_margin_pct", 0.5, TypeError), ("safety_margin_pct", "10", TypeError),
    ("safety_margin_pct", 0, dlock.InvalidArgument), ("safety_margin_pct", 51, dlock.InvalidArgument),
    ("offline_ok", "no", TypeError), ("offline_ok", 1, TypeError), ("offline_ok", None, TypeError),
    ("busy_poll", True, TypeError), ("busy_poll", "0", TypeError),
    ("username", 5, TypeError), ("password", 5, TypeError),
])
def test_client_options_are_checked_before_connecting(option, bad, error):
    with pytest.raises(error) as e:
        dlock.Client(NOWHERE, **{option: bad})
    assert option in str(e.value)
    if error is dlock.InvalidArgument and option not in ("replica_acks", "safety_margin_pct"):
        assert "seconds" in str(e.value) and " ms" not in str(e.value)


def test_client_options_of_the_right_kind_reach_the_library():
    # Each is valid: the client gets as far as connecting, and fails there.
    for kw in ({"connect_timeout": datetime.timedelta(seconds=0.2)}, {"offline_ok": False},
               {"watchdog_lease": 0.03}, {"safety_margin_pct": 50}, {"replica_acks": 0},
               {"fair_waiter_timeout": fractions.Fraction(1, 50)}):
        with pytest.raises(dlock.ConnectionError):
            dlock.Client(NOWHERE, **kw)


def test_async_calls_check_their_arguments_first(closed):
    c, o = closed

    async def main() -> None:
        with pytest.raises(TypeError, match="timeout must be a number of seconds"):
            await o["latch"].wait_async("1")
        with pytest.raises(dlock.InvalidArgument, match="timeout must be >= 0 seconds"):
            await o["latch"].wait_async(-1)
        with pytest.raises(TypeError, match="wait must be a number of seconds"):
            await o["psem"].acquire_async(wait="1")
        with pytest.raises(dlock.InvalidArgument, match="lease must be"):
            await o["psem"].acquire_async(lease=0)
        with pytest.raises(TypeError, match="n must be an int"):
            await c.ids_async("p", 1.0)
        with pytest.raises(TypeError, match="wait must be a number of seconds"):
            await o["redlock"].acquire_async(wait="1")

    asyncio.run(main())


def test_good_arguments_still_work(client, name):
    lock = client.lock(name, wait=datetime.timedelta(seconds=1), lease=fractions.Fraction(5, 1))
    with lock as hold:
        assert hold.token > 0
    with lock.acquire(wait=0, lease=datetime.timedelta(seconds=2)):
        pass
    sem = client.semaphore(name + ":s", permits=2, wait=0)
    sem.acquire(2)
    sem.release(2)
    lock.set_fence_floor(0)
    lock.set_fence_floor(2 ** 64 - 1)
