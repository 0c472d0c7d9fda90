"""The brain package's exception root."""

from __future__ import annotations

from protos.errors import YimiError


class BrainError(YimiError):
    """A brain, model-provider or task-state refusal or failure."""
