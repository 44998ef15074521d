"""The embedder's handler on a consumed batch: every record read on its own (either ``ChunkCreated``
version), a poison record dead-lettered alone, its good neighbours embedded in their order, the batch's
offsets committed past all of them."""

from __future__ import annotations

from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

import pytest
from aiokafka import ConsumerRecord, TopicPartition

import services.embedder.handlers as handlers
from services.embedder.handlers import EmbedderState
from services.embedder.pipeline import Batch
from shared.chunk_wire import WireChunk, encode_chunk
from shared.events import ChunkCreated
from shared.settings import Settings


def _created(i: int, target: str | None = None) -> ChunkCreated:
    return ChunkCreated(
        chunk_id=f"c{i}", document_id=f"d{i}", ordinal=0, text=f"text {i}", token_count=3, target_model=target
    )


def _record(offset: int, value: bytes, partition: int = 0) -> ConsumerRecord[Any, Any]:
    return ConsumerRecord("chunks.created", partition, offset, 0, 0, b"k", value, None, 1, len(value), [])


async def _take(
    monkeypatch: pytest.MonkeyPatch, records: Sequence[ConsumerRecord[Any, Any]], target: str | None = None
) -> tuple[list[Batch[WireChunk]], list[tuple[list[int], str]]]:
    letters: list[tuple[list[int], str]] = []

    async def dead_letter(broker: Any, service: str, recs: Sequence[Any], exc: BaseException, attempts: int) -> None:
        letters.append(([r.offset for r in recs], str(exc)))

    monkeypatch.setattr(handlers, "publish_dead_letters", dead_letter)
    state = EmbedderState(Settings())
    state._broker = object()  # type: ignore[assignment]
    batches: list[Batch[WireChunk]] = []

    async def submit(batch: Batch[WireChunk]) -> None:
        batches.append(batch)

    monkeypatch.setattr(state.pipeline, "submit", submit)
    await state.take(SimpleNamespace(raw_message=list(records)), target_model=target)  # type: ignore[arg-type]
    return batches, letters


async def test_a_poison_record_is_dead_lettered_alone_and_its_neighbours_keep_their_order(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    records = [
        _record(10, encode_chunk(_created(0), [101, 7, 102])),
        _record(11, b"\x00ECC\x02\x00 truncated"),
        _record(12, _created(2).model_dump_json().encode()),  # version 1 JSON, still read
        _record(13, b'{"not": "a chunk"}'),
        _record(14, encode_chunk(_created(4), [101, 9, 102])),
    ]
    batches, letters = await _take(monkeypatch, records)
    assert [offsets for offsets, _ in letters] == [[11], [13]]
    assert all("not a valid ChunkCreated" in reason for _, reason in letters)
    (batch,) = batches
    assert [e.chunk_id for e in batch.events] == ["c0", "c2", "c4"]
    assert [r.offset for r in batch.event_records] == [10, 12, 14]
    assert batch.offsets == {TopicPartition("chunks.created", 0): 15}
    ids = batch.events[0].input_ids()
    assert ids is not None and ids.tolist() == [101, 7, 102]
    assert batch.events[1].input_ids() is None and batch.events[1].text == "text 2"


async def test_a_batch_of_only_poison_is_committed_with_no_events(monkeypatch: pytest.MonkeyPatch) -> None:
    batches, letters = await _take(monkeypatch, [_record(0, b"garbage"), _record(1, b"\x00ECC")])
    assert [offsets for offsets, _ in letters] == [[0], [1]]
    (batch,) = batches
    assert batch.events == [] and batch.offsets == {TopicPartition("chunks.created", 0): 2}


async def test_reindex_events_of_another_model_are_skipped_but_committed(monkeypatch: pytest.MonkeyPatch) -> None:
    records = [
        _record(0, encode_chunk(_created(0, target="model-a"))),
        _record(1, encode_chunk(_created(1, target="model-b"))),
    ]
    batches, letters = await _take(monkeypatch, records, target="model-b")
    assert not letters
    (batch,) = batches
    assert [e.chunk_id for e in batch.events] == ["c1"]
    assert batch.offsets == {TopicPartition("chunks.created", 0): 2}
