"""Issue #16 item 4 at the embedder: one event that cannot be embedded (or one NaN vector) is dead-lettered
alone; the rest of its batch is embedded and the batch committed."""

from __future__ import annotations

import asyncio
import json

import numpy as np
import pytest

from services.embedder.encode import Encoded, encode_isolating, serialize_encoded
from services.embedder.pipeline import Batch, EmbedPipeline, Offsets, Payload
from shared.events import ChunkCreated, ChunkEmbedded

DIM = 4


def _events(n: int) -> list[ChunkCreated]:
    return [
        ChunkCreated(chunk_id=f"c{i}", document_id=f"d{i}", ordinal=0, text=f"t{i}", token_count=1) for i in range(n)
    ]


def fake_model(poison: set[str], nan: set[str] = frozenset(), calls: list[int] | None = None):  # type: ignore[no-untyped-def,assignment]
    """Encodes like a model that fails for a whole batch holding a poisoned text (e.g. out of memory on it)."""

    def encode(events: list[ChunkCreated]) -> np.ndarray:
        if calls is not None:
            calls.append(len(events))
        if any(e.text in poison for e in events):
            raise RuntimeError("CUDA out of memory")
        out = np.array([[float(e.chunk_id[1:]) + 1] * DIM for e in events], dtype=np.float32)
        for k, e in enumerate(events):
            if e.text in nan:
                out[k, 0] = np.nan
        return out

    return encode


def test_bisecting_rejects_only_the_event_that_fails_alone() -> None:
    events = _events(16)
    calls: list[int] = []
    result = encode_isolating(fake_model({"t11"}, calls=calls), events)
    assert [i for i, _ in result.rejected] == [11]
    assert sorted(result.good) == [i for i in range(16) if i != 11]
    for row, i in zip(result.vectors, result.good, strict=True):  # each vector stays with its event
        assert row[0] == i + 1
    assert sum(calls) < 16 * 3, "bisection, not one encode per event plus the whole batch each time"


def test_a_broken_model_fails_the_batch_instead_of_rejecting_every_event() -> None:
    with pytest.raises(RuntimeError, match="out of memory"):
        encode_isolating(fake_model({f"t{i}" for i in range(4)}), _events(4))


def test_a_nan_vector_is_rejected_alone() -> None:
    events = _events(5)
    encoded = encode_isolating(fake_model(set(), nan={"t2"}), events)
    payloads = serialize_encoded("m", DIM, events, encoded)
    assert [ChunkEmbedded.model_validate_json(v).chunk_id for _, v in payloads] == ["c0", "c1", "c3", "c4"]
    assert [i for i, _ in encoded.rejected] == [2] and "not finite" in str(encoded.rejected[0][1])


async def test_the_pipeline_dead_letters_rejected_events_alone_then_commits() -> None:
    events = _events(8)
    records = [f"record-{i}" for i in range(8)]
    sent: list[str] = []
    letters: list[tuple[list[str], str]] = []
    commits: list[Offsets] = []

    async def publish(payloads: list[Payload]) -> None:
        sent.extend(json.loads(v)["chunk_id"] for _, v in payloads)

    async def on_error(batch: Batch[ChunkCreated], exc: BaseException) -> None:
        letters.append((list(batch.records), str(exc)))

    async def commit(offsets: Offsets) -> None:
        assert len(letters) == 2, "the offsets moved past events that were neither embedded nor dead-lettered"
        commits.append(offsets)

    pipe: EmbedPipeline[ChunkCreated] = EmbedPipeline(
        lambda evs: encode_isolating(fake_model({"t3"}, nan={"t6"}), evs),
        publish,
        serialize=lambda evs, enc: serialize_encoded("m", DIM, evs, enc),
        on_error=on_error,
        rejects=lambda enc: list(enc.rejected) if isinstance(enc, Encoded) else [],
    )
    await pipe.start()
    try:
        await pipe.submit(Batch(events=events, offsets={"p": 8}, commit=commit, records=records, event_records=records))
        await asyncio.wait_for(pipe.drain(), 10)
    finally:
        await pipe.stop()
    assert sorted(sent) == sorted(f"c{i}" for i in range(8) if i not in (3, 6))
    assert [r for r, _ in letters] == [["record-3"], ["record-6"]]
    assert "out of memory" in letters[0][1] and "not finite" in letters[1][1]
    assert commits == [{"p": 8}]
