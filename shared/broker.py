"""The Kafka broker every service uses: metrics, dead letters, request/reply.

- :func:`make_broker` builds a FastStream ``KafkaBroker`` with Prometheus metrics and the
  :class:`DeadLetterPolicy` middleware.
- :class:`DeadLetterPolicy` retries a failing event; a poison event (one that can never succeed) or
  one that failed ``max_delivery_attempts`` times goes to ``<topic>.dlq`` with the reason and the
  consumer moves on. Infrastructure errors (:func:`is_transient`: the database or broker unreachable, a
  read-only or overloaded database, a statement timeout) are retried without limit: the event is not the
  problem, and sending it to the DLQ would lose work.
- :class:`ReplyClient` does request/reply over real Kafka (FastStream 0.7's ``broker.request`` works
  only with its test client): publish with ``reply_to`` and ``correlation_id`` headers, consume a reply
  topic owned by this instance, resolve one queue per correlation id.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, TypeVar

import asyncpg
from aiokafka import AIOKafkaProducer, ConsumerRecord
from aiokafka.errors import KafkaConnectionError, KafkaTimeoutError, NodeNotReadyError
from faststream import BaseMiddleware, ContextRepo
from faststream.kafka import KafkaBroker, KafkaMessage
from faststream.kafka.prometheus import KafkaPrometheusMiddleware
from faststream.message import StreamMessage
from faststream.middlewares import AckPolicy
from pydantic import BaseModel, ValidationError

from shared import metrics, tracing
from shared.dlq import UNDECODABLE_HEADER, make_letter
from shared.events import ErrorInfo, Event, RequestProgress
from shared.kafka_security import broker_security
from shared.logs import trace_id_var
from shared.murmur2 import partition_slots
from shared.settings import KafkaSettings, Settings, get_settings
from shared.topics import dlq

log = logging.getLogger(__name__)

E = TypeVar("E", bound=BaseModel)

EVENT_TYPE_HEADER = "evidentia-event"
TRACE_HEADER = "trace-id"


class PoisonEvent(Exception):
    """An event that can never be processed, however often it is retried (bad payload, bad XML...)."""


class TransientError(Exception):
    """A failure of something outside the event (a remote service down, a 5xx, a timeout): the event is
    retried without limit, never dead-lettered. Services subclass it for their own outage errors."""


#: PostgreSQL errors that say the database cannot serve now, whatever the event: by SQLSTATE class (two
#: characters) or code (five), each with why. The event is retried with back-off and without limit, its
#: partitions paused (:class:`DeadLetterPolicy`); counting such errors toward ``max_delivery_attempts``
#: dead-lettered good work whenever a fault outlasted three attempts (issue 40: 25 s of a read-only
#: database mid-ingest dead-lettered 16 of 200 documents in the parser and 143 records in the retriever).
#: Everything else (class 22 data, 23 integrity, 42 syntax or a missing table, 54 a statement too large,
#: XX internal, P0 a trigger's own ``RAISE``) stays an error of the event or the code: attempted
#: ``max_delivery_attempts`` times. The price: an event whose own statement always times out or always
#: runs the server out of memory is retried until an operator acts, holding its consumer's partitions;
#: ``evidentia_handler_retries_total{transient="true"}`` and the consumer lag show it.
INFRASTRUCTURE_SQLSTATES: dict[str, str] = {
    "08": "connection exception: the server refused or dropped the connection (down, restarting, network)",
    "25006": "read-only transaction: a write reached a primary demoted in a switchover, a standby, or a database "
    "set read-only (default_transaction_read_only) while an operator works on it; the same write succeeds "
    "once the connection reaches the new primary or the setting is lifted",
    "28": "invalid authorization, raised only when connecting: credentials rotated or pg_hba being changed; no "
    "event's content can cause it",
    "3D000": "no such database, raised only when connecting: a database being restored or recreated",
    "40": "transaction rollback: a serialization failure (40001) or deadlock (40P01) with a concurrent "
    "transaction, or a commit whose outcome the server lost (40003); rerunning the handler is PostgreSQL's "
    "documented remedy",
    "53": "insufficient resources: disk full (53100), out of memory (53200), too many connections (53300), a "
    "server limit on shared resources (53400); the same statement succeeds once the server has room again",
    "55P03": "lock not available: lock_timeout expired while another session (a migration, a reindex, a vacuum) "
    "held the lock",
    "57": "operator intervention: a statement timeout or a cancel (57014), an admin or crash shutdown "
    "(57P01, 57P02), a server starting up or shutting down (57P03), a session timeout (57P05); the server "
    "was stopped or was too slow, not the event wrong",
    "58": "system error outside PostgreSQL: an I/O error of its disk (58030), a file it cannot open",
}
#: Codes inside the classes above that do blame the event.
EVENT_SQLSTATES: dict[str, str] = {
    "40002": "an integrity constraint checked at commit (a deferred one): the row itself breaks it, like class 23",
}


def is_infrastructure_sqlstate(sqlstate: str | None) -> bool:
    """Whether a PostgreSQL error of this SQLSTATE is an outage of the database (:data:`INFRASTRUCTURE_SQLSTATES`)."""
    if not sqlstate or sqlstate in EVENT_SQLSTATES:
        return False
    return sqlstate in INFRASTRUCTURE_SQLSTATES or sqlstate[:2] in INFRASTRUCTURE_SQLSTATES


TRANSIENT_ERRORS: tuple[type[BaseException], ...] = (
    TransientError,
    OSError,
    TimeoutError,
    # Client side: a connection the client found closed or broken mid-operation, a pool closing, no host of a
    # multi-host URL matching target_session_attrs (TargetServerAttributeNotMatched, mid-switchover).
    # Errors of the server are classified by SQLSTATE (is_infrastructure_sqlstate).
    asyncpg.InterfaceError,
    asyncpg.InternalClientError,
    KafkaConnectionError,
    KafkaTimeoutError,
    NodeNotReadyError,
)
POISON_ERRORS: tuple[type[BaseException], ...] = (
    PoisonEvent,
    ValidationError,
    json.JSONDecodeError,
    UnicodeDecodeError,
)


def is_transient(exc: BaseException) -> bool:
    """Whether ``exc`` is an outage (retried without limit) rather than an error of the event or the code."""
    if isinstance(exc, POISON_ERRORS):
        return False
    if isinstance(exc, asyncpg.PostgresError):
        return is_infrastructure_sqlstate(exc.sqlstate)
    if isinstance(exc, asyncpg.InterfaceError) and isinstance(exc, ValueError):
        # asyncpg's own DataError ("invalid input for query argument $1": an integer past int64, a value of the
        # wrong type) or ClientConfigurationError: the call is wrong, and no retry makes it right.
        return False
    return isinstance(exc, TRANSIENT_ERRORS)


#: Errors that name something in the event's own data: a poison payload, or a value the database refuses
#: (SQLSTATE class 22, "data exception": a vector value out of range, text it cannot store; class 23, an
#: integrity constraint the row breaks). Only these are worth bisecting a batch over to find the record.
DATA_ERRORS: tuple[type[BaseException], ...] = (
    *POISON_ERRORS,
    asyncpg.DataError,
    asyncpg.IntegrityConstraintViolationError,
)


def is_data_error(exc: BaseException) -> bool:
    """Whether ``exc`` blames the data being processed (:data:`DATA_ERRORS`), not an outage or the code: a
    batch handler may then split its batch to set the one bad record aside. Any other error is raised to
    the dead-letter policy, which retries the whole batch (an outage without limit, anything else up to
    ``max_delivery_attempts`` times) instead of dead-lettering every record one by one."""
    return isinstance(exc, DATA_ERRORS) and not is_transient(exc)


def records_of(msg: StreamMessage[Any]) -> list[ConsumerRecord[Any, Any]]:
    raw = msg.raw_message
    if isinstance(raw, ConsumerRecord):
        return [raw]
    return list(raw) if isinstance(raw, Sequence) else []


def key_str(key: Any) -> str | None:
    if key is None:
        return None
    return key.decode("utf-8", "replace") if isinstance(key, bytes) else str(key)


DeadLetterHook = Callable[[list[str], BaseException], Awaitable[None]]
_dead_letter_hooks: list[DeadLetterHook] = []


def add_dead_letter_hook(hook: DeadLetterHook) -> None:
    """Call ``hook(keys, error)`` after events are dead-lettered (e.g. to mark their documents failed)."""
    _dead_letter_hooks.append(hook)


async def publish_dead_letters(
    broker: KafkaBroker,
    service: str,
    records: Sequence[ConsumerRecord[Any, Any]],
    exc: BaseException,
    attempts: int,
    *,
    max_payload_bytes: int | None = None,
) -> None:
    """Send ``records`` to their dead-letter topics; returns once Kafka acknowledged every letter.

    Raises when a letter could not be sent: the caller must not move past the records then (see
    :class:`DeadLetterPolicy`, which retries until they are sent). Hooks run after all are sent.
    """
    limit = max_payload_bytes or get_settings().kafka.dlq_max_payload_bytes
    for record in records:
        letter = make_letter(record, service=service, exc=exc, attempts=attempts, max_payload_bytes=limit)
        await broker.publish(
            letter.wire(),
            topic=dlq(record.topic),
            key=record.key,
            headers={"content-type": "application/json", EVENT_TYPE_HEADER: "DeadLetter"},
        )
        metrics.DEAD_LETTERS.labels(service, record.topic, type(exc).__name__).inc()
        log.error(
            "event sent to dead-letter topic",
            extra={
                "topic": record.topic,
                "partition": record.partition,
                "offset": record.offset,
                "error_type": type(exc).__name__,
                "error": str(exc)[:500],
            },
        )
    keys = [k for k in (key_str(r.key) for r in records) if k]
    for hook in _dead_letter_hooks:
        try:
            await hook(keys, exc)
        except Exception:  # the dead letter is already safe in Kafka; a failing hook must not block the consumer
            log.warning("dead-letter hook failed", exc_info=True)


def _trace_of(body: bytes) -> str | None:
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return None
    trace = data.get("trace_id") if isinstance(data, dict) else None
    return trace if isinstance(trace, str) and 0 < len(trace) <= 64 else None


class PartitionPause:
    """Pauses a consumer's partitions while a handler waits to retry, and keeps polling meanwhile.

    A handler that sleeps between retries (an outage) does not poll: past ``max_poll_interval_ms``
    Kafka gives its partitions to another replica, which runs the same event again. Instead, the
    wait pauses every assigned partition and polls (``getmany`` on paused partitions returns nothing
    and counts as a poll); records of partitions assigned meanwhile are put back with ``seek``. The
    partitions are resumed when the event is finished. Without a real consumer (FastStream's test
    client) it just sleeps.
    """

    def __init__(self, consumer: Any) -> None:
        real = all(hasattr(consumer, a) for a in ("pause", "resume", "assignment", "getmany", "seek"))
        self.consumer = consumer if real else None
        self.paused: set[Any] = set()

    async def wait(self, seconds: float) -> None:
        consumer = self.consumer
        if consumer is None:
            await asyncio.sleep(seconds)
            return
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            try:
                fresh = set(consumer.assignment()) - self.paused
                if fresh:
                    consumer.pause(*fresh)
                    self.paused |= fresh
                got = await consumer.getmany(timeout_ms=max(1, int(min(left, 1.0) * 1000)))
            except asyncio.CancelledError:
                raise
            except Exception:  # a rebalance or a broker outage: wait out the rest without polling
                log.debug("polling a paused consumer failed", exc_info=True)
                await asyncio.sleep(min(left, 1.0))
                continue
            for tp, records in got.items():  # a partition assigned between pause and poll: put it back
                if records:
                    consumer.seek(tp, records[0].offset)

    def resume(self) -> None:
        if self.consumer is not None and self.paused:
            try:
                assigned = set(self.consumer.assignment())
                self.consumer.resume(*(tp for tp in self.paused if tp in assigned))
            except Exception:  # partitions gone in a rebalance: nothing to resume
                log.debug("resuming partitions failed", exc_info=True)
        self.paused.clear()


class DeadLetterPolicy:
    """Middleware factory: ``KafkaBroker(middlewares=[DeadLetterPolicy(...)])``.

    With ``request_max_age_s``, a request (a message with a ``reply_to``) older than that is dropped before
    its handler runs: its caller has given up waiting (see :func:`is_stale`).
    """

    def __init__(
        self,
        service: str,
        max_attempts: int = 3,
        backoff_s: float = 0.5,
        max_backoff_s: float = 30.0,
        request_max_age_s: float | None = None,
        max_payload_bytes: int = 1_048_576,
    ):
        self.service = service
        self.max_attempts = max_attempts
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self.request_max_age_s = request_max_age_s
        self.max_payload_bytes = max_payload_bytes

    def __call__(self, msg: Any, /, *, context: ContextRepo) -> _DeadLetterMiddleware:
        return _DeadLetterMiddleware(msg, context=context, policy=self)

    def delay(self, attempt: int) -> float:
        """Back-off before attempt ``attempt + 1``: doubling from ``backoff_s``, capped at ``max_backoff_s``.

        The exponent is capped too: an outage may last thousands of attempts, and ``2 ** 1100`` does
        not fit a float (``OverflowError`` made the handler fail after ~1,000 infrastructure retries).
        """
        return float(min(self.max_backoff_s, self.backoff_s * 2.0 ** min(max(attempt - 1, 0), 30)))


class _DeadLetterMiddleware(BaseMiddleware):  # type: ignore[type-arg]
    def __init__(self, msg: Any, /, *, context: ContextRepo, policy: DeadLetterPolicy) -> None:
        super().__init__(msg, context=context)
        self.policy = policy

    async def consume_scope(self, call_next: Callable[[Any], Awaitable[Any]], msg: StreamMessage[Any]) -> Any:
        max_age = self.policy.request_max_age_s
        if max_age is not None and msg.reply_to and is_stale(msg, max_age):
            log.info("stale request skipped", extra={"correlation_id": msg.correlation_id})
            return None
        records = records_of(msg)
        topic = records[0].topic if records else "?"
        token = trace_id_var.set(
            _trace_of(records[0].value) if records and isinstance(records[0].value, bytes) else None
        )
        # Requests (reply_to) are handled several at a time on one consumer, which a pause would stop for
        # all of them and whose polling it would race: they just sleep between attempts.
        pause = PartitionPause(None if msg.reply_to else getattr(msg, "consumer", None))
        attempt = 0
        failures = 0  # only failures of the handler itself count towards max_attempts
        try:
            undecodable = undecodable_reason(records[0]) if len(records) == 1 else None
            if undecodable is not None:  # e.g. a header that is not UTF-8: never going to work
                await self._dead_letter(records, PoisonEvent(undecodable), 1, pause)
                return None
            while True:
                attempt += 1
                try:
                    return await call_next(msg)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    transient = is_transient(exc)
                    poison = isinstance(exc, POISON_ERRORS)
                    if not transient:
                        failures += 1
                    # An outage makes every attempt fail with an infrastructure error, and its end often
                    # with one odd error (a connection broken mid-query): neither may use up the budget
                    # of a healthy event, or the outage would dead-letter (lose) good work.
                    if poison or failures >= self.policy.max_attempts:
                        await self._dead_letter(records, exc, attempt, pause)
                        return None
                    metrics.HANDLER_RETRIES.labels(self.policy.service, topic, str(transient).lower()).inc()
                    log.warning(
                        "handler failed; retrying",
                        extra={"topic": topic, "attempt": attempt, "transient": transient, "error": repr(exc)[:500]},
                    )
                    await pause.wait(self.policy.delay(attempt if transient else failures))
        finally:
            pause.resume()
            trace_id_var.reset(token)

    async def _dead_letter(
        self, records: list[ConsumerRecord[Any, Any]], exc: BaseException, attempts: int, pause: PartitionPause
    ) -> None:
        """Send the dead letters, retrying until Kafka has them: the offset is committed after this returns,
        and an event neither processed nor dead-lettered must never be committed."""
        broker: KafkaBroker = self.context.get("broker")
        tries = 0
        while True:
            tries += 1
            try:
                await publish_dead_letters(
                    broker, self.policy.service, records, exc, attempts, max_payload_bytes=self.policy.max_payload_bytes
                )
                return
            except asyncio.CancelledError:
                raise
            except Exception as send_exc:
                metrics.DEAD_LETTER_FAILURES.labels(self.policy.service, records[0].topic if records else "?").inc()
                delay = self.policy.delay(tries)
                log.error(
                    "could not send a dead letter; retrying (the event's offset stays uncommitted)",
                    extra={"attempt": tries, "delay_s": delay, "error": repr(send_exc)[:500]},
                )
                await pause.wait(delay)


def undecodable_reason(record: ConsumerRecord[Any, Any]) -> str | None:
    """Why ``record`` could not be decoded before its handler ran (see :func:`tolerant_parser`), or None."""
    for k, v in record.headers or ():
        if k == UNDECODABLE_HEADER:
            return bytes(v).decode("utf-8", "replace")
    return None


def _safe_record(record: ConsumerRecord[Any, Any]) -> ConsumerRecord[Any, Any]:
    """``record`` with its headers made decodable; a record that had a bad one is marked undecodable."""
    headers: list[tuple[str, bytes]] = []
    bad: list[str] = []
    for k, v in record.headers or ():
        try:
            bytes(v).decode("utf-8")
            headers.append((k, v))
        except UnicodeDecodeError as exc:
            bad.append(f"header {k!r} is not UTF-8 ({exc.reason} at byte {exc.start})")
            headers.append((k, bytes(v).decode("utf-8", "replace").encode("utf-8")))
    if not bad:
        return record
    headers.append((UNDECODABLE_HEADER, "; ".join(bad).encode()))
    return dataclasses.replace(record, headers=headers)


async def tolerant_parser(msg: Any, original: Callable[..., Awaitable[Any]]) -> Any:
    """FastStream's parser, except that a record it cannot decode (a header that is not UTF-8) is not
    skipped silently before any middleware sees it: its headers are made decodable and it is marked
    (``evidentia-undecodable``) so :class:`DeadLetterPolicy` (or a batch handler's :func:`decode_batch`)
    dead-letters it with the reason."""
    try:
        return await original(msg)
    except UnicodeDecodeError:
        if isinstance(msg, tuple | list):
            return await original(tuple(_safe_record(r) for r in msg))
        return await original(_safe_record(msg))


def install_metadata_backoff() -> bool:
    """Make aiokafka wait ``retry_backoff_ms`` after a failed metadata update (idempotent).

    While the broker is unreachable, aiokafka's producer sender loop asks for a metadata update, which
    fails at once (connection refused), and asks again at once: a busy loop that logged ~2,000 errors
    a second per process and burned a CPU core for the whole outage (seen in the Kafka-restart fault
    test, aiokafka 0.14). The update now fails after the client's own retry back-off (100 ms by
    default) instead, so an outage costs a few requests a second. True when the patch is in place.
    """
    from aiokafka.client import AIOKafkaClient

    original = getattr(AIOKafkaClient, "_metadata_update", None)
    if original is None:  # a future aiokafka without it: nothing to patch
        return False
    if getattr(original, "_evidentia_backoff", False):
        return True

    async def _metadata_update(self: AIOKafkaClient, cluster_metadata: Any, topics: Any) -> bool:
        ok = bool(await original(self, cluster_metadata, topics))
        if not ok:
            await asyncio.sleep(float(getattr(self, "_retry_backoff", 0.1)))
        return ok

    _metadata_update._evidentia_backoff = True  # type: ignore[attr-defined]
    AIOKafkaClient._metadata_update = _metadata_update  # type: ignore[method-assign]
    return True


async def tolerant_batch_decoder(msg: StreamMessage[Any], original: Callable[..., Awaitable[Any]]) -> Any:
    """FastStream's decoder, except that one bad record cannot fail a whole batch.

    FastStream decodes a batch before the handler runs; a record sent with ``content-type:
    application/json`` and a body that is not JSON made that raise ``JSONDecodeError`` for the whole
    batch, so :class:`DeadLetterPolicy` dead-lettered every good event beside it (and the dead-letter
    hooks marked their documents failed). Now the bad record decodes to its raw bytes and the batch
    handler's :func:`decode_batch` sends just that record to the DLQ with its reason. A single record
    still fails as before (poison, dead-lettered alone).
    """
    try:
        return await original(msg)
    except (json.JSONDecodeError, UnicodeDecodeError):
        raw = msg.raw_message
        if not isinstance(raw, tuple | list):
            raise
        out: list[Any] = []
        for record in raw:
            body = record.value or b""
            try:
                out.append(json.loads(body))
            except (json.JSONDecodeError, UnicodeDecodeError):
                out.append(body)
        return out


async def undecoded_batch(msg: StreamMessage[Any], original: Callable[..., Awaitable[Any]]) -> Any:
    """Decoder of batch handlers that decode their own records (:func:`decode_batch`): the raw bodies.

    FastStream JSON-decodes every record of a batch before the handler runs, even when the handler
    reads only the message; for the embedder's and the retriever's hot batch consumers that was a
    second decoding of every event (about a sixth of the embedder's CPU time on a busy stream).
    """
    return [record.value for record in records_of(msg)]


async def send_keyed(
    producer: AIOKafkaProducer,
    topic: str,
    messages: Sequence[tuple[bytes | None, bytes]],
    headers: Sequence[tuple[str, bytes]] = (),
) -> int:
    """Send ``(key, value)`` messages as whole record batches; return once Kafka acknowledged them all.

    With tracing on, every record also carries the current span's W3C ``traceparent`` header.

    Each message goes to the partition ``producer.send`` would pick (the producer's default murmur2
    partitioner on the key, as Java clients do; hashed for the whole batch at once by
    :func:`shared.murmur2.partition_slots`), and in the given order within its partition. One
    future per record batch instead of one per message: ``send`` costs about 15 us of Python per
    message, which at tens of thousands of messages a second is the publisher's whole budget.
    Returns the number of record batches sent.
    """
    if not messages:
        return 0
    partitions = sorted(await producer.partitions_for(topic))
    by_partition: dict[int, list[tuple[bytes | None, bytes]]] = {}
    slots = iter(partition_slots([key for key, _ in messages if key is not None], len(partitions)))
    for key, value in messages:
        part = partitions[next(slots)] if key is not None else partitions[0]
        by_partition.setdefault(part, []).append((key, value))
    hdrs = list(headers)
    tracing.inject_headers(hdrs)  # W3C traceparent of the current span, when tracing is on
    futures = []
    for part, items in by_partition.items():
        batch = producer.create_batch()
        for key, value in items:
            if batch.append(key=key, value=value, timestamp=None, headers=hdrs) is None:  # full
                futures.append(await producer.send_batch(batch, topic, partition=part))
                batch = producer.create_batch()
                if batch.append(key=key, value=value, timestamp=None, headers=hdrs) is None:
                    raise ValueError(f"a message of {len(value)} bytes does not fit a record batch")
        futures.append(await producer.send_batch(batch, topic, partition=part))
    await asyncio.gather(*futures)
    return len(futures)


def make_broker(service: str, settings: Settings | None = None, **kwargs: Any) -> KafkaBroker:
    """A KafkaBroker for ``service`` with metrics and dead-letter handling installed.

    It connects with the TLS/SASL of the Kafka settings and, when an OTLP endpoint is configured, turns this
    process's tracing on (:func:`shared.tracing.setup_tracing`) and traces every message it handles.
    """
    install_metadata_backoff()
    s = settings or get_settings()
    tracing.setup_tracing(service, s.tracing)
    k: KafkaSettings = s.kafka
    return KafkaBroker(
        k.bootstrap,
        client_id=f"{k.client_id}-{service}",
        security=broker_security(k),
        middlewares=(
            # Outermost, so a message's consume span covers its retries and dead-lettering.
            *tracing.kafka_middlewares(),
            DeadLetterPolicy(
                service,
                k.max_delivery_attempts,
                k.retry_backoff_s,
                k.retry_backoff_max_s,
                request_max_age_s=k.request_timeout_s,
                max_payload_bytes=k.dlq_max_payload_bytes,
            ),
            KafkaPrometheusMiddleware(registry=metrics.registry, app_name=service, metrics_prefix="evidentia"),
        ),
        max_request_size=k.max_request_size,
        logger=logging.getLogger(f"evidentia.{service}.kafka"),
        **({"decoder": tolerant_batch_decoder, "parser": tolerant_parser} | kwargs),
    )


def decode(model: type[E], body: bytes | str | dict[str, Any]) -> E:
    """Decode one event; a bad payload raises :class:`PoisonEvent` with the reason."""
    try:
        if isinstance(body, dict):
            return model.model_validate(body)
        return model.model_validate_json(body)
    except ValidationError as exc:
        raise PoisonEvent(f"not a valid {model.__name__}: {exc}") from exc


def decode_batch(
    model: type[E], msg: KafkaMessage | StreamMessage[Any]
) -> tuple[list[E], list[tuple[ConsumerRecord[Any, Any], PoisonEvent]]]:
    """Split a batch into valid events and poison records (each with its reason)."""
    good: list[E] = []
    bad: list[tuple[ConsumerRecord[Any, Any], PoisonEvent]] = []
    for record, event, exc in decode_records(model, records_of(msg)):
        if event is not None:
            good.append(event)
        else:
            assert exc is not None
            bad.append((record, exc))
    return good, bad


def decode_records(
    model: type[E], records: Sequence[ConsumerRecord[Any, Any]]
) -> list[tuple[ConsumerRecord[Any, Any], E | None, PoisonEvent | None]]:
    """Each record with its event, or with why it is poison (bad body, or undecodable before the handler)."""
    out: list[tuple[ConsumerRecord[Any, Any], E | None, PoisonEvent | None]] = []
    for record in records:
        reason = undecodable_reason(record)
        if reason is not None:
            out.append((record, None, PoisonEvent(reason)))
            continue
        try:
            out.append((record, decode(model, record.value or b""), None))
        except PoisonEvent as exc:
            out.append((record, None, exc))
    return out


def event_headers(event: Event) -> dict[str, str]:
    return {EVENT_TYPE_HEADER: type(event).__name__, TRACE_HEADER: event.trace_id}


class RequestTimeout(Exception):
    def __init__(self, topic: str, timeout: float):
        super().__init__(f"no reply on {topic} within {timeout:.1f}s")
        self.topic = topic
        self.timeout = timeout


class RemoteError(Exception):
    def __init__(self, error: ErrorInfo):
        super().__init__(error.message)
        self.error = error


class ReplyClient:
    """Request/reply over Kafka for one process (one reply topic per instance).

    Call :meth:`install` before the broker starts. Replies carry the request's ``correlation_id``;
    a streamed reply is a run of messages whose ``evidentia-event`` header is not the final type.
    """

    def __init__(self, broker: KafkaBroker, reply_topic: str):
        self.broker = broker
        self.reply_topic = reply_topic
        self._pending: dict[str, asyncio.Queue[tuple[str, bytes]]] = {}
        self.ready = asyncio.Event()

    def install(self, group_id: str | None = None) -> None:
        """Subscribe to the reply topic; with ``group_id``, as the only member of that group, so that others can
        tell whether the topic's owner is alive (:class:`shared.topics.ReplyTopicSweeper`)."""
        sub = self.broker.subscriber(self.reply_topic, auto_offset_reset="earliest", group_id=group_id)
        sub(self._on_reply)

    async def _on_reply(self, msg: KafkaMessage) -> None:
        cid = msg.correlation_id
        queue = self._pending.get(cid)
        if queue is None:
            log.debug("reply for an unknown or expired request", extra={"correlation_id": cid})
            return
        kind = msg.headers.get(EVENT_TYPE_HEADER, "")
        await queue.put((kind, msg.body))

    async def _send(self, topic: str, event: Event, key: str | None) -> tuple[str, asyncio.Queue[tuple[str, bytes]]]:
        cid = uuid.uuid4().hex
        queue: asyncio.Queue[tuple[str, bytes]] = asyncio.Queue()
        self._pending[cid] = queue
        await self._publish(topic, event, key, cid)
        return cid, queue

    async def _publish(self, topic: str, event: Event, key: str | None, cid: str) -> None:
        await self.broker.publish(
            event,
            topic=topic,
            key=(key or cid).encode(),
            correlation_id=cid,
            reply_to=self.reply_topic,
            headers=event_headers(event),
        )

    async def request(
        self,
        topic: str,
        event: Event,
        reply_model: type[E],
        timeout: float,
        key: str | None = None,
        *,
        resend_after: float | None = None,
    ) -> E:
        """Publish ``event`` and wait ``timeout`` seconds for its reply.

        ``resend_after``: after that many seconds of silence (no reply, and no :class:`RequestProgress` from a
        server working on it), publish the request once more, with the same correlation id, and take whichever
        reply comes first. A request taken by a server that was then killed is lost (requests are
        acknowledged on receipt); the copy is answered by the restarted or another instance. The copy is a
        fresh attempt: it gets the whole ``timeout`` from its own publish, and carries its own timestamp so
        that the server's staleness check (:func:`is_stale`) counts from it too. Otherwise the dead server's
        share of the budget (its silence, the group's rebalance) would leave the copy too little time to be
        answered. So a request ends within ``resend_after + timeout`` at most after the last sign of life. It
        is sent again once at most. A server that sends progress (:func:`progress_while`) is never resent to
        while it works, so a slow answer is not paid for twice; one that sends none is resent
        ``resend_after`` after the first publish.
        """
        start = time.perf_counter()
        cid, queue = await self._send(topic, event, key)
        outcome = "ok"
        deadline = start + timeout
        resend_at = start + resend_after if resend_after and resend_after < timeout else None
        try:
            while True:
                kind, body = await self._next(queue, deadline, resend_at)
                if kind == _RESEND:
                    resend_at = None
                    metrics.REQUEST_RESENDS.labels(topic).inc()
                    await self._publish(topic, event, key, cid)
                    deadline = time.perf_counter() + timeout  # the copy is a fresh attempt
                    continue
                if kind == PROGRESS_EVENT:
                    if resend_at is not None and resend_after:
                        resend_at = time.perf_counter() + resend_after  # alive: the silence starts again
                    continue
                if kind in ("", reply_model.__name__):
                    reply = reply_model.model_validate_json(body)
                    error = getattr(reply, "error", None)
                    if isinstance(error, ErrorInfo):
                        outcome = "error"
                        raise RemoteError(error)
                    return reply
        except TimeoutError:
            outcome = "timeout"
            metrics.REQUEST_TIMEOUTS.labels(topic).inc()
            raise RequestTimeout(topic, timeout) from None
        finally:
            self._pending.pop(cid, None)
            metrics.REQUEST_LATENCY.labels(topic, outcome).observe(time.perf_counter() - start)

    @staticmethod
    async def _next(
        queue: asyncio.Queue[tuple[str, bytes]], deadline: float, resend_at: float | None
    ) -> tuple[str, bytes]:
        """The next message for a request; ``(_RESEND, b"")`` when ``resend_at`` comes first; TimeoutError
        at ``deadline``."""
        until = deadline if resend_at is None else min(resend_at, deadline)
        try:
            return await asyncio.wait_for(queue.get(), max(0.0, until - time.perf_counter()))
        except TimeoutError:
            if resend_at is None or time.perf_counter() >= deadline:
                raise
            return _RESEND, b""

    async def stream(
        self,
        topic: str,
        event: Event,
        final_type: str,
        timeout: float,
        key: str | None = None,
        *,
        resend_after: float | None = None,
    ) -> AsyncIterator[tuple[str, bytes]]:
        """Yield ``(event type, body)`` until the message of ``final_type`` (yielded last).

        ``timeout`` bounds the wait for each message. ``resend_after`` as in :meth:`request`, but only while
        nothing has been yielded: a stream is never restarted halfway (its reader has shown part of it).
        Progress messages are not yielded; they only show the server is alive.
        """
        cid, queue = await self._send(topic, event, key)
        resend_at = time.perf_counter() + resend_after if resend_after and resend_after < timeout else None
        try:
            while True:
                try:
                    kind, body = await self._next(queue, time.perf_counter() + timeout, resend_at)
                except TimeoutError:
                    metrics.REQUEST_TIMEOUTS.labels(topic).inc()
                    raise RequestTimeout(topic, timeout) from None
                if kind == _RESEND:
                    resend_at = None
                    metrics.REQUEST_RESENDS.labels(topic).inc()
                    await self._publish(topic, event, key, cid)
                    continue
                if kind == PROGRESS_EVENT:
                    if resend_at is not None and resend_after:
                        resend_at = time.perf_counter() + resend_after
                    continue
                resend_at = None  # part of the answer is out: never ask for a second one
                yield kind, body
                if kind in ("", final_type):
                    return
        finally:
            self._pending.pop(cid, None)


#: The reply-topic event type of :class:`RequestProgress`; ``_RESEND`` is internal to :class:`ReplyClient`.
PROGRESS_EVENT = RequestProgress.__name__
_RESEND = "\x00resend"


@contextlib.asynccontextmanager
async def progress_while(broker: KafkaBroker, msg: KafkaMessage, every_s: float, trace_id: str) -> AsyncIterator[None]:
    """While the body runs, publish :class:`RequestProgress` to the request's ``reply_to`` every ``every_s``.

    The first one goes out only after ``every_s``: a prompt answer sends none. The task ends with the body
    (cancelled and awaited), so no progress message outlives its request. ``every_s`` 0: none.
    """
    if every_s <= 0 or not msg.reply_to:
        yield
        return
    start = time.perf_counter()

    async def beat() -> None:
        while True:
            await asyncio.sleep(every_s)
            elapsed = (time.perf_counter() - start) * 1000
            try:
                await reply(broker, msg, RequestProgress(trace_id=trace_id, elapsed_ms=elapsed))
            except Exception:  # a missed beat costs at most one early resend, which the server de-duplicates
                log.warning("progress message not sent", exc_info=True)

    task = asyncio.create_task(beat())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


class RecentRequests:
    """Correlation ids this process has taken, for ``ttl_s`` seconds (at most ``capacity`` of them).

    A caller resends a request it heard nothing of (:meth:`ReplyClient.request`); if the copy reaches the
    process that is still working on (or has just answered) the first, :meth:`claim` says no and the copy is
    dropped, so a busy server never does the same request twice. A restarted process remembers nothing and
    answers the copy: that is what the resend is for.
    """

    def __init__(self, ttl_s: float, capacity: int = 10_000):
        self.ttl_s = ttl_s
        self.capacity = capacity
        self._seen: dict[str, float] = {}

    def claim(self, correlation_id: str) -> bool:
        """True the first time ``correlation_id`` is seen within the ttl (the caller should do the work)."""
        now = time.monotonic()
        if not correlation_id:
            return True
        seen = self._seen.get(correlation_id)
        if seen is not None and now - seen < self.ttl_s:
            return False
        self._seen.pop(correlation_id, None)  # re-inserted last: the dict stays oldest first
        self._seen[correlation_id] = now
        while len(self._seen) > self.capacity:  # insertion order: the oldest first
            del self._seen[next(iter(self._seen))]
        return True


def request_subscriber_options(kafka: KafkaSettings, topic: str) -> dict[str, Any]:
    """Subscriber options every request/reply topic shares.

    Read from the earliest offset, so a request published while the consumer group is still joining is
    not skipped (requests older than the caller's timeout are dropped by :class:`DeadLetterPolicy`);
    acknowledged on receipt and handled ``request_concurrency`` at a time, because a caller waits at most
    its timeout and a redelivered request would answer nobody. A short session
    (``request_session_timeout_ms``) moves a killed instance's partitions within seconds, and with a
    ``group_instance_id`` a restarted instance takes its own back without stopping the others (the id is
    made per topic: one process may answer several request topics).
    """
    options: dict[str, Any] = {
        "auto_offset_reset": "earliest",
        "ack_policy": AckPolicy.ACK_FIRST,
        "max_workers": kafka.request_concurrency,
        "session_timeout_ms": kafka.request_session_timeout_ms,
        "heartbeat_interval_ms": max(kafka.request_session_timeout_ms // 3, 100),
    }
    if kafka.group_instance_id:
        options["group_instance_id"] = f"{kafka.group_instance_id}.{topic}"
    return options


def is_stale(msg: KafkaMessage | StreamMessage[Any], max_age_s: float) -> bool:
    """A request older than its caller's timeout: nobody waits for the reply any more.

    Request subscribers read from the earliest offset when their group has none committed, so a request
    published while the group was still joining is not lost; this check (run by :class:`DeadLetterPolicy`
    for every message that carries a ``reply_to``) drops the ones that are too old.
    """
    records = records_of(msg)
    if not records or records[0].timestamp is None:
        return False
    age_ms: float = time.time() * 1000 - float(records[0].timestamp)
    return age_ms > max_age_s * 1000


async def reply(broker: KafkaBroker, msg: KafkaMessage, event: Event) -> None:
    """Publish ``event`` to the request's ``reply_to`` topic with its correlation id."""
    if not msg.reply_to:
        log.warning("request without reply_to; reply dropped", extra={"correlation_id": msg.correlation_id})
        return
    await broker.publish(
        event,
        topic=msg.reply_to,
        key=msg.correlation_id.encode(),
        correlation_id=msg.correlation_id,
        headers=event_headers(event),
    )
