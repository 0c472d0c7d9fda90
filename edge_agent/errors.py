"""The edge agent's exception root."""

from __future__ import annotations

from protos.errors import YimiError


class EdgeError(YimiError):
    """Device daemon problem."""
