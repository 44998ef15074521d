"""Events from Kafka records, with a bad record set aside instead of failing the batch around it.

:func:`decode` turns one body into an event (a bad one is a :class:`~shared.kafka.errors.PoisonEvent`);
:func:`decode_batch` splits a batch into events and poison records. FastStream's own parser and decoder would
drop a record with a header that is not UTF-8 before any middleware sees it, and fail a whole batch on one body
that is not JSON; :func:`tolerant_parser` and :func:`tolerant_batch_decoder` (installed by
:func:`shared.kafka.broker.make_broker`) let those records through, marked, so exactly they are dead-lettered.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from aiokafka import ConsumerRecord
from faststream.message import StreamMessage
from pydantic import BaseModel, ValidationError

from shared.kafka.context import KafkaMessage
from shared.kafka.errors import PoisonEvent
from shared.kafka.messages import UNDECODABLE_HEADER, records_of

E = TypeVar("E", bound=BaseModel)
R = TypeVar("R")


def decode(model: type[E], body: bytes | str | dict[str, Any]) -> E:
    """Decode one event; a bad payload raises :class:`PoisonEvent` with the reason."""
    try:
        if isinstance(body, dict):
            return model.model_validate(body)
        return model.model_validate_json(body)
    except ValidationError as exc:
        raise PoisonEvent(f"not a valid {model.__name__}: {exc}") from exc


def decode_batch(
    model: type[E], msg: KafkaMessage | StreamMessage[Any]
) -> tuple[list[E], list[tuple[ConsumerRecord[Any, Any], PoisonEvent]]]:
    """Split a batch into valid events and poison records (each with its reason)."""
    good: list[E] = []
    bad: list[tuple[ConsumerRecord[Any, Any], PoisonEvent]] = []
    for record, event, exc in decode_records(model, records_of(msg)):
        if event is not None:
            good.append(event)
        else:
            assert exc is not None
            bad.append((record, exc))
    return good, bad


def decode_records(
    model: type[E], records: Sequence[ConsumerRecord[Any, Any]]
) -> list[tuple[ConsumerRecord[Any, Any], E | None, PoisonEvent | None]]:
    """Each record with its event, or with why it is poison (bad body, or undecodable before the handler)."""
    return read_records(functools.partial(decode, model), records)


def read_records(
    read: Callable[[bytes], R], records: Sequence[ConsumerRecord[Any, Any]]
) -> list[tuple[ConsumerRecord[Any, Any], R | None, PoisonEvent | None]]:
    """Each record with what ``read`` makes of its body, or with why it is poison: undecodable before the
    handler (:func:`tolerant_parser`), or a :class:`PoisonEvent` that ``read`` raised. The one per-record loop
    of every batch handler that sets bad records aside (:func:`decode_records` reads events with pydantic; the
    embedder reads its binary chunks without)."""
    out: list[tuple[ConsumerRecord[Any, Any], R | None, PoisonEvent | None]] = []
    for record in records:
        reason = undecodable_reason(record)
        if reason is not None:
            out.append((record, None, PoisonEvent(reason)))
            continue
        try:
            out.append((record, read(record.value or b""), None))
        except PoisonEvent as exc:
            out.append((record, None, exc))
    return out


def undecodable_reason(record: ConsumerRecord[Any, Any]) -> str | None:
    """Why ``record`` could not be decoded before its handler ran (see :func:`tolerant_parser`), or None."""
    for k, v in record.headers or ():
        if k == UNDECODABLE_HEADER:
            return bytes(v).decode("utf-8", "replace")
    return None


def _safe_record(record: ConsumerRecord[Any, Any]) -> ConsumerRecord[Any, Any]:
    """``record`` with its headers made decodable; a record that had a bad one is marked undecodable."""
    headers: list[tuple[str, bytes]] = []
    bad: list[str] = []
    for k, v in record.headers or ():
        try:
            bytes(v).decode("utf-8")
            headers.append((k, v))
        except UnicodeDecodeError as exc:
            bad.append(f"header {k!r} is not UTF-8 ({exc.reason} at byte {exc.start})")
            headers.append((k, bytes(v).decode("utf-8", "replace").encode("utf-8")))
    if not bad:
        return record
    headers.append((UNDECODABLE_HEADER, "; ".join(bad).encode()))
    return dataclasses.replace(record, headers=headers)


async def tolerant_parser(msg: Any, original: Callable[..., Awaitable[Any]]) -> Any:
    """FastStream's parser, except that a record it cannot decode (a header that is not UTF-8) is not
    skipped silently before any middleware sees it: its headers are made decodable and it is marked
    (``evidentia-undecodable``) so :class:`DeadLetterPolicy` (or a batch handler's :func:`decode_batch`)
    dead-letters it with the reason."""
    try:
        return await original(msg)
    except UnicodeDecodeError:
        if isinstance(msg, tuple | list):
            return await original(tuple(_safe_record(r) for r in msg))
        return await original(_safe_record(msg))


async def tolerant_batch_decoder(msg: StreamMessage[Any], original: Callable[..., Awaitable[Any]]) -> Any:
    """FastStream's decoder, except that one bad record cannot fail a whole batch.

    FastStream decodes a batch before the handler runs, and a record sent with ``content-type:
    application/json`` whose body is not JSON raises ``JSONDecodeError`` for the whole batch: the dead-letter
    policy would then take every good event beside it. Here the bad record decodes to its raw bytes and the
    batch handler's :func:`decode_batch` sends just that record to the DLQ with its reason. A single record
    still fails (poison, dead-lettered alone).
    """
    try:
        return await original(msg)
    except (json.JSONDecodeError, UnicodeDecodeError):
        raw = msg.raw_message
        if not isinstance(raw, tuple | list):
            raise
        out: list[Any] = []
        for record in raw:
            body = record.value or b""
            try:
                out.append(json.loads(body))
            except (json.JSONDecodeError, UnicodeDecodeError):
                out.append(body)
        return out


async def undecoded_batch(msg: StreamMessage[Any], original: Callable[..., Awaitable[Any]]) -> Any:
    """Decoder of batch handlers that decode their own records (:func:`decode_batch`): the raw bodies.

    FastStream JSON-decodes every record of a batch before the handler runs, even when the handler reads only
    the message; for the embedder's and the retriever's hot batch consumers that would decode every event twice
    (the cost is in docs/benchmarks.md).
    """
    return [record.value for record in records_of(msg)]
