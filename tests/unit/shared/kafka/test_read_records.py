"""One per-record loop sets bad records aside for every batch reader: the events read with pydantic
(``decode_records``) and the embedder's chunks read from their binary frame (``decode_chunks``)."""

from __future__ import annotations

from typing import Any

from aiokafka import ConsumerRecord

from services.embedder.decode import decode_chunks
from shared.chunk_wire import encode_chunk
from shared.events import ChunkCreated
from shared.kafka.decoding import decode_records, read_records
from shared.kafka.errors import PoisonEvent
from shared.kafka.messages import UNDECODABLE_HEADER


def _record(value: bytes, offset: int, headers: list[tuple[str, bytes]] | None = None) -> ConsumerRecord[Any, Any]:
    return ConsumerRecord("t", 0, offset, 0, 0, b"k", value, None, 1, len(value), headers or [])


def _chunk(chunk_id: str) -> ChunkCreated:
    return ChunkCreated(chunk_id=chunk_id, document_id="pmid:1", ordinal=0, text="Aspirin lowers risk.", token_count=3)


UNDECODABLE = [(UNDECODABLE_HEADER, b"a header that is not UTF-8")]


def test_the_loop_keeps_what_the_reader_makes_and_sets_poison_aside() -> None:
    def read(body: bytes) -> int:
        if not body.isdigit():
            raise PoisonEvent(f"not a number: {body!r}")
        return int(body)

    out = read_records(read, [_record(b"7", 0), _record(b"x", 1), _record(b"8", 2, UNDECODABLE)])
    assert [(r.offset, value) for r, value, _ in out] == [(0, 7), (1, None), (2, None)]
    assert out[0][2] is None
    assert "not a number" in str(out[1][2])
    assert str(out[2][2]) == "a header that is not UTF-8"  # the reader never saw it


def test_events_and_chunks_are_read_by_the_same_loop() -> None:
    good = _chunk("pmid:1:0")
    records = [
        _record(good.model_dump_json().encode(), 0),  # version 1 (JSON)
        _record(encode_chunk(_chunk("pmid:1:1"), [101, 102]), 1),  # version 2 (binary)
        _record(b"{not json", 2),
        _record(good.model_dump_json().encode(), 3, UNDECODABLE),
    ]
    events = decode_records(ChunkCreated, records[:1] + records[2:])
    assert [e.chunk_id if e is not None else None for _, e, _ in events] == ["pmid:1:0", None, None]
    assert "not a valid ChunkCreated" in str(events[1][2])
    chunks = decode_chunks(records)
    assert [c.chunk_id if c is not None else None for _, c, _ in chunks] == ["pmid:1:0", "pmid:1:1", None, None]
    chunk = chunks[1][1]
    ids = chunk.input_ids() if chunk is not None else None
    assert ids is not None and ids.tolist() == [101, 102]
    assert "not a valid ChunkCreated" in str(chunks[2][2])
    assert str(chunks[3][2]) == str(events[2][2]) == "a header that is not UTF-8"
