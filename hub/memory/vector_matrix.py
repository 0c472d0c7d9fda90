"""The recall index's vectors as one float32 matrix in memory: brute-force k-NN at numpy speed.

sqlite-vec's ``vec0`` k-NN reads every vector chunk from the database on every query (121 ms
at 100k memories against 26 ms for a numpy product over the same vectors). The index keeps
this matrix in step with ``items_vec``: every row it writes, removes or touches is applied
here too (:meth:`VectorMatrix.upsert`, :meth:`remove`, :meth:`touch`), a failed transaction
throws the matrix away (:meth:`invalidate`) and a commit by another connection (another
process re-indexing, forgetting) is seen through ``PRAGMA data_version`` and reloads it.

Rows are stored unit-length, so the cosine distance sqlite-vec reports is ``1 - row · q``.
They are loaded least recently used first, so the rows past the 30-day rule are mostly a
prefix: a search multiplies from its first eligible row on (a third less work when a third
of the memory is stale), and masks the rest.
The answer is the one ``vec0`` gives: the ``limit`` nearest rows whose ``last_access_ms`` is
at or after the cutoff, nearest first (equal distances by rowid).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # numpy is imported where the matrix is first built (a large import)
    import numpy as np
    import numpy.typing as npt

__all__ = ["RecentVectors", "VectorMatrix"]

_MIN_CAPACITY = 1024


class VectorMatrix:
    """Unit float32 rows by SQLite rowid, with each row's last access (not thread-safe: the
    index calls it under its own lock)."""

    def __init__(self, dim: int) -> None:
        import numpy as np

        self.dim = dim
        self.loaded = False
        """False until :meth:`load` (and again after :meth:`invalidate`)"""
        self.version: int | None = None
        """the database's ``data_version`` the matrix was loaded at (the caller's to keep)"""
        self._n = 0
        self._vecs: npt.NDArray[np.float32] = np.empty((0, dim), dtype=np.float32)
        self._rids: npt.NDArray[np.int64] = np.empty(0, dtype=np.int64)
        self._access: npt.NDArray[np.int64] = np.empty(0, dtype=np.int64)
        self._row: dict[int, int] = {}

    def __len__(self) -> int:
        return self._n

    # ------------------------------------------------------------ keeping in step
    def load(self, rows: Iterable[tuple[int, bytes, int]]) -> None:
        """Replace everything with ``(rowid, float32 embedding bytes, last_access_ms)`` rows."""
        import numpy as np

        rids: list[int] = []
        blobs: list[bytes] = []
        access: list[int] = []
        for rid, blob, last_access in rows:
            rids.append(int(rid))
            blobs.append(bytes(blob))
            access.append(int(last_access))
        n = len(rids)
        cap = max(_MIN_CAPACITY, n + n // 4)
        # least recently used first: the rows past the 30-day rule are then a prefix that
        # a search skips (rows added or touched later go to the end or stay where they are;
        # a search reads from its first eligible row, wherever that is)
        order = np.argsort(np.asarray(access, dtype=np.int64), kind="stable")
        self._vecs = np.zeros((cap, self.dim), dtype=np.float32)
        if n:
            vecs = np.frombuffer(b"".join(blobs), dtype=np.float32).reshape(n, self.dim)
            self._vecs[:n] = _unit(vecs[order])
        self._rids = np.zeros(cap, dtype=np.int64)
        self._rids[:n] = np.asarray(rids, dtype=np.int64)[order]
        self._access = np.zeros(cap, dtype=np.int64)
        self._access[:n] = np.asarray(access, dtype=np.int64)[order]
        self._n = n
        self._row = {int(rid): i for i, rid in enumerate(self._rids[:n].tolist())}
        self.loaded = True

    def invalidate(self) -> None:
        """Forget everything: the next search loads the matrix again."""
        self.loaded = False
        self.version = None

    def upsert(self, rid: int, vec: npt.NDArray[np.float32], last_access: int) -> None:
        if not self.loaded:
            return
        i = self._row.get(rid)
        if i is None:
            if self._n == len(self._rids):
                self._grow()
            i = self._n
            self._n += 1
            self._row[rid] = i
            self._rids[i] = rid
        self._vecs[i] = _unit(vec.reshape(1, self.dim))[0]
        self._access[i] = last_access

    def remove(self, rid: int) -> None:
        if not self.loaded:
            return
        i = self._row.pop(rid, None)
        if i is None:
            return
        last = self._n - 1
        if i != last:  # the last row takes the freed place
            moved = int(self._rids[last])
            self._vecs[i] = self._vecs[last]
            self._rids[i] = moved
            self._access[i] = self._access[last]
            self._row[moved] = i
        self._n = last

    def touch(self, rid: int, last_access: int) -> None:
        if not self.loaded:
            return
        i = self._row.get(rid)
        if i is not None:
            self._access[i] = last_access

    def _grow(self) -> None:
        import numpy as np

        cap = max(_MIN_CAPACITY, 2 * len(self._rids))
        vecs = np.zeros((cap, self.dim), dtype=np.float32)
        vecs[: self._n] = self._vecs[: self._n]
        rids = np.zeros(cap, dtype=np.int64)
        rids[: self._n] = self._rids[: self._n]
        access = np.zeros(cap, dtype=np.int64)
        access[: self._n] = self._access[: self._n]
        self._vecs, self._rids, self._access = vecs, rids, access

    # ------------------------------------------------------------ search
    def nearest(
        self, query: npt.NDArray[np.float32], limit: int, cutoff: int | None
    ) -> list[tuple[int, float]]:
        """The ``limit`` nearest rows as ``(rowid, cosine distance)``, nearest first; with a
        ``cutoff`` only rows last accessed at or after it."""
        import numpy as np

        n = self._n
        if n == 0 or limit <= 0:
            return []
        q = _unit(np.asarray(query, dtype=np.float32).reshape(1, self.dim))[0]
        lo = 0
        fresh = None
        if cutoff is not None:
            fresh = self._access[:n] >= cutoff
            lo = int(np.argmax(fresh))  # the rows before the first eligible one: not read
            if not fresh[lo]:
                return []
            fresh = fresh[lo:]
        scores = self._vecs[lo:n] @ q  # the one pass over the matrix; masked in place below
        m = n - lo
        count = m if fresh is None else int(np.count_nonzero(fresh))
        if fresh is not None and count < m:
            np.copyto(scores, -np.inf, where=~fresh)
        limit = min(limit, count)
        if limit < m:  # the rows at or above the limit-th score (ties at it included)
            kth = np.partition(scores, m - limit)[m - limit]
            top = np.flatnonzero(scores >= kth)
        else:
            top = np.arange(m)
        rids = self._rids[lo + top]
        # nearest first; equal scores by rowid
        order = np.lexsort((rids, -scores[top]))[:limit]
        return [(int(rids[j]), float(1.0 - scores[top[j]])) for j in order]


def _unit(vecs: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    import numpy as np

    norms = np.linalg.norm(vecs, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return np.asarray(vecs / norms, dtype=np.float32)


class RecentVectors:
    """The last few texts' embeddings, by (model, text). Embeddings are deterministic, so a
    remembered one is the one the model would give again:

    - a turn's recall asks for the same words more than once (its context, then the model's
      own search), and embedding them costs milliseconds each time;
    - the timeline's replies repeat ("Done.", "I didn't catch that", the help text), and the
      indexer would embed each again.
    """

    def __init__(self, size: int = 64) -> None:
        self.size = size
        self._held: dict[tuple[str, str], npt.NDArray[np.float32]] = {}
        self._lock = threading.Lock()  # searches embed outside the index's lock

    def get(
        self, model_id: str, text: str, embed: Callable[[str], npt.NDArray[np.float32]]
    ) -> npt.NDArray[np.float32]:
        key = (model_id, text)
        with self._lock:
            vec = self._held.pop(key, None)
        if vec is None:
            vec = embed(text)
            vec.setflags(write=False)
        with self._lock:
            self._held.pop(key, None)
            self._keep(key, vec)
        return vec

    def many(
        self,
        model_id: str,
        texts: Sequence[str],
        embed: Callable[[list[str]], npt.NDArray[np.float32]],
    ) -> npt.NDArray[np.float32]:
        """The ``(len(texts), dim)`` rows of ``texts``, in order: the texts not held (each
        distinct one once) in one call of ``embed``. A result of the wrong shape is returned
        as it is, unkept (the caller refuses it)."""
        import numpy as np

        with self._lock:
            held = {t: self._held.pop((model_id, t)) for t in texts if (model_id, t) in self._held}
        missing = [t for t in dict.fromkeys(texts) if t not in held]
        if missing:
            fresh = embed(missing)
            if fresh.ndim != 2 or fresh.shape[0] != len(missing):
                return fresh
            for t, vec in zip(missing, fresh, strict=True):
                vec = np.array(vec, dtype=np.float32)
                vec.setflags(write=False)
                held[t] = vec
        with self._lock:
            for t, vec in held.items():
                self._held.pop((model_id, t), None)
                self._keep((model_id, t), vec)
        return np.stack([held[t] for t in texts])

    def _keep(self, key: tuple[str, str], vec: npt.NDArray[np.float32]) -> None:
        """Hold ``vec`` as the newest (under the lock), dropping the oldest past ``size``."""
        while len(self._held) >= self.size:
            del self._held[next(iter(self._held))]  # the oldest
        self._held[key] = vec  # newest last
