"""The storage package's exception root."""

from __future__ import annotations

from protos.errors import YimiError


class StorageError(YimiError):
    """A local store could not make what it wrote durable."""
