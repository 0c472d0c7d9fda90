"""Orders and payments in the brain: the documented ordering requests, the payment intent
opened from the admitted turn, "pay it" and "undo".

The brain never decides that the owner wants to pay: *platform code* reads the owner's own
words (the turn's text, never a model's output or content it read) with the intent engine
(:mod:`hub.brain.intents`), and only then asks the payment authority (:mod:`hub.payments`)
for an intent — with the turn's scope, its voice evidence and where the words came from.
The authority refuses every turn that is not the owner's own live request (a guest, an
uncertain voice, a scheduled run, text that came from an e-mail, a web page or another
agent). Requests (English and Chinese; the engine's intents)::

    YimiOrderSame  "order the same lunch as last time", "和上次一样的午饭"   (meal)
    YimiOrder      "order two beef noodles from Lotus Kitchen for up to 30 euros",
                   "从莲花厨房点两份牛肉面和一杯茉莉花茶，三十块以内"   (items, shop, budget)
    YimiPayIt      "pay it", "yes, pay it", "付款"
    YimiUndo       "undo", "cancel the order", "stop the payment", "撤销"

Items are split by :func:`parse_items` (plain code: "two beef noodles and a jasmine tea",
"两份牛肉面和一杯茉莉花茶"); the shop is a shop id from the live shop list
(``errands.list_shops``). The words said back are :mod:`hub.brain.replies`' in the turn's
language (the task's ``spec["lang"]``).

- **order** — an intent (budget: the amount named; for "the same … as last time" what it
  cost last time), then ``errands.browse_menu`` → ``add_to_cart`` → ``go_to_checkout``
  through the gateway. The checkout stops and reads back payee and amount; the authority
  puts a card on the phone (or, with auto-pay on and every condition met, pays after a
  5-second undo window). The reply says what the checkout read back and how to approve;
  it never says "paid": the report that follows the receipt does.
- **pay it** — the payment waiting for approval that was asked for on the same device:
  :meth:`PaymentAuthority.voice_confirm` with the turn's voice evidence. Voice pay off, a
  typed "pay it", or any unmet condition → "approve the card on your phone".
- **undo** — an auto-payment inside its undo window is undone; a payment still waiting for
  approval is cancelled.

With the LLM brain the same intent is opened for an ordering turn; the main agent
delegates, and when a sub-agent of that turn goes to a checkout the intent is handed to it
(:meth:`PaymentDesk.before_call`) — one intent, one checkout. "pay it" and "undo" are
answered by this code, not by the model.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from hub.brain.replies import say
from hub.gateway import CallContext, Gateway, Receipt, ToolCall
from hub.gateway.facts import check_reply

if TYPE_CHECKING:
    from hub.brain.base import Turn
    from hub.brain.intents import IntentEngine, Match
    from hub.brain.runtime import BrainCore
    from hub.brain.tasks import TaskRecord, TaskStore
    from hub.payments import Payment, PaymentAuthority, PaymentRequest

log = logging.getLogger(__name__)

ORDER_KINDS = frozenset({"order", "order_same", "pay_it", "undo"})
PAYMENT_KINDS = frozenset({"order", "order_same"})
"""requests that open a payment intent"""
PACKAGE = "errands"

ORDER_INTENTS = {
    "YimiOrder": "order",
    "YimiOrderSame": "order_same",
    "YimiPayIt": "pay_it",
    "YimiUndo": "undo",
}
"""intent engine names → the desk's request kinds"""
_NUMBERS = {
    "a": 1,
    "an": 1,
    "one": 1,
    "two": 2,
    "three": 3,
    "four": 4,
    "five": 5,
    "six": 6,
    "seven": 7,
    "eight": 8,
    "nine": 9,
    "ten": 10,
}
_FILLER = frozenset({"x", "the", "some", "of", "portion", "portions", "serving", "servings"})
_ZH_SEPARATORS = ("还有", "以及", "和", "跟", "、", "，", ",", "及", "加")
_ZH_MEASURES = "份杯个碗盘瓶块只条盒包串听罐袋"
_ZH_NUMERALS = "零〇一二两三四五六七八九十百"


@dataclass(frozen=True)
class OrderIntent:
    kind: str
    """``order`` / ``order_same`` / ``pay_it`` / ``undo``"""
    slots: dict[str, str]


def order_of(match: Match | None) -> OrderIntent | None:
    """The ordering or payment request of an intent-engine match, or ``None``."""
    if match is None or match.intent not in ORDER_INTENTS:
        return None
    slots = {k: _slot_text(v) for k, v in match.slots.items() if v not in ("", None)}
    return OrderIntent(ORDER_INTENTS[match.intent], slots)


def parse_order(text: str, engine: IntentEngine | None = None) -> OrderIntent | None:
    """The ordering or payment request in the owner's words, or ``None``.

    ``engine``: the brain's intent engine with the live slot lists (the shops); without
    one, an engine knowing only the shops the errands package declares."""
    from hub.brain.intents import LOCAL_CONFIDENCE

    eng = engine if engine is not None else _default_engine()
    match = eng.recognize(text)
    if match is None or match.score < LOCAL_CONFIDENCE:
        return None
    return order_of(match)


@functools.cache
def _default_engine() -> IntentEngine:
    from hub.brain.intents import IntentEngine, SlotLists
    from hub.brain.slots import declared_shops

    return IntentEngine(SlotLists(shops=tuple(declared_shops())))


def _slot_text(v: object) -> str:
    if isinstance(v, float):
        return str(int(v)) if v.is_integer() else f"{v:.2f}"
    return str(v)


def _words(text: str) -> list[str]:
    """Lower-case words of ``text`` (letters and digits; everything else separates)."""
    return "".join(ch if ch.isalnum() else " " for ch in text.casefold()).split()


def _has_cjk(text: str) -> bool:
    return any("\u4e00" <= ch <= "\u9fff" for ch in text)


def parse_items(text: str) -> list[tuple[int, str]]:
    """``"two beef noodles and a jasmine tea"`` → ``[(2, "beef noodles"), (1, "jasmine tea")]``;
    ``"两份牛肉面和一杯茉莉花茶"`` → ``[(2, "牛肉面"), (1, "茉莉花茶")]``."""
    if _has_cjk(text):
        return _zh_items(text)
    parts: list[list[str]] = [[]]
    for raw in text.replace(",", " , ").replace("&", " and ").split():
        word = raw.strip()
        if word.casefold() in (",", "and", "plus"):
            if parts[-1]:
                parts.append([])
            continue
        parts[-1].append(word)
    out = []
    for words in parts:
        qty = 1
        if words and (words[0].isdigit() or words[0].casefold() in _NUMBERS):
            head = words.pop(0).casefold()
            qty = int(head) if head.isdigit() else _NUMBERS[head]
        while words and words[0].casefold() in _FILLER:
            words.pop(0)
        if words:
            out.append((qty, " ".join(words)))
    return out


def _zh_items(text: str) -> list[tuple[int, str]]:
    from hub.gateway.facts import chinese_number

    for sep in _ZH_SEPARATORS:
        text = text.replace(sep, "|")
    out = []
    for part in (p.strip() for p in text.split("|")):
        i = 0
        while i < len(part) and (part[i].isdigit() or part[i] in _ZH_NUMERALS):
            i += 1
        head, rest = part[:i], part[i:]
        qty = 1
        if head:
            value = int(head) if head.isdigit() else chinese_number(head)
            qty = int(value) if value else 1
        if rest[:1] and rest[0] in _ZH_MEASURES and (head or len(rest) > 1):
            rest = rest[1:]
        rest = rest.strip()
        if rest:
            out.append((qty, rest))
    return out


def shop_id(name: str) -> str:
    """``"Lotus Kitchen"`` → ``"lotus-kitchen"``."""
    words = _words(name)
    if words[:1] == ["the"]:
        words = words[1:]
    return "-".join(words)


def _stem(word: str) -> str:
    """A plural folded to its singular, roughly: noodles → noodle, dishes → dish."""
    w = word.lower()
    if len(w) <= 3:
        return w
    if w.endswith("ies"):
        return w[:-3] + "y"
    if w.endswith(("ches", "shes", "xes", "sses")):
        return w[:-2]
    if w.endswith("s") and not w.endswith("ss"):
        return w[:-1]
    return w


def match_item(name: str, items: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """The menu item whose id or name holds every word of ``name`` (plurals folded; a
    Chinese name: one of the item's names, else contained in one)."""
    if _has_cjk(name):
        want_zh = name.strip()

        def names(i: dict[str, Any]) -> list[str]:
            return [str(i.get("name", "")), *map(str, i.get("aliases") or [])]

        exact = [i for i in items if want_zh in names(i)]
        hits = exact or [i for i in items if want_zh and any(want_zh in n for n in names(i))]
        return min(hits, key=lambda i: min(map(len, names(i)))) if hits else None
    want = [_stem(w) for w in _words(name) if w not in ("of", "the")]
    if not want:
        return None
    best: tuple[int, dict[str, Any]] | None = None
    for item in items:
        hay = {_stem(w) for w in _words(f"{item.get('item_id', '')} {item.get('name')}")}
        if all(w in hay for w in want):
            score = -len(hay)  # the tightest match
            if best is None or score > best[0]:
                best = (score, item)
    return best[1] if best else None


def _fmt(minor: int | None, currency: str) -> str:
    from hub.payments.money import fmt

    return fmt(minor, currency)


def _amount(p: Payment) -> str:
    return _fmt(p.amount_minor, p.currency)


def _what(p: Payment, lang: str) -> str:
    """``25.00 EUR to Lotus Kitchen`` / ``向Lotus Kitchen支付25.00 EUR``."""
    return say("checkout.what", lang, amount=_amount(p), payee=p.payee)


def _lang(task: TaskRecord) -> str:
    return str(task.spec.get("lang") or "en")


# ---------------------------------------------------------------- the desk
class PaymentDesk:
    """What both brains do about orders and payments (see the module doc). Stateless: the
    payment authority is the gateway's (``gateway.payments``, attached by
    :func:`hub.payments.open_payments`)."""

    def __init__(self, gateway: Gateway) -> None:
        self.gateway = gateway

    @property
    def pay(self) -> PaymentAuthority | None:
        from hub.payments import PaymentAuthority

        p = self.gateway.payments
        return p if isinstance(p, PaymentAuthority) else None

    # ------------------------------------------------------------------ the request
    @staticmethod
    def request_spec(turn: Turn) -> dict[str, Any]:
        """Where the words of ``turn`` came from, as the payment authority must see it
        (kept in the task's spec, so a resumed task asks with the same request)."""
        kinds = {k for k, _ in turn.text_sources} or {"utterance"}
        external = sorted(kinds - {"utterance"})
        evidence = turn.evidence
        if external:
            source = external[0]
        else:  # spoken without evidence: still voice, but never voice-verified
            source = "owner_voice" if evidence is not None or turn.voice else "owner_typed"
        return {
            "source": source,
            "utterance_id": turn.utterance_id or turn.turn_id,
            "device_id": turn.device_id,
            "text": turn.text[:500],
            "voice": evidence.to_dict() if evidence is not None else None,
            "scheduled": turn.scheduled,
        }

    @staticmethod
    def request_of(task: TaskRecord) -> tuple[CallContext, PaymentRequest]:
        from hub.payments import PaymentRequest

        spec = dict(task.spec.get("pay") or {})
        ctx = CallContext(
            owner=task.owner,
            scope=task.scope,
            session_id=task.session_id,
            run_id=task.run_id,
            trace_id=task.trace_id,
            scheduled=bool(spec.get("scheduled", False)),
        )
        return ctx, PaymentRequest.from_dict(spec)

    def open_intent(
        self, task: TaskRecord, *, description: str, budget: str | None, order: dict[str, Any]
    ) -> Payment:
        """The intent of ``task``'s request (``PaymentError`` when it may not have one)."""
        pay = self.pay
        if pay is None:
            from hub.payments import PaymentError

            raise PaymentError("pay.not_owner_request", reason="payments are not set up here")
        ctx, request = self.request_of(task)
        return pay.open_intent(
            ctx,
            request,
            task_id=task.task_id,
            description=description,
            budget=budget,
            order=order,
        )

    def last_order_text(self, owner: str, meal: str = "") -> str:
        pay = self.pay
        last = pay.last_order(owner, meal) if pay is not None else None
        if last is None:
            return ""
        order = last.context.get("order") or {}
        items = ", ".join(
            f"{int(i.get('quantity', 1))} × {i.get('name') or i.get('item_id')}"
            for i in order.get("items", [])
        )
        return f"{items} from {order.get('shop')} ({_amount(last)}, {last.description})"

    # ------------------------------------------------------------------ rule-based order
    async def order(
        self, core: BrainCore, task: TaskRecord, kind: str, slots: dict[str, str]
    ) -> str:
        """The rule-based brain's order: intent → menu → cart → checkout (one task)."""
        from hub.payments import PaymentError

        lang = _lang(task)
        store = core.store
        pay = self.pay
        if pay is None:
            store.move(task.task_id, "failed", "no payment authority")
            return say("pay.not_set_up_order", lang)
        ctx, _ = self.request_of(task)
        mine = pay.store.for_task(task.task_id)
        if mine:  # resumed: the intent was opened before the restart
            p = mine[-1]
        else:
            budget = slots.get("budget")
            if kind == "order_same":
                meal = slots.get("meal", "")
                last = pay.last_order(task.owner, meal)
                if last is None:
                    store.move(task.task_id, "failed", "no earlier order")
                    what = f"{meal} " if meal and meal not in ("order", "meal") else ""
                    return say("order.no_earlier", lang, meal="" if lang == "zh" else what)
                order = dict(last.context["order"])
                budget = budget or str(_major(last.amount_minor, last.currency))
                description = f"{meal or 'order'}: the same as {last.payment_id}"
            else:
                items = [{"quantity": q, "name": n} for q, n in parse_items(slots.get("items", ""))]
                shop = slots.get("shop", "")
                if not shop:
                    store.move(task.task_id, "failed", "no shop")
                    return say("order.no_shop", lang, shops=slots.get("shops", "") or "—")
                order = {
                    "shop": shop_id(shop),
                    "shop_name": slots.get("shop_name") or shop,
                    "items": items,
                }
                description = task.spec.get("pay", {}).get("text", "") or "order"
            try:
                p = self.open_intent(task, description=description, budget=budget, order=order)
            except PaymentError as exc:
                store.move(task.task_id, "failed", "no payment intent")
                reason = str(exc).removeprefix("no payment intent: ")
                return say("order.refused", lang, why=reason)
        order = dict(p.context.get("order") or {})
        menu = await core.step(
            task, "menu", PACKAGE, "browse_menu", {"shop": order.get("shop", "")}, lookup=True
        )
        if menu.status != "succeeded":
            await pay.cancel(p.payment_id, "the shop could not be read")
            store.move(task.task_id, "failed", "no menu")
            name = order.get("shop_name") or order.get("shop")
            return say("order.no_menu", lang, shop=name, why=menu.error or menu.status)
        fields = menu.effects[0].fields if menu.effects else {}
        listed = list(fields.get("items", []))
        lines: list[dict[str, Any]] = []
        for it in order.get("items", []):
            found = (
                next((x for x in listed if x.get("item_id") == it.get("item_id")), None)
                if it.get("item_id")
                else match_item(str(it.get("name", "")), listed)
            )
            if found is None:
                await pay.cancel(p.payment_id, "an item is not on the menu")
                store.move(task.task_id, "failed", "item not found")
                names = ", ".join(str(x.get("name")) for x in listed)
                payee = fields.get("payee", order.get("shop"))
                return say("order.no_item", lang, shop=payee, item=it.get("name"), menu=names)
            lines.append(
                {
                    "item_id": found["item_id"],
                    "name": found["name"],
                    "quantity": int(it["quantity"]),
                }
            )
        if not lines:
            await pay.cancel(p.payment_id, "nothing to order")
            store.move(task.task_id, "failed", "no items")
            return say("order.no_items", lang)
        pay.note_order(p.payment_id, {**order, "items": lines, "payee": fields.get("payee", "")})
        cart = ""
        for i, line in enumerate(lines):
            args = {
                "shop": order["shop"],
                "item_id": line["item_id"],
                "quantity": line["quantity"],
                "cart_id": cart,
            }
            r = await core.step(task, f"cart{i}", PACKAGE, "add_to_cart", args, lookup=True)
            if r.status != "succeeded" or not r.effects:
                await pay.cancel(p.payment_id, "the cart could not be filled")
                store.move(task.task_id, "failed", "cart")
                return say("order.cart", lang, why=r.error or r.status)
            cart = str(r.effects[0].fields.get("cart_id", ""))
        store.move(task.task_id, "acting")
        r = await core.step(task, "checkout", PACKAGE, "go_to_checkout", {"cart_id": cart})
        return self.checkout_reply(r, ctx, lang)

    def checkout_reply(self, r: Receipt, ctx: CallContext, lang: str = "en") -> str:
        """What to say after the checkout stop (never "paid": the receipt says that later)."""
        pay = self.pay
        p = None
        if pay is not None:
            rows = pay.store.for_task(r.task_id)
            p = rows[-1] if rows else None
        what = _what(p, lang) if p is not None and p.payee else say("checkout.the_order", lang)
        if r.status == "waiting":
            voice = pay is not None and pay.options.voice_pay
            how = say("checkout.or_pay_it", lang) if voice else ""
            return say("checkout.waiting", lang, what=what, how=how)
        if r.status == "running":
            n = pay.options.undo_seconds if pay is not None else 5
            return say("checkout.auto", lang, what=what, n=n)
        if r.status == "rejected":
            return say("checkout.rejected", lang, why=r.error or say("refused", lang))
        if r.status == "cancelled":
            return say("checkout.cancelled", lang, why=r.error or "cancelled")
        return say("checkout.failed", lang, why=r.error or r.status)

    # ------------------------------------------------------------------ "pay it" / "undo"
    async def pay_it(self, task: TaskRecord, store: TaskStore) -> str:
        """The owner said "pay it": voice pay for the payment waiting on this device."""
        lang = _lang(task)
        pay = self.pay
        if pay is None:
            return self._finish(store, task, "failed", say("pay.not_set_up", lang))
        waiting = pay.waiting(task.owner)
        if not waiting:
            return self._finish(store, task, "done", say("pay.nothing", lang))
        here = [p for p in waiting if p.request.device_id == task.device_id]
        p = (here or waiting)[0]
        what = _what(p, lang)
        ctx, request = self.request_of(task)
        evidence = request.voice
        if evidence is None or request.source != "owner_voice":
            return self._finish(store, task, "done", say("pay.card_only", lang, what=what))
        out = await pay.voice_confirm(p.payment_id, evidence, ctx)
        if not out.authorised:
            off = out.reason == "voice pay is off"
            why = say("pay.voice_off", lang) if off else say("pay.not_voice", lang, why=out.reason)
            return self._finish(store, task, "done", say("pay.card", lang, what=what, why=why))
        r = out.receipt
        if r is None:
            text = say("pay.approved", lang, what=what)
        elif r.status == "succeeded":
            text = (r.summary if lang != "zh" else "") or say("pay.paid", lang, what=what)
        elif r.status == "unknown":
            text = say("pay.unconfirmed", lang, what=what)
        else:
            text = say("pay.not_paid", lang, why=r.error or r.status)
        checked = check_reply(text, [r] if r is not None else [], lang=lang)
        return self._finish(store, task, "done", checked.text or text)

    async def undo(self, task: TaskRecord, store: TaskStore) -> str:
        """The owner said "undo": an auto-payment in its window, else a waiting payment."""
        lang = _lang(task)
        pay = self.pay
        if pay is None:
            return self._finish(store, task, "failed", say("pay.not_set_up", lang))
        ctx, _ = self.request_of(task)
        if ctx.scope not in ("owner", "owner_uncertain"):
            return self._finish(store, task, "done", say("undo.owner_only", lang))
        for p in pay.undoable(task.owner):
            if await pay.undo(p.payment_id, ctx):
                return self._finish(
                    store, task, "done", say("undo.undone", lang, what=_what(p, lang))
                )
        waiting = pay.waiting(task.owner)
        if waiting and ctx.scope == "owner":
            p = waiting[0]
            if await pay.cancel(p.payment_id, "cancelled by the owner"):
                return self._finish(
                    store, task, "done", say("undo.cancelled", lang, what=_what(p, lang))
                )
        return self._finish(store, task, "done", say("undo.nothing", lang))

    @staticmethod
    def _finish(store: TaskStore, task: TaskRecord, state: str, text: str) -> str:
        store.finish(task.task_id, state, text[:300] if state == "failed" else "")
        return text

    # ------------------------------------------------------------------ LLM brain
    def open_for_turn(self, store: TaskStore, task: TaskRecord, intent: OrderIntent) -> str:
        """An ordering turn of the LLM brain: open the turn's intent now (from the owner's
        words); a note for the main agent says what the platform did."""
        from hub.payments import PaymentError

        if self.pay is None:
            return "Payments are not set up on this hub: no order can be paid."
        slots = intent.slots
        budget = slots.get("budget")
        order: dict[str, Any] = {}
        last = ""
        if intent.kind == "order_same":
            meal = slots.get("meal", "")
            prev = self.pay.last_order(task.owner, meal)
            if prev is not None:
                order = dict(prev.context["order"])
                budget = budget or str(_major(prev.amount_minor, prev.currency))
                last = self.last_order_text(task.owner, meal)
        else:
            order = {
                "shop": shop_id(slots.get("shop", "")),
                "shop_name": slots.get("shop", ""),
                "items": [
                    {"quantity": q, "name": n} for q, n in parse_items(slots.get("items", ""))
                ],
            }
        try:
            p = self.open_intent(
                task,
                description=task.spec.get("pay", {}).get("text", "order"),
                budget=budget,
                order=order,
            )
        except PaymentError as exc:
            return f"No payment may be made for this request ({exc}); do not try a checkout."
        store.update_spec(task.task_id, payment_id=p.payment_id)
        note = (
            "A payment intent is open for this order (the owner's own words). Delegate the "
            "shopping (errands: browse_menu, add_to_cart, go_to_checkout); the checkout stops "
            "and the platform asks the owner to approve. Never say it is paid."
        )
        if last:
            note += f" The owner's last paid order: {last}."
        return note

    def before_call(
        self, store: TaskStore, task: TaskRecord, call: ToolCall, ctx: CallContext
    ) -> None:
        """A sub-agent is about to go to a checkout (a ``spend`` tool other than ``pay``):
        hand it the intent its turn opened, if that intent is still unused."""
        pay = self.pay
        if pay is None:
            return
        m = self.gateway.catalog.get(call.package)
        spec = m.tools.get(call.tool) if m is not None else None
        if spec is None or spec.effect != "spend" or call.tool == "pay":
            return
        if any(p.state == "intent" for p in pay.store.for_task(call.task_id)):
            return
        root = store.get(task.run_id)
        pid = str((root.spec if root is not None else {}).get("payment_id", ""))
        if pid and pay.hand_to(pid, call.task_id, ctx):
            log.info("payment %s handed to task %s for its checkout", pid, call.task_id)


def _major(minor: int | None, currency: str) -> Any:
    from hub.payments.money import major

    return major(minor or 0, currency)
