"""``yimi pay``: payments — the phone's answers, the hub's records, the two options.

| command | what it does |
|---|---|
| ``yimi pay approve --bundle PHONE [CARD_ID]`` | approve a payment card (signed, unlocked) |
| ``yimi pay deny --bundle PHONE [CARD_ID]`` | deny it |
| ``yimi pay cards --bundle PHONE`` | the payment cards waiting on the phone |
| ``yimi pay undo --bundle PHONE [PAYMENT_ID]`` | undo an auto-payment inside its undo window |
| ``yimi pay unlock --bundle PHONE [--minutes N]`` | report a signed unlock lease to the hub |
| ``yimi pay lock-sensor --bundle PHONE locked|unlocked|show`` | set the phone's FAKE lock sensor |
| ``yimi pay list --home DIR`` | recent payments and their states |
| ``yimi pay show PAYMENT_ID --home DIR`` | one payment: history and authorisations |
| ``yimi pay options show --home DIR`` | voice pay and auto-pay settings (default off) |
| ``yimi pay options set --bundle PHONE K=V...`` | change them, phone-signed, over the mesh |
| ``yimi pay options set --home DIR --bundle PHONE K=V...`` | the same, written to the home |

The phone's edge daemon (``yimi edge run --bundle PHONE``) sends unlock leases by itself
when its lock sensor reports unlocked, and ends them when it reports locked.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from pathlib import Path
from typing import Any

from cli.common import EXIT_OK, Command, fmt_ms


def _store(home: Path) -> Any:
    from hub.payments.store import PaymentStore
    from provisioning.home import Home

    Home.load(home)  # a clear error for a folder that is not a home
    return PaymentStore(home / "gateway" / "payments.db")


def cmd_pay_answer(args: argparse.Namespace) -> int:
    from edge_agent.pay import answer_payment
    from provisioning.bundle import Bundle

    logging.basicConfig(level=logging.ERROR, stream=sys.stderr)
    bundle = Bundle.load(args.bundle)
    out = asyncio.run(
        answer_payment(
            bundle,
            args.card_id,
            approve=args.action == "approve",
            hub=args.hub,
            timeout=args.timeout,
        )
    )
    print(out)
    return EXIT_OK


def cmd_pay_cards(args: argparse.Namespace) -> int:
    from edge_agent.pay import list_payment_cards
    from provisioning.bundle import Bundle

    logging.basicConfig(level=logging.ERROR, stream=sys.stderr)
    bundle = Bundle.load(args.bundle)
    cards = asyncio.run(list_payment_cards(bundle, hub=args.hub, timeout=args.timeout))
    print("\n".join(cards) if cards else "no pending payment cards")
    return EXIT_OK


def cmd_pay_undo(args: argparse.Namespace) -> int:
    from edge_agent.pay import undo_payment
    from provisioning.bundle import Bundle

    logging.basicConfig(level=logging.ERROR, stream=sys.stderr)
    bundle = Bundle.load(args.bundle)
    print(asyncio.run(undo_payment(bundle, args.payment_id, hub=args.hub, timeout=args.timeout)))
    return EXIT_OK


def cmd_pay_unlock(args: argparse.Namespace) -> int:
    from edge_agent.pay import send_lease
    from provisioning.bundle import Bundle

    logging.basicConfig(level=logging.ERROR, stream=sys.stderr)
    bundle = Bundle.load(args.bundle)
    print(asyncio.run(send_lease(bundle, minutes=args.minutes, hub=args.hub, timeout=args.timeout)))
    return EXIT_OK


def cmd_pay_lock_sensor(args: argparse.Namespace) -> int:
    from edge_agent.pay import lock_sensor
    from provisioning.bundle import Bundle

    bundle = Bundle.load(args.bundle)
    sensor = lock_sensor(bundle)
    if args.state == "show":
        state = sensor.read()
    else:
        set_ = getattr(sensor, "set", None)
        if set_ is None:
            raise SystemExit("this lock sensor cannot be set")
        state = set_(args.state == "unlocked")
    what = "unlocked" if state.unlocked else "locked"
    print(f"{bundle.name}: {what} since {fmt_ms(state.since_ms)} ({state.sensor}: a FAKE sensor)")
    return EXIT_OK


def cmd_pay_list(args: argparse.Namespace) -> int:
    from hub.payments.money import fmt

    store = _store(args.home)
    try:
        rows = store.recent(args.limit)
    finally:
        store.close()
    if not rows:
        print("(no payments)")
        return EXIT_OK
    print(f"{'PAYMENT':<21} {'STATE':<17} {'AMOUNT':>13}  {'PAYEE':<20} {'MODE':<5} CREATED")
    for p in rows:
        amount = fmt(p.amount_minor, p.currency) if p.amount_minor is not None else "-"
        print(
            f"{p.payment_id:<21} {p.state:<17} {amount:>13}  {p.payee[:20] or '-':<20} "
            f"{p.mode or '-':<5} {fmt_ms(p.created_ms)}"
        )
    return EXIT_OK


def cmd_pay_show(args: argparse.Namespace) -> int:
    from hub.payments.errors import PaymentError
    from hub.payments.money import fmt

    store = _store(args.home)
    try:
        p = store.get(args.payment_id)
        if p is None:
            raise PaymentError("pay.unknown", payment=args.payment_id)
        history = store.history(p.payment_id)
        auths = store.auths(p.payment_id)
    finally:
        store.close()
    amount = fmt(p.amount_minor, p.currency) if p.amount_minor is not None else "-"
    budget = fmt(p.budget_minor, p.currency) if p.budget_minor is not None else "-"
    print(f"payment     {p.payment_id}  ({p.state})")
    print(f"for         {p.description or '-'}  (task {p.task_id}, trace {p.trace_id or '-'})")
    print(f"request     {p.request.source} on {p.request.device_id or '-'}: {p.request.text!r}")
    print(f"payee       {p.payee or '-'}    amount {amount}    budget {budget}")
    print(f"checkout    {p.checkout_id or '-'} via {p.package or '-'}    mode {p.mode or '-'}")
    print(f"re-issues   {p.reissues} of 2    provider ref {p.provider_ref or '-'}")
    if p.reason:
        print(f"reason      {p.reason}")
    print("history:")
    for at, old, new, why in history:
        print(f"  {fmt_ms(at)}  {old or '(new)':>17} → {new:<17} {why}")
    print("authorisations:")
    for a in auths:
        print(
            f"  {a.auth_id}  {a.method:<5} {a.state:<8} {fmt(a.amount_minor, a.currency):>12} "
            f"to {a.payee}  issued {fmt_ms(a.issued_ms)}  card {a.card_id or '-'}"
            + (f"  by {a.approved_by}" if a.approved_by else "")
        )
    return EXIT_OK


def cmd_pay_options(args: argparse.Namespace) -> int:
    if args.op == "show":
        store = _store(args.home)
        try:
            options, changed = store.options(), store.options_changed()
        finally:
            store.close()
        for line in options.describe():
            print(line)
        print(
            f"changed:            {fmt_ms(changed[0])} by {changed[1]}"
            if changed
            else "changed: never"
        )
        return EXIT_OK
    from hub.gateway.audit import AuditLog
    from hub.payments.phone import change_options
    from protos.signed import options_change
    from provisioning.bundle import Bundle
    from provisioning.home import Home

    changes: dict[str, Any] = {}
    for item in args.settings:
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"yimi pay options set: {item!r} is not KEY=VALUE")
        changes[key.strip()] = value.strip()
    if args.home is None:  # over the mesh: the phone signs, the hub checks and applies
        from edge_agent.pay import send_options

        logging.basicConfig(level=logging.ERROR, stream=sys.stderr)
        bundle = Bundle.load(args.bundle)
        described = asyncio.run(send_options(bundle, changes, hub=args.hub, timeout=args.timeout))
        print(f"payment options changed, signed by {bundle.name}:")
        print(described)
        return EXIT_OK
    home = Home.load(args.home)
    bundle = Bundle.load(args.bundle)
    registry = home.registry()
    try:
        rec = next((r for r in registry.devices() if r.device_id == bundle.device_id), None)
    finally:
        registry.close()
    if rec is None:
        from hub.payments.errors import PaymentError

        raise PaymentError("pay.options_refused", reason="the bundle's device is not in this home")
    body, signature = options_change(bundle.keys.sign, bundle.device_id, changes)
    store = _store(args.home)
    audit = AuditLog(args.home / "gateway" / "audit", signer=home.hub_keys.sign)
    try:
        options = change_options(store, audit, body, signature, rec)
    finally:
        audit.close()
        store.close()
    print(f"payment options changed, signed by {bundle.name}:")
    for line in options.describe():
        print(line)
    return EXIT_OK


def add_commands(sub: Any, command: Command) -> None:
    """Register ``yimi pay`` on ``yimi``'s subparsers (``command`` is cli.main's helper)."""
    pay = sub.add_parser("pay", help="payments: approve on the phone, list, options")
    pay_sub = pay.add_subparsers(dest="action", required=True)

    def phone_args(sp: argparse.ArgumentParser, timeout: float) -> None:
        sp.add_argument("--bundle", type=Path, required=True, help="the phone's bundle")
        sp.add_argument("--hub", help="HOST:PORT of the hub's gRPC (default: zeroconf)")
        sp.add_argument("--timeout", type=float, default=timeout)

    for name, text in (
        ("approve", "approve a payment card on the phone (it must be unlocked)"),
        ("deny", "deny a payment card on the phone"),
    ):
        sp = command(pay_sub, name, cmd_pay_answer, text)
        phone_args(sp, 30.0)
        sp.add_argument("card_id", nargs="?", help="the card (default: the only pending one)")
    sp = command(pay_sub, "cards", cmd_pay_cards, "the payment cards waiting on the phone")
    phone_args(sp, 10.0)
    sp = command(
        pay_sub, "undo", cmd_pay_undo, "undo an auto-payment on the phone (inside its window)"
    )
    phone_args(sp, 10.0)
    sp.add_argument("payment_id", nargs="?", help="the payment (default: the only one)")
    sp = command(pay_sub, "unlock", cmd_pay_unlock, "report a signed unlock lease to the hub")
    phone_args(sp, 10.0)
    sp.add_argument("--minutes", type=float, default=10.0, help="lease length (at most 15)")
    sp = command(
        pay_sub, "lock-sensor", cmd_pay_lock_sensor, "set or show the phone's FAKE lock sensor"
    )
    sp.add_argument("--bundle", type=Path, required=True)
    sp.add_argument("state", choices=["locked", "unlocked", "show"])

    sp = command(pay_sub, "list", cmd_pay_list, "recent payments and their states")
    sp.add_argument("--home", type=Path, required=True)
    sp.add_argument("--limit", type=int, default=50)
    sp = command(pay_sub, "show", cmd_pay_show, "one payment: history and authorisations")
    sp.add_argument("--home", type=Path, required=True)
    sp.add_argument("payment_id")

    opts = pay_sub.add_parser("options", help="voice pay and auto-pay (default off)")
    opts_sub = opts.add_subparsers(dest="op", required=True)
    sp = command(opts_sub, "show", cmd_pay_options, "show the payment options")
    sp.add_argument("--home", type=Path, required=True)
    sp = command(
        opts_sub, "set", cmd_pay_options, "change payment options (signed by the owner's phone)"
    )
    sp.add_argument(
        "--home",
        type=Path,
        help="write the change into this home (default: send it to the hub over the mesh)",
    )
    sp.add_argument("--bundle", type=Path, required=True, help="the owner's phone bundle")
    sp.add_argument("--hub", help="HOST:PORT of the hub's gRPC (default: zeroconf)")
    sp.add_argument("--timeout", type=float, default=10.0)
    sp.add_argument(
        "settings",
        nargs="+",
        help="KEY=VALUE: voice_pay=on, voice_pay_limit=200, auto_pay=on, auto_pay_limit=50, "
        "auto_pay_daily=150, same_payee_minutes=30, undo_seconds=5, currency=EUR, "
        "known_payees='Lotus Kitchen,Green Bowl'",
    )
