"""The server's side of request/reply over Kafka: answering, showing progress, taking each request once.

A service that answers requests subscribes with :func:`request_subscriber_options`, answers with :func:`reply`,
keeps a slow caller from resending with :func:`progress_while`, and drops the copy of a request it already took
with :class:`RecentRequests`. :func:`is_stale` (run by the dead-letter policy) drops a request nobody waits for.
A handler whose work has a cost outside the process (a model bill) commits the request first with
:func:`acknowledge_receipt`.
The caller's side is :mod:`shared.kafka.reply_client`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

from aiokafka.errors import KafkaError
from faststream.kafka import KafkaBroker
from faststream.message import StreamMessage
from faststream.middlewares import AckPolicy

from shared.events import Event, RequestProgress
from shared.kafka.context import KafkaMessage
from shared.kafka.messages import event_headers, records_of
from shared.settings import KafkaSettings

log = logging.getLogger(__name__)


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

    A caller resends a request it heard nothing of (:meth:`shared.kafka.reply_client.ReplyClient.request`); if
    the copy reaches the process that is still working on (or has just answered) the first, :meth:`claim` says
    no and the copy is dropped, so a busy server never does the same request twice. A restarted process remembers
    nothing and answers the copy: that is what the resend is for.
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
    not skipped (requests older than the caller's timeout are dropped by
    :class:`shared.kafka.retry.DeadLetterPolicy`);
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


async def acknowledge_receipt(msg: KafkaMessage) -> bool:
    """Commit the request's offset now, before the handler starts work that must not run twice.

    Request subscribers acknowledge on receipt (:data:`AckPolicy.ACK_FIRST`), which in FastStream means the
    consumer's *auto-commit*: offsets go to Kafka in the background every ``auto_commit_interval_ms`` (5 s by
    default). An instance killed inside that window has taken the request without committing it, and when it
    restarts (static membership gives its partitions straight back) it reads the request again and, inside
    the caller's timeout, does the work twice: two model calls, two bills, for one question. This commits the
    consumed offsets of the consumer's partitions (every request it has taken so far, this one included, and
    never one it has only prefetched) and returns True once Kafka has them. If the commit fails (a rebalance
    in progress, the coordinator moving), the failure is logged and False returned: the request is still
    answered, the auto-commit covers it as before.
    """
    try:
        await msg.consumer.commit()
    except KafkaError as exc:
        log.warning(
            "request taken but its offset not committed; a restart within the auto-commit interval may take it again",
            extra={"correlation_id": msg.correlation_id, "error": repr(exc)},
        )
        return False
    return True


def is_stale(msg: KafkaMessage | StreamMessage[Any], max_age_s: float) -> bool:
    """A request older than its caller's timeout: nobody waits for the reply any more.

    Request subscribers read from the earliest offset when their group has none committed, so a request
    published while the group was still joining is not lost; this check (run by
    :class:`shared.kafka.retry.DeadLetterPolicy` for every message that carries a ``reply_to``) drops the ones
    that are too old.
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
