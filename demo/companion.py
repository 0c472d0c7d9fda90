"""The demo's phone companion in a browser: headless Chromium (Debian's, driven by
Playwright: no browser download) on the hub's web pages, as a process of its own.

``python -m demo.companion --url URL --name NAME --shots DIR --marker M`` launches the
browser (phone viewport) and then takes commands, one a line, on stdin:

- ``pair CODE``: pair the page as a ``phone`` device with the one-time code (the page makes
  its own non-extractable WebCrypto Ed25519 key); prints ``paired NAME``;
- ``approve CARD_ID``: open the cards view, wait for the card, save a screenshot of it
  (``DIR/phone-companion-card.png``; prints ``card CARD_ID shown TITLE``, ``screenshot
  PATH``), tap Approve (the page signs the card's action hash with its key) and print
  ``answered CARD_ID OUTCOME TEXT`` with what the page shows (on a failure the whole page is
  saved as ``DIR/phone-companion-failed.png``).

End of input (or SIGTERM) closes the browser, with every process of it, and exits 0. A
failure prints ``error: …`` and exits 1 (the demo reports the process's exit and log).

:func:`missing` tells the demo, without importing Playwright, whether a browser can run here.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import os
import signal
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CHROMIUM = "/usr/bin/chromium"
"""Debian's chromium (scripts/setup installs it)"""
WAIT_MS = 15_000
"""every wait in the page"""
SHOT = "phone-companion-card.png"
ERROR_SHOT = "phone-companion-failed.png"


@dataclass(frozen=True)
class Missing:
    """Why the demo cannot run the browser companion here."""

    what: str


def missing(
    find_spec: Callable[[str], object] = importlib.util.find_spec,
    exists: Callable[[str], bool] = os.path.exists,
    chromium: str = CHROMIUM,
) -> Missing | None:
    """What is missing for the browser companion (the playwright package, Debian's
    chromium), or None when both are here."""
    gone = [
        what
        for what, there in (
            ("the playwright package", find_spec("playwright") is not None),
            (f"Debian's chromium ({chromium})", exists(chromium)),
        )
        if not there
    ]
    return Missing(" and ".join(gone)) if gone else None


def say(line: str) -> None:
    print(line, flush=True)


async def commands() -> asyncio.StreamReader:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    return reader


async def passkey_holder(context: Any, page: Any) -> tuple[Any, str]:
    """A virtual platform authenticator that does user verification (Chrome DevTools'
    WebAuthn domain) for a passkey the page registers when asked; its CDP session and id.
    Without one, headless Chromium leaves a ``navigator.credentials`` call pending (the page
    takes no taps meanwhile). The demo pays nothing: it never sets up a passkey."""
    cdp = await context.new_cdp_session(page)
    await cdp.send("WebAuthn.enable")
    added = await cdp.send(
        "WebAuthn.addVirtualAuthenticator",
        {
            "options": {
                "protocol": "ctap2",
                "transport": "internal",
                "hasResidentKey": True,
                "hasUserVerification": True,
                "isUserVerified": True,
                "automaticPresenceSimulation": True,
            }
        },
    )
    return cdp, str(added["authenticatorId"])


async def pair(page: Any, url: str, code: str, name: str) -> None:
    await page.goto(url)
    await page.wait_for_selector("body[data-state=unpaired]")
    await page.fill("#pair-code", code)
    await page.fill("#pair-name", name)
    await page.click("#pair-submit")
    await page.wait_for_selector("body[data-state=signed-in]")
    say(f"paired {name}")


async def approve(page: Any, card_id: str, shots: Path) -> None:
    await page.click('nav [data-view="cards"]')
    card = page.locator(f'.card[data-card="{card_id}"]')
    await card.wait_for()
    title = " ".join(((await card.locator("h3").text_content()) or "").split())
    say(f"card {card_id} shown {title}")
    shot = shots / SHOT
    await card.screenshot(path=str(shot))
    say(f"screenshot {shot}")
    await page.evaluate("document.getElementById('card-outcome').removeAttribute('data-outcome')")
    await card.locator("button.approve").click()
    outcome = page.locator("#card-outcome[data-outcome]")
    await outcome.wait_for()
    state = await outcome.get_attribute("data-outcome")
    text = " ".join(((await outcome.text_content()) or "").split())
    say(f"answered {card_id} {state} {text}")


async def run(args: argparse.Namespace) -> int:
    from playwright.async_api import ViewportSize, async_playwright

    async with async_playwright() as pw:
        browser = await pw.chromium.launch(
            executable_path=CHROMIUM, args=["--no-sandbox", args.marker], headless=True
        )
        try:
            context = await browser.new_context(
                viewport=ViewportSize(width=390, height=844),
                device_scale_factor=2,
                is_mobile=True,
                has_touch=True,
            )
            context.set_default_timeout(WAIT_MS)
            page = await context.new_page()
            await passkey_holder(context, page)
            say(f"browser Chromium {browser.version} headless, phone viewport 390x844")
            reader = await commands()
            while line := (await reader.readline()).decode().split():
                verb, rest = line[0], line[1:]
                if verb == "pair" and rest:
                    await pair(page, args.url, rest[0], args.name)
                elif verb == "approve" and rest:
                    try:
                        await approve(page, rest[0], args.shots)
                    except Exception:  # what the page showed instead, for the reader
                        await page.screenshot(path=str(args.shots / ERROR_SHOT), full_page=True)
                        raise
                else:
                    say(f"error: unknown command {' '.join(line)!r}")
                    return 1
        finally:
            with contextlib.suppress(Exception):  # the driver may be gone already (SIGTERM)
                await browser.close()
    return 0


async def main(args: argparse.Namespace) -> int:
    task = asyncio.current_task()
    assert task is not None
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
    try:
        return await run(args)
    except asyncio.CancelledError:
        return 0
    except Exception as exc:
        say(f"error: {type(exc).__name__}: {' '.join(str(exc).split())[:300]}")
        return 1


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m demo.companion", description=__doc__)
    p.add_argument("--url", required=True, help="the hub's companion page")
    p.add_argument("--name", required=True, help="the device name to pair as")
    p.add_argument("--shots", type=Path, required=True, help="folder for the screenshot")
    p.add_argument("--marker", default="--yimi-demo", help="an argument to tag chromium with")
    return p.parse_args(argv)


if __name__ == "__main__":
    sys.exit(asyncio.run(main(parse())))
