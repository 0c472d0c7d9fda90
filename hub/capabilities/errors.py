"""The capabilities package's exception root."""

from __future__ import annotations

from protos.errors import YimiError


class CapabilityError(YimiError):
    """A capability package is malformed, missing, or its server misbehaved."""
