"""The payments package's exception root."""

from __future__ import annotations

from hub.errors import HubError


class PaymentError(HubError):
    """A payment authority refusal or failure (keys ``pay.*`` in ``protos/errors.py``)."""
