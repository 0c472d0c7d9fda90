"""The provisioning package's exception root."""

from __future__ import annotations

from protos.errors import YimiError


class ProvisioningError(YimiError):
    """Identity, profile, bundle, certificate or pairing problem."""
