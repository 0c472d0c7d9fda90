"""The archive (L5) package's exception root."""

from __future__ import annotations

from protos.errors import YimiError


class ArchiveError(YimiError):
    """An L5 archive refusal or failure: a write not stored, a bad pack, a target problem."""
