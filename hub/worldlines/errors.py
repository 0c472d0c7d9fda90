"""The worldlines package's exception root."""

from __future__ import annotations

from protos.errors import YimiError


class WorldlineError(YimiError):
    """A worldline is unknown, stale, or its workspace cannot be forked."""
