"""Loss of a hold is reported: hold.lost turns true and the on_lost
callback runs, whether the lock was broken on the server or the holder
could not renew it in time (the server paused with SIGSTOP past the
lease); the release then raises LockLost."""
from __future__ import annotations

import asyncio
import threading
import time

import pytest

import dlock


@pytest.fixture
def watched(redis):
    """A client whose 1 s watchdog lease is renewed every third of a
    second, so the renewal that finds a hold gone comes quickly, and an
    operator's client to break its locks."""
    c = dlock.Client(redis.url, watchdog_lease=1.0)
    admin = dlock.Client(redis.url)
    yield c, admin
    c.close()
    admin.close()


def _until(pred, timeout):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.02)
    return pred()


def test_force_unlock_is_reported(watched, name):
    c, admin = watched
    called = []
    ev = threading.Event()

    def on_lost(hold):
        called.append((hold, threading.current_thread().name))
        ev.set()

    lock = c.lock(name, on_lost=on_lost)
    hold = lock.acquire()
    assert not hold.lost and not lock.lost
    assert admin.force_unlock(name)
    assert ev.wait(5), "on_lost was not called"
    assert called[0][0] is hold
    # Not on the library's watchdog thread: on the package's own.
    assert called[0][1] == "dlock-service"
    assert hold.lost and lock.lost
    with pytest.raises(dlock.LockLost):
        hold.release()
    # A lost hold is gone: a new acquisition works and clears it.
    with lock as again:
        assert not again.lost and again.token > hold.token


def test_loss_seen_from_another_thread_and_raised_at_exit(watched, name):
    c, admin = watched
    holds, errors = [], []
    inside, go_on = threading.Event(), threading.Event()

    def holder():
        try:
            with c.lock(name) as hold:
                holds.append(hold)
                inside.set()
                go_on.wait(10)
                assert hold.lost  # the holder's own thread: the library's query
        except dlock.LockLost as e:  # the with block's release
            errors.append(e)

    t = threading.Thread(target=holder)
    t.start()
    assert inside.wait(10)
    admin.force_unlock(name)
    # From this thread, hold.lost is the callback's report.
    assert _until(lambda: holds[0].lost, 5)
    go_on.set()
    t.join(10)
    assert len(errors) == 1 and errors[0].status == -7


def test_server_paused_past_the_lease(own_redis, name):
    c = dlock.Client(own_redis.url, watchdog_lease=1.0, command_timeout=0.5)
    try:
        ev = threading.Event()
        lock = c.lock(name, on_lost=lambda hold: ev.set())
        hold = lock.acquire()
        own_redis.pause()
        try:
            t0 = time.monotonic()
            # The holder stops trusting its hold a margin before the 1 s
            # lease could end on the server, renewals or not.
            assert _until(lambda: hold.lost, 3), "hold.lost never turned true"
            assert time.monotonic() - t0 < 1.0
            assert ev.wait(3), "on_lost was not called while the server was paused"
        finally:
            own_redis.resume()
        with pytest.raises(dlock.LockLost):
            hold.release()
    finally:
        c.close()


def test_rw_write_hold_loss(watched, name):
    c, admin = watched
    got = []
    ev = threading.Event()
    rw = c.rw_lock(name, on_lost=lambda h: (got.append(h), ev.set()))
    hold = rw.write().acquire()
    admin.force_unlock(name)
    assert ev.wait(5)
    assert got == [hold] and hold.mode == "write" and hold.lost
    with pytest.raises(dlock.LockLost):
        hold.release()


def test_a_block_that_raises_keeps_its_exception_when_its_release_fails(watched, name, caplog):
    # The release of a lost hold fails; a block that is raising already
    # goes on with its own exception and the release's is logged, in both
    # faces; a block that is not raising gets the release's LockLost.
    c, admin = watched
    lock = c.lock(name)

    class Boom(Exception):
        pass

    with pytest.raises(Boom):
        with lock:
            admin.force_unlock(name)
            raise Boom()
    assert "release of" in caplog.text and "failed while an exception was raised" in caplog.text
    caplog.clear()

    async def main():
        with pytest.raises(Boom):
            async with lock:
                admin.force_unlock(name)
                raise Boom()
        with pytest.raises(dlock.LockLost):
            async with lock:
                admin.force_unlock(name)

    asyncio.run(main())
    assert "failed while an exception was raised" in caplog.text
