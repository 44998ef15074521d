"""What Evidentia puts on a Kafka record and reads back off it: its headers, its records, its trace id."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from aiokafka import ConsumerRecord
from faststream.message import StreamMessage

from shared.events import Event

EVENT_TYPE_HEADER = "evidentia-event"
"""The event's class name: how a reply reader tells progress, parts and the final answer apart."""
TRACE_HEADER = "trace-id"
UNDECODABLE_HEADER = "evidentia-undecodable"
"""Set on a record that could not be decoded before its handler ran, with the reason; it is dead-lettered."""


def event_headers(event: Event) -> dict[str, str]:
    return {EVENT_TYPE_HEADER: type(event).__name__, TRACE_HEADER: event.trace_id}


def records_of(msg: StreamMessage[Any]) -> list[ConsumerRecord[Any, Any]]:
    raw = msg.raw_message
    if isinstance(raw, ConsumerRecord):
        return [raw]
    return list(raw) if isinstance(raw, Sequence) else []


def key_str(key: Any) -> str | None:
    if key is None:
        return None
    return key.decode("utf-8", "replace") if isinstance(key, bytes) else str(key)


def trace_id_of(data: Any) -> str | None:
    """The ``trace_id`` of a decoded event body, when it has a plausible one."""
    trace = data.get("trace_id") if isinstance(data, dict) else None
    return trace if isinstance(trace, str) and 0 < len(trace) <= 64 else None


def body_trace_id(body: bytes) -> str | None:
    """The ``trace_id`` of a raw JSON body, or None when the body is not JSON."""
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return None
    return trace_id_of(data)
