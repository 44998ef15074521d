"""A search as a composition of named stages over one search's state: :class:`SearchEngine` holds what a
process keeps (pool, vector index, configuration, corpus counts, postings cache, doc values, memo) and runs
the stages of :mod:`~services.retriever.engine.stages` (:data:`STAGES`, in order), each in its own module,
then returns the first ``top_n`` as hits that carry what a citation needs. A search goes down the stages once:
this module only composes them (each stage's arithmetic lives in its package: ``lexical/``, ``vector/``,
``ranking/``, ``filters/``).

The engine's legs are also public on their own (:meth:`SearchEngine.dense_search`,
:meth:`SearchEngine.lexical_search`): the benchmarks and tests rank with one leg over the same store.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Self

import asyncpg
import numpy as np

from services.retriever.engine.config import SearchConfig
from services.retriever.engine.doc_values.follower import DocValuesFollower
from services.retriever.engine.lexical.postings_cache import PostingsCache
from services.retriever.engine.lexical.stats import CorpusStats
from services.retriever.engine.memo import LegMemo
from services.retriever.engine.scored import Scored
from services.retriever.engine.stages import RUNS, STAGES
from services.retriever.engine.stages.filters import run as resolve_filters
from services.retriever.engine.stages.hits import search_hits
from services.retriever.engine.stages.retrieve import dense_leg, lexical_leg
from services.retriever.engine.stages.state import Search
from services.retriever.engine.vector.tables import VectorIndex
from shared.models import SearchFilters, SearchHit
from shared.settings import DEFAULT_IVFFLAT_PROBES

if TYPE_CHECKING:
    from services.retriever.engine.ranking.rerank import Reranker
    from shared.settings import RetrievalSettings

Mode = Literal["dense", "lexical", "hybrid", "hybrid+rerank"]


@dataclass
class SearchResult:
    hits: list[SearchHit]
    took_ms: float
    reranker: str | None = None


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
        """Common terms' postings held in memory for the lexical leg (None: every search reads them)."""
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
        self, query_vector: np.ndarray, k: int, filters: SearchFilters, ef_search: int
    ) -> list[Scored]:
        """The ``k`` nearest chunks to ``query_vector`` that pass ``filters``, best first: the dense leg of a
        search on its own (its filters resolved as the ``filters`` stage resolves them)."""
        s = _search_state(self.config, "", query_vector, "dense", k, k, filters, ef_search)
        await resolve_filters(self, s)
        return await dense_leg(self, s, query_vector)

    async def lexical_search(self, query: str, k: int, filters: SearchFilters) -> list[Scored]:
        """The ``k`` best chunks for ``query`` by BM25 that pass ``filters``, best first: the lexical leg of a
        search on its own."""
        s = _search_state(self.config, query, None, "lexical", k, k, filters, self.config.ef_search)
        await resolve_filters(self, s)
        return await lexical_leg(self, s)

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
        s = _search_state(
            self.config,
            query,
            query_vector,
            mode,
            top_k,
            top_n,
            filters,
            ef_search or self.config.ef_search,
            extra_chunk_ids=extra_chunk_ids,
            lexical_query=lexical_query,
            rerank_query=rerank_query,
            reranker=reranker,
            mmr=mmr,
            mmr_lambda=self.config.mmr_lambda if mmr_lambda is None else mmr_lambda,
        )
        for run in RUNS:
            await run(self, s)
        return SearchResult(search_hits(s), (time.perf_counter() - start) * 1000, s.reranker_used)


def _search_state(
    config: SearchConfig,
    query: str,
    vector: np.ndarray | None,
    mode: str,
    top_k: int,
    top_n: int,
    filters: SearchFilters,
    ef_search: int,
    *,
    extra_chunk_ids: Sequence[str] = (),
    lexical_query: str | None = None,
    rerank_query: str | None = None,
    reranker: Reranker | None = None,
    mmr: bool = False,
    mmr_lambda: float = 0.7,
) -> Search:
    """A search's state as asked, with the mode's legs and their depth."""
    hybrid = mode in ("hybrid", "hybrid+rerank")
    return Search(
        query,
        vector,
        mode,
        top_k,
        top_n,
        filters,
        ef_search,
        extra_chunk_ids,
        lexical_query,
        rerank_query,
        reranker,
        mmr,
        mmr_lambda,
        hybrid=hybrid,
        with_dense=hybrid or mode == "dense",
        with_lexical=hybrid or mode == "lexical",
        depth=max(top_k, config.fusion_depth) if hybrid else max(top_k, top_n),
    )


__all__ = ["STAGES", "SearchEngine", "SearchResult"]
