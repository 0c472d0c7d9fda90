"""``yimi`` refuses bad input with exit status 1 and one ``yimi: …`` line on stderr."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from cli import main as cli
from provisioning.bundle import flash
from provisioning.home import Home


@dataclass
class Setup:
    root: Path
    home: Path
    bundle: Path


@pytest.fixture
def setup(tmp_path: Path) -> Setup:
    home = Home.init(tmp_path / "home")
    flash(home, profile_name="mac", name="laptop", out=tmp_path / "bundle")
    return Setup(tmp_path, home.path, tmp_path / "bundle")


def corrupt_bundle_yaml(text: str) -> Callable[[Setup], None]:
    def apply(s: Setup) -> None:
        (s.bundle / "bundle.yaml").write_text(text)

    return apply


def write_file(name: str, data: bytes) -> Callable[[Setup], None]:
    def apply(s: Setup) -> None:
        (s.root / name).write_bytes(data)

    return apply


def nothing(s: Setup) -> None:
    pass


# (id, preparation, argv with {root}/{home}/{bundle} placeholders, what the line mentions)
CASES: list[tuple[str, Callable[[Setup], object], list[str], str]] = [
    (
        "missing home: device list",
        nothing,
        ["device", "list", "--home", "{root}/nohome"],
        "no home in",
    ),
    (
        "missing home: pair-code",
        nothing,
        ["hub", "pair-code", "--home", "{root}/nohome"],
        "no home in",
    ),
    (
        "missing home: device add",
        nothing,
        [
            "device",
            "add",
            "--home",
            "{root}/nohome",
            "--profile",
            "mac",
            "--name",
            "x",
            "--out",
            "{root}/out",
        ],
        "no home in",
    ),
    ("missing home: timeline", nothing, ["timeline", "--home", "{root}/nohome"], "no home in"),
    (
        "corrupt home.yaml",
        lambda s: (s.home / "home.yaml").write_text("home_id: [1, 2"),
        ["device", "list", "--home", "{home}"],
        "unreadable",
    ),
    (
        "home key readable by others",
        lambda s: (s.home / "keys" / "home.key").chmod(0o644),
        ["device", "list", "--home", "{home}"],
        "must be 0600",
    ),
    ("missing bundle", nothing, ["timeline", "--bundle", "{root}/nobundle"], "no device bundle in"),
    (
        "corrupt bundle.yaml: syntax",
        corrupt_bundle_yaml("home_id: [unclosed\n  : :"),
        ["timeline", "--bundle", "{bundle}"],
        "unreadable",
    ),
    (
        "corrupt bundle.yaml: not a mapping",
        corrupt_bundle_yaml("- a\n- b\n"),
        ["timeline", "--bundle", "{bundle}"],
        "unreadable",
    ),
    (
        "corrupt bundle.yaml: fields missing",
        corrupt_bundle_yaml("version: 1\n"),
        ["timeline", "--bundle", "{bundle}"],
        "unreadable",
    ),
    (
        "corrupt bundle.yaml: wrong types",
        corrupt_bundle_yaml("home_id: 1\nhub: 5\n"),
        ["timeline", "--bundle", "{bundle}"],
        "unreadable",
    ),
    (
        "corrupt bundle.yaml: binary",
        lambda s: (s.bundle / "bundle.yaml").write_bytes(b"\xff\xfe\x00"),
        ["timeline", "--bundle", "{bundle}"],
        "unreadable",
    ),
    (
        "bundle device.key missing",
        lambda s: (s.bundle / "device.key").unlink(),
        ["timeline", "--bundle", "{bundle}"],
        "device.key",
    ),
    (
        "unknown profile",
        nothing,
        [
            "device",
            "add",
            "--home",
            "{home}",
            "--profile",
            "toaster",
            "--name",
            "t",
            "--out",
            "{root}/out",
        ],
        "unknown profile",
    ),
    (
        "profile path does not exist",
        nothing,
        [
            "device",
            "add",
            "--home",
            "{home}",
            "--profile",
            "{root}/nope.yaml",
            "--name",
            "t",
            "--out",
            "{root}/out",
        ],
        "unknown profile",
    ),
    (
        "profile path is a folder",
        lambda s: (s.root / "dir").mkdir(),
        [
            "device",
            "add",
            "--home",
            "{home}",
            "--profile",
            "{root}/dir/",
            "--name",
            "t",
            "--out",
            "{root}/out",
        ],
        "profile",
    ),
    (
        "profile file is not YAML",
        write_file("bad.yaml", b"name: [\n  - :\n\t- x"),
        [
            "device",
            "add",
            "--home",
            "{home}",
            "--profile",
            "{root}/bad.yaml",
            "--name",
            "t",
            "--out",
            "{root}/out",
        ],
        "bad.yaml",
    ),
    (
        "profile file is binary",
        write_file("bin.yaml", b"\x00\xff\xfe\x80"),
        [
            "device",
            "add",
            "--home",
            "{home}",
            "--profile",
            "{root}/bin.yaml",
            "--name",
            "t",
            "--out",
            "{root}/out",
        ],
        "bin.yaml",
    ),
    (
        "profile file is invalid",
        write_file("odd.yaml", b"schema_version: 1\nname: odd\n"),
        [
            "device",
            "add",
            "--home",
            "{home}",
            "--profile",
            "{root}/odd.yaml",
            "--name",
            "t",
            "--out",
            "{root}/out",
        ],
        "odd.yaml",
    ),
    (
        "device name taken",
        nothing,
        [
            "device",
            "add",
            "--home",
            "{home}",
            "--profile",
            "mac",
            "--name",
            "laptop",
            "--out",
            "{root}/out",
        ],
        "already exists",
    ),
    (
        "device name invalid",
        nothing,
        [
            "device",
            "add",
            "--home",
            "{home}",
            "--profile",
            "mac",
            "--name",
            "Bad Name",
            "--out",
            "{root}/out",
        ],
        "invalid",
    ),
    (
        "bundle out not empty",
        nothing,
        [
            "device",
            "add",
            "--home",
            "{home}",
            "--profile",
            "mac",
            "--name",
            "other",
            "--out",
            "{bundle}",
        ],
        "already exists",
    ),
    (
        "pairing code malformed",
        nothing,
        [
            "device",
            "pair",
            "--code",
            "not-a-code",
            "--profile",
            "phone",
            "--name",
            "p",
            "--out",
            "{root}/out",
        ],
        "malformed",
    ),
    (
        "pairing code too short",
        nothing,
        [
            "device",
            "pair",
            "--code",
            "ABCD-EFGH-JKMN",
            "--profile",
            "phone",
            "--name",
            "p",
            "--out",
            "{root}/out",
        ],
        "malformed",
    ),
    (
        "pairing hub port not a number",
        nothing,
        [
            "device",
            "pair",
            "--code",
            "ABCD-EFGH-JKMN-PQRS",
            "--profile",
            "phone",
            "--name",
            "p",
            "--out",
            "{root}/out",
            "--hub",
            "127.0.0.1:http",
        ],
        "port",
    ),
    (
        "revoke unknown device",
        nothing,
        ["device", "revoke", "nobody", "--home", "{home}"],
        "no device named 'nobody'",
    ),
]


@pytest.mark.parametrize(
    ("prepare", "argv", "mentions"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_refused_with_one_line(
    setup: Setup,
    capsys: pytest.CaptureFixture[str],
    prepare: Callable[[Setup], object],
    argv: list[str],
    mentions: str,
) -> None:
    prepare(setup)
    args = [a.format(root=setup.root, home=setup.home, bundle=setup.bundle) for a in argv]
    assert cli.main(args) == cli.EXIT_ERROR
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("yimi: "), captured.err
    assert "Traceback" not in captured.err + captured.out
    assert mentions in lines[0], lines[0]


def test_refused_operations_change_nothing(
    setup: Setup, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = [
        "device",
        "add",
        "--home",
        str(setup.home),
        "--profile",
        "mac",
        "--name",
        "laptop",
        "--out",
        str(setup.root / "out"),
    ]
    assert cli.main(argv) == cli.EXIT_ERROR
    capsys.readouterr()
    assert not (setup.root / "out").exists() or not any((setup.root / "out").iterdir())
    assert cli.main(["device", "list", "--home", str(setup.home)]) == cli.EXIT_OK
    listing = capsys.readouterr().out
    assert sum("laptop" in line for line in listing.splitlines()) == 1


def test_hub_is_up_only_on_the_daemons_own_line() -> None:
    """Harness, demo and benches wait for this before devices talk: the hub is subscribed."""
    from cli.hub import hub_is_up

    up = (
        "2026-11-30 06:10:14,104 INFO hub.mesh.daemon: hub 6504fc89bc768d42 up: mqtt 127.0.0.1:1883"
    )
    assert hub_is_up(f"starting\n{up}\n")
    assert not hub_is_up(
        "INFO hub.turns.answering: brain ready: rule-based\nINFO x: warming up: model\n"
    )


def test_a_bundle_writes_only_what_its_certificate_grants(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``yimi memo`` on a watch (no ``timeline.write``), ``yimi note`` on glasses (no
    ``notes.write``) and a ``reply``-kind memo on any device are refused with one line and
    write nothing (the hub would refuse them); the phone may write both."""
    from sync.replicas import ReplicaSet

    home = Home.init(tmp_path / "home")
    bundles = {
        p: flash(home, profile_name=p, name=p, out=tmp_path / p).state_dir
        for p in ("watch", "glasses", "phone")
    }
    refused = [
        (["memo", "--bundle", str(tmp_path / "watch"), "hi"], "'timeline.write'"),
        (["note", "add", "--bundle", str(tmp_path / "glasses"), "x"], "'notes.write'"),
        (["note", "rm", "--bundle", str(tmp_path / "glasses"), "n-1"], "'notes.write'"),
        (["memo", "--bundle", str(tmp_path / "phone"), "--kind", "reply", "sent"], "'reply'"),
    ]
    for argv, mention in refused:
        assert cli.main(argv) == cli.EXIT_ERROR, argv
        err = capsys.readouterr().err
        assert err.startswith("yimi: ") and err.count("\n") == 1 and mention in err, err
    for state in bundles.values():
        rs = ReplicaSet(state / "replicas")
        assert rs.timeline() == [] and rs.notes() == []
    assert cli.main(["memo", "--bundle", str(tmp_path / "phone"), "fine"]) == cli.EXIT_OK
    assert cli.main(["note", "add", "--bundle", str(tmp_path / "phone"), "ok"]) == cli.EXIT_OK
    assert cli.main(["note", "list", "--bundle", str(tmp_path / "glasses")]) == cli.EXIT_OK
