"""The companion's reminders: list them, move one to another time, cancel one (issue 17).

``GET /api/reminders`` (scope ``timeline.read``): the owner's active reminders, soonest
first, each with its next time in the owner's zone (``at``: ``YYYY-MM-DDTHH:MM``).
``POST /api/reminders/{id}/move`` (scope ``utter``: a device that may ask for a reminder
may change one) with ``{"at": "YYYY-MM-DDTHH:MM"}`` — a recurring reminder keeps its days
and takes the time of day — and ``POST /api/reminders/{id}/cancel``. The same
:class:`~hub.schedule.reminders.ReminderDesk` the voice requests use; refusals are keys of
:mod:`hub.web.texts` (``web.reminder_unknown``, ``web.reminder_past``, ``web.reminders_off``).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from hub.brain.replies import spoken_when
from hub.schedule import recurrence
from hub.schedule.reminders import ReminderDesk, ReminderView
from hub.web.errors import WebError

MINUTE = "%Y-%m-%dT%H:%M"


def reminder_json(desk: ReminderDesk, view: ReminderView) -> dict[str, Any]:
    at = desk.at(view)
    return {
        "id": view.id,
        "what": view.what,
        "when": view.when,
        "next_ms": view.next_ms,
        "at": None if at is None else at.strftime(MINUTE),
        "recurring": view.recurring,
    }


@dataclass(frozen=True)
class WebHooks:
    """What the routes use of the web app (handed over by it)."""

    scoped: Callable[[Request, str], object]
    """the request's session if its device has the scope (else it raises a refusal)"""
    check_origin: Callable[[Request], None]
    body: Callable[[Request], Awaitable[dict[str, Any]]]
    field: Callable[[dict[str, Any], str, int], str]
    pulse: Callable[[], None]
    """wake the pages' event streams (the reminders changed)"""


class ReminderRoutes:
    """The routes above, on the web app's sessions; ``desk``: the hub's reminders (``None``:
    the hub runs without a scheduler)."""

    def __init__(self, web: WebHooks, desk: Callable[[], ReminderDesk | None]) -> None:
        self.web = web
        self._desk = desk

    def routes(self) -> list[BaseRoute]:
        return [
            Route("/api/reminders", self.list),
            Route("/api/reminders/{reminder_id}/move", self.move, methods=["POST"]),
            Route("/api/reminders/{reminder_id}/cancel", self.cancel, methods=["POST"]),
        ]

    def desk(self) -> ReminderDesk:
        desk = self._desk()
        if desk is None:
            raise WebError("web.reminders_off", 503)
        return desk

    def found(self, request: Request) -> tuple[ReminderDesk, ReminderView]:
        desk = self.desk()
        view = desk.get(str(request.path_params["reminder_id"])[:200])
        if view is None:
            raise WebError("web.reminder_unknown", 404)
        return desk, view

    async def list(self, request: Request) -> Response:
        self.web.scoped(request, "timeline.read")
        desk = self.desk()
        return JSONResponse(
            {
                "reminders": [reminder_json(desk, v) for v in desk.all()],
                "tz": desk.scheduler.tz,
            }
        )

    async def move(self, request: Request) -> Response:
        self.web.check_origin(request)
        self.web.scoped(request, "utter")
        data = await self.web.body(request)
        lang = "zh" if data.get("lang") == "zh" else "en"
        try:
            wall = dt.datetime.strptime(self.web.field(data, "at", 40), MINUTE)
        except ValueError:
            raise WebError("web.bad_request", reason="at") from None
        desk, view = self.found(request)
        now = desk.now()
        at = wall.replace(tzinfo=recurrence.zone(desk.scheduler.tz))
        rule, days = "", None
        if view.recurring:
            job = desk.scheduler.store.get(view.id)
            assert job is not None
            rule, days = (
                recurrence.at_time(job.rule, at.hour, at.minute),
                recurrence.days_of(job.rule),
            )
        elif at <= now:
            raise WebError("web.reminder_past", at=wall.strftime(MINUTE))
        spoken = spoken_when(None if rule else at, days, at.time(), now, lang)
        moved = desk.move(view, when=spoken, at=None if rule else at, rule=rule)
        if moved is None:
            raise WebError("web.reminder_unknown", 404)
        self.web.pulse()
        return JSONResponse({"reminder": reminder_json(desk, moved)})

    async def cancel(self, request: Request) -> Response:
        self.web.check_origin(request)
        self.web.scoped(request, "utter")
        desk, view = self.found(request)
        desk.cancel(view)
        self.web.pulse()
        return JSONResponse({"cancelled": view.id})
