"""``HOME/vision.db``: the photos the hub holds (what was read and who was recognised on
each) and the people the owner named (their face samples). Every row here is ``high``
sensitivity; face descriptors never leave the hub. Both the hub and ``yimi people`` open it
(WAL; one writer at a time)."""

from __future__ import annotations

import datetime as dt
import json
import threading
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from hub.vision.errors import VisionError
from hub.vision.people import MIN_PHOTOS, Person, Sample, centroid
from protos.clock import now_ms
from storage.sqlite import open_db, transaction

SCHEMA = """
CREATE TABLE IF NOT EXISTS photos (
    id TEXT PRIMARY KEY,
    device TEXT NOT NULL,
    turn_id TEXT NOT NULL,
    taken_ms INTEGER NOT NULL,
    archive_id TEXT NOT NULL,
    sha256 TEXT NOT NULL,
    size INTEGER NOT NULL,
    width INTEGER NOT NULL,
    height INTEGER NOT NULL,
    faces INTEGER NOT NULL,
    people TEXT NOT NULL,
    text TEXT NOT NULL,
    description TEXT NOT NULL,
    device_name TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS photos_taken ON photos(taken_ms);
CREATE TABLE IF NOT EXISTS samples (
    id INTEGER PRIMARY KEY,
    name TEXT NOT NULL,
    label TEXT NOT NULL,
    embedding BLOB NOT NULL,
    made_ms INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS samples_name ON samples(name);
"""


@dataclass(frozen=True)
class Analysis:
    faces: int
    people: tuple[str, ...]
    text: str


def describe(device: str, taken_ms: int, a: Analysis) -> str:
    """The local description of a snapshot: time, device, faces, people, text."""
    when = dt.datetime.fromtimestamp(taken_ms / 1000).astimezone().strftime("%Y-%m-%d %H:%M")
    parts = [f"photo taken {when} on {device} / {device} 拍的照片"]
    if a.faces:
        parts.append(f"{a.faces} face(s) / {a.faces} 张人脸")
    if a.people:
        parts.append("people / 人物: " + ", ".join(a.people))
    if a.text:
        parts.append(f"text / 文字: {a.text[:300]}")
    return "; ".join(parts)


@dataclass(frozen=True)
class PhotoRecord:
    id: str
    device: str
    turn_id: str
    taken_ms: int
    archive_id: str
    sha256: str
    size: int
    width: int
    height: int
    faces: int
    people: tuple[str, ...]
    text: str
    description: str
    device_name: str = ""


@dataclass(frozen=True)
class Forgotten:
    name: str
    samples: int
    photos: list[PhotoRecord]
    """the photos whose recognised names lost this one (as they are now)"""


def _blob(v: Any) -> bytes:
    return np.asarray(v, dtype="<f8").tobytes()


def _vec(b: bytes) -> Any:
    return np.frombuffer(b, dtype="<f8").copy()


class VisionStore:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.RLock()
        self.db = open_db(path, SCHEMA)

    @classmethod
    def for_home(cls, home: Path) -> VisionStore:
        return cls(home / "vision.db")

    def close(self) -> None:
        with self._lock:
            self.db.close()

    def _rows(self, sql: str, *args: Any) -> list[tuple[Any, ...]]:
        with self._lock:
            return [tuple(r) for r in self.db.execute(sql, args)]

    # ------------------------------------------------------------------ people
    def samples(self, name: str) -> list[Sample]:
        rows = self._rows("SELECT label, embedding FROM samples WHERE name = ? ORDER BY id", name)
        return [Sample(str(label), _vec(blob)) for label, blob in rows]

    def _count_of(self, name: str) -> int:
        return int(self._rows("SELECT count(*) FROM samples WHERE name = ?", name)[0][0])

    def add_samples(self, name: str, samples: Sequence[Sample], *, replace: bool = False) -> int:
        now = now_ms()
        with self._lock, transaction(self.db):
            if replace:
                self.db.execute("DELETE FROM samples WHERE name = ?", (name,))
            for s in samples:
                self.db.execute(
                    "INSERT INTO samples(name, label, embedding, made_ms) VALUES (?, ?, ?, ?)",
                    (name, s.label, _blob(s.embedding), now),
                )
            return self._count_of(name)

    def people(self) -> dict[str, Person]:
        by_name: dict[str, list[Any]] = {}
        for name, blob in self._rows("SELECT name, embedding FROM samples ORDER BY id"):
            by_name.setdefault(str(name), []).append(_vec(blob))
        return {
            n: Person(n, centroid(vs), len(vs))
            for n, vs in sorted(by_name.items())
            if len(vs) >= MIN_PHOTOS  # fewer: being named, not recognised yet
        }

    def add_person_to(self, photo_id: str, name: str) -> PhotoRecord | None:
        """``name`` recognised on a photo after all (the owner said so): the new record."""
        with self._lock, transaction(self.db):
            p = self.photo(photo_id)
            if p is None or name in p.people:
                return p
            people = (*p.people, name)
            what = Analysis(p.faces, people, p.text)
            p = replace(p, people=people, description=describe(p.device_name, p.taken_ms, what))
            self.db.execute(
                "UPDATE photos SET people = ?, description = ? WHERE id = ?",
                (json.dumps(list(people), ensure_ascii=False), p.description, p.id),
            )
            return p

    def held(self, name: str) -> tuple[int, list[str]]:
        """What forgetting ``name`` deletes here: their face samples' count and the ids of
        the photos their name is on (an unknown person: :class:`VisionError`)."""
        with self._lock:
            count = self._count_of(name)
            if not count:
                raise VisionError("vision.unknown_person", name=name)
            photos = [_photo(row) for row in self._rows("SELECT * FROM photos")]
        return count, [p.id for p in photos if name in p.people]

    def forget(self, name: str) -> Forgotten:
        """Delete the person's face samples and their name wherever it was recognised."""
        with self._lock, transaction(self.db):
            count = self._count_of(name)
            if not count:
                raise VisionError("vision.unknown_person", name=name)
            self.db.execute("DELETE FROM samples WHERE name = ?", (name,))
            touched: list[PhotoRecord] = []
            for row in self._rows("SELECT * FROM photos"):
                p = _photo(row)
                if name in p.people:
                    people = tuple(n for n in p.people if n != name)
                    what = Analysis(p.faces, people, p.text)
                    p = replace(
                        p, people=people, description=describe(p.device_name, p.taken_ms, what)
                    )
                    self.db.execute(
                        "UPDATE photos SET people = ?, description = ? WHERE id = ?",
                        (json.dumps(list(people), ensure_ascii=False), p.description, p.id),
                    )
                    touched.append(p)
        with self._lock:
            self.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        return Forgotten(name, count, touched)

    # ------------------------------------------------------------------ photos
    def add_photo(self, p: PhotoRecord) -> bool:
        with self._lock, transaction(self.db):
            self.db.execute(
                "INSERT OR IGNORE INTO photos VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    p.id,
                    p.device,
                    p.turn_id,
                    p.taken_ms,
                    p.archive_id,
                    p.sha256,
                    p.size,
                    p.width,
                    p.height,
                    p.faces,
                    json.dumps(list(p.people), ensure_ascii=False),
                    p.text,
                    p.description,
                    p.device_name,
                ),
            )
            return bool(self.db.changes())

    def photos(self, *, since_ms: int = 0, limit: int = 100) -> list[PhotoRecord]:
        rows = self._rows(
            "SELECT * FROM photos WHERE taken_ms >= ? ORDER BY taken_ms DESC, id LIMIT ?",
            since_ms,
            limit,
        )
        return [_photo(r) for r in rows]

    def photo(self, photo_id: str) -> PhotoRecord | None:
        rows = self._rows("SELECT * FROM photos WHERE id = ?", photo_id)
        return _photo(rows[0]) if rows else None


def _photo(r: Sequence[Any]) -> PhotoRecord:
    return PhotoRecord(
        id=str(r[0]),
        device=str(r[1]),
        turn_id=str(r[2]),
        taken_ms=int(r[3]),
        archive_id=str(r[4]),
        sha256=str(r[5]),
        size=int(r[6]),
        width=int(r[7]),
        height=int(r[8]),
        faces=int(r[9]),
        people=tuple(json.loads(r[10])),
        text=str(r[11]),
        description=str(r[12]),
        device_name=str(r[13]),
    )
