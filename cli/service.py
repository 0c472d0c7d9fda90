"""``yimi hub install-service``: the hub as a systemd service.

Writes ``yimi-hub.service`` for the home in ``--home``: ``Type=notify`` (systemd counts the
hub started when it says ``READY=1``, at the moment it logs "hub … up": subscribed to every
device's uplink, see :mod:`hub.mesh.notify`), ``Restart=on-failure``, the owner-only umask,
and a sandbox (read-only system, private /tmp, no new privileges) in which only the home
(and each ``--rw`` path) is writable. ``--user`` writes a user unit (``~/.config/systemd/
user``, run by ``systemctl --user``) — the default is a system unit that runs as the current
user. ``--dry-run`` prints the unit instead. It never calls ``systemctl``: it prints the
commands that load and start the unit.
"""

from __future__ import annotations

import argparse
import getpass
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from cli.common import EXIT_OK
from hub.errors import HubError

UNIT_NAME = "yimi-hub.service"
RESTART_SEC = 5
"""seconds systemd waits before restarting a hub that failed"""
STOP_TIMEOUT_S = 45
"""seconds a hub has to stop (its parts get 10-20 s each, see ``sync.tasks``)"""
START_TIMEOUT_S = 180
"""seconds from start to ``READY=1`` (the first start makes the home's TLS leaves; a model
migration runs in the background and does not count)"""


@dataclass(frozen=True)
class UnitSpec:
    yimi: list[str]
    """the command that runs ``yimi`` (this installation's, absolute)"""
    home: Path
    user_unit: bool
    run_as: str = ""
    """``User=`` of a system unit"""
    writable: tuple[Path, ...] = ()
    """paths writable besides the home"""
    sandbox: bool = True
    environment: tuple[tuple[str, str], ...] = ()


def yimi_command() -> list[str]:
    """The absolute command of this installation's ``yimi``: the console script next to the
    running interpreter (the venv's), else ``python -m cli``."""
    exe = Path(sys.executable)
    script = exe.parent / "yimi"
    if script.is_file() and os.access(script, os.X_OK):
        return [str(script.absolute())]
    return [str(exe.absolute()), "-m", "cli"]


def quote(word: str) -> str:
    """``word`` as one argument of a unit file line (``%`` escaped; quoted if needed)."""
    word = word.replace("%", "%%")
    if word and not any(c.isspace() or c in "\"'\\;$" for c in word):
        return word
    return '"' + word.replace("\\", "\\\\").replace('"', '\\"') + '"'


def unit_text(spec: UnitSpec) -> str:
    """The unit file for ``spec``."""
    home = str(spec.home)
    run = " ".join(quote(w) for w in [*spec.yimi, "hub", "run", "--home", home])
    lines = [
        f"# {UNIT_NAME}: written by `yimi hub install-service`",
        "[Unit]",
        f"Description=Yimi Mesh hub ({quote(home)})",
        "Wants=network-online.target",
        "After=network-online.target",
        "",
        "[Service]",
        "Type=notify",
        "NotifyAccess=main",
        f"ExecStart={run}",
        "Restart=on-failure",
        f"RestartSec={RESTART_SEC}",
        f"TimeoutStartSec={START_TIMEOUT_S}",
        f"TimeoutStopSec={STOP_TIMEOUT_S}",
        "KillMode=mixed",
        "UMask=0077",
        "Environment=PYTHONUNBUFFERED=1",
    ]
    lines += [f"Environment={quote(f'{k}={v}')}" for k, v in spec.environment]
    if not spec.user_unit and spec.run_as:
        lines.append(f"User={spec.run_as}")
    lines.append("NoNewPrivileges=yes")
    if spec.sandbox:
        if spec.user_unit:
            lines.append("PrivateUsers=yes")  # what lets a user manager sandbox its services
        writable = (spec.home, *spec.writable)
        rw = " ".join(quote(str(p)) for p in writable)
        if not any(_in_tmp(p) for p in writable):  # a private /tmp would hide them
            lines.append("PrivateTmp=yes")
        lines += [
            "ProtectSystem=strict",
            f"ReadWritePaths={rw}",
            "ProtectKernelTunables=yes",
            "ProtectKernelModules=yes",
            "ProtectControlGroups=yes",
            "RestrictSUIDSGID=yes",
            "LockPersonality=yes",
        ]
    target = "default.target" if spec.user_unit else "multi-user.target"
    lines += ["", "[Install]", f"WantedBy={target}", ""]
    return "\n".join(lines)


def _in_tmp(path: Path) -> bool:
    return any(path.is_relative_to(t) for t in (Path("/tmp"), Path("/var/tmp")))


def default_unit_dir(user_unit: bool) -> Path:
    if not user_unit:
        return Path("/etc/systemd/system")
    config = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(config) / "systemd" / "user"


def next_steps(user_unit: bool) -> list[str]:
    ctl = "systemctl --user" if user_unit else "sudo systemctl"
    steps = [f"{ctl} daemon-reload && {ctl} enable --now yimi-hub"]
    steps.append(f"{ctl} status yimi-hub    # active (running) once the hub is up")
    if user_unit:
        steps.append("loginctl enable-linger $USER    # keep it running when you log out")
    return steps


def verify(path: Path) -> str | None:
    """``systemd-analyze verify`` on the unit, if that tool is installed: its complaint, or
    ``None`` (fine, or nothing to check with)."""
    import subprocess

    tool = shutil.which("systemd-analyze")
    if tool is None:
        return None
    done = subprocess.run(
        [tool, "verify", str(path)], capture_output=True, text=True, timeout=30, check=False
    )
    return None if done.returncode == 0 else (done.stderr or done.stdout).strip()


def cmd_hub_install_service(args: argparse.Namespace) -> int:
    from provisioning.home import Home

    home = Home.load(args.home).path.absolute()
    spec = UnitSpec(
        yimi=yimi_command(),
        home=home,
        user_unit=args.user,
        run_as="" if args.user else getpass.getuser(),
        writable=tuple(p.absolute() for p in args.rw),
        sandbox=not args.no_sandbox,
    )
    text = unit_text(spec)
    if args.dry_run:
        print(text, end="")
        return EXIT_OK
    unit_dir = (args.unit_dir or default_unit_dir(args.user)).absolute()
    path = unit_dir / UNIT_NAME
    try:
        unit_dir.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(text)
        tmp.chmod(0o644)
        tmp.replace(path)
    except OSError as exc:
        raise HubError("service.not_written", path=path, reason=exc.strerror or exc) from exc
    print(f"wrote {path}")
    complaint = verify(path)
    if complaint:
        print(f"systemd-analyze verify: {complaint}", file=sys.stderr)
    print("next:")
    for step in next_steps(args.user):
        print(f"  {step}")
    return EXIT_OK


def add_arguments(sp: argparse.ArgumentParser) -> None:
    sp.add_argument("--home", type=Path, required=True)
    sp.add_argument(
        "--user", action="store_true", help="a user unit (systemctl --user); default: system"
    )
    sp.add_argument(
        "--unit-dir",
        type=Path,
        help="where to write it (default ~/.config/systemd/user, or /etc/systemd/system)",
    )
    sp.add_argument("--dry-run", action="store_true", help="print the unit, write nothing")
    sp.add_argument(
        "--rw",
        type=Path,
        action="append",
        default=[],
        help="another path the hub may write (repeatable; the home always is)",
    )
    sp.add_argument(
        "--no-sandbox",
        action="store_true",
        help="no filesystem sandbox (where mount namespaces are not available)",
    )
