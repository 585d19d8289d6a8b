"""The wire protocol without I/O: socket resolution, framing, building
requests and reading replies (proto/rok.proto, package ``rok.v1``).

Both clients use it: ``rok.Client`` over a blocking socket, ``rok.aio``
over asyncio streams.  A frame is a 4-byte big-endian length and one
protobuf message: a ``Request`` from us, a ``Response`` from the daemon.
Nothing here touches a socket, so the framing and the conversions are the
same for both and can be tested without a daemon.
"""

import datetime
import os
import stat
import struct
import time
from typing import (Any, Iterable, List, Mapping, Optional, Sequence,
                    Tuple, Union)

try:
    from . import rok_pb2 as pb
except ImportError as e:  # pragma: no cover (an uninstalled source tree)
    raise ImportError(
        "rok.rok_pb2 is generated from proto/rok.proto when the package is "
        "built: install it (pip install --no-build-isolation "
        "./bindings/python) rather than importing the source tree") from e
from ._errors import ConnectionError, Error, InvalidArgument, error_from_code
from ._types import (Group, Result, Seconds, ServerInfo, Spec, State,
                     StrOrBytes, WatchEvent)

#: The protocol version this binding speaks (``Hello.protocol_version``).
PROTOCOL_VERSION = 1

#: Largest reply frame accepted (as librokclient: 64 MiB).  A longer one
#: means the stream is not the protocol: the connection is dropped.
MAX_REPLY = 64 << 20

#: Frame size assumed until the hello reply says the daemon's (its default).
DEFAULT_MAX_FRAME = 1 << 20

_HEADER = struct.Struct(">I")

_U64_MAX = (1 << 64) - 1
_U32_MAX = (1 << 32) - 1

_STATES = {
    pb.TASK_STATE_UNSPECIFIED: State.UNSPECIFIED,
    pb.TASK_QUEUED: State.QUEUED,
    pb.TASK_RUNNING: State.RUNNING,
    pb.TASK_SUCCEEDED: State.SUCCEEDED,
    pb.TASK_FAILED: State.FAILED,
    pb.TASK_CANCELLED: State.CANCELLED,
    pb.TASK_TIMED_OUT: State.TIMED_OUT,
    pb.TASK_INTERRUPTED: State.INTERRUPTED,
}
_STATE_CODES = {v: k for k, v in _STATES.items()}


# ---- where the daemon is --------------------------------------------------

def socket_path(socket: Optional[StrOrBytes] = None) -> str:
    """The socket to connect to, resolved as rokctl does.

    ``socket`` if given, else ``$ROK_SOCKET``, else ``/run/rok/rokd.sock``
    for root, else ``$XDG_RUNTIME_DIR/rok/rokd.sock``, else
    ``/tmp/rok-UID/rokd.sock`` -- the last only if that directory is a real
    directory owned by the caller and closed to everybody else (anyone may
    create it first, and an exec spawn sends the caller's environment), else
    :class:`rok.ConnectionError`.
    """
    if socket is not None:
        return os.fsdecode(socket)
    env = os.environ.get("ROK_SOCKET")
    if env:
        return env
    euid = os.geteuid()
    if euid == 0:
        return "/run/rok/rokd.sock"
    xdg = os.environ.get("XDG_RUNTIME_DIR")
    if xdg and xdg.startswith("/"):
        return os.path.join(xdg, "rok", "rokd.sock")
    directory = f"/tmp/rok-{euid}"
    try:
        st = os.lstat(directory)
    except OSError as e:
        raise ConnectionError(f"connecting to rokd: {directory}: "
                              f"{e.strerror}") from e
    if (not stat.S_ISDIR(st.st_mode) or st.st_uid != euid
            or st.st_mode & (stat.S_IRWXG | stat.S_IRWXO)):
        raise ConnectionError(f"connecting to rokd: {directory} is not a "
                              "private directory of this user; refusing it")
    return os.path.join(directory, "rokd.sock")


# ---- framing --------------------------------------------------------------

#: A request as the builders below make it: a ``pb.Request`` without an
#: id, or (the spawn request, every task's hot path) the bytes of one.
AnyRequest = Union["pb.Request", bytes]

_VARINT1 = [bytes((i,)) for i in range(0x80)]


def _varint(n: int) -> bytes:
    """``n`` (0 <= n < 2**64, checked by the callers) as a protobuf
    varint.  (Every request has one for its id, which soon has three
    bytes: the common lengths are unrolled.)"""
    if n < 0x80:
        return _VARINT1[n]
    if n < 0x4000:
        return bytes((n & 0x7F | 0x80, n >> 7))
    if n < 0x200000:
        return bytes((n & 0x7F | 0x80, n >> 7 & 0x7F | 0x80, n >> 14))
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def frame(req: AnyRequest, rid: int, max_frame: int) -> bytes:
    """The frame for ``req`` under request id ``rid``.  Raises
    :class:`rok.InvalidArgument` if it is larger than the daemon accepts:
    it would close the connection instead of answering.

    The id is field 1 of ``Request`` and the builders leave it unset, so
    the encoded id followed by the encoded rest is the message
    ``SerializeToString`` would make with the id set (a message is the
    concatenation of its fields): one request can be built once and sent
    under any id, without copying a message per send."""
    body = req if isinstance(req, bytes) else req.SerializeToString()
    rid_field = b"\x08" + _varint(rid)
    n = len(rid_field) + len(body)
    if n > max_frame:
        raise InvalidArgument(f"request of {n} bytes is larger than "
                              f"the daemon accepts ({max_frame} bytes)")
    return _HEADER.pack(n) + rid_field + body


class Decoder:
    """Cuts a byte stream into ``Response`` messages.

    Feed it whatever the socket gave; it keeps a partial frame for the next
    call.  A frame over :data:`MAX_REPLY` or one that does not decode raises
    :class:`rok.ConnectionError`: the stream cannot be resynchronised.
    """

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, data: bytes) -> List["pb.Response"]:
        buf = self._buf
        if buf:
            buf += data
            data = buf  # type: ignore[assignment]
        out = []
        pos = 0
        end = len(data)
        parse = pb.Response.FromString
        unpack = _HEADER.unpack_from
        # Frames are parsed in place (a memoryview), not copied; a partial
        # one at the end is all that is kept.
        with memoryview(data) as view:
            while end - pos >= 4:
                (n,) = unpack(data, pos)
                if n > MAX_REPLY:
                    raise ConnectionError(f"rokd sent a frame of {n} bytes "
                                          f"(more than {MAX_REPLY})")
                start = pos + 4
                pos = start + n
                if pos > end:
                    pos = start - 4
                    break
                try:
                    out.append(parse(view[start:pos]))
                except Exception as e:  # google.protobuf.message.DecodeError
                    raise ConnectionError(f"rokd sent a reply that does "
                                          f"not decode: {e}") from e
        if data is buf:
            del buf[:pos]
        elif pos < end:
            buf += data[pos:]
        return out


# ---- values ---------------------------------------------------------------

def to_bytes(value: StrOrBytes) -> bytes:
    """Bytes unchanged; text as :func:`os.fsencode` (surrogate escapes
    become the bytes they stand for)."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, str):
        return os.fsencode(value)
    raise TypeError(f"expected str or bytes, not {type(value).__name__}")


def to_ms(seconds: Optional[Seconds], what: str) -> int:
    """A duration in ms for the wire, where 0 means none.  ``None`` is 0;
    a positive duration is at least 1 ms (never silently "none")."""
    if seconds is None:
        return 0
    if isinstance(seconds, datetime.timedelta):
        seconds = seconds.total_seconds()
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
        raise TypeError(f"{what}: expected seconds, not "
                        f"{type(seconds).__name__}")
    if not seconds >= 0:  # also NaN
        raise ValueError(f"{what}: {seconds!r} is not a duration")
    ms = int(round(seconds * 1000))
    if ms == 0 and seconds > 0:
        ms = 1
    if ms > _U64_MAX:
        raise ValueError(f"{what}: {seconds!r} s is too long")
    return ms


def task_id(task: object) -> int:
    """The id of a task given as an ``int`` or anything with an ``id``."""
    tid = getattr(task, "id", task)
    if isinstance(tid, bool) or not isinstance(tid, int):
        raise TypeError(f"expected a task or a task id, not "
                        f"{type(task).__name__}")
    if not 0 < tid <= _U64_MAX:
        raise ValueError(f"{tid} is not a task id")
    return tid


def task_ids(tasks: Iterable[object]) -> List[int]:
    ids = [task_id(t) for t in tasks]
    if not ids:
        raise ValueError("no tasks given")
    return ids


#: Priority class names and their wire values (rok.v1.Priority).
_PRIORITIES = {"urgent": 1, "high": 2, "normal": 3, "low": 4}
_PRIORITY_NAMES = {0: "normal", 1: "urgent", 2: "high", 3: "normal",
                   4: "low"}
_POLICY_NAMES = {1: "strict", 2: "weighted"}


def make_spec(args: Sequence[StrOrBytes] = (), kind: str = "exec",
              timeout: Optional[Seconds] = None,
              env: Optional[Mapping[StrOrBytes, StrOrBytes]] = None,
              clean_env: bool = False, cwd: Optional[StrOrBytes] = None,
              stdin: Optional[bytes] = None, retry: int = 0,
              kill_grace: Optional[Seconds] = None,
              group: Optional[str] = None,
              priority: Optional[str] = None,
              after: Optional[Sequence[object]] = None,
              after_any: Optional[Sequence[object]] = None,
              at: Optional[object] = None, delay: Optional[Seconds] = None,
              retry_failed: int = 0,
              backoff: Optional[Seconds] = None) -> Spec:
    if isinstance(args, (str, bytes)):
        raise TypeError("args must be a sequence of arguments, not one "
                        "string (write [cmd] or shlex.split(cmd))")
    return Spec(args=list(args), kind=kind, timeout=timeout, env=env,
                clean_env=clean_env, cwd=cwd, stdin=stdin, retry=retry,
                kill_grace=kill_grace, group=group, priority=priority,
                after=after, after_any=after_any, at=at, delay=delay,
                retry_failed=retry_failed, backoff=backoff)


def as_spec(spec: object) -> Spec:
    """A :class:`Spec` from a Spec, a mapping of spawn's arguments, or an
    argv (an exec task)."""
    if isinstance(spec, Spec):
        return spec
    if isinstance(spec, Mapping):
        return make_spec(**spec)
    if isinstance(spec, (list, tuple)):
        return make_spec(spec)
    raise TypeError(f"expected a rok.Spec, a mapping or an argv, not "
                    f"{type(spec).__name__}")


_KINDS: dict = {}


def _kind_bytes(kind: str) -> bytes:
    b = _KINDS.get(kind)
    if b is None:
        b = to_bytes(kind)
        if len(_KINDS) < 64:
            _KINDS[kind] = b
    return b


def task_spec(spec: Spec) -> dict:
    """The fields of the ``TaskSpec`` message for ``spec``: see
    :func:`spawn_spec`."""
    return spawn_spec(spec.args, spec.kind, spec.timeout, spec.env,
                      spec.cwd, spec.stdin, spec.clean_env, spec.retry,
                      spec.kill_grace, spec.group, spec.priority, spec.after,
                      spec.after_any, spec.at, spec.delay, spec.retry_failed,
                      spec.backoff)


def spawn_spec(args: Sequence[StrOrBytes], kind: str,
               timeout: Optional[Seconds],
               env: Optional[Mapping[StrOrBytes, StrOrBytes]],
               cwd: Optional[StrOrBytes], stdin: Optional[bytes],
               clean_env: bool, retry: int, kill_grace: Optional[Seconds],
               group: Optional[str] = None, priority: Optional[str] = None,
               after: Optional[Iterable[object]] = None,
               after_any: Optional[Iterable[object]] = None,
               at: Optional[object] = None, delay: Optional[Seconds] = None,
               retry_failed: int = 0,
               backoff: Optional[Seconds] = None) -> dict:
    """The TaskSpec fields of spawn's arguments, in the order both
    clients' ``spawn`` take them: :func:`spec_fields` and
    :func:`when_fields` together."""
    kw = spec_fields(args, kind, timeout, env, clean_env, cwd, stdin, retry,
                     kill_grace, group, priority)
    return when_fields(kw, after, after_any, at, delay, retry_failed,
                       backoff)


def not_before_us(at: Optional[object], delay: Optional[Seconds]) -> int:
    """The wall-clock start time (µs since the epoch) of ``at`` (a
    datetime, naive meaning local time, or seconds since the epoch) or
    ``delay`` (seconds or a timedelta from now); 0 for neither."""
    if at is not None and delay is not None:
        raise ValueError("give at or delay, not both")
    if delay is not None:
        return int(time.time() * 1e6) + to_ms(delay, "delay") * 1000
    if at is None:
        return 0
    if isinstance(at, datetime.datetime):
        ts = at.timestamp()
    elif isinstance(at, (int, float)) and not isinstance(at, bool):
        ts = float(at)
    else:
        raise TypeError(f"at: expected a datetime or seconds since the "
                        f"epoch, not {type(at).__name__}")
    if not ts >= 0:  # also NaN
        raise ValueError(f"at: {at!r} is before the epoch")
    us = int(ts * 1e6)
    if us > _U64_MAX:
        raise ValueError(f"at: {at!r} is too far ahead")
    return us


def when_fields(kw: dict, after: Optional[Iterable[object]],
                after_any: Optional[Iterable[object]], at: Optional[object],
                delay: Optional[Seconds], retry_failed: int,
                backoff: Optional[Seconds]) -> dict:
    """Adds the TaskSpec fields of what a task waits for (dependencies,
    start time, retries after failure) to ``kw``, which it returns."""
    if after is not None:
        ids = [task_id(t) for t in after]
        if ids:
            kw["after"] = ids
    if after_any is not None:
        ids = [task_id(t) for t in after_any]
        if ids:
            kw["after_any"] = ids
    nb = not_before_us(at, delay)
    if nb:
        kw["not_before_us"] = nb
    if retry_failed:
        if isinstance(retry_failed, bool) or \
                not 0 <= retry_failed <= _U32_MAX:
            raise ValueError(f"retry_failed: {retry_failed} is out of "
                             f"range")
        kw["retry_failed"] = retry_failed
    if backoff is not None:
        kw["backoff_ms"] = to_ms(backoff, "backoff")
    return kw


def spec_fields(args: Sequence[StrOrBytes] = (), kind: str = "exec",
                timeout: Optional[Seconds] = None,
                env: Optional[Mapping[StrOrBytes, StrOrBytes]] = None,
                clean_env: bool = False, cwd: Optional[StrOrBytes] = None,
                stdin: Optional[bytes] = None, retry: int = 0,
                kill_grace: Optional[Seconds] = None,
                group: Optional[str] = None,
                priority: Optional[str] = None) -> dict:
    """The fields of a ``TaskSpec`` message (see :class:`Spec` for the
    defaults of exec tasks), as the dict the message constructors take.
    Only fields that differ from the protocol's defaults are set, and the
    whole request is then built in one constructor call: this is the hot
    path of every spawn (nested message constructors copy each level,
    which costs more than the rest together)."""
    if isinstance(args, (str, bytes)):
        raise TypeError("args must be a sequence of arguments, not one "
                        "string (write [cmd] or shlex.split(cmd))")
    kind = kind or "exec"
    kw: dict = {"kind": _kind_bytes(kind)}
    if args:
        kw["args"] = [to_bytes(a) for a in args]
    if timeout is not None:
        kw["timeout_ms"] = to_ms(timeout, "timeout")
    if kill_grace is not None:
        kw["kill_grace_ms"] = to_ms(kill_grace, "kill_grace")
    if retry:
        if not isinstance(retry, int):
            raise TypeError(f"retry: expected an int, not "
                            f"{type(retry).__name__}")
        if not 0 <= retry <= _U32_MAX:
            raise ValueError(f"retry: {retry} is out of range")
        kw["retry"] = retry
    if stdin is not None:
        kw["stdin"] = bytes(stdin)
    if group is not None:
        kw["group"] = to_bytes(group)
    if priority is not None:
        p = _PRIORITIES.get(priority)
        if p is None:
            raise ValueError(f"priority: {priority!r} is not one of "
                             f"urgent, high, normal, low")
        kw["priority"] = p
    if kind == "exec":
        if not args:
            raise ValueError("an exec task needs an argv")
        environ: Optional[Mapping[Any, Any]] = env
        if environ is None and not clean_env:
            environ = os.environb
        if environ:
            kw["env"] = [to_bytes(k) + b"=" + to_bytes(v)
                         for k, v in environ.items()]
        if clean_env:
            kw["clean_env"] = True
        kw["cwd"] = to_bytes(cwd) if cwd is not None \
            else os.fsencode(os.getcwd())
    elif env is not None or cwd is not None or clean_env:
        raise ValueError(f"env, clean_env and cwd are for exec tasks, "
                         f"not {kind}")
    return kw


# ---- requests -------------------------------------------------------------

def hello(software: str) -> "pb.Request":
    req = pb.Request()
    req.hello.protocol_version = PROTOCOL_VERSION
    req.hello.software_version = software.encode()
    return req


def _bytes_field(tag: bytes, value: bytes) -> bytes:
    return tag + _varint(len(value)) + value


# The TaskSpec fields spec_bytes encodes itself (numbers 1-9; any other
# key is left to the generated class, see there).
_SPEC_KEYS = frozenset({"kind", "args", "timeout_ms", "cwd", "env",
                        "clean_env", "stdin", "retry", "kill_grace_ms"})


def spec_bytes(fields: dict) -> bytes:
    """The encoded ``TaskSpec`` of :func:`spec_fields`' dict: the bytes
    ``pb.TaskSpec(**fields).SerializeToString()`` makes (same fields, same
    order; tests/test_proto.py compares them), at a fraction of the cost --
    building and serializing messages with the generated classes was a third
    of the client's time per task.  proto3 omits singular fields that hold
    their default (0, empty, false); repeated ones are written element by
    element.  Keys other than fields 1-9 (fields added to the protocol
    later) go through the generated class and follow, as their numbers do."""
    out = []
    get = fields.get
    v = get("kind")
    if v:
        out.append(_bytes_field(b"\x0a", v))
    for a in get("args") or ():
        out.append(_bytes_field(b"\x12", a))
    v = get("timeout_ms")
    if v:
        out.append(b"\x18" + _varint(v))
    v = get("cwd")
    if v:
        out.append(_bytes_field(b"\x22", v))
    for e in get("env") or ():
        out.append(_bytes_field(b"\x2a", e))
    if get("clean_env"):
        out.append(b"\x30\x01")
    v = get("stdin")
    if v:
        out.append(_bytes_field(b"\x3a", v))
    v = get("retry")
    if v:
        out.append(b"\x40" + _varint(v))
    v = get("kill_grace_ms")
    if v:
        out.append(b"\x48" + _varint(v))
    if not _SPEC_KEYS.issuperset(fields):
        out.append(pb.TaskSpec(**{k: v for k, v in fields.items()
                                  if k not in _SPEC_KEYS}).SerializeToString())
    return b"".join(out)


def spawn(fields: dict, wait: bool = False,
          wait_timeout: Optional[Seconds] = None) -> bytes:
    """A spawn request (``Request.spawn``, field 3: a ``SpawnRequest`` of
    spec 1, wait 2, wait_timeout_ms 3), encoded; ``fields`` from
    :func:`spec_fields`."""
    spec = spec_bytes(fields)
    body = b"\x0a" + _varint(len(spec)) + spec
    if wait:
        body += b"\x10\x01"
    if wait_timeout is not None:
        ms = to_ms(wait_timeout, "timeout")
        if ms:
            body += b"\x18" + _varint(ms)
    return b"\x1a" + _varint(len(body)) + body


def join(ids: List[int], timeout: Optional[Seconds]) -> "pb.Request":
    req = pb.Request()
    req.join.ids.extend(ids)
    req.join.timeout_ms = to_ms(timeout, "timeout")
    return req


def race(ids: List[int], timeout: Optional[Seconds],
         cancel_rest: bool) -> "pb.Request":
    req = pb.Request()
    req.race.ids.extend(ids)
    req.race.timeout_ms = to_ms(timeout, "timeout")
    req.race.cancel_rest = cancel_rest
    return req


def select(specs: Iterable[object],
           timeout: Optional[Seconds]) -> "pb.Request":
    msgs = [task_spec(as_spec(s)) for s in specs]
    if not msgs:
        raise ValueError("no specs given")
    return pb.Request(select={"specs": msgs,
                              "timeout_ms": to_ms(timeout, "timeout")})


def cancel(ids: List[int]) -> "pb.Request":
    req = pb.Request()
    req.cancel.ids.extend(ids)
    return req


def status(ids: List[int]) -> "pb.Request":
    req = pb.Request()
    req.status.ids.extend(ids)
    return req


def list_page(state: Optional[str], after_id: int,
              limit: int, group: Optional[str] = None) -> "pb.Request":
    req = pb.Request()
    if group is not None:
        req.list.group = to_bytes(group)
    if state is not None:
        try:
            req.list.state = _STATE_CODES[State(state)]
        except ValueError:
            raise ValueError(f"{state!r} is not a task state") from None
    req.list.after_id = after_id
    if not 0 <= limit <= _U32_MAX:
        raise ValueError(f"page size {limit} is out of range")
    req.list.limit = limit
    return req


def stats() -> "pb.Request":
    req = pb.Request()
    req.stats.SetInParent()
    return req


def groups() -> "pb.Request":
    req = pb.Request()
    req.group.op = pb.GroupRequest.LIST
    return req


def ping(payload: bytes) -> "pb.Request":
    req = pb.Request()
    req.ping.payload = payload
    return req


def logs(tid: int, follow: bool) -> "pb.Request":
    req = pb.Request()
    req.logs.task_id = tid
    req.logs.follow = follow
    return req


def watch(ids: Optional[Iterable[object]], group: Optional[StrOrBytes],
          states: Optional[Iterable[object]]) -> "pb.Request":
    req = pb.Request()
    req.watch.SetInParent()
    if ids is not None:
        req.watch.ids.extend(task_ids(ids))
        if group is not None:
            raise ValueError("watch: ids and group do not go together")
    if group is not None:
        req.watch.group = to_bytes(group)
    for s in states or ():
        try:
            st = State(s)
        except ValueError:
            raise ValueError(f"watch: unknown state {s!r}") from None
        if st == State.UNSPECIFIED:
            raise ValueError("watch: unknown state 'unspecified'")
        req.watch.states.append(_STATE_CODES[st])
    return req


def watch_event(reply: "pb.WatchEvent") -> WatchEvent:
    """A :class:`rok.WatchEvent` from an event that is not the end."""
    if reply.snapshot_done:
        return WatchEvent("snapshot_done")
    if reply.lagged:
        return WatchEvent("lagged", dropped=reply.lagged)
    return WatchEvent(
        "state", reply.id, _STATES.get(reply.state, State.UNSPECIFIED),
        reply.time_us / 1e6 if reply.time_us else None, reply.snapshot,
        result(reply.task) if reply.HasField("task") and not (
            reply.task.HasField("error") and reply.task.error.code != pb.OK)
        else None)


def prune(older_than: Optional[Seconds], keep: Optional[int]) -> "pb.Request":
    req = pb.Request()
    req.prune.older_than_ms = to_ms(older_than, "older_than")
    if keep is not None:
        if not 0 <= keep <= _U64_MAX:
            raise ValueError(f"keep: {keep} is out of range")
        req.prune.keep = keep
        req.prune.keep_set = True
    return req


# ---- replies --------------------------------------------------------------

def text(b: bytes) -> str:
    """Text for people from the wire (UTF-8 by convention, not checked)."""
    return b.decode("utf-8", "replace")


def body(resp: "pb.Response", expect: str):  # -> the reply message
    """The reply body named ``expect``, or the error the daemon sent raised
    as the matching :class:`rok.Error` subclass."""
    if resp.HasField("error") and resp.error.code != pb.OK:
        raise error_from_code(resp.error.code, text(resp.error.message))
    which = resp.WhichOneof("body")
    if which != expect:
        raise ConnectionError(f"rokd answered a {expect} request with "
                              f"{which or 'an empty reply'}")
    return getattr(resp, expect)


def ends_stream(resp: "pb.Response") -> bool:
    """Whether ``resp`` is the last reply of a log or watch stream: its
    end, or an error (the daemon then no longer counts the request as
    in flight)."""
    return (resp.HasField("error") and resp.error.code != pb.OK) \
        or resp.logs.end or resp.watch.end


_KIND_TEXT: dict = {}


def _kind_text(b: bytes) -> str:
    t = _KIND_TEXT.get(b)
    if t is None:
        t = text(b)
        if len(_KIND_TEXT) < 64:
            _KIND_TEXT[b] = t
    return t


def result(info: "pb.TaskInfo") -> Result:
    """A :class:`rok.Result` from a ``TaskInfo``; raises the task's own
    error (``NotFound``, ``PermissionDenied``) if it carries one.  (Every
    field read from a protobuf message costs: each is read once.)"""
    if info.HasField("error") and info.error.code != pb.OK:
        raise error_from_code(info.error.code,
                              f"task {info.id}: {text(info.error.message)}")
    spawned, started, finished = (info.spawned_us, info.started_us,
                                  info.finished_us)
    reason = info.reason
    args = info.args
    return Result(
        info.id,
        _STATES.get(info.state, State.UNSPECIFIED),
        _kind_text(info.kind),
        info.exit_code if info.has_exit_code else None,
        info.signal if info.has_signal else None,
        info.value,
        text(reason) if reason else "",
        spawned / 1e6 if spawned else None,
        started / 1e6 if started else None,
        finished / 1e6 if finished else None,
        info.uid,
        tuple(args) if args else (),
        info.output_truncated,
        info.retries,
        text(info.group) if info.group else "default",
        _PRIORITY_NAMES.get(info.priority, "normal"),
        text(info.waiting) if info.waiting else "",
        info.run or 1,
        info.not_before_us / 1e6 if info.not_before_us else None,
    )


def server_info(reply: "pb.HelloReply") -> ServerInfo:
    """The hello reply; raises :class:`rok.ConnectionError` for a daemon
    that speaks another protocol version."""
    if reply.protocol_version != PROTOCOL_VERSION:
        raise ConnectionError(f"rokd speaks protocol version "
                              f"{reply.protocol_version}, this binding "
                              f"{PROTOCOL_VERSION}")
    return ServerInfo(protocol_version=reply.protocol_version,
                      software_version=text(reply.software_version),
                      uid=reply.uid,
                      max_frame=reply.max_frame or DEFAULT_MAX_FRAME,
                      max_in_flight=reply.max_in_flight)


def cancel_results(reply: "pb.CancelReply", ids: List[int]) -> None:
    """Raises the first per-task error of a cancel reply."""
    for tid, err in zip(ids, reply.results):
        if err.code != pb.OK:
            raise error_from_code(err.code, f"task {tid}: {text(err.message)}")


def stats_dict(reply: "pb.StatsReply") -> dict:
    """Every field of a stats reply, by name (fields a newer daemon adds
    appear when this binding's rok.proto has them), as plain Python: a
    number, a list for a repeated field (tasks_total), a dict for a
    message (the histograms: bounds_us, counts, sum_us); ``groups`` is a
    list of dicts: name, parallel, running, queued (by class name),
    paused, policy."""
    def plain(msg, f):
        v = getattr(msg, f.name)
        if f.message_type is not None:
            if f.label == f.LABEL_REPEATED:
                return [message(x) for x in v]
            return message(v)
        return list(v) if f.label == f.LABEL_REPEATED else v

    def message(msg):
        return {f.name: plain(msg, f) for f in msg.DESCRIPTOR.fields}

    d = message(reply)
    d["groups"] = [{
        "name": text(g.name), "parallel": g.parallel, "running": g.running,
        "queued": dict(zip(("urgent", "high", "normal", "low"),
                           list(g.queued) + [0] * (4 - len(g.queued)))),
        "paused": g.paused, "policy": _POLICY_NAMES.get(g.policy, "strict"),
    } for g in reply.groups]
    return d


def group_list(reply: "pb.GroupReply") -> List[Group]:
    return [Group(text(g.name), g.parallel,
                  _POLICY_NAMES.get(g.policy, "strict"), text(g.backend),
                  g.paused, tuple(g.weights), text(g.partition))
            for g in reply.groups]


def log_chunks(reply: "pb.LogsReply") -> List[Tuple[Tuple[int, bytes], int]]:
    """The reply's chunks, each with the run whose output it begins: the
    first one's ``reply.run`` (set when a later run's output begins there),
    0 for the others."""
    return [((c.stream, c.data), reply.run if i == 0 else 0)
            for i, c in enumerate(reply.chunks)]


__all__ = ["socket_path", "frame", "Decoder", "PROTOCOL_VERSION", "Error"]
