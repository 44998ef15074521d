"""A bounded three-stage pipeline that keeps the model busy: consume -> encode -> publish + commit.

The Kafka handler only decodes a batch and :meth:`EmbedPipeline.submit`\\ s it, then returns, so
FastStream fetches the next batch while the model encodes this one. One encoder task runs the model
in a dedicated worker thread, batch after batch; a serialiser task turns vectors into the
``chunks.embedded`` payloads in a second thread (serialising a batch's vectors costs host CPU of the
order of the GPU's forward pass, ``docs/benchmarks.md``: off the model's thread, it overlaps the next
batch's forward pass); one publisher task sends a batch's payloads and then commits its offsets. While batch
``k`` is encoded, batch ``k+1`` is fetched and decoded and batch ``k-1`` is serialised, published and
committed.

Ordering and delivery: batches flow through both stages in submission order, and a batch's offsets
(the offset after its last record, per partition) are committed only after every one of its messages
is acknowledged by Kafka, so offsets only move forward over published work (at least once; a crash
replays uncommitted batches and the retriever's upsert makes replays harmless).

Back-pressure: both queues are bounded (``depth`` batches each), so when publishing falls behind the
encoder blocks, then :meth:`submit` blocks, which stops the consume loop: aiokafka stops prefetching
once its buffer is full, i.e. consumption pauses until the publisher catches up.

Faults of the model itself (a sticky CUDA error, out of GPU memory on every try): ``encode`` raises
:class:`EncoderUnavailable`, and the batch is encoded again with back-off, never dead-lettered nor
committed, until the model answers; :attr:`EmbedPipeline.model_down_since` says since when it has
failed (the service's readiness and liveness read it). Meanwhile the queues fill and consumption stops.
Any other failure of ``encode`` belongs to the batch: it is dead-lettered and committed.

Nothing here imports FastStream or pydantic: the handler supplies the encode, publish, commit and
dead-letter functions (the GPU check drives this class without Kafka).
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")
Payload = tuple[bytes | None, bytes]
"""A message to publish: (key, value)."""
Offsets = dict[Any, int]
"""Next offset to commit per topic-partition (an aiokafka ``TopicPartition``)."""


class EncoderUnavailable(RuntimeError):
    """Raised by ``encode`` when the fault is in the model or its device, not in the batch's events.

    Infrastructure, like a broker outage: the batch is retried until the model works again, and dead-
    lettering it would lose good work (every later batch would fail the same way).
    """


@dataclass
class Batch(Generic[T]):
    """Events of one consumed batch, the records they came from, and what to commit once published."""

    events: list[T]
    offsets: Offsets
    commit: Callable[[Offsets], Awaitable[None]] | None = None
    records: Sequence[Any] = ()
    received: float = field(default_factory=time.perf_counter)
    payloads: list[Payload] = field(default_factory=list)
    context: contextvars.Context | None = None
    """The context the batch was consumed in (its trace span): its payloads are published in it."""
    event_records: Sequence[Any] = ()
    """The record of each event (same order as ``events``), to dead-letter single rejected events."""
    rejected: list[tuple[int, BaseException]] = field(default_factory=list)
    """Events (index into ``events``) that could not be embedded: dead-lettered before the commit."""


@dataclass
class PipelineStats:
    batches: int = 0
    events: int = 0
    encode_s: float = 0.0
    publish_s: float = 0.0
    encoder_idle_s: float = 0.0


class EmbedPipeline(Generic[T]):
    """``submit`` batches; they are encoded one at a time, then published and committed in order.

    ``encode(events) -> result`` runs in the pipeline's model thread; ``serialize(events, result) ->
    payloads`` in its serialiser thread (without ``serialize``, ``encode`` returns the payloads).
    ``publish(payloads)`` must return once Kafka acknowledged them all. ``on_error(batch,
    exc)`` is called when ``encode`` fails for a batch (e.g. to dead-letter it); the batch is then still
    committed so the consumer moves on. ``rejects(result)`` names single events the encoder or the
    serialiser set aside (bisected failures, NaN vectors): each is passed to ``on_error`` alone, with its
    own error and record, before the batch's offsets are committed. When ``encode`` raises
    :class:`EncoderUnavailable` the same batch is encoded again after ``model_retry_s`` (doubling up to
    ``model_retry_max_s``) until it succeeds or the pipeline stops (then it is left uncommitted).
    """

    def __init__(
        self,
        encode: Callable[[list[T]], Any],
        publish: Callable[[list[Payload]], Awaitable[None]],
        *,
        serialize: Callable[[list[T], Any], list[Payload]] | None = None,
        on_error: Callable[[Batch[T], BaseException], Awaitable[None]] | None = None,
        on_encoded: Callable[[Batch[T], float], None] | None = None,
        rejects: Callable[[Any], list[tuple[int, BaseException]]] | None = None,
        depth: int = 2,
        publish_retry_s: float = 1.0,
        model_retry_s: float = 1.0,
        model_retry_max_s: float = 30.0,
    ) -> None:
        self._encode = encode
        self._serialize = serialize
        self._publish = publish
        self._on_error = on_error
        self._on_encoded = on_encoded
        self._rejects = rejects
        self._depth = max(1, depth)
        self._retry_s = publish_retry_s
        self._model_retry_s = model_retry_s
        self._model_retry_max_s = max(model_retry_s, model_retry_max_s)
        self.model_down_since: float | None = None
        """``time.monotonic()`` when the model began failing every batch (:class:`EncoderUnavailable`);
        None while it works."""
        self._stopping: asyncio.Event | None = None
        self._abandoned = False
        self._encode_q: asyncio.Queue[Batch[T]] | None = None
        self._publish_q: asyncio.Queue[Batch[T]] | None = None
        self._serialize_q: asyncio.Queue[tuple[Batch[T], Any]] | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._pool: ThreadPoolExecutor | None = None
        self._ser_pool: ThreadPoolExecutor | None = None
        self._in_flight = 0
        self._idle: asyncio.Event | None = None
        self._closing = False
        self.stats = PipelineStats()

    # ------------------------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        """Start the encode, serialise and publish stages (queues and worker threads); a second call does nothing."""
        if self._tasks:
            return
        self._encode_q = asyncio.Queue(self._depth)
        self._publish_q = asyncio.Queue(self._depth)
        self._serialize_q = asyncio.Queue(self._depth)
        self._idle = asyncio.Event()
        self._idle.set()
        self._stopping = asyncio.Event()
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="embed")
        self._ser_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="embed-json")
        self._tasks = [
            asyncio.create_task(self._encoder(), name="embed-encoder"),
            asyncio.create_task(self._serializer(), name="embed-serializer"),
            asyncio.create_task(self._publisher(), name="embed-publisher"),
        ]

    async def stop(self, grace_s: float = 60.0) -> None:
        """Stop taking batches, finish (publish and commit) those taken, within ``grace_s``."""
        self._closing = True
        if self._stopping is not None:
            self._stopping.set()
        try:
            await asyncio.wait_for(self.drain(), grace_s)
        except TimeoutError:
            log.warning("embed pipeline: %d batches not finished at shutdown; they will be replayed", self._in_flight)
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []
        for pool in (self._pool, self._ser_pool):
            if pool is not None:
                pool.shutdown(wait=False, cancel_futures=True)
        self._pool = self._ser_pool = None

    @property
    def running(self) -> bool:
        return bool(self._tasks) and not self._closing

    @property
    def full(self) -> bool:
        """True when :meth:`submit` would wait (the encoder's queue is full)."""
        return self._encode_q is not None and self._encode_q.full()

    @property
    def in_flight(self) -> int:
        """Batches submitted and not yet committed."""
        return self._in_flight

    async def submit(self, batch: Batch[T]) -> None:
        """Queue a batch (waits while the pipeline is full: that is the back-pressure)."""
        if self._encode_q is None:
            raise RuntimeError("embed pipeline not started")
        if self._closing:  # shutting down: never acknowledged, so the batch is replayed after restart
            await asyncio.Event().wait()
        self._in_flight += 1
        assert self._idle is not None
        self._idle.clear()
        await self._encode_q.put(batch)

    async def drain(self) -> None:
        """Wait until every submitted batch is published and committed (rebalance, shutdown)."""
        if self._idle is not None:
            await self._idle.wait()

    # ------------------------------------------------------------------------------------ stages
    async def _encoder(self) -> None:
        assert self._encode_q is not None and self._serialize_q is not None
        loop = asyncio.get_running_loop()
        while True:
            waited = time.perf_counter()
            batch = await self._encode_q.get()
            start = time.perf_counter()
            self.stats.encoder_idle_s += start - waited
            if self._abandoned:  # an earlier batch was left unencoded: no later one may be committed past it
                self._finish()
                continue
            result: Any = None
            failed: BaseException | None = None
            attempt = 0
            while True:
                attempt += 1
                try:
                    result = await loop.run_in_executor(self._pool, self._encode, batch.events)
                except asyncio.CancelledError:
                    raise
                except EncoderUnavailable as exc:
                    if await self._model_down(batch, exc, attempt):
                        continue
                    failed = exc  # shutting down: left uncommitted, replayed after the restart
                except Exception as exc:
                    log.exception("encoding a batch of %d events failed", len(batch.events))
                    failed = exc
                break
            if isinstance(failed, EncoderUnavailable):
                self._abandoned = True
                self._finish()
                continue
            if failed is None and self.model_down_since is not None:
                log.warning("the model works again after %.1fs", time.monotonic() - self.model_down_since)
                self.model_down_since = None
            elapsed = time.perf_counter() - start
            self.stats.encode_s += elapsed
            if failed is not None:
                if not await self._failed(batch, failed):
                    continue
                result = None
            elif self._on_encoded is not None:
                self._on_encoded(batch, elapsed)
            await self._serialize_q.put((batch, result))

    async def _model_down(self, batch: Batch[T], exc: EncoderUnavailable, attempt: int) -> bool:
        """Wait before encoding ``batch`` again; False when the pipeline is stopping instead."""
        if self.model_down_since is None:
            self.model_down_since = time.monotonic()
        if self._closing:
            log.error("the model is down at shutdown (%r); %d events left to replay", exc, len(batch.events))
            return False
        delay = min(self._model_retry_max_s, self._model_retry_s * 2 ** min(attempt - 1, 20))
        log.error(
            "the model failed (attempt %d at a batch of %d events, down for %.1fs): %r; retrying in %.1fs",
            attempt,
            len(batch.events),
            time.monotonic() - self.model_down_since,
            exc,
            delay,
        )
        assert self._stopping is not None
        try:
            await asyncio.wait_for(self._stopping.wait(), delay)
        except TimeoutError:
            return True
        return False

    async def _serializer(self) -> None:
        assert self._serialize_q is not None and self._publish_q is not None
        loop = asyncio.get_running_loop()
        while True:
            batch, result = await self._serialize_q.get()
            if result is not None:
                try:
                    if self._serialize is None:
                        batch.payloads = list(result)
                    else:
                        batch.payloads = await loop.run_in_executor(
                            self._ser_pool, self._serialize, batch.events, result
                        )
                    if self._rejects is not None:
                        batch.rejected = self._rejects(result)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    log.exception("serialising a batch of %d vectors failed", len(batch.events))
                    if not await self._failed(batch, exc):
                        continue
            await self._publish_q.put(batch)

    async def _failed(self, batch: Batch[T], exc: BaseException) -> bool:
        """Dead-letter a batch that cannot be embedded; True once it may be committed.

        Dead-lettering goes to Kafka, which may be down: it is retried with back-off (the pipeline, and
        so consumption, waits meanwhile), because a later batch's commit would move the offsets past
        this one and it would be neither embedded nor dead-lettered. False only when shutting down
        (the batch is not committed and is replayed after a restart).
        """
        batch.payloads = []
        if self._on_error is None:
            return True
        attempt = 0
        while True:
            attempt += 1
            try:
                await self._on_error(batch, exc)
                return True
            except asyncio.CancelledError:
                raise
            except Exception as dlq_exc:
                if self._closing:
                    log.error("dead-lettering a failed batch failed at shutdown (%r); it will be replayed", dlq_exc)
                    self._finish()
                    return False
                delay = min(30.0, self._retry_s * 2 ** min(attempt - 1, 5))
                log.warning(
                    "dead-lettering a failed batch of %d failed (attempt %d): %r; retrying in %.1fs",
                    len(batch.events),
                    attempt,
                    dlq_exc,
                    delay,
                )
                await asyncio.sleep(delay)

    async def _publisher(self) -> None:
        assert self._publish_q is not None
        while True:
            batch = await self._publish_q.get()
            start = time.perf_counter()
            attempt = 0
            while batch.payloads:
                attempt += 1
                try:
                    if batch.context is None:
                        await self._publish(batch.payloads)
                    else:  # in the consumer's context: the trace context (traceparent) goes with the vectors
                        await asyncio.create_task(self._send(batch.payloads), context=batch.context)
                    break
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # broker unreachable: retry; consumption is paused meanwhile
                    delay = min(30.0, self._retry_s * 2 ** min(attempt - 1, 5))
                    log.warning(
                        "publishing %d vectors failed (attempt %d): %r; retrying in %.1fs",
                        len(batch.payloads),
                        attempt,
                        exc,
                        delay,
                    )
                    await asyncio.sleep(delay)
            if batch.rejected and not await self._reject(batch):
                continue  # shutting down: not committed, replayed after the restart
            if batch.commit is not None and batch.offsets:
                try:
                    await batch.commit(batch.offsets)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # partitions revoked meanwhile: the new owner replays them
                    log.warning("offset commit failed (%r); the batch may be embedded again", exc)
            self.stats.publish_s += time.perf_counter() - start
            self.stats.batches += 1
            self.stats.events += len(batch.events)
            self._finish()

    async def _send(self, payloads: list[Payload]) -> None:
        await self._publish(payloads)

    async def _reject(self, batch: Batch[T]) -> bool:
        """Dead-letter the batch's rejected events one by one (each with its own error); False at shutdown."""
        for index, exc in batch.rejected:
            records = [batch.event_records[index]] if index < len(batch.event_records) else []
            single: Batch[T] = Batch(events=[batch.events[index]], offsets={}, records=records)
            if not await self._failed(single, exc):
                return False  # at shutdown _failed has finished the (whole) batch's count
        return True

    def _finish(self) -> None:
        self._in_flight -= 1
        if self._in_flight <= 0:
            self._in_flight = 0
            assert self._idle is not None
            self._idle.set()
