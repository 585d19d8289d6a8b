"""rok for asyncio: the names of :mod:`rok` as coroutines.

``await rok.aio.connect()`` (or ``async with rok.aio.connect() as client``)
opens one connection, and every request of every coroutine goes over it,
pipelined: each request gets a fresh id, and the connection (an asyncio
protocol: no reader task) hands each reply, as the socket delivers it, to
the coroutine that waits for that id (or to the log or watch stream it
belongs to), in whatever order the daemon answers.  Requests written in
the same turn of the event loop leave in one write (or one per 32).

Cancellation.  Cancelling a coroutine that awaits a reply
(``asyncio.wait_for`` timing out, ``task.cancel()``) abandons the *wait*
only: the request has been sent, the daemon carries it out, and its reply
is dropped when it comes.  In particular it does **not** cancel the remote
task -- a cancelled ``await task.join()`` leaves the task running; call
``await task.cancel()`` for that.

Flow control.  The daemon lets a connection have ``max_in_flight``
requests pending (it says how many when the connection opens); the client
never sends more: further requests wait in the client for a slot.  A
request abandoned by cancellation keeps its slot until its reply comes,
and a log or watch stream until it ends, because the daemon counts them
until then.

A broken connection (the daemon died or closed it, or sent bytes that are
not the protocol) fails every waiting coroutine and every later call with
:class:`rok.ConnectionError`; nothing hangs.
"""

import asyncio
import collections
import time
from typing import (Any, AsyncIterator, Awaitable, Deque, Dict, Generator,
                    Iterable, List, Mapping, Optional, Sequence, Tuple,
                    TypeVar)

from . import _protocol as P
from . import rok_pb2 as pb
from ._errors import (Cancelled, ConnectionError, Error, Internal,
                      InvalidArgument, NotFound, PermissionDenied,
                      ResourceExhausted, TaskFailed, TimedOut, Unavailable)
from ._types import (STDERR, STDOUT, Group, LogChunk, Result, Seconds,
                     ServerInfo, Spec, State, StrOrBytes, WatchEvent)
from .client import _SOFTWARE

# The data types and errors are rok's own, re-exported so that rok.aio
# alone has every name.
__all__ = [
    "connect", "Client", "Task", "LogStream", "Result", "Spec", "State",
    "ServerInfo", "LogChunk", "STDOUT", "STDERR",
    "Error", "NotFound", "PermissionDenied", "InvalidArgument",
    "ResourceExhausted", "TimedOut", "Cancelled", "Unavailable", "Internal",
    "ConnectionError", "TaskFailed",
]

# Above this much unsent data, a caller waits for the socket to drain.
_WRITE_HIGH = 4 << 20
# Requests queued in one loop turn that are written at once, not at its end.
_WRITE_BATCH = 32


class _Slots:
    """A counting limit with O(1) hand-over (asyncio.Semaphore in Python
    3.11 walks its waiters on every release, quadratic with thousands of
    them).  A released slot goes straight to the oldest live waiter."""

    def __init__(self, n: int) -> None:
        self._free = n
        self._waiters: Deque["asyncio.Future[None]"] = collections.deque()

    async def acquire(self) -> None:
        if self._free > 0 and not self._waiters:
            self._free -= 1
            return
        fut = asyncio.get_running_loop().create_future()
        self._waiters.append(fut)
        try:
            await fut
        except asyncio.CancelledError:
            # Handed a slot, then cancelled before running: give it on.
            if fut.done() and not fut.cancelled():
                self.release()
            raise

    def release(self) -> None:
        while self._waiters:
            fut = self._waiters.popleft()
            if not fut.done():
                fut.set_result(None)
                return
        self._free += 1


class _Conn(asyncio.Protocol):
    """The connection, an asyncio protocol.  Requests are framed into a
    buffer that goes out in one write per loop turn (or per _WRITE_BATCH
    frames); the loop hands what the socket gives to data_received, which
    cuts it into replies and routes each by id, in that same callback (no
    reader task and no stream buffer in between: a reply costs a parse and
    a future's result).  Event-loop thread only."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.max_frame = P.DEFAULT_MAX_FRAME
        self._transport: Optional[asyncio.Transport] = None
        self._decoder = P.Decoder()
        self._next_id = 1
        # id -> the future of a plain request (kept until its reply comes,
        # even if the caller gave up: it holds a slot until then).
        self._pending: Dict[int, "asyncio.Future[pb.Response]"] = {}
        # id -> the queue of a log or watch stream; None once its reader
        # gave up.
        self._streams: Dict[int, Optional["asyncio.Queue[Any]"]] = {}
        self._slots: Optional[_Slots] = None
        self._wbuf: List[bytes] = []
        self._flush_scheduled = False
        self._broken: Optional[str] = None
        # While the transport holds more than _WRITE_HIGH unsent bytes
        # (pause_writing): done when it is down again, or broken.
        self._drained: Optional["asyncio.Future[None]"] = None
        # Done when the transport is gone (connection_lost).
        self._lost: Optional["asyncio.Future[None]"] = None

    async def open(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._lost = self._loop.create_future()
        try:
            await self._loop.create_unix_connection(lambda: self, self.path)
        except OSError as e:
            self._lost = None
            raise ConnectionError(f"connecting to rokd at {self.path}: "
                                  f"{e.strerror or e}") from e

    def set_limits(self, server: ServerInfo) -> None:
        self.max_frame = server.max_frame
        if server.max_in_flight > 0:
            self._slots = _Slots(server.max_in_flight)

    # -- the transport's callbacks --

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        transport.set_write_buffer_limits(high=_WRITE_HIGH)

    def data_received(self, data: bytes) -> None:
        try:
            replies = self._decoder.feed(data)
        except ConnectionError as e:
            self._break(str(e))
            return
        pending = self._pending
        slots = self._slots
        try:
            for resp in replies:
                # Inline, as this runs once per task of a pipelined batch.
                fut = pending.pop(resp.id, None)
                if fut is None:
                    self._route_stream(resp)
                    continue
                if slots is not None:
                    slots.release()
                if not fut.done():
                    fut.set_result(resp)
        except BaseException as e:  # a bug here must not hang callers
            self._break(f"reading from rokd: {e!r}")
            raise

    def eof_received(self) -> None:
        self._break("rokd closed the connection")

    def connection_lost(self, exc: Optional[Exception]) -> None:
        if exc is None:
            self._break("rokd closed the connection")
        else:
            self._break(f"reading from rokd: "
                        f"{getattr(exc, 'strerror', None) or exc}")
        if self._lost is not None and not self._lost.done():
            self._lost.set_result(None)

    def pause_writing(self) -> None:
        if self._drained is None:
            self._drained = self._loop.create_future()

    def resume_writing(self) -> None:
        d, self._drained = self._drained, None
        if d is not None and not d.done():
            d.set_result(None)

    # -- sending --

    async def _acquire(self) -> None:
        if self._slots is not None:
            await self._slots.acquire()

    def _release(self) -> None:
        if self._slots is not None:
            self._slots.release()

    def _write(self, req: P.AnyRequest) -> int:
        """Queues ``req`` under a fresh id (the caller holds a slot)."""
        if self._broken is not None:
            raise ConnectionError(self._broken)
        rid = self._next_id
        self._next_id += 1
        wbuf = self._wbuf
        wbuf.append(P.frame(req, rid, self.max_frame))
        if len(wbuf) >= _WRITE_BATCH:
            # Do not hold a long burst back until the end of the loop turn:
            # rokd can work on these while we build the rest.
            self._flush()
        elif not self._flush_scheduled:
            self._flush_scheduled = True
            self._loop.call_soon(self._flush_cb)
        return rid

    def _flush_cb(self) -> None:
        self._flush_scheduled = False
        self._flush()

    def _flush(self) -> None:
        if self._broken is not None or not self._wbuf:
            return
        data = b"".join(self._wbuf)
        self._wbuf.clear()
        assert self._transport is not None
        try:
            self._transport.write(data)
        except (OSError, RuntimeError) as e:
            self._break(f"sending to rokd: {e}")

    def send(self, req: P.AnyRequest) -> Awaitable["pb.Response"]:
        """Sends ``req``; an awaitable of its reply (``P.body`` makes it the
        reply body or the daemon's error).  Not a coroutine: while a slot
        is free and the socket keeps up, the awaitable is the reply's future
        itself, and a request costs its caller no coroutine frame."""
        slots = self._slots
        if slots is not None:
            # Inline fast path of _Slots.acquire.
            if slots._free > 0 and not slots._waiters:
                slots._free -= 1
            else:
                return self._send_when_free(req)
        return self._send(req)

    def _send(self, req: P.AnyRequest) -> Awaitable["pb.Response"]:
        """send with a slot held."""
        try:
            rid = self._write(req)
        except BaseException:
            self._release()
            raise
        fut = self._loop.create_future()
        self._pending[rid] = fut
        drained = self._drained
        if drained is not None:
            return self._wait_drained(drained, fut)
        return fut

    async def _send_when_free(self, req: P.AnyRequest) -> "pb.Response":
        assert self._slots is not None
        await self._slots.acquire()
        return await self._send(req)

    @staticmethod
    async def _wait_drained(drained: "asyncio.Future[None]",
                            fut: "asyncio.Future[pb.Response]"
                            ) -> "pb.Response":
        # Several callers may wait: a cancelled one must not cancel the
        # future the others wait on.
        await asyncio.shield(drained)
        return await fut

    async def call(self, req: P.AnyRequest, expect: str) -> Any:
        """Sends ``req`` and returns the reply body ``expect`` (or raises
        the daemon's error)."""
        return P.body(await self.send(req), expect)

    async def open_stream(
            self, req: P.AnyRequest) -> Tuple[int, "asyncio.Queue[Any]"]:
        """Sends a request answered by a stream of replies; its id and the
        queue they arrive on (a ConnectionError instance if it breaks)."""
        await self._acquire()
        try:
            rid = self._write(req)
        except BaseException:
            self._release()
            raise
        q: "asyncio.Queue[Any]" = asyncio.Queue()
        self._streams[rid] = q
        return rid, q

    def abandon_stream(self, rid: int) -> None:
        """The stream's reader is gone: drop its replies until it ends."""
        if rid in self._streams:
            self._streams[rid] = None

    # -- receiving --

    def _route_stream(self, resp: "pb.Response") -> None:
        """A reply that is not to a plain request: a log or watch
        stream's, or one to nothing we sent (ignored)."""
        rid = resp.id
        if rid in self._streams:
            q = self._streams[rid]
            if P.ends_stream(resp):
                del self._streams[rid]
                self._release()
            if q is not None:
                q.put_nowait(resp)

    # -- ending --

    def _break(self, why: str) -> None:
        if self._broken is not None:
            return
        self._broken = why
        err = ConnectionError(why)
        for fut in self._pending.values():
            self._release()
            if not fut.done():
                fut.set_exception(ConnectionError(why))
                # Nobody may be awaiting it any more (an abandoned wait).
                fut.exception()
        self._pending.clear()
        for q in self._streams.values():
            self._release()
            if q is not None:
                q.put_nowait(err)
        self._streams.clear()
        self._wbuf.clear()
        self.resume_writing()
        if self._transport is not None:
            # Not close(): it would first write out what is buffered, which
            # a daemon that stopped reading never takes.  Every request in
            # there has just failed anyway.
            self._transport.abort()

    async def close(self) -> None:
        self._break("the client was closed")
        if self._transport is not None and self._lost is not None:
            await asyncio.shield(self._lost)


class Task:
    """A task rokd accepted (see :class:`rok.Task`); the methods are
    coroutines on the client it came from.  Cancelling an awaiting
    coroutine never cancels the task itself: :meth:`cancel` does."""

    __slots__ = ("id", "_client")

    def __init__(self, client: "Client", task_id: int) -> None:
        self.id = task_id
        self._client = client

    def __repr__(self) -> str:
        return f"<rok.aio.Task {self.id}>"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Task) and other.id == self.id

    def __hash__(self) -> int:
        return hash(self.id)

    async def join(self, timeout: Optional[Seconds] = None) -> Result:
        """Waits for the task to finish; its :class:`rok.Result`.  With
        ``timeout`` (seconds), raises :class:`rok.TimedOut` when it passes
        (the task keeps running)."""
        return (await self._client.join_all([self], timeout=timeout))[0]

    async def cancel(self) -> None:
        """Asks the daemon to cancel the task (returns at once)."""
        await self._client.cancel([self])

    async def status(self) -> Result:
        """The task as it is now."""
        return (await self._client.status([self]))[0]

    def logs(self, follow: bool = False) -> "LogStream":
        """The task's output: ``async for stream, data in task.logs():``."""
        return self._client.logs(self, follow=follow)


_S = TypeVar("_S", bound="_Stream")


class _Stream:
    """What log and watch streams share: the request, sent when iteration
    starts (a stream costs a slot only once it is read), each reply's body
    in turn, and stopping early."""

    def __init__(self, conn: _Conn, req: P.AnyRequest) -> None:
        self._conn = conn
        self._req: Optional[P.AnyRequest] = req
        self._rid: Optional[int] = None
        self._queue: Optional["asyncio.Queue[Any]"] = None
        self._done = False

    async def _reply(self, expect: str) -> Any:
        """The next reply body ``expect`` of the stream, sending the request
        first; on an error (the daemon's or the connection's) the stream is
        closed and the error raised."""
        if self._queue is None:
            assert self._req is not None
            self._rid, self._queue = await self._conn.open_stream(self._req)
            self._req = None
        try:
            item = await self._queue.get()
            if isinstance(item, BaseException):
                raise ConnectionError(str(item))
            return P.body(item, expect)
        except BaseException:
            await self.aclose()
            raise

    async def aclose(self) -> None:
        """Stops reading the stream (idempotent)."""
        self._done = True
        if self._rid is not None:
            self._conn.abandon_stream(self._rid)
            self._rid = None

    async def __aenter__(self: _S) -> _S:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def __del__(self) -> None:
        # Left without aclose (a `break` out of `async for`): drop the
        # rest of the stream rather than queue it forever.
        if self._rid is not None:
            self._conn.abandon_stream(self._rid)
            self._rid = None


class WatchStream(_Stream):
    """An async iterator of :class:`rok.WatchEvent` (see
    :meth:`rok.Client.watch`).  The request is sent when iteration starts;
    ``await stream.aclose()`` (or ``async with``) stops early."""

    def __aiter__(self) -> "WatchStream":
        return self

    async def __anext__(self) -> WatchEvent:
        if self._done:
            raise StopAsyncIteration
        reply = await self._reply("watch")
        if reply.end:
            await self.aclose()
            raise StopAsyncIteration
        return P.watch_event(reply)


class LogStream(_Stream):
    """An async iterator of ``(stream, data)`` chunks of a task's output
    (stream 1: stdout, 2: stderr); :attr:`run` says where a later run's
    output begins.  Once exhausted, :attr:`result` is the task as it was
    at the end.  The request is sent when iteration starts;
    ``await stream.aclose()`` (or ``async with``) stops early."""

    def __init__(self, conn: _Conn, req: P.AnyRequest) -> None:
        super().__init__(conn, req)
        self._pending: Deque[Tuple[LogChunk, int]] = collections.deque()
        #: The task when the stream ended (None before).
        self.result: Optional[Result] = None
        #: 0 until a chunk begins the output of a later run than the one
        #: read before (a task run again after a failure, ``retry_failed``,
        #: starts its output afresh); from that chunk on, that run's number
        #: (as :attr:`rok.Result.run` counts them).  Runs whose output was
        #: replaced before it was read are skipped.
        self.run = 0

    def __aiter__(self) -> "LogStream":
        return self

    async def __anext__(self) -> LogChunk:
        while not self._pending:
            if self._done:
                raise StopAsyncIteration
            reply = await self._reply("logs")
            self._pending.extend(P.log_chunks(reply))
            if reply.end:
                self._done = True
                if reply.HasField("task"):
                    self.result = P.result(reply.task)
        chunk, run = self._pending.popleft()
        if run:
            self.run = run
        return chunk


class Client:
    """A pipelined connection to rokd (see the module note); make one with
    :func:`connect`.  Every method is a coroutine, except :meth:`logs`,
    :meth:`list` (async iterators) and :meth:`task`."""

    def __init__(self, conn: _Conn, server: ServerInfo) -> None:
        self._conn = conn
        #: What the daemon said when the connection opened.
        self.server = server

    @property
    def socket(self) -> str:
        """The path of the socket this client is connected to."""
        return self._conn.path

    async def close(self) -> None:
        """Closes the connection; waiting coroutines get
        :class:`rok.ConnectionError`."""
        await self._conn.close()

    async def __aenter__(self) -> "Client":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def __repr__(self) -> str:
        return f"<rok.aio.Client {self.socket!r}>"

    async def spawn(self, args: Sequence[StrOrBytes] = (),
                    kind: str = "exec", timeout: Optional[Seconds] = None,
                    env: Optional[Mapping[StrOrBytes, StrOrBytes]] = None,
                    cwd: Optional[StrOrBytes] = None,
                    stdin: Optional[bytes] = None, *,
                    clean_env: bool = False, retry: int = 0,
                    kill_grace: Optional[Seconds] = None,
                    group: Optional[str] = None,
                    priority: Optional[str] = None,
                    after: Optional[Iterable[object]] = None,
                    after_any: Optional[Iterable[object]] = None,
                    at: Optional[object] = None,
                    delay: Optional[Seconds] = None,
                    retry_failed: int = 0,
                    backoff: Optional[Seconds] = None) -> Task:
        """As :meth:`rok.Client.spawn`."""
        spec = P.spawn_spec(args, kind, timeout, env, cwd, stdin,
                            clean_env, retry, kill_grace, group, priority,
                            after, after_any, at, delay, retry_failed,
                            backoff)
        reply = await self._conn.send(P.spawn(spec))
        return Task(self, P.body(reply, "spawn").id)

    async def run(self, args: Sequence[StrOrBytes] = (), kind: str = "exec",
                  timeout: Optional[Seconds] = None,
                  env: Optional[Mapping[StrOrBytes, StrOrBytes]] = None,
                  cwd: Optional[StrOrBytes] = None,
                  stdin: Optional[bytes] = None, *, clean_env: bool = False,
                  retry: int = 0, kill_grace: Optional[Seconds] = None,
                  wait_timeout: Optional[Seconds] = None) -> Result:
        """As :meth:`rok.Client.run`: spawn and wait in one request."""
        spec = P.spawn_spec(args, kind, timeout, env, cwd, stdin,
                            clean_env, retry, kill_grace)
        # The hot path of a pipelined batch: one coroutine frame (this).
        reply = await self._conn.send(P.spawn(spec, True, wait_timeout))
        return P.result(P.body(reply, "spawn").task)

    async def join_all(self, tasks: Iterable[object],
                       timeout: Optional[Seconds] = None) -> List[Result]:
        """As :meth:`rok.Client.join_all`."""
        reply = await self._conn.send(P.join(P.task_ids(tasks), timeout))
        return [P.result(t) for t in P.body(reply, "join").tasks]

    async def race(self, tasks: Sequence[object], cancel_rest: bool = False,
                   timeout: Optional[Seconds] = None) -> Tuple[int, Result]:
        """As :meth:`rok.Client.race`."""
        reply = await self._conn.call(
            P.race(P.task_ids(tasks), timeout, cancel_rest), "race")
        return reply.index, P.result(reply.winner)

    async def select(self, specs: Iterable[object],
                     timeout: Optional[Seconds] = None) -> Tuple[int, Result]:
        """As :meth:`rok.Client.select`."""
        reply = await self._conn.call(P.select(specs, timeout), "select")
        return reply.index, P.result(reply.winner)

    async def cancel(self, tasks: Iterable[object]) -> None:
        """As :meth:`rok.Client.cancel`."""
        ids = P.task_ids(tasks)
        P.cancel_results(await self._conn.call(P.cancel(ids), "cancel"), ids)

    async def status(self, tasks: Iterable[object]) -> List[Result]:
        """As :meth:`rok.Client.status`."""
        reply = await self._conn.call(P.status(P.task_ids(tasks)), "status")
        return [P.result(t) for t in reply.tasks]

    async def list(self, state: Optional[str] = None, after: int = 0,
                   page_size: int = 0,
                   group: Optional[str] = None) -> AsyncIterator[Result]:
        """As :meth:`rok.Client.list`: ``async for result in
        client.list():`` pages on demand."""
        while True:
            reply = await self._conn.call(
                P.list_page(state, after, page_size, group), "list")
            for info in reply.tasks:
                after = info.id
                yield P.result(info)
            if not reply.more or not reply.tasks:
                return

    def logs(self, task: object, follow: bool = False) -> LogStream:
        """The captured output of ``task``: ``async for stream, data in
        client.logs(task, follow=True):``."""
        return LogStream(self._conn, P.logs(P.task_id(task), follow))

    def watch(self, ids: Optional[Iterable[object]] = None,
              group: Optional[StrOrBytes] = None,
              states: Optional[Iterable[object]] = None) -> WatchStream:
        """Task events as they happen: ``async for ev in
        client.watch(ids):`` (see :meth:`rok.Client.watch`)."""
        return WatchStream(self._conn, P.watch(ids, group, states))

    def task(self, task_id: int) -> Task:
        """A :class:`Task` for an id."""
        return Task(self, P.task_id(task_id))

    async def stats(self) -> Dict[str, Any]:
        """As :meth:`rok.Client.stats`."""
        return P.stats_dict(await self._conn.call(P.stats(), "stats"))

    async def groups(self) -> List[Group]:
        """As :meth:`rok.Client.groups`."""
        return P.group_list(await self._conn.call(P.groups(), "group"))

    async def ping(self, payload: bytes = b"") -> float:
        """As :meth:`rok.Client.ping`."""
        t0 = time.monotonic()
        reply = await self._conn.call(P.ping(payload), "ping")
        if reply.payload != payload:
            raise Error("rokd echoed another ping payload")
        return time.monotonic() - t0

    async def prune(self, older_than: Optional[Seconds] = None,
                    keep: Optional[int] = None) -> int:
        """As :meth:`rok.Client.prune`."""
        return (await self._conn.call(P.prune(older_than, keep),
                                      "prune")).pruned


async def _connect(socket: Optional[StrOrBytes]) -> Client:
    conn = _Conn(P.socket_path(socket))
    await conn.open()
    try:
        server = P.server_info(await conn.call(P.hello(_SOFTWARE), "hello"))
        conn.set_limits(server)
    except BaseException:
        await conn.close()
        raise
    return Client(conn, server)


class connect:
    """Connects to rokd (socket resolved as :func:`rok.connect`).  Either
    ``client = await rok.aio.connect()`` or ``async with
    rok.aio.connect() as client:`` (closed at the end)."""

    def __init__(self, socket: Optional[StrOrBytes] = None) -> None:
        self._socket = socket
        self._client: Optional[Client] = None

    def __await__(self) -> Generator[Any, None, Client]:
        return _connect(self._socket).__await__()

    async def __aenter__(self) -> Client:
        self._client = await _connect(self._socket)
        return self._client

    async def __aexit__(self, *exc: object) -> None:
        if self._client is not None:
            await self._client.close()

