"""Server-sent events: the one wire format, error event and response of every streaming route.

An event is ``event: NAME`` and ``data: JSON`` lines ended by a blank line. Once a stream has started its
status is sent, so a failure can only be told as an ``error`` event: a 4xx with its reason, a 5xx with an
error id only (the detail is logged with that id, :mod:`services.gateway.errors`).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from aiokafka.errors import KafkaError
from fastapi import HTTPException
from fastapi.responses import StreamingResponse

from services.gateway.errors import sse_error
from shared.kafka.reply_client import RemoteError, RequestTimeout

#: The OpenAPI ``responses`` of a streaming route.
STREAM_RESPONSES: dict[int | str, dict[str, Any]] = {200: {"content": {"text/event-stream": {}}}}


def sse(event: str, data: Any) -> str:
    """One server-sent event named ``event`` carrying ``data`` as JSON."""
    return f"event: {event}\ndata: {json.dumps(data, default=str)}\n\n"


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


def event_stream(events: AsyncIterator[str]) -> StreamingResponse:
    """The response relaying ``events`` (already formatted by :func:`sse`) as they are produced."""
    return StreamingResponse(
        events,
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )
