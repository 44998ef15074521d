"""Issue #16 item 4 at the retriever: vectors are validated one by one, and a group the database refuses
is bisected, so one bad vector is dead-lettered alone instead of with its whole batch (up to 512)."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg
import numpy as np
import pytest
from faststream.kafka import KafkaBroker, TestKafkaBroker

import services.retriever.handlers as handlers
from services.retriever.engine.vector.tables import VectorIndex
from shared.events import ChunkEmbedded, DeadLetter
from shared.kafka.context import KafkaMessage
from shared.kafka.decoding import decode
from shared.kafka.errors import PoisonEvent
from shared.settings import Settings
from tests.unit.shared.kafka.test_dead_letters import broker_with

DIM = 3


def _event(i: int, vector: list[float] | None = None) -> ChunkEmbedded:
    return ChunkEmbedded(
        chunk_id=f"c{i}",
        document_id=f"pubmed:{i}",
        model="m",
        dim=DIM,
        embedding_f32=ChunkEmbedded.pack(vector or [1.0, 0.5, i + 1.0]),
    )


def test_a_nan_in_a_version1_vector_is_poison_for_that_record_only() -> None:
    body = json.dumps(
        {
            "schema_version": 1,
            "chunk_id": "c",
            "document_id": "d",
            "model": "m",
            "dim": 3,
            "embedding": [1.0, float("nan"), 2.0],
        }
    )
    assert "NaN" in body  # what Python's (and many) JSON writers emit, and pydantic reads
    with pytest.raises(PoisonEvent, match="not finite"):
        decode(ChunkEmbedded, body)
    with pytest.raises(PoisonEvent, match="all zeros"):
        decode(
            ChunkEmbedded,
            _event(0).model_dump_json().replace(ChunkEmbedded.pack([1.0, 0.5, 1.0]), ChunkEmbedded.pack([0.0] * 3)),
        )


class FakeState:
    def __init__(self) -> None:
        self.index = VectorIndex("i", "m", DIM, "chunk_vectors_i", "building")
        self.pool = None
        self.settings = Settings()

    async def index_for(self, model: str, dim: int) -> VectorIndex:
        return self.index


def _retriever(
    monkeypatch: pytest.MonkeyPatch, upsert: Callable[..., Awaitable[int]], *, attempts: int
) -> tuple[KafkaBroker, list[DeadLetter]]:
    """A broker with the retriever's handlers storing through ``upsert``, and the dead letters it sends."""
    monkeypatch.setattr(handlers, "upsert_vectors", upsert)
    broker = broker_with(attempts=attempts)
    letters: list[DeadLetter] = []
    handlers.register_store(broker, FakeState())  # type: ignore[arg-type]

    @broker.subscriber("chunks.embedded.dlq", group_id="d")
    async def dlq(msg: KafkaMessage) -> None:
        letters.append(DeadLetter.model_validate_json(msg.body))

    return broker, letters


async def test_one_vector_the_database_refuses_does_not_dead_letter_its_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    stored: list[str] = []
    calls: list[int] = []

    async def upsert(
        pool: Any,
        index: VectorIndex,
        chunk_ids: list[str],
        doc_ids: list[str],
        vectors: np.ndarray,
        *,
        concurrency: int = 1,
    ) -> int:
        assert concurrency == 2  # the setting's default reaches the store
        calls.append(len(chunk_ids))
        if "c37" in chunk_ids:
            raise asyncpg.DataError("vector has a value out of range")
        stored.extend(chunk_ids)
        return len(chunk_ids)

    broker, letters = _retriever(monkeypatch, upsert, attempts=1)
    events = [_event(i) for i in range(64)]
    nan_v1 = json.dumps(
        {
            "schema_version": 1,
            "chunk_id": "c99",
            "document_id": "pubmed:99",
            "model": "m",
            "dim": 3,
            "embedding": [float("nan"), 1.0, 1.0],
        }
    ).encode()
    async with TestKafkaBroker(broker) as br:
        await br.publish_batch(*[e.model_dump_json().encode() for e in events], nan_v1, topic="chunks.embedded")
    assert sorted(stored) == sorted(f"c{i}" for i in range(64) if i != 37)
    assert sorted(letter.payload_json["chunk_id"] for letter in letters) == ["c37", "c99"]
    assert {letter.error_type for letter in letters} == {"DataError", "PoisonEvent"}
    assert len(calls) < 20, "bisection: a handful of upserts, not one per vector"


@pytest.mark.parametrize(
    "error",
    [
        asyncpg.UndefinedTableError('relation "chunk_vectors_i" does not exist'),
        asyncpg.QueryCanceledError("canceling statement due to statement timeout"),
        TypeError("a bug in the store"),
    ],
    ids=["dropped table", "statement timeout", "bug"],
)
async def test_a_fault_not_in_the_data_retries_the_batch_instead_of_dead_lettering_each_record(
    monkeypatch: pytest.MonkeyPatch, error: Exception
) -> None:
    """Only errors that blame the data are bisected: anything else failing the whole batch used to be
    bisected down to single records and dead-letter every one of them on the first attempt (64 letters for
    one dropped table). Now the dead-letter policy retries the batch, which is stored once the fault clears."""
    calls: list[int] = []
    stored: list[str] = []

    async def upsert(
        pool: Any, index: VectorIndex, chunk_ids: list[str], doc_ids: list[str], vectors: np.ndarray, **_: Any
    ) -> int:
        calls.append(len(chunk_ids))
        if len(calls) <= 2:  # the fault strikes the first two deliveries, then clears
            raise error
        stored.extend(chunk_ids)
        return len(chunk_ids)

    broker, letters = _retriever(monkeypatch, upsert, attempts=3)
    async with TestKafkaBroker(broker) as br:
        await br.publish_batch(*[_event(i).model_dump_json().encode() for i in range(64)], topic="chunks.embedded")
    assert calls == [64, 64, 64], "the whole batch each time: no bisection for a fault outside the data"
    assert sorted(stored) == sorted(f"c{i}" for i in range(64))
    assert letters == []


def test_only_errors_in_the_data_count_as_data_errors() -> None:
    from shared.kafka.errors import is_data_error

    assert is_data_error(asyncpg.DataError("vector has a value out of range"))
    assert is_data_error(asyncpg.NotNullViolationError("null value in column"))
    assert is_data_error(PoisonEvent("bad payload"))
    for other in (
        asyncpg.UndefinedTableError("gone"),
        asyncpg.QueryCanceledError("timeout"),
        asyncpg.DiskFullError("no space left on device"),
        ConnectionResetError("peer"),
        TypeError("bug"),
    ):
        assert not is_data_error(other), other
