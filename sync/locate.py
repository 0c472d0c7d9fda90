"""Finding the pinned hub: an explicit address, the last good one, then zeroconf.

Whatever the source, a hub is accepted only after it signs a fresh nonce with the key
whose fingerprint the bundle pins (``Identify`` over gRPC); a hub with another key is
refused with :class:`SyncError` ``hub.fingerprint_mismatch``. The call itself runs over TLS
verified against the bundle's pinned CA (:mod:`sync.tls`): a hub whose certificate another
CA issued is refused before it is asked anything (``hub.tls_untrusted``).
"""

from __future__ import annotations

import json
import logging
import secrets
from dataclasses import asdict, dataclass
from pathlib import Path

import grpc
from nacl.exceptions import BadSignatureError
from nacl.signing import VerifyKey

from protos import mesh_pb2, mesh_pb2_grpc
from protos.codec import IDENTIFY_CONTEXT, parse, signing_input
from provisioning.identity import fingerprint, short_fingerprint
from storage.private import write_private
from sync import discovery
from sync.errors import SyncError
from sync.tls import ClientTls, rpc_error

log = logging.getLogger(__name__)

IDENTIFY_TIMEOUT_S = 2.0
"""seconds to wait for a hub's Identify answer"""


@dataclass(frozen=True)
class HubAddress:
    host: str
    grpc_port: int
    mqtt_port: int
    fingerprint: str


def parse_target(text: str, default_port: int) -> tuple[str, int]:
    """``HOST[:PORT]`` (IPv6 as ``[::1]:PORT``) → (host, port)."""
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        port = rest.lstrip(":")
    elif text.count(":") == 1:
        host, port = text.split(":")
    else:
        host, port = text, ""
    try:
        return host, int(port) if port else default_port
    except ValueError:
        raise SyncError("hub.unreachable", target=text, reason="port is not a number") from None


async def identify(
    host: str,
    grpc_port: int,
    *,
    pinned: str,
    tls: ClientTls,
    timeout: float = IDENTIFY_TIMEOUT_S,
) -> HubAddress:
    """Ask the hub at ``host:grpc_port`` to prove its key; check it against ``pinned``."""
    target = f"{host}:{grpc_port}"
    nonce = secrets.token_bytes(32)
    try:
        async with tls.channel(host, grpc_port) as channel:
            stub = mesh_pb2_grpc.HubStub(channel)
            resp = await stub.Identify(mesh_pb2.IdentifyRequest(nonce=nonce), timeout=timeout)
    except grpc.aio.AioRpcError as exc:
        raise rpc_error(exc, target) from None
    ident = parse(mesh_pb2.HubIdentity, resp.identity, 4096)
    if ident is None or ident.nonce != nonce:
        raise SyncError("hub.unreachable", target=target, reason="malformed identity")
    got = fingerprint(ident.hub_sign_pk)
    if got != pinned:
        raise SyncError(
            "hub.fingerprint_mismatch",
            target=target,
            got=short_fingerprint(got),
            pinned=short_fingerprint(pinned),
        )
    try:
        VerifyKey(ident.hub_sign_pk).verify(
            signing_input(IDENTIFY_CONTEXT, resp.identity), resp.signature
        )
    except (BadSignatureError, ValueError):
        raise SyncError(
            "hub.fingerprint_mismatch",
            target=target,
            got="(bad signature)",
            pinned=short_fingerprint(pinned),
        ) from None
    return HubAddress(host, grpc_port, ident.mqtt_port, got)


class HubLocator:
    """Finds the pinned hub and remembers the last good address in ``cache``."""

    def __init__(
        self,
        *,
        pinned: str,
        home_id: str,
        tls: ClientTls,
        explicit: str | None,
        hint: tuple[str, int] | None,
        cache: Path,
        browse_timeout: float = 3.0,
    ) -> None:
        self.pinned = pinned
        self.tls = tls
        self.home_id = home_id
        self.explicit = explicit
        self.hint = hint
        self.cache = cache
        self.browse_timeout = browse_timeout
        self.current: HubAddress | None = None

    async def locate(self) -> HubAddress:
        errors: list[str] = []
        untrusted: SyncError | None = None
        for host, port in self._candidates():
            try:
                found = await identify(host, port, pinned=self.pinned, tls=self.tls)
            except SyncError as exc:
                if exc.key == "tls.plaintext_not_loopback":
                    raise
                if exc.key == "hub.tls_untrusted":
                    untrusted = exc
                if exc.key in ("hub.fingerprint_mismatch", "hub.tls_untrusted"):
                    log.warning("%s", exc)
                    if self.explicit:
                        raise
                errors.append(str(exc))
                continue
            return self._remember(found)
        if self.explicit is None:
            adverts = await discovery.browse_hubs(
                timeout=self.browse_timeout, fingerprint=self.pinned, home_id=self.home_id
            )
            for ad in adverts:
                if ad.fingerprint != self.pinned:
                    continue
                try:
                    return self._remember(
                        await identify(ad.host, ad.grpc_port, pinned=self.pinned, tls=self.tls)
                    )
                except SyncError as exc:
                    log.warning("%s", exc)
                    errors.append(str(exc))
        where = f" at {self.explicit}" if self.explicit else " (zeroconf and known addresses)"
        if errors:
            log.info("hub not found: %s", "; ".join(errors))
        if untrusted is not None:  # the one hub we reached is not ours: say so
            raise untrusted
        raise SyncError("hub.not_found", fingerprint=short_fingerprint(self.pinned), where=where)

    def _candidates(self) -> list[tuple[str, int]]:
        if self.explicit is not None:
            return [parse_target(self.explicit, self.hint[1] if self.hint else 0)]
        out: list[tuple[str, int]] = []
        try:
            cached = json.loads(self.cache.read_text())
            out.append((str(cached["host"]), int(cached["grpc_port"])))
        except (OSError, ValueError, KeyError, TypeError):
            pass
        if self.hint and self.hint[0] and self.hint not in out:
            out.append(self.hint)
        return out

    def _remember(self, found: HubAddress) -> HubAddress:
        self.current = found
        try:
            write_private(self.cache, json.dumps(asdict(found)))
        except OSError as exc:
            log.debug("could not cache hub address: %s", exc)
        return found
