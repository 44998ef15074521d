"""Issue #40 item 5: the retriever's search handler (FastStream's TestKafkaBroker, no real broker) sends progress
while a search works and answers a resent copy once, as the synthesizer does (shared.kafka)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest
from faststream.kafka import KafkaBroker, TestKafkaBroker

from services.retriever import handlers
from services.retriever.engine.pipeline import SearchResult
from shared.events import RequestProgress, RetrievalReply, RetrievalRequest
from shared.kafka.context import KafkaMessage
from shared.kafka.messages import EVENT_TYPE_HEADER
from shared.kafka.topics import RETRIEVAL_REQUESTS
from shared.settings import Settings

REPLIES = "replies.test-gateway"


def make(
    monkeypatch: pytest.MonkeyPatch, seconds: float, progress_every: float
) -> tuple[KafkaBroker, list[str], list[tuple[str, str, bytes]]]:
    settings = Settings()
    settings.kafka.request_progress_every_s = progress_every
    started: list[str] = []

    async def slow_search(state: Any, request: RetrievalRequest) -> tuple[SearchResult, str]:
        started.append(request.query)  # a search run: with the Claude reranker, a model call paid for
        await asyncio.sleep(seconds)
        return SearchResult(hits=[], took_ms=seconds * 1000), request.query

    monkeypatch.setattr(handlers, "_search", slow_search)
    state = SimpleNamespace(settings=settings, index=SimpleNamespace(model="test-model"))
    broker = KafkaBroker()
    handlers.register_search(broker, state)  # type: ignore[arg-type]
    got: list[tuple[str, str, bytes]] = []

    @broker.subscriber(REPLIES)
    async def collect(msg: KafkaMessage) -> None:
        got.append((msg.correlation_id, msg.headers.get(EVENT_TYPE_HEADER, ""), msg.body))

    return broker, started, got


async def test_a_slow_search_sends_progress_while_it_works(monkeypatch: pytest.MonkeyPatch) -> None:
    broker, started, got = make(monkeypatch, seconds=0.55, progress_every=0.1)
    async with TestKafkaBroker(broker) as br:
        await br.publish(
            RetrievalRequest(query="statins"), topic=RETRIEVAL_REQUESTS, correlation_id="s-slow", reply_to=REPLIES
        )
        answered = len(got)
        await asyncio.sleep(0.35)  # a progress task that outlived its search would publish here
    kinds = [k for _, k, _ in got]
    assert kinds[-1] == "RetrievalReply" and len(got) == answered
    progress = [RequestProgress.model_validate_json(b) for _, k, b in got if k == "RequestProgress"]
    assert 1 <= len(progress) <= 6 and set(kinds[:-1]) == {"RequestProgress"}
    assert RetrievalReply.model_validate_json(got[-1][2]).error is None and started == ["statins"]


async def test_a_resent_copy_of_a_search_taken_here_is_run_once(monkeypatch: pytest.MonkeyPatch) -> None:
    broker, started, got = make(monkeypatch, seconds=0.0, progress_every=0.0)
    async with TestKafkaBroker(broker) as br:
        for cid, query in (("s-dup", "statins"), ("s-dup", "statins"), ("s-other", "aspirin")):
            # the gateway's copy carries the same correlation id
            await br.publish(
                RetrievalRequest(query=query), topic=RETRIEVAL_REQUESTS, correlation_id=cid, reply_to=REPLIES
            )
    assert started == ["statins", "aspirin"]
    assert sorted(c for c, k, _ in got if k == "RetrievalReply") == ["s-dup", "s-other"]
