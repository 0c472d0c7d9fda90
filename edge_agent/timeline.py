"""The timeline as a device sees it: its replicas' entries (in display order), then the
typed utterances still waiting in its outbox, which no replica holds yet (``seq`` None)."""

from __future__ import annotations

from protos import mesh_pb2
from provisioning.bundle import Bundle
from sync import documents as docs
from sync.outbox import Outbox
from sync.replicas import ReplicaSet


def device_timeline(bundle: Bundle) -> list[docs.Entry]:
    replicas = ReplicaSet(bundle.state_dir / "replicas")
    entries = replicas.timeline()
    known = {e.id for e in entries}
    outbox = Outbox(bundle.state_dir / "outbox.db")
    try:
        pending = [
            docs.Entry(
                item.id,
                bundle.device_id,
                item.created_ms,
                "utterance",
                mesh_pb2.Utterance.FromString(item.payload).text,
            )
            for item in outbox.pending()
            if item.kind == mesh_pb2.UTTERANCE and item.id not in known
        ]
    finally:
        outbox.close()
    return entries + pending
