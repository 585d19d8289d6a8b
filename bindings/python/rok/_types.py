"""Plain data of the rok binding: task states, results, specs, server info.

These are what both clients (``rok.Client`` and ``rok.aio.Client``) hand
back; they hold no connection.  Conversions from the protocol's messages
live in ``rok._protocol``.
"""

import datetime
import enum
from dataclasses import dataclass
from typing import Mapping, Optional, Sequence, Tuple, Union

from ._errors import TaskFailed

#: What an argument, a path or an environment value may be given as: text
#: (encoded with :func:`os.fsencode`, as the ``os`` module does) or bytes
#: (sent unchanged; they need not be UTF-8).
StrOrBytes = Union[str, bytes]

#: A duration in seconds (``float``/``int``) or a ``datetime.timedelta``.
Seconds = Union[float, int, datetime.timedelta]


class State(str, enum.Enum):
    """How far a task got.  The values are rokctl's ``--json`` names, and a
    ``State`` compares equal to its name: ``result.state == "succeeded"``."""

    UNSPECIFIED = "unspecified"
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    TIMED_OUT = "timed_out"
    INTERRUPTED = "interrupted"

    def __str__(self) -> str:
        return self.value

    @property
    def finished(self) -> bool:
        """True for the states a task ends in (succeeded and after)."""
        return self in _FINISHED


_FINISHED = frozenset({State.SUCCEEDED, State.FAILED, State.CANCELLED,
                       State.TIMED_OUT, State.INTERRUPTED})


@dataclass
class Result:
    """Everything the daemon reported about one task (``rok.v1.TaskInfo``).

    Returned by ``join`` (a finished task) and by ``status`` and ``list``
    (a task in any state).  Times are seconds since the Unix epoch, ``None``
    until they happened.
    """

    id: int
    state: State
    kind: str = "exec"
    #: exec: the exit status when the command exited normally, else None.
    exit_code: Optional[int] = None
    #: exec: the signal that killed the command, else None.
    signal: Optional[int] = None
    #: The task's result value (echo: the text).  Bytes: need not be UTF-8.
    value: bytes = b""
    #: Why it failed or was interrupted, for people ("" when there is none).
    reason: str = ""
    spawned_at: Optional[float] = None
    started_at: Optional[float] = None
    finished_at: Optional[float] = None
    #: The uid of the user who spawned it.
    uid: int = 0
    #: The arguments as spawned (bytes, as on the wire).
    args: Tuple[bytes, ...] = ()
    #: exec: the captured output was cut at the daemon's limit.
    output_truncated: bool = False
    #: Times the task was run again because rokd stopped while it ran.
    retries: int = 0
    #: Its group ("default" unless spawned with one).
    group: str = "default"
    #: Its priority class: "urgent", "high", "normal" or "low".
    priority: str = "normal"
    #: A queued task: why it has not started, for people ("group g full:
    #: 2/2 running", "after task 17", "retry 2 of 4 at ..."); "" otherwise.
    waiting: str = ""
    #: Which run this is: 1, or more after ``retry_failed`` (the outcome
    #: is the last run's).
    run: int = 1
    #: A queued task that waits for a time (``at``, ``delay``, a retry's
    #: backoff): that time in seconds since the epoch, else None.
    not_before: Optional[float] = None

    @property
    def ok(self) -> bool:
        """True when the task succeeded."""
        return self.state is State.SUCCEEDED

    @property
    def finished(self) -> bool:
        """True once the task has ended, whatever the outcome."""
        return self.state.finished

    @property
    def duration(self) -> Optional[float]:
        """Seconds from start to finish, or None if it did not do both."""
        if self.started_at is None or self.finished_at is None:
            return None
        return self.finished_at - self.started_at

    def check(self) -> "Result":
        """Return ``self`` if the task succeeded, else raise
        :class:`rok.TaskFailed` (whose ``result`` is this one)."""
        if not self.ok:
            raise TaskFailed(self)
        return self

    def describe(self) -> str:
        """A short text for people: the state and what explains it."""
        parts = [self.state.value]
        if self.exit_code is not None:
            parts.append(f"exit code {self.exit_code}")
        if self.signal is not None:
            parts.append(f"signal {self.signal}")
        if self.reason:
            parts.append(self.reason)
        return ", ".join(parts)


@dataclass
class Spec:
    """What to run, for :meth:`rok.Client.select` (the same fields as the
    arguments of ``spawn``, which builds one of these).

    ``args`` is the argv for ``kind="exec"``; ``["5s"]`` for ``sleep``;
    ``["text"]`` for ``echo``; nothing for ``noop``.

    Exec tasks, like :mod:`subprocess`: ``env=None`` sends this process's
    environment (``os.environ``), a mapping sends exactly that environment;
    ``clean_env=True`` starts from the daemon's minimal one (PATH, HOME,
    USER, LOGNAME, SHELL of the user) plus ``env``.  ``cwd=None`` sends this
    process's working directory.  ``stdin`` is bytes fed to standard input.
    """

    args: Sequence[StrOrBytes] = ()
    kind: str = "exec"
    #: The task's own timeout in seconds (or a timedelta); None: none.
    timeout: Optional[Seconds] = None
    env: Optional[Mapping[StrOrBytes, StrOrBytes]] = None
    clean_env: bool = False
    cwd: Optional[StrOrBytes] = None
    stdin: Optional[bytes] = None
    #: Times to run it again if a daemon crash interrupts it.
    retry: int = 0
    #: exec: seconds from SIGTERM to SIGKILL on cancel; None: the daemon's.
    kill_grace: Optional[Seconds] = None
    #: The group it runs in; None: "default".
    group: Optional[str] = None
    #: Its class: "urgent", "high", "normal" or "low"; None: normal.
    priority: Optional[str] = None
    #: Tasks (ids or Task objects) that must all succeed before it starts;
    #: if one ends otherwise, it ends cancelled ("dependency N failed").
    after: Optional[Sequence[object]] = None
    #: Tasks that must all have ended (however) before it starts.
    after_any: Optional[Sequence[object]] = None
    #: Not started before this time: a datetime (naive: local time) or
    #: seconds since the epoch.
    at: Optional[object] = None
    #: Not started before this many seconds (or a timedelta) from now.
    delay: Optional[Seconds] = None
    #: Runs again after a failure (non-zero exit, signal), up to this many
    #: more times, waiting ``backoff``, 2x, 4x... seconds between runs.
    retry_failed: int = 0
    backoff: Optional[Seconds] = None


@dataclass(frozen=True)
class Group:
    """A group of rokd (``rok.v1.GroupInfo``): at most ``parallel`` exec
    tasks of it run at once (0: no limit), the others wait queued by class
    (``policy`` "strict" or "weighted", with ``weights`` for urgent, high,
    normal, low) and fairly between users.  ``backend`` "slurm": its exec
    tasks run as Slurm batch jobs, in ``partition`` ("": the cluster's
    default)."""

    name: str
    parallel: int
    policy: str
    backend: str
    paused: bool
    weights: Tuple[int, ...]
    partition: str = ""


@dataclass(frozen=True)
class WatchEvent:
    """One event of ``client.watch()`` (``rok.v1.WatchEvent``).

    ``kind`` is ``"state"`` (task ``id`` moved to ``state`` at ``time``,
    seconds since the Unix epoch; ``snapshot`` when it is part of the
    snapshot sent first, not a change), ``"snapshot_done"`` (the snapshot
    is complete) or ``"lagged"`` (we read too slowly: ``dropped`` events
    were lost and a fresh snapshot follows).  In an end state, ``result``
    is the finished task.
    """

    kind: str
    id: int = 0
    state: Optional[State] = None
    time: Optional[float] = None
    snapshot: bool = False
    result: Optional[Result] = None
    dropped: int = 0


@dataclass(frozen=True)
class ServerInfo:
    """What the daemon said when the connection opened (``HelloReply``)."""

    protocol_version: int
    software_version: str
    #: The uid the daemon sees for this connection.
    uid: int
    #: The largest request frame it accepts, in bytes.
    max_frame: int
    #: Requests it lets one connection have pending (0: not said).
    max_in_flight: int


#: One piece of a task's output: ``(stream, data)`` where stream is 1 for
#: standard output and 2 for standard error.
LogChunk = Tuple[int, bytes]

STDOUT = 1
STDERR = 2

__all__ = ["State", "Result", "Spec", "ServerInfo", "LogChunk", "STDOUT",
           "STDERR", "StrOrBytes", "Seconds"]
