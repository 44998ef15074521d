"""Consumed ``chunks.created`` / ``chunks.reindex`` records -> the chunks to embed, each record on its own.

Either version of ``ChunkCreated`` is read (:func:`shared.chunk_wire.read_chunk`: the binary frame without
pydantic, JSON through it). A record that cannot be read comes back with its :class:`PoisonEvent` instead of
a chunk, so the handler dead-letters that record alone and embeds its neighbours. Runs in the embedder's
decode thread, off the event loop.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from aiokafka import ConsumerRecord

from shared.chunk_wire import WireChunk, read_chunk
from shared.kafka.decoding import undecodable_reason
from shared.kafka.errors import PoisonEvent

Decoded = tuple[ConsumerRecord[Any, Any], WireChunk | None, PoisonEvent | None]


def decode_chunks(records: Sequence[ConsumerRecord[Any, Any]]) -> list[Decoded]:
    """Each record with its chunk, or with why it is poison (a malformed body, or undecodable headers)."""
    out: list[Decoded] = []
    for record in records:
        reason = undecodable_reason(record)
        if reason is not None:
            out.append((record, None, PoisonEvent(reason)))
            continue
        try:
            out.append((record, read_chunk(record.value or b""), None))
        except ValueError as exc:  # pydantic's ValidationError and UnicodeDecodeError included
            out.append((record, None, PoisonEvent(f"not a valid ChunkCreated: {exc}")))
    return out
