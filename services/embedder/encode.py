"""The embedder's work on one batch, free of Kafka: events -> vectors -> ``chunks.embedded`` payloads.

Only numpy, pydantic (the events) and the embedding package: the GPU check runs this (and
:mod:`services.embedder.pipeline`) on a machine without Kafka or FastStream.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np

from services.embedder.pipeline import Payload
from shared import metrics
from shared.embedding.base import Embedder
from shared.events import ChunkCreated, ChunkEmbedded


def encode_vectors(embedder: Embedder, events: Sequence[ChunkCreated], batch_size: int) -> np.ndarray:
    """Vectors of ``events`` (the model's thread), in length-sorted model batches of ``batch_size``.

    Events whose ``token_ids`` were made by this model's tokenizer (``token_model``) go through the
    pre-tokenised path; the others are tokenised here.
    """
    if not events:
        return np.zeros((0, embedder.dim), dtype=np.float32)
    start = time.perf_counter()
    own = embedder.name
    pre = [i for i, e in enumerate(events) if e.token_ids and e.token_model == own]
    vectors: np.ndarray
    if len(pre) == len(events):
        vectors = embedder.encode_pretokenized([e.token_ids or [] for e in events], batch_size)
    elif not pre:
        vectors = embedder.encode_passages([e.text for e in events], batch_size)
    else:
        pre_set = set(pre)
        rest = [i for i in range(len(events)) if i not in pre_set]
        vectors = np.empty((len(events), embedder.dim), dtype=np.float32)
        vectors[pre] = embedder.encode_pretokenized([events[i].token_ids or [] for i in pre], batch_size)
        vectors[rest] = embedder.encode_passages([events[i].text for i in rest], batch_size)
    elapsed = time.perf_counter() - start
    metrics.EMBED_SECONDS.observe(elapsed)
    metrics.EMBED_PASSAGES.inc(len(events))
    if elapsed > 0:
        metrics.EMBED_RATE.set(len(events) / elapsed)
    return vectors


def serialize_vectors(
    model: str, dim: int, events: Sequence[ChunkCreated], vectors: np.ndarray
) -> list[Payload]:
    """``(key, ChunkEmbedded JSON)`` per event: validated and dumped once each (the serialiser's thread)."""
    payloads: list[Payload] = []
    for e, row in zip(events, vectors.tolist(), strict=True):
        out = ChunkEmbedded(
            trace_id=e.trace_id, chunk_id=e.chunk_id, document_id=e.document_id, model=model, dim=dim,
            embedding=row, job_id=e.job_id,
        )
        payloads.append((e.document_id.encode(), out.model_dump_json().encode()))
    return payloads


def encode_events(embedder: Embedder, events: Sequence[ChunkCreated], batch_size: int) -> list[Payload]:
    """Both steps at once (tests, benchmarks)."""
    if not events:
        return []
    return serialize_vectors(embedder.name, embedder.dim, events, encode_vectors(embedder, events, batch_size))
