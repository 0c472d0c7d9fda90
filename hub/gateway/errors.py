"""The gateway package's exception root."""

from __future__ import annotations

from protos.errors import YimiError


class GatewayError(YimiError):
    """A gateway, ledger, consent or audit refusal or failure."""
