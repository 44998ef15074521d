"""``POST /v1/search``: the literature searched through the retriever, with clinical filters."""

from __future__ import annotations

from fastapi import APIRouter, HTTPException

from services.gateway.deps import KafkaDep
from services.gateway.errors import error_headers, public_error
from services.gateway.schemas.search import SearchRequest, SearchResponse
from shared.events import RetrievalRequest, TokenUsage

router = APIRouter(tags=["search"])


@router.post(
    "/v1/search",
    response_model=SearchResponse,
    summary="Search the literature (dense, lexical or hybrid) with clinical filters",
)
async def search(body: SearchRequest, kafka: KafkaDep) -> SearchResponse:
    reply = await kafka.retrieve(
        RetrievalRequest(
            query=body.query_text,
            query_form=body.query_form,
            top_k=body.top_k,
            top_n=body.top_n,
            mode=body.mode,
            filters=body.filters,
            ef_search=body.ef_search,
            reranker=body.reranker,
            mmr=body.mmr,
            mmr_lambda=body.mmr_lambda,
        )
    )
    if reply.error is not None:
        error = public_error(reply.error.status or 500, reply.error.type, reply.error.message)
        raise HTTPException(error["status"], error["detail"], headers=error_headers(error))
    return SearchResponse(
        query=body.query_text,
        hits=reply.hits,
        model=reply.model,
        took_ms=reply.took_ms,
        tokens_used=TokenUsage.total(reply.llm_calls),
        llm_calls=reply.llm_calls,
    )
