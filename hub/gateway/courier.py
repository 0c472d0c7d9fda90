"""Capabilities over the mesh: the hub's gateway, its cards and the phones' answers,
and the executor bridge to devices with the executor role (the Mac).

:class:`MeshConsent` is owned by the hub daemon (an async context manager). On enter it
opens the hub's gateway (``HOME/gateway/``: ``gateway.db``, ``audit/``) over every
built-in package and those ``HOME/packages.yaml`` adds, as it configures them; a built-in
stops only when the file says ``enabled: false`` (:mod:`hub.capabilities.settings`)::

    messaging:                       # package name
      path: /opt/yimi/packages/messaging   # optional; default: the built-in package
      config: {SMTP_HOST: mail.example.org, SMTP_PORT: "587"}   # → YIMI_SMTP_HOST ...
    home:
      config: {MQTT_HOST: 127.0.0.1, MQTT_PORT: "1883"}
    mac:
      enabled: false

Secrets live in ``HOME/keys/package-secrets.json`` (mode 0600; ``{"SMTP_PASSWORD": ...}``)
and reach only the server of a package that declares the name — never model context.

Cards go as ``CARD`` envelopes to every device whose certificate holds the ``approve``
scope (the phone), and in short form to devices with the ``hud`` role (glasses) — in full to
glasses holding ``approve.gesture`` when the owner lets glasses answer the card's effect
(``glasses: {nod_effects: [send]}`` in home.yaml, the default; never a payment): a nod there
approves it, a shake denies it, and the hub checks that rule again on the answer. Pending
cards are sent again when such a device comes online, and on request (an ``Approval``
with ``sync`` set). Answers (``APPROVAL``) are checked and executed by the gateway; the
outcome goes back as ``CARD_UPDATE``. Expired cards are cancelled every second. The receipt
of every answered or expired card goes to ``on_receipt`` (the daemon hands it to the brain).

The payment authority (``hub.payments``, ``HOME/gateway/payments.db``) is opened next to
the gateway: payment cards travel the same way; an ``APPROVAL`` carrying only a ``lease`` is
the phone's signed unlock lease (answered with ``CARD_UPDATE`` ``LEASE_ACCEPTED``).

Audit witnesses (:mod:`sync.audit_head`): devices with the ``approve`` scope or the
``executor`` role get the audit log's signed head (``AUDIT_HEAD``) whenever it grows (checked
every sweep) and, with ``request`` set, when they come online — so also at the hub's start,
when the retained presences of the connected devices arrive. Each answers with the highest
head it kept; a log behind (or forking from) a witness's head is logged as an error and
counted ``audit.rollback`` (``yimi hub status``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AsyncExitStack
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from google.protobuf.message import Message
from nacl.signing import SigningKey

from hub.capabilities.manifest import Manifest
from hub.capabilities.settings import load_enabled
from hub.gateway import open_gateway
from hub.gateway.consent import GESTURE_EFFECTS, Answer, Card
from hub.gateway.executor_bridge import ExecutorBridge
from hub.gateway.gateway import Gateway
from hub.gateway.receipts import Receipt
from protos import consent_pb2, mesh_pb2
from protos.codec import parse
from provisioning.profiles import load_profile
from provisioning.registry import DeviceRecord
from storage.group_commit import GroupCommit
from storage.private import private_dir
from sync.audit_head import SignedHead
from sync.scopes import GESTURE_SCOPE
from sync.tasks import TaskOwner

if TYPE_CHECKING:
    from hub.mesh.port import MeshPort
    from hub.payments import PaymentAuthority
    from sync.envelope import Opened

log = logging.getLogger(__name__)

EXPIRY_SWEEP_S = 1.0


def package_secrets(home: Path) -> dict[str, str]:
    path = home / "keys" / "package-secrets.json"
    if not path.exists():
        return {}
    data = json.loads(path.read_text())
    return {str(k): str(v) for k, v in data.items()}


class MeshConsent:
    """The gateway on the mesh: ``home`` is ``HOME``, ``audit_signer`` the hub's signing key
    (audit log), ``port`` the hub's mesh port, ``devices`` the registry's records."""

    def __init__(
        self,
        home: Path,
        *,
        audit_signer: SigningKey,
        port: MeshPort,
        devices: Callable[[], Sequence[DeviceRecord]],
        gesture_effects: frozenset[str] = GESTURE_EFFECTS,
        group: GroupCommit | None = None,
    ) -> None:
        self.home = home
        self._group = group
        """the hub's group commit: its every flush also waits for the gateway's batches,
        so an ``observe`` receipt need not wait for its own fsync
        (:attr:`Gateway.settled_by_caller`)"""
        self._gesture_effects = gesture_effects
        """the effects glasses may answer with a nod (home.yaml ``glasses.nod_effects``)"""
        self._audit_signer = audit_signer
        self.port = port
        self._registry_devices = devices
        self.gateway: Gateway | None = None
        self.payments: PaymentAuthority | None = None
        """the payment authority (``hub.payments``), attached to the gateway"""
        self._stack = AsyncExitStack()
        self._tasks: TaskOwner | None = None
        self.bridge = ExecutorBridge(
            self.home / "run" / "executor.sock", self._devices, self._send, count=port.count
        )
        self.on_receipt: Callable[[Receipt], Awaitable[None]] | None = None
        """gets the receipt of every answered or expired card (the brain's waiting task
        goes on: ``brain.on_receipt``)"""
        self.package_env: Callable[[Manifest], dict[str, str]] | None = None
        """settings the daemon adds to a package's environment (``packages.yaml`` wins)"""
        self._head_sent = 0
        """seq of the last audit head pushed to the witnesses"""
        self.not_loaded: dict[str, str] = {}
        """enabled packages whose manifest did not load: name → why"""
        self.loaded: tuple[str, ...] = ()
        """the packages the gateway runs"""

    # ------------------------------------------------------------------ lifecycle
    def _catalog(self) -> tuple[dict[str, Manifest], dict[str, dict[str, Any]]]:
        self.not_loaded = {}
        return load_enabled(self.home, self.not_loaded)

    async def __aenter__(self) -> MeshConsent:
        catalog, settings = self._catalog()
        secrets = package_secrets(self.home)

        def env_for(m: Manifest, variant: str) -> dict[str, str]:
            s = settings.get(m.name, {})
            env = dict(self.package_env(m)) if self.package_env is not None else {}
            env.update({f"YIMI_{k}": str(v) for k, v in (s.get("config") or {}).items()})
            env.update({k: secrets[k] for k in m.secrets if k in secrets})
            state = private_dir(self.home / "package-state" / m.name)
            env["YIMI_STATE_DIR"] = str(state)
            if "EXECUTOR_SOCKET" in m.config:
                env["YIMI_EXECUTOR_SOCKET"] = str(self.bridge.path)
            return env

        try:
            await self._stack.enter_async_context(self.bridge)
            self.gateway = await self._stack.enter_async_context(
                open_gateway(
                    self.home / "gateway",
                    manifests=catalog,
                    env_for=env_for,
                    courier=self,
                    audit_signer=self._audit_signer,
                    settled_by_caller=self._group is not None,
                )
            )
            if self._group is not None:
                self._stack.callback(self._group.also(self.settled))
            self.gateway.consent.gesture_effects = self._gesture_effects
            from hub.payments import open_payments

            self.payments = await self._stack.enter_async_context(
                open_payments(self.gateway, self.home / "gateway", devices=self._device)
            )
            # payment results no card answer carries (an auto-payment after its undo window,
            # "pay it", a status check settling an unknown payment) reach the waiting task too
            self.gateway.on_result = self._payment_result
            self._tasks = await self._stack.enter_async_context(TaskOwner("consent"))
            self._tasks.spawn(self._sweep(), "card-expiry")
        except BaseException:
            await self._stack.aclose()
            raise
        self.loaded = tuple(sorted(catalog))
        log.info("gateway up: packages %s", ", ".join(self.loaded) or "(none)")
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self._stack.aclose()
        self.gateway = None
        self.payments = None

    async def settled(self) -> None:
        """What the gateway staged so far is durable (awaited by the hub's group commit
        before anything leaves the hub)."""
        gw = self.gateway
        if gw is not None:
            await gw.commits.settled()

    def packages(self) -> tuple[tuple[str, ...], tuple[str, ...], dict[str, str]]:
        """(loaded, running, failed: name → why) of the gateway's packages now."""
        host = self.gateway.host if self.gateway is not None else None
        running = tuple(host.running()) if host is not None else ()
        failed = dict(self.not_loaded)
        if host is not None:
            failed.update(host.failures())
        return self.loaded, running, failed

    async def _sweep(self) -> None:
        while True:
            await asyncio.sleep(EXPIRY_SWEEP_S)
            if self.gateway is not None:
                try:
                    for r in await self.gateway.expire_cards():
                        log.info("card for %s.%s expired: cancelled", r.package, r.tool)
                        await self._receipt(r)
                except Exception:
                    log.exception("card expiry sweep failed")
                try:
                    await self._push_head()
                except Exception:
                    log.exception("audit head not pushed")

    # ------------------------------------------------------------------ audit witnesses
    def witnesses(self) -> list[DeviceRecord]:
        """the devices that keep the audit head: ``approve`` scope or ``executor`` role"""
        return [
            r for r in self._devices() if "approve" in r.scopes or self._has_role(r, "executor")
        ]

    def _head(self) -> SignedHead | None:
        return self.gateway.audit.head() if self.gateway is not None else None

    async def _push_head(self) -> None:
        head = self._head()
        if head is None or head.seq == self._head_sent or not self.port.connected:
            return
        for rec in self.witnesses():
            await self._send(rec.device_id, mesh_pb2.AUDIT_HEAD, head.to_proto())
        self._head_sent = head.seq

    async def _ask_head(self, device_id: str) -> None:
        """Send a witness the current head and ask for the highest one it holds."""
        if not any(r.device_id == device_id for r in self.witnesses()):
            return
        head = self._head()
        msg = head.to_proto(request=True) if head else consent_pb2.AuditHead(request=True)
        await self._send(device_id, mesh_pb2.AUDIT_HEAD, msg)

    async def ask_witnesses(self) -> None:
        """At the hub's start: ask every witness for the highest head it holds."""
        for rec in self.witnesses():
            await self._ask_head(rec.device_id)

    async def on_audit_head(self, opened: Opened) -> None:
        """A witness's highest head: the log must not be behind it (nor fork from it)."""
        msg = opened.payload
        assert isinstance(msg, consent_pb2.AuditHead)
        if self.gateway is None or msg.seq == 0:
            return
        from hub.gateway.audit import verify

        head = SignedHead.from_proto(msg)
        if not head.valid(self._audit_signer.verify_key.encode()):
            self.port.count("rejected.audit_head_unsigned")
            log.warning("audit head from %s is not signed by this hub: ignored", opened.sender)
            return
        verdict = await asyncio.to_thread(
            verify,
            self.gateway.audit.dir,
            self._audit_signer.verify_key.encode(),
            witness=head,
        )
        if verdict.problem.startswith("rollback:"):
            self.port.count("audit.rollback")
            log.error(
                "audit rollback detected by witness %s: %s",
                opened.sender,
                verdict.problem.removeprefix("rollback:").strip(),
            )
        elif not verdict.ok:
            log.error("audit log fails verification: %s", verdict.problem)
        else:
            self.port.count("audit.witnessed")
            log.info("audit head witnessed by %s at seq %d: consistent", opened.sender, head.seq)

    # ------------------------------------------------------------------ devices
    def _devices(self) -> list[DeviceRecord]:
        return [r for r in self._registry_devices() if not r.revoked]

    def _device(self, device_id: str) -> DeviceRecord | None:
        """The registry's record (revoked ones included: the caller checks)."""
        return next((r for r in self._registry_devices() if r.device_id == device_id), None)

    @staticmethod
    def _has_role(rec: DeviceRecord, role: str) -> bool:
        try:
            return role in load_profile(rec.profile).roles
        except Exception:
            return False

    def approvers(self) -> list[DeviceRecord]:
        return [r for r in self._devices() if "approve" in r.scopes]

    def huds(self) -> list[DeviceRecord]:
        return [
            r for r in self._devices() if "approve" not in r.scopes and self._has_role(r, "hud")
        ]

    async def _send(self, device_id: str, kind: int, payload: Message, trace_id: str = "") -> bool:
        if not self.port.connected:
            return False
        try:
            return await self.port.send(device_id, kind, payload, trace_id or None)
        except Exception as exc:
            log.info("consent message to %s not sent now: %s", device_id, exc)
            return False

    # ------------------------------------------------------------------ Courier
    def _short_for(self, rec: DeviceRecord, card: Card) -> bool:
        """Whether ``rec`` (a HUD) gets ``card`` only as a notice: unless it may answer it
        with a nod (``approve.gesture`` and an effect the owner allowed for glasses)."""
        if GESTURE_SCOPE not in rec.scopes or self.gateway is None:
            return True
        return bool(self.gateway.consent.gesture_refusal(card))

    async def show(self, card: Card) -> None:
        trace = str(card.context.get("trace_id", ""))
        for rec in self.approvers():
            await self._send(rec.device_id, mesh_pb2.CARD, card.to_proto(), trace)
        for rec in self.huds():
            short = self._short_for(rec, card)
            await self._send(rec.device_id, mesh_pb2.CARD, card.to_proto(short=short), trace)

    async def update(self, update: consent_pb2.CardUpdate, card: Card) -> None:
        for rec in self.approvers():
            await self._send(rec.device_id, mesh_pb2.CARD_UPDATE, update)
        for rec in self.huds():
            if update.state != consent_pb2.REFUSED or GESTURE_SCOPE in rec.scopes:
                await self._send(rec.device_id, mesh_pb2.CARD_UPDATE, update)

    # ------------------------------------------------------------------ incoming
    async def on_online(self, device_id: str) -> None:
        """A device came online: send it the cards still waiting for the owner (and a
        witness the audit head, asking for its own)."""
        await self._resend(device_id)
        await self._ask_head(device_id)

    async def _resend(self, device_id: str) -> None:
        if self.gateway is None:
            return
        rec = next((r for r in self._devices() if r.device_id == device_id), None)
        if rec is None:
            return
        approver = "approve" in rec.scopes
        if not approver and not self._has_role(rec, "hud"):
            return
        for card in self.gateway.consent.pending():
            short = not approver and self._short_for(rec, card)
            await self._send(device_id, mesh_pb2.CARD, card.to_proto(short=short))

    async def on_exec_result(self, opened: Opened) -> None:
        """A device's answer to an executor request (the ``mac`` package's calls)."""
        await self.bridge.on_result(opened)

    async def on_approval(self, opened: Opened) -> None:
        approval = opened.payload
        assert isinstance(approval, consent_pb2.Approval)
        if self.gateway is None:
            return
        if approval.sync and not approval.body:
            await self._resend(opened.sender)
            await self._send(
                opened.sender,
                mesh_pb2.CARD_UPDATE,
                consent_pb2.CardUpdate(state=consent_pb2.SYNC_DONE),
            )
            return
        rec = next((r for r in self._devices() if r.device_id == opened.sender), None)
        if rec is None:
            return
        if approval.lease and not approval.body:
            await self._lease(approval, rec)
            return
        if approval.options and not approval.body:
            await self._options(approval, rec)
            return
        assert self._tasks is not None
        self._tasks.spawn(self._answer(approval, rec, opened.trace_id), f"answer:{opened.counter}")

    async def _lease(self, approval: consent_pb2.Approval, rec: DeviceRecord) -> None:
        """The phone's signed unlock lease (voice pay and auto-pay need one)."""
        if self.payments is None:
            return
        ok, reason, until = self.payments.report_lease(approval, rec)
        log.info("unlock lease from %s: %s", rec.name, "accepted" if ok else reason)
        when = time.strftime("%H:%M:%S", time.localtime(until / 1000)) if ok else ""
        text = (f"unlock lease until {when}" if until else "unlock lease ended") if ok else reason
        await self._send(
            rec.device_id,
            mesh_pb2.CARD_UPDATE,
            consent_pb2.CardUpdate(
                state=consent_pb2.LEASE_ACCEPTED if ok else consent_pb2.REFUSED,
                reason=text,
                at_ms=until,
            ),
        )

    async def _options(self, approval: consent_pb2.Approval, rec: DeviceRecord) -> None:
        """The phone's signed change of the payment options (``yimi pay options set``)."""
        if self.payments is None or self.gateway is None:
            return
        from hub.payments import PaymentError, change_options

        try:
            options = change_options(
                self.payments.store,
                self.gateway.audit,
                approval.options,
                approval.options_signature,
                rec,
            )
        except PaymentError as exc:
            log.info("payment options change from %s refused: %s", rec.name, exc)
            update = consent_pb2.CardUpdate(state=consent_pb2.REFUSED, reason=str(exc)[:300])
        else:
            log.info("payment options changed by %s", rec.name)
            update = consent_pb2.CardUpdate(
                state=consent_pb2.OPTIONS_CHANGED, reason="\n".join(options.describe())
            )
        await self._send(rec.device_id, mesh_pb2.CARD_UPDATE, update)

    async def _answer(self, approval: consent_pb2.Approval, rec: DeviceRecord, trace: str) -> None:
        await self.answer(approval, rec, trace)

    async def answer(self, approval: consent_pb2.Approval, rec: DeviceRecord, trace: str) -> Answer:
        """A device's signed answer to a card (from the mesh, or the hub's own web page):
        refused, denied or executed once; the outcome is returned and told to the device."""
        assert self.gateway is not None
        ans, receipt = await self.gateway.answer(
            approval,
            device_id=rec.device_id,
            sign_pk=rec.sign_pk,
            scopes=rec.scopes,
            trace_id=trace,
            profile=rec.profile,
            revoked=rec.revoked,
        )
        log.info("answer from %s: %s %s", rec.name, ans.outcome, ans.reason)
        if ans.outcome == "refused":
            self.port.count("rejected.approval")
            if "approve" not in rec.scopes:  # glasses: a nod the hub does not take
                self.port.count("rejected.gesture")
        if ans.card is None:  # refused before a card was found: tell the device why
            body = parse(consent_pb2.ApprovalBody, approval.body, 4096)
            await self._send(
                rec.device_id,
                mesh_pb2.CARD_UPDATE,
                consent_pb2.CardUpdate(
                    card_id=body.card_id[:64] if body else "",
                    state=consent_pb2.REFUSED,
                    reason=ans.reason,
                ),
            )
        if receipt is not None:
            log.info("card %s: %s", ans.card.card_id if ans.card else "?", receipt.summary)
            await self._receipt(receipt)
        return ans

    async def _payment_result(self, receipt: Receipt) -> None:
        if receipt.effect == "spend":  # others come back with their card's answer
            await self._receipt(receipt)

    async def _receipt(self, receipt: Receipt) -> None:
        if self.on_receipt is not None:
            try:
                await self.on_receipt(receipt)
            except Exception:
                log.exception("receipt of task %s not handed on", receipt.task_id)
