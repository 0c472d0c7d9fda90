"""The worldlines package's exception root (defined in :mod:`storage.worldlines`)."""

from __future__ import annotations

from storage.worldlines import WorldlineError

__all__ = ["WorldlineError"]
