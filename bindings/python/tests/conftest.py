"""Fixtures: real redis-server processes on unix sockets in temp dirs,
stopped by PID (never a fake Redis), and clients on them."""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from typing import Iterator, List, Optional

import pytest

import dlock


class Redis:
    """One private redis-server: unix socket in its own temp dir, optionally
    a TCP port on 127.0.0.1 and a password; no persistence."""

    def __init__(self, tcp: bool = False, password: Optional[str] = None) -> None:
        if shutil.which("redis-server") is None:
            pytest.fail("redis-server not found (apt-get install redis-server)")
        self.dir = tempfile.mkdtemp(prefix="dlock-py-")
        self.sock = os.path.join(self.dir, "redis.sock")
        self.port = _free_port() if tcp else 0
        self.password = password
        args = ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
                "--unixsocket", self.sock, "--unixsocketperm", "700", "--save", "",
                "--appendonly", "no", "--dir", self.dir, "--logfile", os.path.join(self.dir, "log")]
        if password:
            args += ["--requirepass", password]
        # A sanitizer runtime preloaded for python (the ASan build) is not
        # meant for redis-server.
        env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
        self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, env=env)
        self.pid = self.proc.pid
        deadline = time.monotonic() + 10
        while not self.ping():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                pytest.fail("redis-server did not start")
            time.sleep(0.02)

    @property
    def url(self) -> str:
        return "unix://" + self.sock

    @property
    def tcp_url(self) -> str:
        return "redis://127.0.0.1:%d" % self.port

    def ping(self) -> bool:
        try:
            return self.command("PING") in ("+PONG", "-NOAUTH Authentication required.")
        except OSError:
            return False

    def command(self, *args: str) -> str:
        """One command over the socket (RESP by hand: no client library
        is needed); the first line of the reply."""
        s = socket.socket(socket.AF_UNIX)
        s.settimeout(5)
        try:
            s.connect(self.sock)
            out = b"*%d\r\n" % len(args)
            for a in args:
                b = a.encode()
                out += b"$%d\r\n%s\r\n" % (len(b), b)
            s.sendall(out)
            buf = b""
            while b"\r\n" not in buf:
                chunk = s.recv(4096)
                if not chunk:
                    break
                buf += chunk
            return buf.split(b"\r\n", 1)[0].decode()
        finally:
            s.close()

    def pause(self) -> None:
        os.kill(self.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.kill(self.pid, signal.SIGCONT)

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.pid, signal.SIGCONT)
            os.kill(self.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.kill(self.pid, signal.SIGKILL)
                self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def redis() -> Iterator[Redis]:
    """The session's shared server (tests use names of their own)."""
    r = Redis()
    yield r
    r.stop()


@pytest.fixture
def own_redis() -> Iterator[Redis]:
    """A server of the test's own, for tests that pause or stop it."""
    r = Redis()
    yield r
    r.stop()


@pytest.fixture
def client(redis: Redis) -> Iterator[dlock.Client]:
    c = dlock.Client(redis.url)
    yield c
    c.close()


@pytest.fixture
def name(request: pytest.FixtureRequest) -> str:
    """A lock name unique to the test."""
    return "py:%s:%d" % (request.node.name, time.monotonic_ns())


def run_python(code: str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    """Run code in a fresh interpreter that imports the same dlock."""
    import sys
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          timeout=timeout)


__all__: List[str] = ["Redis", "run_python"]
