"""The asyncio face: acquire and release run on one thread of the
package's pool per task (the library has no asynchronous lock API yet)."""
from __future__ import annotations

import asyncio
import time

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
