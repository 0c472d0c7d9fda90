"""The web pages' options the daemon is given (kept apart: importing it costs nothing)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class WebTls:
    """The HTTPS listener's certificate chain and key (PEM files)."""

    certfile: Path
    keyfile: Path
