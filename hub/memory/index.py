"""The recall index: FTS5 keywords + sqlite-vec vectors, fused by rank (RRF), then blended.

One apsw database per embedding model (``HOME/recall/<model>.db``; which one recall uses is
decided by the home's model catalog, :func:`live_index`) holds, per item, its metadata row
(``items``), a contentless FTS5 row with the trigram tokenizer (``items_fts``: substring
matching that works for Chinese without a word segmenter) and the item's embedding in a
``vec0`` table (``items_vec``; 512-d for the multilingual default, 384-d for MiniLM; the
model's id and dimension are recorded in ``meta`` and an index is only ever read and written
with that model). Switching the model rebuilds the index first (``hub.memory.reindex``).
:meth:`MemoryIndex.upsert` and :meth:`MemoryIndex.remove` keep the
three in one transaction; a removed item's text and vector — or an item's replaced text —
are gone from the file, not just unlinked (secure_delete; the keyword index is FTS5 in
``secure-delete`` mode, so a row's tokens are taken out of the index segments as it is
deleted — given its text, which ``items`` keeps — instead of merging every segment, 0.55 s
at 100,000 items; freed pages are dropped, the write-ahead log is checkpointed). An index
made before kept its keyword rows as ``contentless_delete`` ones, which only a merge
scrubs: it is rebuilt from ``items`` once, when it is opened.

Search, as in ARCHITECTURE § Memory:

1. two ranked lists of at most 100 items each, ranks from 0. The keyword list: trigram
   phrases OR-ed (English terms lightly stemmed and required at a word start, Chinese runs
   cut at question words into 3-character pieces), items holding more query terms first,
   then bm25; query parts shorter than 3 characters (Chinese two-character words, "tv")
   fall back to a substring scan ranked by how rare the matched parts are, appended after
   the trigram hits. The vector list: exact cosine k-NN — the ``k`` nearest always, deeper
   ranks only at cosine ≥ ``MIN_COSINE`` — over the vectors held in memory, in step with
   ``items_vec`` (:mod:`hub.memory.vector_matrix`);
2. items unused for 30 days are not candidates in default recall (``include_stale`` makes
   them candidates again);
3. ``RRF(x) = Σ 1/(60 + rank)`` over the lists holding x;
4. items whose original is gone (the ``is_live`` hook) are skipped, never back-filled;
5. final order: ``0.65·relevance + 0.20·importance + 0.15·0.95^days_since_last_access``,
   relevance being the RRF score over its maximum (rank 0 in every list);
6. the returned items' last access is set to now.
"""

from __future__ import annotations

import json
import logging
import math
import re
import threading
import unicodedata
from collections.abc import Callable, Collection, Hashable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import apsw

from hub.memory.errors import MemoryStoreError
from hub.memory.sensitivity import Source, check_level, parse_source
from hub.memory.vector_matrix import RecentVectors, VectorMatrix
from protos.clock import now_ms
from storage.private import private_dir, private_file
from storage.sqlite import joined

if TYPE_CHECKING:  # numpy is imported where vectors are made (a large import)
    import numpy as np
    import numpy.typing as npt

    Vectors = npt.NDArray[np.float32]

log = logging.getLogger(__name__)

DB_NAME = "memory_index.db"
"""the one index file of homes made before indexes were kept per model (migrated on start)"""
RECALL_DIR = "recall"
"""``HOME/recall/<embedding model name>.db``: the index built with that model"""
BUILDING_SUFFIX = ".building"
RRF_K = 60
LIST_LIMIT = 100
MIN_COSINE = 0.25
"""the vector list's floor below its first k: about the 95th percentile of cosine similarity
between unrelated English sentences under MiniLM (mean 0.08, sd 0.10). Without it the list is
always 100 deep, and on a small memory that is most of it: every keyword hit would also be a
vector hit, and RRF would rank any item in both lists above the best vector-only answer."""
FTS_CANDIDATES = 4 * LIST_LIMIT
"""trigram hits read to re-check terms at word starts before the keyword list is cut"""
PARALLEL_ROWS = 20_000
"""vectors from which a search runs the vector pass in a thread of its own while the
keyword query runs (both release the GIL: numpy's product, SQLite's steps); below it the
hand-off costs more than it saves"""
WINDOW_NEAREST = 10
TEXTS_HELD = 256
"""the last texts written whose embeddings are kept: a repeated reply is not embedded again
(256 × 512 floats, half a megabyte)"""
"""in a time window, the nearest this many are in the vector list whatever their cosine"""
W_RELEVANCE, W_IMPORTANCE, W_RECENCY = 0.65, 0.20, 0.15
DECAY_PER_DAY = 0.95
STALE_DAYS = 30
DAY_MS = 86_400_000
DEFAULT_IMPORTANCE = 0.5
MMAP_BYTES = 256 * 2**20


class RecallError(MemoryStoreError):
    """A recall-index problem (bad argument, index built by another model)."""


class Embedder(Protocol):
    """What the index needs from a text-embedding runner (``models.embed.TextEmbedder``)."""

    @property
    def dim(self) -> int: ...

    @property
    def model_id(self) -> str: ...

    def embed(self, texts: Sequence[str]) -> Vectors: ...


LiveFilter = Callable[[list[str]], Collection[str]]
SkipFilter = Callable[[list[str]], Collection[str]]
"""candidate item ids → those one search leaves out (``search(skip=…)``)"""
"""given item ids, the subset whose originals still exist"""


# ---------------------------------------------------------------- ranking arithmetic
K = TypeVar("K", bound=Hashable)


def rrf(lists: Sequence[Sequence[K]], k: int = RRF_K) -> dict[K, float]:
    """Reciprocal-rank fusion: ``Σ 1/(k + rank)`` over the lists holding each id (ranks from 0)."""
    scores: dict[K, float] = {}
    for ranked in lists:
        for rank, item in enumerate(ranked):
            scores[item] = scores.get(item, 0.0) + 1.0 / (k + rank)
    return scores


def recency(days_since_access: float) -> float:
    """``0.95^days`` (1.0 for an item used now)."""
    return float(DECAY_PER_DAY ** max(0.0, days_since_access))


def blend(relevance: float, importance: float, days_since_access: float) -> float:
    """The final score: 0.65 relevance + 0.20 importance + 0.15 recency (all in [0, 1])."""
    return (
        W_RELEVANCE * relevance
        + W_IMPORTANCE * min(1.0, max(0.0, importance))
        + W_RECENCY * recency(days_since_access)
    )


# ---------------------------------------------------------------- query terms
_WORD_RE = re.compile(
    r"[0-9a-z\u00c0-\u024f]+"
    r"|[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af]+"
)
_CJK_RE = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af]")
STOPWORDS = frozenset(
    """a about after again all also am an and any are as at be been before being but by can
    could did do does doing done for from get got had has have having he her here hers him
    his how i if in into is it its just know like me mine more most my no nor not now of off
    on once one only or our ours out over own remember same she should so some such tell
    than that the their theirs them then there these they this those to too under until up
    us very was we were what when where which while who whom why will with would you your
    yours""".split()
)
CJK_SPLIT = re.compile(
    "|".join(
        sorted(
            """为什么 什么 怎么 怎样 哪里 哪儿 哪个 哪些 哪天 几点 几号 何时
            多少 有没有 是不是 还是 一下 请问
            吗 呢 吧 的 了 是 呀 啊 么 和 与 及 或""".split(),
            key=len,
            reverse=True,
        )
    )
)
"""Chinese question words and particles: a query's Chinese runs are cut at these"""
CJK_STOP = frozenset("我们 你们 他们 她们 一个 这个 那个 这些 那些 时候 知道 告诉 记得".split())
"""bigrams too common to search for"""


def _stem(word: str) -> str:
    """A light English stem, so a trigram phrase matches inflected forms as a substring."""
    w = word
    if w.endswith("ies") and len(w) > 4:
        w = w[:-3] + "y"
    elif w.endswith(("sses", "xes", "ches", "shes")):
        w = w[:-2]
    elif w.endswith("s") and not w.endswith(("ss", "us", "is")) and len(w) > 3:
        w = w[:-1]
    elif w.endswith("ing") and len(w) >= 6:
        w = w[:-3]
    elif w.endswith("ed") and len(w) >= 5:
        w = w[:-2]
    if len(w) >= 7:
        w = w[:-2]
    return w


def query_terms(query: str) -> tuple[list[str], list[str]]:
    """``(trigram terms, short terms)`` of a query.

    Trigram terms (≥ 3 characters) go to FTS5 ``MATCH`` as phrases, OR-ed. Short terms are
    substrings of 1–2 characters that the trigram index cannot match: the bigrams of Chinese
    (Japanese, Korean) runs, and — only when the query has nothing longer — short words.
    """
    long_terms: list[str] = []
    short_terms: list[str] = []
    latin_short: list[str] = []

    def add(bucket: list[str], term: str) -> None:
        if term not in bucket:
            bucket.append(term)

    for run in _WORD_RE.findall(query.lower()):
        if _CJK_RE.match(run):
            for part in CJK_SPLIT.split(run):
                for i in range(len(part) - 2):
                    add(long_terms, part[i : i + 3])
                for i in range(len(part) - 1):
                    if part[i : i + 2] not in CJK_STOP:
                        add(short_terms, part[i : i + 2])
                if len(part) == 1:
                    add(latin_short, part)  # a lone character: only if nothing else
        elif run in STOPWORDS:
            continue
        elif len(run) >= 3:
            stem = _stem(run)
            add(long_terms, stem if len(stem) >= 3 else run)
        else:
            add(latin_short, run)
    if not long_terms and not short_terms:
        short_terms = latin_short
    return long_terms, short_terms


@lru_cache(maxsize=16384)  # the same candidates' texts come back query after query
def _fold(text: str) -> str:
    """Lower case without diacritics (as the trigram tokenizer's ``remove_diacritics``)."""
    lowered = text.lower()
    if lowered.isascii():  # nothing to decompose
        return lowered
    decomposed = unicodedata.normalize("NFKD", lowered)
    return "".join(c for c in decomposed if not unicodedata.combining(c))


def _term_pattern(term: str) -> re.Pattern[str]:
    """A query term as found in folded text: English at a word start, CJK anywhere."""
    if _CJK_RE.match(term):
        return re.compile(re.escape(term))
    return re.compile(r"(?<![0-9a-z])" + re.escape(term))


def _fts_phrase(term: str) -> str:
    return '"' + term.replace('"', '""') + '"'


def _like_pattern(term: str) -> str:
    return "%" + term.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


# ---------------------------------------------------------------- results
@dataclass(frozen=True)
class Hit:
    """One recalled item with the numbers behind its place."""

    item_id: str
    text: str
    score: float
    relevance: float
    fts_rank: int | None
    vec_rank: int | None
    importance: float
    sensitivity: str
    sources: tuple[Source, ...]
    created_ms: int
    last_access_ms: int
    stale: bool

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.item_id,
            "text": self.text,
            "score": round(self.score, 6),
            "relevance": round(self.relevance, 6),
            "fts_rank": self.fts_rank,
            "vec_rank": self.vec_rank,
            "importance": self.importance,
            "sensitivity": self.sensitivity,
            "sources": [list(s) for s in self.sources],
            "created_ms": self.created_ms,
            "last_access_ms": self.last_access_ms,
            "stale": self.stale,
        }


@dataclass(frozen=True)
class Entry:
    """One item to index (``upsert_many``)."""

    item_id: str
    text: str
    sensitivity: str
    sources: tuple[Source, ...] | list[Source]
    importance: float = DEFAULT_IMPORTANCE
    created_ms: int = 0
    last_access_ms: int | None = None
    """a new item's last use (default: ``created_ms``); kept when an index is rebuilt"""


_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS items(
    rid INTEGER PRIMARY KEY,
    item_id TEXT NOT NULL UNIQUE,
    text TEXT NOT NULL,
    sensitivity TEXT NOT NULL,
    sources TEXT NOT NULL,
    importance REAL NOT NULL,
    created_ms INTEGER NOT NULL,
    last_access_ms INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS items_last_access ON items(last_access_ms);
CREATE INDEX IF NOT EXISTS items_times ON items(rid, last_access_ms, created_ms);
CREATE VIRTUAL TABLE IF NOT EXISTS items_fts USING fts5(
    text, content='', tokenize='trigram remove_diacritics 1'
);
"""
_OLD_FTS = "contentless_delete"
"""in the ``items_fts`` definition of an index made before ``secure-delete`` was used"""


def _delete_keywords(cur: apsw.Cursor, rid: int, text: str) -> None:
    """Take item ``rid``'s tokens out of the contentless keyword index: FTS5's ``delete``
    needs the text the row was indexed with (``items.text``); in ``secure-delete`` mode they
    leave the index's segments at once."""
    cur.execute("INSERT INTO items_fts(items_fts, rowid, text) VALUES('delete', ?, ?)", (rid, text))


class MemoryIndex:
    """The recall index over one database file. Implements ``hub.memory.index_api.IndexHook``.

    Thread-safe (one lock around the connection). The embedder is loaded on first use, so
    opening the index to remove items never loads the model.
    """

    def __init__(
        self,
        path: Path | str,
        *,
        embedder: Embedder | None = None,
        clock: Callable[[], int] = now_ms,
        is_live: LiveFilter | None = None,
        dim: int | None = None,
        model: str | None = None,
    ) -> None:
        self.path = Path(path)
        self._embedder = embedder
        self._model_name = model
        """the catalog name of the model a new file is made for (default: the default)"""
        self._clock = clock
        self.is_live = is_live
        self._lock = threading.RLock()
        self._vector_pass: ThreadPoolExecutor | None = None
        """the thread of a large index's vector pass (:data:`PARALLEL_ROWS`), made on first
        use, stopped by :meth:`close`"""
        self._home: Path | None = None
        self._queries = RecentVectors()
        self._texts = RecentVectors(size=TEXTS_HELD)
        """set by :meth:`for_home`: the index follows the home's switch of embedding model"""
        self._open(dim)

    def _open(self, dim: int | None) -> None:
        private_dir(self.path.parent)
        private_file(self.path)  # and so its -wal/-shm: SQLite copies the file's mode
        self._conn = apsw.Connection(str(self.path))
        self._conn.setbusytimeout(10_000)
        self._load_vec()
        self._conn.execute("PRAGMA auto_vacuum=INCREMENTAL")  # only takes on a new file
        self._conn.execute("PRAGMA journal_mode=WAL").fetchall()
        self._conn.execute("PRAGMA secure_delete=ON").fetchall()
        self._conn.execute("PRAGMA synchronous=NORMAL")
        # vector k-NN reads every vector chunk: mapped pages halve it against the page cache
        self._conn.execute(f"PRAGMA mmap_size={MMAP_BYTES}").fetchall()
        try:
            self._create(dim)
        except BaseException:
            self._conn.close()
            raise
        self._matrix = VectorMatrix(self.dim)
        """``items_vec`` in memory for k-NN (:mod:`hub.memory.vector_matrix`), loaded on
        the first search"""

    def _create(self, dim: int | None) -> None:
        with joined(self._conn):  # the write lock first: another process may open it too
            old = self._conn.execute(
                "SELECT sql FROM sqlite_master WHERE name = 'items_fts'"
            ).fetchone()
            rebuild = old is not None and _OLD_FTS in str(old[0])
            if rebuild:
                self._conn.execute("DROP TABLE items_fts")  # its pages zeroed (secure_delete)
            self._conn.execute(_SCHEMA)
            secure = self._conn.execute(
                "SELECT 1 FROM items_fts_config WHERE k = 'secure-delete' AND v = 1"
            ).fetchone()
            if secure is None:
                self._conn.execute(
                    "INSERT INTO items_fts(items_fts, rank) VALUES('secure-delete', 1)"
                )
            if rebuild:
                log.info("recall index %s: keyword index rebuilt for secure deletes", self.path)
                self._conn.execute("INSERT INTO items_fts(rowid, text) SELECT rid, text FROM items")
            self.dim, self.model_id = self._check_model(dim)
            self._conn.execute(
                "CREATE VIRTUAL TABLE IF NOT EXISTS items_vec USING vec0("
                f"embedding float[{self.dim}] distance_metric=cosine, last_access_ms integer)"
            )

    @classmethod
    def for_home(cls, home: Path | str, **kwargs: Any) -> MemoryIndex:
        """The index recall uses now in ``home`` (:func:`live_index`). It follows a switch
        of the embedding model: once the old file is gone it reopens the new one."""
        home = Path(home)
        embedder = kwargs.get("embedder")
        path, _ = live_index(home)
        if embedder is not None and not path.exists() and not older_indexes(home, path):
            from models.embed import by_model_id

            info = by_model_id(embedder.model_id)
            path = index_path(home, info.name if info is not None else embedder.model_id)
        ix = cls(path, **kwargs)
        ix._home = home
        return ix

    def _follow(self) -> None:
        """Reopen the home's live index if this one was replaced (a model switch)."""
        if self._home is None or self.path.exists():
            return
        path, _ = live_index(self._home)
        log.info("recall index %s was replaced by %s: reopening", self.path, path)
        self._conn.close()
        self.path = path
        embedder, self._embedder = self._embedder, None
        self._open(None)
        if embedder is not None and embedder.model_id == self.model_id:
            self._embedder = embedder  # else loaded again for the new file's model

    def entries(self) -> Iterator[Entry]:
        """Every item as an :class:`Entry` (with its last access), in insertion order."""
        with self._lock:
            rows = self._conn.execute(
                "SELECT item_id, text, sensitivity, sources, importance, created_ms,"
                " last_access_ms FROM items ORDER BY rid"
            ).fetchall()
        for item_id, text, sensitivity, sources, importance, created, last_access in rows:
            parsed = [parse_source(s) for s in json.loads(str(sources))]
            yield Entry(
                str(item_id),
                str(text),
                str(sensitivity),
                tuple(s for s in parsed if s is not None),
                float(str(importance)),
                int(str(created)),
                int(str(last_access)),
            )

    def _load_vec(self) -> None:
        import sqlite_vec

        self._conn.enable_load_extension(True)
        self._conn.load_extension(sqlite_vec.loadable_path())
        self._conn.enable_load_extension(False)

    def _check_model(self, dim: int | None) -> tuple[int, str]:
        row = {str(k): str(v) for k, v in self._conn.execute("SELECT key, value FROM meta")}
        if "dim" in row:
            have_dim, have_model = int(row["dim"]), str(row["model"])
            if self._embedder is not None and (
                self._embedder.dim != have_dim or self._embedder.model_id != have_model
            ):
                raise RecallError(
                    "recall.invalid",
                    field="model",
                    reason=f"{self.path} was built with {have_model} ({have_dim}-d), "
                    f"not {self._embedder.model_id}",
                )
            return have_dim, have_model
        if self._embedder is not None:
            new_dim, new_model = self._embedder.dim, self._embedder.model_id
        else:
            from models.embed import DEFAULT_MODEL, model_info

            info = model_info(self._model_name or DEFAULT_MODEL)
            new_dim, new_model = dim or info.dim, info.model_id
        self._conn.executemany(
            "INSERT INTO meta(key, value) VALUES(?, ?)",
            [("dim", str(new_dim)), ("model", new_model)],
        )
        return new_dim, new_model

    @property
    def embedder(self) -> Embedder:
        if self._embedder is None:
            from models.embed import by_model_id, shared_embedder

            info = by_model_id(self.model_id)
            if info is None:
                raise RecallError(
                    "recall.invalid",
                    field="model",
                    reason=f"{self.path} was built with {self.model_id}, which has no runner here",
                )
            # an index is read with the model that built it: vectors of two models never mix
            self._embedder = shared_embedder(info.name)
        return self._embedder

    def close(self) -> None:
        with self._lock:
            self._conn.close()
            pool, self._vector_pass = self._vector_pass, None
        if pool is not None:
            pool.shutdown(wait=True)

    def __enter__(self) -> MemoryIndex:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------ writes
    def upsert(
        self,
        item_id: str,
        text: str,
        *,
        sensitivity: str,
        sources: list[tuple[str, str]],
        importance: float,
        created_ms: int,
    ) -> None:
        """Insert or replace one item's text, embedding and metadata (one transaction)."""
        self.upsert_many([Entry(item_id, text, sensitivity, list(sources), importance, created_ms)])

    def upsert_many(self, entries: Sequence[Entry], vectors: Vectors | None = None) -> None:
        """Insert or replace several items in one transaction, embedding them in batches.

        ``vectors`` (unit rows, same order) skips the embedder: for re-indexing and benches.
        A re-indexed item keeps its last access time. A text that comes more than once (the
        timeline's replies: "Done.", "I didn't catch that") is embedded once.
        """
        if not entries:
            return
        for e in entries:
            self._validate(e)
        import numpy as np

        with self._lock:
            self._follow()
            if vectors is None:
                vectors = self._embed([e.text for e in entries])
            if vectors.shape != (len(entries), self.dim):
                raise RecallError(
                    "recall.invalid",
                    field="vectors",
                    reason=f"shape {vectors.shape} for {self.dim}-d",
                )
            vectors = np.ascontiguousarray(vectors, dtype=np.float32)
            with self._writing():
                replaced_text = self._write(entries, vectors)
            if replaced_text:
                self.drop_freed_pages()

    def _embed(self, texts: list[str]) -> Vectors:
        """The embedder's vectors for ``texts``: each distinct text embedded once, and not
        at all if it was among the last :data:`TEXTS_HELD` written (replies repeat)."""
        embedder = self.embedder
        return self._texts.many(embedder.model_id, texts, embedder.embed)

    def _write(self, entries: Sequence[Entry], vectors: Vectors) -> bool:
        """Write rows inside the caller's transaction; True if an item's text was replaced."""
        replaced_text = False
        cur = self._conn.cursor()
        for e, vec in zip(entries, vectors, strict=True):
            row = cur.execute(
                "SELECT rid, last_access_ms, text FROM items WHERE item_id = ?", (e.item_id,)
            ).fetchone()
            old_text: str | None = None
            sources_json = json.dumps([list(s) for s in e.sources], ensure_ascii=False)
            if row is None:
                last_access = e.created_ms if e.last_access_ms is None else e.last_access_ms
                cur.execute(
                    "INSERT INTO items(item_id, text, sensitivity, sources, importance,"
                    " created_ms, last_access_ms) VALUES(?, ?, ?, ?, ?, ?, ?)",
                    (
                        e.item_id,
                        e.text,
                        e.sensitivity,
                        sources_json,
                        float(e.importance),
                        e.created_ms,
                        last_access,
                    ),
                )
                rid = self._conn.last_insert_rowid()
            else:
                rid, last_access = int(row[0]), int(row[1])
                old_text = str(row[2])
                replaced_text = replaced_text or old_text != e.text
                cur.execute(
                    "UPDATE items SET text = ?, sensitivity = ?, sources = ?, importance = ?,"
                    " created_ms = ? WHERE rid = ?",
                    (
                        e.text,
                        e.sensitivity,
                        sources_json,
                        float(e.importance),
                        e.created_ms,
                        rid,
                    ),
                )
                if old_text != e.text:  # the old tokens out of the segments (secure-delete)
                    _delete_keywords(cur, rid, old_text)
                cur.execute("DELETE FROM items_vec WHERE rowid = ?", (rid,))
            if old_text != e.text:  # new, or its text replaced
                cur.execute("INSERT INTO items_fts(rowid, text) VALUES(?, ?)", (rid, e.text))
            cur.execute(
                "INSERT INTO items_vec(rowid, embedding, last_access_ms) VALUES(?, ?, ?)",
                (rid, vec.tobytes(), last_access),
            )
            self._matrix.upsert(rid, vec, last_access)
        return replaced_text

    @staticmethod
    def _validate(e: Entry) -> None:
        if not isinstance(e.item_id, str) or not e.item_id:
            raise RecallError(
                "recall.invalid", field="item_id", reason="must be a non-empty string"
            )
        if not isinstance(e.text, str) or not e.text.strip():
            raise RecallError("recall.invalid", field="text", reason=f"{e.item_id}: empty text")
        if check_level(e.sensitivity) is None:
            raise RecallError(
                "recall.invalid", field="sensitivity", reason=f"{e.item_id}: {e.sensitivity!r}"
            )
        for s in e.sources:
            if parse_source(s) is None:
                raise RecallError("recall.invalid", field="sources", reason=f"{e.item_id}: {s!r}")
        if not math.isfinite(float(e.importance)):
            raise RecallError(
                "recall.invalid", field="importance", reason=f"{e.item_id}: not finite"
            )

    def remove(self, item_ids: list[str]) -> list[str]:
        """Delete these items' FTS rows, vectors and metadata; return the ids actually removed.

        The bytes go too: the item's tokens are taken out of the keyword index's segments
        (FTS5 ``secure-delete``, given the text ``items`` keeps), freed pages are dropped
        from the file, and the write-ahead log is checkpointed and truncated.
        """
        removed: list[str] = []
        with self._lock:
            self._follow()
            with self._writing():
                cur = self._conn.cursor()
                for item_id in dict.fromkeys(item_ids):
                    row = cur.execute(
                        "SELECT rid, text FROM items WHERE item_id = ?", (item_id,)
                    ).fetchone()
                    if row is None:
                        continue
                    rid = int(row[0])
                    _delete_keywords(cur, rid, str(row[1]))
                    cur.execute("DELETE FROM items_vec WHERE rowid = ?", (rid,))
                    cur.execute("DELETE FROM items WHERE rid = ?", (rid,))
                    self._matrix.remove(rid)
                    removed.append(item_id)
            if removed:
                self.drop_freed_pages()
        return removed

    def drop_freed_pages(self) -> None:
        self._conn.execute("PRAGMA incremental_vacuum").fetchall()
        self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()

    # ------------------------------------------------------------ reads
    def count(self, *, include_stale: bool = True) -> int:
        with self._lock:
            if include_stale:
                return self._scalar("SELECT count(*) FROM items")
            return self._scalar(
                "SELECT count(*) FROM items WHERE last_access_ms >= ?", (self._cutoff(),)
            )

    def get(self, item_id: str) -> Hit | None:
        with self._lock:
            rows = self._rows_by_id([item_id])
        row = rows.get(item_id)
        return None if row is None else self._hit(row, 0.0, 0.0, None, None)

    def ids(self) -> Iterator[str]:
        with self._lock:
            rows = self._conn.execute("SELECT item_id FROM items ORDER BY rid").fetchall()
        for (item_id,) in rows:
            yield str(item_id)

    def search(
        self,
        query: str,
        k: int = 10,
        *,
        include_stale: bool = False,
        touch: bool = True,
        query_vector: Vectors | None = None,
        created: tuple[int, int] | None = None,
        skip: SkipFilter | None = None,
    ) -> list[Hit]:
        """The ``k`` best items for ``query``: keyword and vector lists fused, then blended.

        ``created`` ``(start_ms, end_ms)``: only items created in ``[start, end)`` are
        candidates (a question about "last Tuesday"); the vector list is then exact over
        those items, so an old item is not crowded out by newer neighbours. ``skip``: given
        the candidates' item ids, those to leave out — the search is as if they were not
        in the index (they take no rank in either list, so they crowd nothing out, and
        are neither returned nor touched).
        """
        self._check_k(k)
        with self._lock:
            self._follow()
            qvec = self._query_vector(query, query_vector)
            cutoff = None if include_stale else self._cutoff()
            drop = None if skip is None else self._dropper(skip)
            nearest = self._nearest_soon(qvec, cutoff) if created is None else None
            try:
                fts = self._fts_list(query, cutoff, created)  # meanwhile, the vector pass
                if drop is not None:
                    gone = drop(fts)
                    fts = [rid for rid in fts if rid not in gone]
                vec = (
                    self._vec_list(qvec, cutoff, k, drop, nearest=nearest)
                    if created is None
                    else self._vec_window(qvec, cutoff, created, drop)
                )
            finally:
                if nearest is not None:  # it reads the matrix: done before the lock goes
                    wait([nearest])
            fused = rrf([fts, vec])
            rows = self._rows_by_rid(list(fused))
            live = self._live({rid: row[1] for rid, row in rows.items()})
            fts_rank = {rid: i for i, rid in enumerate(fts)}
            vec_rank = {rid: i for i, rid in enumerate(vec)}
            max_rrf = 2.0 / RRF_K
            now = self._clock()
            ranked = []  # the blended order first: Hits are made for the k kept only
            for rid, score in fused.items():
                if rid in live:
                    row = rows[rid]
                    relevance = score / max_rrf
                    days = max(0.0, (now - int(row[7])) / DAY_MS)
                    final = blend(relevance, float(row[5]), days)
                    ranked.append((-final, -relevance, str(row[1]), rid))
            ranked.sort()
            hits = [
                self._hit(rows[rid], None, -neg_rel, fts_rank.get(rid), vec_rank.get(rid), now=now)
                for _, neg_rel, _, rid in ranked[:k]
            ]
            if touch and hits:
                self._touch([h.item_id for h in hits], now)
        return hits

    def search_fts(
        self,
        query: str,
        k: int = 10,
        *,
        include_stale: bool = False,
        created: tuple[int, int] | None = None,
    ) -> list[Hit]:
        """The keyword list alone (its own order; no blending, no touch); ``created`` as
        in :meth:`search`."""
        self._check_k(k)
        with self._lock:
            ranked = self._fts_list(query, None if include_stale else self._cutoff(), created)
            return self._single(ranked, k, fts=True)

    def search_vec(
        self,
        query: str,
        k: int = 10,
        *,
        include_stale: bool = False,
        query_vector: Vectors | None = None,
    ) -> list[Hit]:
        """The vector list alone (its own order; no blending, no touch)."""
        self._check_k(k)
        qvec = self._query_vector(query, query_vector)
        with self._lock:
            ranked = self._vec_list(qvec, None if include_stale else self._cutoff(), k)
            return self._single(ranked, k, fts=False)

    # ------------------------------------------------------------ internals
    def _scalar(self, sql: str, args: tuple[Any, ...] = ()) -> int:
        row = self._conn.execute(sql, args).fetchone()
        return int(row[0]) if row is not None else 0

    @staticmethod
    def _check_k(k: int) -> None:
        if not isinstance(k, int) or not 1 <= k <= LIST_LIMIT:
            raise RecallError("recall.invalid", field="k", reason=f"{k!r}: must be 1..{LIST_LIMIT}")

    def _query_vector(self, query: str, given: Vectors | None) -> Vectors:
        import numpy as np

        if given is not None:
            return np.ascontiguousarray(given, dtype=np.float32).reshape(self.dim)
        embedder = self.embedder
        return self._queries.get(
            embedder.model_id,
            query,
            lambda text: np.ascontiguousarray(embedder.embed([text])[0], dtype=np.float32),
        )

    def _cutoff(self) -> int:
        return self._clock() - STALE_DAYS * DAY_MS

    def _fts_list(
        self, query: str, cutoff: int | None, created: tuple[int, int] | None = None
    ) -> list[int]:
        """The keyword list: items holding the most query terms first, then by bm25.

        The trigram index finds substrings; an English term must also start a word in the
        item ("eat" matches "eats", not "great"), as a stemmed word index would behave.
        """
        long_terms, short_terms = query_terms(query)
        floor = cutoff if cutoff is not None else -(2**62)
        since, until = created if created is not None else (-(2**62), 2**62)
        ranked: list[int] = []
        if long_terms:
            expr = " OR ".join(_fts_phrase(t) for t in long_terms)
            # the filter reads the narrow items_times index, not the rows; only the kept
            # candidates' texts are read
            rows = self._conn.execute(
                "SELECT f.rid, items.text FROM (SELECT items_fts.rowid AS rid,"
                " bm25(items_fts) AS score FROM items_fts"
                " JOIN items AS t INDEXED BY items_times ON t.rid = items_fts.rowid"
                " WHERE items_fts MATCH ? AND t.last_access_ms >= ?"
                " AND t.created_ms >= ? AND t.created_ms < ?"
                " ORDER BY score, rid DESC LIMIT ?) AS f"
                " JOIN items ON items.rid = f.rid ORDER BY f.score, f.rid DESC",
                (expr, floor, since, until, FTS_CANDIDATES),
            ).fetchall()
            patterns = [_term_pattern(t) for t in long_terms]
            scored: list[tuple[int, int, int]] = []
            for order, (rid, text) in enumerate(rows):
                folded = _fold(str(text))
                matched = sum(1 for pattern in patterns if pattern.search(folded))
                if matched:
                    scored.append((-matched, order, int(str(rid))))
            scored.sort()
            ranked = [rid for _, _, rid in scored[:LIST_LIMIT]]
        if short_terms and len(ranked) < LIST_LIMIT:
            seen = set(ranked)
            extra = [
                rid
                for rid in self._substring_list(short_terms, floor, (since, until))
                if rid not in seen
            ]
            ranked.extend(extra[: LIST_LIMIT - len(ranked)])
        return ranked

    def _substring_list(
        self, terms: list[str], floor: int, created: tuple[int, int] = (-(2**62), 2**62)
    ) -> list[int]:
        """Items containing any of ``terms`` (1–2 characters), rarest matches first."""
        where = " OR ".join("text LIKE ? ESCAPE '\\'" for _ in terms)
        rows = self._conn.execute(
            "SELECT rid, text FROM items WHERE last_access_ms >= ?"
            f" AND created_ms >= ? AND created_ms < ? AND ({where})",
            (floor, *created, *(_like_pattern(t) for t in terms)),
        ).fetchall()
        if not rows:
            return []
        total = self._scalar("SELECT count(*) FROM items WHERE last_access_ms >= ?", (floor,))
        lowered = [(int(str(rid)), str(text).lower()) for rid, text in rows]
        df = {t: sum(1 for _, text in lowered if t in text) for t in terms}
        idf = {t: math.log(1.0 + total / df[t]) for t in terms if df[t]}
        scored = [(sum(idf[t] for t in idf if t in text), rid) for rid, text in lowered]
        scored.sort(key=lambda s: (-s[0], -s[1]))
        return [rid for _, rid in scored[:LIST_LIMIT]]

    def _dropper(self, skip: SkipFilter) -> Callable[[list[int]], set[int]]:
        """``skip`` over rids (the rids of the item ids it leaves out), each rid asked once."""
        asked: dict[int, bool] = {}

        def drop(rids: list[int]) -> set[int]:
            new = [rid for rid in rids if rid not in asked]
            if new:
                ids = {rid: str(row[1]) for rid, row in self._rows_by_rid(new).items()}
                gone = set(skip(list(ids.values())))
                asked.update({rid: ids.get(rid) in gone for rid in new})
            return {rid for rid in rids if asked[rid]}

        return drop

    def _current_matrix(self) -> VectorMatrix:
        """The in-memory matrix, loaded again if another connection committed since."""
        matrix = self._matrix
        version = self._scalar("PRAGMA data_version")  # changes on another connection's commit
        if not matrix.loaded or matrix.version != version:
            matrix.load(
                self._conn.execute("SELECT rowid, embedding, last_access_ms FROM items_vec")
            )
            matrix.version = version
        return matrix

    def _nearest_soon(self, qvec: Vectors, cutoff: int | None) -> Future[list[tuple[int, float]]]:
        """The matrix's :data:`LIST_LIMIT` nearest: for a matrix of :data:`PARALLEL_ROWS` rows
        or more computed in the vector-pass thread while the caller goes on (it holds the
        lock, so the matrix does not change meanwhile); below that, computed here."""
        matrix = self._current_matrix()
        if len(matrix) >= PARALLEL_ROWS:
            if self._vector_pass is None:
                self._vector_pass = ThreadPoolExecutor(1, thread_name_prefix="recall-vectors")
            return self._vector_pass.submit(matrix.nearest, qvec, LIST_LIMIT, cutoff)
        done: Future[list[tuple[int, float]]] = Future()
        done.set_result(matrix.nearest(qvec, LIST_LIMIT, cutoff))
        return done

    def _vec_list(
        self,
        qvec: Vectors,
        cutoff: int | None,
        k: int,
        drop: Callable[[list[int]], set[int]] | None = None,
        *,
        nearest: Future[list[tuple[int, float]]] | None = None,
    ) -> list[int]:
        """The vector list: nearest by cosine, at most 100 (less those ``drop`` leaves out).

        The ``k`` nearest are always in it (what a vector-only search answers); deeper ranks
        only at cosine ≥ ``MIN_COSINE``. ``nearest``: the matrix's answer, under way
        (:meth:`_nearest_soon`).
        """
        max_distance = 1.0 - MIN_COSINE
        if nearest is None:
            near = self._current_matrix().nearest(qvec, LIST_LIMIT, cutoff)
        else:
            near = nearest.result()
        if drop is not None:
            gone = drop([int(rid) for rid, _ in near])
            near = [(rid, d) for rid, d in near if int(rid) not in gone]
        return [
            rid for rank, (rid, distance) in enumerate(near) if rank < k or distance <= max_distance
        ]

    def _vec_window(
        self,
        qvec: Vectors,
        cutoff: int | None,
        created: tuple[int, int],
        drop: Callable[[list[int]], set[int]] | None = None,
    ) -> list[int]:
        """The vector list over the items created in ``[start, end)``: exact cosine over
        them, the first few always, deeper ranks at cosine ≥ ``MIN_COSINE`` (less those
        ``drop`` leaves out)."""
        floor = cutoff if cutoff is not None else -(2**62)
        rows = self._conn.execute(
            "SELECT v.rowid, vec_distance_cosine(v.embedding, ?) AS d FROM items_vec v"
            " WHERE v.rowid IN (SELECT rid FROM items WHERE created_ms >= ? AND created_ms < ?"
            " AND last_access_ms >= ?) ORDER BY d LIMIT ?",
            (qvec.tobytes(), *created, floor, LIST_LIMIT),
        ).fetchall()
        max_distance = 1.0 - MIN_COSINE
        near = [(int(str(rid)), float(str(distance))) for rid, distance in rows]
        if drop is not None:
            gone = drop([rid for rid, _ in near])
            near = [(rid, d) for rid, d in near if rid not in gone]
        return [
            rid
            for rank, (rid, distance) in enumerate(near)
            if rank < WINDOW_NEAREST or distance <= max_distance
        ]

    _COLUMNS = "rid, item_id, text, sensitivity, sources, importance, created_ms, last_access_ms"

    def _rows_by_rid(self, rids: list[int]) -> dict[int, tuple[Any, ...]]:
        out: dict[int, tuple[Any, ...]] = {}
        for start in range(0, len(rids), 500):
            chunk = rids[start : start + 500]
            marks = ",".join("?" * len(chunk))
            for row in self._conn.execute(
                f"SELECT {self._COLUMNS} FROM items WHERE rid IN ({marks})", chunk
            ):
                out[int(row[0])] = tuple(row)
        return out

    def _rows_by_id(self, ids: list[str]) -> dict[str, tuple[Any, ...]]:
        marks = ",".join("?" * len(ids))
        return {
            str(row[1]): tuple(row)
            for row in self._conn.execute(
                f"SELECT {self._COLUMNS} FROM items WHERE item_id IN ({marks})", ids
            )
        }

    def _live(self, ids_by_rid: dict[int, str]) -> set[int]:
        """The rids whose originals exist (a rid without a metadata row is never here)."""
        if self.is_live is None:
            return set(ids_by_rid)
        live_ids = set(self.is_live(list(ids_by_rid.values())))
        return {rid for rid, item_id in ids_by_rid.items() if item_id in live_ids}

    def _single(self, ranked: list[int], k: int, *, fts: bool) -> list[Hit]:
        rows = self._rows_by_rid(ranked)
        live = self._live({rid: row[1] for rid, row in rows.items()})
        hits: list[Hit] = []
        for rank, rid in enumerate(ranked):
            if rid not in live:
                continue  # skipped, not back-filled: the list keeps its length
            score = 1.0 / (RRF_K + rank)
            hits.append(
                self._hit(
                    rows[rid],
                    score,
                    score * RRF_K,
                    rank if fts else None,
                    None if fts else rank,
                )
            )
        return hits[:k]

    def _hit(
        self,
        row: tuple[Any, ...],
        score: float | None,
        relevance: float,
        fts_rank: int | None,
        vec_rank: int | None,
        *,
        now: int | None = None,
    ) -> Hit:
        _, item_id, text, sensitivity, sources, importance, created, last_access = row
        now = self._clock() if now is None else now
        days = max(0.0, (now - int(last_access)) / DAY_MS)
        parsed = [parse_source(s) for s in json.loads(sources)]
        return Hit(
            item_id=str(item_id),
            text=str(text),
            score=blend(relevance, float(importance), days) if score is None else score,
            relevance=relevance,
            fts_rank=fts_rank,
            vec_rank=vec_rank,
            importance=float(importance),
            sensitivity=str(sensitivity),
            sources=tuple(s for s in parsed if s is not None),
            created_ms=int(created),
            last_access_ms=int(last_access),
            stale=int(last_access) < now - STALE_DAYS * DAY_MS,
        )

    def _touch(self, item_ids: list[str], now: int) -> None:
        with self._writing():
            rows = self._rows_by_id(item_ids)
            for row in rows.values():
                self._conn.execute(
                    "UPDATE items SET last_access_ms = ? WHERE rid = ?", (now, row[0])
                )
                self._conn.execute(
                    "UPDATE items_vec SET last_access_ms = ? WHERE rowid = ?", (now, row[0])
                )
                self._matrix.touch(int(row[0]), now)

    @contextmanager
    def _writing(self) -> Iterator[None]:
        """One transaction, holding the write lock from its start (``BEGIN IMMEDIATE``: the
        hub and the memory package write the same file, and a transaction that reads first
        could not take the lock once the other had committed: ``database is locked`` at
        once, the busy timeout notwithstanding); if it fails the in-memory vectors are
        reloaded on next use."""
        try:
            with joined(self._conn):
                yield
        except BaseException:
            self._matrix.invalidate()
            raise


# ---------------------------------------------------------------- files per model
def index_path(home: Path, model_name: str) -> Path:
    """Where the index built with the embedding model ``model_name`` lives."""
    return home / RECALL_DIR / f"{model_name}.db"


def selected_model(home: Path) -> str:
    """The embedding model the home's catalog selects (the built-in default until a
    switch)."""
    from models.catalog import Catalog

    return Catalog(home / "models").selection("embed")[0]


def older_indexes(home: Path, keep: Path) -> list[Path]:
    """Index files of ``home`` other than ``keep``: the pre-catalog ``memory_index.db`` and
    indexes of other models (not builds in progress)."""
    found = [home / DB_NAME] if (home / DB_NAME).exists() else []
    folder = home / RECALL_DIR
    if folder.is_dir():
        found += sorted(p for p in folder.glob("*.db") if p != keep)
    return [p for p in found if p != keep]


def live_index(home: Path) -> tuple[Path, bool]:
    """(the index file recall uses now, whether it is the selected model's).

    The selected model's file once it exists; before that (a home whose index was built with
    another model and is not migrated yet) the older index, read with its own model — never
    a mix of two models' vectors; a new home gets the selected model's file.
    """
    want = index_path(home, selected_model(home))
    if want.exists():
        return want, True
    older = older_indexes(home, want)
    if older:
        return older[0], False
    return want, True


def index_model(path: Path) -> str | None:
    """The model id recorded in an index file (``None``: none recorded)."""
    conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        row = conn.execute("SELECT value FROM meta WHERE key = 'model'").fetchone()
    except apsw.SQLError:
        row = None
    finally:
        conn.close()
    return None if row is None else str(row[0])


def remove_index_files(path: Path) -> None:
    """Delete an index file with its write-ahead log and shared-memory file."""
    for suffix in ("", "-wal", "-shm", "-journal"):
        Path(str(path) + suffix).unlink(missing_ok=True)
