"""Fixtures: real rokd processes on private sockets, and a fake daemon.

ROKD names the rokd to run (make check and scripts/test-all set it, as for
tests/rokctl.test); by default the tree's build/default/daemon/rokd.  A
missing rokd is an error, never a skip: a run that tests nothing must not
pass.  Readiness is polled on the socket; nothing sleeps to synchronise.
"""

import faulthandler
import os
import shutil
import signal
import socket
import struct
import subprocess
import tempfile
import threading
import time
from typing import Callable, Dict, Iterator, List, Optional

import pytest

import rok
from rok import rok_pb2 as pb

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
ROKD = os.environ.get("ROKD") or os.path.join(TOP, "build", "default",
                                              "daemon", "rokd")
# Generous bound for a condition that should hold in milliseconds; a
# loaded CI machine may take long, a hang must not take forever.
WAIT = 60.0


def wait_until(cond: Callable[[], object], what: str,
               timeout: float = WAIT) -> object:
    """Polls cond() until it is true; fails the test after timeout."""
    deadline = time.monotonic() + timeout
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.005)


@pytest.fixture(autouse=True)
def no_hang():
    """A test that hangs (a caller stuck on a dead daemon, say) ends the
    run with every thread's traceback instead of hanging CI."""
    faulthandler.dump_traceback_later(3 * WAIT, exit=True)
    yield
    faulthandler.cancel_dump_traceback_later()


class Rokd:
    """One rokd on a socket in its own temporary directory."""

    def __init__(self, config: Optional[Dict[str, str]] = None,
                 workers: int = 2) -> None:
        if not os.access(ROKD, os.X_OK):
            pytest.fail(f"no rokd at {ROKD}: build the tree or set ROKD")
        self.dir = tempfile.mkdtemp(prefix="rok-pytest-")
        os.chmod(self.dir, 0o755)  # the permission test connects as nobody
        self.socket = os.path.join(self.dir, "rokd.sock")
        self.log = os.path.join(self.dir, "rokd.log")
        argv = [ROKD, "-s", self.socket, "-S", os.path.join(self.dir, "state"),
                "-w", str(workers)]
        # Exec tasks run as many at once as a test spawns: the group
        # default without a limit, unless the test sets one.
        config = {"group.default.parallel": "0", **(config or {})}
        if config:
            conf = os.path.join(self.dir, "rokd.conf")
            with open(conf, "w") as f:
                for k, v in config.items():
                    f.write(f"{k} = {v}\n")
            argv += ["-c", conf]
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(argv, stdout=log, stderr=log,
                                         stdin=subprocess.DEVNULL)
        wait_until(self._ready, f"rokd to answer on {self.socket}")

    def _ready(self) -> bool:
        if self.proc.poll() is not None:
            with open(self.log) as f:
                pytest.fail(f"rokd exited {self.proc.returncode}: {f.read()}")
        try:
            with rok.connect(self.socket) as c:
                c.ping()
            return True
        except rok.ConnectionError:
            return False

    def connect(self) -> rok.Client:
        return rok.connect(self.socket)

    def kill(self) -> None:
        """SIGKILL, and reap."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(WAIT)
            except subprocess.TimeoutExpired:
                self.kill()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture(scope="module")
def rokd() -> Iterator[Rokd]:
    """A rokd shared by the tests of one module."""
    d = Rokd()
    yield d
    d.stop()


@pytest.fixture
def make_rokd() -> Iterator[Callable[..., Rokd]]:
    """Starts rokds of the test's own (with a config), stopped at the end."""
    started: List[Rokd] = []

    def make(config: Optional[Dict[str, str]] = None) -> Rokd:
        d = Rokd(config)
        started.append(d)
        return d

    yield make
    for d in started:
        d.stop()


@pytest.fixture
def client(rokd: Rokd) -> Iterator[rok.Client]:
    with rokd.connect() as c:
        yield c


# ---- a fake daemon, for replies a real one cannot be made to send -------

class FakeDaemon:
    """Answers hello, then hands every later request to ``handler``, which
    returns the frames to send back (raw bytes) or None to hang up."""

    def __init__(self, handler: Callable[[pb.Request], Optional[bytes]],
                 hello_version: int = rok.PROTOCOL_VERSION) -> None:
        self.dir = tempfile.mkdtemp(prefix="rok-fake-")
        self.socket = os.path.join(self.dir, "fake.sock")
        self.handler = handler
        self.hello_version = hello_version
        self.srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.srv.bind(self.socket)
        self.srv.listen(8)
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    @staticmethod
    def frame(resp: pb.Response) -> bytes:
        body = resp.SerializeToString()
        return struct.pack(">I", len(body)) + body

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.srv.accept()
            except OSError:
                return
            threading.Thread(target=self._conn, args=(conn,),
                             daemon=True).start()

    def _conn(self, conn: socket.socket) -> None:
        buf = b""
        with conn:
            while True:
                try:
                    data = conn.recv(65536)
                except OSError:
                    return
                if not data:
                    return
                buf += data
                while len(buf) >= 4:
                    (n,) = struct.unpack(">I", buf[:4])
                    if len(buf) < 4 + n:
                        break
                    req = pb.Request.FromString(buf[4:4 + n])
                    buf = buf[4 + n:]
                    if req.WhichOneof("body") == "hello":
                        resp = pb.Response(id=req.id)
                        resp.hello.protocol_version = self.hello_version
                        resp.hello.software_version = b"fake"
                        resp.hello.max_frame = 1 << 20
                        out: Optional[bytes] = self.frame(resp)
                    else:
                        out = self.handler(req)
                    if out is None:
                        conn.shutdown(socket.SHUT_RDWR)
                        return
                    conn.sendall(out)

    def close(self) -> None:
        self.srv.close()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture
def fake_daemon() -> Iterator[Callable[..., FakeDaemon]]:
    made: List[FakeDaemon] = []

    def make(handler: Callable[[pb.Request], Optional[bytes]],
             **kw: int) -> FakeDaemon:
        f = FakeDaemon(handler, **kw)
        made.append(f)
        return f

    yield make
    for f in made:
        f.close()
