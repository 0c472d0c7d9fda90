"""Pairing with a one-time code, over real processes: a running hub, ``yimi hub pair-code``
and ``yimi device pair`` talking gRPC on loopback.

A pairing code is ``XXXX-XXXX-XXXX-XXXX``: the first group names the code, the other three
are its secret. Every refusal must be one clear line, exit status 1, and leave neither a
bundle folder on the device nor an enrolled device on the hub.
"""

from __future__ import annotations

import json
import stat
import subprocess
import time
from pathlib import Path

import apsw
import pytest

from hub.brain.replies import say as reply_text
from provisioning.pairing import ALPHABET
from tests.mesh_harness import Mesh
from tests.waiting import poll_sync
from worlds import ports

pytestmark = pytest.mark.slow

WRONG_CODE = "pairing refused: the code is wrong, expired or already used"
RATE_LIMITED = "pairing refused: too many attempts"
UNKNOWN = reply_text("unknown", "en")


# ---------------------------------------------------------------- helpers
def pair_code(mesh: Mesh, *extra: str) -> str:
    r = mesh.yimi("hub", "pair-code", "--home", str(mesh.home), *extra, check=True)
    code = r.stdout.splitlines()[0].strip()
    assert len(code) == 19 and code.count("-") == 3, r.stdout
    return code


def pair(
    mesh: Mesh, code: str, name: str, *, hub: str | None = None, profile: str = "phone"
) -> tuple[subprocess.CompletedProcess[str], Path]:
    out = mesh.root / f"paired-{name}"
    r = mesh.yimi(
        "device",
        "pair",
        "--code",
        code,
        "--profile",
        profile,
        "--name",
        name,
        "--out",
        str(out),
        "--hub",
        hub or mesh.hub_target,
    )
    return r, out


def enrolled(mesh: Mesh) -> list[str]:
    """Names of the devices in the home's registry."""
    conn = apsw.Connection(str(mesh.home / "registry.db"), flags=apsw.SQLITE_OPEN_READONLY)
    conn.set_busy_timeout(5000)
    try:
        return [str(r[0]) for r in conn.execute("SELECT name FROM devices ORDER BY name")]
    finally:
        conn.close()


def assert_refused(r: subprocess.CompletedProcess[str], message: str, out: Path) -> None:
    assert r.returncode == 1, f"expected exit 1, got {r.returncode}: {r.stdout} {r.stderr}"
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, f"expected one line on stderr, got: {r.stderr!r}"
    assert lines[0].startswith("yimi: ") and message in lines[0], lines[0]
    assert "Traceback" not in r.stderr
    assert not out.exists(), f"a refused pairing created {out}"


def with_wrong_secret(code: str) -> str:
    """The same code id with one secret character changed."""
    last = code[-1]
    return code[:-1] + ALPHABET[(ALPHABET.index(last) + 1) % len(ALPHABET)]


def files_under(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and not p.is_symlink()]


# ---------------------------------------------------------------- tests
def test_good_code_enrols_once_and_the_device_can_talk(mesh: Mesh) -> None:
    """A good code writes a bundle whose private key is 0600 and exists nowhere in the
    home; the paired device gets replies; the same code a second time is refused."""
    hub = mesh.start_hub()
    code = pair_code(mesh)

    r, bundle = pair(mesh, code, "pocket")
    assert r.returncode == 0, r.stderr
    assert "paired: device pocket (phone)" in r.stdout, r.stdout
    assert enrolled(mesh) == ["pocket"]
    key_file = bundle / "device.key"
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert stat.S_IMODE((bundle / "secrets.json").stat().st_mode) == 0o600
    assert stat.S_IMODE(bundle.stat().st_mode) == 0o700
    keys = json.loads(key_file.read_text())
    secrets_ = [keys["sign_seed"], keys["box_sk"]]
    needles = [s.encode() for s in secrets_] + [bytes.fromhex(s) for s in secrets_]
    for f in files_under(mesh.home):
        data = f.read_bytes()
        for needle in needles:
            assert needle not in data, f"the paired device's private key is in {f}"
    # the paired device talks to the hub it paired with (pinned key, no --hub needed)
    say = mesh.say(bundle, "hello from a paired phone")
    assert say.returncode == 0, say.stderr
    assert say.stdout.strip() == f"I heard: hello from a paired phone. {UNKNOWN}", say.stdout
    assert [t for _, _, k, t in mesh.hub_timeline() if k == "utterance"] == [
        "hello from a paired phone"
    ]

    # the code worked once: a second device with it is refused
    r2, bundle2 = pair(mesh, code, "pocket2")
    assert_refused(r2, WRONG_CODE, bundle2)
    assert enrolled(mesh) == ["pocket"]
    assert hub.alive()
    assert "Traceback" not in hub.text()


def test_wrong_and_expired_codes_are_refused(mesh: Mesh) -> None:
    """Right code id with a wrong secret, and a code past its expiry: one clear line,
    exit 1, no bundle, no device; the right secret of the wrong-guessed code still works."""
    hub = mesh.start_hub()
    code = pair_code(mesh)
    wrong = with_wrong_secret(code)
    assert wrong != code and wrong[:4] == code[:4]
    r, out = pair(mesh, wrong, "guesser")
    assert_refused(r, WRONG_CODE, out)
    assert enrolled(mesh) == []

    short = pair_code(mesh, "--ttl", "1")
    conn = apsw.Connection(str(mesh.home / "registry.db"), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        row = conn.execute(
            "SELECT expires_ms FROM pair_codes WHERE code_id=?", (short[:4],)
        ).fetchone()
    finally:
        conn.close()
    assert row is not None
    expires_ms = int(row[0])
    poll_sync(lambda: time.time() * 1000 > expires_ms + 50, 5, "the code to expire")
    r, out = pair(mesh, short, "late")
    assert_refused(r, WRONG_CODE, out)
    assert enrolled(mesh) == []

    # one wrong guess did not burn the first code
    r, out = pair(mesh, code, "rightful")
    assert r.returncode == 0, r.stderr
    assert enrolled(mesh) == ["rightful"]
    assert hub.alive()
    assert hub.text().count("pairing from") >= 2 and "Traceback" not in hub.text()


def test_repeated_wrong_codes_are_rate_limited(mesh: Mesh) -> None:
    """Five wrong codes from one peer; the sixth attempt, even with a valid code, gets the
    rate-limited message."""
    hub = mesh.start_hub()
    code = pair_code(mesh)
    fresh = pair_code(mesh)
    wrong = with_wrong_secret(code)
    for i in range(5):
        r, out = pair(mesh, wrong, f"brute{i}")
        assert_refused(r, WRONG_CODE, out)
    r, out = pair(mesh, fresh, "brute5")
    assert_refused(r, RATE_LIMITED, out)
    assert "try again in" in r.stderr
    assert enrolled(mesh) == []
    assert hub.alive() and "Traceback" not in hub.text()


@pytest.mark.parametrize(
    "code",
    [
        "hello",
        "ABCD-EFGH-JKMN",
        "ABCD-EFGH-JKMN-PQRSX",
        "ABCD-EFGH-JKMN-PQRU",  # U is not in the alphabet
        "ABCD-EFGH-JKMN-PQR!",
        "ABCDEFGHJKMNPQRS",
        "ABCD--EFGH-JKMN-PQRS",
    ],
)
def test_malformed_code_is_a_format_error_without_network(tmp_path: Path, code: str) -> None:
    """A malformed code is refused before anything is sent: the --hub port is closed."""
    mesh = Mesh(tmp_path)
    closed = ports.port()
    r, out = pair(mesh, code, "typo", hub=f"127.0.0.1:{closed}")
    assert_refused(r, "is malformed; it looks like ABCD-EFGH-JKMN-PQRS", out)
    assert "no hub answered" not in r.stderr
