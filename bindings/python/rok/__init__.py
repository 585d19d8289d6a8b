"""rok: run tasks on rokd, the rok task daemon, from Python.

Sync::

    import rok
    with rok.connect() as client:           # $ROK_SOCKET or the default
        task = client.spawn(["make", "-j2"])
        print(task.join().check().exit_code)

asyncio: :mod:`rok.aio` has the same names as coroutines, over one
connection that pipelines every concurrent request.

The binding speaks rokd's wire protocol itself (``rok.v1`` in
proto/rok.proto, generated into ``rok.rok_pb2`` at build time).
"""

from ._errors import (Cancelled, ConnectionError, Error, Internal,
                      InvalidArgument, NotFound, PermissionDenied,
                      ResourceExhausted, TaskFailed, TimedOut, Unavailable)
from ._protocol import PROTOCOL_VERSION, socket_path
from ._types import (STDERR, STDOUT, Group, LogChunk, Result, ServerInfo,
                     Spec, State, WatchEvent)
from .client import (Client, LogStream, Task, WatchStream, __version__,
                     connect)

__all__ = [
    "connect", "Client", "Task", "LogStream", "Result", "Spec", "State",
    "Group", "ServerInfo", "LogChunk", "WatchEvent", "WatchStream",
    "STDOUT", "STDERR", "socket_path",
    "PROTOCOL_VERSION", "__version__",
    "Error", "NotFound", "PermissionDenied", "InvalidArgument",
    "ResourceExhausted", "TimedOut", "Cancelled", "Unavailable", "Internal",
    "ConnectionError", "TaskFailed",
]
