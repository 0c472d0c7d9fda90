"""The companion's worldlines: the forks waiting for the owner, a fork's diff, and its
commit and discard buttons (issue 20).

Every action is a call through the hub's gateway, as the brain's would be — the page never
touches a folder itself:

- ``GET /api/worldlines`` (scope ``timeline.read``): the open and kept forks of the hub's
  workspace (the ``worldlines`` package's ``list``).
- ``GET /api/worldlines/{package}/{id}?folder=F`` (``timeline.read``): the fork's diff
  (``worldlines``: ``show``; ``mac``: ``worldline_show`` of the Mac's allowed folder ``F``).
- ``POST /api/worldlines/{package}/{id}/commit`` (``approve``) with ``{"folder": F}``: the
  commit is an ``owner_data`` call the owner did not say in words, so the gateway answers
  with a consent card (``card_id``); the page signs it with its device key like every card
  (``/api/cards/{card}/prepare`` and ``/answer``), and only then the fork becomes current.
- ``POST /api/worldlines/{package}/{id}/discard`` (``utter``): the fork is thrown away.

Refusals are keys of :mod:`hub.web.texts` (``web.worldline_package``,
``web.worldline_failed``, ``web.gateway_down``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from hub.gateway.gateway import CallContext, Gateway, ToolCall
from hub.gateway.receipts import Receipt
from hub.web.errors import WebError
from hub.web.reminders import WebHooks
from sync.envelope import random_id


@dataclass(frozen=True)
class Tools:
    """One package's worldline tools, and whether they name the folder (the Mac's)."""

    show: str
    commit: str
    discard: str
    folder: bool


PACKAGES = {
    "worldlines": Tools("show", "commit", "discard", folder=False),
    "mac": Tools("worldline_show", "worldline_commit", "worldline_discard", folder=True),
}
"""the packages whose forks the page shows → their tools"""
OWNER = "owner"


def effect_json(r: Receipt) -> list[dict[str, Any]]:
    return [{"kind": e.kind, "target": e.target, "fields": dict(e.fields)} for e in r.effects]


class WorldlineRoutes:
    """The routes above; ``gateway``: the hub's (``None`` while it is down)."""

    def __init__(self, web: WebHooks, gateway: Callable[[], Gateway | None]) -> None:
        self.web = web
        self._gateway = gateway

    def routes(self) -> list[BaseRoute]:
        return [
            Route("/api/worldlines", self.list),
            Route("/api/worldlines/{package}/{fork_id}", self.show),
            Route("/api/worldlines/{package}/{fork_id}/commit", self.commit, methods=["POST"]),
            Route("/api/worldlines/{package}/{fork_id}/discard", self.discard, methods=["POST"]),
        ]

    async def _call(self, package: str, tool: str, args: dict[str, Any]) -> Receipt:
        gw = self._gateway()
        if gw is None:
            raise WebError("web.gateway_down", 503)
        cid = random_id("web-wl-")
        ctx = CallContext(owner=OWNER, scope="owner", trace_id=random_id("t-"))
        return await gw.call(ToolCall(package, tool, args, cid, cid), ctx)

    def _target(self, request: Request, folder: str) -> tuple[str, Tools, dict[str, Any]]:
        package = str(request.path_params["package"])[:40]
        tools = PACKAGES.get(package)
        if tools is None:
            raise WebError("web.worldline_package", 404, package=package)
        args: dict[str, Any] = {"id": str(request.path_params["fork_id"])[:128]}
        if tools.folder:
            args["folder"] = folder[:4096]
        return package, tools, args

    async def _posted(self, request: Request, scope: str) -> tuple[str, Tools, dict[str, Any]]:
        """The fork a POST from a page of this origin, holding ``scope``, names."""
        self.web.check_origin(request)
        self.web.scoped(request, scope)
        data = await self.web.body(request)
        folder = self.web.field(data, "folder", 4096) if "folder" in data else ""
        return self._target(request, folder)

    @staticmethod
    def _failed(r: Receipt) -> WebError:
        return WebError("web.worldline_failed", 409, code=r.error_code, reason=r.error[:300])

    async def list(self, request: Request) -> Response:
        self.web.scoped(request, "timeline.read")
        r = await self._call("worldlines", "list", {})
        if r.status != "succeeded":
            raise self._failed(r)
        forks = [e for e in effect_json(r) if e["kind"] == "worldline.fork"]
        return JSONResponse({"package": "worldlines", "forks": forks})

    async def show(self, request: Request) -> Response:
        self.web.scoped(request, "timeline.read")
        package, tools, args = self._target(request, request.query_params.get("folder", ""))
        r = await self._call(package, tools.show, args)
        if r.status != "succeeded" or not r.effects:
            raise self._failed(r)
        return JSONResponse({"id": args["id"], "diff": dict(r.effects[0].fields)})

    async def commit(self, request: Request) -> Response:
        package, tools, args = await self._posted(request, "approve")
        r = await self._call(package, tools.commit, args)
        if r.status not in ("waiting", "succeeded"):
            raise self._failed(r)
        self.web.pulse()
        return JSONResponse({"status": r.status, "card_id": r.card_id})

    async def discard(self, request: Request) -> Response:
        package, tools, args = await self._posted(request, "utter")
        r = await self._call(package, tools.discard, args)
        if r.status != "succeeded":
            raise self._failed(r)
        self.web.pulse()
        return JSONResponse({"status": r.status, "discarded": args["id"]})
