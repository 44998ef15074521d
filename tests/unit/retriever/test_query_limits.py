"""The retriever cuts what it searches to the query limits, whoever published the request: a query form's
fields are each bounded, but what they render to (embedded, matched, given to the reranker) is capped here."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np

from services.retriever.engine.queries import render
from services.retriever.handlers import _search
from shared.events import RetrievalRequest
from shared.models import MAX_QUERY_CHARS, QueryForm, query_terms
from shared.settings import Settings

CAP = 200
FORM = QueryForm(kind="condition-findings", condition="malaria", findings=[" ".join(["fever"] * 100)] * 50)


class RecordingSearcher:
    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    async def search(self, query: str, vector: object, **kwargs: Any) -> SimpleNamespace:
        self.calls.append({"query": query, **kwargs})
        return SimpleNamespace(hits=[], took_ms=0.0)


class RecordingEmbedder:
    def __init__(self) -> None:
        self.texts: list[str] = []

    def encode_queries(self, texts: list[str]) -> np.ndarray:
        self.texts += texts
        return np.zeros((len(texts), 4), dtype=np.float32)


def test_every_rendered_text_is_cut_to_the_cap() -> None:
    rendered = render(None, FORM)
    assert len(query_terms(rendered.dense)) == 5001  # the form renders far over the cap
    capped = rendered.capped(CAP)
    for text in (capped.dense, capped.lexical, capped.rerank):
        assert len(query_terms(text)) == CAP and len(text) <= MAX_QUERY_CHARS
    assert capped.dense == rendered.dense[: len(capped.dense)]  # the first terms, as written
    small = render("aspirin and stroke")
    assert small.capped(CAP) == small


async def test_a_request_from_another_publisher_is_searched_within_the_cap() -> None:
    searcher, embedder = RecordingSearcher(), RecordingEmbedder()

    async def current_searcher() -> RecordingSearcher:
        return searcher

    settings = Settings()  # type: ignore[call-arg]
    assert settings.retrieval.max_query_terms == CAP
    state = SimpleNamespace(settings=settings, embedder=embedder, current_searcher=current_searcher)
    request = RetrievalRequest(query_form=FORM, mode="hybrid")
    _, searched = await _search(state, request)  # type: ignore[arg-type]
    (call,) = searcher.calls
    for text in (embedder.texts[0], call["lexical_query"], call["rerank_query"], call["query"], searched):
        assert len(query_terms(text)) <= CAP
