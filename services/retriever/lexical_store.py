"""The lexical index: exact BM25F over packed posting blocks (migration ``220_bm25_blocks.sql``), scored here.

Tables (kept by statement-level triggers on ``chunks``; the analysis is the store's ``chunk_tsvector()``):
``bm25_terms`` (term id, document frequency), ``bm25_chunks`` (chunk key, field lengths), ``bm25_blocks``
(a term's postings, :data:`POSTING` records packed in ``bytea`` blocks), ``bm25_pending`` (terms whose small
blocks await a merge) and ``bm25_dead`` (keys of removed chunks whose postings may still sit in blocks).

A query reads the blocks of its terms in one statement (a few bytes a posting, no row or index tuple per
posting; with a :class:`PostingsCache`, it lists them and reads only those not held in memory), and scores
every posting with numpy in one pass: Okapi BM25 with BM25F field weights and the current N and
mean length, summed per chunk (:func:`bm25_scores`). That is exact BM25 over every posting, in time linear in
the postings read (11 bytes each). The best chunks are then resolved to chunk ids through the filters,
best first, until ``k`` pass (:func:`bm25_rank`).

:func:`compact` (run by the retriever in the background, one replica at a time) merges each pending term's
small blocks size-tiered and drops the postings of removed chunks; a query is exact before and after it.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import asyncpg
import numpy as np

from services.retriever.doc_values import DocValues, holds_all
from services.retriever.postings_cache import PostingsCache
from services.retriever.store import COMPACTION_LOCK, Scored, advisory_session, where_clause
from shared.models import SearchFilters
from shared.periodic import run_every

log = logging.getLogger(__name__)

#: One posting as the store packs it (``bm25_add`` in migration 220): 11 bytes, big-endian; the one-byte
#: fields are capped at 255, ``len_text`` at 65535.
POSTING = np.dtype(
    [
        ("key", ">i4"),
        ("tf_text", "u1"),
        ("tf_title", "u1"),
        ("tf_section", "u1"),
        ("len_text", ">u2"),
        ("len_title", "u1"),
        ("len_section", "u1"),
    ]
)

#: The lexical writers' lock (``bm25_add``/``bm25_remove`` take it for their transaction); compaction too.
_WRITER_LOCK = "SELECT pg_advisory_xact_lock(4542054, 14)"


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


def bm25_scores(query: QueryPostings, scoring: Bm25Scoring, dead: np.ndarray) -> np.ndarray:
    """BM25F of every chunk key (index = key; 0 where no query term occurs or the chunk was removed).

    Per posting: ``tf = tf_text + wt*tf_title + ws*tf_section``, ``dl = len_text + wt*len_title +
    ws*len_section``, ``idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * dl / avgdl))``; summed per chunk.
    Each posting's term is computed in single precision (a relative error below 1e-6; equal inputs give
    equal scores, so ties stay ties), the sums per chunk in double: one pass of a few vector operations over
    the query's postings, the step that bounds a lexical search's time (``docs/retrieval.md``)."""
    p = query.postings
    if not len(p):
        return np.zeros(0)
    k1, b = scoring.k1, scoring.b
    wt, ws = np.float32(scoring.title_weight), np.float32(scoring.section_weight)
    raw = p.view(np.uint8).reshape(-1, POSTING.itemsize)  # the one-byte fields, without a copy
    weight = np.repeat(np.array([scoring.idf(df) * (k1 + 1) for df in query.df], dtype=np.float32), query.counts)
    tf = p["tf_text"].astype(np.float32)
    norm = p["len_text"].astype(np.float32)
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
    tf *= weight
    scores = np.bincount(p["key"], weights=tf)
    dead = dead[dead < len(scores)]
    scores[dead] = 0.0
    return scores


def best_keys(scores: np.ndarray, count: int) -> np.ndarray:
    """Keys of the ``count`` best scores (more where the last one ties), best first (ties: key order);
    only positive scores."""
    positive = np.flatnonzero(scores > 0)
    if len(positive) > count:
        part = positive[np.argpartition(-scores[positive], count - 1)[:count]]
        floor = scores[part].min()
        positive = positive[scores[positive] >= floor]
    order = np.lexsort((positive, -scores[positive]))
    return positive[order]


_RESOLVE_SQL = """
SELECT b.chunk_key, b.chunk_id
FROM bm25_chunks b
JOIN chunks c ON c.chunk_id = b.chunk_id
JOIN documents d ON d.document_id = c.document_id
WHERE b.chunk_key = ANY ($1::integer[]) AND {where}"""

_PASSING_SQL = """
SELECT b.chunk_key, b.chunk_id
FROM chunks c
JOIN documents d ON d.document_id = c.document_id
JOIN bm25_chunks b ON b.chunk_id = c.chunk_id
WHERE {where}
LIMIT $1::bigint"""

#: The fewest candidates a pass resolves through the filters.
FIRST_PASS = 256
#: With no pass rate to go by (none of the candidates so far passed), a pass reads this many times more.
PASS_GROWTH = 8
#: A pass sized from a pass rate (the planner's, or the one seen so far) reads this much more than the rate
#: says it needs: a rate read off a few hundred candidates is rough, and a pass too short costs a round trip.
PASS_MARGIN = 1.25
#: A first pass sized by the planner's share reads at most this many times the pass taken without it.
FIRST_PASS_MAX_GROWTH = 4


def next_pass(k: int, found: int, resolved: int, *, share: float | None = None) -> int:
    """How many of the best candidates to have resolved through the filters after the next pass, when
    ``resolved`` were and ``found`` of them passed, ``k`` wanted (``found < k``).

    Sized by a pass rate, so that one more pass usually finds the rest: the rate seen so far, or before the
    first pass the planner's expected ``share`` of chunks passing (``None``: unknown); ``PASS_MARGIN`` times
    what the rate says is missing, at least :data:`FIRST_PASS`. The planner's share sizes the first pass
    to at most ``FIRST_PASS_MAX_GROWTH`` times the pass taken without it: its estimates of some filters
    (array overlaps such as MeSH, expressions) are guesses, and one that takes a filter passing nearly every
    chunk for a rare one would read thousands of candidates where a hundred suffice; the rate seen then
    sizes the next pass. With no rate to go by (nothing passed yet, no estimate) the number read grows
    ``PASS_GROWTH``-fold. Passes of fixed growth (256, 2,048, 16,384) read up to eight times too many: at
    10^6 chunks a hybrid search under a year range passing 5.6 % of the chunks resolved 3,007 candidates on
    average and up to 16,384 (a third pass) (docs/benchmarks.md)."""
    missing = k - found
    if resolved == 0:
        base = max(FIRST_PASS, 2 * k)
        if share is None or share <= 0:
            return base
        return min(FIRST_PASS_MAX_GROWTH * base, max(base, math.ceil(k / min(share, 1.0) * PASS_MARGIN)))
    if found == 0:
        return max(FIRST_PASS, resolved * PASS_GROWTH)
    return resolved + max(FIRST_PASS, math.ceil(missing * resolved / found * PASS_MARGIN))


@dataclass(frozen=True)
class PassingSet:
    """What a filter passes, resolved once for both legs of a search (:func:`passing_chunks`)."""

    chunks: dict[int, str] | None
    """chunk key -> chunk id of every chunk the filter passes; None when more pass than the filter-first
    bound (both legs then check their best candidates against the filter instead)."""
    planned: float | None = None
    """How many chunks the planner expected the filter to pass (None: not asked): sizes the passes that
    check candidates (:func:`next_pass`)."""


_PLANNED_SQL = """
EXPLAIN (FORMAT JSON)
SELECT 1 FROM chunks c JOIN documents d ON d.document_id = c.document_id WHERE {where}"""

#: A filter the planner expects to pass more than this many times the bound is taken as broad without reading
#: its chunks: reading ``cap + 1`` of them to find out costs a scan of ``cap / s`` rows at selectivity ``s``
#: (at 10^6 chunks, a year range passing 5 % read ~200k rows to learn it passes more than 10,000).
PLANNED_MARGIN = 4


async def planned_rows(conn: asyncpg.Connection | asyncpg.Pool, filters: SearchFilters) -> float:
    """How many chunks PostgreSQL's planner expects ``filters`` to pass (its statistics; nothing is read)."""
    where, params = where_clause(filters, 1)
    plan = await conn.fetchval(_PLANNED_SQL.format(where=where), *params)
    return float(json.loads(plan)[0]["Plan"]["Plan Rows"])


async def passing_chunks(conn: asyncpg.Connection | asyncpg.Pool, filters: SearchFilters, cap: int) -> PassingSet:
    """The chunks ``filters`` pass when at most ``cap`` do (reading stops at ``cap + 1``). A filter the
    planner expects to pass more than :data:`PLANNED_MARGIN` x ``cap`` is not read: broad, both legs check
    candidates against it instead (either way the results are the same; an estimate off by more than the
    margin costs time, never a result)."""
    planned = await planned_rows(conn, filters)
    if planned > PLANNED_MARGIN * cap:
        return PassingSet(None, planned)
    where, params = where_clause(filters, 2)
    rows = await conn.fetch(_PASSING_SQL.format(where=where), cap + 1, *params)
    if len(rows) > cap:  # the estimate was off by more than the margin: no share to size passes by
        return PassingSet(None)
    return PassingSet({int(r["chunk_key"]): str(r["chunk_id"]) for r in rows})


async def bm25_rank(
    pool: asyncpg.Pool,
    query: str,
    k: int,
    filters: SearchFilters,
    scoring: Bm25Scoring,
    *,
    filter_first_max: int = 0,
    passing: PassingSet | None = None,
    cache: PostingsCache | None = None,
    doc_values: DocValues | None = None,
) -> list[Scored]:
    """The ``k`` best chunks by BM25 that pass ``filters``, best first (ties: chunk id). Every posting of the
    query's terms is scored (exact); the best chunks are then checked against the filters in passes sized
    by the pass rate (:func:`next_pass`) until ``k`` pass or none is left. A filter that passes at most
    ``filter_first_max`` (> 0) chunks is resolved first instead (its chunks' keys, then the scores of those
    alone); ``passing``, when the caller resolved the filter already (:func:`passing_chunks`), is used as it
    is; ``cache``: common terms' blocks held in memory (:class:`PostingsCache`). ``doc_values`` (current,
    :class:`~services.retriever.doc_values_store.DocValuesFollower`): chunks that fail the filter for certain
    are dropped before the best are checked, and a filter they hold whole is not resolved first (dropping its
    failing chunks does the same, without reading them)."""
    if scoring.counts.chunks == 0 or k <= 0:
        return []
    async with pool.acquire() as conn:
        postings = await term_postings(conn, query, cache)
        if not len(postings):
            return []
        scores = bm25_scores(postings, scoring, await dead_keys(conn))
        where, fparams = where_clause(filters, 2)
        held = doc_values is not None and holds_all(filters)
        if passing is None and filter_first_max > 0 and not held:
            passing = await passing_chunks(conn, filters, filter_first_max)
        if passing is not None and passing.chunks is not None:
            ids = passing.chunks
            keys = np.fromiter(ids, dtype=np.int64, count=len(ids))
            keys = keys[keys < len(scores)]
            hits = [Scored(ids[int(key)], float(scores[key])) for key in keys if scores[key] > 0]
            return sorted(hits, key=lambda h: (-h.score, h.chunk_id))[:k]
        share = None
        if doc_values is not None:
            scores *= doc_values.may_pass(len(scores), filters)
        if passing is not None and passing.planned is not None and not held:
            share = passing.planned / max(scoring.counts.chunks, 1)
        hits = []
        resolved = 0
        while True:
            # The best candidates in one fixed order, as many as the pass wants, ties at the end included.
            ranked = best_keys(scores, next_pass(k, len(hits), resolved, share=share))
            batch = ranked[resolved:]
            if not len(batch):
                break
            rows = await conn.fetch(_RESOLVE_SQL.format(where=where), batch.astype(np.int32).tolist(), *fparams)
            hits.extend(Scored(str(r["chunk_id"]), float(scores[r["chunk_key"]])) for r in rows)
            resolved = len(ranked)
            if len(hits) >= k:
                break
    return sorted(hits, key=lambda h: (-h.score, h.chunk_id))[:k]


# ----------------------------------------------------------------------------------------- compaction


@dataclass(frozen=True)
class CompactionReport:
    terms: int
    blocks_read: int
    blocks_written: int
    dead_dropped: int


def merge_plan(sizes: Sequence[int], block_postings: int) -> list[int]:
    """Which of a term's blocks (by position in ``sizes``, their posting counts) to merge now, size-tiered:
    full blocks (``block_postings`` or more) stay; of the others, from the smallest up, a block joins the
    merge while it holds at most twice what the merge holds so far. Each posting is thus rewritten about
    log2(block_postings) times in all, however it arrives. Fewer than two blocks: nothing to merge."""
    small = sorted((n, i) for i, n in enumerate(sizes) if n < block_postings)
    picked: list[int] = []
    held = 0
    for n, i in small:
        if picked and n > 2 * held:
            break
        picked.append(i)
        held += n
    return picked if len(picked) >= 2 else []


def _holds_any(sorted_keys: np.ndarray, low: int, high: int) -> bool:
    """Whether any of ``sorted_keys`` lies in ``[low, high]``."""
    i = int(np.searchsorted(sorted_keys, low))
    return i < len(sorted_keys) and int(sorted_keys[i]) <= high


def _split(postings: np.ndarray, block_postings: int) -> list[np.ndarray]:
    return [postings[i : i + block_postings] for i in range(0, len(postings), block_postings)]


async def compact_batch(conn: asyncpg.Connection, *, terms: int, block_postings: int) -> CompactionReport | None:
    """One transaction: up to ``terms`` pending terms merged (and cleared of dead postings). None when no
    term is pending. Holds the writers' lock while it runs (a batch takes milliseconds)."""
    async with conn.transaction():
        await conn.execute(_WRITER_LOCK)
        rows = await conn.fetch("SELECT term_id, has_dead FROM bm25_pending ORDER BY term_id LIMIT $1", terms)
        if not rows:
            return None
        pending = [int(r["term_id"]) for r in rows]
        with_dead = {int(r["term_id"]) for r in rows if r["has_dead"]}
        dead = await dead_keys(conn)
        # The plan needs only the blocks' sizes and key ranges: small blocks are merged size-tiered, and a
        # block is rewritten without the removed chunks' postings only if a dead key falls in its range.
        meta = await conn.fetch(
            "SELECT term_id, block_id, n, min_key, max_key FROM bm25_blocks WHERE term_id = ANY ($1::integer[]) "
            "AND (n < $2 OR term_id = ANY ($3::integer[])) ORDER BY term_id, block_id",
            pending,
            block_postings,
            sorted(with_dead),
        )
        by_term: dict[int, list[asyncpg.Record]] = {}
        for r in meta:
            by_term.setdefault(int(r["term_id"]), []).append(r)
        dead_sorted = np.sort(dead)
        chosen: dict[int, list[int]] = {}
        for term, blocks in by_term.items():
            picked = set(merge_plan([int(b["n"]) for b in blocks], block_postings))
            if term in with_dead:
                picked.update(i for i, b in enumerate(blocks) if _holds_any(dead_sorted, b["min_key"], b["max_key"]))
            if picked:
                chosen[term] = [int(blocks[i]["block_id"]) for i in sorted(picked)]
        drop = [block for blocks in chosen.values() for block in blocks]
        postings = {
            int(r["block_id"]): r["postings"]
            for r in await conn.fetch(
                "SELECT block_id, postings FROM bm25_blocks WHERE term_id = ANY ($1::integer[]) "
                "AND block_id = ANY ($2::bigint[])",
                list(chosen),
                drop,
            )
        }
        new_terms: list[int] = []
        new_n: list[int] = []
        new_min: list[int] = []
        new_max: list[int] = []
        new_blobs: list[bytes] = []
        dropped = 0
        for term, blocks in chosen.items():
            merged = np.frombuffer(b"".join(postings[block] for block in blocks), dtype=POSTING)
            if term in with_dead:
                keep = ~np.isin(merged["key"], dead)
                dropped += int((~keep).sum())
                merged = merged[keep]
            merged = merged[np.argsort(merged["key"], kind="stable")]
            for part in _split(merged, block_postings):
                new_terms.append(term)
                new_n.append(len(part))
                new_min.append(int(part["key"][0]))
                new_max.append(int(part["key"][-1]))
                new_blobs.append(part.tobytes())
        if drop:
            await conn.execute("DELETE FROM bm25_blocks WHERE block_id = ANY ($1::bigint[])", drop)
        if new_terms:
            await conn.execute(
                "INSERT INTO bm25_blocks (term_id, n, min_key, max_key, postings) "
                "SELECT * FROM unnest($1::integer[], $2::integer[], $3::integer[], $4::integer[], $5::bytea[])",
                new_terms,
                new_n,
                new_min,
                new_max,
                new_blobs,
            )
        await conn.execute("DELETE FROM bm25_pending WHERE term_id = ANY ($1::integer[])", pending)
        if len(dead) and not await conn.fetchval("SELECT EXISTS (SELECT 1 FROM bm25_pending WHERE has_dead)"):
            # Every term pending when these keys died has been cleared of them (a removal marks its terms
            # pending in the same transaction that records the dead key): they are gone from every block.
            await conn.execute("DELETE FROM bm25_dead WHERE chunk_key = ANY ($1::integer[])", dead.tolist())
        return CompactionReport(len(pending), len(drop), len(new_terms), dropped)


async def compact(
    pool: asyncpg.Pool, *, terms_per_batch: int = 500, block_postings: int = 8192, max_batches: int | None = None
) -> CompactionReport:
    """Merge the pending terms' blocks until none is pending (or ``max_batches`` ran), one batch a
    transaction; one compacting session at a time (another that holds the lock: nothing is done here)."""
    total = CompactionReport(0, 0, 0, 0)
    async with advisory_session(pool, COMPACTION_LOCK) as conn:
        if conn is None:
            return total
        batches = 0
        while max_batches is None or batches < max_batches:
            report = await compact_batch(conn, terms=terms_per_batch, block_postings=block_postings)
            if report is None:
                break
            batches += 1
            total = CompactionReport(
                total.terms + report.terms,
                total.blocks_read + report.blocks_read,
                total.blocks_written + report.blocks_written,
                total.dead_dropped + report.dead_dropped,
            )
    return total


async def compact_forever(pool: asyncpg.Pool, every_s: float, **kwargs: Any) -> None:
    """:func:`compact` every ``every_s`` seconds until cancelled; a failure is logged and retried next time."""

    async def step() -> None:
        report = await compact(pool, **kwargs)
        if report.terms:
            log.info(
                "lexical index compacted",
                extra={
                    "terms": report.terms,
                    "blocks_read": report.blocks_read,
                    "blocks_written": report.blocks_written,
                    "dead_dropped": report.dead_dropped,
                },
            )

    await run_every(every_s, step, failure="lexical index compaction failed", log=log, wait_first=True)
