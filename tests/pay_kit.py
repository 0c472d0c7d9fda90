"""Helpers for payment tests: a home with a real phone (and glasses) bundle, the sandbox
provider, a gateway over the real ``errands`` package and the payment authority on it.

The phone answers exactly as ``yimi pay approve`` does (same ApprovalBody, same signing
input, the lock state of its FAKE lock sensor); the mesh path is in ``test_pay_mesh.py``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hub.gateway import CallContext, Gateway, Receipt, ToolCall, open_gateway
from hub.gateway.audit import records, verify
from hub.gateway.consent import Answer, Card
from hub.payments import PaymentAuthority, PaymentRequest, VoiceEvidence, open_payments
from hub.payments.phone import change_options
from packages.errands.sandbox import SandboxShop
from protos import consent_pb2
from protos.clock import now_ms
from protos.codec import signing_input
from protos.signed import APPROVAL_CONTEXT, UNLOCK_LEASE_CONTEXT, options_change
from provisioning.bundle import Bundle, flash
from provisioning.home import Home
from provisioning.registry import DeviceRecord
from tests.gateway_kit import RecordingCourier

REPO = Path(__file__).resolve().parent.parent
ERRANDS = REPO / "packages" / "errands"


def owner_ctx(trace: str = "trace-pay") -> CallContext:
    return CallContext(owner="owner", scope="owner", session_id="s1", run_id="r1", trace_id=trace)


@dataclass
class PayWorld:
    root: Path
    home: Home
    phone: Bundle
    glasses: Bundle
    shop: SandboxShop
    courier: RecordingCourier
    gw: Gateway
    pay: PaymentAuthority
    rounds: dict[str, int] = field(default_factory=dict)

    @property
    def state_dir(self) -> Path:
        return self.home.path / "gateway"

    def device(self, bundle: Bundle) -> DeviceRecord:
        registry = self.home.registry()
        try:
            rec = next(r for r in registry.devices() if r.device_id == bundle.device_id)
        finally:
            registry.close()
        return rec

    def revoke(self, bundle: Bundle) -> None:
        registry = self.home.registry()
        try:
            registry.revoke(bundle.name)
        finally:
            registry.close()

    # ------------------------------------------------------------------ the owner's side
    def request(
        self, *, verified: bool = True, device: Bundle | None = None, text: str = "order lunch"
    ) -> PaymentRequest:
        dev = (device or self.glasses).device_id
        voice = VoiceEvidence(
            dev, "u-req", "verified" if verified else "uncertain", "voiceprint", now_ms(), 0.8
        )
        return PaymentRequest("owner_voice", "u-req", dev, text, voice)

    def intent(self, task: str, *, budget: str | None = "30", verified: bool = True, **kw: Any):
        return self.pay.open_intent(
            owner_ctx(f"trace-{task}"),
            self.request(verified=verified),
            task_id=task,
            description=kw.pop("description", "lunch"),
            budget=budget,
            **kw,
        )

    async def checkout(
        self,
        task: str,
        shop: str = "lotus-kitchen",
        items: tuple[tuple[str, int], ...] = (("noodles", 2),),
        ctx: CallContext | None = None,
    ) -> Receipt:
        """browse → cart → go_to_checkout through the gateway, as the sub-agent does."""
        ctx = ctx or owner_ctx(f"trace-{task}")
        self.rounds[task] = n = self.rounds.get(task, 0) + 1
        task_tag = task if n == 1 else f"{task}-{n}"  # call ids: t1-m, t1-a0, t1-co; then t1-2-…
        menu = await self.gw.call(
            ToolCall("errands", "browse_menu", {"shop": shop}, f"{task_tag}-m", task), ctx
        )
        assert menu.status == "succeeded", menu
        cart = ""
        for i, (item, qty) in enumerate(items):
            args = {"shop": shop, "item_id": item, "quantity": qty, "cart_id": cart}
            r = await self.gw.call(
                ToolCall("errands", "add_to_cart", args, f"{task_tag}-a{i}", task), ctx
            )
            assert r.status == "succeeded", r
            cart = str(r.effects[0].fields["cart_id"])
        return await self.gw.call(
            ToolCall("errands", "go_to_checkout", {"cart_id": cart}, f"{task_tag}-co", task), ctx
        )

    def card(self, receipt: Receipt) -> Card:
        card = self.gw.consent.card(receipt.card_id)
        assert card is not None, receipt
        return card

    # ------------------------------------------------------------------ the phone's side
    def sign(
        self,
        card: Card,
        decision: int = consent_pb2.APPROVE,
        *,
        bundle: Bundle | None = None,
        unlocked: bool = True,
        **override: Any,
    ) -> consent_pb2.Approval:
        b = bundle or self.phone
        fields: dict[str, Any] = {
            "card_id": card.card_id,
            "action_hash": card.action_hash,
            "expires_ms": card.expires_ms,
            "nonce": card.nonce,
            "decision": decision,
            "device_id": b.device_id,
            "signed_ms": now_ms(),
            "unlocked": unlocked,
            "lock_sensor": "fake-lock-sensor",
        }
        fields.update(override)
        body = consent_pb2.ApprovalBody(**fields).SerializeToString()
        sig = b.keys.sign.sign(signing_input(APPROVAL_CONTEXT, body)).signature
        return consent_pb2.Approval(body=body, signature=sig)

    async def answer(
        self, approval: consent_pb2.Approval, bundle: Bundle | None = None
    ) -> tuple[Answer, Receipt | None]:
        rec = self.device(bundle or self.phone)
        return await self.gw.answer(
            approval,
            device_id=rec.device_id,
            sign_pk=rec.sign_pk,
            scopes=rec.scopes,
            profile=rec.profile,
            revoked=rec.revoked,
        )

    async def approve(self, receipt: Receipt) -> Receipt:
        ans, r = await self.answer(self.sign(self.card(receipt)))
        assert ans.outcome == "approved" and r is not None, ans
        return r

    def lease(self, minutes: float = 10, bundle: Bundle | None = None) -> tuple[bool, str, int]:
        b = bundle or self.phone
        t = now_ms()
        lease = consent_pb2.UnlockLease(
            device_id=b.device_id,
            unlocked_ms=t - 1000,
            expires_ms=t + int(minutes * 60_000),
            lock_sensor="fake-lock-sensor",
            signed_ms=t,
        ).SerializeToString()
        sig = b.keys.sign.sign(signing_input(UNLOCK_LEASE_CONTEXT, lease)).signature
        return self.pay.report_lease(
            consent_pb2.Approval(lease=lease, lease_signature=sig), self.device(b)
        )

    def options(self, **changes: Any) -> Any:
        body, sig = options_change(self.phone.keys.sign, self.phone.device_id, changes)
        return change_options(self.pay.store, self.gw.audit, body, sig, self.device(self.phone))

    # ------------------------------------------------------------------ checks
    def pay_posts(self) -> int:
        return sum(1 for m, p in self.shop.requests if m == "POST" and p.endswith("/pay"))

    def audit_ok(self) -> list[dict[str, Any]]:
        verdict = verify(self.state_dir / "audit")
        assert verdict.ok, verdict
        return list(records(self.state_dir / "audit"))


def make_home(root: Path) -> tuple[Home, Bundle, Bundle]:
    home = Home.init(root / "home")
    phone = flash(home, profile_name="phone", name="phone1", out=root / "bundle-phone")
    glasses = flash(home, profile_name="glasses", name="specs", out=root / "bundle-glasses")
    return home, phone, glasses


@asynccontextmanager
async def pay_world(
    root: Path,
    *,
    pay_timeout: float = 10.0,
    sweep: bool = False,
    made: tuple[Home, Bundle, Bundle] | None = None,
    shop: SandboxShop | None = None,
) -> AsyncIterator[PayWorld]:
    """A gateway, payment authority and sandbox shop in ``root``. ``pay_timeout``: seconds
    the errands package waits for the shop's answer to a payment — roomy by default (a
    success must not turn into "unknown" on a loaded machine); the tests of a provider
    that hangs pass a short one below the hang."""
    home, phone, glasses = made or make_home(root)
    courier = RecordingCourier()
    async with AsyncExitStack() as stack:
        if shop is None:
            shop = await stack.enter_async_context(SandboxShop(pay_timeout=pay_timeout))
        state = root / "package-state"
        state.mkdir(parents=True, exist_ok=True)
        env = {**shop.env(), "YIMI_STATE_DIR": str(state)}

        def devices(device_id: str) -> DeviceRecord | None:
            registry = home.registry()
            try:
                return next((r for r in registry.devices() if r.device_id == device_id), None)
            finally:
                registry.close()

        gw = await stack.enter_async_context(
            open_gateway(
                home.path / "gateway",
                packages=[ERRANDS],
                env_for=lambda _m, _v: env,
                courier=courier,
                durable=False,
            )
        )
        pay = await stack.enter_async_context(
            open_payments(gw, home.path / "gateway", devices=devices, durable=False, sweep=sweep)
        )
        yield PayWorld(root, home, phone, glasses, shop, courier, gw, pay)
