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
from shared.kafka.decoding import read_records
from shared.kafka.errors import PoisonEvent

Decoded = tuple[ConsumerRecord[Any, Any], WireChunk | None, PoisonEvent | None]


def read_chunk_or_poison(body: bytes) -> WireChunk:
    """The chunk of one record's body; a malformed one raises :class:`PoisonEvent` saying why."""
    try:
        return read_chunk(body)
    except ValueError as exc:  # pydantic's ValidationError and UnicodeDecodeError included
        raise PoisonEvent(f"not a valid ChunkCreated: {exc}") from exc


def decode_chunks(records: Sequence[ConsumerRecord[Any, Any]]) -> list[Decoded]:
    """Each record with its chunk, or with why it is poison (a malformed body, or undecodable headers)."""
    return read_records(read_chunk_or_poison, records)
