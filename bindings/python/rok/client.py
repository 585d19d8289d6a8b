"""The synchronous client: :func:`rok.connect` and :class:`Client`.

One :class:`Client` is one connection to rokd.  Every call sends one
request with a fresh id and waits for the reply with that id.  A client may
be shared by threads: requests from different threads are pipelined on the
connection, and whichever caller is waiting reads the socket for everyone
(leader/follower: there is no reader thread, so a lone caller reads its own
reply directly and pays no thread hand-off).  Replies for ids nobody waits
for any more (an abandoned log stream) are dropped.

A broken connection -- the daemon died, closed the socket, or sent bytes
that are not the protocol -- wakes every waiting caller with
:class:`rok.ConnectionError`, and every later call raises it at once:
nothing hangs on a dead daemon.  Connect again to go on; tasks the daemon
accepted keep running.

The daemon bounds the requests one connection may have pending
(``client.server.max_in_flight``; a log or watch stream counts until it
ends); past that it answers :class:`rok.ResourceExhausted`.
"""

import collections
import socket as _socket
import threading
import time
from typing import (Any, Deque, Dict, Iterable, Iterator, List, Mapping,
                    Optional, Sequence, Tuple, TypeVar)

from . import _protocol as P
from . import rok_pb2 as pb
from ._errors import ConnectionError, Error
from ._types import (Group, LogChunk, Result, Seconds, ServerInfo,
                     StrOrBytes, WatchEvent)

__version__ = "0.1.0"
_SOFTWARE = f"rok-python {__version__}"
_READ_SIZE = 256 * 1024


class _Conn:
    """The socket and the routing of replies by request id (see the module
    note).  Any thread."""

    def __init__(self, path: str, connect_timeout: Optional[float]) -> None:
        self.path = path
        sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
        try:
            sock.settimeout(connect_timeout)
            sock.connect(path)
            sock.settimeout(None)
        except OSError as e:
            sock.close()
            raise ConnectionError(f"connecting to rokd at {path}: "
                                  f"{e.strerror or e}") from e
        self._sock = sock
        self._decoder = P.Decoder()
        self._cond = threading.Condition(threading.Lock())
        self._send_lock = threading.Lock()
        self._next_id = 1
        self._queues: Dict[int, Deque["pb.Response"]] = {}
        self._reading = False
        self._broken: Optional[str] = None
        self.max_frame = P.DEFAULT_MAX_FRAME

    # -- sending --

    def send(self, req: P.AnyRequest) -> int:
        """Sends ``req`` under a fresh id and returns the id; its replies
        are kept for :meth:`recv` until :meth:`forget`."""
        with self._cond:
            if self._broken is not None:
                raise ConnectionError(self._broken)
            rid = self._next_id
            self._next_id += 1
            self._queues[rid] = collections.deque()
        try:
            frame = P.frame(req, rid, self.max_frame)
        except BaseException:
            self.forget(rid)
            raise
        try:
            with self._send_lock:
                self._sock.sendall(frame)
        except BaseException as e:
            # Part of the frame may have left (an error, or an exception
            # such as KeyboardInterrupt in the middle of sendall): the
            # stream cannot be trusted any more.
            self.forget(rid)
            why = e.strerror if isinstance(e, OSError) else repr(e)
            why = f"sending to rokd: {why or e}"
            self._break(why)
            if isinstance(e, OSError):
                raise ConnectionError(why) from e
            raise
        return rid

    # -- receiving --

    def recv(self, rid: int) -> "pb.Response":
        """The next reply for ``rid``, reading the socket if no other
        caller is."""
        while True:
            with self._cond:
                while True:
                    q = self._queues.get(rid)
                    if q is None:
                        raise Error(f"request {rid} was abandoned")
                    if q:
                        return q.popleft()
                    if self._broken is not None:
                        raise ConnectionError(self._broken)
                    if not self._reading:
                        self._reading = True
                        break
                    self._cond.wait()
            try:
                self._read()
            finally:
                with self._cond:
                    self._reading = False
                    self._cond.notify_all()

    def _read(self) -> None:
        """Reads what the socket has and files each reply under its id
        (the caller holds the reader role)."""
        try:
            data = self._sock.recv(_READ_SIZE)
        except OSError as e:
            self._break(f"reading from rokd: {e.strerror or e}")
            return
        if not data:
            self._break("rokd closed the connection")
            return
        try:
            replies = self._decoder.feed(data)
        except ConnectionError as e:
            self._break(str(e))
            return
        with self._cond:
            for resp in replies:
                q = self._queues.get(resp.id)
                if q is not None:
                    q.append(resp)

    def forget(self, rid: int) -> None:
        """Stop keeping replies for ``rid`` (late ones are dropped)."""
        with self._cond:
            self._queues.pop(rid, None)

    def call(self, req: P.AnyRequest, expect: str):
        rid = self.send(req)
        try:
            return P.body(self.recv(rid), expect)
        finally:
            self.forget(rid)

    # -- ending --

    def _break(self, why: str) -> None:
        with self._cond:
            if self._broken is None:
                self._broken = why
            self._cond.notify_all()

    def close(self) -> None:
        self._break("the client was closed")
        try:
            # Wakes a thread blocked in recv() on this socket.
            self._sock.shutdown(_socket.SHUT_RDWR)
        except OSError:
            pass
        self._sock.close()


class Task:
    """A task rokd accepted.  Holds its id and the client it came from;
    the methods are requests on that client."""

    __slots__ = ("id", "_client")

    def __init__(self, client: "Client", task_id: int) -> None:
        self.id = task_id
        self._client = client

    def __repr__(self) -> str:
        return f"<rok.Task {self.id}>"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Task) and other.id == self.id

    def __hash__(self) -> int:
        return hash(self.id)

    def join(self, timeout: Optional[Seconds] = None) -> Result:
        """Waits for the task to finish and returns its :class:`Result`
        (whatever the outcome: see ``result.ok`` and ``result.check()``).
        With ``timeout`` (seconds), raises :class:`rok.TimedOut` if it has
        not finished by then; the task keeps running."""
        return self._client.join_all([self], timeout=timeout)[0]

    def cancel(self) -> None:
        """Asks the daemon to cancel the task (cooperative: it returns at
        once; :meth:`join` to see it end).  Cancelling a finished task is
        not an error."""
        self._client.cancel([self])

    def status(self) -> Result:
        """The task as it is now, in any state."""
        return self._client.status([self])[0]

    def logs(self, follow: bool = False) -> "LogStream":
        """The task's captured output (exec tasks) as an iterator of
        ``(stream, bytes)``; with ``follow``, it goes on while the task
        runs and ends when the task has ended."""
        return self._client.logs(self, follow=follow)


_S = TypeVar("_S", bound="_Stream")


class _Stream:
    """What log and watch streams share: the request's id, each reply's
    body in turn, and stopping early."""

    def __init__(self, conn: _Conn, rid: int) -> None:
        self._conn = conn
        self._rid: Optional[int] = rid

    def _reply(self, expect: str) -> Any:
        """The next reply body ``expect`` of the stream (the stream must be
        open); on an error the stream is closed and the error raised."""
        assert self._rid is not None
        try:
            return P.body(self._conn.recv(self._rid), expect)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        """Stops reading the stream (idempotent)."""
        if self._rid is not None:
            self._conn.forget(self._rid)
            self._rid = None

    def __enter__(self: _S) -> _S:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        self.close()


class LogStream(_Stream):
    """An iterator of ``(stream, data)`` chunks of a task's output, in the
    order the task wrote them (stream 1: stdout, 2: stderr); :attr:`run`
    says where a later run's output begins.  Once exhausted,
    :attr:`result` is the task as it was at the end.  Closing it
    early (``close()``, ``with``, or dropping it) stops reading; the
    daemon's stream then ends with the task."""

    def __init__(self, conn: _Conn, rid: int) -> None:
        super().__init__(conn, rid)
        self._pending: Deque[Tuple[LogChunk, int]] = collections.deque()
        #: The task when the stream ended (None before).
        self.result: Optional[Result] = None
        #: 0 until a chunk begins the output of a later run than the one
        #: read before (a task run again after a failure, ``retry_failed``,
        #: starts its output afresh); from that chunk on, that run's number
        #: (as :attr:`rok.Result.run` counts them).  Runs whose output was
        #: replaced before it was read are skipped.
        self.run = 0

    def __iter__(self) -> "LogStream":
        return self

    def __next__(self) -> LogChunk:
        while not self._pending:
            if self._rid is None:
                raise StopIteration
            reply = self._reply("logs")
            self._pending.extend(P.log_chunks(reply))
            if reply.end:
                self.close()
                if reply.HasField("task"):
                    self.result = P.result(reply.task)
        chunk, run = self._pending.popleft()
        if run:
            self.run = run
        return chunk


class WatchStream(_Stream):
    """An iterator of :class:`rok.WatchEvent`: first a snapshot (events
    with ``snapshot`` set, then one ``"snapshot_done"``), then each state
    change as rokd pushes it.  Watching ids, it ends once all have ended;
    otherwise it lasts until closed (``close()``, ``with``, or dropping
    it: the rest of the stream is then dropped as it arrives) or until the
    daemon stops."""

    def __iter__(self) -> "WatchStream":
        return self

    def __next__(self) -> WatchEvent:
        if self._rid is None:
            raise StopIteration
        reply = self._reply("watch")
        if reply.end:
            self.close()
            raise StopIteration
        return P.watch_event(reply)


class Client:
    """A connection to rokd (see :func:`rok.connect`).  A context manager:
    ``with rok.connect() as client: ...`` closes it at the end.  Closing
    leaves the daemon's tasks running."""

    def __init__(self, socket: Optional[StrOrBytes] = None,
                 connect_timeout: Optional[float] = 10.0) -> None:
        path = P.socket_path(socket)
        self._conn = _Conn(path, connect_timeout)
        try:
            reply = self._conn.call(P.hello(_SOFTWARE), "hello")
            #: What the daemon said when the connection opened.
            self.server: ServerInfo = P.server_info(reply)
        except BaseException:
            self._conn.close()
            raise
        self._conn.max_frame = self.server.max_frame

    @property
    def socket(self) -> str:
        """The path of the socket this client is connected to."""
        return self._conn.path

    def close(self) -> None:
        """Closes the connection; callers still waiting on it get
        :class:`rok.ConnectionError`."""
        self._conn.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<rok.Client {self.socket!r}>"

    # -- tasks --

    def spawn(self, args: Sequence[StrOrBytes] = (), kind: str = "exec",
              timeout: Optional[Seconds] = None,
              env: Optional[Mapping[StrOrBytes, StrOrBytes]] = None,
              cwd: Optional[StrOrBytes] = None,
              stdin: Optional[bytes] = None, *,
              clean_env: bool = False, retry: int = 0,
              kill_grace: Optional[Seconds] = None,
              group: Optional[str] = None, priority: Optional[str] = None,
              after: Optional[Iterable[object]] = None,
              after_any: Optional[Iterable[object]] = None,
              at: Optional[object] = None, delay: Optional[Seconds] = None,
              retry_failed: int = 0,
              backoff: Optional[Seconds] = None) -> Task:
        """Spawns a task and returns its :class:`Task` once the daemon has
        accepted it (journaled).

        ``args`` is the argv of an exec task (``kind="exec"``, the default),
        ``["5s"]`` for ``sleep``, ``["text"]`` for ``echo``.  ``timeout``
        (seconds) is the task's own: it ends ``timed_out`` when it passes.
        Exec tasks get this process's environment and working directory
        unless ``env`` / ``cwd`` say otherwise (see :class:`rok.Spec`).

        ``group`` (a group of the daemon's, ``rokctl group list``; None:
        "default") and ``priority`` ("urgent", "high", "normal", "low")
        place an exec task in its group's queue.

        What it waits for: ``after`` (tasks or ids that must all succeed
        first; if one ends otherwise, this one ends cancelled,
        "dependency N failed"), ``after_any`` (tasks that must all have
        ended, however), ``at`` (a datetime, naive meaning local time, or
        seconds since the epoch) or ``delay`` (seconds, or a timedelta,
        from now): it is not started before then.  ``retry_failed`` runs
        it again after a failure (non-zero exit, signal), up to that many
        more times, ``backoff`` seconds before the first retry, twice that
        before the second, and so on; ``Result.run`` counts the runs and
        the outcome is the last run's.  Meanwhile the task is queued and
        ``Result.waiting`` says why."""
        spec = P.spawn_spec(args, kind, timeout, env, cwd, stdin,
                            clean_env, retry, kill_grace, group, priority,
                            after, after_any, at, delay, retry_failed,
                            backoff)
        reply = self._conn.call(P.spawn(spec), "spawn")
        return Task(self, reply.id)

    def run(self, args: Sequence[StrOrBytes] = (), kind: str = "exec",
            timeout: Optional[Seconds] = None,
            env: Optional[Mapping[StrOrBytes, StrOrBytes]] = None,
            cwd: Optional[StrOrBytes] = None,
            stdin: Optional[bytes] = None, *, clean_env: bool = False,
            retry: int = 0, kill_grace: Optional[Seconds] = None,
            wait_timeout: Optional[Seconds] = None) -> Result:
        """Spawns a task and waits for its :class:`Result` in one request
        (one round trip: ``spawn(...).join()`` takes two).  With
        ``wait_timeout``, raises :class:`rok.TimedOut` when it passes; the
        task keeps running but its id is not known then (use ``spawn`` and
        ``join`` for that)."""
        spec = P.spawn_spec(args, kind, timeout, env, cwd, stdin,
                            clean_env, retry, kill_grace)
        reply = self._conn.call(P.spawn(spec, True, wait_timeout), "spawn")
        return P.result(reply.task)

    def join_all(self, tasks: Iterable[object],
                 timeout: Optional[Seconds] = None) -> List[Result]:
        """Waits for every task (a :class:`Task` or an id) and returns their
        results in the same order.  With ``timeout``, raises
        :class:`rok.TimedOut` if they have not all finished by then.  An
        unknown id raises :class:`rok.NotFound`."""
        reply = self._conn.call(P.join(P.task_ids(tasks), timeout), "join")
        return [P.result(t) for t in reply.tasks]

    def race(self, tasks: Sequence[object], cancel_rest: bool = False,
             timeout: Optional[Seconds] = None) -> Tuple[int, Result]:
        """Waits for the first of ``tasks`` to finish; returns its position
        in ``tasks`` and its result (the lowest position wins a tie).  With
        ``cancel_rest`` the others are cancelled."""
        reply = self._conn.call(P.race(P.task_ids(tasks), timeout,
                                       cancel_rest), "race")
        return reply.index, P.result(reply.winner)

    def select(self, specs: Iterable[object],
               timeout: Optional[Seconds] = None) -> Tuple[int, Result]:
        """Spawns every spec (a :class:`rok.Spec`, a mapping of ``spawn``'s
        arguments, or an argv), waits for the first to finish and cancels
        the others; returns the winner's position and result.  On timeout
        all are cancelled and :class:`rok.TimedOut` is raised."""
        reply = self._conn.call(P.select(specs, timeout), "select")
        return reply.index, P.result(reply.winner)

    def cancel(self, tasks: Iterable[object]) -> None:
        """Asks the daemon to cancel each task (returns at once)."""
        ids = P.task_ids(tasks)
        P.cancel_results(self._conn.call(P.cancel(ids), "cancel"), ids)

    def status(self, tasks: Iterable[object]) -> List[Result]:
        """The tasks as they are now, in the order given."""
        reply = self._conn.call(P.status(P.task_ids(tasks)), "status")
        return [P.result(t) for t in reply.tasks]

    def list(self, state: Optional[str] = None, after: int = 0,
             page_size: int = 0,
             group: Optional[str] = None) -> Iterator[Result]:
        """Every task visible to the caller with an id above ``after``, in
        increasing id order, optionally only those in ``state`` (a
        :class:`rok.State` or its name) or of ``group`` (those rokd holds
        in memory: every queued and running one, the newest finished).  A
        generator: it asks for the next page (``page_size`` tasks; 0: the
        daemon's default) when the previous one is used up."""
        while True:
            reply = self._conn.call(P.list_page(state, after, page_size,
                                                group), "list")
            for info in reply.tasks:
                after = info.id
                yield P.result(info)
            if not reply.more or not reply.tasks:
                return

    def logs(self, task: object, follow: bool = False) -> LogStream:
        """The captured output of ``task`` (see :meth:`Task.logs`)."""
        rid = self._conn.send(P.logs(P.task_id(task), follow))
        return LogStream(self._conn, rid)

    def watch(self, ids: Optional[Iterable[object]] = None,
              group: Optional[StrOrBytes] = None,
              states: Optional[Iterable[object]] = None) -> WatchStream:
        """Task events as they happen, as a :class:`WatchStream` of
        :class:`rok.WatchEvent`: of the tasks ``ids`` (tasks or ids; the
        stream ends once all have ended), else of ``group``, else of all
        your tasks; ``states`` (names or :class:`rok.State`) keeps only
        changes into those.  One request in flight while it lasts."""
        rid = self._conn.send(P.watch(ids, group, states))
        return WatchStream(self._conn, rid)

    def task(self, task_id: int) -> Task:
        """A :class:`Task` for an id (from rokctl, another client, ...)."""
        return Task(self, P.task_id(task_id))

    # -- the daemon --

    def stats(self) -> Dict[str, Any]:
        """The daemon's counters (``rok.v1.StatsReply``) by field name."""
        return P.stats_dict(self._conn.call(P.stats(), "stats"))

    def groups(self) -> List[Group]:
        """The daemon's groups (:class:`rok.Group`), in name order."""
        return P.group_list(self._conn.call(P.groups(), "group"))

    def ping(self, payload: bytes = b"") -> float:
        """Round trip to the daemon; returns the seconds it took."""
        t0 = time.monotonic()
        reply = self._conn.call(P.ping(payload), "ping")
        if reply.payload != payload:
            raise Error("rokd echoed another ping payload")
        return time.monotonic() - t0

    def prune(self, older_than: Optional[Seconds] = None,
              keep: Optional[int] = None) -> int:
        """Deletes finished tasks from the daemon's journal: those finished
        more than ``older_than`` seconds ago and those beyond the ``keep``
        most recent; with neither, the daemon's retention.  Returns how
        many were deleted."""
        return self._conn.call(P.prune(older_than, keep), "prune").pruned


def connect(socket: Optional[StrOrBytes] = None,
            connect_timeout: Optional[float] = 10.0) -> Client:
    """Connects to rokd and returns a :class:`Client`.

    ``socket`` is the path of rokd's socket; by default ``$ROK_SOCKET``,
    then ``/run/rok/rokd.sock`` for root, then
    ``$XDG_RUNTIME_DIR/rok/rokd.sock`` (as rokctl).  Raises
    :class:`rok.ConnectionError` if no daemon answers there."""
    return Client(socket, connect_timeout)
