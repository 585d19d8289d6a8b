"""Exceptions of the rok binding.

Every error the daemon reports carries a code from ``rok.v1.ErrorCode``;
:func:`error_from_code` turns it into the subclass of :class:`Error` named
after that code, so callers catch ``rok.NotFound`` rather than compare
numbers.  :class:`ConnectionError` is the binding's own: the socket could
not be opened, the daemon closed it, or it sent something that is not the
protocol.  A broken connection fails every call that waits on it at once;
none of them hangs.
"""

import builtins
from typing import Dict, Optional, Type


class Error(Exception):
    """Base class of every error this package raises.

    ``code`` is the protocol's error code (an ``int``, see
    ``rok.v1.ErrorCode``) when the daemon sent one, else ``None``;
    ``message`` is the text for people.
    """

    code: Optional[int] = None

    def __init__(self, message: str = "", code: Optional[int] = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code


class NotFound(Error):
    """No task with that id, or none the caller may see (``NOT_FOUND``)."""

    code = 1


class PermissionDenied(Error):
    """The task belongs to another user (``PERMISSION_DENIED``)."""

    code = 2


class InvalidArgument(Error, ValueError):
    """A malformed request, an unknown kind or argument (``INVALID_ARGUMENT``).

    Also raised before sending a request the daemon would refuse for its
    size (it would close the connection rather than answer)."""

    code = 3


class ResourceExhausted(Error):
    """A daemon limit was hit: queued tasks, requests in flight, reply size
    (``RESOURCE_EXHAUSTED``)."""

    code = 4


class TimedOut(Error, builtins.TimeoutError):
    """The request's own timeout passed first (``TIMED_OUT``); the tasks it
    waited for keep running."""

    code = 5


class Cancelled(Error):
    """The request was cancelled, e.g. the daemon is shutting down
    (``CANCELLED``)."""

    code = 6


class Unavailable(Error):
    """The daemon cannot serve the request now: it is stopping, or its
    journal is down (``UNAVAILABLE``)."""

    code = 7


class Internal(Error):
    """A bug or an unexpected system error in the daemon (``INTERNAL``)."""

    code = 8


class ConnectionError(Error, builtins.ConnectionError):
    """The connection to rokd could not be made or was lost.

    Raised by every call that was waiting when the connection broke and by
    every call made on it afterwards; connect again to go on.  Tasks the
    daemon had accepted keep running."""


class TaskFailed(Error):
    """Raised by :meth:`rok.Result.check` for a task that did not succeed;
    ``result`` is the :class:`rok.Result`."""

    def __init__(self, result: "object") -> None:
        self.result = result
        super().__init__(f"task {getattr(result, 'id', '?')} "
                         f"{getattr(result, 'describe', lambda: '?')()}")


_BY_CODE: Dict[int, Type[Error]] = {
    cls.code: cls  # type: ignore[misc]
    for cls in (NotFound, PermissionDenied, InvalidArgument, ResourceExhausted,
                TimedOut, Cancelled, Unavailable, Internal)
}


def error_from_code(code: int, message: str) -> Error:
    """The exception for a protocol error ``code`` (a plain :class:`Error`
    carrying the number for a code this binding does not know)."""
    cls = _BY_CODE.get(code)
    if cls is None:
        return Error(f"error {code}: {message}", code)
    return cls(message)
