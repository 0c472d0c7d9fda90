"""People the owner names, as pure rules: enrolment like the voiceprint's, and recognition.

Enrolment takes several photos of one person, each with exactly one face. Every photo's
descriptor must lie within ``LOO_LINE`` of the centroid of the *other* photos (leave-one-out:
one photo of somebody else, or a bad crop, is refused by name, and nothing is stored). The
person's centroid is the mean of their samples; a face is that person when its distance to
the centroid is below the person's ``line`` (``LINE``, never above ``LOO_LINE``) and it is
nearer to them than to anyone else.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from hub.vision.errors import VisionError
from hub.vision.faces import Face, Vector

MIN_PHOTOS = 3
LOO_LINE = 0.6
"""Euclidean: a held-out sample farther than this from the others' centroid is refused"""
LINE = 0.55
"""Euclidean: recognised below this distance to the person's centroid"""
MAX_NAME = 64
_NAME = re.compile(r"^[^\x00-\x1f/\\]{1,64}$")


@dataclass(frozen=True)
class Sample:
    label: str
    embedding: Vector


@dataclass(frozen=True)
class Person:
    name: str
    centroid: Vector
    samples: int
    line: float = LINE


@dataclass(frozen=True)
class Enrolment:
    name: str
    samples: list[Sample]
    loo: list[float]
    """each new sample's distance to the centroid of all the others"""
    line: float


def check_name(name: str) -> str:
    name = " ".join(name.split())
    if not name or not _NAME.match(name):
        raise VisionError("vision.name_invalid", name=name)
    return name


def one_face(label: str, faces: Sequence[Face]) -> Sample:
    """The sample of an enrolment photo: exactly one face, else a :class:`VisionError`."""
    if not faces:
        raise VisionError("vision.no_face", label=label)
    if len(faces) > 1:
        raise VisionError("vision.many_faces", label=label, count=len(faces))
    return Sample(label, faces[0].embedding)


def enrol(name: str, new: Sequence[Sample], existing: Sequence[Sample] = ()) -> Enrolment:
    """Check ``new`` samples of ``name`` (with the ones already ``existing``)."""
    name = check_name(name)
    every = [*existing, *new]
    if len(every) < MIN_PHOTOS:
        raise VisionError("vision.few_photos", name=name, count=len(every), needed=MIN_PHOTOS)
    vectors = np.stack([s.embedding for s in every])
    total = vectors.sum(axis=0)
    loo: list[float] = []
    for i, sample in enumerate(every):
        others = (total - vectors[i]) / (len(every) - 1)
        distance = float(np.linalg.norm(vectors[i] - others))
        if i >= len(existing):
            loo.append(distance)
            if distance > LOO_LINE:
                raise VisionError(
                    "vision.inconsistent",
                    name=name,
                    label=sample.label,
                    distance=distance,
                    line=LOO_LINE,
                )
    return Enrolment(name, list(new), loo, LINE)


def centroid(samples: Sequence[Vector]) -> Vector:
    return np.mean(np.stack(list(samples)), axis=0)


def recognise(face: Vector, people: Mapping[str, Person]) -> tuple[str, float] | None:
    """The nearest person within their line, with the distance; ``None``: nobody known."""
    best: tuple[str, float] | None = None
    for person in people.values():
        distance = float(np.linalg.norm(face - person.centroid))
        if distance < person.line and (best is None or distance < best[1]):
            best = (person.name, distance)
    return best
