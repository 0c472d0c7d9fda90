"""The hub package's exception root."""

from __future__ import annotations

from protos.errors import YimiError


class HubError(YimiError):
    """Hub daemon, broker or authority problem."""
