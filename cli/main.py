"""``yimi``: the one console command. Subcommands dispatch through a handler table.

Exit status: 0 done; 1 a refused or failed operation (one line on stderr); 2 usage;
3 the hub was unreachable and the utterance was queued (``yimi say``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import re
import signal
import sys
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from protos.errors import YimiError

EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_QUEUED = 0, 1, 2, 3

Handler = Callable[[argparse.Namespace], int]


def _fmt_ms(ms: int | None) -> str:
    if not ms:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ms / 1000))


def _setup_logging(verbose: int, default: int = logging.INFO) -> None:
    level = logging.DEBUG if verbose > 0 else default
    logging.basicConfig(
        level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr
    )
    for noisy in ("grpc", "zeroconf", "aiomqtt", "mqtt"):
        logging.getLogger(noisy).setLevel(max(level, logging.WARNING))


def _run_service(coro_factory: Callable[[], Coroutine[Any, Any, int]]) -> int:
    """Run a long-lived service until SIGTERM/SIGINT; then leave its context cleanly."""

    async def main() -> int:
        task = asyncio.current_task()
        assert task is not None
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, task.cancel)
        try:
            return await coro_factory()
        except asyncio.CancelledError:
            return EXIT_OK

    return asyncio.run(main())


# ---------------------------------------------------------------- home / device
def cmd_home_init(args: argparse.Namespace) -> int:
    from provisioning.home import Home
    from provisioning.identity import short_fingerprint

    home = Home.init(
        args.home,
        force=args.force,
        mqtt_port=args.mqtt_port,
        grpc_port=args.grpc_port,
        hub_host=args.hub_host,
    )
    print(f"home id:          {home.home_id}")
    print(f"hub fingerprint:  {home.fingerprint}")
    print(f"                  ({short_fingerprint(home.fingerprint)})")
    print(f"home folder:      {home.path}")
    return EXIT_OK


def cmd_device_add(args: argparse.Namespace) -> int:
    from provisioning.bundle import flash
    from provisioning.home import Home

    home = Home.load(args.home)
    bundle = flash(
        home, profile_name=args.profile, name=args.name, out=args.out, hub_host=args.hub_host
    )
    print(f"device {bundle.name} ({bundle.profile.name}) enrolled as {bundle.device_id}")
    print(f"bundle written to {bundle.path}")
    if args.user_data:
        from provisioning.firstboot import user_data
        from provisioning.identity import write_secret

        text = user_data(bundle.path, hostname=f"yimi-{bundle.name}", source=args.source)
        write_secret(args.user_data, text.encode())
        print(
            f"cloud-init user-data (holds the device keys, mode 0600) written to {args.user_data}"
        )
    return EXIT_OK


def cmd_device_list(args: argparse.Namespace) -> int:
    from hub.timeline import HubStore
    from provisioning.home import Home

    home = Home.load(args.home)
    registry = home.registry()
    store = HubStore(home.path / "hub.db")
    try:
        presence = store.presence()
        devices = registry.devices()
    finally:
        registry.close()
        store.close()
    print(f"{'NAME':<16} {'PROFILE':<8} {'DEVICE ID':<17} {'STATE':<8} {'LAST SEEN':<20} ENROLLED")
    for d in devices:
        p = presence.get(d.device_id)
        state = "revoked" if d.revoked else (p.state if p else "never")
        print(
            f"{d.name:<16} {d.profile:<8} {d.device_id:<17} {state:<8} "
            f"{_fmt_ms(p.last_seen_ms if p else None):<20} {d.enrolled_by} {_fmt_ms(d.created_ms)}"
        )
    return EXIT_OK


def cmd_device_revoke(args: argparse.Namespace) -> int:
    from provisioning.home import Home

    home = Home.load(args.home)
    registry = home.registry()
    try:
        rec = registry.revoke(args.name)
    finally:
        registry.close()
    print(f"device {rec.name} ({rec.device_id}) revoked at {_fmt_ms(rec.revoked_ms)}")
    return EXIT_OK


def cmd_device_pair(args: argparse.Namespace) -> int:
    from provisioning.pairing import PairAttempt, pair_over_grpc
    from sync.locate import parse_target

    host, port = parse_target(args.hub, 18884)
    attempt = PairAttempt.make(args.code, profile=args.profile, name=args.name)
    response = asyncio.run(pair_over_grpc(f"{host}:{port}", attempt.request))
    bundle = attempt.finish(response, out=args.out, hub_host=host)
    print(f"paired: device {bundle.name} ({bundle.profile.name}) is {bundle.device_id}")
    print(f"hub fingerprint pinned: {bundle.pinned_fingerprint}")
    print(f"bundle written to {bundle.path}")
    return EXIT_OK


# ---------------------------------------------------------------- hub
def loopback_hub_args(home: Path, mqtt_port: int, grpc_port: int) -> list[str]:
    """``yimi`` arguments that run the hub of ``home`` on 127.0.0.1 with these ports (the
    demo, the test harness and the benches start hub processes with them)."""
    return [
        "hub",
        "run",
        "--home",
        str(home),
        "--bind",
        "127.0.0.1",
        "--mqtt-port",
        str(mqtt_port),
        "--grpc-port",
        str(grpc_port),
    ]


HUB_UP = re.compile(r"\bhub [0-9a-f]+ up: ")
"""the line a hub process logs once it is subscribed and serving (``HubDaemon``)"""


def hub_is_up(log_text: str) -> bool:
    """Whether a hub process's log says it is up (subscribed to every device's uplink)."""
    return HUB_UP.search(log_text) is not None


def cmd_hub_run(args: argparse.Namespace) -> int:
    from hub.mesh.daemon import HubDaemon, HubOptions
    from provisioning.home import Home

    _setup_logging(args.verbose)
    home = Home.load(args.home)
    options = HubOptions(
        mqtt_port=args.mqtt_port or home.mqtt_port,
        grpc_port=args.grpc_port or home.grpc_port,
        bind=args.bind,
        advertise=not args.no_advertise,
    )

    async def serve() -> int:
        async with HubDaemon(home, options):
            await asyncio.Event().wait()
        return EXIT_OK

    return _run_service(serve)


def cmd_hub_status(args: argparse.Namespace) -> int:
    from hub.mesh.daemon import hub_pid

    pid = hub_pid(args.home)
    print(f"hub: running (pid {pid})" if pid else "hub: not running")
    cmd_device_list(args)
    from hub.timeline import HubStore

    store = HubStore(args.home / "hub.db")
    try:
        counters = store.counters()
    finally:
        store.close()
    print("\nmessages:")
    if not counters:
        print("  (none yet)")
    for name, value in counters.items():
        print(f"  {name:<32} {value}")
    return EXIT_OK


def cmd_hub_pair_code(args: argparse.Namespace) -> int:
    from provisioning.home import Home
    from provisioning.pairing import issue_code

    home = Home.load(args.home)
    code, expires = issue_code(home, ttl_s=args.ttl)
    print(code)
    print(
        f"valid once, until {_fmt_ms(expires)}; hub fingerprint {home.fingerprint}", file=sys.stderr
    )
    return EXIT_OK


# ---------------------------------------------------------------- device side
def cmd_edge_run(args: argparse.Namespace) -> int:
    from edge_agent.daemon import VoiceOptions, run_edge
    from provisioning.bundle import Bundle

    _setup_logging(args.verbose)
    bundle = Bundle.load(args.bundle)
    voice = None
    if args.audio is not None:
        voice = VoiceOptions(
            audio=args.audio,
            out=args.out,
            realtime=args.realtime,
            start_ms=args.audio_start_ms,
            once=args.once,
            timeout=args.timeout,
        )
    elif args.out or args.realtime or args.audio_start_ms is not None or args.once:
        print("yimi: --out, --realtime, --audio-start-ms and --once need --audio", file=sys.stderr)
        return EXIT_USAGE
    return _run_service(lambda: run_edge(bundle, hub=args.hub, voice=voice))


def cmd_say(args: argparse.Namespace) -> int:
    from edge_agent.say import say
    from provisioning.bundle import Bundle

    _setup_logging(args.verbose, default=logging.ERROR)  # the outcome is one line on its own
    bundle = Bundle.load(args.bundle)
    return asyncio.run(say(bundle, " ".join(args.text), hub=args.hub, timeout=args.timeout))


def cmd_timeline(args: argparse.Namespace) -> int:
    rows: list[tuple[int | None, str, int, str, str]]
    if args.home is not None:
        from hub.timeline import HubStore
        from provisioning.home import Home

        home = Home.load(args.home)
        registry = home.registry()
        store = HubStore(args.home / "hub.db")
        try:
            names = {d.device_id: d.name for d in registry.devices()}
            rows = [
                (e.seq, names.get(e.device, e.device), e.ts_ms, e.kind, e.text)
                for e in store.entries(limit=args.limit)
            ]
        finally:
            store.close()
            registry.close()
    else:
        from protos import mesh_pb2
        from provisioning.bundle import Bundle
        from sync.outbox import Outbox
        from sync.replicas import ReplicaSet

        bundle = Bundle.load(args.bundle)
        replicas = ReplicaSet(bundle.state_dir / "replicas")
        names = {bundle.device_id: bundle.name}
        entries = replicas.timeline()
        rows = [(e.seq, names.get(e.device, e.device), e.ts, e.kind, e.text) for e in entries]
        known = {e.id for e in entries}
        outbox = Outbox(bundle.state_dir / "outbox.db")
        try:
            for item in outbox.pending():
                if item.kind == mesh_pb2.UTTERANCE and item.id not in known:
                    utt = mesh_pb2.Utterance.FromString(item.payload)
                    rows.append((None, bundle.name, item.created_ms, "utterance", utt.text))
        finally:
            outbox.close()
        rows = rows[-args.limit :]
    print(f"{'SEQ':>6}  {'DEVICE':<16} {'TIME':<19}  {'KIND':<9} TEXT")
    for seq, device, ts, kind, text in rows:
        shown = "pending" if seq is None else str(seq)
        print(f"{shown:>6}  {device:<16} {_fmt_ms(ts):<19}  {kind:<9} {text}")
    return EXIT_OK


def _replicas_of(args: argparse.Namespace) -> tuple[Any, str]:
    """The replica set of ``--bundle`` (a device) or ``--home`` (the hub), and who writes."""
    from sync.replicas import ReplicaSet

    if args.home is not None:
        from provisioning.home import Home

        home = Home.load(args.home)
        return ReplicaSet(home.path / "replicas"), "hub"
    from provisioning.bundle import Bundle

    bundle = Bundle.load(args.bundle)
    window = bundle.profile.window_days
    return ReplicaSet(bundle.state_dir / "replicas", window_days=window), bundle.device_id


def cmd_memo(args: argparse.Namespace) -> int:
    from sync import documents as docs
    from sync.envelope import random_id

    replicas, writer = _replicas_of(args)
    entry = docs.make_entry(
        entry_id=random_id("m-"), device=writer, kind=args.kind, text=" ".join(args.text)
    )
    replicas.add_entry(entry)
    print(f"{entry.id} written to the timeline (pending until the hub gives it a seq)")
    return EXIT_OK


NOTE_VALUES: dict[str, Callable[[str], object]] = {
    "text": str,
    "kind": str,
    "done": lambda v: v.lower() in ("1", "true", "yes", "done"),
}


def cmd_note(args: argparse.Namespace) -> int:
    from sync.envelope import random_id
    from sync.errors import SyncError

    replicas, writer = _replicas_of(args)
    if args.action == "add":
        note_id = random_id("n-")[:14]
        replicas.set_note(
            note_id,
            {"text": " ".join(args.text), "kind": args.kind, "done": False, "deleted": False},
            device=writer,
        )
        print(note_id)
        return EXIT_OK
    if args.action == "list":
        notes = replicas.notes(include_deleted=args.all)
        for n in notes:
            mark = "x" if n.done else " "
            gone = " (deleted)" if n.deleted else ""
            print(f"[{mark}] {n.id:<14} {n.kind:<6} {n.text}{gone}  — {_fmt_ms(n.updated_at)}")
        if not notes:
            print("(no notes)")
        return EXIT_OK
    known = {n.id for n in replicas.notes(include_deleted=True)}
    if args.id not in known:
        raise SyncError("note.unknown", id=args.id)
    if args.action == "rm":
        replicas.set_note(args.id, {"deleted": True}, device=writer)
    else:
        if args.field not in NOTE_VALUES:
            raise SyncError("note.field", field=args.field, known=", ".join(NOTE_VALUES))
        replicas.set_note(args.id, {args.field: NOTE_VALUES[args.field](args.value)}, device=writer)
    print(f"note {args.id} updated")
    return EXIT_OK


# ---------------------------------------------------------------- parser
def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="yimi", description="Yimi Mesh: your own assistant, on your own devices."
    )
    p.add_argument("-v", "--verbose", action="count", default=0, help="more logging")
    sub = p.add_subparsers(dest="command", required=True)

    def command(parent: Any, name: str, handler: Handler, help_: str) -> argparse.ArgumentParser:
        sp: argparse.ArgumentParser = parent.add_parser(name, help=help_, description=help_)
        sp.set_defaults(handler=handler)
        return sp

    home = sub.add_parser("home", help="the home: root keys and hub configuration")
    home_sub = home.add_subparsers(dest="action", required=True)
    sp = command(home_sub, "init", cmd_home_init, "create a home: keys, group key, hub config")
    sp.add_argument("--home", type=Path, required=True)
    sp.add_argument("--force", action="store_true", help="overwrite an existing home")
    sp.add_argument("--mqtt-port", type=int, default=18883)
    sp.add_argument("--grpc-port", type=int, default=18884)
    sp.add_argument("--hub-host", default="", help="address devices try before zeroconf")

    dev = sub.add_parser("device", help="enrol, list and revoke devices")
    dev_sub = dev.add_subparsers(dest="action", required=True)
    sp = command(dev_sub, "add", cmd_device_add, "flash a device bundle (keys made here)")
    sp.add_argument("--home", type=Path, required=True)
    sp.add_argument("--profile", required=True, help="glasses, mac, phone, watch or a YAML path")
    sp.add_argument("--name", required=True)
    sp.add_argument("--out", type=Path, required=True, help="bundle folder to create")
    sp.add_argument("--hub-host", default=None, help="hub address to pin as a hint")
    sp.add_argument("--user-data", type=Path, help="also write a cloud-init user-data file")
    sp.add_argument("--source", help="git URL the first boot clones the software from")
    sp = command(dev_sub, "list", cmd_device_list, "list enrolled devices")
    sp.add_argument("--home", type=Path, required=True)
    sp = command(dev_sub, "revoke", cmd_device_revoke, "revoke a device (refused within 1 s)")
    sp.add_argument("name")
    sp.add_argument("--home", type=Path, required=True)
    sp = command(dev_sub, "pair", cmd_device_pair, "enrol this device with a pairing code")
    sp.add_argument("--code", required=True)
    sp.add_argument("--profile", required=True)
    sp.add_argument("--name", required=True)
    sp.add_argument("--out", type=Path, required=True)
    sp.add_argument("--hub", default="127.0.0.1:18884", help="HOST[:PORT] of the hub's gRPC")

    hub = sub.add_parser("hub", help="run and inspect the hub")
    hub_sub = hub.add_subparsers(dest="action", required=True)
    sp = command(hub_sub, "run", cmd_hub_run, "run the hub: broker, gRPC, zeroconf, timeline")
    sp.add_argument("--home", type=Path, required=True)
    sp.add_argument("--mqtt-port", type=int)
    sp.add_argument("--grpc-port", type=int)
    sp.add_argument("--bind", default="0.0.0.0", help="listen address (127.0.0.1 for local only)")
    sp.add_argument("--no-advertise", action="store_true", help="no zeroconf advertisement")
    sp = command(hub_sub, "status", cmd_hub_status, "devices, presence and message counts")
    sp.add_argument("--home", type=Path, required=True)
    sp = command(hub_sub, "pair-code", cmd_hub_pair_code, "print a one-time pairing code")
    sp.add_argument("--home", type=Path, required=True)
    sp.add_argument("--ttl", type=int, default=600, help="seconds the code stays valid")

    edge = sub.add_parser("edge", help="run the device daemon")
    edge_sub = edge.add_subparsers(dest="action", required=True)
    sp = command(edge_sub, "run", cmd_edge_run, "run the edge agent for a bundle")
    sp.add_argument("--bundle", type=Path, required=True)
    sp.add_argument("--hub", help="HOST:PORT of the hub's gRPC (default: zeroconf)")
    sp.add_argument(
        "--audio", help="hear: mic, mic:DEVICE, - (raw s16le 16 kHz mono on stdin) or a file"
    )
    sp.add_argument("--out", help="speak replies into: speaker, speaker:DEVICE, null or a WAV file")
    sp.add_argument("--realtime", action="store_true", help="pace a file like a microphone")
    sp.add_argument(
        "--audio-start-ms",
        type=int,
        help="wall clock (ms since the epoch) of the file's first sample; with --realtime, "
        "hearing starts then",
    )
    sp.add_argument(
        "--once", action="store_true", help="exit when the audio ended and replies are in"
    )
    sp.add_argument(
        "--timeout", type=float, default=60.0, help="--once: seconds to wait for the replies"
    )

    sp = command(sub, "say", cmd_say, "send a typed utterance and print the reply")
    sp.add_argument("--bundle", type=Path, required=True)
    sp.add_argument("--hub", help="HOST:PORT of the hub's gRPC (default: zeroconf)")
    sp.add_argument("--timeout", type=float, default=15.0, help="seconds to wait for the reply")
    sp.add_argument("text", nargs="+")

    def where_arg(sp: argparse.ArgumentParser) -> None:
        group = sp.add_mutually_exclusive_group(required=True)
        group.add_argument("--home", type=Path, help="the hub's replicas")
        group.add_argument("--bundle", type=Path, help="this device's replicas")

    sp = command(sub, "memo", cmd_memo, "write an entry into the shared timeline (works offline)")
    where_arg(sp)
    sp.add_argument("--kind", default="memo")
    sp.add_argument("text", nargs="+")

    note = sub.add_parser("note", help="the owner's notes, edited on any device (works offline)")
    note_sub = note.add_subparsers(dest="action", required=True)
    sp = command(note_sub, "add", cmd_note, "add a note; prints its id")
    where_arg(sp)
    sp.add_argument("--kind", default="note", help="note, todo, preference, …")
    sp.add_argument("text", nargs="+")
    sp = command(note_sub, "list", cmd_note, "list notes")
    where_arg(sp)
    sp.add_argument("--all", action="store_true", help="include deleted notes")
    sp = command(note_sub, "set", cmd_note, "set one field of a note: text, kind or done")
    where_arg(sp)
    sp.add_argument("id")
    sp.add_argument("field")
    sp.add_argument("value")
    sp = command(note_sub, "rm", cmd_note, "delete a note")
    where_arg(sp)
    sp.add_argument("id")

    sp = command(sub, "timeline", cmd_timeline, "list timeline entries (hub or device view)")
    where = sp.add_mutually_exclusive_group(required=True)
    where.add_argument("--home", type=Path)
    where.add_argument("--bundle", type=Path)
    sp.add_argument("--limit", type=int, default=1000)
    from cli.gateway import add_commands

    add_commands(sub, command)
    from cli.archive import add_commands as add_archive_commands

    add_archive_commands(sub, command)
    from cli.memory import add_commands as add_memory_commands

    memory_sub = add_memory_commands(sub, command)
    from cli.recall import add_search_command

    add_search_command(memory_sub, command)
    from cli.pay import add_commands as add_pay_commands

    add_pay_commands(sub, command)
    from cli.models import add_commands as add_model_commands

    add_model_commands(sub, command)
    from cli.brain import add_commands as add_brain_commands

    add_brain_commands(sub, command)
    from cli.voice import add_commands as add_voice_commands

    add_voice_commands(sub, command)
    from cli.wake import add_commands as add_wake_commands

    add_wake_commands(sub, command)
    from demo.narrated import add_commands as add_demo_commands

    add_demo_commands(sub, command)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    handler: Handler = args.handler
    try:
        return handler(args)
    except YimiError as exc:
        print(f"yimi: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        return 130
    except OSError as exc:
        print(f"yimi: {exc.strerror or exc}: {exc.filename or ''}".rstrip(": "), file=sys.stderr)
        return EXIT_ERROR


if __name__ == "__main__":
    with contextlib.suppress(BrokenPipeError):
        sys.exit(main())
