"""TLS to the hub, client side: every MQTT and gRPC connection verifies the hub against the
home's TLS CA that the bundle pins (:mod:`provisioning.tls`), and nothing else.

:class:`ClientTls` is made once per bundle (:meth:`ClientTls.for_bundle`) or for the hub's
own MQTT client (:meth:`ClientTls.pinned`), and gives gRPC channels
(:meth:`ClientTls.channel`, asking for the hub's stable TLS name) and the MQTT client's
:class:`ssl.SSLContext` (:meth:`ClientTls.ssl_context`: the chain is verified, the dialled
address is not — see :mod:`provisioning.tls`). A hub whose certificate another CA issued is
refused with :class:`SyncError` ``hub.tls_untrusted`` (:func:`rpc_error`).

Plaintext is for debugging on one machine: a hub run with ``--plaintext`` (bound to
127.0.0.1 only) is reached by devices started with ``YIMI_PLAINTEXT=1``
(:data:`PLAINTEXT_ENV`), and only at a loopback address (``tls.plaintext_not_loopback``
otherwise). A bundle written before TLS pins no CA: ``bundle.no_tls_ca`` (re-pair or
re-flash it).
"""

from __future__ import annotations

import ssl
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import grpc

from provisioning.tls import (
    PLAINTEXT_ENV,
    ensure_ca,
    is_loopback,
    plaintext_requested,
    tls_name,
)
from sync.errors import SyncError

if TYPE_CHECKING:
    from provisioning.bundle import Bundle
    from provisioning.home import Home

__all__ = [
    "PLAINTEXT_ENV",
    "ChannelOptions",
    "ClientTls",
    "is_loopback",
    "rpc_error",
    "tls_refusal",
]

ChannelOptions = Sequence[tuple[str, Any]]


@dataclass(frozen=True)
class ClientTls:
    """How this node talks to its hub: TLS pinned to ``ca_pem``, or plaintext (``ca_pem``
    ``None``, loopback only)."""

    ca_pem: bytes | None
    name: str
    """the hub's TLS name (:func:`provisioning.tls.tls_name`)"""

    @classmethod
    def pinned(cls, ca_pem: bytes, home_id: str) -> ClientTls:
        return cls(ca_pem, tls_name(home_id))

    @classmethod
    def for_home(cls, home: Home) -> ClientTls:
        """The hub's own clients (and tools on the hub machine): pinned to the home's CA."""
        return cls.pinned(ensure_ca(home.path, home.home_id), home.home_id)

    @classmethod
    def plaintext(cls, home_id: str) -> ClientTls:
        return cls(None, tls_name(home_id))

    @classmethod
    def for_bundle(cls, bundle: Bundle) -> ClientTls:
        """The bundle's pinned CA; plaintext when :data:`PLAINTEXT_ENV` asks for it. Raises
        ``bundle.no_tls_ca`` for a bundle that pins none (written before TLS)."""
        if plaintext_requested():
            return cls.plaintext(bundle.home_id)
        if bundle.tls_ca_pem is None:
            raise SyncError("bundle.no_tls_ca", path=bundle.path)
        return cls.pinned(bundle.tls_ca_pem, bundle.home_id)

    @property
    def secure(self) -> bool:
        return self.ca_pem is not None

    def check(self, host: str) -> None:
        """Refuse plaintext to anything but loopback."""
        if self.ca_pem is None and not is_loopback(host):
            raise SyncError("tls.plaintext_not_loopback", host=host)

    def channel(self, host: str, port: int, options: ChannelOptions = ()) -> grpc.aio.Channel:
        """A gRPC channel to the hub at ``host:port`` (TLS verified against the pinned CA)."""
        self.check(host)
        target = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        if self.ca_pem is None:
            return grpc.aio.insecure_channel(target, options=list(options))
        credentials = grpc.ssl_channel_credentials(root_certificates=self.ca_pem)
        opts = [*options, ("grpc.ssl_target_name_override", self.name)]
        return grpc.aio.secure_channel(target, credentials, options=opts)

    def ssl_context(self, host: str = "127.0.0.1") -> ssl.SSLContext | None:
        """The MQTT client's context for a broker at ``host`` (``None``: plaintext)."""
        self.check(host)
        if self.ca_pem is None:
            return None
        context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cadata=self.ca_pem.decode())
        context.check_hostname = False  # the chain is the pin (module doc)
        context.verify_mode = ssl.CERT_REQUIRED
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        return context


def tls_refusal(text: str) -> bool:
    """Whether an error's text says the hub's certificate failed verification."""
    return "CERTIFICATE_VERIFY_FAILED" in text or "certificate verify failed" in text


def rpc_error(exc: grpc.aio.AioRpcError, target: str) -> SyncError:
    """A failed call to the hub as a :class:`SyncError`: ``hub.tls_untrusted`` when the hub's
    certificate is not from the pinned CA, else ``hub.unreachable``."""
    details = exc.details() or ""
    if tls_refusal(details):
        return SyncError("hub.tls_untrusted", target=target)
    if "handshake" in details.lower():
        reason = "TLS handshake failed (a hub run with --plaintext? then YIMI_PLAINTEXT=1)"
        return SyncError("hub.unreachable", target=target, reason=reason)
    return SyncError("hub.unreachable", target=target, reason=exc.code().name.lower())
