"""The sandbox payment provider: a real local HTTP service with a shop, a checkout, a payment
and a status API — a SANDBOX: no real money moves, ever.

API (JSON; amounts in minor units)::

    GET  /shops/{shop}/menu                  → {shop, payee, currency, items: [...]}
    POST /carts {shop}                       → cart
    POST /carts/{cart}/items {shop, item_id, quantity} → cart
    GET  /carts/{cart}                       → cart
    POST /carts/{cart}/checkout              → checkout {checkout_id, payee, total_minor, ...}
    GET  /checkouts/{id}                     → checkout (read back)
    POST /checkouts/{id}/pay {amount_minor, currency}, header Idempotency-Key
         200 paid · 402 declined · 409 price_changed (with the new total) / already_paid
         · 422 key reused for another payment · 504 timed out (not charged)
    GET  /payments/{idempotency_key}         → {state: paid|processing|failed|not_found, ...}

Controls (tests and demos; ``POST /_sandbox/control`` or the Python methods)::

    {"pay_mode": "ok"|"fail"|"timeout"|"late", "hang_s": 3.0, "times": 1}
        fail    — decline the next ``times`` payments (not charged)
        timeout — hold the next payments ``hang_s`` then answer 504, not charged
        late    — hold them ``hang_s`` (the client gives up), then charge: "succeeds late"
    {"set_price": {"checkout_id": ..., "total_minor": ...}}  — the shop changes the price
    GET /_sandbox/charges                    → every charge made

Run one by hand: ``python -m packages.errands.sandbox --port 18890``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

from packages.errands.provider import ProviderError, ShopBook, to_json

log = logging.getLogger(__name__)

MAX_BODY = 64 * 1024
PAY_MODES = ("ok", "fail", "timeout", "late")
STATUS_OF = {
    "PRICE_CHANGED": (409, "price_changed"),
    "ALREADY_PAID": (409, "already_paid"),
    "DECLINED": (402, "declined"),
    "NOT_FOUND": (404, "not_found"),
    "KEY_REUSED": (422, "key_reused"),
    "BAD_REQUEST": (400, "bad_request"),
}


class SandboxShop:
    """The sandbox provider on ``127.0.0.1`` (a free port unless given), in its own threads.

    An async context manager (like the other test worlds); ``start``/``stop`` for plain
    code. ``env()`` points the ``errands`` package at it."""

    def __init__(self, *, port: int = 0, host: str = "127.0.0.1", pay_timeout: float = 2.0):
        self.book = ShopBook()
        self.host = host
        self._port = port
        self.pay_timeout = pay_timeout
        self.mode = "ok"
        self.hang_s = 3.0
        self.times = 0
        self.requests: list[tuple[str, str]] = []
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ lifecycle
    @property
    def port(self) -> int:
        assert self._server is not None
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def env(self) -> dict[str, str]:
        return {
            "YIMI_PROVIDER_URL": self.url,
            "YIMI_PAY_TIMEOUT": str(self.pay_timeout),
        }

    def start(self) -> SandboxShop:
        shop = self

        class Handler(_Handler):
            sandbox = shop

        self._server = ThreadingHTTPServer((self.host, self._port), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="sandbox-shop", daemon=True
        )
        self._thread.start()
        log.info("sandbox payment provider (no real money) on %s", self.url)
        return self

    def stop(self) -> None:
        self._closing.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=10)

    async def __aenter__(self) -> SandboxShop:
        return await asyncio.to_thread(self.start)

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await asyncio.to_thread(self.stop)

    # ------------------------------------------------------------------ controls
    def control(
        self,
        *,
        pay_mode: str | None = None,
        hang_s: float | None = None,
        times: int = 1,
        set_price: dict[str, Any] | None = None,
    ) -> None:
        with self._lock:
            if pay_mode is not None:
                if pay_mode not in PAY_MODES:
                    raise ValueError(f"pay_mode must be one of {PAY_MODES}")
                self.mode, self.times = pay_mode, times if pay_mode != "ok" else 0
            if hang_s is not None:
                self.hang_s = float(hang_s)
        if set_price is not None:
            self.book.set_price(str(set_price["checkout_id"]), int(set_price["total_minor"]))

    def set_price(self, checkout_id: str, total_minor: int) -> None:
        self.book.set_price(checkout_id, total_minor)

    def charges(self) -> list[dict[str, Any]]:
        with self.book.lock:
            return list(self.book.charges)

    def _next_mode(self) -> tuple[str, float]:
        with self._lock:
            if self.times <= 0:
                return "ok", 0.0
            self.times -= 1
            return self.mode, self.hang_s

    # ------------------------------------------------------------------ payment
    def pay(self, checkout_id: str, body: dict[str, Any], key: str) -> tuple[int, dict[str, Any]]:
        amount, currency = int(body.get("amount_minor", 0)), str(body.get("currency", ""))
        earlier = self.book.begin(checkout_id, amount, currency, key)
        if earlier is not None:
            return 200, to_json(earlier)
        mode, hang = self._next_mode()
        if mode == "fail":
            r = self.book.settle(key, "failed", "declined by the sandbox")
            return 402, {"error": "declined", "message": r.reason}
        if mode in ("timeout", "late"):
            self._closing.wait(hang)
            if mode == "timeout":
                self.book.settle(key, "failed", "timed out at the provider, not charged")
                return 504, {"error": "timeout", "message": "the provider timed out"}
            return 200, to_json(self.book.settle(key, "paid"))
        return 200, to_json(self.book.settle(key, "paid"))


ROUTES: list[tuple[str, re.Pattern[str], str]] = [
    ("GET", re.compile(r"^/shops$"), "shops"),
    ("GET", re.compile(r"^/shops/([\w.-]{1,64})/menu$"), "menu"),
    ("POST", re.compile(r"^/carts$"), "new_cart"),
    ("POST", re.compile(r"^/carts/([\w.-]{1,64})/items$"), "add"),
    ("GET", re.compile(r"^/carts/([\w.-]{1,64})$"), "cart"),
    ("POST", re.compile(r"^/carts/([\w.-]{1,64})/checkout$"), "checkout"),
    ("GET", re.compile(r"^/checkouts/([\w.-]{1,64})$"), "read"),
    ("POST", re.compile(r"^/checkouts/([\w.-]{1,64})/pay$"), "pay"),
    ("GET", re.compile(r"^/payments/([\w.:-]{1,128})$"), "status"),
    ("POST", re.compile(r"^/_sandbox/control$"), "control"),
    ("GET", re.compile(r"^/_sandbox/charges$"), "charges"),
]


class _Handler(BaseHTTPRequestHandler):
    sandbox: SandboxShop
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("sandbox: " + format, *args)

    def _send(self, status: int, payload: dict[str, Any] | list[Any]) -> None:
        data = json.dumps(payload).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except OSError:  # the client gave up (a timeout it chose)
            pass

    def _body(self) -> dict[str, Any]:
        n = int(self.headers.get("Content-Length") or 0)
        if n > MAX_BODY:
            raise ProviderError("BAD_REQUEST", "body too large")
        raw = self.rfile.read(n) if n else b""
        try:
            data = json.loads(raw) if raw else {}
        except ValueError:
            raise ProviderError("BAD_REQUEST", "body is not JSON") from None
        if not isinstance(data, dict):
            raise ProviderError("BAD_REQUEST", "body is not an object")
        return data

    def _route(self, method: str) -> None:
        path = self.path.split("?", 1)[0]
        found = next(
            (
                (name, mt)
                for m, pattern, name in ROUTES
                if m == method and (mt := pattern.match(path))
            ),
            None,
        )
        if found is None:
            self._send(404, {"error": "not_found", "message": f"no route {method} {path}"})
            return
        name, match = found
        shop = self.sandbox
        book = shop.book
        with shop._lock:
            shop.requests.append((method, path))
        arg = match.group(1) if match.groups() else ""
        try:
            body = self._body() if method == "POST" else {}
            if name == "shops":
                self._send(200, {"shops": [to_json(x) for x in book.listing()]})
            elif name == "menu":
                self._send(200, to_json(book.menu(arg)))
            elif name == "new_cart":
                self._send(200, to_json(book.new_cart(str(body.get("shop", "")))))
            elif name == "add":
                cart = book.add_to_cart(
                    str(body.get("shop", "")),
                    str(body.get("item_id", "")),
                    int(body.get("quantity", 1)),
                    arg,
                )
                self._send(200, to_json(cart))
            elif name == "cart":
                self._send(200, to_json(book.cart(arg)))
            elif name == "checkout":
                self._send(200, to_json(book.checkout(arg)))
            elif name == "read":
                self._send(200, to_json(book.read_checkout(arg)))
            elif name == "pay":
                status, payload = shop.pay(arg, body, self.headers.get("Idempotency-Key", ""))
                self._send(status, payload)
            elif name == "status":
                self._send(200, to_json(book.status(arg)))
            elif name == "control":
                shop.control(
                    pay_mode=body.get("pay_mode"),
                    hang_s=body.get("hang_s"),
                    times=int(body.get("times", 1)),
                    set_price=body.get("set_price"),
                )
                self._send(200, {"ok": True})
            else:
                self._send(200, {"charges": shop.charges()})
        except ProviderError as exc:
            status, error = STATUS_OF.get(exc.code, (400, "bad_request"))
            self._send(status, {"error": error, "message": exc.reason, **exc.data})
        except (ValueError, TypeError, KeyError) as exc:
            self._send(400, {"error": "bad_request", "message": str(exc)[:300]})

    def do_GET(self) -> None:
        self._route("GET")

    def do_POST(self) -> None:
        self._route("POST")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="the sandbox payment provider (no real money)")
    p.add_argument("--port", type=int, default=18890)
    p.add_argument("--host", default="127.0.0.1")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO)
    shop = SandboxShop(port=args.port, host=args.host).start()
    print(f"sandbox payment provider (no real money) on {shop.url}", flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        shop.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
