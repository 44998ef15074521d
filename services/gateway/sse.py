"""Server-sent events: the one wire format, error event and response of every streaming route.

An event is ``event: NAME`` and ``data: JSON`` lines ended by a blank line, lines ended by ``\n`` (framed by
sse-starlette's :class:`~sse_starlette.ServerSentEvent`). The response is sse-starlette's: while a long answer is
being written it sends a comment line every :data:`PING_S` seconds, so proxies that close idle connections keep
the stream open (clients ignore comments, as the SSE format says), and it stops producing events as soon as the
client goes away. Once a stream has started its status is sent, so a failure can only be told as an ``error``
event: a 4xx with its reason, a 5xx with an error id only (the detail is logged with that id,
:mod:`services.gateway.errors`).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from aiokafka.errors import KafkaError
from fastapi import HTTPException
from sse_starlette import EventSourceResponse, ServerSentEvent

from services.gateway.errors import sse_error
from shared.kafka.reply_client import RemoteError, RequestTimeout

#: The OpenAPI ``responses`` of a streaming route.
STREAM_RESPONSES: dict[int | str, dict[str, Any]] = {200: {"content": {"text/event-stream": {}}}}

#: Seconds between keep-alive comments while no event is sent (below the usual 30-60 s proxy idle timeouts).
PING_S = 15.0
_SEP = "\n"


def sse(event: str, data: Any) -> str:
    """One server-sent event named ``event`` carrying ``data`` as JSON (one line: JSON escapes newlines)."""
    return ServerSentEvent(json.dumps(data, default=str), event=event, sep=_SEP).encode().decode()


def error_event(exc: BaseException) -> str:
    """The ``error`` event for a failure raised while a stream was being written."""
    if isinstance(exc, HTTPException):
        return sse("error", sse_error(exc.status_code, "HTTPException", str(exc.detail)))
    if isinstance(exc, RemoteError):
        return sse("error", sse_error(exc.error.status, exc.error.type, exc.error.message))
    if isinstance(exc, RequestTimeout):
        return sse("error", sse_error(504, "RequestTimeout", str(exc)))
    if isinstance(exc, KafkaError):
        return sse("error", sse_error(503, "BrokerUnavailable", repr(exc)))
    return sse("error", sse_error(500, "InternalError", repr(exc), exc))


def event_stream(events: AsyncIterator[str]) -> EventSourceResponse:
    """The response relaying ``events`` (already formatted by :func:`sse`) as they are produced, with
    keep-alive comments in between; a client that disconnects ends the stream (and ``events`` is closed)."""

    async def encoded() -> AsyncIterator[bytes]:
        try:
            async for event in events:
                yield event.encode()
        finally:  # closed early (the client went away): let ``events`` release what it holds now
            aclose = getattr(events, "aclose", None)
            if aclose is not None:
                await aclose()

    return EventSourceResponse(
        encoded(),
        ping=PING_S,
        sep=_SEP,
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )
