"""``yimi hub run|status|pair-code|install-service``: run and inspect the hub.

``status`` opens with one block: readiness (the pid file, the status file the running hub
writes, ``hub.mesh.status``, and whether its gRPC port answers), ports, the home and TLS CA
fingerprints, packages loaded / running / failed, and the brain mode.

:func:`loopback_hub_args` and :func:`hub_is_up` are how the demo, the test harness and the
benches start a hub process and know it is serving.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import re
import sys
from pathlib import Path
from typing import Any

from cli.common import EXIT_OK, Command, fmt_ms, run_service, setup_logging
from cli.device import cmd_device_list
from cli.service import add_arguments as add_service_arguments
from cli.service import cmd_hub_install_service


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
    return serve_hub(args)


def serve_hub(args: argparse.Namespace, **extra: Any) -> int:
    """Run the hub the arguments of :func:`add_run_arguments` describe (``extra``: more
    :class:`HubOptions` fields) until SIGTERM/SIGINT. numpy's BLAS runs one thread in the
    hub's process (:func:`models.blas.single_thread`: its workers spin after each call)."""
    from hub.mesh.daemon import HubDaemon, HubOptions
    from hub.schedule.clock import clock_from_env
    from hub.web.options import WebTls
    from models.blas import single_thread
    from provisioning.home import Home

    setup_logging(args.verbose)
    single_thread()
    extra.setdefault("clock", clock_from_env())  # YIMI_TEST_CLOCK: tests only
    home = Home.load(args.home)
    options = HubOptions(
        mqtt_port=args.mqtt_port or home.mqtt_port,
        grpc_port=args.grpc_port or home.grpc_port,
        bind=args.bind,
        advertise=not args.no_advertise,
        plaintext=args.plaintext,
        web_port=args.web_port,
        web_tls=WebTls(args.web_cert, args.web_key) if args.web_cert and args.web_key else None,
        **extra,
    )

    async def serve() -> int:
        async with HubDaemon(home, options):
            freeze_start_heap()
            await asyncio.Event().wait()
        return EXIT_OK

    return run_service(serve)


def freeze_start_heap() -> None:
    """Collect once, then freeze what the hub's start made (modules, models, the brain's
    intents: it lives as long as the process) out of the cyclic garbage collector's reach.

    Without it every full collection walks that whole heap: 105–145 ms with the loop
    stopped, measured here in the middle of ``bench/mesh_roundtrip.py --quick`` — every turn
    in flight waited for it. Only the hub's own process does this (an in-process hub in a
    test leaves the test process alone)."""
    gc.collect()
    gc.freeze()


def add_run_arguments(sp: argparse.ArgumentParser) -> None:
    """The options of a command that runs the hub (``yimi hub run``, ``yimi wyoming serve``)."""
    sp.add_argument("--home", type=Path, required=True)
    sp.add_argument("--mqtt-port", type=int)
    sp.add_argument("--grpc-port", type=int)
    sp.add_argument("--bind", default="0.0.0.0", help="listen address (127.0.0.1 for local only)")
    sp.add_argument("--no-advertise", action="store_true", help="no zeroconf advertisement")
    sp.add_argument(
        "--plaintext",
        action="store_true",
        help="no TLS (debugging; only with --bind 127.0.0.1; devices need YIMI_PLAINTEXT=1)",
    )
    sp.add_argument(
        "--web-port", type=int, help="serve the phone companion and dashboard pages on this port"
    )
    sp.add_argument("--web-cert", type=Path, help="the pages' HTTPS certificate (PEM)")
    sp.add_argument("--web-key", type=Path, help="the pages' HTTPS key (PEM)")


def cmd_hub_status(args: argparse.Namespace) -> int:
    from hub.timeline import HubStore

    _print_hub(args.home)
    _print_group_key(args.home)
    print()
    cmd_device_list(args)
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


ANSWER_TIMEOUT_S = 1.0
"""seconds ``hub status`` waits for the hub's gRPC port to accept a connection"""


def answering(host: str, port: int, timeout: float = ANSWER_TIMEOUT_S) -> bool:
    """Whether something accepts TCP connections on ``host:port``."""
    import socket

    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def _print_hub(home_dir: Path) -> None:
    """One block: readiness, ports, fingerprints, packages and the brain mode."""
    from hub.mesh.daemon import hub_pid
    from hub.mesh.status import read_status
    from provisioning.home import Home

    home = Home.load(home_dir)
    pid = hub_pid(home_dir)
    status = read_status(home_dir)
    if status is not None and status.pid != pid:
        status = None  # left by a hub that is gone
    if pid is None:
        print("hub: not running")
    elif status is None:
        print(f"hub: running (pid {pid}), starting: not subscribed and serving yet")
    else:
        host = "127.0.0.1" if status.bind in ("0.0.0.0", "") else status.bind
        if not status.ready:
            state = "starting"
        elif answering(host, status.grpc_port):
            state = f"ready since {fmt_ms(status.since_ms)}: subscribed and answering"
        else:
            state = f"up since {fmt_ms(status.since_ms)} but not answering on gRPC"
        print(f"hub: running (pid {pid}), {state}")
    if status is not None:
        web = ""
        if status.web_port is not None:
            web = f", web {'https' if status.web_https else 'http'} :{status.web_port}"
        wyoming = f", wyoming :{status.wyoming_port}" if status.wyoming_port is not None else ""
        tls = " (PLAINTEXT)" if status.plaintext else ""
        print(
            f"  ports: mqtt {status.bind}:{status.mqtt_port}, grpc {status.bind}:"
            f"{status.grpc_port}{web}{wyoming}{tls}"
        )
    else:
        print(f"  ports (home.yaml): mqtt {home.mqtt_port}, grpc {home.grpc_port}")
    print(f"  home fingerprint: {home.fingerprint}")
    _print_tls(home_dir)
    _print_packages(status)
    print(f"  brain: {_brain_mode(home)}")


def _print_packages(status: Any) -> None:
    if status is None:
        print("  packages: shown while the hub runs")
        return
    loaded, running, failed = (
        status.packages_loaded,
        status.packages_running,
        status.packages_failed,
    )
    print(
        f"  packages: {len(loaded)} loaded ({', '.join(loaded) or 'none'}), "
        f"{len(running)} running, {len(failed)} failed"
    )
    for name, why in sorted(failed.items()):
        print(f"    failed {name}: {why}")


def _brain_mode(home: Any) -> str:
    from cli.brain import brain_mode
    from hub.brain.providers import ProviderStore

    store = ProviderStore.for_home(home)
    try:
        return brain_mode(store.current())
    finally:
        store.close()


def _print_group_key(home: Path) -> None:
    from provisioning.epochs import HOME_FILE, GroupKeys

    path = home / HOME_FILE
    if not path.exists():
        print("  mesh group key: epoch 0 (the key in every bundle; never rotated)")
        return
    current = GroupKeys.load(path, legacy=b"").current
    print(f"  mesh group key: epoch {current.number}, made {fmt_ms(current.made_ms)}")


def _print_tls(home: Path) -> None:
    from provisioning import tls

    fingerprint, until = tls.status(home)
    if not fingerprint:
        print("  TLS: no home CA yet (made at the hub's next start)")
        return
    leaves = f"leaves valid until {until:%Y-%m-%d}" if until else "no leaves yet"
    print(f"  TLS: home CA {fingerprint[:16]}…, {leaves} (renewed at start when near expiry)")


def cmd_hub_pair_code(args: argparse.Namespace) -> int:
    from provisioning.home import Home
    from provisioning.pairing import issue_code

    home = Home.load(args.home)
    code, expires = issue_code(home, ttl_s=args.ttl)
    print(code)
    print(
        f"valid once, until {fmt_ms(expires)}; hub fingerprint {home.fingerprint}", file=sys.stderr
    )
    return EXIT_OK


def add_commands(sub: Any, command: Command) -> None:
    """Register ``yimi hub …``."""
    hub = sub.add_parser("hub", help="run and inspect the hub")
    hub_sub = hub.add_subparsers(dest="action", required=True)
    sp = command(hub_sub, "run", cmd_hub_run, "run the hub: broker, gRPC, zeroconf, timeline")
    add_run_arguments(sp)
    sp = command(
        hub_sub,
        "status",
        cmd_hub_status,
        "readiness, ports, fingerprints, packages, brain; devices and message counts",
    )
    sp.add_argument("--home", type=Path, required=True)
    sp = command(
        hub_sub,
        "install-service",
        cmd_hub_install_service,
        "write a systemd unit that runs this hub (Type=notify, restarted on failure)",
    )
    add_service_arguments(sp)
    sp = command(hub_sub, "pair-code", cmd_hub_pair_code, "print a one-time pairing code")
    sp.add_argument("--home", type=Path, required=True)
    sp.add_argument("--ttl", type=int, default=600, help="seconds the code stays valid")
