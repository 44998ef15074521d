"""A :class:`~shared.events.RetrievalRequest` served by a search engine: the query capped and rendered, the
reranker it names built, the query embedded, the search run."""

from __future__ import annotations

import asyncio

from services.retriever.engine.pipeline import SearchEngine, SearchResult
from services.retriever.engine.queries import render
from services.retriever.engine.ranking.rerank import build_reranker
from shared.embedding import Embedder
from shared.events import RetrievalRequest
from shared.models import cap_query
from shared.settings import Settings


class UnservableRequest(ValueError):
    """A request the engine cannot serve as asked (e.g. a reranker that is not configured)."""


async def serve(
    engine: SearchEngine, embedder: Embedder, request: RetrievalRequest, settings: Settings
) -> tuple[SearchResult, str]:
    """Takes a request; returns its result and the query as searched (the query form rendered here)."""
    max_terms = settings.retrieval.max_query_terms
    # The gateway answers 422 before this; what another publisher sends over the limits is cut, not run whole
    # (rendered, then each text cut: a free question comes out of both as it would out of one cut).
    q = render(request.query, request.query_form).capped(max_terms)
    query = None if request.query is None else cap_query(request.query, max_terms)
    reranker = None
    if request.mode == "hybrid+rerank":
        try:
            reranker = build_reranker(settings, request.reranker)
        except ValueError as exc:
            raise UnservableRequest(str(exc)) from exc
    vector = None
    if request.mode != "lexical":
        vector = (await asyncio.to_thread(embedder.encode_queries, [q.dense]))[0]
    result = await engine.search(
        query if query is not None else q.dense,
        vector,
        mode=request.mode,
        top_k=request.top_k,
        top_n=request.top_n,
        filters=request.filters,
        ef_search=request.ef_search,
        extra_chunk_ids=request.extra_chunk_ids,
        lexical_query=q.lexical,
        rerank_query=q.rerank,
        reranker=reranker,
        mmr=request.mmr,
        mmr_lambda=request.mmr_lambda,
    )
    return result, q.rerank
