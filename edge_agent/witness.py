"""The audit witness (:mod:`sync.audit_head`): a device that sees the hub's audit head keeps
the highest signed one in ``state/audit-head.json`` (0600) and answers the hub's request
with it. A head below the kept one is logged as an error (the hub's log was rolled back)."""

from __future__ import annotations

import logging

from edge_agent.port import Handlers, SendToHub
from protos import consent_pb2, mesh_pb2
from provisioning.bundle import Bundle
from sync.audit_head import SignedHead, Witness
from sync.envelope import Opened
from sync.errors import SyncError

log = logging.getLogger(__name__)


def witness_handlers(bundle: Bundle, send: SendToHub) -> Handlers:
    witness = Witness(bundle.state_dir, bundle.hub_sign_pk)

    async def on_head(opened: Opened) -> None:
        msg = opened.payload
        assert isinstance(msg, consent_pb2.AuditHead)
        if msg.seq:
            seen = witness.see(SignedHead.from_proto(msg))
            if seen in ("older", "fork"):
                kept = witness.highest()
                log.error(
                    "the hub's audit head (seq %d) is %s than the one this device kept (seq %d):"
                    " its audit log was rolled back",
                    msg.seq,
                    "older" if seen == "older" else "not the same",
                    kept.seq if kept else 0,
                )
            elif seen == "invalid":
                log.warning("audit head not signed by the hub: ignored")
        if msg.request and (kept := witness.highest()) is not None:
            try:
                await send(mesh_pb2.AUDIT_HEAD, kept.to_proto())
            except SyncError as exc:
                log.info("audit head not sent to the hub: %s", exc)

    return {mesh_pb2.AUDIT_HEAD: on_head}
