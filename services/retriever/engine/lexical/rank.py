"""The lexical leg: the ``k`` best chunks by BM25 that pass the filters, the best checked against the filters in
passes sized by the pass rate (or the filter resolved first, or failing chunks dropped by the doc values)."""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import asyncpg
import numpy as np

from services.retriever.engine.doc_values.columns import DocValues
from services.retriever.engine.doc_values.follower import DocValuesFollower
from services.retriever.engine.filters.fields import FilterClause, filter_clause
from services.retriever.engine.filters.passing import PassingSet, filter_first_max, passing_chunks
from services.retriever.engine.lexical.blocks import TermView
from services.retriever.engine.lexical.postings import (
    BlockRef,
    BlockVanished,
    Bm25Scoring,
    KeyScores,
    bm25_scores,
    by_term_id,
    dead_keys,
    query_blocks,
    read_terms,
    term_postings,
    term_weight,
    view_scores,
)
from services.retriever.engine.lexical.postings_cache import PostingsCache
from services.retriever.engine.lexical.pruning import pruned_scores
from services.retriever.engine.lexical.stats import CorpusStats
from services.retriever.engine.scored import Scored
from shared.models import SearchFilters

if TYPE_CHECKING:
    from shared.settings import RetrievalSettings


@dataclass(frozen=True)
class Bm25Params:
    """Okapi BM25 ``k1``/``b`` and BM25F field weights (text terms weigh 1)."""

    k1: float = 0.9
    b: float = 0.4
    title_weight: float = 1.0
    section_weight: float = 0.0
    pruning: bool = True  # skip what cannot reach the top k (exact either way); False: score every posting
    threads: int = 1  # threads a search's sums over many postings are split across (the same sums)

    @classmethod
    def from_settings(cls, s: RetrievalSettings) -> Bm25Params:
        """The BM25 parameters of the retrieval settings."""
        return cls(
            s.bm25_k1, s.bm25_b, s.bm25_title_weight, s.bm25_section_weight, s.bm25_pruning, s.bm25_scoring_threads
        )


async def bm25_search(
    pool: asyncpg.Pool,
    query: str,
    k: int,
    filters: SearchFilters | FilterClause,
    params: Bm25Params,
    stats: CorpusStats,
    *,
    passing: PassingSet | None = None,
    cache: PostingsCache | None = None,
    doc_values: DocValuesFollower | None = None,
    tally: PostingsTally | None = None,
) -> list[Scored]:
    """Okapi BM25 (Lucene's IDF ``ln(1 + (N - df + .5)/(df + .5))``) over every posting of the query's terms.

    The query is analysed like the stored text (``to_tsvector('english')``); scores are corpus-wide BM25
    (statistics over every chunk), the filters only restrict which chunks are returned (``k`` of them when
    that many pass and match a query term). ``passing``: the filter already resolved (:func:`passing_chunks`);
    ``doc_values``: the filter columns held in memory, used (brought up to date first) under a filter that
    narrows a held column (:func:`~services.retriever.doc_values.narrows`) and is not resolved first; ``tally``:
    counts the postings read (measurements)."""
    scoring = Bm25Scoring(params.k1, params.b, params.title_weight, params.section_weight, await stats.get(pool))
    clause = filters if isinstance(filters, FilterClause) else filter_clause(filters)
    first = filter_first_max(k, scoring.counts.chunks) if clause.restrictive else 0
    values = None
    if doc_values is not None and clause.narrows and (passing is None or passing.chunks is None):
        values = await doc_values.current(pool)
    return await bm25_rank(
        pool,
        query,
        k,
        clause,
        scoring,
        filter_first_max=first,
        passing=passing,
        cache=cache,
        doc_values=values,
        pruning=params.pruning,
        threads=params.threads,
        tally=tally,
    )


_RESOLVE_SQL = """
SELECT b.chunk_key, b.chunk_id
FROM bm25_chunks b
JOIN chunks c ON c.chunk_id = b.chunk_id
JOIN documents d ON d.document_id = c.document_id
WHERE b.chunk_key = ANY ($1::integer[]) AND {where}"""


#: The fewest candidates a pass resolves through the filters.
FIRST_PASS = 256


#: With no pass rate to go by (none of the candidates so far passed), a pass reads this many times more.
PASS_GROWTH = 8


#: A pass sized from a pass rate (the planner's, or the one seen so far) reads this much more than the rate
#: says it needs: a rate read off a few hundred candidates is rough, and a pass too short costs a round trip.
PASS_MARGIN = 1.25


#: A first pass sized by the planner's share reads at most this many times the pass taken without it.
FIRST_PASS_MAX_GROWTH = 4


def next_pass(k: int, found: int, resolved: int, *, share: float | None = None, few_fail: bool = False) -> int:
    """How many of the best candidates to have resolved through the filters after the next pass, when
    ``resolved`` were and ``found`` of them passed, ``k`` wanted (``found < k``).

    ``few_fail``: the filters are the defaults alone (retracted papers and priority 0 out), or the doc values
    dropped every chunk certain to fail: nearly every candidate passes, so the first pass is ``k`` and the
    margin (``PASS_MARGIN``), a round trip more in the rare search whose best are found to fail. Each candidate
    checked is a few random reads (chunk, document): at 3x10^6 chunks, 256 candidates not in memory took ~99 ms
    and 20 took ~9.5 (``bench/filter_check_cost.py``), so a pass of 256 for 20 wanted was most of a search's time.

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
        if few_fail:
            return math.ceil(k * PASS_MARGIN)
        base = max(FIRST_PASS, 2 * k)
        if share is None or share <= 0:
            return base
        return min(FIRST_PASS_MAX_GROWTH * base, max(base, math.ceil(k / min(share, 1.0) * PASS_MARGIN)))
    if found == 0:
        return max(FIRST_PASS, resolved * PASS_GROWTH)
    return resolved + max(FIRST_PASS, math.ceil(missing * resolved / found * PASS_MARGIN))


async def bm25_rank(
    pool: asyncpg.Pool,
    query: str,
    k: int,
    filters: SearchFilters | FilterClause,
    scoring: Bm25Scoring,
    *,
    filter_first_max: int = 0,
    passing: PassingSet | None = None,
    cache: PostingsCache | None = None,
    doc_values: DocValues | None = None,
    pruning: bool = False,
    threads: int = 1,
    tally: PostingsTally | None = None,
) -> list[Scored]:
    """The ``k`` best chunks by BM25 that pass ``filters``, best first (ties: chunk id). The query's terms are
    scored exactly, every posting of them (``pruning`` False) or all but those that cannot reach the ``k`` best
    passing chunks (:func:`~services.retriever.engine.lexical.pruning.pruned_scores`: the same scores for
    every chunk that can), sums over many postings split across ``threads`` (the same sums,
    :func:`~services.retriever.engine.lexical.postings.view_scores`); ``tally`` counts the postings read. The best
    chunks are then checked against the filters in passes sized by the pass rate (:func:`next_pass`) until ``k``
    pass or none is left. A filter
    that passes at most ``filter_first_max`` (> 0) chunks is resolved first instead (its chunks' keys, then the
    scores of those alone); ``passing``, when the caller resolved the filter already (:func:`passing_chunks`),
    is used as it is; ``cache``: common terms held in memory (:class:`PostingsCache`). ``doc_values`` (current,
    :class:`~services.retriever.engine.doc_values.follower.DocValuesFollower`): chunks that fail the filter for certain
    are dropped before the best are checked, and a filter they hold whole is not resolved first (dropping its
    failing chunks does the same, without reading them). ``filters`` may come as their clause
    (:func:`~services.retriever.engine.filters.fields.filter_clause`), derived once for a search."""
    if scoring.counts.chunks == 0 or k <= 0:
        return []
    async with pool.acquire() as conn:
        clause = filters if isinstance(filters, FilterClause) else filter_clause(filters)
        where, fparams = clause.where[2], clause.params
        held = doc_values is not None and clause.held_whole
        checked: dict[int, str | None] = {}  # key -> its chunk id if it passes the filters, None if not

        async def resolve(keys: list[int]) -> list[tuple[int, str]]:
            """The keys of ``keys`` that pass the filters, with their chunk ids: those checked before in this
            search (a pruned search's threshold checks the best partial scores, mostly the final best) from
            ``checked``, the others in SQL (and remembered)."""
            unknown = [key for key in keys if key not in checked]
            if unknown:
                rows = await conn.fetch(_RESOLVE_SQL.format(where=where), unknown, *fparams)
                checked.update(dict.fromkeys(unknown))
                checked.update((int(r["chunk_key"]), str(r["chunk_id"])) for r in rows)
            return [(key, chunk_id) for key in keys if (chunk_id := checked[key]) is not None]

        refs = await query_blocks(conn, query)
        if not refs:
            return []
        dead = await dead_keys(conn)
        if passing is None and filter_first_max > 0 and not held:
            passing = await passing_chunks(conn, clause, filter_first_max)
        share = None
        if passing is not None and passing.planned is not None and not held:
            share = passing.planned / max(scoring.counts.chunks, 1)
        sizing = _PassSizing(share, few_fail=not clause.restrictive or held)
        if pruning:
            scores = await _pruned(
                conn,
                query,
                refs,
                k,
                clause.filters,
                scoring,
                dead,
                resolve,
                sizing,
                passing,
                cache,
                doc_values,
                threads,
                tally,
            )
        else:
            scores = await _every_posting(conn, query, refs, scoring, dead, cache, threads, tally)
        if passing is not None and passing.chunks is not None:
            ids = passing.chunks
            keys = np.fromiter(ids, dtype=np.int64, count=len(ids))
            pairs = zip(keys, scores.at(keys), strict=True)
            hits = [Scored(ids[int(key)], float(score)) for key, score in pairs if score > 0]
            return sorted(hits, key=lambda h: (-h.score, h.chunk_id))[:k]
        if doc_values is not None:
            scores = scores.times(doc_values.may_pass(scores.size, clause.filters))
        # The best candidates in one fixed order, as many as each pass wants, ties at the end included.
        passed = await _first_passing(scores.best, k, resolve, sizing)
        found = scores.at(np.array([key for key, _ in passed], dtype=np.int64))
        hits = [Scored(chunk_id, float(score)) for (_, chunk_id), score in zip(passed, found, strict=True)]
    return sorted(hits, key=lambda h: (-h.score, h.chunk_id))[:k]


#: Resolves chunk keys through the filters: those that pass, with their chunk ids.
_Resolve = Callable[[list[int]], Awaitable[list[tuple[int, str]]]]


async def _first_passing(
    ranked: Callable[[int], np.ndarray], wanted: int, resolve: _Resolve, sizing: _PassSizing
) -> list[tuple[int, str]]:
    """The candidates that pass the filters (keys and chunk ids), checked best first in passes sized by
    ``sizing`` (:func:`next_pass`) until ``wanted`` pass or none is left: ``ranked(n)`` gives the best ``n`` (or
    more: ties at the end; all of them when fewer), in one fixed order."""
    passed: list[tuple[int, str]] = []
    resolved = 0
    while len(passed) < wanted:
        best = ranked(sizing.next(wanted, len(passed), resolved))
        batch = best[resolved:]
        if not len(batch):
            break
        passed.extend(await resolve(batch.tolist()))
        resolved = len(best)
    return passed


@dataclass(frozen=True)
class _PassSizing:
    """How one search sizes its check passes (:func:`next_pass`): the planner's share of chunks passing, and
    whether few candidates fail."""

    share: float | None
    few_fail: bool

    def next(self, k: int, found: int, resolved: int) -> int:
        return next_pass(k, found, resolved, share=self.share, few_fail=self.few_fail)


@dataclass
class PostingsTally:
    """Searches run, postings read (from memory or the store) and postings scored by the lexical leg, for
    measurements (a pruned search reads a common term's blocks but scores only the chunks it still needs)."""

    searches: int = 0
    postings: int = 0
    scored: int = 0

    def add(self, postings: int, scored: int | None = None) -> None:
        self.searches += 1
        self.postings += postings
        self.scored += postings if scored is None else scored


async def _pruned(
    conn: asyncpg.Connection,
    query: str,
    refs: list[BlockRef],
    k: int,
    filters: SearchFilters,
    scoring: Bm25Scoring,
    dead: np.ndarray,
    resolve: _Resolve,
    sizing: _PassSizing,
    passing: PassingSet | None,
    cache: PostingsCache | None,
    doc_values: DocValues | None,
    threads: int,
    tally: PostingsTally | None,
) -> KeyScores:
    """The pruned scores: chunks known to pass are a resolved filter's, else the threshold's candidates checked
    against the filters by ``resolve``, best first in passes sized as the leg's own (``sizing``) until ``k``
    pass (the check the best candidates go through anyway, which remembers them). A block merged away while the
    search ran: the exhaustive pass, which reads again."""

    listed = by_term_id(refs)

    async def read(wanted: Sequence[BlockRef]) -> dict[int, TermView]:
        return await read_terms(conn, wanted, cache, listed=listed) if wanted else {}

    async def check(keys: np.ndarray, wanted: int) -> np.ndarray:
        passed = await _first_passing(lambda count: keys[:count], wanted, resolve, sizing)
        return np.array([key for key, _ in passed], dtype=np.int64)

    known = None
    if passing is not None and passing.chunks is not None:
        known = np.fromiter(passing.chunks, dtype=np.int64, count=len(passing.chunks))
    may_pass = None
    if doc_values is not None:
        values = doc_values

        def may_pass(size: int) -> np.ndarray:
            return values.may_pass(size, filters)

    try:
        pruned = await pruned_scores(
            refs,
            scoring,
            dead,
            k,
            read,
            passing=known,
            check=check,
            may_pass=may_pass,
            probe=FIRST_PASS,
            threads=threads,
        )
    except BlockVanished:
        return await _read_again(conn, query, scoring, dead, tally)
    if tally is not None:
        tally.add(pruned.postings_read, pruned.postings_scored)
    return pruned.scores


async def _every_posting(
    conn: asyncpg.Connection,
    query: str,
    refs: list[BlockRef],
    scoring: Bm25Scoring,
    dead: np.ndarray,
    cache: PostingsCache | None,
    threads: int,
    tally: PostingsTally | None,
) -> KeyScores:
    """The exhaustive scores: every posting of the query's terms (``refs``), the terms held in ``cache`` from
    memory, summed on ``threads``. A block merged away between the listing and the read: read again in one
    statement."""
    try:
        views = await read_terms(conn, refs, cache)
    except BlockVanished:
        return await _read_again(conn, query, scoring, dead, tally)
    terms = sorted(views.items())
    weights = {ref.term_id: term_weight(scoring, ref.df) for ref in refs}
    if tally is not None:
        tally.add(sum(len(view) for _, view in terms))
    views_weighed = [(view, weights[term_id]) for term_id, view in terms]
    return KeyScores(view_scores(views_weighed, scoring, _key_space(refs), dead, threads=threads))


async def _read_again(
    conn: asyncpg.Connection, query: str, scoring: Bm25Scoring, dead: np.ndarray, tally: PostingsTally | None
) -> KeyScores:
    """Every posting of ``query``'s terms read in one statement (the listing and the postings of one moment: a
    block merged away between a search's listing and its read (compaction) cannot be missed), scored."""
    postings = await term_postings(conn, query)
    if tally is not None:
        tally.add(len(postings))
    return KeyScores(bm25_scores(postings, scoring, dead))


def _key_space(refs: Sequence[BlockRef]) -> int:
    """One more than the largest key the blocks ``refs`` hold."""
    return max(ref.max_key for ref in refs) + 1
