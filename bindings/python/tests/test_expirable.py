"""The permit-expirable semaphore: permits with ids and leases."""
from __future__ import annotations

import threading
import time

import pytest

import dlock
from conftest import run_python


def loss_recorder():
    """An on_lost callback that records the permits it is given, the list
    it records them in, and an Event set at the first."""
    reported = threading.Event()
    seen = []

    def on_lost(permit):
        seen.append(permit)
        reported.set()

    return on_lost, seen, reported


def test_permits_are_limited_and_come_back_on_release(client, name):
    sem = client.expirable_semaphore(name, 2, lease=10.0)
    a, b = sem.acquire(), sem.acquire()
    assert a.id != b.id and len(a.id) == 32
    assert sem.available == 0
    with pytest.raises(dlock.NotAcquired):
        sem.acquire(wait=0)
    a.release()
    assert not a.held and sem.available == 1
    with sem as c:
        assert c.held and sem.available == 0
    assert not c.held and sem.available == 1
    with sem as c:
        sem.release(c)  # released inside: the exit has nothing left to do
    assert sem.available == 1
    with sem.acquire() as d:
        assert sem.available == 0
    assert not d.held
    b.release()
    assert sem.available == 2
    # Another size is refused with both numbers, unless resized.
    with pytest.raises(dlock.InvalidArgument, match="has 2 permits, not 5"):
        client.expirable_semaphore(name, 5)
    sem.resize(3)
    assert sem.available == 3
    sem.add_permits(-1)
    assert sem.available == 2


def test_a_waiter_gets_the_permit_another_thread_releases(client, name):
    sem = client.expirable_semaphore(name, 1, lease=10.0)
    held = sem.acquire()
    got = []
    t = threading.Thread(target=lambda: got.append(sem.acquire(wait=10.0)))
    t.start()
    time.sleep(0.3)
    assert not got
    held.release()  # any thread may release a permit
    t.join(10)
    assert got and got[0].held
    got[0].release()


def test_a_dead_holders_permit_returns_when_its_lease_ends(redis, client, name):
    sem = client.expirable_semaphore(name, 1)
    # A process takes the permit with a 0.8 s lease and dies holding it.
    r = run_python("import dlock, os, sys\n"
                   "c = dlock.Client(sys.argv[1])\n"
                   "p = c.expirable_semaphore(sys.argv[2], 1).acquire(lease=0.8)\n"
                   "print(p.id, flush=True)\n"
                   "os._exit(0)\n", redis.url, name)
    assert r.returncode == 0, r.stderr
    t0 = time.monotonic()
    assert sem.available == 0
    p = sem.acquire(wait=5.0, lease=5.0)
    waited = time.monotonic() - t0
    assert p.id != r.stdout.strip()
    assert waited < 3.0, waited
    p.release()


def test_a_watchdog_permit_outlives_its_lease_and_its_loss_is_reported(redis, name):
    c = dlock.Client(redis.url, watchdog_lease=1.0)
    try:
        on_lost, seen, reported = loss_recorder()
        sem = c.expirable_semaphore(name, 2, on_lost=on_lost)
        p = sem.acquire()  # lease None: renewed by the watchdog
        time.sleep(2.0)  # twice the lease
        assert not p.lost and sem.available == 1
        # Someone removes the permit behind the holder's back.
        assert redis.command("DEL", "dlock:{%s}:psem:held" % name) == ":1"
        assert reported.wait(5), "the loss was not reported"
        assert seen == [p] and p.lost
        with pytest.raises(dlock.LockLost):
            p.release()
        assert not p.held
    finally:
        c.close()


def test_release_by_id_and_renew(redis, client, name):
    sem = client.expirable_semaphore(name, 1)
    p = sem.acquire(lease=0.6)
    sem.renew(p.id, 10.0)
    time.sleep(1.0)  # past the first lease: renewed, still out
    assert sem.available == 0
    other = dlock.Client(redis.url)
    try:
        other.expirable_semaphore(name).release_id(p.id)  # say, for a crashed holder
        assert sem.available == 1
        with pytest.raises(dlock.NotOwner):
            other.expirable_semaphore(name).release_id(p.id)
    finally:
        other.close()
    with pytest.raises(dlock.LockLost):
        p.renew(1.0)
    with pytest.raises(dlock.LockLost):
        p.release()


def test_bad_input_raises_and_changes_nothing(client, name):
    sem = client.expirable_semaphore(name, 1, lease=10.0)
    with pytest.raises(dlock.InvalidArgument):
        sem.set_permits(-1)
    with pytest.raises(dlock.InvalidArgument):
        sem.acquire(lease=0)
    with pytest.raises(dlock.InvalidArgument):
        sem.renew("0" * 32, None)
    with pytest.raises(dlock.InvalidArgument):
        client.expirable_semaphore("bad{name}")
    p = sem.acquire()
    p.release()
    with pytest.raises(dlock.NotOwner):
        p.release()
    other = client.expirable_semaphore(name + ":2", 1)
    q = sem.acquire()
    with pytest.raises(dlock.InvalidArgument):
        other.release(q)
    assert q.held and sem.available == 0
    q.release()


def test_close_with_permits_out_frees_them_and_later_calls_raise(redis, name):
    c = dlock.Client(redis.url)
    sem = c.expirable_semaphore(name, 2)
    p = sem.acquire(lease=30.0)
    q = sem.acquire()  # watchdog
    c.close()
    for call in (p.release, q.release, lambda: p.lost, lambda: sem.available):
        with pytest.raises(dlock.ClientClosed):
            call()
    # The places stay taken until their leases end, as documented.
    admin = dlock.Client(redis.url)
    try:
        assert admin.expirable_semaphore(name).available == 0
    finally:
        admin.close()


def test_the_exports_example_runs(redis):
    import os
    example = os.path.join(os.path.dirname(__file__), "..", "examples", "exports.py")
    r = run_python(open(example).read(), redis.url, "2")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert len(lines) == 6 and all(ln.startswith("export ") for ln in lines), r.stdout


def test_tasks_share_the_permits_without_a_thread_each(client, name):
    import asyncio
    sem = client.expirable_semaphore(name, 2, lease=10.0)
    inside, most, ids = [0], [0], set()

    async def task():
        async with sem as p:
            ids.add(p.id)
            inside[0] += 1
            most[0] = max(most[0], inside[0])
            await asyncio.sleep(0.05)
            inside[0] -= 1
        assert not p.held

    async def main():
        before = threading.active_count()
        await asyncio.wait_for(asyncio.gather(*(task() for _ in range(10))), 20)
        return threading.active_count() - before

    more_threads = asyncio.run(main())
    assert most[0] == 2 and len(ids) == 10
    assert more_threads <= 3  # the library's own few, not one per waiting task
    assert sem.available == 2


def test_a_task_cancelled_while_waiting_leaves_no_permit_taken(client, name):
    import asyncio
    sem = client.expirable_semaphore(name, 1, lease=10.0)
    held = sem.acquire()

    async def main():
        t = asyncio.ensure_future(sem.acquire_async())
        await asyncio.sleep(0.3)
        assert not t.done()
        t.cancel()
        with pytest.raises(asyncio.CancelledError):
            await t
        held.release()
        # The library's wait goes on after the task's end and takes the
        # permit the release freed; nobody awaits it, so it is given back
        # in the background.
        await asyncio.sleep(0.5)

    asyncio.run(main())
    p = sem.acquire(wait=2.0)
    assert sem.available == 0
    p.release()
    assert sem.available == 1


def test_an_expired_permits_asynchronous_release_raises_lock_lost(client, name):
    import asyncio
    sem = client.expirable_semaphore(name, 1)

    async def main():
        # 0.5 s: a loaded machine does not stall the grant past the
        # 0.443 s it is trusted (which would rightly raise LockLost).
        p = await sem.acquire_async(lease=0.5)
        await asyncio.sleep(0.8)
        with pytest.raises(dlock.LockLost):
            await p.release_async()
        assert p.lost and not p.held
        with pytest.raises(dlock.NotOwner):
            await p.release_async()
        # The expired permit's place is free again: one taker, not two.
        q = await sem.acquire_async(wait=0, lease=5.0)
        with pytest.raises(dlock.NotAcquired):
            await sem.acquire_async(wait=0, lease=5.0)
        await q.release_async()

    asyncio.run(main())


def test_a_permit_taken_from_asyncio_has_its_loss_reported_and_outlives_no_handle(redis, name):
    import asyncio
    c = dlock.Client(redis.url, watchdog_lease=1.0)
    on_lost, seen, reported = loss_recorder()
    sem = c.expirable_semaphore(name, 2, on_lost=on_lost)

    async def take():
        return await sem.acquire_async()  # lease None: the watchdog's

    p = asyncio.run(take())
    q = asyncio.run(take())
    assert redis.command("ZREM", "dlock:{%s}:psem:held" % name, p.id) == ":1"
    assert reported.wait(5), "the loss was not reported"
    assert seen == [p] and p.lost and not q.lost
    # Closed with q still out: its record is freed before the handle it
    # was taken through.
    c.close()
    with pytest.raises(dlock.ClientClosed):
        q.release()
