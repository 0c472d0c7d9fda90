"""Forks of a workspace folder: fork, diff, commit, discard, keep, rollback, GC.

Layout, beside the workspace ``W`` (same filesystem, so commits are renames)::

    W/                       the current state
    .W.worldlines/state.json generation, forks, history
    .W.worldlines/forks/ID   open forks          history/ID  states before commits
    .W.worldlines/discarded/ID   reclaimed by gc()

A fork records the generation it was taken from; ``commit`` refuses a fork whose base is no
longer current (``worldline.stale_base``: fork again). ``commit`` swaps the fork and ``W``
in one ``renameat2(RENAME_EXCHANGE)`` where the kernel offers it (else two renames), so ``W``
always names a whole tree. ``rollback ID`` brings back the state before commit ``ID``
byte for byte; the state it replaces goes to history too.

Pure (no hub, no device): the hub's worldlines package and the Mac's executor
(``edge_agent.executor``) both fork their folders with it. Errors are
:class:`WorldlineError` with the ``worldline.*`` keys of :mod:`protos.errors` (en + zh).
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import difflib
import fcntl
import json
import logging
import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

from protos.errors import YimiError

log = logging.getLogger(__name__)

METHODS = ("btrfs", "reflink", "copy")
HISTORY_KEEP = 5
"""commits whose previous state is kept for rollback"""
MAX_DIFF_BYTES = 256 * 1024
"""text files larger than this are listed as changed, without a unified diff"""
RENAME_EXCHANGE = 2
MAX_FORKS = 4
"""forks one request may take from one base ("show me two versions")"""


class WorldlineError(YimiError):
    """A worldline is unknown, stale, or its workspace cannot be forked."""

    @property
    def code(self) -> str:
        """The receipt's error code for this error (``NOT_FOUND``, ``STALE_BASE``, ...)."""
        return ERROR_CODES.get(self.key, "FAILED")


ERROR_CODES = {
    "worldline.unknown": "NOT_FOUND",
    "worldline.closed": "CLOSED",
    "worldline.stale_base": "STALE_BASE",
    "worldline.no_history": "NOT_FOUND",
    "worldline.bad_count": "BAD_REQUEST",
}


@dataclass(frozen=True)
class Fork:
    id: str
    base: int
    method: str
    created: float
    status: str = "open"
    """open | kept | committed | discarded"""
    label: str = ""


@dataclass(frozen=True)
class Commit:
    id: str
    generation: int
    """the generation this commit made current"""
    at: float
    rollback_of: str = ""


@dataclass(frozen=True)
class Diff:
    added: tuple[str, ...]
    changed: tuple[str, ...]
    removed: tuple[str, ...]
    text: str
    """unified diff of the text files changed, added or removed"""

    @property
    def empty(self) -> bool:
        return not (self.added or self.changed or self.removed)


@dataclass
class _State:
    generation: int = 0
    forks: dict[str, Fork] = field(default_factory=dict)
    history: list[Commit] = field(default_factory=list)


def _libc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    return ctypes.CDLL(name, use_errno=True) if name else None


def exchange(a: Path, b: Path) -> bool:
    """Swap two paths atomically (``renameat2 RENAME_EXCHANGE``); ``False`` if unsupported."""
    libc = _libc()
    fn = getattr(libc, "renameat2", None) if libc is not None else None
    if fn is None:
        return False
    at_fdcwd = -100
    rc = fn(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), RENAME_EXCHANGE)
    if rc != 0:
        err = ctypes.get_errno()
        if err in (22, 38, 95):  # EINVAL, ENOSYS, EOPNOTSUPP: not on this filesystem
            return False
        raise OSError(err, os.strerror(err), str(a))
    return True


def _is_subvolume(path: Path) -> bool:
    try:
        return path.stat().st_ino == 256 and shutil.which("btrfs") is not None
    except OSError:
        return False


COPY_COMMANDS: dict[str, tuple[tuple[str, ...], float]] = {
    "btrfs": (("btrfs", "subvolume", "snapshot"), 120),
    "reflink": (("cp", "-a", "--reflink=always"), 600),
}
"""copy method → the command that copies (``src`` and ``dst`` follow) and its timeout, seconds;
any other method (``copy``) copies file by file"""


def copy_tree(src: Path, dst: Path, method: str) -> None:
    """Copy ``src`` to the new ``dst`` by ``method`` (``btrfs``, ``reflink``, ``copy``)."""
    command = COPY_COMMANDS.get(method)
    if command is None:
        shutil.copytree(src, dst, symlinks=True)
        return
    argv, timeout = command
    subprocess.run([*argv, str(src), str(dst)], check=True, capture_output=True, timeout=timeout)


def remove_tree(path: Path) -> None:
    if _is_subvolume(path):
        done = subprocess.run(
            ["btrfs", "subvolume", "delete", str(path)], capture_output=True, timeout=120
        )
        if done.returncode == 0:
            return
    shutil.rmtree(path, ignore_errors=True)


def _files(root: Path) -> dict[str, Path]:
    """Every file (and symlink) under ``root`` by relative path, and every empty folder as
    ``rel/`` (so a ``mkdir`` shows in a diff)."""
    out: dict[str, Path] = {}
    for dirpath, dirs, names in os.walk(root):
        here = Path(dirpath)
        if here != root and not dirs and not names:
            out[str(here.relative_to(root)) + "/"] = here
        for n in names:
            p = here / n
            out[str(p.relative_to(root))] = p
    return out


def _text(path: Path | None) -> list[str] | None:
    if path is None or path.is_dir():
        return []
    try:
        if path.stat().st_size > MAX_DIFF_BYTES:
            return None
        return path.read_text("utf-8").splitlines(keepends=True)
    except (UnicodeDecodeError, OSError):
        return None


def _same(a: Path, b: Path) -> bool:
    if a.is_symlink() or b.is_symlink():
        return a.is_symlink() and b.is_symlink() and os.readlink(a) == os.readlink(b)
    if a.is_dir() or b.is_dir():
        return a.is_dir() and b.is_dir()
    sa, sb = a.stat(), b.stat()
    if sa.st_size != sb.st_size:
        return False
    with a.open("rb") as fa, b.open("rb") as fb:
        while True:
            x, y = fa.read(1 << 16), fb.read(1 << 16)
            if x != y:
                return False
            if not x:
                return True


def diff_trees(old: Path, new: Path) -> Diff:
    """What changed from ``old`` to ``new``: files added, changed, removed, and the text diff."""
    a, b = _files(old), _files(new)
    added = sorted(set(b) - set(a))
    removed = sorted(set(a) - set(b))
    changed = sorted(k for k in set(a) & set(b) if not _same(a[k], b[k]))
    chunks: list[str] = []
    for rel in sorted([*added, *changed, *removed]):
        before, after = _text(a.get(rel)), _text(b.get(rel))
        if before is None or after is None:
            chunks.append(f"Binary or large file {rel} differs\n")
            continue
        chunks += difflib.unified_diff(before, after, f"a/{rel}", f"b/{rel}")
    # an empty folder on one side whose files are on the other is no change of its own
    added = [k for k in added if not (k.endswith("/") and any(x.startswith(k) for x in a))]
    removed = [k for k in removed if not (k.endswith("/") and any(x.startswith(k) for x in b))]
    return Diff(tuple(added), tuple(changed), tuple(removed), "".join(chunks))


class Worldlines:
    """The worldlines of one workspace folder."""

    def __init__(self, workspace: Path, *, keep: int = HISTORY_KEEP) -> None:
        self.workspace = Path(workspace).absolute()
        self.root = self.workspace.parent / f".{self.workspace.name}.worldlines"
        self.history_keep = keep
        for d in ("forks", "history", "discarded"):
            (self.root / d).mkdir(parents=True, exist_ok=True)
        self.workspace.mkdir(parents=True, exist_ok=True)

    # ------------------------------------------------------------------ state
    @contextlib.contextmanager
    def _locked(self) -> Iterator[_State]:
        with (self.root / "lock").open("a") as fh:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
            state = self._read()
            yield state
            self._write(state)

    def _read(self) -> _State:
        path = self.root / "state.json"
        if not path.exists():
            return _State()
        data = json.loads(path.read_text())
        return _State(
            generation=int(data["generation"]),
            forks={k: Fork(**v) for k, v in data["forks"].items()},
            history=[Commit(**c) for c in data["history"]],
        )

    def _write(self, state: _State) -> None:
        path = self.root / "state.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(
            json.dumps(
                {
                    "generation": state.generation,
                    "forks": {k: asdict(v) for k, v in state.forks.items()},
                    "history": [asdict(c) for c in state.history],
                },
                indent=1,
            )
        )
        os.replace(tmp, path)

    def method(self) -> str:
        """How this workspace is forked: ``btrfs``, ``reflink`` or ``copy``."""
        if _is_subvolume(self.workspace):
            return "btrfs"
        probe = self.workspace / f".reflink-probe-{uuid.uuid4().hex[:8]}"
        try:
            probe.write_bytes(b"x")
            ok = (
                subprocess.run(
                    ["cp", "--reflink=always", str(probe), str(probe) + ".2"],
                    capture_output=True,
                    timeout=10,
                ).returncode
                == 0
            )
        finally:
            probe.unlink(missing_ok=True)
            Path(str(probe) + ".2").unlink(missing_ok=True)
        return "reflink" if ok else "copy"

    def path(self, fork_id: str) -> Path:
        """An open (or kept) fork's folder: the one folder its sandbox may write."""
        f = self.get(fork_id)
        if f.status not in ("open", "kept"):
            raise WorldlineError("worldline.closed", id=fork_id, status=f.status)
        return self.root / "forks" / fork_id

    def get(self, fork_id: str) -> Fork:
        f = self._read().forks.get(fork_id)
        if f is None:
            raise WorldlineError("worldline.unknown", id=fork_id)
        return f

    def forks(self) -> list[Fork]:
        return sorted(self._read().forks.values(), key=lambda f: f.created)

    def history(self) -> list[Commit]:
        return list(self._read().history)

    @property
    def generation(self) -> int:
        return self._read().generation

    # ------------------------------------------------------------------ operations
    def fork(self, label: str = "", *, method: str | None = None) -> Fork:
        """A new fork of the current workspace; its base is the current generation."""
        return self.fork_many(1, label, method=method)[0]

    def fork_many(self, count: int, label: str = "", *, method: str | None = None) -> list[Fork]:
        """``count`` forks of the current workspace under one lock: all from the same base
        ("show me two versions": try each, commit one, the others are then stale)."""
        if not 1 <= count <= MAX_FORKS:
            raise WorldlineError("worldline.bad_count", count=count, most=MAX_FORKS)
        how = method or self.method()
        made: list[Fork] = []
        with self._locked() as state:
            for i in range(count):
                fork_id = time.strftime("%Y%m%d%H%M%S") + "-" + uuid.uuid4().hex[:6]
                copy_tree(self.workspace, self.root / "forks" / fork_id, how)
                name = f"{label} {i + 1}/{count}".strip() if count > 1 else label
                f = Fork(fork_id, state.generation, how, time.time(), label=name)
                state.forks[fork_id] = f
                made.append(f)
        log.info("%d worldlines forked from generation %d (%s)", count, made[0].base, how)
        return made

    def diff(self, fork_id: str) -> Diff:
        """The fork against the current workspace."""
        return diff_trees(self.workspace, self.path(fork_id))

    def commit(self, fork_id: str) -> Commit:
        """The fork becomes current; the old current goes to history. A fork whose base is
        no longer current is refused (``worldline.stale_base``)."""
        with self._locked() as state:
            f = state.forks.get(fork_id)
            if f is None:
                raise WorldlineError("worldline.unknown", id=fork_id)
            if f.status not in ("open", "kept"):
                raise WorldlineError("worldline.closed", id=fork_id, status=f.status)
            if f.base != state.generation:
                raise WorldlineError(
                    "worldline.stale_base", id=fork_id, base=f.base, current=state.generation
                )
            self._swap_in(self.root / "forks" / fork_id, self.root / "history" / fork_id)
            state.generation += 1
            state.forks[fork_id] = Fork(**{**asdict(f), "status": "committed"})
            c = Commit(fork_id, state.generation, time.time())
            state.history.append(c)
            self._trim(state)
        log.info("worldline %s committed: generation %d", fork_id, c.generation)
        return c

    def _swap_in(self, new: Path, old_to: Path) -> None:
        """``new`` becomes the workspace; the workspace's tree moves to ``old_to``."""
        if exchange(new, self.workspace):
            new.rename(old_to)
            return
        self.workspace.rename(old_to)
        new.rename(self.workspace)

    def rollback(self, commit_id: str) -> Commit:
        """Restore the state before commit ``commit_id`` (byte-identical); the state it
        replaces goes to history (as a commit ``rollback_of`` it)."""
        with self._locked() as state:
            c = next((h for h in state.history if h.id == commit_id), None)
            before = self.root / "history" / commit_id
            if c is None or not before.exists():
                raise WorldlineError("worldline.no_history", id=commit_id)
            new_id = f"rollback-{commit_id}-{uuid.uuid4().hex[:4]}"
            self._swap_in(before, self.root / "history" / new_id)
            state.history = [h for h in state.history if h.id != commit_id]
            state.generation += 1
            r = Commit(new_id, state.generation, time.time(), rollback_of=commit_id)
            state.history.append(r)
            self._trim(state)
        return r

    def discard(self, fork_id: str) -> None:
        """Move the fork aside (reclaimed by :meth:`gc`); the workspace is untouched."""
        with self._locked() as state:
            f = state.forks.get(fork_id)
            if f is None:
                raise WorldlineError("worldline.unknown", id=fork_id)
            if f.status not in ("open", "kept"):
                raise WorldlineError("worldline.closed", id=fork_id, status=f.status)
            (self.root / "forks" / fork_id).rename(self.root / "discarded" / fork_id)
            state.forks[fork_id] = Fork(**{**asdict(f), "status": "discarded"})

    def keep(self, fork_id: str) -> Fork:
        """Leave the fork open (not reclaimed by :meth:`gc`, however old)."""
        with self._locked() as state:
            f = state.forks.get(fork_id)
            if f is None:
                raise WorldlineError("worldline.unknown", id=fork_id)
            kept = Fork(**{**asdict(f), "status": "kept"})
            state.forks[fork_id] = kept
        return kept

    def _trim(self, state: _State) -> None:
        while len(state.history) > self.history_keep:
            old = state.history.pop(0)
            (self.root / "history" / old.id).rename(self.root / "discarded" / old.id)

    def gc(self, *, open_older_than_s: float | None = None) -> int:
        """Reclaim discarded forks and trimmed history (and open forks older than
        ``open_older_than_s``, never kept ones); returns how many trees were removed."""
        n = 0
        with self._locked() as state:
            if open_older_than_s is not None:
                cutoff = time.time() - open_older_than_s
                for f in list(state.forks.values()):
                    if f.status == "open" and f.created < cutoff:
                        (self.root / "forks" / f.id).rename(self.root / "discarded" / f.id)
                        state.forks[f.id] = Fork(**{**asdict(f), "status": "discarded"})
            for d in list((self.root / "discarded").iterdir()):
                remove_tree(d)
                n += 1
            for k in [k for k, f in state.forks.items() if f.status in ("discarded", "committed")]:
                del state.forks[k]
        return n
