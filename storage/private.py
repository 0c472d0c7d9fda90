"""Private files and folders: every file in HOME or a bundle that holds private content is
0600 and every folder 0700, whatever the process umask.

Creation points use these helpers (explicit modes); the hub and every ``yimi`` command also
run with :data:`PRIVATE_UMASK` (:func:`private_umask`), so a file some library creates on
its own (SQLite's ``-wal``/``-shm``, a model's cache, a package server's state) is private
too. SQLite gives its side files the mode of the database file, so a database created 0600
by :func:`storage.sqlite.open_db` keeps its ``-wal`` and ``-shm`` at 0600.

What is private: everything in HOME and in a bundle — keys and secrets, databases (hub,
registry, gateway and payments, memory and the ``recall/*.db`` indexes, voiceprints,
outboxes, cards), the memory profile (``profile/*.md``, 0400: read-only), replica logs and
snapshots, the hot archive, package state and package logs, the audit log and head, the
witness head, ``home.yaml`` / ``bundle.yaml`` and the owner's ``packages.yaml`` /
``contacts.yaml`` (the hub makes HOME's top-level files 0600 at start: :func:`tighten_top`).
The one exception by decision: the model cache (``HOME/models``) holds only registry
weights checked against trusted SHA-256s and a lock file — nothing private — so it has no
explicit modes; under ``yimi``'s umask it is 0700/0600 all the same, and 0755/0644 left by
another tool is acceptable there.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import BinaryIO, cast

PRIVATE_UMASK = 0o077
"""the umask of the hub and of every ``yimi`` command: nothing readable by group or others"""
FILE_MODE = 0o600
DIR_MODE = 0o700


def private_umask() -> int:
    """Set the process umask to :data:`PRIVATE_UMASK`; returns the previous one."""
    return os.umask(PRIVATE_UMASK)


def private_dir(path: Path) -> Path:
    """Make ``path`` (and missing parents) with mode 0700; an existing folder is set to 0700."""
    path = Path(path)
    missing = []
    p = path
    while not p.exists():
        missing.append(p)
        p = p.parent
    for d in reversed(missing):  # mkdir's own parents would take the umask's mode
        d.mkdir(mode=DIR_MODE, exist_ok=True)
        os.chmod(d, DIR_MODE)
    if path.stat().st_mode & 0o777 != DIR_MODE:
        os.chmod(path, DIR_MODE)
    return path


def private_file(path: Path) -> Path:
    """Create ``path`` empty with mode 0600 if missing (its folder 0700); an existing file is
    set to 0600. Returns ``path``."""
    path = Path(path)
    if not path.parent.exists():
        private_dir(path.parent)
    fd = os.open(path, os.O_CREAT | os.O_WRONLY, FILE_MODE)
    try:
        if os.fstat(fd).st_mode & 0o777 != FILE_MODE:
            os.fchmod(fd, FILE_MODE)
    finally:
        os.close(fd)
    return path


def open_private_fd(path: str | Path, mode: str = "ab") -> int:
    """The file descriptor of ``path`` opened for writing (``"ab"`` append or ``"wb"``
    truncate), creating it 0600 (an existing file is set to 0600); the caller closes it."""
    flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if mode == "ab" else os.O_TRUNC)
    fd = os.open(path, flags, FILE_MODE)
    try:
        if os.fstat(fd).st_mode & 0o777 != FILE_MODE:
            os.fchmod(fd, FILE_MODE)
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_private(path: Path, mode: str = "ab") -> BinaryIO:
    """Open ``path`` for binary writing (``"ab"`` append or ``"wb"`` truncate), creating it
    0600 (an existing file is set to 0600)."""
    fd = open_private_fd(path, mode)
    try:
        return cast(BinaryIO, os.fdopen(fd, mode))
    except BaseException:
        os.close(fd)
        raise


def write_private(path: Path, data: bytes | str) -> None:
    """Replace ``path`` with ``data`` atomically (temporary file 0600, fsync, rename)."""
    path = Path(path)
    if not path.parent.exists():
        private_dir(path.parent)
    raw = data.encode() if isinstance(data, str) else data
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, FILE_MODE)
    try:
        os.fchmod(fd, FILE_MODE)
        os.write(fd, raw)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def tighten_top(root: Path) -> list[Path]:
    """Make ``root`` 0700 and the regular files directly in it 0600 (the owner edits
    ``packages.yaml``, ``contacts.yaml``, ``home.yaml`` with whatever umask they have; the
    hub runs this at start). Returns what was loosened and is now fixed."""
    fixed: list[Path] = []
    root = Path(root)
    if root.stat().st_mode & 0o077:
        os.chmod(root, DIR_MODE)
        fixed.append(root)
    for p in root.iterdir():
        st = p.lstat()
        if stat.S_ISREG(st.st_mode) and st.st_mode & 0o077:
            os.chmod(p, st.st_mode & 0o700 or FILE_MODE)
            fixed.append(p)
    return fixed


def loose_modes(root: Path) -> list[tuple[Path, int]]:
    """(path, mode) of every file or folder under ``root`` that group or others may use
    (any of the 0o077 bits; symlinks and sockets skipped) — what the tests look for. Files
    are 0600 (0400 for read-only ones such as the memory profile), folders 0700."""
    found: list[tuple[Path, int]] = []
    for dirpath, _dirs, filenames in os.walk(root):
        d = Path(dirpath)
        mode = d.stat().st_mode & 0o777
        if mode & 0o077:
            found.append((d, mode))
        for name in filenames:
            p = d / name
            try:
                st = p.lstat()
            except FileNotFoundError:  # removed while walking (a -journal, a temporary file)
                continue
            if not stat.S_ISREG(st.st_mode):
                continue
            if st.st_mode & 0o077:
                found.append((p, st.st_mode & 0o777))
    return found
