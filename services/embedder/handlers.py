"""Embedder handlers: batches of ``chunks.created`` -> the model -> ``chunks.embedded``.

The handler only decodes a consumed batch and hands it to an :class:`EmbedPipeline`, which encodes
batch ``k`` in a worker thread while the consume loop fetches and decodes batch ``k+1`` and the
publisher sends batch ``k-1`` (see :mod:`services.embedder.pipeline`). Offsets are committed
manually, per batch, after every vector of the batch is acknowledged by Kafka; a rebalance or a
shutdown first drains the pipeline.

Inside the worker thread a batch is encoded with texts sorted by length (both ``encode_passages``
and ``encode_pretokenized`` sort), from the token ids the parser shipped when they were made by this
model's tokenizer (``ChunkCreated.token_model``), else from the text; each ``ChunkEmbedded`` is
serialised to JSON in a second thread (``model_dump_json`` once per event, the vector packed as base64
float32: ``ChunkEmbedded`` v2), so the event loop only moves bytes. Vectors go out through one aiokafka
producer as whole record batches per partition (:func:`shared.kafka.publish.send_keyed`).

Reindexing (``evidentia reindex --model X``): ``chunks.reindex`` carries ``ChunkCreated`` events with
``target_model``; each embedder reads that topic in a consumer group of its own model and embeds only
the events aimed at its model, so a reindex embedder started with ``X`` (``python -m
services.embedder.reindex``, see :mod:`services.embedder.reindex`) fills X's building index through the
same pipeline while this one keeps embedding new chunks with the current model.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import re
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRecord, TopicPartition
from aiokafka.abc import ConsumerRebalanceListener
from faststream.kafka import KafkaBroker
from faststream.middlewares import AckPolicy

from services.embedder.decode import decode_chunks
from services.embedder.encode import Encoded, encode_isolating, encode_vectors, probe_model, serialize_encoded
from services.embedder.fault import with_fault_injection
from services.embedder.pipeline import Batch, EmbedPipeline, Offsets, Payload
from shared import metrics, tracing
from shared.chunk_wire import WireChunk
from shared.embedding import Embedder, EmbedderError, get_embedder
from shared.embedding.base import runtime_of
from shared.events import ChunkEmbedded
from shared.kafka.context import KafkaMessage
from shared.kafka.dead_letters import publish_dead_letters
from shared.kafka.decoding import undecoded_batch
from shared.kafka.messages import EVENT_TYPE_HEADER, records_of
from shared.kafka.pause import PartitionPause
from shared.kafka.publish import send_keyed
from shared.kafka.security import client_options
from shared.kafka.topics import CHUNKS_CREATED, CHUNKS_EMBEDDED
from shared.settings import Settings

log = logging.getLogger(__name__)
GROUP_ID = "evidentia-embedder"
SERVICE = "embedder"
_HEADERS = [("content-type", b"application/json"), (EVENT_TYPE_HEADER, b"ChunkEmbedded")]


def reindex_group(model: str) -> str:
    """Consumer group of the embedders of ``model`` on ``chunks.reindex`` (one group per model)."""
    slug = re.sub(r"[^a-z0-9]+", "-", model.lower()).strip("-")[:80] or "default"
    return f"{GROUP_ID}-reindex-{slug}"


def next_offsets(records: Sequence[ConsumerRecord[Any, Any]]) -> Offsets:
    """Offset to commit per partition: one past the last record of the batch."""
    offsets: Offsets = {}
    for r in records:
        tp = TopicPartition(r.topic, r.partition)
        offsets[tp] = max(offsets.get(tp, 0), r.offset + 1)
    return offsets


def record_lag(consumer: AIOKafkaConsumer | None, topic: str, offsets: Offsets) -> None:
    """Consumer lag of this batch's partitions (high watermark - next offset), as a gauge."""
    if consumer is None:
        return
    lag = 0
    for tp, nxt in offsets.items():
        try:
            hw = consumer.highwater(tp)
        except Exception:  # partition not assigned any more
            continue
        if hw is not None:
            lag += max(0, hw - nxt)
    metrics.CONSUMER_LAG.labels(SERVICE, topic).set(lag)


class DrainOnRevoke(ConsumerRebalanceListener):  # type: ignore[misc]
    """Before partitions move to another consumer, finish (publish and commit) what was taken."""

    def __init__(self, state: EmbedderState) -> None:
        self.state = state

    async def on_partitions_revoked(self, revoked: Any) -> None:
        if self.state.pipeline.in_flight:
            await self.state.pipeline.drain()

    async def on_partitions_assigned(self, assigned: Any) -> None:
        return None


class EmbedderState:
    def __init__(self, settings: Settings):
        self.settings = settings
        self._embedder: Embedder | None = None
        self._producer: AIOKafkaProducer | None = None
        self._broker: KafkaBroker | None = None
        self._decode_pool: ThreadPoolExecutor | None = None
        self.pipeline: EmbedPipeline[WireChunk] = EmbedPipeline(
            self._encode,
            self._publish,
            serialize=self._serialize,
            on_error=self._dead_letter,
            rejects=lambda result: list(result.rejected),
            depth=2,
            model_retry_max_s=settings.embedding.model_retry_max_s,
        )

    def attach(self, broker: KafkaBroker) -> None:
        """The broker whose dead-letter topics bad events go to (and, for AsyncAPI, the vectors' publisher)."""
        self._broker = broker
        # Declared for the AsyncAPI document; vectors are sent through this state's own producer.
        broker.publisher(CHUNKS_EMBEDDED, title="chunks.embedded", schema=ChunkEmbedded)

    async def start(self) -> None:
        embedder = get_embedder(self.settings.embedding)
        try:  # warm_up also sets the device metric (shared.embedding.base)
            await asyncio.to_thread(embedder.warm_up)
        except EmbedderError as exc:  # e.g. EVIDENTIA_EMBEDDING_DEVICE=cuda and no CUDA provider: exit, said plainly
            log.critical("the embedder cannot start: %s", exc)
            raise
        # Wrapped after warm_up, so the wrapper copies the device the model actually got (tests only).
        self._embedder = with_fault_injection(embedder, self.settings.embedding.fault_file)
        k = self.settings.kafka
        self._producer = AIOKafkaProducer(
            **client_options(k),
            client_id=f"{k.client_id}-{SERVICE}-vectors",
            acks="all",
            linger_ms=2,
            max_batch_size=1 << 20,  # ~8 KB per vector message: 16 KB batches would hold two
            max_request_size=k.max_request_size,
        )
        await self._producer.start()
        self._decode_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="embed-decode")
        await self.pipeline.start()
        log.info("model loaded", extra={**runtime_of(embedder), "dim": embedder.dim})

    async def stop(self) -> None:
        await self.pipeline.stop()
        if self._decode_pool is not None:
            self._decode_pool.shutdown(wait=False, cancel_futures=True)
            self._decode_pool = None
        if self._producer is not None:
            await self._producer.stop()
            self._producer = None

    async def ready(self) -> bool:
        """Model loaded, pipeline running, and the model not failing (see :meth:`live`)."""
        return self._embedder is not None and self.pipeline.running and self.pipeline.model_down_since is None

    def health(self) -> dict[str, str]:
        """What ``/health`` says: the model and where it runs (``loading`` until the model has loaded)."""
        return runtime_of(self._embedder) if self._embedder is not None else {"model": "loading"}

    @property
    def embedder(self) -> Embedder:
        assert self._embedder is not None, "embedder not started"
        return self._embedder

    async def live(self) -> bool:
        """False once the model has failed every try for ``model_down_restart_s``: Kubernetes restarts the
        pod (a sticky CUDA error outlives its process only rarely). Uncommitted batches are replayed."""
        down = self.pipeline.model_down_since
        return down is None or time.monotonic() - down < self.settings.embedding.model_down_restart_s

    def _encode(self, events: list[WireChunk]) -> Encoded:
        batch_size = self.settings.embedding.batch_size
        return encode_isolating(
            lambda part: encode_vectors(self.embedder, part, batch_size), events, lambda: probe_model(self.embedder)
        )

    def _serialize(self, events: list[WireChunk], encoded: Encoded) -> list[Payload]:
        return serialize_encoded(
            self.embedder.name,
            self.embedder.dim,
            events,
            encoded,
            packed=self.settings.embedding.vector_encoding == "f32",
        )

    async def _publish(self, payloads: list[Payload]) -> None:
        producer = self._producer
        assert producer is not None, "embedder not started"
        await send_keyed(producer, CHUNKS_EMBEDDED, payloads, _HEADERS)

    async def _dead_letter(self, batch: Batch[WireChunk], exc: BaseException) -> None:
        assert self._broker is not None
        await publish_dead_letters(self._broker, SERVICE, list(batch.records), exc, 1)

    async def take(self, msg: KafkaMessage, *, target_model: str | None = None) -> None:
        """Decode a consumed batch (in the decode thread) and queue it (waits while the pipeline is full)."""
        assert self._broker is not None
        records = records_of(msg)
        if not records:
            return
        pairs: list[tuple[ConsumerRecord[Any, Any], WireChunk]] = []
        decoded = await asyncio.get_running_loop().run_in_executor(self._decode_pool, decode_chunks, records)
        for record, event, exc in decoded:
            if event is None:
                assert exc is not None
                await publish_dead_letters(self._broker, SERVICE, [record], exc, 1)
            elif target_model is None or event.target_model == target_model:  # chunks.reindex: this model's only
                pairs.append((record, event))
        events = [e for _, e in pairs]
        topic = records[0].topic
        consumer: AIOKafkaConsumer | None = getattr(msg, "consumer", None)
        offsets = next_offsets(records)
        record_lag(consumer, topic, offsets)
        metrics.BATCH_SIZE.labels(SERVICE, topic).observe(len(events))
        commit = consumer.commit if consumer is not None and hasattr(consumer, "highwater") else None
        # With tracing on, the batch's consume span (FastStream's telemetry middleware) travels with it, so
        # the vectors' records carry its traceparent (shared.kafka.publish.send_keyed).
        context = contextvars.copy_context() if tracing.enabled() else None
        await self._wait_for_model(consumer)
        await self.pipeline.submit(
            Batch(
                events=events,
                offsets=offsets,
                commit=commit,
                records=records,
                event_records=[r for r, _ in pairs],
                context=context,
            )
        )

    async def _wait_for_model(self, consumer: AIOKafkaConsumer | None) -> None:
        """While the model is down and the pipeline full, keep polling with every partition paused.

        Just waiting in :meth:`EmbedPipeline.submit` would stop polling; past ``max_poll_interval_ms``
        Kafka would move the partitions to another replica, which fails the same way.
        """
        if self.pipeline.model_down_since is None or not self.pipeline.full:
            return
        pause = PartitionPause(consumer)
        try:
            while self.pipeline.model_down_since is not None and self.pipeline.full and self.pipeline.running:
                await pause.wait(1.0)
        finally:
            pause.resume()


def batch_subscriber_options(state: EmbedderState) -> dict[str, Any]:
    """The subscriber options every embedder topic shares: undecoded batches of up to ``consume_batch``
    records, committed by hand (:meth:`EmbedderState.take`), drained before a rebalance takes partitions."""
    return {
        "auto_offset_reset": "earliest",
        "ack_policy": AckPolicy.MANUAL,
        "batch": True,
        "max_records": state.settings.embedding.consume_batch,
        "batch_timeout_ms": 50,
        "listener": DrainOnRevoke(state),
        "decoder": undecoded_batch,
    }


def register(broker: KafkaBroker, state: EmbedderState) -> None:
    """Subscribe to ``chunks.created`` (group ``evidentia-embedder``); reindexing is in :mod:`.reindex`."""
    state.attach(broker)

    @broker.subscriber(
        CHUNKS_CREATED,
        group_id=GROUP_ID,
        **batch_subscriber_options(state),
        title="chunks.created:embedder",
        description="ChunkCreated events, embedded in batches; offsets committed after the vectors are sent.",
    )
    async def on_chunks(msg: KafkaMessage) -> None:
        await state.take(msg)


def configured_model(settings: Settings) -> str:
    """The canonical name of the configured model (what its vectors are labelled with), without loading it."""
    from shared.embedding.factory import resolve

    return resolve(settings.embedding)[1].name
