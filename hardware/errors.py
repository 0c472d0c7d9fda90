"""The hardware package's exception root."""

from __future__ import annotations

from protos.errors import YimiError


class AudioError(YimiError):
    """An audio device, file or stream is missing, unusable or malformed."""
