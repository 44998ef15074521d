"""The postings of a query's terms, read from the lexical index's packed blocks (through the
:class:`~services.retriever.engine.lexical.postings_cache.PostingsCache` when one is held), and scored: exact
BM25F over every posting with numpy (:func:`bm25_scores`)."""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import NamedTuple, TypeVar

import asyncpg
import numpy as np

from services.retriever.engine.lexical.blocks import BOUND_COLUMNS, POSTING, TermView, located
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


_BLOCKS_SQL = """
SELECT block_id, postings FROM bm25_blocks
WHERE term_id = ANY ($1::integer[]) AND block_id = ANY ($2::bigint[])"""


async def term_postings(conn: asyncpg.Connection | asyncpg.Pool, query: str) -> QueryPostings:
    """The postings of each term of ``query`` (analysed like the stored text) that occurs in the index, read in
    one statement (the terms' blocks as they are at that moment: no block can be merged away between a listing
    and a read). The lexical leg reads through :func:`read_terms` (its cache); this is the way it reads again
    when a block it listed was merged away before it was read, and the tests' reference."""
    rows = await conn.fetch(_TERM_BLOCKS_SQL, query)
    return _joined([r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows])


class BlockRef(NamedTuple):
    """One block of a query term, listed without its postings: where it is, what it holds and its bounds
    (``bounds``: :data:`~services.retriever.engine.lexical.blocks.BOUND_COLUMNS`, None for a block written
    before blocks had them). A tuple: a common-word query lists thousands of blocks at 3x10^6 chunks."""

    term_id: int
    df: int
    block_id: int
    n: int
    min_key: int
    max_key: int
    version: str
    bounds: tuple[int, int, int, int, int, int] | None


# The query's terms' blocks with their key ranges and bounds (one array, NULL for a block without), no postings.
_TERM_BLOCK_REFS_SQL = (
    _QUERY_TERMS
    + f"""
SELECT q.term_id, q.df, b.block_id, b.n, b.min_key, b.max_key, b.xmin::text AS version,
       CASE WHEN num_nulls({", ".join(BOUND_COLUMNS)}) = 0 THEN ARRAY[{", ".join(BOUND_COLUMNS)}] END AS bounds
FROM q JOIN bm25_blocks b ON b.term_id = q.term_id"""
)


async def query_blocks(conn: asyncpg.Connection | asyncpg.Pool, query: str) -> list[BlockRef]:
    """The blocks of each term of ``query`` (analysed like the stored text) that occurs in the index."""
    return [
        BlockRef(r[0], r[1], r[2], r[3], r[4], r[5], r[6], None if r[7] is None else tuple(r[7]))
        for r in await conn.fetch(_TERM_BLOCK_REFS_SQL, query)
    ]


class BlockVanished(Exception):
    """A listed block was merged away before it was read (compaction ran meanwhile): list again."""


async def read_terms(
    conn: asyncpg.Connection | asyncpg.Pool,
    refs: Sequence[BlockRef],
    cache: PostingsCache | None = None,
    *,
    listed: Mapping[int, Sequence[BlockRef]] | None = None,
) -> dict[int, TermView]:
    """A view of each term of ``refs`` holding at least the blocks ``refs`` (some or all of the term's blocks,
    ``listed``: every block of each term as the search listed them; default ``refs``), by term id.

    A term the cache wants (a common one) comes whole: from memory when the view held is of all of its listed
    blocks; when it lacks only blocks appended since (a write), those are read and joined to it; else the term
    is read whole (and kept). Any other term is read from the store, the blocks asked for. Raises
    :class:`BlockVanished` when a block to read was merged away since it was listed."""
    every = listed if listed is not None else by_term_id(refs)
    wanted = by_term_id(refs)
    views: dict[int, TermView] = {}
    base: dict[int, TermView] = {}  # a held view the blocks read are joined to
    missing: list[BlockRef] = []
    for term_id, term_refs in wanted.items():
        all_refs = every.get(term_id, term_refs)
        ids = frozenset((r.block_id, r.version) for r in all_refs)
        if cache is None or not cache.wants(sum(r.n for r in all_refs)):
            missing.extend(term_refs)
            continue
        held = cache.get(term_id)
        cache.count(hit=held is not None and held.blocks == ids)
        if held is not None and held.blocks == ids:
            views[term_id] = held
        elif held is not None and held.blocks < ids:
            base[term_id] = held
            missing.extend(r for r in all_refs if (r.block_id, r.version) not in held.blocks)
        else:  # the whole term, to be kept
            missing.extend(all_refs)
    if missing:
        read = await conn.fetch(_BLOCKS_SQL, sorted({r.term_id for r in missing}), [r.block_id for r in missing])
        blobs = {int(r["block_id"]): r["postings"] for r in read}
        if any(r.block_id not in blobs for r in missing):
            raise BlockVanished
        for term_id, term_refs in by_term_id(missing).items():
            in_order = sorted(term_refs, key=lambda r: (r.min_key, r.block_id))
            view = TermView.of({(r.block_id, r.version): blobs[r.block_id] for r in in_order})
            if term_id in base:
                view = base[term_id].merged(view)
            views[term_id] = view
            all_refs = every.get(term_id, term_refs)
            if cache is not None and view.blocks == frozenset((r.block_id, r.version) for r in all_refs):
                cache.put(term_id, view)
    return views


def by_term_id(refs: Sequence[BlockRef]) -> dict[int, list[BlockRef]]:
    """``refs`` grouped by term, in the order given."""
    grouped: dict[int, list[BlockRef]] = {}
    for ref in refs:
        grouped.setdefault(ref.term_id, []).append(ref)
    return grouped


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
    term, or one for all) times its saturation (:func:`saturation`). The same operations in the same order
    whoever calls it (a held saturation times the weight is the same product), so a posting scores the same
    bits in every path (exhaustive or pruned, from the store or from memory)."""
    impacts = saturation(postings, scoring)
    impacts *= weights
    return impacts


def saturation(postings: np.ndarray, scoring: Bm25Scoring) -> np.ndarray:
    """Each posting's ``tf / (tf + k1 * (1 - b + b * dl / avgdl))`` in single precision, with ``tf = tf_text +
    wt*tf_title + ws*tf_section``, ``dl = len_text + wt*len_title + ws*len_section``: its BM25F contribution
    before the term's weight."""
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
    return tf


def view_saturation(view: TermView, scoring: Bm25Scoring) -> np.ndarray:
    """:func:`saturation` of ``view``'s postings, held with the view until the scoring changes (its parameters,
    or the mean lengths: the corpus counts are read again every minute)."""
    return view.saturation(
        (scoring.k1, scoring.b, scoring.title_weight, scoring.section_weight, scoring.avgdl),
        lambda packed: saturation(packed, scoring),
    )


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


#: A query of fewer postings is added up on one thread: handing a key range to another costs ~0.1 ms.
SPLIT_FROM_POSTINGS = 262_144


def view_scores(
    views: Sequence[tuple[TermView, np.float32]],
    scoring: Bm25Scoring,
    size: int,
    dead: np.ndarray,
    *,
    threads: int = 1,
) -> np.ndarray:
    """:func:`bm25_scores` of terms held as views, each with its weight (``idf * (k1 + 1)``), in term order: every
    posting's contribution (its held saturation times the weight: the same bits), summed per chunk in the order
    given; ``size`` keys at least.

    ``threads`` > 1 (and at least :data:`SPLIT_FROM_POSTINGS` postings): the key space is cut into that many
    ranges, each added up on its own thread (numpy lets go of the GIL in the indexed additions). A chunk's
    contributions all fall in one range and are added there in term order: the same sums, bit for bit. At
    3x10^6 chunks a question's ~2 M postings took ~25 ms on one core, ~13-15 on two (docs/benchmarks.md)."""
    length = max([size, *(int(view.keys[-1]) + 1 for view, _ in views if len(view)), 0])
    scores = np.zeros(length)
    # Saturations memoised on the views before any thread reads them.
    parts = [(view.keys, view_saturation(view, scoring), weight) for view, weight in views]
    split = 1 if sum(len(keys) for keys, _, _ in parts) < SPLIT_FROM_POSTINGS else threads
    in_ranges(functools.partial(_add_range, scores, parts), length, split)
    scores[dead[dead < len(scores)]] = 0.0
    return scores


def _add_range(
    scores: np.ndarray, parts: Sequence[tuple[np.ndarray, np.ndarray, np.float32]], low: int, high: int
) -> None:
    """Add to ``scores`` the contributions of the keys in ``[low, high)``, term by term (a term holds a chunk once:
    adding term by term sums each chunk's contributions in term order, as bincount over them all does; 4-16 %
    faster at 2 M postings, without the joined copies)."""
    for keys, saturation, weight in parts:
        first, last = key_span(keys, low, high)
        if last > first:
            scores[keys[first:last]] += saturation[first:last] * weight


def key_span(keys: np.ndarray, low: int, high: int) -> tuple[int, int]:
    """Where the keys in ``[low, high)`` lie in ``keys`` (sorted integers): the first position at or above ``low``
    and the first at or above ``high``. Searched as the keys' own type: numpy would first copy ``keys`` to the type
    of a Python int or a wider integer (~0.5 ms for 2 M ``int32`` keys, against ~1 us; inline timeit)."""
    top = int(np.iinfo(keys.dtype).max)
    first = len(keys) if low > top else int(keys.searchsorted(keys.dtype.type(low)))
    last = len(keys) if high > top else int(keys.searchsorted(keys.dtype.type(high)))
    return first, last


_T = TypeVar("_T")


def in_ranges(task: Callable[[int, int], _T], length: int, threads: int) -> list[_T]:
    """``task(low, high)`` over ``threads`` (at least one) consecutive ranges of ``[0, length)``, each on its own
    thread (the caller's the first; numpy lets go of the GIL in its passes over large arrays): the results in
    range order."""
    if threads <= 1:
        return [task(0, length)]
    cuts = [length * i // threads for i in range(threads + 1)]
    pending = [_splitter(threads).submit(task, lo, hi) for lo, hi in itertools.pairwise(cuts[1:])]
    return [task(cuts[0], cuts[1]), *(done.result() for done in pending)]


@functools.cache
def _splitter(threads: int) -> ThreadPoolExecutor:
    """The threads (besides the caller's) that add up key ranges for ``threads``-way splits: one pool a process,
    kept for its life."""
    return ThreadPoolExecutor(max_workers=threads - 1, thread_name_prefix="bm25-split")


@dataclass(frozen=True)
class KeyScores:
    """A search's scores by chunk key: of every key (``keys`` None: key ``i`` scores ``values[i]``), or of some
    keys alone (``keys`` sorted and distinct, ``values`` theirs; every other key scores 0: what a pruned search
    returns, without arrays as long as the corpus)."""

    values: np.ndarray
    keys: np.ndarray | None = None

    @property
    def size(self) -> int:
        """One more than the largest key held (0 when none is)."""
        if self.keys is None:
            return len(self.values)
        return int(self.keys[-1]) + 1 if len(self.keys) else 0

    def best(self, count: int) -> np.ndarray:
        """:func:`best_keys` of these scores: the keys of the ``count`` best (ties at the end included), best
        first, ties in key order; positive scores only."""
        found = best_keys(self.values, count)
        return found if self.keys is None else self.keys[found]

    def at(self, keys: np.ndarray) -> np.ndarray:
        """The scores of ``keys`` (0 for a key not held)."""
        keys = np.asarray(keys, dtype=np.int64)
        out = np.zeros(len(keys))
        if self.keys is None:
            inside = keys < len(self.values)
            out[inside] = self.values[keys[inside]]
        else:
            at, held = located(self.keys, keys)
            out[held] = self.values[at[held]]
        return out

    def times(self, mask: np.ndarray) -> KeyScores:
        """These scores times ``mask`` (by key, at least :attr:`size` long): the doc values' verdicts."""
        if self.keys is None:
            return KeyScores(self.values * mask[: len(self.values)])
        return KeyScores(self.values * mask[self.keys], self.keys)


def best_keys(scores: np.ndarray, count: int) -> np.ndarray:
    """Keys of the ``count`` best scores (more where the last one ties), best first (ties: key order);
    only positive scores. Over an array as long as the corpus (an exhaustive search's) the sampled floor
    (:func:`_sampled_floor`) is taken over the array itself, so that one pass finds the few keys at or above it
    (not every matching chunk's key and score first: ~3 of the ~6 ms at 3x10^6 chunks)."""
    floor = _sampled_floor(scores, count) if count > 0 else None
    if floor is not None and floor > 0:
        above = np.flatnonzero(scores >= floor)
        if len(above) >= count:  # the count-th best is at least the floor: every key that can be among them
            values = scores[above]
            kept = above[values >= np.partition(values, len(values) - count)[len(values) - count]]
            ranked: np.ndarray = kept[np.lexsort((kept, -scores[kept]))]
            return ranked
    positive = np.flatnonzero(scores > 0)
    if len(positive) > count > 0:
        values = scores[positive]
        positive = positive[values >= _kth_largest(values, count)]
    order = np.lexsort((positive, -scores[positive]))
    return positive[order]


def _sampled_floor(values: np.ndarray, count: int) -> float | None:
    """A value about twice ``count`` of ``values`` reach, from a strided sample of about ``16 * count`` of them;
    None where ``values`` are too few for a sample to pay. A guess: its callers check that ``count`` reach it."""
    step = len(values) // (16 * count)
    if step < 4:
        return None
    sample = values[::step]
    rank = min(len(sample), 2 * count * len(sample) // len(values) + 2)
    return float(np.partition(sample, len(sample) - rank)[len(sample) - rank])


def _kth_largest(values: np.ndarray, count: int) -> float:
    """The ``count``-th largest of ``values`` (more than ``count`` of them). A selection over all of them costs
    ~10 ns a value (3 ms over the 300,000 chunks a question's terms touch at 10^6), so a strided sample of about
    ``16 * count`` first gives a floor that about twice ``count`` values reach; the selection then runs over those
    alone. The answer does not depend on the sample: a floor that fewer than ``count`` values reach is not used."""
    floor = _sampled_floor(values, count)
    if floor is not None:
        above = values[values >= floor]
        if len(above) >= count:
            values = above
    return float(np.partition(values, len(values) - count)[len(values) - count])
