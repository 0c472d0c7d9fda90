"""The web package's exception root."""

from __future__ import annotations

from typing import Any

from hub.errors import HubError


class WebError(HubError):
    """A refused web request: ``key`` names the text the page shows (:mod:`hub.web.texts`);
    ``status`` is the HTTP status it is answered with."""

    def __init__(self, key: str, status: int = 400, **fields: Any) -> None:
        super().__init__(key, **fields)
        self.status = status
