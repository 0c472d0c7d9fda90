"""Activity: task events of background work on the timeline.

Sub-agents, tasks waiting for a card and tasks that finish after their turn was answered
become ``activity`` entries on the timeline, with the status of their receipts; the
timeline replicates them to every device, offline ones when they catch up. The entry id is
the task's and the state's, so an event seen twice writes one entry.
"""

from __future__ import annotations

import hashlib
import logging

from hub.brain import TaskEvent
from hub.timeline import HubStore
from hub.turns.admission import PublishFn
from protos.clock import now_ms
from sync import documents as docs
from sync.envelope import HUB

log = logging.getLogger(__name__)

ACTIVITY_KIND = "activity"


def _short(task_id: str) -> str:
    return hashlib.sha256(task_id.encode()).hexdigest()[:16]


def activity_text(event: TaskEvent) -> str:
    """The words of an event's activity entry: the task, its state, its receipts."""
    status = [
        f"{r.package}.{r.tool} {r.status}"
        + (" (card on your phone)" if r.status == "waiting" else "")
        for r in event.receipts
        if r.package and r.package != "brain"
    ]
    label = event.state.replace("_", " ")
    text = f"{event.title or 'task'} — {label}"
    if status:
        text += ": " + ", ".join(status[-4:])
    refused = [r.error for r in event.receipts if r.status == "not_executed" and r.error]
    if event.state == "failed" and refused:  # why the platform refused (the run's budget)
        text += f" ({refused[-1]})"
    return text


async def hub_entry(
    store: HubStore,
    publish: PublishFn,
    entry_id: str,
    kind: str,
    text: str,
    *,
    trace_id: str,
    meta: dict[str, object],
) -> bool:
    """Put an entry the hub words itself on the timeline, once by id, and replicate it;
    ``False`` when ``entry_id`` was already there."""
    now = now_ms()
    seq, fresh = store.append_entry(
        entry_id, device=HUB, kind=kind, text=text, ts_ms=now, trace_id=trace_id, meta=meta
    )
    if fresh:
        log.info("%s %s: %s", kind, entry_id, text)
        await publish([docs.Entry(entry_id, HUB, now, kind, text, seq)])
    return fresh


class Activity:
    def __init__(self, store: HubStore, *, publish: PublishFn) -> None:
        self.store = store
        self._publish = publish

    async def record(self, event: TaskEvent) -> None:
        """Put ``event`` on the timeline as an activity entry (once) and replicate it."""
        text = activity_text(event)
        await self.note(
            f"act-{_short(event.task_id)}-{event.state}",
            text,
            trace_id=event.trace_id,
            meta={
                "task": event.task_id,
                "parent": event.parent_id,
                "state": event.state,
                "device": event.device_id,
                "receipts": [
                    {"package": r.package, "tool": r.tool, "status": r.status, "card": r.card_id}
                    for r in event.receipts
                ],
            },
        )

    async def note(
        self, entry_id: str, text: str, *, trace_id: str, meta: dict[str, object]
    ) -> bool:
        """An activity entry the hub words itself (a scheduled run's outcome), once by id."""
        return await hub_entry(
            self.store, self._publish, entry_id, ACTIVITY_KIND, text, trace_id=trace_id, meta=meta
        )
