"""The embedder's work on one batch, free of Kafka: events -> vectors -> ``chunks.embedded`` payloads.

Only numpy, pydantic (the events) and the embedding package: the GPU check runs this (and
:mod:`services.embedder.pipeline`) on a machine without Kafka or FastStream.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import UTC, datetime

import numpy as np

from services.embedder.pipeline import Payload
from shared import metrics
from shared.embedding.base import Embedder
from shared.events import ChunkCreated, ChunkEmbedded


def encode_vectors(embedder: Embedder, events: Sequence[ChunkCreated], batch_size: int) -> np.ndarray:
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
    model: str, dim: int, events: Sequence[ChunkCreated], vectors: np.ndarray, *, packed: bool = True
) -> list[Payload]:
    """``(key, ChunkEmbedded JSON)`` per event, dumped once each (the serialiser's thread).

    ``packed`` writes version 2 (``embedding_f32``, about 7 us an event): the vectors are checked once
    for the whole batch (shape, finite), then each event is built without per-field validation.
    Otherwise version 1 (a JSON list of 384 numbers, validated per event, about 40 us). One timestamp
    serves the whole batch.
    """
    payloads: list[Payload] = []
    now = datetime.now(UTC)
    if packed:
        rows = np.ascontiguousarray(vectors, dtype="<f4")
        if rows.shape != (len(events), dim) or not np.isfinite(rows).all():
            raise ValueError(f"vectors of shape {rows.shape} (want {(len(events), dim)}) or not all finite")
        # Checked above as a whole: built without re-validating (and re-decoding) each packed vector.
        for e, row in zip(events, rows, strict=True):
            out = ChunkEmbedded.model_construct(
                schema_version=2,
                trace_id=e.trace_id,
                created_at=now,
                chunk_id=e.chunk_id,
                document_id=e.document_id,
                model=model,
                dim=dim,
                embedding=None,
                embedding_f32=ChunkEmbedded.pack(row),
                job_id=e.job_id,
            )
            payloads.append((e.document_id.encode(), out.model_dump_json(exclude_none=True).encode()))
        return payloads
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


def encode_events(
    embedder: Embedder, events: Sequence[ChunkCreated], batch_size: int, *, packed: bool = True
) -> list[Payload]:
    """Both steps at once (tests, benchmarks)."""
    if not events:
        return []
    vectors = encode_vectors(embedder, events, batch_size)
    return serialize_vectors(embedder.name, embedder.dim, events, vectors, packed=packed)
