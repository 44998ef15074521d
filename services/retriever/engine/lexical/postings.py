"""The postings of a query's terms, read from the lexical index's packed blocks (through the
:class:`~services.retriever.engine.lexical.postings_cache.PostingsCache` when one is held), and scored: exact
BM25F over every posting with numpy (:func:`bm25_scores`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import asyncpg
import numpy as np

from services.retriever.engine.lexical.blocks import BOUND_COLUMNS, POSTING, ReadBlock
from services.retriever.engine.lexical.postings_cache import PostingsCache


@dataclass(frozen=True)
class CorpusCounts:
    """N and the mean field lengths of the indexed chunks."""

    chunks: int
    mean_title: float
    mean_section: float
    mean_text: float


async def corpus_counts(pool: asyncpg.Pool) -> CorpusCounts:
    """N and the mean title, section and text lengths of the indexed chunks (zeros for an empty index)."""
    row = await pool.fetchrow(
        "SELECT count(*) AS n, coalesce(avg(len_title), 0) AS t, coalesce(avg(len_section), 0) AS s, "
        "coalesce(avg(len_text), 0) AS x FROM bm25_chunks"
    )
    assert row is not None
    return CorpusCounts(int(row["n"]), float(row["t"]), float(row["s"]), float(row["x"]))


@dataclass(frozen=True)
class Bm25Scoring:
    """What a BM25 score is computed with: ``k1``/``b``, the BM25F field weights (text weighs 1) and the
    corpus counts (N, mean field lengths)."""

    k1: float
    b: float
    title_weight: float
    section_weight: float
    counts: CorpusCounts

    @property
    def avgdl(self) -> float:
        c = self.counts
        return max(c.mean_text + self.title_weight * c.mean_title + self.section_weight * c.mean_section, 1e-6)

    def idf(self, df: int) -> float:
        """Lucene's BM25 IDF, ``ln(1 + (N - df + 0.5) / (df + 0.5))``; N is at least ``df`` (counts read a
        moment before the term's df are never allowed to make it negative)."""
        n = float(max(self.counts.chunks, df))
        return float(np.log1p((n - df + 0.5) / (df + 0.5)))


@dataclass(frozen=True)
class TermPostings:
    """One query term: its document frequency and every posting of it in the blocks."""

    df: int
    postings: np.ndarray  # of POSTING


@dataclass(frozen=True)
class QueryPostings:
    """Every posting of a query's terms in one array, term after term (``counts[i]`` of term ``i``, whose
    document frequency is ``df[i]``): one buffer, so that scoring runs each step once over all of them."""

    df: tuple[int, ...]
    counts: tuple[int, ...]
    postings: np.ndarray  # of POSTING, contiguous

    @classmethod
    def of(cls, terms: Sequence[TermPostings]) -> QueryPostings:
        return cls(
            tuple(t.df for t in terms),
            tuple(len(t.postings) for t in terms),
            np.frombuffer(b"".join(t.postings.tobytes() for t in terms), dtype=POSTING),
        )

    def __len__(self) -> int:
        return len(self.postings)


_QUERY_TERMS = """
WITH q AS (
    SELECT t.term_id, t.df FROM bm25_terms t
    WHERE t.term = ANY (tsvector_to_array(to_tsvector('english', $1::text))) AND t.df > 0)"""


_TERM_BLOCKS_SQL = (
    _QUERY_TERMS
    + """
SELECT q.term_id, q.df, b.postings
FROM q JOIN bm25_blocks b ON b.term_id = q.term_id"""
)


# The blocks of the query's terms without their postings (a few dozen bytes a block, no TOAST read).
_TERM_BLOCK_IDS_SQL = (
    _QUERY_TERMS
    + """
SELECT q.term_id, q.df, b.block_id, b.n, b.xmin::text AS version
FROM q JOIN bm25_blocks b ON b.term_id = q.term_id"""
)


_BLOCKS_SQL = """
SELECT block_id, postings FROM bm25_blocks
WHERE term_id = ANY ($1::integer[]) AND block_id = ANY ($2::bigint[])"""


async def term_postings(
    conn: asyncpg.Connection | asyncpg.Pool, query: str, cache: PostingsCache | None = None
) -> QueryPostings:
    """The postings of each term of ``query`` (analysed like the stored text) that occurs in the index;
    with ``cache``, the blocks it holds come from memory and only the others are read (and kept there when
    it wants them)."""
    if cache is None or cache.max_bytes <= 0:
        rows = await conn.fetch(_TERM_BLOCKS_SQL, query)
        return _joined([r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows])
    blocks = await conn.fetch(_TERM_BLOCK_IDS_SQL, query)
    held: dict[int, bytes] = {}
    for b in blocks:
        if cache.wants(b["n"]) and (blob := cache.get((b["block_id"], b["version"]))) is not None:
            held[b["block_id"]] = blob
    missing = [b for b in blocks if b["block_id"] not in held]
    if missing:
        terms = sorted({int(b["term_id"]) for b in missing})
        read = await conn.fetch(_BLOCKS_SQL, terms, [b["block_id"] for b in missing])
        fetched = {r["block_id"]: r["postings"] for r in read}
        for b in missing:
            if cache.wants(b["n"]) and b["block_id"] in fetched:
                cache.put((b["block_id"], b["version"]), fetched[b["block_id"]])
        held.update(fetched)
    # A block deleted between the two reads (compaction merged it): its postings are in a new block the
    # first read did not see. Rare (compaction is brief); the search then reads the way without the cache.
    if any(b["block_id"] not in held for b in blocks):
        return await term_postings(conn, query)
    return _joined([b["term_id"] for b in blocks], [b["df"] for b in blocks], [held[b["block_id"]] for b in blocks])


@dataclass(frozen=True)
class BlockRef:
    """One block of a query term, listed without its postings: where it is, what it holds and its bounds
    (``bounds``: :data:`~services.retriever.engine.lexical.blocks.BOUND_COLUMNS`, None for a block written
    before blocks had them)."""

    term_id: int
    df: int
    block_id: int
    n: int
    min_key: int
    max_key: int
    version: str
    bounds: tuple[int, int, int, int, int, int] | None


# The query's terms' blocks with their key ranges and bounds, no postings read.
_TERM_BLOCK_REFS_SQL = (
    _QUERY_TERMS
    + f"""
SELECT q.term_id, q.df, b.block_id, b.n, b.min_key, b.max_key, b.xmin::text AS version, {", ".join(BOUND_COLUMNS)}
FROM q JOIN bm25_blocks b ON b.term_id = q.term_id"""
)


async def query_blocks(conn: asyncpg.Connection | asyncpg.Pool, query: str) -> list[BlockRef]:
    """The blocks of each term of ``query`` (analysed like the stored text) that occurs in the index."""
    refs = []
    for r in await conn.fetch(_TERM_BLOCK_REFS_SQL, query):
        bounds = tuple(r[c] for c in BOUND_COLUMNS)
        refs.append(
            BlockRef(
                int(r["term_id"]),
                int(r["df"]),
                int(r["block_id"]),
                int(r["n"]),
                int(r["min_key"]),
                int(r["max_key"]),
                str(r["version"]),
                None if any(v is None for v in bounds) else tuple(int(v) for v in bounds),  # type: ignore[arg-type]
            )
        )
    return refs


async def read_blocks(
    conn: asyncpg.Connection | asyncpg.Pool, refs: Sequence[BlockRef], cache: PostingsCache | None = None
) -> dict[int, ReadBlock]:
    """The blocks ``refs`` by block id, from ``cache`` where it holds them (the others are read, and kept when
    it wants them). A block merged away since it was listed is missing from the answer."""
    held: dict[int, bytes] = {}
    use_cache = cache is not None and cache.max_bytes > 0
    if use_cache:
        assert cache is not None
        for ref in refs:
            if cache.wants(ref.n) and (blob := cache.get((ref.block_id, ref.version))) is not None:
                held[ref.block_id] = blob
    missing = [ref for ref in refs if ref.block_id not in held]
    if missing:
        terms = sorted({ref.term_id for ref in missing})
        read = await conn.fetch(_BLOCKS_SQL, terms, [ref.block_id for ref in missing])
        fetched = {int(r["block_id"]): r["postings"] for r in read}
        if use_cache:
            assert cache is not None
            for ref in missing:
                if cache.wants(ref.n) and ref.block_id in fetched:
                    cache.put((ref.block_id, ref.version), fetched[ref.block_id])
        held.update(fetched)
    # Fresh wrappers each search: a block's keys decoded for lookups live as long as the search, never in the cache.
    return {block_id: ReadBlock(blob) for block_id, blob in held.items()}


def _joined(term_ids: list[int], dfs: list[int], blobs: list[bytes]) -> QueryPostings:
    """One buffer of the blocks, grouped by term (the rows come in any order; a term's blocks in any order)."""
    if not blobs:
        return QueryPostings((), (), np.zeros(0, dtype=POSTING))
    terms = np.asarray(term_ids, dtype=np.int64)
    if (terms[1:] < terms[:-1]).any():
        order = np.argsort(terms, kind="stable")
        terms, dfs, blobs = terms[order], [dfs[i] for i in order], [blobs[i] for i in order]
    starts = np.flatnonzero(np.concatenate(([True], terms[1:] != terms[:-1])))
    sizes = np.fromiter(map(len, blobs), dtype=np.int64, count=len(blobs)) // POSTING.itemsize
    counts = np.add.reduceat(sizes, starts)
    postings = np.frombuffer(b"".join(blobs), dtype=POSTING)
    return QueryPostings(tuple(int(dfs[i]) for i in starts), tuple(int(c) for c in counts), postings)


async def dead_keys(conn: asyncpg.Connection | asyncpg.Pool) -> np.ndarray:
    """Keys of removed chunks whose postings compaction has not dropped yet."""
    keys = await conn.fetchval("SELECT coalesce(array_agg(chunk_key), '{}') FROM bm25_dead")
    return np.asarray(keys, dtype=np.int64)


#: Byte offsets of the one-byte fields in a packed posting (see :data:`POSTING`).
_TF_TITLE, _TF_SECTION, _LEN_TITLE, _LEN_SECTION = (
    POSTING.fields[f][1]  # type: ignore[index]
    for f in ("tf_title", "tf_section", "len_title", "len_section")
)


def posting_impacts(postings: np.ndarray, weights: np.ndarray | np.float32, scoring: Bm25Scoring) -> np.ndarray:
    """Each posting's BM25F contribution in single precision: ``weights`` (``idf * (k1 + 1)`` of each posting's
    term, or one for all) times ``tf / (tf + k1 * (1 - b + b * dl / avgdl))`` with ``tf = tf_text + wt*tf_title +
    ws*tf_section``, ``dl = len_text + wt*len_title + ws*len_section``. The same operations in the same order
    whoever calls it, so a posting scores the same bits in every path (exhaustive or pruned)."""
    k1, b = scoring.k1, scoring.b
    wt, ws = np.float32(scoring.title_weight), np.float32(scoring.section_weight)
    raw = postings.view(np.uint8).reshape(-1, POSTING.itemsize)  # the one-byte fields, without a copy
    tf = postings["tf_text"].astype(np.float32)
    norm = postings["len_text"].astype(np.float32)
    if wt:
        tf += wt * raw[:, _TF_TITLE]
        norm += wt * raw[:, _LEN_TITLE]
    if ws:
        tf += ws * raw[:, _TF_SECTION]
        norm += ws * raw[:, _LEN_SECTION]
    norm *= np.float32(k1 * b / scoring.avgdl)
    norm += np.float32(k1 * (1 - b))
    norm += tf
    # tf / (tf + norm); a posting with no weighted occurrence (tf 0) adds exactly 0 (and k1 = 0: 1 for any tf > 0)
    np.divide(tf, norm, out=tf, where=norm > 0)
    tf *= weights
    return tf


def term_weight(scoring: Bm25Scoring, df: int) -> np.float32:
    """``idf * (k1 + 1)`` of a term of document frequency ``df``, as a posting's contribution is weighted."""
    return np.float32(scoring.idf(df) * (scoring.k1 + 1))


#: How much a block's bound is raised over its exact value: a posting's contribution is computed in single
#: precision (a few roundings, each below 6e-8 relative), its bound in double; the margin keeps the bound above.
BOUND_MARGIN = 1e-5


def block_upper_bounds(scoring: Bm25Scoring, weights: np.ndarray, bounds: np.ndarray) -> np.ndarray:
    """The most any posting of each block can add to a chunk's score: ``weights`` (``idf * (k1 + 1)`` of each
    block's term) times the BM25F saturation at the block's largest frequencies and smallest lengths
    (``bounds``: one row a block, :data:`~services.retriever.engine.lexical.blocks.BOUND_COLUMNS`; NaN where the
    block has none yet: then infinity). The saturation grows with the frequency and shrinks with the length
    for any ``k1``, ``b`` >= 0 and field weights >= 0, so the bound holds whatever the mean length is now."""
    wt, ws = scoring.title_weight, scoring.section_weight
    tf = bounds[:, 0] + wt * bounds[:, 1] + ws * bounds[:, 2]
    dl = bounds[:, 3] + wt * bounds[:, 4] + ws * bounds[:, 5]
    norm = tf + scoring.k1 * (1 - scoring.b) + scoring.k1 * scoring.b * dl / scoring.avgdl
    with np.errstate(invalid="ignore", divide="ignore"):
        saturation = np.where(norm > 0, tf / np.where(norm > 0, norm, 1.0), 0.0)
    upper = weights.astype(np.float64) * saturation * (1 + BOUND_MARGIN)
    return np.where(np.isnan(bounds).any(axis=1), np.inf, upper)


def bm25_scores(query: QueryPostings, scoring: Bm25Scoring, dead: np.ndarray) -> np.ndarray:
    """BM25F of every chunk key (index = key; 0 where no query term occurs or the chunk was removed).

    Per posting (:func:`posting_impacts`): ``idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * dl / avgdl))``;
    summed per chunk. Each posting's term is computed in single precision (a relative error below 1e-6; equal
    inputs give equal scores, so ties stay ties), the sums per chunk in double, in term order: one pass of a
    few vector operations over the query's postings, the step that bounds an exhaustive lexical search's time
    (``docs/retrieval.md``)."""
    p = query.postings
    if not len(p):
        return np.zeros(0)
    weight = np.repeat(np.array([term_weight(scoring, df) for df in query.df], dtype=np.float32), query.counts)
    scores = np.bincount(p["key"], weights=posting_impacts(p, weight, scoring))
    dead = dead[dead < len(scores)]
    scores[dead] = 0.0
    return scores


def best_keys(scores: np.ndarray, count: int) -> np.ndarray:
    """Keys of the ``count`` best scores (more where the last one ties), best first (ties: key order);
    only positive scores."""
    positive = np.flatnonzero(scores > 0)
    if len(positive) > count > 0:
        values = scores[positive]
        positive = positive[values >= _kth_largest(values, count)]
    order = np.lexsort((positive, -scores[positive]))
    return positive[order]


def _kth_largest(values: np.ndarray, count: int) -> float:
    """The ``count``-th largest of ``values`` (more than ``count`` of them). A selection over all of them costs
    ~10 ns a value (3 ms over the 300,000 chunks a question's terms touch at 10^6), so a strided sample of about
    ``16 * count`` first gives a floor that about twice ``count`` values reach; the selection then runs over those
    alone. The answer does not depend on the sample: a floor that fewer than ``count`` values reach is not used."""
    step = len(values) // (16 * count)
    if step >= 4:
        sample = values[::step]
        rank = min(len(sample), 2 * count * len(sample) // len(values) + 2)
        floor = np.partition(sample, len(sample) - rank)[len(sample) - rank]
        above = values[values >= floor]
        if len(above) >= count:
            values = above
    return float(np.partition(values, len(values) - count)[len(values) - count])
