"""Dead letters: a failed record made into a letter and sent to ``<topic>.dlq``.

:func:`make_letter` carries the original body once (JSON as JSON, see :class:`~shared.events.DeadLetter`), cut
beyond ``dlq_max_payload_bytes`` with the whole body's size and SHA-256, plus topic, partition, offset, key and
headers, so an operator can read it and :mod:`shared.kafka.dlq` can replay it. :func:`publish_dead_letters`
sends the letters and then runs the hooks services add (the parser and the fetcher mark the documents failed).
"""

from __future__ import annotations

import hashlib
import json
import logging
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from aiokafka import ConsumerRecord
from faststream.kafka import KafkaBroker

from shared import metrics
from shared.events import DeadLetter
from shared.kafka.messages import EVENT_TYPE_HEADER, key_str, trace_id_of
from shared.kafka.topics import dlq
from shared.settings import get_settings

log = logging.getLogger(__name__)


def _header_text(value: bytes | None) -> str:
    return (value or b"").decode("utf-8", "replace")


def make_letter(
    record: ConsumerRecord[Any, Any],
    *,
    service: str,
    exc: BaseException,
    attempts: int,
    max_payload_bytes: int,
) -> DeadLetter:
    """The dead letter of ``record``, which failed with ``exc`` after ``attempts`` attempts."""
    raw = record.value
    body = raw if isinstance(raw, bytes) else (b"" if raw is None else str(raw).encode())
    fields: dict[str, Any] = {
        "topic": record.topic,
        "partition": record.partition,
        "offset": record.offset,
        "key": key_str(record.key),
        "service": service,
        "error_type": type(exc).__name__,
        "error": str(exc)[:4000] or repr(exc),
        "attempts": attempts,
        "payload_bytes": len(body),
        "payload_sha256": hashlib.sha256(body).hexdigest(),
        "headers": {k: _header_text(v) for k, v in (record.headers or ())},
    }
    parsed: Any = None
    if len(body) <= max_payload_bytes:
        try:
            parsed = json.loads(body)
        except (ValueError, UnicodeDecodeError):
            parsed = None
    trace = trace_id_of(parsed)
    if parsed is not None:
        fields["payload_json"] = parsed
    else:
        cut = body[:max_payload_bytes]
        fields["payload"] = cut.decode("utf-8", "replace")
        fields["payload_truncated"] = len(cut) < len(body)
    return DeadLetter(trace_id=trace or uuid.uuid4().hex, **fields)


DeadLetterHook = Callable[[list[str], BaseException], Awaitable[None]]
_dead_letter_hooks: list[DeadLetterHook] = []


def add_dead_letter_hook(hook: DeadLetterHook) -> None:
    """Call ``hook(keys, error)`` after events are dead-lettered (e.g. to mark their documents failed)."""
    _dead_letter_hooks.append(hook)


async def publish_dead_letters(
    broker: KafkaBroker,
    service: str,
    records: Sequence[ConsumerRecord[Any, Any]],
    exc: BaseException,
    attempts: int,
    *,
    max_payload_bytes: int | None = None,
) -> None:
    """Send ``records`` to their dead-letter topics; returns once Kafka acknowledged every letter.

    Raises when a letter could not be sent: the caller must not move past the records then (see
    :class:`shared.kafka.retry.DeadLetterPolicy`, which retries until they are sent). Hooks run after all are sent.
    """
    limit = max_payload_bytes or get_settings().kafka.dlq_max_payload_bytes
    for record in records:
        letter = make_letter(record, service=service, exc=exc, attempts=attempts, max_payload_bytes=limit)
        await broker.publish(
            letter.wire(),
            topic=dlq(record.topic),
            key=record.key,
            headers={"content-type": "application/json", EVENT_TYPE_HEADER: "DeadLetter"},
        )
        metrics.DEAD_LETTERS.labels(service, record.topic, type(exc).__name__).inc()
        log.error(
            "event sent to dead-letter topic",
            extra={
                "topic": record.topic,
                "partition": record.partition,
                "offset": record.offset,
                "error_type": type(exc).__name__,
                "error": str(exc)[:500],
            },
        )
    keys = [k for k in (key_str(r.key) for r in records) if k]
    for hook in _dead_letter_hooks:
        try:
            await hook(keys, exc)
        except Exception:  # the dead letter is already safe in Kafka; a failing hook must not block the consumer
            log.warning("dead-letter hook failed", exc_info=True)
