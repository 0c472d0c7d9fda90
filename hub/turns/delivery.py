"""Delivery: every reply the hub sends, and the devices' ACKs.

The brain's reply chunks (whole sentences) and the hub's own words (an utterance it could
not use, a turn cut off by a restart, a task's late report) go to the device the sentence
came from as ``REPLY`` messages with ``chunk``/``final`` — all through
:meth:`Delivery.deliver`. Each chunk is kept in ``hub.db`` until the device ACKs it
(``RENDERED`` or ``PLAYED``) and is sent again when the device comes back online. The final
chunk puts the whole reply on the timeline. When every chunk of a reply is ACKed its facts
count as said (``gateway.delivered``); before that they stay new, and come back in the next
report.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import NamedTuple

from google.protobuf.message import Message

from hub.gateway import Gateway
from hub.timeline import Admitted, Chunk, HubStore, ReplayState, StoredReply
from hub.turns.admission import HoldFn
from protos import mesh_pb2
from protos.clock import now_ms
from sync import documents as docs
from sync.envelope import HUB, Opened

log = logging.getLogger(__name__)

MAX_ACK_CHUNKS = 256
"""chunks one ACK may be for (a reply's sentences; far more than any reply has)"""

HUB_BRAIN = "hub"
"""``Reply.brain`` of words the hub itself wrote (not the brain's)"""

SendFn = Callable[[str, int, Message, str | None], Awaitable[object]]
"""(device, kind, message, trace id): seal and publish to one device (raises if it fails)"""


def reply_id_for(utterance_id: str) -> str:
    """The id of the reply to ``utterance_id`` (the same after a restart)."""
    return "r-" + hashlib.sha256(utterance_id.encode()).hexdigest()[:24]


def report_id_for(task_id: str) -> str:
    return "rp-" + hashlib.sha256(task_id.encode()).hexdigest()[:24]


class Piece(NamedTuple):
    """One chunk of a reply to be kept and sent."""

    text: str
    final: bool
    task_id: str
    brain: str
    intent: str = ""
    """what the brain understood the turn as (recorded on the utterance with the reply)"""


class Delivery:
    def __init__(
        self,
        store: HubStore,
        *,
        send: SendFn,
        hold: HoldFn,
        commit: Callable[[Opened], ReplayState | None],
        gateway: Callable[[], Gateway | None],
    ) -> None:
        self.store = store
        self._send = send
        self._hold = hold
        """a finished reply's timeline entry, to be written and broadcast soon, with the
        entries of turns that finish close to it (:mod:`hub.mesh.entry_batch`)"""
        self._commit = commit
        self._gateway = gateway

    async def deliver(
        self, adm: Admitted, reply_id: str, pieces: Sequence[Piece], *, start: int = 0
    ) -> None:
        """Keep and send ``pieces`` (from chunk index ``start``; those made together, kept
        in one transaction) of the reply to ``adm``; the final one puts the whole reply on
        the timeline — held to fly soon, after it is sent: the device that asked hears the
        reply without waiting for the timeline's broadcast, nor does its next turn. The
        whole reply is in ``hub.db`` with its final chunk before the chunk leaves, and a
        hub that stops before the broadcast writes it into the documents when it starts
        again."""
        made = [
            Chunk(
                reply_id,
                i,
                adm.device,
                adm.utterance_id,
                p.task_id,
                p.text,
                p.final,
                p.brain,
                adm.trace_id,
                adm.seq,
            )
            for i, p in enumerate(pieces, start)
        ]
        # the chunks, and with the final one the whole reply, in one transaction; from
        # chunk 0 there are no earlier chunks, else the store reads them
        kept, stored = self.store.keep_chunks(
            made, [] if start == 0 else None, intent=pieces[-1].intent
        )
        for c in kept:
            await self.send_chunk(c)
        if stored is not None:
            entry = docs.Entry(stored.id, HUB, now_ms(), "reply", stored.text, stored.reply_seq)
            self._hold([entry])

    async def send_chunk(self, c: Chunk) -> None:
        msg = mesh_pb2.Reply(
            id=c.reply_id,
            utterance_id=c.utterance_id,
            text=c.text,
            seq=c.utterance_seq,
            reply_seq=c.reply_seq,
            chunk=c.index,
            final=c.final,
            task_id=c.task_id,
            brain=c.brain,
        )
        try:
            await self._send(c.device, mesh_pb2.REPLY, msg, c.trace_id or None)
        except Exception as exc:  # sent again when the device is back online
            log.info("reply %s.%d to %s not sent now: %s", c.reply_id, c.index, c.device, exc)

    async def resend_chunks(self, reply_id: str) -> None:
        """The chunks of a reply made so far, again (a repeat while it is being made)."""
        for c in self.store.chunks(reply_id):
            await self.send_chunk(c)

    async def resend_reply(self, reply: StoredReply) -> None:
        chunks = self.store.chunks(reply.id)
        if not chunks:  # a reply from before chunks were kept
            chunks = [
                Chunk(
                    reply.id,
                    0,
                    reply.device,
                    reply.utterance_id,
                    "",
                    reply.text,
                    True,
                    HUB_BRAIN,
                    reply.trace_id,
                    reply.utterance_seq,
                    reply.reply_seq,
                )
            ]
        for c in chunks:
            await self.send_chunk(c)

    async def resend(self, device: str) -> None:
        """``device`` came online: every chunk it has not ACKed, again."""
        for c in self.store.unacked_chunks(device):
            await self.send_chunk(c)
        for reply in self.store.unacked_replies(device):
            if not self.store.chunks(reply.id):
                await self.resend_reply(reply)

    async def on_ack(self, opened: Opened) -> None:
        """A device ACKed one or more chunks of a reply (``chunk`` and ``more_chunks``); a
        reply whose chunks are all ACKed has said its facts. An ACK that lists more than
        :data:`MAX_ACK_CHUNKS` chunks is refused whole (``rejected.ack_too_many_chunks``);
        its counter is still taken (a replay of it is refused too)."""
        ack = opened.payload
        assert isinstance(ack, mesh_pb2.DeliveryAck)
        state = mesh_pb2.DeliveryState.Name(ack.state).lower() if ack.state else "rendered"
        replay = self._commit(opened)
        listed = 1 + len(ack.more_chunks)
        if listed > MAX_ACK_CHUNKS:
            log.warning(
                "ACK from %s lists %d chunks (more than %d): refused",
                opened.sender,
                listed,
                MAX_ACK_CHUNKS,
            )
            self.store.refuse("rejected.ack_too_many_chunks", replay)
            return
        chunks = tuple(dict.fromkeys((ack.chunk, *ack.more_chunks)))
        await self._acked(
            ack.reply_id[:128], opened.sender, state, ack.at_ms or opened.time_ms, replay, chunks
        )

    async def rendered_on_page(self, device: str, reply_id: str) -> bool:
        """The hub's own web page showed the reply to ``device`` (the browser whose session
        asked): each of its chunks for that device is ACKed ``rendered`` (no envelope, so
        no counter). ``False`` when the reply was not sent to ``device``."""
        chunks = [c.index for c in self.store.chunks(reply_id[:128]) if c.device == device]
        if chunks:
            await self._acked(reply_id[:128], device, "rendered", now_ms(), None, chunks)
        return bool(chunks)

    async def _acked(
        self,
        reply_id: str,
        sender: str,
        state: str,
        at_ms: int,
        replay: ReplayState | None,
        chunks: Sequence[int],
    ) -> None:
        got = self.store.record_chunks_delivery(reply_id, sender, state, at_ms, replay, chunks)
        if got.fresh:
            log.debug("reply %s chunks %s %s on %s", reply_id, chunks, state, sender)
        gw = self._gateway()
        if got.complete and got.task_id and gw is not None:
            receipts = gw.ledger.task_receipts(got.task_id)
            gw.delivered(got.task_id, receipts)
            if receipts:
                log.info(
                    "reply %s %s on %s: facts of task %s said",
                    reply_id,
                    state,
                    sender,
                    got.task_id,
                )
