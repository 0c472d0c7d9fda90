"""The protocol and software version advertised by hubs and devices."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

try:
    VERSION = version("yimi-mesh")
except PackageNotFoundError:  # running from a source tree
    VERSION = "0.1.0"
