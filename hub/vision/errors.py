"""The vision package's exception root."""

from __future__ import annotations

from hub.errors import HubError


class VisionError(HubError):
    """A photo, face model, enrolment or OCR problem."""
