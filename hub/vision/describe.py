"""A snapshot described by the configured ``vision`` model, when the owner allows it.

:func:`provider_describer` gives :class:`~hub.vision.service.Vision` its ``describer``: for
each snapshot it reads the model configuration (``HOME/brain/providers.db``) and asks the
first ``vision`` endpoint that may see it (:func:`hub.brain.providers.vision_route`: local,
or remote only with ``image:*`` in the owner's ``cloud_sources``) — else nothing is sent
and the local description (time, device, faces, people, text) is all there is.

What goes out is the JPEG and a fixed instruction: an OpenAI-compatible chat completion
with the image as ``{"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,…"}}``.
Never the face descriptors, the names recognised on it or the text read from it.
:class:`ChatDescriber` is blocking (a worker thread calls it).
"""

from __future__ import annotations

import base64
import json
import logging
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from typing import TYPE_CHECKING

from hub.vision.errors import VisionError

if TYPE_CHECKING:
    from hub.brain.providers import Endpoint, ProviderStore

log = logging.getLogger(__name__)

PROMPT = (
    "Describe this photo in one or two short sentences: the scene, objects and any "
    "visible text. Do not guess who people are."
)
MAX_RESPONSE_BYTES = 256 * 1024
MAX_WORDS_CHARS = 600
"""characters of the model's description kept"""
MAX_WAIT_S = 30.0
"""seconds a description may take (the photo's analysis is stored after it)"""

Describer = Callable[[bytes], str | None]
"""JPEG → a description, or ``None`` when no model may see it (blocking)"""


def completions_url(base_url: str) -> str:
    base = base_url.rstrip("/")
    if base.endswith("/chat/completions"):
        return base
    return base + ("/chat/completions" if base.endswith("/v1") else "/v1/chat/completions")


class ChatDescriber:
    """One ``vision`` endpoint: POSTs the JPEG to ``/v1/chat/completions``, reads the
    answer's first message. ``api_key``: decrypts the stored key for each request."""

    def __init__(self, endpoint: Endpoint, api_key: Callable[[], str] | None) -> None:
        self.endpoint = endpoint
        self.url = completions_url(endpoint.base_url)
        self.api_key = api_key
        self.timeout_s = min(endpoint.call_timeout_s, MAX_WAIT_S)

    def __call__(self, jpeg: bytes) -> str:
        image = "data:image/jpeg;base64," + base64.b64encode(jpeg).decode()
        body = {
            "model": self.endpoint.model,
            "max_tokens": min(self.endpoint.token_limit, 300),
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": PROMPT},
                        {"type": "image_url", "image_url": {"url": image}},
                    ],
                }
            ],
        }
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self.api_key is not None:
            headers["Authorization"] = "Bearer " + self.api_key()
        request = urllib.request.Request(
            self.url, data=json.dumps(body).encode(), headers=headers, method="POST"
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as r:
                raw = r.read(MAX_RESPONSE_BYTES + 1)
        except urllib.error.HTTPError as exc:
            raise self._error(f"HTTP {exc.code}") from None
        except (urllib.error.URLError, OSError) as exc:
            raise self._error(f"no answer: {getattr(exc, 'reason', exc)}") from None
        if len(raw) > MAX_RESPONSE_BYTES:
            raise self._error(f"answer over {MAX_RESPONSE_BYTES} bytes")
        try:
            answer = json.loads(raw)
            text = answer["choices"][0]["message"]["content"]
        except (ValueError, UnicodeDecodeError, KeyError, IndexError, TypeError):
            raise self._error("not a chat completion") from None
        if not isinstance(text, str) or not text.strip():
            raise self._error("an empty description")
        return " ".join(text.split())[:MAX_WORDS_CHARS]

    def _error(self, reason: str) -> VisionError:
        return VisionError("vision.describe_failed", url=self.url, reason=reason)


def provider_describer(open_store: Callable[[], ProviderStore]) -> Describer:
    """The describer of the hub's model configuration (see the module doc)."""
    from hub.brain.providers import vision_route

    def describe(jpeg: bytes) -> str | None:
        store = open_store()
        try:
            endpoint, skipped = vision_route(store.current())
            for why in skipped:
                log.info("snapshot description: %s", why)
            if endpoint is None:
                return None
            key_id = endpoint.key_id
            key = (lambda: store.api_key(key_id)) if key_id else None
            return ChatDescriber(endpoint, key)(jpeg)
        finally:
            store.close()

    return describe
