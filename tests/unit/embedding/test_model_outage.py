"""Issue #40 point 1: a failure of the model itself (every event of a batch fails, and so does a known-good
passage) is infrastructure: the batch is retried with back-off, never dead-lettered nor committed, the
embedder turns not-ready (then not-live), and everything is embedded once the model works again. A
poison event, one that fails while the model still embeds others, is still dead-lettered alone."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from services.embedder.encode import Encoded, encode_isolating, probe_model, serialize_encoded
from services.embedder.fault import InjectedModelFault, with_fault_injection
from services.embedder.handlers import EmbedderState
from services.embedder.pipeline import Batch, EmbedPipeline, EncoderUnavailable, Offsets, Payload
from shared.events import ChunkCreated
from shared.settings import EmbeddingSettings, Settings

DIM = 4


def _events(n: int) -> list[ChunkCreated]:
    return [
        ChunkCreated(chunk_id=f"c{i}", document_id=f"d{i}", ordinal=0, text=f"t{i}", token_count=1) for i in range(n)
    ]


class FlakyModel:
    """A model (the parts of :class:`shared.embedding.Embedder` the embedder uses) that fails every call
    while ``broken`` (a sticky CUDA error) and, always, for a batch holding a ``poison`` text."""

    name = "fake-model"
    device = "cpu"
    query_prefix = passage_prefix = ""
    dim = DIM

    def __init__(self, poison: frozenset[str] = frozenset()) -> None:
        self.broken = False
        self.poison = poison
        self.calls = 0

    def encode_passages(self, texts: Sequence[str], batch_size: int | None = None) -> np.ndarray:
        self.calls += 1
        if self.broken:
            raise RuntimeError("CUDA error: an illegal memory access was encountered")
        if any(t in self.poison for t in texts):
            raise RuntimeError("CUDA out of memory")
        return np.ones((len(texts), DIM), dtype=np.float32)


def _pipeline(
    model: FlakyModel, letters: list[list[str]], sent: list[str], commits: list[Offsets]
) -> EmbedPipeline[ChunkCreated]:
    async def publish(payloads: list[Payload]) -> None:
        sent.extend(json.loads(v)["chunk_id"] for _, v in payloads)

    async def on_error(batch: Batch[ChunkCreated], exc: BaseException) -> None:
        letters.append([e.chunk_id for e in batch.events])

    return EmbedPipeline(
        lambda evs: encode_isolating(
            lambda part: model.encode_passages([e.text for e in part]),
            evs,
            lambda: probe_model(model),  # type: ignore[arg-type]
        ),
        publish,
        serialize=lambda evs, enc: serialize_encoded("m", DIM, evs, enc),
        on_error=on_error,
        rejects=lambda enc: list(enc.rejected) if isinstance(enc, Encoded) else [],
        model_retry_s=0.01,
        model_retry_max_s=0.05,
    )


async def _wait(what: str, check: object, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.005)


async def test_a_broken_model_is_retried_not_dead_lettered_and_everything_is_embedded_after() -> None:
    model = FlakyModel()
    letters: list[list[str]] = []
    sent: list[str] = []
    commits: list[Offsets] = []

    async def commit(offsets: Offsets) -> None:
        commits.append(offsets)

    pipe = _pipeline(model, letters, sent, commits)
    await pipe.start()
    try:
        model.broken = True
        for k in range(3):
            events = _events(8)[4 * k : 4 * k + 4] if k < 2 else _events(10)[8:]
            await pipe.submit(Batch(events=events, offsets={"p": 4 * k + len(events)}, commit=commit))
        # Many tries of the first batch (each: whole batch, halves, singles, the probe), and still nothing
        # dead-lettered, published or committed: the work waits for the model.
        await _wait("retries of a broken model", lambda: model.calls >= 60)
        assert pipe.model_down_since is not None
        assert letters == [] and sent == [] and commits == []
        assert pipe.in_flight == 3
        model.broken = False
        await asyncio.wait_for(pipe.drain(), 10)
    finally:
        await pipe.stop()
    assert letters == []
    assert sorted(sent) == sorted(f"c{i}" for i in range(10))
    assert commits == [{"p": 4}, {"p": 8}, {"p": 10}]
    assert pipe.model_down_since is None


async def test_a_poison_event_alone_in_its_batch_is_dead_lettered_while_the_model_works() -> None:
    model = FlakyModel(poison=frozenset({"t3"}))
    letters: list[list[str]] = []
    sent: list[str] = []
    commits: list[Offsets] = []

    async def commit(offsets: Offsets) -> None:
        commits.append(offsets)

    pipe = _pipeline(model, letters, sent, commits)
    await pipe.start()
    try:
        events = _events(6)
        await pipe.submit(Batch(events=[events[3]], offsets={"p": 4}, commit=commit, event_records=["r3"]))
        await pipe.submit(Batch(events=events[4:], offsets={"p": 6}, commit=commit, event_records=["r4", "r5"]))
        await asyncio.wait_for(pipe.drain(), 10)
    finally:
        await pipe.stop()
    assert letters == [["c3"]]
    assert sent == ["c4", "c5"]
    assert commits == [{"p": 4}, {"p": 6}]
    assert pipe.model_down_since is None


def test_without_a_probe_a_batch_whose_every_event_fails_is_the_models_fault() -> None:
    model = FlakyModel()
    model.broken = True
    with pytest.raises(EncoderUnavailable, match="illegal memory access"):
        encode_isolating(lambda part: model.encode_passages([e.text for e in part]), _events(4))


async def test_the_embedder_turns_not_ready_then_not_live_while_its_model_is_down(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sent: list[Payload] = []

    async def publish(self: EmbedderState, payloads: list[Payload]) -> None:
        sent.extend(payloads)

    async def dead_letter(self: EmbedderState, batch: Batch[ChunkCreated], exc: BaseException) -> None:
        raise AssertionError(f"dead-lettered {batch.events} ({exc!r})")

    monkeypatch.setattr(EmbedderState, "_publish", publish)
    monkeypatch.setattr(EmbedderState, "_dead_letter", dead_letter)
    settings = Settings(embedding=EmbeddingSettings(model_retry_max_s=0.05, model_down_restart_s=0.3))
    state = EmbedderState(settings)
    model = FlakyModel()
    state._embedder = model  # type: ignore[assignment]
    await state.pipeline.start()
    try:
        assert await state.ready() and await state.live()
        model.broken = True
        await state.pipeline.submit(Batch(events=_events(3), offsets={}))
        await _wait("not ready", lambda: state.pipeline.model_down_since is not None)
        assert not await state.ready()
        assert await state.live(), "live until the model has been down for model_down_restart_s"
        await asyncio.sleep(0.35)
        assert not await state.live()
        model.broken = False
        await asyncio.wait_for(state.pipeline.drain(), 10)
        assert await state.ready() and await state.live()
    finally:
        await state.pipeline.stop()
    assert len(sent) == 3


def test_the_fault_file_breaks_the_wrapped_model_only_while_it_exists(tmp_path: Path) -> None:
    model = FlakyModel()
    assert with_fault_injection(model, None) is model  # type: ignore[arg-type,comparison-overlap]
    fault = tmp_path / "model-fault"
    wrapped = with_fault_injection(model, str(fault))  # type: ignore[arg-type]
    assert wrapped.encode_passages(["x"]).shape == (1, DIM)
    fault.touch()
    with pytest.raises(InjectedModelFault):
        wrapped.encode_passages(["x"])
    with pytest.raises(InjectedModelFault):
        probe_model(wrapped)
    fault.unlink()
    probe_model(wrapped)
