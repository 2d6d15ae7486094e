"""Bad input and failures give the right exceptions, with the library's
explanation (dlock_last_error) as their message."""
from __future__ import annotations

import builtins
import os
import threading
import time

import pytest

import dlock
from conftest import Redis, run_python


@pytest.mark.parametrize("url", ["http://127.0.0.1", "redis://host:notaport", "", "unix://"])
def test_bad_url(url):
    with pytest.raises(dlock.InvalidURL) as e:
        dlock.Client(url)
    assert isinstance(e.value, ValueError)
    assert e.value.status == -2 and e.value.reason == "malformed URL"
    assert str(e.value)  # the parser's reason


def test_unreachable(tmp_path):
    with pytest.raises(dlock.ConnectionError) as e:
        dlock.Client("unix://%s/none.sock" % tmp_path, connect_timeout=1.0)
    assert isinstance(e.value, builtins.ConnectionError)
    assert e.value.status == -3
    with pytest.raises(dlock.ConnectionError):
        dlock.Client("redis://127.0.0.1:1", connect_timeout=1.0)


def test_authentication():
    r = Redis(tcp=True, password="s3cret")
    try:
        with pytest.raises(dlock.AuthenticationError):
            dlock.Client(r.tcp_url)
        with pytest.raises(dlock.AuthenticationError) as e:
            dlock.Client(r.url, password="wrong")
        assert "wrong" not in str(e.value)
        # The URL's password, percent-escaped, and the option's.
        with dlock.Client("redis://:s3cret@127.0.0.1:%d" % r.port) as c:
            assert c.ids("auth", 2)
        with dlock.Client(r.url, password="s3cret") as c:
            with c.lock("auth"):
                pass
    finally:
        r.stop()


@pytest.mark.parametrize("bad", ["", "a{b}", "a}", "x" * 513, "tab\there", "nul\0byte"])
def test_bad_names(client, bad):
    for make in (client.lock, client.fair_lock, client.rw_lock, client.latch, client.semaphore):
        with pytest.raises(dlock.InvalidArgument) as e:
            make(bad)
        assert isinstance(e.value, ValueError) and e.value.status == -1
    with pytest.raises(dlock.InvalidArgument) as e:
        dlock.check_name(bad)
    with pytest.raises(dlock.InvalidArgument):
        client.inspect(bad)


def test_name_messages_are_the_librarys(client):
    with pytest.raises(dlock.InvalidArgument, match=r"'\{' or '\}'"):
        client.lock("a{b}")
    with pytest.raises(dlock.InvalidArgument, match="NUL"):
        client.lock("a\0b")
    with pytest.raises(TypeError):
        client.lock(42)
    dlock.check_name("ok:name")
    dlock.check_name("名前".encode())


def test_bad_ids(client):
    with pytest.raises(dlock.InvalidArgument):
        client.ids("bad prefix!", 1)
    with pytest.raises(dlock.InvalidArgument):
        dlock.check_id_prefix("x" * 65)
    for n in (0, 1_000_001):
        with pytest.raises(dlock.InvalidArgument):
            client.ids("ok", n)
    for n in (2.0, True, "2"):  # an int is asked for: a float, a bool or a str is the wrong type
        with pytest.raises(TypeError):
            client.ids("ok", n)


def test_bad_wait_and_lease(client, name):
    lock = client.lock(name)
    with pytest.raises(dlock.InvalidArgument):
        lock.acquire(wait=-1)
    with pytest.raises(dlock.InvalidArgument):
        lock.acquire(wait=float("nan"))
    with pytest.raises(TypeError):
        lock.acquire(wait="soon")
    with pytest.raises(dlock.InvalidArgument):
        lock.acquire(lease=0)
    with pytest.raises(dlock.InvalidArgument, match="lease must be"):
        lock.acquire(lease=0.001)  # below the library's 3 ms
    with pytest.raises(dlock.InvalidArgument, match="lease must be"):
        lock.acquire(lease=30 * 86400.0)  # over DLOCK_LEASE_MAX_MS
    with pytest.raises(dlock.InvalidArgument):
        dlock.Client("unix:///nowhere", connect_timeout=0)
    assert not client.inspect(name).held


def test_busy_poll_takes_seconds_and_zero_turns_it_off(redis, name):
    for bad in (-0.001, 0.02, float("nan")):
        with pytest.raises(dlock.InvalidArgument, match="busy_poll"):
            dlock.Client(redis.url, busy_poll=bad)
    with pytest.raises(TypeError):
        dlock.Client(redis.url, busy_poll="fast")
    for ok in (0, 0.00005, 0.01):  # never; 50 us; the longest
        with dlock.Client(redis.url, busy_poll=ok) as c:
            lock = c.lock(name)
            lock.acquire()
            lock.release()


def test_bad_counts(client, name):
    sem = client.semaphore(name)
    with pytest.raises(dlock.InvalidArgument):
        sem.set_permits(-1)
    with pytest.raises(dlock.InvalidArgument):
        sem.acquire(0)
    with pytest.raises(dlock.InvalidArgument):
        client.latch(name).set(0)


def test_read_to_write_upgrade_is_refused(client, name):
    rw = client.rw_lock(name)
    with rw.read():
        with pytest.raises(dlock.Deadlock):
            rw.write().acquire(wait=0)


def test_closed_client(redis, name):
    c = dlock.Client(redis.url)
    lock = c.lock(name)
    hold = lock.acquire()
    c.close()
    c.close()  # twice is fine
    assert c.closed
    for call in (lock.acquire, lambda: c.lock(name), lambda: c.ids("x"), lambda: hold.lost):
        with pytest.raises(dlock.ClientClosed):
            call()


def test_close_waits_for_the_call_under_way(redis, name):
    """close() from one thread while another waits inside the library:
    close returns only after that call has run its course (its own
    outcome, not a crash of a freed client), and calls after it are
    refused."""
    holder = dlock.Client(redis.url)
    c = dlock.Client(redis.url)
    try:
        with holder.lock(name):
            outcome = []

            def wait():
                lock = c.lock(name)
                outcome.append(time.monotonic())
                try:
                    lock.acquire(wait=2.0)
                    outcome.append("acquired")
                except dlock.DlockError as e:
                    outcome.append(type(e).__name__)

            t = threading.Thread(target=wait)
            t.start()
            # Inside the library: its process has registered as a waiter.
            deadline = time.monotonic() + 10
            while redis.command("EXISTS", "dlock:{%s}:w" % name) != ":1":
                assert time.monotonic() < deadline, "the waiter never registered"
                time.sleep(0.01)
            c.close()
            closed_at = time.monotonic()
            t.join()
        # close() returned only once the wait had run its course.
        assert outcome[1] == "NotAcquired"
        assert closed_at >= outcome[0] + 1.9
        with pytest.raises(dlock.ClientClosed):
            c.lock(name).acquire(wait=0)
    finally:
        holder.close()


def test_close_while_threads_lock_and_release(redis, name):
    """Eight threads locking and releasing as fast as they can while the
    client is closed: each one stops on ClientClosed (or LockLost for a
    hold the close ended), none on anything else, and the process lives."""
    c = dlock.Client(redis.url)
    errors = []
    started = threading.Semaphore(0)

    def work(i):
        try:
            lock = c.lock("%s:%d" % (name, i))
            with lock:
                pass
            started.release()
            while True:
                with lock:
                    pass
        except (dlock.ClientClosed, dlock.LockLost):
            return
        except Exception as e:  # reported by the test
            errors.append(e)
            started.release()

    ts = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in ts:
        t.start()
    for _ in ts:  # every thread is in its loop
        assert started.acquire(timeout=30)
    time.sleep(0.1)
    c.close()
    for t in ts:
        t.join(timeout=10)
        assert not t.is_alive()
    assert errors == []


@pytest.mark.skipif("libasan" in os.environ.get("LD_PRELOAD", ""),
                    reason="under ASan (gcc 12) a child forked from a threaded process can hang "
                           "in malloc on an allocator lock a parent thread held at fork(); "
                           "the plain build runs this test")
def test_forked_child_gets_an_error_not_a_hang(redis):
    code = r"""
import os, sys, dlock
url = sys.argv[1]
c = dlock.Client(url)
hold = c.lock("py:fork").acquire()
pid = os.fork()
if pid == 0:
    try:
        c.lock("py:fork:child").acquire(wait=0)
        print("child: no error")
    except dlock.ForkedClient as e:
        print("child: ForkedClient:", e)
    try:
        hold.release()
    except dlock.ForkedClient:
        print("child: release refused")
    # A client made in the child works.
    with dlock.Client(url) as mine:
        with mine.lock("py:fork:child", wait=5) as h:
            print("child: own client token", h.token > 0)
    sys.exit(0)  # a normal exit: the parent's client must not hang it
_, status = os.waitpid(pid, 0)
print("parent: child status", status)
hold.release()
print("parent: released")
"""
    p = run_python(code, redis.url, timeout=60)
    assert p.returncode == 0, p.stderr
    out = p.stdout
    assert "child: ForkedClient: this dlock Client was made in process" in out, out
    assert "child: release refused" in out
    assert "child: own client token True" in out
    assert "parent: child status 0" in out
    assert "parent: released" in out
