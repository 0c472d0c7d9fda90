"""The models package's exceptions: one root, texts in ``protos.errors.MESSAGES``."""

from __future__ import annotations

from protos.errors import YimiError


class ModelError(YimiError):
    """A local model is missing, fails its checksum, or fails to run."""
