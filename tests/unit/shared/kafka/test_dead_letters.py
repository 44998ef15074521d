"""The dead-letter middleware, on FastStream's in-memory test broker (one handler at a time)."""

from __future__ import annotations

import json

import pytest
from faststream.kafka import TestKafkaBroker

from shared.events import DeadLetter, PmidDiscovered
from shared.kafka.broker import make_broker
from shared.kafka.context import KafkaMessage
from shared.kafka.errors import PoisonEvent, is_transient
from shared.kafka.retry import DeadLetterPolicy
from shared.settings import Settings


def broker_with(attempts: int = 3):  # type: ignore[no-untyped-def]
    settings = Settings()
    settings.kafka.max_delivery_attempts = attempts
    settings.kafka.retry_backoff_s = 0.0
    return make_broker("test", settings)


async def test_poison_event_goes_to_dlq_with_reason_and_consumer_moves_on() -> None:
    broker = broker_with()
    seen: list[str] = []
    letters: list[dict[str, object]] = []

    @broker.subscriber("pmids.discovered", group_id="g")
    async def handle(event: PmidDiscovered) -> None:
        seen.append(event.pmid)

    @broker.subscriber("pmids.discovered.dlq", group_id="d")
    async def dlq(body: dict[str, object]) -> None:
        letters.append(body)

    async with TestKafkaBroker(broker) as br:
        await br.publish(b"{not json", topic="pmids.discovered", key=b"pubmed:1")
        await br.publish({"pmid": "abc"}, topic="pmids.discovered", key=b"pubmed:2")
        await br.publish(PmidDiscovered(pmid="123"), topic="pmids.discovered", key=b"pubmed:123")
    assert seen == ["123"]
    assert len(letters) == 2
    first = DeadLetter.model_validate(letters[0])
    assert first.topic == "pmids.discovered"
    assert first.payload == "{not json"
    assert first.key == "pubmed:1"
    assert first.attempts == 1
    assert "pmid" in DeadLetter.model_validate(letters[1]).error


async def test_failing_handler_is_retried_then_dead_lettered() -> None:
    broker = broker_with(attempts=3)
    calls: list[int] = []
    letters: list[DeadLetter] = []

    @broker.subscriber("t", group_id="g")
    async def handle(msg: KafkaMessage) -> None:
        calls.append(1)
        raise RuntimeError("boom")

    @broker.subscriber("t.dlq", group_id="d")
    async def dlq(letter: DeadLetter) -> None:
        letters.append(letter)

    async with TestKafkaBroker(broker) as br:
        await br.publish({"x": 1}, topic="t")
    assert len(calls) == 3
    assert letters[0].attempts == 3
    assert letters[0].error_type == "RuntimeError"
    assert json.loads(letters[0].payload) == {"x": 1}


async def test_handler_that_recovers_is_not_dead_lettered() -> None:
    broker = broker_with(attempts=3)
    calls: list[int] = []
    letters: list[object] = []

    @broker.subscriber("t", group_id="g")
    async def handle(msg: KafkaMessage) -> None:
        calls.append(1)
        if len(calls) < 2:
            raise RuntimeError("flaky")

    @broker.subscriber("t.dlq", group_id="d")
    async def dlq(body: dict[str, object]) -> None:
        letters.append(body)

    async with TestKafkaBroker(broker) as br:
        await br.publish({"x": 1}, topic="t")
    assert len(calls) == 2
    assert letters == []


def test_transient_errors_are_told_from_poison() -> None:
    assert is_transient(ConnectionRefusedError())
    assert not is_transient(PoisonEvent("bad"))
    assert not is_transient(RuntimeError("bug"))
    assert DeadLetterPolicy("s", backoff_s=0.5).delay(3) == pytest.approx(2.0)


def test_requests_older_than_the_callers_timeout_are_stale() -> None:
    import time as _time
    from types import SimpleNamespace

    from aiokafka import ConsumerRecord

    from shared.kafka.reply_server import is_stale

    def message(age_s: float) -> SimpleNamespace:
        record = ConsumerRecord(
            "retrieval.requests", 0, 1, int((_time.time() - age_s) * 1000), 0, None, b"{}", None, 0, 2, []
        )
        return SimpleNamespace(raw_message=record)

    assert not is_stale(message(1.0), 30.0)  # type: ignore[arg-type]
    assert is_stale(message(45.0), 30.0)  # type: ignore[arg-type]
