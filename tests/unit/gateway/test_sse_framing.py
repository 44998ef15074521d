"""The streaming routes' wire format: events byte for byte as the page and the CLI read them, keep-alive comments
while a stream is idle, and a stream that stops (its producer closed) when the client goes away."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from services.gateway import sse as sse_module
from services.gateway.sse import event_stream, sse


def test_an_event_is_an_event_line_a_data_line_and_a_blank_line() -> None:
    data = {"seq": 3, "text": 'two\nlines, "quoted", é'}
    assert sse("token", data) == f"event: token\ndata: {json.dumps(data)}\n\n"
    assert sse("done", None) == "event: done\ndata: null\n\n"


async def _run(response: Any, receive: Any) -> list[bytes]:
    sent: list[bytes] = []

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.body":
            sent.append(message.get("body", b""))

    scope = {"type": "http", "method": "POST", "path": "/", "headers": [], "asgi": {"version": "3.0"}}
    await response(scope, receive, send)
    return sent


async def test_an_idle_stream_sends_keep_alive_comments_that_clients_skip(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sse_module, "PING_S", 0.05)

    async def events() -> AsyncIterator[str]:
        yield sse("step", {"n": 1})
        await asyncio.sleep(0.3)  # a slow LLM call
        yield sse("done", {"n": 2})

    async def receive() -> dict[str, Any]:
        await asyncio.sleep(10)
        return {"type": "http.disconnect"}

    body = b"".join(await _run(event_stream(events()), receive)).decode()
    assert body.startswith('event: step\ndata: {"n": 1}\n\n') and body.endswith('event: done\ndata: {"n": 2}\n\n')
    assert body.count("\n: ping") >= 2 and "\r" not in body
    frames = [frame.split("\n") for frame in body.split("\n\n") if frame]
    comments = [f for f in frames if all(line.startswith(":") for line in f)]
    assert len(comments) >= 2 and len(frames) - len(comments) == 2  # a comment-only frame is no event


async def test_a_client_that_goes_away_ends_the_stream_and_closes_its_producer() -> None:
    closed = asyncio.Event()
    produced = 0

    async def events() -> AsyncIterator[str]:
        nonlocal produced
        try:
            while True:
                produced += 1
                yield sse("token", {"seq": produced})
                await asyncio.sleep(0.02)
        finally:
            closed.set()

    async def receive() -> dict[str, Any]:
        await asyncio.sleep(0.1)
        return {"type": "http.disconnect"}

    await asyncio.wait_for(_run(event_stream(events()), receive), timeout=5)
    assert closed.is_set() and produced < 50
