from __future__ import annotations

import pytest
from pydantic import ValidationError

from services.gateway.schemas import SearchRequest
from shared.events import RetrievalRequest


def test_search_request_takes_a_question_or_a_form() -> None:
    assert SearchRequest(query="aspirin stroke").query_text == "aspirin stroke"
    form = SearchRequest.model_validate(
        {
            "query_form": {"kind": "therapeutic", "drug": "bupropion", "disease": "obesity"},
            "mode": "hybrid+rerank",
            "reranker": "llm",
            "mmr": True,
            "filters": {"mesh": ["Obesity"], "max_chunks_per_document": 1},
        }
    )
    assert form.query_text == "bupropion obesity"
    event = RetrievalRequest(query=form.query_text, query_form=form.query_form, reranker=form.reranker, mmr=True)
    assert RetrievalRequest.model_validate_json(event.model_dump_json()).query_form == form.query_form
    with pytest.raises(ValidationError):
        SearchRequest()
    with pytest.raises(ValidationError):
        SearchRequest(query="   ")
    with pytest.raises(ValidationError):
        SearchRequest(query="x", reranker="magic")  # type: ignore[arg-type]
