"""A search as a composition of named stages over one :class:`Search` state (:data:`STAGES`, in order):

1. ``filters``: a MeSH filter's descendants looked up once;
2. ``retrieve``: the dense (pgvector ANN, iterative scans under filters) and/or lexical (exact BM25) legs at
   once, each ``max(top_k, fusion_depth)`` deep, sharing one read of what a restrictive filter passes;
3. ``fuse``: weighted reciprocal rank (or convex) fusion in hybrid modes;
4. ``feedback``: dense pseudo-relevance feedback, the dense leg again from the moved vector, fused again (off by
   default);
5. ``hydrate``: the ranked chunks' stored rows (and the conversation's extra chunks);
6. ``blend``: the document-priority boost and the evidence/recency blend (both off by default), at most
   ``max_chunks_per_document`` passages of one paper;
7. ``rerank``: in ``hybrid+rerank`` the first ``top_k`` reranked, the blend applied again to the reranker's
   scores (they replace the fused ones);
8. ``diversify``: MMR over the candidates' vectors when asked for;

then the first ``top_n`` are returned (past ``top_k`` the fused order continues) as hits that carry what a
citation needs. Each stage's arithmetic lives in its package (``lexical/``, ``vector/``, ``ranking/``,
``filters/``); this module only composes them.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Self

import asyncpg
import numpy as np

from services.retriever.engine.config import SearchConfig
from services.retriever.engine.doc_values.follower import DocValuesFollower
from services.retriever.engine.filters.fields import is_restrictive, with_mesh_descendants
from services.retriever.engine.filters.passing import PassingSet, filter_first_max, passing_chunks
from services.retriever.engine.hits import hit_rows, rerank_text, search_hit
from services.retriever.engine.lexical.postings_cache import PostingsCache
from services.retriever.engine.lexical.rank import bm25_search
from services.retriever.engine.lexical.stats import CorpusStats
from services.retriever.engine.memo import LegMemo
from services.retriever.engine.ranking.blends import evidence_blended, limit_per_document, priority_boosted
from services.retriever.engine.ranking.feedback import moved_query
from services.retriever.engine.ranking.mmr import mmr_select
from services.retriever.engine.scored import Scored
from services.retriever.engine.vector.search import dense_search, vectors_of
from services.retriever.engine.vector.tables import VectorIndex
from shared.models import PRIORITY_EXCLUDED, SearchFilters, SearchHit
from shared.settings import DEFAULT_IVFFLAT_PROBES

if TYPE_CHECKING:
    from services.retriever.engine.ranking.rerank import Reranker
    from shared.settings import RetrievalSettings

Mode = Literal["dense", "lexical", "hybrid", "hybrid+rerank"]
Ranked = list[tuple[str, float]]


@dataclass
class SearchResult:
    hits: list[SearchHit]
    took_ms: float
    reranker: str | None = None


@dataclass
class Search:
    """One search as the stages see it: what was asked, then what each stage adds."""

    query: str
    vector: np.ndarray | None
    mode: str
    top_k: int
    top_n: int
    filters: SearchFilters
    ef_search: int
    extra_chunk_ids: Sequence[str] = ()
    lexical_query: str | None = None
    rerank_query: str | None = None
    reranker: Reranker | None = None
    mmr: bool = False
    mmr_lambda: float = 0.7
    depth: int = 0
    passing: PassingSet | None = None
    dense: list[Scored] = field(default_factory=list)
    lexical: list[Scored] = field(default_factory=list)
    ranked: Ranked = field(default_factory=list)
    rows: dict[str, asyncpg.Record] = field(default_factory=dict)
    extra: list[str] = field(default_factory=list)
    head: Ranked = field(default_factory=list)
    tail: Ranked = field(default_factory=list)
    rerank_by: dict[str, float] = field(default_factory=dict)
    reranker_used: str | None = None

    @property
    def hybrid(self) -> bool:
        return self.mode in ("hybrid", "hybrid+rerank")

    @property
    def with_dense(self) -> bool:
        return self.hybrid or self.mode == "dense"

    @property
    def with_lexical(self) -> bool:
        return self.hybrid or self.mode == "lexical"

    def meta_of(self) -> dict[str, tuple[float | None, int | None]]:
        return {cid: (r["evidence_level"], r["year"]) for cid, r in self.rows.items()}


class SearchEngine:
    """Runs dense and/or lexical search, fuses, reranks, diversifies: the single search entry point, over a
    pool and a vector index, configured by a :class:`SearchConfig`, with the components a process holds
    (corpus counts, postings cache, doc values) and an optional memo of the legs' rankings."""

    def __init__(
        self,
        pool: asyncpg.Pool,
        index: VectorIndex,
        config: SearchConfig | None = None,
        *,
        stats: CorpusStats | None = None,
        postings_cache: PostingsCache | None = None,
        doc_values: DocValuesFollower | None = None,
        memo: LegMemo | None = None,
    ):
        self.pool = pool
        self.index = index
        self.config = config or SearchConfig()
        self.stats = stats or CorpusStats()
        self.postings_cache = postings_cache
        """Common terms' posting blocks held in memory for the lexical leg (None: every search reads them)."""
        self.doc_values = doc_values
        """Chunks' filter columns held in memory for the lexical leg under broad filters (None: checked in SQL)."""
        self.memo = memo
        """The legs' rankings memoised across searches (None: each search runs its legs)."""

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
        memo: LegMemo | None = None,
    ) -> Self:
        """An engine configured by the retrieval settings over ``pool`` and ``index``."""
        config = SearchConfig.from_settings(settings, ef_search=ef_search, ivfflat_probes=ivfflat_probes)
        return cls(pool, index, config, stats=stats, postings_cache=postings_cache, doc_values=doc_values, memo=memo)

    # ------------------------------------------------------------------------------------------------ legs
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

        async def rank() -> list[Scored]:
            # The bound matters only when the filter is not resolved yet (a hybrid search resolves it once).
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
                probes=self.config.ivfflat_probes,
            )

        if self.memo is None:
            return await rank()
        digest = hashlib.sha1(np.asarray(query_vector, np.float32).tobytes()).hexdigest()
        return await self.memo.get(("dense", digest, k, ef_search, self.config.ivfflat_probes, repr(filters)), rank)

    async def lexical_search(
        self, query: str, k: int, filters: SearchFilters, *, passing: PassingSet | None = None
    ) -> list[Scored]:
        """The ``k`` best chunks for ``query`` by BM25 that pass ``filters``, best first."""

        def rank() -> Awaitable[list[Scored]]:
            return bm25_search(
                self.pool,
                query,
                k,
                filters,
                self.config.bm25,
                self.stats,
                passing=passing,
                cache=self.postings_cache,
                doc_values=self.doc_values,
            )

        if self.memo is None:
            return await rank()
        return await self.memo.get(("lexical", self.config.bm25, query, k, repr(filters)), rank)

    async def passing_set(self, filters: SearchFilters, k: int) -> PassingSet | None:
        """A restrictive filter's chunks, resolved once for both legs of a hybrid search when at most
        :func:`filter_first_max` of them pass (else ``PassingSet(None)``: both legs check candidates); None for
        filters that restrict nothing beyond the defaults."""
        if not is_restrictive(filters):
            return None
        return await passing_chunks(self.pool, filters, filter_first_max(k, (await self.stats.get(self.pool)).chunks))

    # ---------------------------------------------------------------------------------------------- search
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
        s = Search(
            query,
            query_vector,
            mode,
            top_k,
            top_n,
            filters,
            ef_search or self.config.ef_search,
            extra_chunk_ids,
            lexical_query,
            rerank_query,
            reranker,
            mmr,
            self.config.mmr_lambda if mmr_lambda is None else mmr_lambda,
        )
        for stage in self.stages():
            await stage(s)
        return SearchResult(self.hits(s), (time.perf_counter() - start) * 1000, s.reranker_used)

    def stages(self) -> list[Callable[[Search], Awaitable[None]]]:
        """The stages in order (:data:`STAGES`)."""
        return [getattr(self, name) for name in STAGES]

    async def filters(self, s: Search) -> None:
        s.filters = await with_mesh_descendants(self.pool, s.filters)

    async def retrieve(self, s: Search) -> None:
        s.depth = max(s.top_k, self.config.fusion_depth) if s.hybrid else max(s.top_k, s.top_n)
        # Both legs of a hybrid search under a restrictive filter share one read of what it passes.
        s.passing = await self.passing_set(s.filters, s.depth) if s.hybrid else None
        legs: list[Coroutine[Any, Any, list[Scored]]] = []
        if s.with_dense:
            if s.vector is None:
                raise ValueError(f"mode {s.mode!r} needs a query vector")
            legs.append(self.dense_search(s.vector, s.depth, s.filters, s.ef_search, passing=s.passing))
        if s.with_lexical:
            legs.append(self.lexical_search(s.lexical_query or s.query, s.depth, s.filters, passing=s.passing))
        # The legs run at once, each on its own connection: the database walks the HNSW graph while the
        # lexical leg's postings are read and scored (one failing cancels the other).
        tasks = [asyncio.ensure_future(leg) for leg in legs]
        try:
            results = await asyncio.gather(*tasks)
        except BaseException:
            for task in tasks:
                task.cancel()
            raise
        if s.with_dense:
            s.dense = results[0]
        if s.with_lexical:
            s.lexical = results[-1]

    async def fuse(self, s: Search) -> None:
        s.ranked = self._fused(s.mode, s.dense, s.lexical)

    async def feedback(self, s: Search) -> None:
        if not (self.config.prf_docs > 0 and s.vector is not None and s.mode != "lexical" and s.ranked):
            return
        top = [c for c, _ in s.ranked[: self.config.prf_docs]]
        moved = moved_query(s.vector, top, await vectors_of(self.pool, self.index, top), self.config.prf_weight)
        if moved is not None:
            s.dense = await self.dense_search(moved, s.depth, s.filters, s.ef_search, passing=s.passing)
            s.ranked = self._fused(s.mode, s.dense, s.lexical)

    async def hydrate(self, s: Search) -> None:
        known = {c for c, _ in s.ranked}
        extra = [c for c in s.extra_chunk_ids if c not in known]
        s.rows = await hit_rows(self.pool, [c for c, _ in s.ranked] + extra)
        # Chunks offered again by a conversation skip the filters, but never a document excluded since (0).
        s.extra = [c for c in extra if c in s.rows and s.rows[c]["priority"] > PRIORITY_EXCLUDED]

    async def blend(self, s: Search) -> None:
        ranked = s.ranked
        if self.config.priority_boost:
            priority_of = {c: s.rows[c]["priority"] for c, _ in ranked if c in s.rows}
            ranked = priority_boosted(ranked, priority_of, self.config.priority_boost)
        ranked = evidence_blended(ranked, s.meta_of(), self.config.evidence)
        doc_of = {cid: r["document_id"] for cid, r in s.rows.items()}
        ranked = limit_per_document(ranked, doc_of, s.filters.max_chunks_per_document)
        s.ranked, s.head, s.tail = ranked, ranked[: s.top_k], ranked[s.top_k :]

    async def rerank(self, s: Search) -> None:
        if not (s.mode == "hybrid+rerank" and s.reranker is not None and s.head):
            return
        texts = [rerank_text(s.rows[c]) for c, _ in s.head]
        scores = await s.reranker.rerank(s.rerank_query or s.query, texts)
        s.rerank_by = {c: score for (c, _), score in zip(s.head, scores, strict=True)}
        order = {c: i for i, (c, _) in enumerate(s.head)}
        head = sorted(((c, s.rerank_by[c]) for c, _ in s.head), key=lambda cs: (-cs[1], order[cs[0]]))
        s.head = evidence_blended(head, s.meta_of(), self.config.evidence)  # the reranker's scores replace the fused
        s.reranker_used = s.reranker.name

    async def diversify(self, s: Search) -> None:
        if not (s.mmr and len(s.head) > 1):
            return
        vectors = await vectors_of(self.pool, self.index, [c for c, _ in s.head])
        if len(vectors) == len(s.head):
            picked = mmr_select(
                [score for _, score in s.head],
                np.stack([vectors[c] for c, _ in s.head]),
                min(s.top_n, len(s.head)),
                s.mmr_lambda,
            )
            s.head = [s.head[i] for i in picked]

    def hits(self, s: Search) -> list[SearchHit]:
        """The first ``top_n`` (then the extra chunks) as hits, ranked from 1."""
        final = (s.head + s.tail)[: s.top_n]
        final += [(c, 0.0) for c in s.extra if c in s.rows]
        dense_by = {x.chunk_id: x.score for x in s.dense}
        lexical_by = {x.chunk_id: x.score for x in s.lexical}
        hits = []
        for rank, (cid, score) in enumerate(final, start=1):
            r = s.rows.get(cid)
            if r is None:
                continue
            hits.append(
                search_hit(
                    r,
                    rank=rank,
                    score=score,
                    dense_score=dense_by.get(cid),
                    lexical_score=lexical_by.get(cid),
                    rerank_score=s.rerank_by.get(cid),
                )
            )
        return hits

    def _fused(self, mode: str, dense: list[Scored], lexical: list[Scored]) -> Ranked:
        if mode == "dense":
            return [(x.chunk_id, x.score) for x in dense]
        if mode == "lexical":
            return [(x.chunk_id, x.score) for x in lexical]
        if self.config.convex is not None:
            return self.config.convex.fuse(
                [[(x.chunk_id, x.score) for x in dense], [(x.chunk_id, x.score) for x in lexical]]
            )
        return self.config.fusion.fuse([[x.chunk_id for x in dense], [x.chunk_id for x in lexical]])


#: The stages of a search, in order: each a method of :class:`SearchEngine` taking the :class:`Search`.
STAGES = ("filters", "retrieve", "fuse", "feedback", "hydrate", "blend", "rerank", "diversify")
