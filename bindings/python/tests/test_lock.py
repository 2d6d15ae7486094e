"""The plain lock through the Python package: exclusion across processes
and threads, re-entry, fencing order, waits and timeouts, the GIL."""
from __future__ import annotations

import sys
import threading
import time

import pytest

import dlock
from conftest import run_python

# One worker process of the cross-process test: COUNT read-modify-writes of
# a counter file under the lock, a short sleep between read and write so
# that any two holders at once would lose an update, and every hold's
# fencing token appended to a log in the order the holds happened.
WORKER = r"""
import sys, time, dlock
url, name, counter, log, count = sys.argv[1:6]
c = dlock.Client(url)
lock = c.lock(name, wait=60)
for _ in range(int(count)):
    with lock as hold:
        with open(counter) as f:
            n = int(f.read())
        time.sleep(0.002)
        with open(counter, "w") as f:
            f.write(str(n + 1))
        with open(log, "a") as f:
            f.write("%d\n" % hold.token)
c.close()
"""


def test_mutual_exclusion_across_processes(redis, name, tmp_path):
    counter, log = tmp_path / "counter", tmp_path / "tokens"
    counter.write_text("0")
    log.write_text("")
    procs, count = 4, 25
    import subprocess
    ps = [subprocess.Popen([sys.executable, "-c", WORKER, redis.url, name, str(counter), str(log),
                            str(count)]) for _ in range(procs)]
    for p in ps:
        assert p.wait(120) == 0
    assert int(counter.read_text()) == procs * count, "an update was lost: two holders at once"
    tokens = [int(t) for t in log.read_text().split()]
    assert len(tokens) == procs * count
    assert all(a < b for a, b in zip(tokens, tokens[1:])), "fencing tokens out of order"


def test_mutual_exclusion_across_threads(client, name):
    box = [0]
    lock = client.lock(name)

    def work():
        for _ in range(30):
            with lock:
                v = box[0]
                time.sleep(0.0005)  # lets another thread run in between
                box[0] = v + 1

    ts = [threading.Thread(target=work) for _ in range(6)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert box[0] == 180


def test_reentrant_in_one_thread_across_lock_objects(client, name):
    with client.lock(name) as outer:
        # A second Lock object of the same name is the same owner.
        with client.lock(name) as inner:
            assert inner.token == outer.token
            assert client.inspect(name).hold_count == 2
        info = client.inspect(name)
        assert info.held and info.hold_count == 1
        assert info.holder.startswith(client.client_id)
        # Another thread is another owner.
        got = []

        def other():
            try:
                client.lock(name).acquire(wait=0)
            except dlock.NotAcquired as e:
                got.append(e)

        t = threading.Thread(target=other)
        t.start()
        t.join()
        assert len(got) == 1
    assert not client.inspect(name).held


def test_owned_is_the_calling_threads_and_locked_anybodys(redis, client, name):
    lk = client.lock(name, lease=10.0)
    assert not lk.owned() and not lk.locked()
    with lk:
        assert lk.owned() and client.lock(name).owned() and lk.locked()
        seen = []
        t = threading.Thread(target=lambda: seen.append((lk.owned(), lk.locked())))
        t.start()
        t.join()
        assert seen == [(False, True)]
        with lk:
            assert lk.owned()
        assert lk.owned()  # one level left
    assert not lk.owned() and not lk.locked()
    other = dlock.Client(redis.url)
    try:
        with other.lock(name):
            assert lk.locked() and not lk.owned()
    finally:
        other.close()


def test_fencing_tokens_rise_across_clients(redis, client, name):
    other = dlock.Client(redis.url)
    try:
        tokens = []
        for i in range(20):
            c = client if i % 2 else other
            with c.lock(name) as hold:
                tokens.append(hold.token)
        assert all(a < b for a, b in zip(tokens, tokens[1:]))
        # A force unlock does not reset them.
        hold = client.lock(name).acquire()
        assert client.force_unlock(name)
        with other.lock(name) as h2:
            assert h2.token > hold.token
    finally:
        other.close()


def test_fence_floor(client, name):
    lock = client.lock(name)
    # Above the server clock's microseconds, which tokens never go below,
    # and within the 2^53 that the scripts' Lua numbers hold exactly.
    floor = 8 * 10**15
    lock.set_fence_floor(floor)
    with lock as hold:
        assert hold.token == floor + 1


def test_wait_times_out(redis, client, name):
    other = dlock.Client(redis.url)
    try:
        with other.lock(name):
            t0 = time.monotonic()
            with pytest.raises(dlock.NotAcquired) as e:
                client.lock(name).acquire(wait=0)
            assert time.monotonic() - t0 < 1.0
            assert "held by another owner" in str(e.value)
            assert isinstance(e.value, TimeoutError) and e.value.status == -5
            t0 = time.monotonic()
            with pytest.raises(dlock.NotAcquired):
                with client.lock(name, wait=0.3):
                    pytest.fail("acquired a held lock")
            took = time.monotonic() - t0
            assert 0.29 <= took < 3.0, took
            # A wait longer than one slice in the main thread still ends on time.
            t0 = time.monotonic()
            with pytest.raises(dlock.NotAcquired):
                client.lock(name).acquire(wait=1.6)
            assert 1.59 <= time.monotonic() - t0 < 4.0
    finally:
        other.close()


def test_waiter_woken_by_release(redis, client, name):
    other = dlock.Client(redis.url)
    try:
        hold = other.lock(name).acquire()
        out = []

        def waiter():
            t0 = time.monotonic()
            with client.lock(name) as h:
                out.append((time.monotonic() - t0, h.token))

        t = threading.Thread(target=waiter)
        t.start()
        time.sleep(0.3)
        hold.release()
        t.join(10)
        assert out and out[0][1] > hold.token
        # Woken by the release, not by a poll or the 2 s safety net.
        assert out[0][0] < 1.5
    finally:
        other.close()


def test_gil_released_while_waiting(redis, client, name):
    other = dlock.Client(redis.url)
    try:
        with other.lock(name):
            def wait():
                try:
                    client.lock(name).acquire(wait=1.0)
                except dlock.NotAcquired:
                    pass

            t = threading.Thread(target=wait)
            t.start()
            time.sleep(0.2)  # the thread is inside the library's wait now
            n = 0
            t0 = time.monotonic()
            while t.is_alive():
                n += 1
            ran = time.monotonic() - t0
            t.join()
        # Had the waiting thread kept the GIL, this loop would have started
        # only once its wait was over and stopped at once.
        assert ran > 0.4, ran
        assert n > 100_000, n
    finally:
        other.close()


def test_ctrl_c_interrupts_a_wait_forever():
    code = r"""
import os, signal, sys, threading, time, dlock
url, name = sys.argv[1:3]
a, b = dlock.Client(url), dlock.Client(url)
a.lock(name).acquire()
threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT)).start()
t0 = time.monotonic()
try:
    b.lock(name).acquire()  # forever, in the main thread
except KeyboardInterrupt:
    print("interrupted after %.2f s" % (time.monotonic() - t0))
"""
    from conftest import Redis
    r = Redis()
    try:
        p = run_python(code, r.url, "py:ctrl-c", timeout=30)
    finally:
        r.stop()
    assert p.returncode == 0, p.stderr
    took = float(p.stdout.split()[2])
    assert took < 2.5, p.stdout


def test_explicit_lease_expires(client, name):
    # 0.5 s, trusted for 0.443 s: a loaded machine does not stall the
    # acquire (which would rightly raise LockLost) or the first check past it.
    hold = client.lock(name).acquire(lease=0.5)
    assert not hold.lost
    time.sleep(0.8)
    assert hold.lost  # by the holder's clock: no watchdog renews it
    with pytest.raises(dlock.LockLost):
        hold.release()
    assert not hold.held


def test_release_without_hold(client, name):
    with pytest.raises(dlock.NotOwner):
        client.lock(name).release()


def test_hold_context_manager_and_repr(client, name):
    lock = client.lock(name, wait=1.0, lease=5.0)
    with lock.acquire() as hold:
        assert hold.held and hold.mode == "lock"
        assert 0 < client.inspect(name).ttl <= 5.0
        assert "token=%d" % hold.token in repr(hold)
    assert not hold.held and "released" in repr(hold)
    assert repr(lock) == "<dlock.Lock %r>" % name
