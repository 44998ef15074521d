"""A search request taken by a retriever that was then killed is sent once more (same correlation id)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from shared.broker import ReplyClient, RequestTimeout
from shared.events import RetrievalReply, RetrievalRequest


class RecordingBroker:
    def __init__(self) -> None:
        self.published: list[dict[str, Any]] = []
        self.sent = asyncio.Semaphore(0)

    async def publish(self, event: Any, **kw: Any) -> None:
        self.published.append({"event": event, **kw, "at": time.monotonic()})
        self.sent.release()


def _client() -> tuple[ReplyClient, RecordingBroker]:
    broker = RecordingBroker()
    return ReplyClient(broker, "replies.test"), broker  # type: ignore[arg-type]


async def _answer_after(client: ReplyClient, broker: RecordingBroker, sends: int, delay: float) -> None:
    for _ in range(sends):
        await broker.sent.acquire()
    await asyncio.sleep(delay)
    cid = broker.published[-1]["correlation_id"]
    await client._pending[cid].put(("RetrievalReply", RetrievalReply(took_ms=7.0).model_dump_json().encode()))


async def test_no_reply_in_time_sends_the_same_request_once_more_with_its_first_timestamp() -> None:
    client, broker = _client()
    answer = asyncio.create_task(_answer_after(client, broker, sends=2, delay=0.05))
    reply = await client.request(
        "retrieval.requests", RetrievalRequest(query="q"), RetrievalReply, 5.0, resend_after=0.3
    )
    await answer
    assert reply.took_ms == 7.0
    first, second = broker.published
    assert second["correlation_id"] == first["correlation_id"]  # whichever reply comes first answers
    assert second["event"] == first["event"] and second["topic"] == "retrieval.requests"
    assert first["timestamp_ms"] is None and second["timestamp_ms"] is not None
    assert abs(second["timestamp_ms"] / 1000 - (time.time() - (time.monotonic() - first["at"]))) < 1.0
    assert second["at"] - first["at"] == pytest.approx(0.3, abs=0.2)


async def test_a_prompt_reply_is_never_resent() -> None:
    client, broker = _client()
    answer = asyncio.create_task(_answer_after(client, broker, sends=1, delay=0.0))
    await client.request("retrieval.requests", RetrievalRequest(query="q"), RetrievalReply, 5.0, resend_after=0.5)
    await answer
    await asyncio.sleep(0.6)
    assert len(broker.published) == 1


async def test_resent_at_most_once_then_the_caller_timeout_holds() -> None:
    client, broker = _client()
    t0 = time.monotonic()
    with pytest.raises(RequestTimeout):
        await client.request("retrieval.requests", RetrievalRequest(query="q"), RetrievalReply, 0.6, resend_after=0.2)
    assert 0.55 <= time.monotonic() - t0 < 1.5
    assert len(broker.published) == 2


async def test_without_resend_after_one_publish_only() -> None:
    client, broker = _client()
    with pytest.raises(RequestTimeout):
        await client.request("retrieval.requests", RetrievalRequest(query="q"), RetrievalReply, 0.3)
    assert len(broker.published) == 1
