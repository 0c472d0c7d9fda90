"""L2 core profile: ``USER.md`` and ``MEMORY.md``, generated read-only from L3.

The files are made only from current assertions with predicate ``core_profile.entry``:
subject ``user`` or ``user.<section>`` goes to ``USER.md``, any other subject
(``memory``, ``memory.<section>``, …) to ``MEMORY.md``; the value is the entry's text.
Entries are ordered by section, then id, so the same assertions always give the same
bytes. Files are written atomically (temporary file, fsync, rename) with mode 0400; an
unchanged file is not rewritten. Nobody edits them: a change goes through a commit or a
forget, after which the store's listener regenerates them.

Each file is itself derived from its entries: it is recorded as a derived ``context``
item (``profile.USER`` / ``profile.MEMORY``) whose sensitivity is the highest of its
entries', and that level is written in the file's header.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from hub.memory.assertions import AssertionStore
from hub.memory.derived import DerivedStore
from hub.memory.models import PROFILE_PREDICATE, Assertion, Change, render_value
from hub.memory.sensitivity import highest
from storage.private import private_dir

log = logging.getLogger(__name__)

FILES = ("USER", "MEMORY")
READ_ONLY = 0o400
"""owner read-only: the profile is private and nobody edits it"""
HEADER = (
    "<!-- generated from memory (core_profile.entry assertions); read-only. "
    "Change it with 'yimi memory commit' or 'yimi memory forget'. -->"
)


@dataclass(frozen=True)
class ProfileFile:
    path: Path
    entries: tuple[str, ...]
    """ids of the assertions it was made from"""
    sensitivity: str
    written: bool
    """False if the file already had exactly these bytes"""


def file_of(subject: str) -> tuple[str, str]:
    """``(file, section)`` of an entry's subject: ``user.diet`` → ``("USER", "diet")``."""
    head, _, rest = subject.partition(".")
    name = "USER" if head == "user" else "MEMORY"
    section = rest if head in ("user", "memory") else subject
    return name, (section.strip() or "general")


def render(name: str, entries: list[Assertion], sensitivity: str) -> str:
    """The file's text: deterministic for the same entries."""
    lines = [f"# {name}.md", "", HEADER]
    lines.append(f"<!-- sensitivity: {sensitivity}; entries: {len(entries)} -->" if entries else "")
    keyed = sorted(
        (file_of(a.head.subject or "")[1], a.id, a) for a in entries if a.head.subject is not None
    )
    section = None
    for sec, _, a in keyed:
        if sec != section:
            lines += ["", f"## {sec}"]
            section = sec
        text = " ".join(render_value(a.head.value).split())
        lines.append(f"- {text}  <!-- {a.id} v{a.version} -->")
    return "\n".join(lines).rstrip() + "\n"


def write_read_only(path: Path, text: str) -> bool:
    """Atomically replace ``path`` with ``text`` (mode 0400); False if already identical."""
    data = text.encode()
    try:
        if path.read_bytes() == data and (path.stat().st_mode & 0o777) == READ_ONLY:
            return False
    except FileNotFoundError:
        pass
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.write(fd, data)
        os.fchmod(fd, READ_ONLY)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    dfd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)
    return True


@contextlib.contextmanager
def _locked(directory: Path) -> Iterator[None]:
    """One regeneration at a time across processes (the hub, the CLI, the package)."""
    fd = os.open(directory / ".lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


class ProfileWriter:
    """Keeps ``directory/USER.md`` and ``directory/MEMORY.md`` in step with ``store``."""

    def __init__(self, store: AssertionStore, directory: Path) -> None:
        self.store = store
        self.directory = directory
        self.derived = DerivedStore(store)

    def attach(self) -> ProfileWriter:
        """Regenerate after every change that touches a profile entry."""
        self.store.add_listener(self.on_change)
        return self

    def on_change(self, change: Change) -> None:
        if PROFILE_PREDICATE in change.predicates:
            self.regenerate()

    def paths(self) -> dict[str, Path]:
        return {name: self.directory / f"{name}.md" for name in FILES}

    def regenerate(self) -> list[ProfileFile]:
        private_dir(self.directory)
        out = []
        with _locked(self.directory):
            by_file: dict[str, list[Assertion]] = {name: [] for name in FILES}
            for a in self.store.current(PROFILE_PREDICATE):
                by_file[file_of(a.head.subject or "")[0]].append(a)
            for name, path in self.paths().items():
                entries = by_file[name]
                sensitivity = highest(
                    self.store.source_sensitivity(("assertion", a.id)) for a in entries
                )
                text = render(name, entries, sensitivity)
                if entries:
                    self.derived.record(
                        "context",
                        text,
                        [("assertion", a.id) for a in entries],
                        item_id=f"profile.{name}",
                        index=False,
                    )
                written = write_read_only(path, text)
                if written:
                    log.info("%s regenerated: %d entries, %s", path, len(entries), sensitivity)
                out.append(
                    ProfileFile(path, tuple(sorted(a.id for a in entries)), sensitivity, written)
                )
        return out
