"""The embedder's work on one batch, free of Kafka: events -> vectors -> ``chunks.embedded`` payloads.

Only numpy, pydantic (the events) and the embedding package: the GPU check runs this (and
:mod:`services.embedder.pipeline`) on a machine without Kafka or FastStream.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from services.embedder.pipeline import EncoderUnavailable, Payload
from shared import metrics
from shared.embedding.base import Embedder
from shared.events import ChunkEmbedded, PackedVector

log = logging.getLogger(__name__)


class ChunkInput(Protocol):
    """What encoding and serialising read of one chunk: a ``ChunkCreated`` or the embedder's lean
    :class:`shared.chunk_wire.WireChunk` of one."""

    @property
    def trace_id(self) -> str: ...
    @property
    def chunk_id(self) -> str: ...
    @property
    def document_id(self) -> str: ...
    @property
    def job_id(self) -> str | None: ...
    @property
    def token_model(self) -> str | None: ...
    @property
    def text(self) -> str: ...
    def input_ids(self) -> npt.NDArray[Any] | None: ...


@dataclass
class Encoded:
    """What a batch's encoding gave: ``vectors[k]`` belongs to event ``good[k]``; ``rejected`` are the
    events (index, error) that could not be embedded alone and go to the dead-letter topic."""

    vectors: np.ndarray
    good: list[int]
    rejected: list[tuple[int, BaseException]] = field(default_factory=list)


def encode_isolating(
    encode: Callable[[list[ChunkInput]], np.ndarray],
    events: Sequence[ChunkInput],
    probe: Callable[[], None] | None = None,
) -> Encoded:
    """Encode ``events``; when the batch fails, bisect it so only the events that fail alone are rejected.

    So one bad event (or a batch too big for the GPU's memory) never dead-letters the whole batch: halves
    are retried down to single events, and a single event that fails is rejected with its error.

    Before any event is rejected, the model itself is checked: ``probe()`` encodes a known-good passage.
    When it fails too, the fault is the model's or the device's (a sticky CUDA error, the GPU's memory
    gone), not the events': :class:`EncoderUnavailable` is raised for the whole batch, which is then
    retried, never dead-lettered. Without ``probe``, only a batch whose every event fails alone counts
    as the model's fault. The probe runs only when something failed: healthy batches never pay for it.
    """
    parts: list[tuple[list[int], np.ndarray]] = []
    rejected: list[tuple[int, BaseException]] = []

    def run(idx: list[int]) -> None:
        try:
            parts.append((idx, encode([events[i] for i in idx])))
        except Exception as exc:
            if len(idx) == 1:
                rejected.append((idx[0], exc))
                return
            log.warning("encoding %d events failed (%r); bisecting", len(idx), exc)
            mid = len(idx) // 2
            run(idx[:mid])
            run(idx[mid:])

    run(list(range(len(events))))
    if rejected:
        first = rejected[0][1]
        if probe is None:
            if not parts:
                message = f"the model failed on each of {len(events)} events alone: {first!r}"
                raise EncoderUnavailable(message) from first
        else:
            try:
                probe()
            except Exception as exc:
                raise EncoderUnavailable(f"the model fails on a known-good passage: {exc!r}") from exc
    good = [i for idx, _ in parts for i in idx]
    vectors = np.concatenate([v for _, v in parts]) if parts else np.zeros((0, 0), dtype=np.float32)
    return Encoded(vectors=vectors, good=good, rejected=sorted(rejected, key=lambda r: r[0]))


PROBE_PASSAGE = "Aspirin reduces the risk of myocardial infarction in adults with stable angina."
"""A passage every model can embed: when it fails, the model is broken, not the events of a batch."""


def probe_model(embedder: Embedder) -> None:
    """Raise unless ``embedder`` gives a finite vector of its dimension for :data:`PROBE_PASSAGE`."""
    vector = embedder.encode_passages([PROBE_PASSAGE], 1)
    if vector.shape != (1, embedder.dim) or not np.isfinite(vector).all():
        raise RuntimeError(f"the model gave a vector of shape {vector.shape} or not finite for a known-good passage")


def finite_rows(vectors: np.ndarray) -> np.ndarray:
    """A mask of the rows whose every value is finite (a NaN vector must not fail its neighbours)."""
    return np.isfinite(vectors).all(axis=1) if vectors.size else np.ones(len(vectors), dtype=bool)


def encode_vectors(embedder: Embedder, events: Sequence[ChunkInput], batch_size: int) -> np.ndarray:
    """Vectors of ``events`` (the model's thread), in length-sorted model batches of ``batch_size``.

    Events whose token ids (``token_ids_u32`` or ``token_ids``) were made by this model's tokenizer
    (``token_model``) go through the pre-tokenised path; the others are tokenised here.
    """
    if not events:
        return np.zeros((0, embedder.dim), dtype=np.float32)
    start = time.perf_counter()
    own = embedder.name
    shipped = [e.input_ids() if e.token_model == own else None for e in events]
    usable = [(i, ids) for i, ids in enumerate(shipped) if ids is not None and len(ids)]
    pre = [i for i, _ in usable]
    ids_of = [ids for _, ids in usable]
    vectors: np.ndarray
    if len(pre) == len(events):
        vectors = embedder.encode_pretokenized(ids_of, batch_size)
    elif not pre:
        vectors = embedder.encode_passages([e.text for e in events], batch_size)
    else:
        pre_set = set(pre)
        rest = [i for i in range(len(events)) if i not in pre_set]
        vectors = np.empty((len(events), embedder.dim), dtype=np.float32)
        vectors[pre] = embedder.encode_pretokenized(ids_of, batch_size)
        vectors[rest] = embedder.encode_passages([events[i].text for i in rest], batch_size)
    elapsed = time.perf_counter() - start
    metrics.EMBED_SECONDS.observe(elapsed)
    metrics.EMBED_PASSAGES.inc(len(events))
    if elapsed > 0:
        metrics.EMBED_RATE.set(len(events) / elapsed)
    return vectors


def serialize_vectors(
    model: str, dim: int, events: Sequence[ChunkInput], vectors: np.ndarray, *, packed: bool = True
) -> list[Payload]:
    """``(key, ChunkEmbedded JSON)`` per event, dumped once each (the serialiser's thread).

    ``packed`` writes version 2 (``embedding_f32``, the cheap path, ``docs/benchmarks.md``): the vectors are
    checked once for the whole batch (shape, finite), packed in one base64 call, and each event's JSON is
    filled into one template (:meth:`ChunkEmbedded.packed_json_batch`) without per-field validation.
    Otherwise version 1 (a JSON list of 384 numbers, validated per event). One timestamp serves the whole
    batch.
    """
    payloads: list[Payload] = []
    now = datetime.now(UTC)
    if packed:
        rows = np.ascontiguousarray(vectors, dtype="<f4")
        if rows.shape != (len(events), dim) or not np.isfinite(rows).all():
            raise ValueError(f"vectors of shape {rows.shape} (want {(len(events), dim)}) or not all finite")
        # Checked above as a whole: built without re-validating (and re-decoding) each packed vector.
        items = [
            PackedVector(e.trace_id, e.chunk_id, e.document_id, packed_row, e.job_id)
            for e, packed_row in zip(events, ChunkEmbedded.pack_rows(rows), strict=True)
        ]
        bodies = ChunkEmbedded.packed_json_batch(model=model, dim=dim, created_at=now, items=items)
        return [(e.document_id.encode(), body) for e, body in zip(events, bodies, strict=True)]
    for e, values in zip(events, vectors.tolist(), strict=True):
        out = ChunkEmbedded(
            schema_version=1,
            trace_id=e.trace_id,
            created_at=now,
            chunk_id=e.chunk_id,
            document_id=e.document_id,
            model=model,
            dim=dim,
            embedding=values,
            job_id=e.job_id,
        )
        payloads.append((e.document_id.encode(), out.model_dump_json(exclude_none=True).encode()))
    return payloads


def serialize_encoded(
    model: str, dim: int, events: Sequence[ChunkInput], encoded: Encoded, *, packed: bool = True
) -> list[Payload]:
    """Payloads of an :class:`Encoded` batch: its good rows whose vector is finite. A non-finite vector is
    added to ``encoded.rejected`` (dead-lettered alone) instead of failing the whole batch."""
    vectors = encoded.vectors
    if not encoded.good:
        return []
    ok = finite_rows(vectors)
    if not ok.all():
        bad = [encoded.good[k] for k in np.flatnonzero(~ok)]
        encoded.rejected += [(i, ValueError("the model gave a vector that is not finite (NaN or inf)")) for i in bad]
        encoded.rejected.sort(key=lambda r: r[0])
    keep = np.flatnonzero(ok)
    chosen = [events[encoded.good[k]] for k in keep]
    return serialize_vectors(model, dim, chosen, vectors[keep], packed=packed)


def encode_events(
    embedder: Embedder, events: Sequence[ChunkInput], batch_size: int, *, packed: bool = True
) -> list[Payload]:
    """Encode ``events`` and serialise them in one call (tests, benchmarks): the ``(key, ChunkEmbedded JSON)``
    payload of each event, in order; empty for no events."""
    if not events:
        return []
    vectors = encode_vectors(embedder, events, batch_size)
    return serialize_vectors(embedder.name, embedder.dim, events, vectors, packed=packed)
