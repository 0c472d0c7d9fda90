"""What a device's role handlers get from its node, and nothing more.

A role (confirmation cards, the executor, voiceprints) handles some kinds of message from
the hub; it gets the bundle and, if it answers, a ``send`` that seals a message to the hub
and publishes it — as the hub's wake arbiter gets ``send`` and ``drop`` — never the
``DeviceNode`` itself (so no role module imports the node, and the node imports them).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Protocol

from google.protobuf.message import Message

from sync.envelope import Opened

Handler = Callable[[Opened], Awaitable[None]]
"""handles one opened envelope of the kind it is registered for"""
Handlers = dict[int, Handler]
"""handlers by message kind (``mesh_pb2.EXEC_REQUEST`` → …)"""


class SendToHub(Protocol):
    """Seal ``payload`` to the hub and publish it now (not queued); ``SyncError``
    ``hub.unreachable`` while the session is down."""

    def __call__(
        self, kind: int, payload: Message, *, trace_id: str | None = None
    ) -> Awaitable[None]: ...
