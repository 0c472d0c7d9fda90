"""The archive (L5) package's exception root."""

from __future__ import annotations

from protos.errors import YimiError


class ArchiveError(YimiError):
    """An L5 archive refusal or failure: a write not stored, a bad pack, a target problem."""


class TargetUnavailable(ArchiveError):
    """The cold target could not be reached (network, server error, credentials): nothing is
    known about the pack itself, so it is not marked failed — but no hot copy is deleted."""
