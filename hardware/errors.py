"""The hardware package's exception root."""

from __future__ import annotations

from protos.errors import YimiError


class AudioError(YimiError):
    """An audio device, file or stream is missing, unusable or malformed."""


class CameraError(YimiError):
    """A camera, image file, folder or video is missing or unusable."""


class ImuError(YimiError):
    """An IMU stream or recording is missing or malformed."""
