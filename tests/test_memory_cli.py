"""``yimi memory show|explain|commit|forget|reapply-deletions`` against a real home."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from cli import main as cli
from provisioning.home import Home


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return Home.init(tmp_path / "home").path


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def commit(capsys: pytest.CaptureFixture[str], home: Path, *extra: str) -> str:
    code, out, err = run(capsys, "memory", "commit", "--home", str(home), "--no-index", *extra)
    assert code == 0, err
    return out


def test_commit_show_explain_forget(capsys: pytest.CaptureFixture[str], home: Path) -> None:
    h = str(home)
    out = commit(
        capsys,
        home,
        "--id",
        "pref.cilantro",
        "--subject",
        "owner",
        "--predicate",
        "food.preference",
        "--value",
        "no cilantro",
        "--sensitivity",
        "low",
    )
    assert out.strip() == "committed pref.cilantro v1 (current, sensitivity low)"
    commit(
        capsys,
        home,
        "--id",
        "order.note",
        "--subject",
        "order note",
        "--predicate",
        "note",
        "--value",
        "no cilantro",
        "--depends",
        "pref.cilantro@1",
        "--sensitivity",
        "low",
    )
    out = commit(
        capsys,
        home,
        "--id",
        "pref.cilantro",
        "--expect",
        "1",
        "--subject",
        "owner",
        "--predicate",
        "food.preference",
        "--value",
        "cilantro is fine now",
        "--sensitivity",
        "low",
    )
    assert "needs re-evaluation now: order.note" in out

    code, out, _ = run(capsys, "memory", "show", "order.note", "--home", h, "--json")
    shown = json.loads(out)
    assert code == 0 and shown["status"] == "needs_reevaluation"
    assert shown["value"] == "no cilantro" and shown["depends_on"] == [["pref.cilantro", 1]]

    code, out, _ = run(capsys, "memory", "explain", "order.note", "--home", h)
    assert code == 0
    assert "assertion order.note: needs_reevaluation, head v1" in out
    assert "v1 → pref.cilantro v1 (now v2 current)  ← stale" in out
    code, out, _ = run(capsys, "memory", "explain", "pref.cilantro", "--home", h)
    assert "v1  superseded" in out and "v2  current" in out
    assert "order.note v1 (on v1), needs_reevaluation" in out

    code, out, _ = run(capsys, "memory", "forget", "pref.cilantro", "--home", h)
    assert code == 0, out
    assert "assertion pref.cilantro: erased v1, v2; tombstone kept" in out
    assert "assertion order.note: erased v1; tombstone kept" in out
    assert "not deleted by this command" in out  # no claims about L4, L5 or backups
    code, out, _ = run(capsys, "memory", "show", "pref.cilantro", "--home", h)
    assert "forgotten" in out and "cilantro is fine" not in out
    code, out, _ = run(capsys, "memory", "explain", "pref.cilantro", "--home", h)
    assert "(payload erased)" in out and "cilantro is fine" not in out
    code, out, _ = run(capsys, "memory", "forget", "pref.cilantro", "--home", h)
    assert code == 0 and out.strip() == "nothing deleted: pref.cilantro was already forgotten"


def test_forget_through_the_real_index(capsys: pytest.CaptureFixture[str], home: Path) -> None:
    from hub.memory.index import MemoryIndex

    h = str(home)
    code, out, err = run(
        capsys,
        "memory",
        "commit",
        "--home",
        h,
        "--id",
        "pref.spice",
        "--subject",
        "owner",
        "--predicate",
        "likes",
        "--value",
        "very spicy noodles",
        "--sensitivity",
        "low",
    )
    assert code == 0, err
    with MemoryIndex.for_home(home) as index:
        assert index.get("assertion:pref.spice") is not None
        assert [h.item_id for h in index.search_fts("spicy noodles")] == ["assertion:pref.spice"]
    code, out, _ = run(capsys, "memory", "forget", "pref.spice", "--home", h)
    assert code == 0 and "index entry assertion:pref.spice: removed" in out
    with MemoryIndex.for_home(home) as index:
        assert index.get("assertion:pref.spice") is None
        assert index.search_fts("spicy noodles") == []
        assert index.count() == 0
    files = [*home.glob("memory*.db*"), *home.glob("recall/*.db*")]
    assert any(p.parent.name == "recall" for p in files)  # the index of the default model
    blob = b"".join(p.read_bytes() for p in files)
    assert b"spicy noodles" not in blob


def test_reapply_deletions_after_restore(capsys: pytest.CaptureFixture[str], home: Path) -> None:
    h = str(home)
    commit(capsys, home, "--id", "s.1", "--subject", "owner", "--predicate", "p", "--value", "x")
    db = home / "memory.db"
    backup = home.parent / "memory.db.bak"
    # a consistent copy: no open connections, the WAL already folded in by the last close
    shutil.copyfile(db, backup)
    run(capsys, "memory", "forget", "s.1", "--home", h)
    shutil.copyfile(backup, db)
    for side in home.glob("memory.db-*"):
        side.unlink()
    code, out, _ = run(capsys, "memory", "show", "s.1", "--home", h)
    assert "current" in out  # the restore brought it back
    code, out, _ = run(capsys, "memory", "reapply-deletions", "--home", h)
    assert code == 0 and "assertion s.1: erased v1; tombstone kept" in out
    code, out, _ = run(capsys, "memory", "show", "s.1", "--home", h)
    assert "forgotten" in out
    code, out, _ = run(capsys, "memory", "reapply-deletions", "--home", h)
    assert "nothing to delete again" in out


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["show", "nope"], "no assertion 'nope'"),
        (["explain", "nope"], "no assertion 'nope'"),
        (["forget", "nope"], "no assertion 'nope'"),
        (["show", "bad id!"], "no assertion"),
        (
            ["commit", "--subject", "s", "--predicate", "p", "--value", "v", "--expect", "x"],
            "--expect: 'x' is not a whole number",
        ),
        (
            ["commit", "--subject", "s", "--predicate", "p", "--value", "v", "--confidence", "2"],
            "confidence: 2.0 is not a number from 0 to 1",
        ),
        (
            ["commit", "--subject", "s", "--predicate", "p", "--value", "v", "--confidence", "nan"],
            "--confidence: 'nan' is not finite",
        ),
        (
            [
                "commit",
                "--subject",
                "s",
                "--predicate",
                "p",
                "--value",
                "v",
                "--sensitivity",
                "top",
            ],
            "sensitivity: 'top': one of low, medium, high",
        ),
        (
            ["commit", "--subject", "s", "--predicate", "Bad Pred", "--value", "v"],
            "predicate: 'Bad Pred'",
        ),
        (
            ["commit", "--subject", "s", "--predicate", "p", "--value", "{", "--json-value"],
            "--value: not JSON",
        ),
        (
            ["commit", "--subject", "s", "--predicate", "p", "--value", "v", "--depends", "x"],
            "--depends: 'x' is not ID@VERSION",
        ),
        (
            ["commit", "--subject", "s", "--predicate", "p", "--value", "v", "--depends", "x@1"],
            "dependency x v1 of",
        ),
        (
            ["commit", "--subject", "s", "--predicate", "p", "--value", "v", "--source", "nokind"],
            "sources: 'nokind' is not a (kind, id) source",
        ),
        (
            [
                "commit",
                "--id",
                "a",
                "--expect",
                "4",
                "--subject",
                "s",
                "--predicate",
                "p",
                "--value",
                "v",
            ],
            "assertion a: expected version 4, but it is at version 0",
        ),
    ],
)
def test_bad_input_is_one_line_exit_1(
    capsys: pytest.CaptureFixture[str], home: Path, argv: list[str], needle: str
) -> None:
    code, out, err = run(capsys, "memory", argv[0], "--home", str(home), *argv[1:])
    assert code == 1, (out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("yimi: "), err
    assert needle in lines[0], lines[0]


def test_conflict_and_forgotten_recommit_are_refused(
    capsys: pytest.CaptureFixture[str], home: Path
) -> None:
    args = ["--id", "a", "--subject", "s", "--predicate", "p", "--value", "v"]
    commit(capsys, home, *args)
    code, _, err = run(capsys, "memory", "commit", "--home", str(home), "--no-index", *args)
    assert code == 1 and "expected version 0, but it is at version 1 (current)" in err
    run(capsys, "memory", "forget", "a", "--home", str(home))
    code, _, err = run(
        capsys, "memory", "commit", "--home", str(home), "--no-index", "--expect", "1", *args
    )
    assert (
        code == 1 and err.strip() == "yimi: assertion a was forgotten; it cannot be committed again"
    )


def test_missing_home_is_refused(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, _, err = run(capsys, "memory", "show", "a", "--home", str(tmp_path / "nowhere"))
    assert code == 1 and err.startswith("yimi: no home in") and len(err.strip().splitlines()) == 1


def test_retry_with_request_id_writes_once(capsys: pytest.CaptureFixture[str], home: Path) -> None:
    args = ["--id", "r", "--subject", "s", "--predicate", "p", "--value", "v", "--request-id", "q1"]
    first = commit(capsys, home, *args)
    again = commit(capsys, home, *args)
    assert first == again == "committed r v1 (current, sensitivity medium)\n"
    _, out, _ = run(capsys, "memory", "explain", "r", "--home", str(home))
    assert out.count("  v") == 1
