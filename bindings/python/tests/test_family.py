"""Fair lock, read-write lock, semaphore, latch and IDs."""
from __future__ import annotations

import threading
import time

import pytest

import dlock


def test_fair_lock_serves_waiters_in_order(redis, client, name):
    other = dlock.Client(redis.url)
    try:
        first = other.fair_lock(name).acquire()
        order = []

        def waiter(i):
            with client.fair_lock(name) as h:
                order.append((i, h.token))

        ts = []
        for i in range(4):
            t = threading.Thread(target=waiter, args=(i,))
            t.start()
            ts.append(t)
            time.sleep(0.2)  # queued one after the other
        first.release()
        for t in ts:
            t.join(20)
        assert [i for i, _ in order] == [0, 1, 2, 3]
        assert all(a[1] < b[1] for a, b in zip(order, order[1:]))
        assert client.fair_lock(name).fair
    finally:
        other.close()


def test_rw_lock_readers_share_writer_excludes(redis, client, name):
    rw = client.rw_lock(name)
    both_in = threading.Barrier(3, timeout=10)  # two readers and this thread
    go = threading.Event()

    def reader():
        with rw.read():
            both_in.wait()
            go.wait(10)

    ts = [threading.Thread(target=reader) for _ in range(2)]
    for t in ts:
        t.start()
    both_in.wait()  # two read holds at once
    other = dlock.Client(redis.url)
    try:
        assert client.inspect_rw(name).readers == 2
        with pytest.raises(dlock.NotAcquired):
            other.rw_lock(name).write().acquire(wait=0)
        go.set()
        for t in ts:
            t.join(10)
        with other.rw_lock(name).write(wait=5) as w:
            assert w.mode == "write" and w.token > 0
            info = other.inspect_rw(name)
            assert info.write_count == 1 and info.writer.startswith(other.client_id)
        with rw.read() as r:
            assert r.token == w.token  # the version a reader sees
    finally:
        go.set()
        other.close()


def test_semaphore(redis, client, name):
    sem = client.semaphore(name, 2)
    with pytest.raises(dlock.InvalidArgument, match="has 2 permits, not 5"):
        client.semaphore(name, 5)  # another size is refused
    sem.acquire(2)
    assert sem.available == 0
    with pytest.raises(dlock.NotAcquired):
        sem.acquire(wait=0)
    # Any process may release: another client returns one.
    other = dlock.Client(redis.url)
    try:
        other.semaphore(name).release()
    finally:
        other.close()
    with sem:
        assert sem.available == 0
    assert sem.available == 1
    sem.release()
    assert sem.available == 2


def test_semaphore_wakes_waiter(client, name):
    sem = client.semaphore(name, 1, wait=5)
    sem.acquire()
    got = []
    t = threading.Thread(target=lambda: (sem.acquire(), got.append(time.monotonic())))
    t.start()
    time.sleep(0.2)
    released = time.monotonic()
    sem.release()
    t.join(10)
    assert got and got[0] - released < 1.5


def test_latch(client, name):
    latch = client.latch(name)
    assert latch.set(3) and not latch.set(5)
    assert latch.count == 3
    assert latch.wait(0.1) is False
    done = []
    t = threading.Thread(target=lambda: done.append(latch.wait(10)))
    t.start()
    assert [latch.count_down() for _ in range(3)] == [2, 1, 0]
    t.join(10)
    assert done == [True]
    assert latch.count == 0 and latch.wait(0)


def test_ids(client):
    ids = client.ids("order", 1000)
    assert len(set(ids)) == 1000 and ids == sorted(ids)
    more = client.ids("order")
    assert len(more) == 1 and more[0] > ids[-1]
    seconds = ids[0] >> 32
    assert abs((seconds + 1640995200) - time.time()) < 120
