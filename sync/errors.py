"""The sync package's exception root."""

from __future__ import annotations

from protos.errors import YimiError


class SyncError(YimiError):
    """Transport, discovery, envelope or outbox problem."""
