"""Embedder handlers: a batch of ``chunks.created`` -> one model pass -> ``chunks.embedded``.

The model runs in a worker thread, so while it encodes one batch the event loop keeps fetching the
next (aiokafka prefetches) and publishing the previous one. Offsets are committed only after every
vector of the batch is acknowledged by Kafka.
"""

from __future__ import annotations

import asyncio
import logging
import time

from faststream.kafka import KafkaBroker, KafkaMessage
from faststream.middlewares import AckPolicy

from shared import metrics
from shared.broker import decode_batch, publish_dead_letters
from shared.embedding import Embedder, get_embedder
from shared.events import ChunkCreated, ChunkEmbedded
from shared.settings import Settings
from shared.topics import CHUNKS_CREATED, CHUNKS_EMBEDDED

log = logging.getLogger(__name__)
GROUP_ID = "evidentia-embedder"


class EmbedderState:
    def __init__(self, settings: Settings):
        self.settings = settings
        self._embedder: Embedder | None = None

    async def start(self) -> None:
        embedder = get_embedder(self.settings.embedding)
        await asyncio.to_thread(embedder.warm_up)
        self._embedder = embedder
        metrics.EMBED_DEVICE.labels(embedder.device, embedder.name).set(1)
        log.info("model loaded", extra={"model": embedder.name, "dim": embedder.dim, "device": embedder.device})

    async def ready(self) -> bool:
        return self._embedder is not None

    @property
    def embedder(self) -> Embedder:
        assert self._embedder is not None, "embedder not started"
        return self._embedder


def register(broker: KafkaBroker, state: EmbedderState) -> None:
    out = broker.publisher(CHUNKS_EMBEDDED, title="chunks.embedded", schema=ChunkEmbedded)

    @broker.subscriber(
        CHUNKS_CREATED,
        group_id=GROUP_ID,
        auto_offset_reset="earliest",
        ack_policy=AckPolicy.ACK,
        batch=True,
        max_records=state.settings.embedding.consume_batch,
        batch_timeout_ms=50,
        title="chunks.created:embedder",
        description="ChunkCreated events, embedded in batches.",
    )
    async def on_chunks(msg: KafkaMessage) -> None:
        events, poison = decode_batch(ChunkCreated, msg)
        for record, exc in poison:
            await publish_dead_letters(broker, "embedder", [record], exc, 1)
        if not events:
            return
        metrics.BATCH_SIZE.labels("embedder", CHUNKS_CREATED).observe(len(events))
        embedder = state.embedder
        start = time.perf_counter()
        vectors = await asyncio.to_thread(
            embedder.encode_passages, [e.text for e in events], state.settings.embedding.batch_size
        )
        metrics.EMBED_SECONDS.observe(time.perf_counter() - start)
        metrics.EMBED_PASSAGES.inc(len(events))
        await asyncio.gather(
            *(
                out.publish(
                    ChunkEmbedded(
                        trace_id=e.trace_id,
                        chunk_id=e.chunk_id,
                        document_id=e.document_id,
                        model=embedder.name,
                        dim=embedder.dim,
                        embedding=v.tolist(),
                        job_id=e.job_id,
                    ),
                    key=e.document_id.encode(),
                )
                for e, v in zip(events, vectors, strict=True)
            )
        )
