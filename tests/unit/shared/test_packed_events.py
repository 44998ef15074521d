"""The packed forms of the embedder's events: ``ChunkEmbedded`` v2 vectors and ``ChunkCreated`` token ids."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pytest
from pydantic import ValidationError

from shared.events import ChunkCreated, ChunkEmbedded, PackedVector
from shared.kafka.decoding import decode
from shared.kafka.errors import PoisonEvent

RNG = np.random.default_rng(7)
VEC = RNG.standard_normal(8).astype(np.float32)


def _payload(**fields: Any) -> bytes:
    base = {"trace_id": "t1", "chunk_id": "pubmed:1#0", "document_id": "pubmed:1", "model": "m", "dim": 8}
    return json.dumps({**base, **fields}).encode()


def test_a_version_1_event_still_decodes() -> None:
    event = decode(ChunkEmbedded, _payload(schema_version=1, embedding=[float(x) for x in VEC]))
    assert event.schema_version == 1
    np.testing.assert_array_equal(event.vector(), VEC)


def test_version_2_round_trips_the_float32_values_exactly() -> None:
    out = ChunkEmbedded(chunk_id="c", document_id="d", model="m", dim=8, embedding_f32=ChunkEmbedded.pack(VEC))
    raw = out.model_dump_json(exclude_none=True)
    assert json.loads(raw)["schema_version"] == 2
    back = decode(ChunkEmbedded, raw)
    assert back.vector().dtype == np.float32
    np.testing.assert_array_equal(back.vector(), VEC)
    # Little-endian on the wire whatever the host's order.
    assert base64.b64decode(back.embedding_f32 or "") == VEC.astype("<f4").tobytes()


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        ({"schema_version": 2}, "exactly one"),
        ({"schema_version": 2, "embedding": [0.0] * 8, "embedding_f32": ChunkEmbedded.pack(VEC)}, "exactly one"),
        ({"schema_version": 2, "embedding_f32": ChunkEmbedded.pack(VEC[:7])}, "28 bytes, dim 8 needs 32"),
        ({"schema_version": 2, "embedding_f32": "not base64!"}, "not base64"),
        ({"schema_version": 2, "embedding_f32": ChunkEmbedded.pack([np.nan] * 8)}, "not finite"),
        ({"schema_version": 1, "embedding_f32": ChunkEmbedded.pack(VEC)}, "needs schema_version 2"),
        ({"schema_version": 1, "embedding": [0.0] * 7}, "7 values, dim says 8"),
        ({"schema_version": 3, "embedding": [0.0] * 8}, "schema_version"),
    ],
)
def test_a_malformed_vector_is_a_poison_event_with_its_reason(fields: dict[str, Any], reason: str) -> None:
    with pytest.raises(PoisonEvent, match=reason):
        decode(ChunkEmbedded, _payload(**fields))


def test_a_producer_cannot_build_a_vector_of_the_wrong_size() -> None:
    with pytest.raises(ValidationError):
        ChunkEmbedded(chunk_id="c", document_id="d", model="m", dim=4, embedding_f32=ChunkEmbedded.pack(VEC))


# --- ChunkCreated's packed token ids (same file: the two packed forms of the embedder's events) --------

IDS = [101, 7592, 2088, 65535, 70000, 102]


def _created(**fields: Any) -> bytes:
    base = {
        "chunk_id": "pubmed:1#0",
        "document_id": "pubmed:1",
        "ordinal": 0,
        "text": "t",
        "token_count": 6,
        "token_model": "m",
    }
    return json.dumps({**base, **fields}).encode()


def test_token_ids_read_the_same_packed_or_listed() -> None:
    packed = decode(ChunkCreated, _created(token_ids_u32=ChunkCreated.pack_ids(IDS)))
    listed = decode(ChunkCreated, _created(token_ids=IDS))
    none = decode(ChunkCreated, _created())
    for event in (packed, listed):
        ids = event.input_ids()
        assert ids is not None and np.issubdtype(ids.dtype, np.integer)
        assert ids.tolist() == IDS  # ids above 65,535 survive (uint32)
    assert none.input_ids() is None


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        ({"token_ids_u32": "%%%", "token_ids": None}, "not base64"),
        ({"token_ids_u32": base64.b64encode(b"\x01\x02\x03").decode()}, "3 bytes, not a whole number of 4-byte values"),
        ({"token_ids_u32": ChunkCreated.pack_ids(IDS), "token_ids": IDS}, "once"),
    ],
)
def test_malformed_packed_token_ids_are_a_poison_event(fields: dict[str, Any], reason: str) -> None:
    with pytest.raises(PoisonEvent, match=reason):
        decode(ChunkCreated, _created(**fields))


@pytest.mark.parametrize("dim", [384, 1024])
@pytest.mark.parametrize("model", ["sentence-transformers/all-MiniLM-L6-v2", 'odd "100%" modèle\\'])
def test_batch_json_is_what_pydantic_writes_for_each_event(model: str, dim: int) -> None:
    rng = np.random.default_rng(dim)
    ids = ["pubmed:1:0", 'quote " back \\ slash', "100% ünïcode ✓", "ctrl \x01\n\t", "%b %s %%"]
    items = [
        PackedVector(
            trace_id=f"t{i}-{name}",
            chunk_id=name,
            document_id=f"doc {name}",
            embedding_f32=ChunkEmbedded.pack(rng.standard_normal(dim)).encode(),
            job_id=None if i % 2 else f"job {name}",
        )
        for i, name in enumerate(ids)
    ]
    now = datetime.now(UTC)
    bodies = ChunkEmbedded.packed_json_batch(model=model, dim=dim, created_at=now, items=items)
    assert len(bodies) == len(items)
    for item, body in zip(items, bodies, strict=True):
        expected = ChunkEmbedded.model_construct(
            schema_version=2,
            trace_id=item.trace_id,
            created_at=now,
            chunk_id=item.chunk_id,
            document_id=item.document_id,
            model=model,
            dim=dim,
            embedding=None,
            embedding_f32=item.embedding_f32.decode(),
            job_id=item.job_id,
        )
        assert body == expected.model_dump_json(exclude_none=True).encode()
        assert ChunkEmbedded.model_validate_json(body) == ChunkEmbedded.model_validate(expected.model_dump())
