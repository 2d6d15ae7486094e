"""The asyncio face, on the library's asynchronous API: tasks wait
without threads, each task is its own owner, nested `async with`
re-enters, and every rule of the synchronous face holds."""
from __future__ import annotations

import asyncio
import threading
import time

import pytest

import dlock


def test_async_with_excludes_and_fences(client, name):
    spans = []

    async def worker(i):
        for _ in range(5):
            async with client.lock(name) as hold:
                t0 = time.monotonic()
                await asyncio.sleep(0.005)  # other tasks run meanwhile
                spans.append((t0, time.monotonic(), hold.token))

    async def main():
        await asyncio.gather(*(worker(i) for i in range(4)))

    asyncio.run(main())
    spans.sort()
    assert len(spans) == 20
    for a, b in zip(spans, spans[1:]):
        assert a[1] <= b[0], "two tasks held the lock at once"
        assert a[2] < b[2]
    assert not client.inspect(name).held


def test_async_reentrant_within_a_task(client, name):
    async def main():
        lock = client.lock(name)
        async with lock as outer:
            async with lock as inner:
                assert inner.token == outer.token
                assert client.inspect(name).hold_count == 2
        return client.inspect(name).held

    assert asyncio.run(main()) is False


def test_async_cancelled_wait_leaves_nothing_held(redis, client, name):
    other = dlock.Client(redis.url)
    try:
        async def main():
            hold = other.lock(name).acquire()

            async def waiter():
                async with client.lock(name):
                    await asyncio.sleep(10)

            task = asyncio.ensure_future(waiter())
            await asyncio.sleep(0.2)
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            hold.release()  # the waiter's acquire may now succeed: it must be undone
            for _ in range(100):
                await asyncio.sleep(0.05)
                info = client.inspect(name)
                if info.last_token > hold.token and not info.held:
                    return True
            return False

        assert asyncio.run(main()), "a cancelled waiter kept the lock"
    finally:
        other.close()


def release_to_an_abandoned_waiter(client, name, hold):
    """Release `hold`, which a waiter whose loop is gone then takes in its
    place, and expect that acquisition given back within 5 s."""
    hold.release()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        info = client.inspect(name)
        if info.last_token > hold.token and not info.held:
            return
        time.sleep(0.05)
    pytest.fail("the waiter of a closed loop kept the lock: %r" % (client.inspect(name),))


def test_a_waiter_cancelled_as_its_loop_closes_gives_back_what_it_gets(redis, client, name):
    # asyncio.run cancels the task left waiting and closes its loop; the
    # acquisition still in flight ends after that, with nobody to take it
    # from the loop's completion queue: it must be given back all the same.
    other = dlock.Client(redis.url)
    try:
        hold = other.lock(name).acquire()

        async def main():
            async def waiter():
                async with client.lock(name):  # the watchdog's lease: renewed until released
                    await asyncio.sleep(10)

            asyncio.ensure_future(waiter())
            await asyncio.sleep(0.2)

        asyncio.run(main())
        release_to_an_abandoned_waiter(client, name, hold)
    finally:
        other.close()


def test_a_waiter_left_in_a_closed_loop_gives_back_what_it_gets(redis, client, name):
    # A loop closed with a task still waiting (not cancelled first): the
    # acquisition in flight must not keep the lock it gets afterwards.
    other = dlock.Client(redis.url)
    loop = asyncio.new_event_loop()
    try:
        hold = other.lock(name).acquire()

        async def waiter():
            async with client.lock(name):
                await asyncio.sleep(10)

        task = loop.create_task(waiter())
        loop.run_until_complete(asyncio.sleep(0.2))
        assert not task.done()
        loop.close()
        release_to_an_abandoned_waiter(client, name, hold)
    finally:
        loop.close()
        other.close()


def test_async_latch_and_semaphore(client, name):
    async def main():
        latch = client.latch(name + ":l")
        latch.set(1)
        sem = client.semaphore(name + ":s", 1)
        waiting = asyncio.ensure_future(latch.wait_async(10))
        async with sem:
            assert sem.available == 0
            latch.count_down()
        return await waiting, sem.available

    assert asyncio.run(main()) == (True, 1)


def test_async_latch_waiters_park_no_thread_and_time_out(client, name):
    """Thirty tasks wait for one latch without a thread each; none is
    let through by the first of two count-downs, all by the second; a
    shut latch's wait_async gives False at its timeout."""
    async def main():
        latch = client.latch(name)
        latch.set(2)
        before = threading.active_count()
        tasks = [asyncio.ensure_future(latch.wait_async(10)) for _ in range(30)]
        await asyncio.sleep(0.2)
        during = threading.active_count()
        latch.count_down()
        await asyncio.sleep(0.2)
        early = sum(t.done() for t in tasks)
        latch.count_down()
        results = await asyncio.gather(*tasks)
        shut = client.latch(name + ":shut")
        shut.set(1)
        t0 = time.monotonic()
        timed_out = await shut.wait_async(0.3)
        return before, during, early, results, timed_out, time.monotonic() - t0

    before, during, early, results, timed_out, took = asyncio.run(main())
    assert during - before <= 1, "threads were started for waiting tasks"
    assert early == 0, "a wait ended before the count reached zero"
    assert results == [True] * 30
    assert timed_out is False and took >= 0.29


def test_async_count_downs_give_what_is_left_and_open_the_latch(client, name):
    """Twenty tasks count one latch down at once, each on the library's
    asynchronous count-down: every count from 19 to 0 is given once, and a
    task waiting on the latch is let through by the last."""
    async def main():
        latch = client.latch(name)
        latch.set(20)
        waiting = asyncio.ensure_future(latch.wait_async(10))
        left = await asyncio.gather(*(latch.count_down_async() for _ in range(20)))
        return sorted(left), await waiting, await latch.count_down_async()

    left, opened, after = asyncio.run(main())
    assert left == list(range(20))
    assert opened is True
    assert after == 0


def test_async_id_batches_never_overlap(client):
    """Batches of 1 to 50 IDs asked for by fifty tasks at once, and
    synchronous ones between: each batch is consecutive and of its size,
    and no ID is handed out twice."""
    async def main():
        batches = await asyncio.gather(*(client.ids_async("async-ids", n) for n in range(1, 51)))
        return batches, client.ids("async-ids", 10)

    batches, sync = asyncio.run(main())
    seen = list(sync)
    for n, batch in zip(range(1, 51), batches):
        assert len(batch) == n and batch == list(range(batch[0], batch[0] + n))
        seen += batch
    assert len(seen) == len(set(seen))
    with pytest.raises(dlock.InvalidArgument):
        asyncio.run(client.ids_async("bad prefix"))
    with pytest.raises(dlock.InvalidArgument):
        asyncio.run(client.ids_async("async-ids", 0))


def test_async_waiters_park_no_thread(client, name):
    """Fifty tasks queue for one lock; no Python thread is started for
    them, and the holds exclude each other in token order."""
    spans = []

    async def worker():
        async with client.lock(name) as hold:
            t0 = time.monotonic()
            await asyncio.sleep(0.001)
            spans.append((t0, time.monotonic(), hold.token))

    async def main():
        before = threading.active_count()
        tasks = [asyncio.ensure_future(worker()) for _ in range(50)]
        await asyncio.sleep(0.05)
        during = threading.active_count()
        await asyncio.gather(*tasks)
        return before, during

    before, during = asyncio.run(main())
    assert during - before <= 1, "threads were started for waiting tasks"
    spans.sort()
    assert len(spans) == 50
    for a, b in zip(spans, spans[1:]):
        assert a[1] <= b[0], "two tasks held the lock at once"
        assert a[2] < b[2]


def test_async_rw_and_semaphore_keep_their_rules(client, name):
    rw = client.rw_lock(name + ":rw")
    sem = client.semaphore(name + ":s", 2)
    state = {"readers": 0, "writers": 0, "in_sem": 0, "max_sem": 0, "broken": 0}

    async def reader():
        async with rw.read():
            state["readers"] += 1
            if state["writers"]:
                state["broken"] += 1
            await asyncio.sleep(0.002)
            state["readers"] -= 1

    async def writer():
        async with rw.write() as hold:
            assert hold.token > 0
            state["writers"] += 1
            if state["writers"] > 1 or state["readers"]:
                state["broken"] += 1
            await asyncio.sleep(0.002)
            state["writers"] -= 1

    async def permit():
        async with sem:
            state["in_sem"] += 1
            state["max_sem"] = max(state["max_sem"], state["in_sem"])
            await asyncio.sleep(0.002)
            state["in_sem"] -= 1

    async def main():
        jobs = [reader() for _ in range(12)] + [writer() for _ in range(4)] + [permit() for _ in range(10)]
        await asyncio.gather(*jobs)

    asyncio.run(main())
    assert state["broken"] == 0
    assert state["max_sem"] == 2
    assert sem.available == 2
    assert not client.inspect_rw(name + ":rw").held


def test_async_hold_loss_is_reported(redis, name):
    lost = []
    c = dlock.Client(redis.url, watchdog_lease=0.6)
    try:
        async def main():
            lock = c.lock(name, on_lost=lost.append)
            async with lock as hold:
                assert not hold.lost
                assert c.force_unlock(name)
                for _ in range(100):
                    if hold.lost:
                        break
                    await asyncio.sleep(0.02)
                assert hold.lost

        with pytest.raises(dlock.LockLost):
            asyncio.run(main())
        for _ in range(100):
            if lost:
                break
            time.sleep(0.02)
        assert len(lost) == 1 and lost[0].lost
    finally:
        c.close()


def test_close_ends_a_waiting_task(redis, name):
    c = dlock.Client(redis.url)
    other = dlock.Client(redis.url)
    try:
        hold = other.lock(name).acquire()

        async def main():
            async def waiter():
                async with c.lock(name):
                    pass

            task = asyncio.ensure_future(waiter())
            await asyncio.sleep(0.2)
            assert not task.done()
            c.close()
            return await asyncio.gather(task, return_exceptions=True)

        (result,) = asyncio.run(main())
        assert isinstance(result, dlock.DlockError), result
        hold.release()
    finally:
        c.close()
        other.close()
