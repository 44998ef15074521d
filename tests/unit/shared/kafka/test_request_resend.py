"""A request taken by a server that was then killed is sent once more (same correlation id); one whose server
sends progress is not."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from shared.events import RequestProgress, RetrievalReply, RetrievalRequest
from shared.kafka.reply_client import PROGRESS_EVENT, ReplyClient, RequestTimeout
from shared.kafka.reply_server import RecentRequests


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


async def test_no_reply_in_time_sends_the_same_request_once_more_as_a_fresh_attempt() -> None:
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
    # the copy is stamped when it is sent (no back-dated timestamp), so the server's staleness check counts
    # from the copy, whose budget the caller waits out in full
    assert "timestamp_ms" not in first and "timestamp_ms" not in second
    assert second["at"] - first["at"] == pytest.approx(0.3, abs=0.2)


async def test_a_prompt_reply_is_never_resent() -> None:
    client, broker = _client()
    answer = asyncio.create_task(_answer_after(client, broker, sends=1, delay=0.0))
    await client.request("retrieval.requests", RetrievalRequest(query="q"), RetrievalReply, 5.0, resend_after=0.5)
    await answer
    await asyncio.sleep(0.6)
    assert len(broker.published) == 1


async def test_resent_at_most_once_and_the_copy_has_the_whole_timeout() -> None:
    client, broker = _client()
    t0 = time.monotonic()
    with pytest.raises(RequestTimeout):
        await client.request("retrieval.requests", RetrievalRequest(query="q"), RetrievalReply, 0.6, resend_after=0.2)
    assert 0.75 <= time.monotonic() - t0 < 1.5  # resent at 0.2 s, then 0.6 s for the copy
    assert len(broker.published) == 2


async def test_a_copy_answered_after_the_first_attempts_deadline_is_taken() -> None:
    """The server that took the request was killed; the copy waits for the group to move its partition and
    is answered 0.45 s after it went out, past the first attempt's 0.6 s but inside its own."""
    client, broker = _client()
    answer = asyncio.create_task(_answer_after(client, broker, sends=2, delay=0.45))
    t0 = time.monotonic()
    reply = await client.request(
        "synthesis.requests", RetrievalRequest(query="q"), RetrievalReply, 0.6, resend_after=0.3
    )
    await answer
    assert reply.took_ms == 7.0
    assert time.monotonic() - t0 > 0.6
    assert len(broker.published) == 2


async def test_without_resend_after_one_publish_only() -> None:
    client, broker = _client()
    with pytest.raises(RequestTimeout):
        await client.request("retrieval.requests", RetrievalRequest(query="q"), RetrievalReply, 0.3)
    assert len(broker.published) == 1


# --- progress: a synthesis that is slow but alive is not resent; one whose server went silent is -------------


async def _progress(client: ReplyClient, broker: RecordingBroker, every: float, times: int) -> None:
    await broker.sent.acquire()
    cid = broker.published[-1]["correlation_id"]
    for _ in range(times):
        await asyncio.sleep(every)
        await client._pending[cid].put((PROGRESS_EVENT, RequestProgress().model_dump_json().encode()))


async def test_progress_messages_keep_a_slow_request_from_being_resent() -> None:
    client, broker = _client()

    async def slow_server() -> None:
        await _progress(client, broker, every=0.1, times=8)  # 0.8 s of work, far past resend_after
        cid = broker.published[-1]["correlation_id"]
        await client._pending[cid].put(("RetrievalReply", RetrievalReply(took_ms=3.0).model_dump_json().encode()))

    server = asyncio.create_task(slow_server())
    reply = await client.request(
        "synthesis.requests", RetrievalRequest(query="q"), RetrievalReply, 5.0, resend_after=0.3
    )
    await server
    assert reply.took_ms == 3.0
    assert len(broker.published) == 1  # without the progress messages it would have been sent again at 0.3 s


async def test_a_server_that_falls_silent_mid_request_gets_the_copy() -> None:
    client, broker = _client()

    async def dies_then_restarts() -> None:
        await _progress(client, broker, every=0.1, times=3)  # works for 0.3 s, then is killed: silence
        await broker.sent.acquire()  # the copy
        cid = broker.published[-1]["correlation_id"]
        await client._pending[cid].put(("RetrievalReply", RetrievalReply(took_ms=9.0).model_dump_json().encode()))

    server = asyncio.create_task(dies_then_restarts())
    reply = await client.request(
        "synthesis.requests", RetrievalRequest(query="q"), RetrievalReply, 5.0, resend_after=0.4
    )
    await server
    assert reply.took_ms == 9.0
    first, second = broker.published
    assert second["correlation_id"] == first["correlation_id"]
    # the copy went out a silence of resend_after after the last progress (0.3 s), not 0.4 s after the send
    assert second["at"] - first["at"] > 0.55


async def _drain(client: ReplyClient, broker: RecordingBroker, script: list[tuple[float, str]]) -> list[str]:
    """Yields of ``client.stream`` while a server sends ``script`` (delay, kind) for the latest publish."""
    got: list[str] = []

    async def server() -> None:
        await broker.sent.acquire()
        for delay, kind in script:
            await asyncio.sleep(delay)
            if kind == "copy":
                await broker.sent.acquire()
                continue
            cid = broker.published[-1]["correlation_id"]
            await client._pending[cid].put((kind, b"{}"))

    task = asyncio.create_task(server())
    async for kind, _ in client.stream(
        "synthesis.requests", RetrievalRequest(query="q"), "Final", 2.0, resend_after=0.3
    ):
        got.append(kind)
    await task
    return got


async def test_a_stream_silent_before_its_first_token_is_resent_and_progress_is_not_yielded() -> None:
    client, broker = _client()
    got = await _drain(client, broker, [(0.1, PROGRESS_EVENT), (0.0, "copy"), (0.05, "Token"), (0.05, "Final")])
    assert got == ["Token", "Final"]
    assert len(broker.published) == 2


async def test_a_stream_is_never_resent_once_a_token_was_yielded() -> None:
    client, broker = _client()
    with pytest.raises(RequestTimeout):
        await _drain(client, broker, [(0.05, "Token")])  # then silence until the 2 s timeout
    assert len(broker.published) == 1


def test_recent_requests_claims_a_correlation_id_once_within_its_ttl() -> None:
    taken = RecentRequests(ttl_s=60.0, capacity=3)
    assert taken.claim("a") and not taken.claim("a")
    assert taken.claim("b") and taken.claim("c") and taken.claim("d")  # "a" is the oldest: forgotten
    assert taken.claim("a") and not taken.claim("d")
    expired = RecentRequests(ttl_s=0.0)
    assert expired.claim("x") and expired.claim("x")
