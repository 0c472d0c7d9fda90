"""The phone companion and dashboard in a real browser: Debian's chromium driven by
Playwright (no browser download), against the hub in this process (its real mosquitto,
gRPC, gateway, brain and the web pages on their own port).

- a browser pairs as a ``phone`` with a one-time code (its WebCrypto Ed25519 key), types a
  request and sees the reply; approves the first-send e-mail card → the local SMTP server
  gets the mail exactly once; a second card is denied, a third expires; revoking the
  browser logs it out;
- a payment card approved through a virtual WebAuthn authenticator with user verification
  is paid once; without user verification it is refused and nothing is paid; the dashboard
  lists the devices and the refusal counters.

Each test saves phone (390×844) and desktop screenshots under its tmp dir.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import re
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from demo.companion import CHROMIUM, passkey_holder
from hub.gateway import CallContext, ToolCall
from hub.mesh.daemon import HubDaemon
from hub.payments import PaymentRequest, VoiceEvidence
from packages.errands.sandbox import SandboxShop
from storage.sqlite import read_rows
from tests.mesh_harness import Mesh
from tests.pay_kit import now_ms
from tests.waiting import poll
from worlds import ports
from worlds.fakes import SmtpWorld

pytestmark = pytest.mark.slow

_missing = [
    what
    for what, there in (
        ("the playwright package", importlib.util.find_spec("playwright") is not None),
        (f"Debian's chromium ({CHROMIUM})", os.path.exists(CHROMIUM)),
    )
    if not there
]
if _missing:  # scripts/setup installs both; in CI a missing one fails, never skips
    if os.environ.get("CI"):
        raise RuntimeError(f"browser tests need {', '.join(_missing)}: run scripts/setup")
    pytest.skip(f"{', '.join(_missing)} not installed (scripts/setup)", allow_module_level=True)

from playwright import async_api as playwright_api  # noqa: E402
from playwright.async_api import (  # noqa: E402
    BrowserContext,
    CDPSession,
    Page,
    ViewportSize,
)

PHONE = ViewportSize(width=390, height=844)
DESKTOP = ViewportSize(width=1280, height=800)
WAIT_MS = 15_000
"""every browser wait's deadline"""
MAIL = "e-mail the meeting notes to my colleague"
OFFLINE_WORDS = "what time is it"
DOCS = Path(__file__).resolve().parent.parent / "docs"


# ---------------------------------------------------------------- helpers
def chromium_pids(marker: str) -> list[int]:
    """Processes whose command line carries ``marker`` (this test's browser)."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if marker.encode() in cmd:
            found.append(int(pid))
    return found


@dataclass
class Browser:
    phone: Page
    """the phone-sized page"""
    context: BrowserContext
    cdp: CDPSession
    authenticator: str
    shots: Path

    async def shot(self, page: Page, name: str) -> Path:
        path = self.shots / f"{name}.png"
        await page.screenshot(path=str(path), full_page=True)
        return path


@asynccontextmanager
async def browser(tmp_path: Path) -> AsyncIterator[Browser]:
    """Chromium (headless, phone viewport) with a virtual platform authenticator that does
    user verification; closed, with every process of it, on the way out."""
    marker = f"--yimi-test={uuid.uuid4().hex}"
    shots = tmp_path / "screenshots"
    shots.mkdir(exist_ok=True)
    log = shots / "console.log"

    def note(line: str) -> None:  # the pages' console, for a failing test's reader
        with log.open("a") as f:
            f.write(line + "\n")

    async with playwright_api.async_playwright() as pw:
        b = await pw.chromium.launch(
            executable_path=CHROMIUM, args=["--no-sandbox", marker], headless=True
        )
        try:
            context = await b.new_context(
                viewport=PHONE, device_scale_factor=2, is_mobile=True, has_touch=True
            )
            context.set_default_timeout(WAIT_MS)
            context.on("console", lambda m: note(f"{m.type}: {m.text}"))
            context.on("weberror", lambda e: note(f"error: {e.error}"))
            page = await context.new_page()
            cdp, authenticator = await passkey_holder(context, page)
            yield Browser(page, context, cdp, authenticator, shots)
        finally:
            await b.close()
    await poll(lambda: not chromium_pids(marker), 10, "chromium to exit")


async def pair_browser(mesh: Mesh, br: Browser, url: str, name: str = "browser-phone") -> None:
    code = await asyncio.to_thread(mesh.yimi, "hub", "pair-code", "--home", str(mesh.home))
    page = br.phone
    await page.goto(url)
    await page.wait_for_selector("body[data-state=unpaired]")
    await page.fill("#pair-code", code.stdout.strip())
    await page.fill("#pair-name", name)
    await page.click("#pair-submit")
    await page.wait_for_selector("body[data-state=signed-in]")
    # no passkey until asked for: the authenticator holds nothing yet
    await page.wait_for_selector("body[data-passkey=no]", state="attached")
    held = await br.cdp.send("WebAuthn.getCredentials", {"authenticatorId": br.authenticator})
    assert held["credentials"] == []
    await page.click("#passkey-setup")
    await page.wait_for_selector("body[data-passkey=yes]", state="attached")
    held = await br.cdp.send("WebAuthn.getCredentials", {"authenticatorId": br.authenticator})
    assert len(held["credentials"]) == 1


def enrolled(mesh: Mesh, name: str) -> tuple[str, str]:
    """(profile, enrolled_by) of a device, read from the registry."""
    (row,) = read_rows(
        mesh.home / "registry.db", "SELECT profile, enrolled_by FROM devices WHERE name=?", name
    )
    return str(row[0]), str(row[1])


def device_id(mesh: Mesh, name: str) -> str:
    ((found,),) = read_rows(
        mesh.home / "registry.db", "SELECT device_id FROM devices WHERE name=?", name
    )
    return str(found)


def utterances(mesh: Mesh, words: str) -> int:
    return len(mesh.hub_query("SELECT 1 FROM timeline WHERE kind='utterance' AND text=?", words))


def keep_for_readme(path: Path, name: str) -> None:
    if os.environ.get("YIMI_DOCS_SHOTS"):
        DOCS.mkdir(exist_ok=True)
        (DOCS / name).write_bytes(path.read_bytes())


def prepare_mail(mesh: Mesh, smtp: SmtpWorld) -> None:
    mesh.prepare_mail(
        smtp,
        [
            {"name": "Dana Lee", "email": "dana@example.org", "aliases": ["colleague"]},
            {"name": "Sam Lee", "email": "sam@example.org", "aliases": ["brother"]},
            {"name": "Kim Lee", "email": "kim@example.org", "aliases": ["sister"]},
        ],
    )


async def say_in_browser(page: Page, words: str) -> None:
    await page.fill("#chat-input", words)
    await page.click("#chat-send")


async def trust_me(page: Page) -> tuple[str, bool]:
    """Tap "it's me for the next minute": (outcome, whether the page was blocked while the
    authenticator asked and free again after)."""
    await page.evaluate("document.getElementById('me-outcome').removeAttribute('data-outcome')")
    await page.click("#trust-me")
    out = page.locator("#me-outcome[data-outcome]")
    await out.wait_for()
    free = not await page.evaluate("document.getElementById('app').inert")
    return await out.get_attribute("data-outcome") or "", free


async def poll_text(page: Page, selector: str, want: str) -> None:
    """Wait until the element at ``selector`` says ``want`` (the page re-renders it)."""
    await page.wait_for_function(
        "([sel, want]) => document.querySelector(sel)?.textContent === want", arg=[selector, want]
    )


async def answer_card(page: Page, title_part: str, button: str) -> str:
    """Click ``button`` (approve | deny) on the card whose title has ``title_part``; the
    outcome the page shows."""
    await page.click('nav [data-view="cards"]')
    card = page.locator(".card", has_text=title_part)
    await card.wait_for()
    await page.evaluate("document.getElementById('card-outcome').removeAttribute('data-outcome')")
    await card.locator(f"button.{button}").click()
    # an approval runs the action before it answers (a package call: slow on a loaded machine)
    await page.wait_for_selector("#card-outcome[data-outcome]", timeout=WAIT_MS * 2)
    text = await page.text_content("#card-outcome")
    return text or ""


# ---------------------------------------------------------------- e-mail cards
async def test_browser_phone_pairs_chats_answers_cards_and_is_logged_out(mesh: Mesh) -> None:
    web_port = ports.port()
    url = f"http://localhost:{web_port}/"
    async with SmtpWorld() as smtp:
        prepare_mail(mesh, smtp)
        async with mesh.hub_in_process(web_port=web_port) as hub, browser(mesh.root) as br:
            page = br.phone
            await pair_browser(mesh, br, url)
            assert enrolled(mesh, "browser-phone") == ("phone", "pair-web")
            key = await page.evaluate(
                """async () => { const r = indexedDB.open('yimi-device');
                  await new Promise(ok => r.onsuccess = ok);
                  const d = await new Promise(ok => { const q = r.result.transaction('device')
                    .objectStore('device').get('self'); q.onsuccess = () => ok(q.result); });
                  return [d.sign.type, d.sign.extractable, d.sign.algorithm.name]; }"""
            )
            assert key == ["private", False, "Ed25519"], key

            # a typed request as this device; the reply arrives live
            await say_in_browser(page, MAIL)
            reply = page.locator("#chat-log .entry.reply", has_text="need your approval")
            await reply.wait_for()
            ((device,),) = mesh.hub_query("SELECT device FROM timeline WHERE text=?", MAIL)
            # shown on the page: ACKed "rendered" by this device
            await poll(
                lambda: mesh.hub_query("SELECT state FROM deliveries WHERE device=?", device),
                10,
                "the reply ACKed rendered",
            )
            assert mesh.hub_query("SELECT state FROM deliveries WHERE device=?", device) == [
                ("rendered",)
            ]
            assert smtp.messages() == []
            shot = await br.shot(page, "companion-chat-phone")
            keep_for_readme(shot, "companion-chat.png")

            # the first-send card, approved by a signature made in the browser
            await page.click('nav [data-view="cards"]')
            await page.locator(".card", has_text="dana@example.org").wait_for()
            shot = await br.shot(page, "companion-card-phone")
            keep_for_readme(shot, "companion-card.png")
            outcome = await answer_card(page, "dana@example.org", "approve")
            assert "Approved" in outcome, outcome
            await poll(lambda: smtp.messages(), 20, "the e-mail at the SMTP server")
            await page.locator("#chat-log .entry.reply", has_text="Sent the e-mail").wait_for(
                state="attached"
            )
            (mail,) = smtp.messages()
            assert mail.recipients == ["dana@example.org"]

            # a second card, denied: nothing sent
            await page.click('nav [data-view="chat"]')
            await say_in_browser(page, "e-mail the meeting notes to my brother")
            outcome = await answer_card(page, "sam@example.org", "deny")
            assert "Denied" in outcome, outcome

            # a third card expires before it is answered: the hub cancels it, the page drops
            # it, and an answer to it still in a page is refused
            await page.click('nav [data-view="chat"]')
            await say_in_browser(page, "e-mail the meeting notes to my sister")
            await page.click('nav [data-view="cards"]')
            shown_card = page.locator(".card", has_text="kim@example.org")
            await shown_card.wait_for()
            gw = hub.consent.gateway
            assert gw is not None
            (card,) = [c for c in gw.consent.pending() if "kim@" in c.target]
            gw.consent.db.execute(
                "UPDATE cards SET expires_ms=? WHERE card_id=?", (now_ms() - 1, card.card_id)
            )
            await poll(
                lambda: gw.consent.card(card.card_id).state == "expired",  # type: ignore[union-attr]
                10,
                "the hub to expire the card",
            )
            await shown_card.wait_for(state="detached")
            cancelled = page.locator("#chat-log .entry.reply", has_text="Cancelled")
            await cancelled.filter(has_text="kim@example.org").wait_for(state="attached")
            stale = {
                "card_id": card.card_id,
                "payment": False,
                "action_hash": card.action_hash.hex(),
            }
            refused = await page.evaluate(
                """async card => { const m = await import('/static/device.js');
                  try { await m.answerCard(await m.loadDevice(), card, 'approve'); return 'ok'; }
                  catch (e) { return e.body ? e.body.error : String(e); } }""",
                stale,
            )
            assert refused == "web.card_unknown", refused
            assert [m.recipients for m in smtp.messages()] == [["dana@example.org"]]
            await br.shot(page, "companion-expired-phone")

            # offline: the typed message waits in the outbox; a reload shows the service
            # worker's page with the timeline this phone has; back online it is sent once
            await br.context.set_offline(True)
            await page.click('nav [data-view="chat"]')
            await say_in_browser(page, OFFLINE_WORDS)
            queued = page.locator("#chat-log .pending", has_text=OFFLINE_WORDS)
            await queued.wait_for()
            queued_id = await queued.get_attribute("data-pending")
            await page.reload()
            await page.wait_for_selector("body[data-state=offline]")
            await page.locator("#chat-log .entry.reply", has_text="Sent the e-mail").wait_for()
            await queued.wait_for()
            await br.shot(page, "companion-offline-phone")
            assert utterances(mesh, OFFLINE_WORDS) == 0
            await br.context.set_offline(False)
            await page.wait_for_selector("body[data-state=signed-in]")
            await queued.wait_for(state="detached")
            sent = page.locator("#chat-log .entry.utterance", has_text=OFFLINE_WORDS)
            await sent.wait_for()
            again = await page.evaluate(
                """id => fetch('/api/say', {method: 'POST', headers: {'Content-Type':
                'application/json'}, body: JSON.stringify({text: 'x', id})}).then(r => r.status)""",
                queued_id,
            )
            assert again == 200  # the same id again: a repeat, not a second turn
            assert utterances(mesh, OFFLINE_WORDS) == 1

            # revoked: its sessions end within a second, and the page is signed out
            web = hub.web
            assert web is not None
            browser_id = device_id(mesh, "browser-phone")
            assert browser_id in web.state.sessions.online()
            await asyncio.to_thread(
                mesh.yimi, "device", "revoke", "browser-phone", "--home", str(mesh.home)
            )
            revoked = time.monotonic()
            await poll(
                lambda: browser_id not in web.state.sessions.online(), 5, "the sessions to end"
            )
            took = time.monotonic() - revoked
            print(f"sessions ended {took:.2f} s after the revocation")
            assert took < 1.0, took  # the registry is polled every 0.2 s
            await page.wait_for_selector("body[data-state=signed-out]")
            status = await page.evaluate("fetch('/api/me').then(r => r.status)")
            assert status == 401
            await br.shot(page, "companion-revoked-phone")
    assert [m.recipients for m in smtp.messages()] == [["dana@example.org"]]


# ---------------------------------------------------------------- payments and dashboard
CTX = CallContext(owner="owner", scope="owner", trace_id="trace-lunch")


async def checkout(hub: HubDaemon, task: str) -> str:
    """A payment intent for ``task`` and its checkout: the payment card's id."""
    gw, pay = hub.consent.gateway, hub.consent.payments
    assert gw is not None and pay is not None
    specs = next(r for r in hub.registry.devices() if r.name == "specs")
    voice = VoiceEvidence(specs.device_id, f"u-{task}", "verified", "voiceprint", now_ms())
    request = PaymentRequest("owner_voice", f"u-{task}", specs.device_id, "order lunch", voice)
    pay.open_intent(CTX, request, task_id=task, description="lunch", budget="30")
    r = await gw.call(
        ToolCall(
            "errands",
            "add_to_cart",
            {"shop": "lotus-kitchen", "item_id": "noodles", "quantity": 2, "cart_id": ""},
            f"{task}-a",
            task,
        ),
        CTX,
    )
    cart = str(r.effects[0].fields["cart_id"])
    r = await gw.call(
        ToolCall("errands", "go_to_checkout", {"cart_id": cart}, f"{task}-co", task), CTX
    )
    assert r.status == "waiting" and r.card_id, r
    return r.card_id


async def test_payment_needs_webauthn_user_verification_and_the_dashboard(mesh: Mesh) -> None:
    mesh.add_device("specs", "glasses")
    web_port = ports.port()
    url = f"http://localhost:{web_port}/"
    async with SandboxShop(pay_timeout=2.0) as shop:
        mesh.use_packages({"errands": {"config": {"PROVIDER_URL": shop.url, "PAY_TIMEOUT": "2"}}})
        async with browser(mesh.root) as br:
            page = br.phone
            async with mesh.hub_in_process(web_port=web_port) as hub:
                await pair_browser(mesh, br, url)
                await checkout(hub, "t1")
                outcome = await answer_card(page, "25.00 EUR to Lotus Kitchen", "approve")
                assert "Approved" in outcome, outcome
                await poll(lambda: shop.charges(), 20, "the charge")
                assert [c["amount_minor"] for c in shop.charges()] == [2500]
                await br.shot(page, "companion-paid-phone")

                # "it's me for the next minute": user verification opens the voice trust
                # window on this phone; the page takes no input while the authenticator asks
                phone_id = device_id(mesh, "browser-phone")
                authority = hub.voiceprints.authority
                assert not authority.trusted(phone_id, now_ms())
                await page.evaluate(
                    """() => { const get = navigator.credentials.get.bind(navigator.credentials);
                      window.blockedWhileAsked = [];
                      navigator.credentials.get = (o) => {
                        window.blockedWhileAsked.push([document.getElementById('app').inert,
                          document.body.dataset.busy || '']);
                        return get(o); }; }"""
                )
                trusted = await trust_me(page)
                assert trusted == ("open", True), trusted
                (window,) = authority.trust_windows(phone_id)
                assert window.method == "passkey" and window.length_ms == 60_000
                assert authority.trusted(phone_id, now_ms())
                assert await page.evaluate("window.blockedWhileAsked") == [[True, "authenticator"]]
                assert not await page.evaluate("document.getElementById('app').inert")
                await br.shot(page, "companion-trust-phone")

                # the same phone without user verification: refused, nothing more is paid
                await br.cdp.send(
                    "WebAuthn.setUserVerified",
                    {"authenticatorId": br.authenticator, "isUserVerified": False},
                )
                card_id = await checkout(hub, "t2")
                outcome = await answer_card(page, "25.00 EUR to Lotus Kitchen", "approve")
                assert "User verification failed" in outcome and "locked" in outcome, outcome
                gw = hub.consent.gateway
                assert gw is not None
                assert gw.consent.card(card_id).state == "pending"  # type: ignore[union-attr]
                assert len(shop.charges()) == 1
                shot = await br.shot(page, "companion-refused-pay-phone")
                keep_for_readme(shot, "companion-payment-refused.png")

                # without user verification "it's me" opens nothing either
                trusted = await trust_me(page)
                assert trusted == ("refused", True), trusted
                assert "User verification failed" in (await page.text_content("#me-outcome") or "")
                assert len(authority.trust_windows(phone_id)) == 1

                # the refusal's reason in Chinese too (the switch, kept in the browser)
                await page.click("#lang")
                await page.locator("nav button", has_text="对话").wait_for()
                outcome = await answer_card(page, "25.00 EUR to Lotus Kitchen", "approve")
                assert "用户验证失败" in outcome and "手机已锁定" in outcome, outcome
                await br.shot(page, "companion-refused-pay-zh-phone")
                await page.click("#lang")
                await page.locator("nav button", has_text="Chat").wait_for()
                assert gw.consent.card(card_id).state == "pending"  # type: ignore[union-attr]

                # the dashboard on a desktop-sized page of the same browser: devices, refusals
                desk = await br.context.new_page()
                await desk.set_viewport_size(DESKTOP)
                await desk.goto(url + "dashboard")
                await desk.wait_for_selector("body[data-state=shown]")
                await desk.locator('tr[data-device="browser-phone"]').wait_for()
                await desk.locator('tr[data-device="specs"]').wait_for()
                refused = desk.locator('tr[data-counter="rejected.web_user_verification"]')
                await refused.wait_for()
                # the payment refused twice, "it's me" once
                await poll_text(
                    desk, 'tr[data-counter="rejected.web_user_verification"] td.num', "3"
                )

                # the operator panels (this browser is the owner's phone)
                await desk.wait_for_selector("body[data-operator=shown]")
                paid = desk.locator("#payments tr[data-state=paid]")
                await paid.wait_for()
                assert "25.00 EUR" in (await paid.text_content() or "")
                await desk.locator("#payments tr[data-state=awaiting_approval]").wait_for()
                assert await desk.get_attribute("#audit-verdict", "data-ok") == "yes"
                assert "Verified" in (await desk.text_content("#audit-verdict") or "")
                await desk.locator("#audit tr").first.wait_for()
                errands = desk.locator('#packages tr[data-package="errands"]')
                assert "running" in (await errands.text_content() or "")
                await desk.locator("#models tr").first.wait_for()
                await desk.locator("#brain tr", has_text="built-in").wait_for()
                # a new pair code, and revoking a device, from the page
                await desk.click("#pair-new")
                shown = desk.locator("#pair-code-shown[data-code]")
                await shown.wait_for()
                assert re.fullmatch(
                    r"[A-Z0-9]{4}(-[A-Z0-9]{4}){3}", await shown.get_attribute("data-code") or ""
                )
                desk.on("dialog", lambda d: asyncio.ensure_future(d.accept()))
                await desk.click('tr[data-device="specs"] button.revoke')
                await desk.locator('tr[data-device="specs"] td.state.revoked').wait_for()
                specs = next(r for r in hub.registry.devices() if r.name == "specs")
                assert specs.revoked
                shot = await br.shot(desk, "dashboard-desktop")
                keep_for_readme(shot, "dashboard.png")
                # the same page in Chinese (the switch is kept in the browser)
                await desk.click("#lang")
                await desk.locator("h2", has_text="设备").wait_for()
                await br.shot(desk, "dashboard-zh-desktop")
                await desk.set_viewport_size(PHONE)
                await br.shot(desk, "dashboard-zh-phone")
                await desk.close()

            # the hub restarts and forgets every session: the page signs in again with its
            # key by itself, and a message typed meanwhile is answered once
            await page.click('nav [data-view="chat"]')
            await say_in_browser(page, OFFLINE_WORDS)
            pending = page.locator("#chat-log .pending", has_text=OFFLINE_WORDS)
            await pending.wait_for()
            async with mesh.hub_in_process(web_port=web_port):
                await pending.wait_for(state="detached", timeout=WAIT_MS * 2)
                said = page.locator("#chat-log .entry.utterance", has_text=OFFLINE_WORDS)
                await said.wait_for()
                seq = int(await said.get_attribute("data-seq") or 0)
                await page.wait_for_function(
                    "seq => [...document.querySelectorAll('#chat-log .entry.reply')]"
                    ".some(e => +e.dataset.seq > seq)",
                    arg=seq,
                )
                assert utterances(mesh, OFFLINE_WORDS) == 1
    assert len(shop.charges()) == 1


# ---------------------------------------------------------------- notes, memory, switches
async def test_notes_memory_and_switches_from_the_phone(mesh: Mesh) -> None:
    from hub.brain.providers import ProviderStore
    from hub.memory.home import open_memory
    from models.catalog import Catalog
    from provisioning.home import Home

    def remember() -> None:  # what the owner said once, in the memory with its recall index
        store = open_memory(mesh.home, with_index=True)
        try:
            store.commit(
                "pref.tea",
                0,
                subject="owner",
                predicate="likes",
                value="green tea",
                sources=["utterance:u-tea"],
            )
        finally:
            store.close()

    await asyncio.to_thread(remember)
    web_port = ports.port()
    url = f"http://localhost:{web_port}/"
    async with mesh.hub_in_process(web_port=web_port) as hub, browser(mesh.root) as br:
        page = br.phone
        await pair_browser(mesh, br, url)
        phone_id = device_id(mesh, "browser-phone")

        # notes: added as this device into the hub's notes replica, ticked off from the page
        await page.click('nav [data-view="notes"]')
        await page.fill("#note-input", "buy oat milk")
        await page.select_option("#note-kind", "todo")
        await page.click("#note-add")
        item = page.locator("#notes-list li", has_text="buy oat milk")
        await item.wait_for()
        (note,) = [n for n in hub.replicas.notes() if n.text == "buy oat milk"]
        assert (note.kind, note.done, note.updated_by) == ("todo", False, phone_id)
        await item.locator("input.done").check()
        await page.locator("#notes-list li.done", has_text="buy oat milk").wait_for()
        assert [n.done for n in hub.replicas.notes() if n.id == note.id] == [True]
        await br.shot(page, "companion-notes-phone")

        # memory: search, explain, then forget — the plan first, carried out once confirmed
        await page.click('nav [data-view="memory"]')
        await page.fill("#memory-query", "green tea")
        await page.click("#memory-search")
        found = page.locator('#memory-list li[data-memory="pref.tea"]')
        await found.wait_for()
        assert "owner likes green tea" in (await found.text_content() or "")
        await found.locator("button.explain").click()
        await page.locator("#memory-detail", has_text="utterance:u-tea").wait_for()
        await found.locator("button.forget").click()
        plan = page.locator("#memory-plan")
        await plan.wait_for()
        assert "pref.tea" in (await plan.text_content() or "")
        shot = await br.shot(page, "companion-memory-plan-phone")
        keep_for_readme(shot, "companion-memory-plan.png")

        def status() -> str:
            store = open_memory(mesh.home, with_index=False)
            try:
                found = store.find("pref.tea")
                return found.status if found else "gone"
            finally:
                store.close()

        assert await asyncio.to_thread(status) == "current"  # only a plan so far
        await page.click("#memory-forget-confirm")
        await page.wait_for_selector("#memory-outcome[data-outcome=forgotten]")
        assert await asyncio.to_thread(status) == "forgotten"
        await found.wait_for(state="detached")

        # the brain switched from the phone: the hub's change, signed with this device's key
        await page.click('nav [data-view="settings"]')
        await page.locator('#model-roles li[data-role="embed"]').wait_for()
        assert await page.is_checked("#brain-rules")
        await page.locator("#brain-switch").press("Enter")
        await page.locator("#switch-confirm").wait_for()
        assert "model change" in (await page.text_content("#switch-summary") or "")
        await br.shot(page, "companion-switch-phone")
        await page.locator("#switch-sign").press("Enter")
        await page.wait_for_selector("#switch-outcome[data-outcome=confirmed]")
        store = ProviderStore.for_home(Home.load(mesh.home))
        try:
            rows = list(store.db.execute("SELECT state, device_id FROM changes"))
        finally:
            store.close()
        assert rows == [("confirmed", phone_id)] or ("applied", phone_id) in rows, rows

        # a model switch, confirmed the same way; the catalog checks the page's signature
        role = page.locator('#model-roles li[data-role="asr"]')
        await role.locator("select").select_option("whisper-tiny.en")
        await role.locator("button.switch").click()
        await page.locator("#switch-confirm").wait_for()
        summary = await page.text_content("#switch-summary") or ""
        assert summary.startswith("asr -> whisper-tiny.en"), summary
        await page.locator("#switch-sign").press("Enter")
        await page.wait_for_selector("#switch-outcome[data-outcome=confirmed]")
        catalog = Catalog.open(mesh.home)
        (asr,) = [r for r in catalog.status() if r.role == "asr"]
        assert asr.selected == "whisper-tiny.en", asr
        assert catalog.selection("asr")[0] == "whisper-tiny.en"
        await br.shot(page, "companion-switched-phone")

        # a signature that is not this device's over the body: the catalog refuses it
        refused = await page.evaluate(
            """async () => {
              const post = (path, body) => fetch(path, {method: 'POST', headers:
                {'Content-Type': 'application/json'}, body: JSON.stringify(body)})
                .then(async r => [r.status, await r.json()]);
              await post('/api/switches/model', {role: 'asr', name: 'whisper-base'});
              return post('/api/switches/confirm', {signature: '00'.repeat(64)}); }"""
        )
        assert refused[0] == 409 and refused[1]["error"] == "web.action_refused", refused
        assert "signature" in refused[1]["fields"]["reason"], refused
        assert Catalog.open(mesh.home).selection("asr")[0] == "whisper-tiny.en"
