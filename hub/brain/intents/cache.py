"""Parsed intent templates kept on disk: a process that builds the intent engine (every hub
start) loads them instead of parsing its ~1,500 hassil templates (both languages) again.

hassil parses a template block's sentences on their first use (``IntentData.sentences``);
:func:`parse` does that for every block, once, and the result — a ``hassil.Intents`` —
is pickled into ``intents-<name>-<key>.pickle`` in :func:`cache_dir`. The key is a
SHA-256 of everything the result depends on: the merged template document itself
(Home Assistant's and Yimi's templates, lists, expansion rules, skip words), hassil's
version, the Python version and :data:`FORMAT`. A changed template, a hassil upgrade or a
new Python gives a new key, so a stale file is never read (the oldest of a set are removed
when a new one is written: :data:`KEEP`).

A file is loaded only when it is the current user's and writable by no one else, starts
with the expected header, names the same key, and its payload has the SHA-256 the header
gives; anything else (missing, truncated, corrupt, someone else's, an unpickling error,
not an ``Intents``) means the templates are parsed again and the file rewritten. A folder
that cannot be written only costs the parse: the engine never depends on the cache.

Parsing took 0.21-0.25 s of CPU per process on the development machine; loading takes
0.04-0.05 s with the garbage collector paused (the load allocates hundreds of thousands of
objects at once, which otherwise triggers repeated full collections). The collector still
meets those objects later, so a whole hub start saves less: 1.52-1.73 s of CPU before,
1.36-1.55 s with the cache.
"""

from __future__ import annotations

import gc
import hashlib
import json
import logging
import os
import pickle
import stat
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from importlib import metadata
from pathlib import Path
from typing import Any

from hassil import Intents

from storage.private import private_dir, write_private

log = logging.getLogger(__name__)

FORMAT = 1
"""bumped when what is pickled changes shape (e.g. more lazy parts forced)"""
CACHE_ENV = "YIMI_CACHE_DIR"
"""the folder for the cache, when set (otherwise ``$XDG_CACHE_HOME/yimi``, ``~/.cache/yimi``)"""
MAGIC = b"yimi-intents\n"
KEEP = 4
"""files kept per template set (the newest; the current one among them)"""


def cache_dir() -> Path:
    """``$YIMI_CACHE_DIR``, else ``$XDG_CACHE_HOME/yimi``, else ``~/.cache/yimi``."""
    explicit = os.environ.get(CACHE_ENV)
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "yimi"


def template_key(data: Mapping[str, Any]) -> str:
    """The SHA-256 (hex) of the template document ``data`` and of what parsing it depends
    on besides (hassil's version, the Python version, :data:`FORMAT`)."""
    h = hashlib.sha256()
    h.update(f"{FORMAT}\n{metadata.version('hassil')}\n{sys.version}\n".encode())
    h.update(json.dumps(data, sort_keys=True, ensure_ascii=False, default=repr).encode())
    return h.hexdigest()


def parse(data: dict[str, Any]) -> Intents:
    """``data`` as ``hassil.Intents``, every block's templates parsed now."""
    intents = Intents.from_dict(data)
    for intent in intents.intents.values():
        for block in intent.data:
            _ = block.sentences  # hassil's lazy parse, done here once
    return intents


def load_or_parse(data: dict[str, Any], name: str, folder: Path | None = None) -> Intents:
    """The parsed templates of ``data`` from ``folder`` (default :func:`cache_dir`) when a
    sound file for them is there; otherwise parsed, and written there for the next time."""
    folder = cache_dir() if folder is None else folder
    key = template_key(data)
    path = folder / f"intents-{name}-{key[:32]}.pickle"
    intents = _load(path, key)
    if intents is not None:
        return intents
    intents = parse(data)
    _store(path, key, intents, name)
    return intents


def _load(path: Path, key: str) -> Intents | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return None
    except OSError as exc:
        log.info("intent template cache %s not read (%s): parsing the templates", path, exc)
        return None
    try:
        with os.fdopen(fd, "rb") as fh:
            st = os.fstat(fh.fileno())
            if st.st_uid != os.getuid() or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
                raise ValueError("not this user's own file")
            raw = fh.read()
        head = MAGIC + key.encode() + b"\n"
        if not raw.startswith(head):
            raise ValueError("another header")
        digest, _, payload = raw[len(head) :].partition(b"\n")
        if hashlib.sha256(payload).hexdigest().encode() != digest:
            raise ValueError("its payload does not match its digest")
        with _gc_paused():
            intents = pickle.loads(payload)
        if not isinstance(intents, Intents):
            raise ValueError(f"it holds a {type(intents).__name__}")
    except Exception as exc:  # a cache never stops the engine: parse again
        log.warning("intent template cache %s not used (%s): parsing the templates", path, exc)
        return None
    return intents


def _store(path: Path, key: str, intents: Intents, name: str) -> None:
    try:
        payload = pickle.dumps(intents, protocol=pickle.HIGHEST_PROTOCOL)
        digest = hashlib.sha256(payload).hexdigest().encode()
        private_dir(path.parent)
        write_private(path, MAGIC + key.encode() + b"\n" + digest + b"\n" + payload)
        _prune(path, name)
    except Exception as exc:  # read-only or full disk: the next start parses again
        log.info("intent template cache %s not written: %s", path, exc)


def _prune(path: Path, name: str) -> None:
    """Keep the :data:`KEEP` newest files of ``name`` (another key: other templates or
    another hassil, e.g. two checkouts of different versions on one machine)."""
    others = sorted(
        (p for p in path.parent.glob(f"intents-{name}-*.pickle") if p != path),
        key=lambda p: p.stat().st_mtime,
        reverse=True,
    )
    for old in others[KEEP - 1 :]:
        old.unlink(missing_ok=True)


@contextmanager
def _gc_paused() -> Iterator[None]:
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()
