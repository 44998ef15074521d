"""The consumer middleware every service runs: retry a failing event, dead-letter one that cannot succeed.

:class:`DeadLetterPolicy` retries a failing event with a doubling back-off. A poison event (one that can never
succeed) or one whose handler failed ``max_delivery_attempts`` times goes to ``<topic>.dlq`` with the reason and
the consumer moves on. An outage (:func:`shared.kafka.errors.is_transient`) is retried without limit, with the
consumer's partitions paused (:class:`shared.kafka.pause.PartitionPause`): the event is not the problem, and
dead-lettering it would lose work. A request older than its caller's timeout is dropped before its handler runs.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from aiokafka import ConsumerRecord
from faststream import BaseMiddleware, ContextRepo
from faststream.kafka import KafkaBroker
from faststream.message import StreamMessage

from shared import metrics
from shared.kafka.dead_letters import publish_dead_letters
from shared.kafka.decoding import undecodable_reason
from shared.kafka.errors import POISON_ERRORS, PoisonEvent, is_transient
from shared.kafka.messages import body_trace_id, records_of
from shared.kafka.pause import PartitionPause
from shared.kafka.reply_server import is_stale
from shared.logs import trace_id_var

log = logging.getLogger(__name__)


class DeadLetterPolicy:
    """Middleware factory: ``KafkaBroker(middlewares=[DeadLetterPolicy(...)])``.

    With ``request_max_age_s``, a request (a message with a ``reply_to``) older than that is dropped before
    its handler runs: its caller has given up waiting (see :func:`shared.kafka.reply_server.is_stale`).
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

        The exponent is capped too: an outage may last thousands of attempts, and ``2 ** 1100`` does not fit a
        float.
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
            body_trace_id(records[0].value) if records and isinstance(records[0].value, bytes) else None
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
