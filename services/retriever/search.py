"""Dense, lexical (BM25) and hybrid search over the store; rerank and MMR; hits carry what a citation needs.

Pipeline of :meth:`HybridSearcher.search`:

1. dense (pgvector HNSW, iterative scans under filters) and/or lexical (exact BM25 over the store's packed
   posting blocks, scored here: ``lexical_store``) rankings, each ``max(top_k, fusion_depth)`` deep;
2. reciprocal rank fusion with weights (hybrid modes);
3. the document-priority boost and the evidence/recency blend (:func:`priority_boosted`,
   :func:`evidence_blended`; both off by default);
4. at most ``max_chunks_per_document`` passages of one paper;
5. ``hybrid+rerank``: the first ``top_k`` candidates reranked (cross-encoder or Claude), the evidence/recency
   blend applied again to the reranker's scores (they replace the fused ones);
6. optional MMR diversity over the candidates' vectors;
7. the first ``top_n`` returned (past ``top_k`` the fused order continues).
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal, Self

import asyncpg
import numpy as np

from services.retriever.doc_values import narrows
from services.retriever.doc_values_store import DocValuesFollower
from services.retriever.fusion import ConvexFusion, ReciprocalRankFusion
from services.retriever.lexical_store import (
    Bm25Scoring,
    CorpusCounts,
    PassingSet,
    bm25_rank,
    corpus_counts,
    passing_chunks,
)
from services.retriever.mmr import mmr_select
from services.retriever.postings_cache import PostingsCache
from services.retriever.store import (
    Scored,
    VectorIndex,
    hit_rows,
    is_restrictive,
    nearest_chunks,
    nearest_of_chunks,
    vectors_of,
    with_mesh_descendants,
)
from shared.models import (
    NEUTRAL_EVIDENCE_WEIGHT,
    PRIORITY_EXCLUDED,
    PRIORITY_NORMAL,
    CitationMetrics,
    SearchFilters,
    SearchHit,
)
from shared.settings import DEFAULT_IVFFLAT_PROBES
from shared.sources import record_url

if TYPE_CHECKING:
    from services.retriever.rerank import Reranker
    from shared.settings import RetrievalSettings

log = logging.getLogger(__name__)

Mode = Literal["dense", "lexical", "hybrid", "hybrid+rerank"]


@dataclass(frozen=True)
class Bm25Params:
    """Okapi BM25 ``k1``/``b`` and BM25F field weights (text terms weigh 1)."""

    k1: float = 0.9
    b: float = 0.4
    title_weight: float = 1.0
    section_weight: float = 0.0

    @classmethod
    def from_settings(cls, s: RetrievalSettings) -> Bm25Params:
        """The BM25 parameters of the retrieval settings."""
        return cls(s.bm25_k1, s.bm25_b, s.bm25_title_weight, s.bm25_section_weight)


#: The least filter-first bound (see :func:`filter_first_max`).
FILTER_FIRST_MAX_CHUNKS = 2_000


def filter_first_max(k: int, chunks: int) -> int:
    """How many chunks a filter (beyond the retracted flag and priority) may pass and still be resolved
    first: lexically its chunks' keys in one statement, then their scores; densely exact distances over its
    chunks. Past it the best chunks are checked against the filter instead (lexical passes, HNSW iterative
    scans). Filter-first reads about ``s * N`` chunks for a filter passing a share ``s`` of ``N``; the check
    reads about ``k / s`` candidates: they break even at ``s * N = sqrt(k * N)`` chunks (10,000 for k = 100
    at 10^6 chunks), never below ``FILTER_FIRST_MAX_CHUNKS``."""
    return max(FILTER_FIRST_MAX_CHUNKS, int(math.sqrt(max(k, 1) * max(chunks, 0))))


async def dense_search(
    pool: asyncpg.Pool,
    index: VectorIndex,
    query_vector: np.ndarray,
    k: int,
    filters: SearchFilters,
    ef_search: int,
    *,
    first_max: int = FILTER_FIRST_MAX_CHUNKS,
    passing: PassingSet | None = None,
    probes: int = DEFAULT_IVFFLAT_PROBES,
) -> list[Scored]:
    """Nearest chunks by cosine similarity (1 - cosine distance): the table's pgvector index (HNSW searched
    ``ef_search`` deep or IVFFlat ``probes`` lists) with iterative scans, or, under a filter that passes at
    most ``first_max`` chunks (:func:`filter_first_max`), exact over them. ``passing``: the filter already
    resolved by the caller (:func:`passing_chunks`), used as it is."""
    if passing is None and is_restrictive(filters):
        passing = await passing_chunks(pool, filters, first_max)
    if passing is not None and passing.chunks is not None:
        rows = await nearest_of_chunks(pool, index, query_vector, k, list(passing.chunks.values()))
    else:
        rows = await nearest_chunks(pool, index, query_vector, k, filters, ef_search, probes=probes)
    # relaxed_order may return near-ties out of order: sort by the exact score.
    out = [Scored(chunk_id, score) for chunk_id, score in rows]
    return sorted(out, key=lambda s: -s.score)


#: A store with fewer chunks than this is counted within the search that needs it (well under a millisecond at
#: that size) once its counts are ``small_ttl_s`` old: the statistics of a store still filling are never stale
#: for long, e.g. zero while its first documents arrive.
SYNC_COUNT_BELOW = 10_000


@dataclass
class CorpusStats:
    """N and the mean field lengths of the chunks, cached for ``ttl_s`` (BM25 barely moves with them).

    An empty store is counted again by every search, and a store of fewer than ``sync_below`` chunks by the
    search that finds its counts ``small_ttl_s`` old (cheap, and its statistics change fast: a cached zero
    would hide its first documents for a minute). The legs of one search, and the searches of one moment,
    share a read. A larger store is counted in the background: an expired value is still returned while one
    task reads the new one (counting 10^6 chunks takes a while: no search should wait for it)."""

    ttl_s: float = 60.0
    sync_below: int = SYNC_COUNT_BELOW
    small_ttl_s: float = 1.0
    _value: CorpusCounts | None = None
    _at: float = 0.0
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    _refresh: asyncio.Task[None] | None = None

    async def get(self, pool: asyncpg.Pool) -> CorpusCounts:
        """The corpus counts: read within the call for a small store (or the first time), else the cached ones
        (read again in the background once older than ``ttl_s``)."""
        if self._stale_small():
            started = self._at
            async with self._lock:  # callers that waited for another's read take its result
                if self._value is None or (self._stale_small() and self._at == started):
                    await self._read(pool)
        elif time.monotonic() - self._at >= self.ttl_s and (self._refresh is None or self._refresh.done()):
            self._refresh = asyncio.create_task(self._read(pool))
        assert self._value is not None
        return self._value

    def _stale_small(self) -> bool:
        """Nothing read yet, an empty store, or a small store's counts ``small_ttl_s`` old: read them now."""
        if self._value is None or self._value.chunks == 0:
            return True
        return self._value.chunks < self.sync_below and time.monotonic() - self._at >= self.small_ttl_s

    async def _read(self, pool: asyncpg.Pool) -> None:
        try:
            self._value = await corpus_counts(pool)
            self._at = time.monotonic()
        except Exception:
            if self._value is None:
                raise
            log.warning("corpus counts not refreshed; the cached ones stay", exc_info=True)

    def invalidate(self) -> None:
        """Forget the cached counts: the next :meth:`get` reads them again."""
        self._value = None


async def bm25_search(
    pool: asyncpg.Pool,
    query: str,
    k: int,
    filters: SearchFilters,
    params: Bm25Params,
    stats: CorpusStats,
    *,
    passing: PassingSet | None = None,
    cache: PostingsCache | None = None,
    doc_values: DocValuesFollower | None = None,
) -> list[Scored]:
    """Okapi BM25 (Lucene's IDF ``ln(1 + (N - df + .5)/(df + .5))``) over every posting of the query's terms.

    The query is analysed like the stored text (``to_tsvector('english')``); scores are corpus-wide BM25
    (statistics over every chunk), the filters only restrict which chunks are returned (``k`` of them when
    that many pass and match a query term). ``passing``: the filter already resolved (:func:`passing_chunks`);
    ``doc_values``: the filter columns held in memory, used (brought up to date first) under a filter that
    narrows a held column (:func:`~services.retriever.doc_values.narrows`) and is not resolved first."""
    scoring = Bm25Scoring(params.k1, params.b, params.title_weight, params.section_weight, await stats.get(pool))
    restrictive = is_restrictive(filters)
    first = filter_first_max(k, scoring.counts.chunks) if restrictive else 0
    values = None
    if doc_values is not None and narrows(filters) and (passing is None or passing.chunks is None):
        values = await doc_values.current(pool)
    return await bm25_rank(
        pool, query, k, filters, scoring, filter_first_max=first, passing=passing, cache=cache, doc_values=values
    )


async def hydrate(pool: asyncpg.Pool, chunk_ids: Sequence[str]) -> dict[str, asyncpg.Record]:
    """The stored rows (chunk, document metadata, text) of ``chunk_ids``, by chunk id; unknown ids are absent."""
    return await hit_rows(pool, chunk_ids)


def _url(r: asyncpg.Record) -> str | None:
    return record_url(r["source"], r["source_id"], r["pmid"], r["pmcid"])


def _citation_metrics(r: asyncpg.Record) -> CitationMetrics | None:
    """The iCite metrics :func:`hit_rows` joined to the hit's PMID (None when none were imported)."""
    if r["icite_pmid"] is None:
        return None
    return CitationMetrics(
        citation_count=r["icite_citation_count"],
        relative_citation_ratio=r["icite_relative_citation_ratio"],
        nih_percentile=r["icite_nih_percentile"],
        year=r["icite_year"],
        provisional=r["icite_provisional"],
    )


def limit_per_document(
    ids: list[tuple[str, float]], doc_of: dict[str, str], per_doc: int | None
) -> list[tuple[str, float]]:
    """``ids`` in order, keeping at most ``per_doc`` chunks of one document (None: all); ``doc_of`` maps
    chunk id to document id (a chunk missing from it counts as its own document)."""
    if per_doc is None:
        return ids
    seen: dict[str, int] = {}
    out = []
    for cid, score in ids:
        doc = doc_of.get(cid, cid)
        if seen.get(doc, 0) < per_doc:
            seen[doc] = seen.get(doc, 0) + 1
            out.append((cid, score))
    return out


def priority_boosted(
    ranked: list[tuple[str, float]], priority_of: dict[str, int], boost: float
) -> list[tuple[str, float]]:
    """``ranked`` re-scored by document priority and sorted again (ties keep their order):
    ``score + boost * |score| * (priority - 50) / 50``, so with ``boost`` 0.1 a high-priority (100) document's
    score grows by 10 %, a low one's (10) shrinks by 8 %, a normal one's (50) is unchanged. A chunk whose
    priority is unknown counts as normal. ``boost`` 0 leaves ``ranked`` as it is."""
    if not boost:
        return ranked
    rescored = [
        (cid, score + boost * abs(score) * (priority_of.get(cid, PRIORITY_NORMAL) - PRIORITY_NORMAL) / PRIORITY_NORMAL)
        for cid, score in ranked
    ]
    return sorted(rescored, key=lambda cs: -cs[1])


def recency(year: int | None, this_year: int, half_life_years: float) -> float:
    """A source's recency, 1 this year (or later) halving every ``half_life_years``:
    ``0.5 ** (max(0, this_year - year) / half_life_years)``; unknown year: 0.5 (one half-life, neutral)."""
    if year is None:
        return 0.5
    return float(0.5 ** (max(0, this_year - year) / half_life_years))


@dataclass(frozen=True)
class EvidenceBlend:
    """How evidence weight and recency move a ranking score (``EVIDENTIA_RETRIEVAL_EVIDENCE_WEIGHT``,
    ``_RECENCY_WEIGHT``, ``_RECENCY_HALF_LIFE_YEARS``):

    ``score + |score| * (evidence_weight * (e - 0.5) + recency_weight * (r - 0.5))``

    with ``e`` the source's evidence weight (0-1; unknown: 0.5) and ``r`` its :func:`recency`. The change is
    relative to the score itself, so it means the same whatever the scale of the mode's scores (RRF ~0.016,
    cosine ~0.5, BM25 ~10; a negative reranker logit moves the right way too); an unclassified source of
    unknown year is never moved; with both weights 0 the ranking is left exactly as it is."""

    evidence_weight: float = 0.0
    recency_weight: float = 0.0
    half_life_years: float = 10.0
    this_year: int | None = None
    """The year ages are counted from (None: the current UTC year)."""

    @property
    def active(self) -> bool:
        return bool(self.evidence_weight or self.recency_weight)

    def factor(self, evidence: float | None, year: int | None, this_year: int) -> float:
        """The relative change of a score: ``evidence_weight * (e - 0.5) + recency_weight * (r - 0.5)``."""
        e = NEUTRAL_EVIDENCE_WEIGHT if evidence is None else evidence
        r = recency(year, this_year, self.half_life_years)
        return self.evidence_weight * (e - NEUTRAL_EVIDENCE_WEIGHT) + self.recency_weight * (r - 0.5)


def evidence_blended(
    ranked: list[tuple[str, float]], meta_of: Mapping[str, tuple[float | None, int | None]], blend: EvidenceBlend
) -> list[tuple[str, float]]:
    """``ranked`` re-scored by :class:`EvidenceBlend` and sorted again, best first (ties keep their order, so
    the result is deterministic); ``meta_of`` maps a chunk id to its document's (evidence weight, year), a chunk
    missing from it counts as unclassified and undated (unchanged). An inactive blend returns ``ranked`` itself."""
    if not blend.active:
        return ranked
    this_year = blend.this_year if blend.this_year is not None else datetime.now(UTC).year
    rescored = []
    for cid, score in ranked:
        evidence, year = meta_of.get(cid, (None, None))
        rescored.append((cid, score + abs(score) * blend.factor(evidence, year, this_year)))
    return sorted(rescored, key=lambda cs: -cs[1])


@dataclass
class SearchResult:
    hits: list[SearchHit]
    took_ms: float
    reranker: str | None = None


class HybridSearcher:
    """Runs dense and/or lexical search, fuses, reranks, diversifies; the single search entry point."""

    def __init__(
        self,
        pool: asyncpg.Pool,
        index: VectorIndex,
        fusion: ReciprocalRankFusion | None = None,
        ef_search: int = 100,
        *,
        bm25: Bm25Params | None = None,
        fusion_depth: int = 100,
        stats: CorpusStats | None = None,
        mmr_lambda: float = 0.7,
        convex: ConvexFusion | None = None,
        prf_docs: int = 0,
        prf_weight: float = 0.5,
        priority_boost: float = 0.0,
        evidence: EvidenceBlend | None = None,
        postings_cache: PostingsCache | None = None,
        ivfflat_probes: int = DEFAULT_IVFFLAT_PROBES,
        doc_values: DocValuesFollower | None = None,
    ):
        self.pool = pool
        self.index = index
        self.fusion = fusion or ReciprocalRankFusion()
        self.ef_search = ef_search
        self.bm25 = bm25 or Bm25Params()
        self.fusion_depth = fusion_depth
        self.stats = stats or CorpusStats()
        self.mmr_lambda = mmr_lambda
        self.convex = convex
        """When set, hybrid modes fuse normalised scores with it instead of reciprocal ranks."""
        self.prf_docs = prf_docs
        """Dense pseudo-relevance feedback: the first ranking's top ``prf_docs`` chunks move the query vector."""
        self.prf_weight = prf_weight
        self.priority_boost = priority_boost
        """Blend of document priority into the fused score (:func:`priority_boosted`; 0: off)."""
        self.evidence = evidence or EvidenceBlend()
        """Blend of evidence weight and recency into the ranking score (:func:`evidence_blended`; default off)."""
        self.postings_cache = postings_cache
        """Common terms' posting blocks held in memory for the lexical leg (None: every search reads them)."""
        self.ivfflat_probes = ivfflat_probes
        """IVFFlat lists a dense search reads when the vector table's index is IVFFlat (HNSW: ``ef_search``)."""
        self.doc_values = doc_values
        """Chunks' filter columns held in memory for the lexical leg under broad filters (None: checked in SQL)."""

    @classmethod
    def from_settings(
        cls,
        pool: asyncpg.Pool,
        index: VectorIndex,
        settings: RetrievalSettings,
        *,
        ef_search: int = 100,
        stats: CorpusStats | None = None,
        postings_cache: PostingsCache | None = None,
        ivfflat_probes: int = DEFAULT_IVFFLAT_PROBES,
        doc_values: DocValuesFollower | None = None,
    ) -> Self:
        """A searcher configured by the retrieval settings (fusion, BM25, PRF, MMR) over ``pool`` and ``index``."""
        return cls(
            pool,
            index,
            ReciprocalRankFusion(settings.rrf_k, [settings.dense_weight, settings.lexical_weight]),
            ef_search,
            bm25=Bm25Params.from_settings(settings),
            fusion_depth=settings.fusion_depth,
            stats=stats,
            mmr_lambda=settings.mmr_lambda,
            convex=ConvexFusion([settings.dense_weight, settings.lexical_weight])
            if settings.fusion == "convex"
            else None,
            prf_docs=settings.prf_docs,
            prf_weight=settings.prf_weight,
            priority_boost=settings.priority_boost,
            evidence=EvidenceBlend(settings.evidence_weight, settings.recency_weight, settings.recency_half_life_years),
            postings_cache=postings_cache,
            ivfflat_probes=ivfflat_probes,
            doc_values=doc_values,
        )

    async def dense_search(
        self,
        query_vector: np.ndarray,
        k: int,
        filters: SearchFilters,
        ef_search: int,
        *,
        passing: PassingSet | None = None,
    ) -> list[Scored]:
        """The ``k`` nearest chunks to ``query_vector`` that pass ``filters``, best first (``passing``: the
        filter resolved already, :meth:`passing_set`)."""
        # The bound matters only when the filter is not resolved yet (a hybrid search resolves it once for both).
        needs_bound = passing is None and is_restrictive(filters)
        first_max = filter_first_max(k, (await self.stats.get(self.pool)).chunks) if needs_bound else 0
        return await dense_search(
            self.pool,
            self.index,
            query_vector,
            k,
            filters,
            ef_search,
            first_max=first_max,
            passing=passing,
            probes=self.ivfflat_probes,
        )

    async def lexical_search(
        self, query: str, k: int, filters: SearchFilters, *, passing: PassingSet | None = None
    ) -> list[Scored]:
        """The ``k`` best chunks for ``query`` by BM25 that pass ``filters``, best first."""
        return await bm25_search(
            self.pool,
            query,
            k,
            filters,
            self.bm25,
            self.stats,
            passing=passing,
            cache=self.postings_cache,
            doc_values=self.doc_values,
        )

    async def passing_set(self, filters: SearchFilters, k: int) -> PassingSet | None:
        """A restrictive filter's chunks, resolved once for both legs of a hybrid search when at most
        :func:`filter_first_max` of them pass (else ``PassingSet(None)``: both legs check candidates); None for
        filters that restrict nothing beyond the defaults."""
        if not is_restrictive(filters):
            return None
        return await passing_chunks(self.pool, filters, filter_first_max(k, (await self.stats.get(self.pool)).chunks))

    async def search(
        self,
        query: str,
        query_vector: np.ndarray | None,
        *,
        mode: str,
        top_k: int,
        top_n: int,
        filters: SearchFilters,
        ef_search: int | None = None,
        extra_chunk_ids: Sequence[str] = (),
        lexical_query: str | None = None,
        rerank_query: str | None = None,
        reranker: Reranker | None = None,
        mmr: bool = False,
        mmr_lambda: float | None = None,
    ) -> SearchResult:
        """``query`` is matched lexically unless ``lexical_query`` is given; the reranker reads
        ``rerank_query`` (default ``query``)."""
        start = time.perf_counter()
        filters = await with_mesh_descendants(self.pool, filters)
        hybrid = mode in ("hybrid", "hybrid+rerank")
        depth = max(top_k, self.fusion_depth) if hybrid else max(top_k, top_n)
        dense: list[Scored] = []
        lexical: list[Scored] = []
        # Both legs of a hybrid search under a restrictive filter share one read of what it passes.
        passing = await self.passing_set(filters, depth) if hybrid else None
        legs: list[Coroutine[Any, Any, list[Scored]]] = []
        with_dense, with_lexical = hybrid or mode == "dense", hybrid or mode == "lexical"
        if with_dense:
            if query_vector is None:
                raise ValueError(f"mode {mode!r} needs a query vector")
            legs.append(self.dense_search(query_vector, depth, filters, ef_search or self.ef_search, passing=passing))
        if with_lexical:
            legs.append(self.lexical_search(lexical_query or query, depth, filters, passing=passing))
        # The legs run at once, each on its own connection: the database walks the HNSW graph while the
        # lexical leg's postings are read and scored (one failing cancels the other).
        tasks = [asyncio.ensure_future(leg) for leg in legs]
        try:
            results = await asyncio.gather(*tasks)
        except BaseException:
            for task in tasks:
                task.cancel()
            raise
        if with_dense:
            dense = results[0]
        if with_lexical:
            lexical = results[-1]
        ranked = self._fuse(mode, dense, lexical)
        if self.prf_docs > 0 and query_vector is not None and mode != "lexical" and ranked:
            # Rocchio feedback on the vector (ANCE-PRF style, no training): the query moves towards the mean
            # of the first ranking's best chunks, then the dense leg runs again and is fused again.
            top = [c for c, _ in ranked[: self.prf_docs]]
            vectors = await vectors_of(self.pool, self.index, top)
            if vectors:
                moved = query_vector + self.prf_weight * np.mean([vectors[c] for c in top if c in vectors], axis=0)
                moved = moved / max(float(np.linalg.norm(moved)), 1e-12)
                dense = await self.dense_search(moved, depth, filters, ef_search or self.ef_search, passing=passing)
                ranked = self._fuse(mode, dense, lexical)
        dense_by = {s.chunk_id: s.score for s in dense}
        lexical_by = {s.chunk_id: s.score for s in lexical}
        known = {c for c, _ in ranked}
        extra = [c for c in extra_chunk_ids if c not in known]
        rows = await hydrate(self.pool, [c for c, _ in ranked] + extra)
        # Chunks offered again by a conversation skip the filters, but never a document excluded since (0).
        extra = [c for c in extra if c in rows and rows[c]["priority"] > PRIORITY_EXCLUDED]
        if self.priority_boost:
            ranked = priority_boosted(
                ranked, {c: rows[c]["priority"] for c, _ in ranked if c in rows}, self.priority_boost
            )
        meta_of = {cid: (r["evidence_level"], r["year"]) for cid, r in rows.items()}
        ranked = evidence_blended(ranked, meta_of, self.evidence)
        doc_of = {cid: r["document_id"] for cid, r in rows.items()}
        ranked = limit_per_document(ranked, doc_of, filters.max_chunks_per_document)
        head, tail = ranked[:top_k], ranked[top_k:]
        rerank_by: dict[str, float] = {}
        used: str | None = None
        if mode == "hybrid+rerank" and reranker is not None and head:
            texts = [_rerank_text(rows[c]) for c, _ in head]
            scores = await reranker.rerank(rerank_query or query, texts)
            rerank_by = {c: s for (c, _), s in zip(head, scores, strict=True)}
            order = {c: i for i, (c, _) in enumerate(head)}
            head = sorted(((c, rerank_by[c]) for c, _ in head), key=lambda cs: (-cs[1], order[cs[0]]))
            head = evidence_blended(head, meta_of, self.evidence)  # the reranker's scores replace the fused ones
            used = reranker.name
        if mmr and len(head) > 1:
            vectors = await vectors_of(self.pool, self.index, [c for c, _ in head])
            if len(vectors) == len(head):
                picked = mmr_select(
                    [s for _, s in head],
                    np.stack([vectors[c] for c, _ in head]),
                    min(top_n, len(head)),
                    self.mmr_lambda if mmr_lambda is None else mmr_lambda,
                )
                head = [head[i] for i in picked]
        final = (head + tail)[:top_n]
        final += [(c, 0.0) for c in extra if c in rows]
        hits = []
        for rank, (cid, score) in enumerate(final, start=1):
            r = rows.get(cid)
            if r is None:
                continue
            hits.append(
                SearchHit(
                    chunk_id=cid,
                    document_id=r["document_id"],
                    source=r["source"],
                    source_id=r["source_id"],
                    pmid=r["pmid"],
                    pmcid=r["pmcid"],
                    doi=r["doi"],
                    title=r["title"],
                    journal=r["journal"],
                    year=r["year"],
                    study_type=r["study_type"],
                    evidence_level=r["evidence_level"],
                    priority=r["priority"],
                    citation_metrics=_citation_metrics(r),
                    section=r["section"],
                    text=r["content"],
                    score=score,
                    dense_score=dense_by.get(cid),
                    lexical_score=lexical_by.get(cid),
                    rerank_score=rerank_by.get(cid),
                    rank=rank,
                    url=_url(r),
                )
            )
        return SearchResult(hits, (time.perf_counter() - start) * 1000, used)

    def _fuse(self, mode: str, dense: list[Scored], lexical: list[Scored]) -> list[tuple[str, float]]:
        if mode == "dense":
            return [(s.chunk_id, s.score) for s in dense]
        if mode == "lexical":
            return [(s.chunk_id, s.score) for s in lexical]
        if self.convex is not None:
            return self.convex.fuse([[(s.chunk_id, s.score) for s in dense], [(s.chunk_id, s.score) for s in lexical]])
        return self.fusion.fuse([[s.chunk_id for s in dense], [s.chunk_id for s in lexical]])


def _rerank_text(r: asyncpg.Record) -> str:
    """What a reranker reads: the chunk as it was embedded ("Document: title / Section: ... / text")."""
    return str(r["embedding_text"])
