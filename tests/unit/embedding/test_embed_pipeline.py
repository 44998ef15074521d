"""The embedder service's pipeline: order, commit after publish, back-pressure, token ids, bad batches."""

from __future__ import annotations

import asyncio
import contextvars
import json
import time
from typing import Any

import numpy as np
import pytest

from services.embedder.encode import encode_events
from services.embedder.handlers import next_offsets, reindex_group
from services.embedder.pipeline import Batch, EmbedPipeline, Offsets, Payload
from shared.embedding.base import BaseEmbedder
from shared.embedding.passage_tokens import passage_tokenizer
from shared.events import ChunkCreated, ChunkEmbedded
from shared.settings import EmbeddingSettings

TEXTS = [
    "Aspirin reduces the risk of myocardial infarction in patients with stable angina.",
    "Metformin is the first-line therapy for type 2 diabetes mellitus.",
    "Statins lower LDL cholesterol. " * 80,  # longer than the 256-token cap
    "Short.",
]


def _events(
    texts: list[str], ids: list[list[int]] | None = None, model: str | None = None, *, packed: bool = True
) -> list[ChunkCreated]:
    """As the parser ships them (``packed``: ``token_ids_u32``), or with a JSON list of ids (older parsers)."""
    return [
        ChunkCreated(
            chunk_id=f"c{i}",
            document_id=f"d{i}",
            ordinal=0,
            text=t,
            token_count=1,
            token_ids=ids[i] if ids and not packed else None,
            token_ids_u32=ChunkCreated.pack_ids(ids[i]) if ids and packed else None,
            token_model=model if ids else None,
        )
        for i, t in enumerate(texts)
    ]


def test_batches_are_published_in_order_and_committed_only_after_publishing() -> None:
    log: list[tuple[str, int]] = []

    def encode(events: list[int]) -> list[Payload]:
        time.sleep(0.01)
        return [(None, str(e).encode()) for e in events]

    async def publish(payloads: list[Payload]) -> None:
        await asyncio.sleep(0.005)
        log.extend(("sent", int(v)) for _, v in payloads)

    async def main() -> None:
        pipe: EmbedPipeline[int] = EmbedPipeline(encode, publish, depth=2)
        await pipe.start()

        async def commit(offsets: Offsets) -> None:
            log.append(("commit", offsets["p"]))

        for k in range(6):
            await pipe.submit(Batch(events=[2 * k, 2 * k + 1], offsets={"p": 2 * k + 2}, commit=commit))
        await pipe.drain()
        assert pipe.in_flight == 0
        await pipe.stop()

    asyncio.run(main())
    sent = [v for kind, v in log if kind == "sent"]
    assert sent == list(range(12))
    commits = [(i, v) for i, (kind, v) in enumerate(log) if kind == "commit"]
    assert [v for _, v in commits] == [2, 4, 6, 8, 10, 12]
    for position, offset in commits:  # every event below the committed offset was sent before
        assert {v for kind, v in log[:position] if kind == "sent"} >= set(range(offset))


_consumed_in: contextvars.ContextVar[str] = contextvars.ContextVar("consumed_in", default="pipeline task")


def test_a_batch_is_published_in_the_context_it_was_consumed_in() -> None:
    # With tracing on the embedder hands each batch the context of its consume span; the publisher task
    # (started long before) must publish in it, or the vectors would carry no traceparent.
    seen: list[str] = []

    async def publish(payloads: list[Payload]) -> None:
        seen.append(_consumed_in.get())

    async def main() -> None:
        pipe: EmbedPipeline[int] = EmbedPipeline(lambda ev: [(None, b"x") for _ in ev], publish, depth=2)
        await pipe.start()
        for name in ("batch-1", "batch-2"):
            token = _consumed_in.set(name)
            await pipe.submit(Batch(events=[1], offsets={}, context=contextvars.copy_context()))
            _consumed_in.reset(token)
        await pipe.submit(Batch(events=[1], offsets={}))  # no context given: the pipeline's own
        await pipe.drain()
        await pipe.stop()

    asyncio.run(main())
    assert seen == ["batch-1", "batch-2", "pipeline task"]


def test_submit_blocks_when_publishing_falls_behind() -> None:
    async def main() -> int:
        release = asyncio.Event()

        async def publish(payloads: list[Payload]) -> None:
            await release.wait()

        pipe: EmbedPipeline[int] = EmbedPipeline(lambda ev: [(None, b"x") for _ in ev], publish, depth=1)
        await pipe.start()
        accepted = 0

        async def producer() -> None:
            nonlocal accepted
            for k in range(10):
                await pipe.submit(Batch(events=[k], offsets={}))
                accepted += 1

        task = asyncio.create_task(producer())
        await asyncio.sleep(0.3)
        stuck_at = accepted
        release.set()
        await task
        await pipe.drain()
        await pipe.stop()
        return stuck_at

    # depth 1: one publishing, one queued to publish, one in the serialiser, one queued to serialise, one
    # encoded, one queued to encode: the seventh submit waits
    assert asyncio.run(main()) <= 6


def test_a_batch_that_fails_to_encode_is_dead_lettered_and_committed() -> None:
    seen: list[str] = []

    def encode(events: list[int]) -> list[Payload]:
        raise ValueError("bad input")

    async def publish(payloads: list[Payload]) -> None:
        seen.append("published")

    async def on_error(batch: Batch[int], exc: BaseException) -> None:
        seen.append(f"dead-lettered {batch.events} {exc}")

    async def main() -> None:
        pipe: EmbedPipeline[int] = EmbedPipeline(encode, publish, on_error=on_error)
        await pipe.start()

        async def commit(offsets: Offsets) -> None:
            seen.append(f"commit {offsets}")

        await pipe.submit(Batch(events=[1], offsets={"p": 1}, commit=commit))
        await pipe.drain()
        await pipe.stop()

    asyncio.run(main())
    assert seen == ["dead-lettered [1] bad input", "commit {'p': 1}"]


def test_dead_lettering_is_retried_and_no_later_commit_overtakes_the_failed_batch() -> None:
    seen: list[str] = []
    dlq_up = asyncio.Event()

    def encode(events: list[int]) -> list[Payload]:
        if events == [1]:
            raise ValueError("bad input")
        return [(None, str(e).encode()) for e in events]

    async def publish(payloads: list[Payload]) -> None:
        seen.extend(f"published {v.decode()}" for _, v in payloads)

    async def on_error(batch: Batch[int], exc: BaseException) -> None:
        if not dlq_up.is_set():
            seen.append("dead-letter failed")
            raise ConnectionError("broker down")
        seen.append(f"dead-lettered {batch.events}")

    async def main() -> None:
        pipe: EmbedPipeline[int] = EmbedPipeline(encode, publish, on_error=on_error, publish_retry_s=0.02)
        await pipe.start()

        async def commit(offsets: Offsets) -> None:
            seen.append(f"commit {offsets['p']}")

        await pipe.submit(Batch(events=[1], offsets={"p": 1}, commit=commit))
        await pipe.submit(Batch(events=[2], offsets={"p": 2}, commit=commit))
        await asyncio.sleep(0.3)
        assert "commit 2" not in seen and "commit 1" not in seen  # nothing moves past the failed batch
        dlq_up.set()
        await pipe.drain()
        await pipe.stop()

    asyncio.run(main())
    failures = seen.count("dead-letter failed")
    assert failures >= 2
    assert seen[failures:] == ["dead-lettered [1]", "commit 1", "published 2", "commit 2"]


def test_next_offsets_is_one_past_the_last_record_per_partition() -> None:
    class R:
        def __init__(self, p: int, o: int) -> None:
            self.topic, self.partition, self.offset = "t", p, o

    offsets = next_offsets([R(0, 5), R(1, 2), R(0, 7), R(0, 6)])  # type: ignore[list-item]
    assert {(tp.partition, o) for tp, o in offsets.items()} == {(0, 8), (1, 3)}


def test_reindex_group_is_per_model() -> None:
    assert reindex_group("BAAI/bge-small-en-v1.5") == "evidentia-embedder-reindex-baai-bge-small-en-v1-5"
    assert reindex_group("a") != reindex_group("b")


def test_parser_token_ids_equal_the_embedders(minilm: BaseEmbedder) -> None:
    tok = passage_tokenizer(EmbeddingSettings(model="all-MiniLM-L6-v2"))
    assert tok is not None and tok.model == minilm.name
    assert tok(TEXTS) == minilm.passage_token_ids(TEXTS)


def _decode(payloads: list[Payload]) -> np.ndarray:
    rows: list[Any] = []
    for key, value in payloads:
        event = ChunkEmbedded.model_validate_json(value)
        assert key == event.document_id.encode()
        rows.append(event.vector())
    return np.asarray(rows, dtype=np.float32)


def test_encode_events_uses_shipped_ids_of_its_own_model_only(minilm: BaseEmbedder) -> None:
    reference = minilm.encode_passages(TEXTS)
    ids = minilm.passage_token_ids(TEXTS)
    from_text = _decode(encode_events(minilm, _events(TEXTS), 2))
    from_ids = _decode(encode_events(minilm, _events(TEXTS, ids, minilm.name), 2))
    from_listed_ids = _decode(encode_events(minilm, _events(TEXTS, ids, minilm.name, packed=False), 2))
    np.testing.assert_allclose(from_text, reference, atol=1e-5)
    np.testing.assert_allclose(from_ids, reference, atol=1e-4)
    np.testing.assert_array_equal(from_listed_ids, from_ids)
    # Ids labelled with another model are ignored (garbage ids would give garbage vectors).
    garbage = [[101, 999, 102]] * len(TEXTS)
    other = _decode(encode_events(minilm, _events(TEXTS, garbage, "some/other-model"), 2))
    np.testing.assert_allclose(other, reference, atol=1e-5)
    # A mixed batch: half with ids, half without.
    mixed = _events(TEXTS, ids, minilm.name)
    for e in mixed[::2]:
        e.token_ids_u32, e.token_model = None, None
    np.testing.assert_allclose(_decode(encode_events(minilm, mixed, 2)), reference, atol=1e-4)
    payload = json.loads(encode_events(minilm, _events(TEXTS[:1]), 2)[0][1])
    assert payload["model"] == minilm.name and payload["dim"] == 384


def test_both_vector_encodings_carry_the_same_vectors(minilm: BaseEmbedder) -> None:
    events = _events(TEXTS)
    packed = encode_events(minilm, events, 2)
    listed = encode_events(minilm, events, 2, packed=False)
    # v2: packed float32 (exact), v1: a JSON list (what consumers older than v2 read).
    p0, l0 = json.loads(packed[0][1]), json.loads(listed[0][1])
    assert p0["schema_version"] == 2 and "embedding" not in p0 and len(p0["embedding_f32"]) == 4 * ((4 * 384 + 2) // 3)
    assert l0["schema_version"] == 1 and "embedding_f32" not in l0 and len(l0["embedding"]) == 384
    assert p0["trace_id"] == events[0].trace_id and p0["chunk_id"] == events[0].chunk_id
    np.testing.assert_array_equal(_decode(packed), _decode(listed))
    assert len(packed[0][1]) * 3 < len(listed[0][1])


@pytest.mark.parametrize("n", [0])
def test_encode_events_of_nothing_is_nothing(minilm: BaseEmbedder, n: int) -> None:
    assert encode_events(minilm, [], 8) == []


@pytest.mark.parametrize("dim", [384, 768, 1024, 5])
def test_rows_packed_at_once_equal_rows_packed_one_by_one(dim: int) -> None:
    rows = np.random.default_rng(dim).standard_normal((7, dim)).astype("<f4")
    packed = ChunkEmbedded.pack_rows(rows)
    assert packed == [ChunkEmbedded.pack(row).encode() for row in rows]
    for text, row in zip(packed, rows, strict=True):
        assert np.array_equal(ChunkEmbedded.model_construct(embedding_f32=text.decode()).vector(), row)
    assert ChunkEmbedded.pack_rows(np.zeros((0, dim), dtype="<f4")) == []
