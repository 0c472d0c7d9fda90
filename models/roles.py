"""The catalog's model roles and runtimes: plain names, importable without the catalog
(which imports its built-in models' modules, numpy among them) — ``yimi``'s parser offers
them as choices for every command it runs."""

from __future__ import annotations

ROLES: tuple[str, ...] = ("vad", "wake", "speaker", "asr", "embed", "face")
RUNTIMES: frozenset[str] = frozenset(
    {"onnxruntime", "sherpa-onnx", "ctranslate2", "opencv", "numpy"}
)
