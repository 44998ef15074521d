"""The caller's side of request/reply over Kafka: :class:`ReplyClient`.

FastStream's ``broker.request`` works only with its test client, so a request is published with ``reply_to``
and ``correlation_id`` headers, and the replies are read from a topic owned by this process instance, one queue
per correlation id. The server's side is :mod:`shared.kafka.reply_server`.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import AsyncIterator
from typing import TypeVar

from faststream.kafka import KafkaBroker
from pydantic import BaseModel

from shared import metrics
from shared.events import ErrorInfo, Event, RequestProgress
from shared.kafka.context import KafkaMessage
from shared.kafka.messages import EVENT_TYPE_HEADER, event_headers

log = logging.getLogger(__name__)

E = TypeVar("E", bound=BaseModel)

#: The reply-topic event type of :class:`RequestProgress`; ``_RESEND`` is internal to :class:`ReplyClient`.
PROGRESS_EVENT = RequestProgress.__name__
_RESEND = "\x00resend"


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
        tell whether the topic's owner is alive (:class:`shared.kafka.topic_admin.ReplyTopicSweeper`)."""
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
        that the server's staleness check (:func:`shared.kafka.reply_server.is_stale`) counts from it too.
        Otherwise the dead server's share of the budget (its silence, the group's rebalance) would leave the copy
        too little time to be answered. So a request ends within ``resend_after + timeout`` at most after the
        last sign of life. It is sent again once at most. A server that sends progress
        (:func:`shared.kafka.reply_server.progress_while`) is never resent to while it works, so a slow answer is
        not paid for twice; one that sends none is resent ``resend_after`` after the first publish.
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
