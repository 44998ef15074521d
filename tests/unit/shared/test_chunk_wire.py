"""``ChunkCreated`` version 2 (the binary frame of :mod:`shared.chunk_wire`) and the reading of version 1."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from shared.chunk_wire import MAGIC, VERSION, encode_chunk, is_binary, read_chunk, to_event
from shared.events import ChunkCreated

IDS = [101, 2023, 2003, 1037, 3231, 102]

# What the parser wrote before version 2 (recorded from a version-1 parser, ids packed as base64 uint32).
OLD_EVENT = (
    b'{"schema_version":1,"trace_id":"6f1c0b7e","created_at":"2026-11-27T16:48:00Z","chunk_id":"d1:0:abc",'
    b'"document_id":"pmid:1","ordinal":0,"text":"Document: T\\nSection: Abstract\\n\\nAspirin lowers risk.",'
    b'"token_count":6,"job_id":"job-1","token_ids_u32":"ZQAAAOcHAADTBwAADQQAAJ8MAABmAAAA",'
    b'"token_model":"all-MiniLM-L6-v2"}'
)


def _event(**fields: object) -> ChunkCreated:
    base: dict[str, object] = {
        "trace_id": "t-1",
        "chunk_id": "pmid:1:0",
        "document_id": "pmid:1",
        "ordinal": 0,
        "text": "Document: Aspirin — ß\nSection: Abstract\n\nAspirin lowers risk.",
        "token_count": len(IDS),
        "job_id": "job-1",
        "token_model": "all-MiniLM-L6-v2",
    }
    return ChunkCreated.model_validate(base | fields)


def test_version_2_round_trips_every_field() -> None:
    event = _event()
    body = encode_chunk(event, IDS)
    assert is_binary(body) and body[:4] == MAGIC
    assert struct.unpack_from("<H", body, 4)[0] == VERSION
    back = to_event(body)
    assert back.schema_version == 2
    assert back.model_dump(exclude={"schema_version", "token_ids_u32"}) == event.model_dump(
        exclude={"schema_version", "token_ids_u32"}
    )
    ids = back.input_ids()
    assert ids is not None and ids.tolist() == IDS


def test_the_embedders_reader_gets_ids_keys_and_text() -> None:
    chunk = read_chunk(encode_chunk(_event(target_model="bge-small-en-v1.5"), IDS))
    ids = chunk.input_ids()
    assert ids is not None and ids.dtype == np.uint16 and ids.tolist() == IDS
    assert (chunk.trace_id, chunk.chunk_id, chunk.document_id, chunk.job_id) == ("t-1", "pmid:1:0", "pmid:1", "job-1")
    assert (chunk.token_model, chunk.target_model) == ("all-MiniLM-L6-v2", "bge-small-en-v1.5")
    assert chunk.text == _event().text


def test_ids_past_uint16_are_written_as_uint32() -> None:
    big = [0, 65_535, 65_536, 250_001]
    chunk = read_chunk(encode_chunk(_event(), big))
    ids = chunk.input_ids()
    assert ids is not None and ids.dtype == np.uint32 and ids.tolist() == big


def test_an_event_without_ids_carries_none_and_no_token_model() -> None:
    chunk = read_chunk(encode_chunk(_event(token_model=None)))
    assert chunk.input_ids() is None and chunk.token_model is None


def test_the_ids_a_version_1_event_carries_are_taken_when_none_are_given() -> None:
    event = _event(token_ids_u32=ChunkCreated.pack_ids(IDS))
    ids = read_chunk(encode_chunk(event)).input_ids()
    assert ids is not None and ids.tolist() == IDS


def test_a_recorded_version_1_event_is_still_read() -> None:
    assert not is_binary(OLD_EVENT)
    chunk = read_chunk(OLD_EVENT)
    ids = chunk.input_ids()
    assert ids is not None and ids.tolist() == [101, 2023, 2003, 1037, 3231, 102]
    assert chunk.document_id == "pmid:1" and chunk.token_model == "all-MiniLM-L6-v2"
    assert chunk.text.endswith("Aspirin lowers risk.")
    assert to_event(OLD_EVENT).schema_version == 1


def _truncated() -> bytes:
    return encode_chunk(_event(), IDS)[:20]


def _bad_version() -> bytes:
    body = bytearray(encode_chunk(_event(), IDS))
    struct.pack_into("<H", body, 4, 3)
    return bytes(body)


def _bad_meta() -> bytes:
    body = bytearray(encode_chunk(_event(), IDS))
    body[16] = ord("[")
    return bytes(body)


def _no_document() -> bytes:
    body = encode_chunk(_event(), IDS)
    return body.replace(b'"document_id":"pmid:1"', b'"document_id":""      ')


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (MAGIC + b"\x02", "shorter than its 16-byte header"),
        (_truncated(), "shorter than its header says"),
        (_bad_version(), "schema_version 3 is not known"),
        (_bad_meta(), "not JSON"),
        (_no_document(), "`document_id` must be a non-empty string"),
        (b'{"schema_version":1,"chunk_id":"c"}', "validation error"),
        (b"\xff\xfe not json", "JSON"),
    ],
)
def test_a_malformed_record_raises_value_error_with_its_reason(body: bytes, reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        read_chunk(body)
