"""Issue #16 item 1: nothing is committed that was neither processed nor dead-lettered.

Dead letters are retried until Kafka has them (bounded, capped back-off), carry the original body once
(truncated with its hash beyond a size) with topic/partition/offset, and records that cannot even be
decoded (a header that is not UTF-8) are dead-lettered instead of skipped.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from typing import Any

import pytest
from aiokafka import ConsumerRecord, TopicPartition
from aiokafka.errors import KafkaTimeoutError
from faststream.kafka import TestKafkaBroker
from faststream.kafka.message import KafkaMessage as _Msg
from faststream.kafka.parser import AioKafkaParser

from shared.events import DeadLetter
from shared.kafka.context import KafkaMessage
from shared.kafka.dead_letters import make_letter
from shared.kafka.decoding import tolerant_parser, undecodable_reason
from shared.kafka.messages import UNDECODABLE_HEADER
from shared.kafka.pause import PartitionPause
from shared.kafka.retry import DeadLetterPolicy
from tests.unit.shared.kafka.test_dead_letters import broker_with


def record(value: bytes, headers: list[tuple[str, bytes]] | None = None, offset: int = 41) -> ConsumerRecord[Any, Any]:
    return ConsumerRecord("documents.fetched", 2, offset, 0, 0, b"pmc:PMC1", value, None, 8, len(value), headers or [])


def test_backoff_never_overflows_and_stays_capped() -> None:
    policy = DeadLetterPolicy("s", backoff_s=0.5, max_backoff_s=30.0)
    assert policy.delay(1) == pytest.approx(0.5)
    assert policy.delay(4) == pytest.approx(4.0)
    # ~1,000 infrastructure retries used to raise OverflowError (2 ** 1100 does not fit a float).
    for attempt in (1_000, 1_100, 50_000, 10**9):
        assert policy.delay(attempt) == pytest.approx(30.0)


async def test_dead_letter_is_retried_until_kafka_takes_it() -> None:
    broker = broker_with(attempts=1)
    letters: list[DeadLetter] = []
    failures = {"left": 3}
    original_publish = broker.publish

    async def flaky_publish(message: Any = None, topic: str = "", **kw: Any) -> Any:
        if topic.endswith(".dlq") and failures["left"] > 0:
            failures["left"] -= 1
            raise KafkaTimeoutError()
        return await original_publish(message, topic=topic, **kw)

    broker.publish = flaky_publish  # type: ignore[method-assign]

    @broker.subscriber("t", group_id="g")
    async def handle(msg: KafkaMessage) -> None:
        raise RuntimeError("boom")

    @broker.subscriber("t.dlq", group_id="d")
    async def dlq(msg: KafkaMessage) -> None:
        letters.append(DeadLetter.model_validate_json(msg.body))

    async with TestKafkaBroker(broker) as br:
        await br.publish({"x": 1}, topic="t")
    assert failures["left"] == 0, "the dead letter was given up on"
    assert len(letters) == 1
    assert letters[0].payload_json == {"x": 1}


async def test_event_is_not_finished_while_its_dead_letter_cannot_be_sent() -> None:
    """The handler call (after which FastStream commits the offset) does not return while the letter fails."""
    broker = broker_with(attempts=1)
    attempts = {"n": 0}
    retried = asyncio.Event()

    async def broken_publish(message: Any = None, topic: str = "", **kw: Any) -> Any:
        attempts["n"] += 1
        if attempts["n"] >= 2:
            retried.set()
        raise KafkaTimeoutError()

    @broker.subscriber("t", group_id="g")
    async def handle(msg: KafkaMessage) -> None:
        raise RuntimeError("boom")

    async with TestKafkaBroker(broker) as br:
        send = br.publish  # the test client runs the handler inside this call
        broker.publish = broken_publish  # type: ignore[method-assign]  # what the middleware sends letters with
        task = asyncio.create_task(send({"x": 1}, topic="t"))
        # Wait for the second try of the letter, not for a fixed time: on a busy machine 0.3 s once passed
        # before the handler had even run (0 attempts), which said nothing about the behaviour.
        await asyncio.wait_for(retried.wait(), timeout=30)
        assert not task.done(), "the event finished (and would be committed) without its dead letter"
        assert attempts["n"] >= 2
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


def test_letter_carries_json_once_with_where_it_came_from() -> None:
    content = '<article xmlns:x="u">"quoted" \\ text\n</article>' * 200
    body = json.dumps({"document_id": "pmc:PMC1", "content": content, "trace_id": "t" * 32}).encode()
    letter = make_letter(
        record(body, [("trace-id", b"abc")]),
        service="parser",
        exc=ValueError("bad"),
        attempts=3,
        max_payload_bytes=1 << 20,
    )
    wire = letter.wire()
    # Once: the JSON body is embedded as JSON, so its escaped quotes are not escaped a second time.
    assert wire.count(b'\\\\\\"') == 0
    assert len(wire) < len(body) + 1000
    back = DeadLetter.model_validate_json(wire)
    assert back.payload_json["content"] == content
    assert (back.topic, back.partition, back.offset, back.key) == ("documents.fetched", 2, 41, "pmc:PMC1")
    assert back.headers == {"trace-id": "abc"}
    assert back.trace_id == "t" * 32
    assert back.payload_sha256 == hashlib.sha256(body).hexdigest() and back.payload_bytes == len(body)
    assert json.loads(back.original() or b"") == json.loads(body)


def test_a_body_over_the_limit_is_cut_and_keeps_its_hash() -> None:
    body = json.dumps({"content": "x" * 50_000}).encode()
    letter = make_letter(record(body), service="parser", exc=ValueError("big"), attempts=1, max_payload_bytes=4096)
    assert letter.payload_truncated and len(letter.payload.encode()) == 4096
    assert letter.payload_bytes == len(body)
    assert letter.payload_sha256 == hashlib.sha256(body).hexdigest()
    assert letter.original() is None  # replay has to fetch the original from its topic
    assert len(letter.wire()) < 6000


def test_a_body_that_is_not_utf8_is_not_claimed_to_be_the_original() -> None:
    letter = make_letter(record(b"\xff\xfe{"), service="s", exc=ValueError("x"), attempts=1, max_payload_bytes=1024)
    assert not letter.payload_truncated
    assert letter.original() is None


async def test_a_header_that_is_not_utf8_marks_the_record_instead_of_failing_the_parser() -> None:
    parser = AioKafkaParser(_Msg, None)
    bad = record(b'{"pmid": "1"}', [("trace-id", b"\xff\xfeoops")])
    with pytest.raises(UnicodeDecodeError):
        await parser.parse_message(bad)  # what FastStream does alone: the record never reaches a middleware
    parsed = await tolerant_parser(bad, parser.parse_message)
    reason = undecodable_reason(parsed.raw_message)
    assert reason is not None and "trace-id" in reason and "UTF-8" in reason
    assert parsed.headers[UNDECODABLE_HEADER] == reason
    good = record(b"{}", [("trace-id", b"abc")])
    assert undecodable_reason((await tolerant_parser(good, parser.parse_message)).raw_message) is None


async def test_undecodable_record_is_dead_lettered_not_handled() -> None:
    broker = broker_with()
    seen: list[bytes] = []
    letters: list[DeadLetter] = []

    @broker.subscriber("t", group_id="g")
    async def handle(msg: KafkaMessage) -> None:
        seen.append(msg.body)

    @broker.subscriber("t.dlq", group_id="d")
    async def dlq(msg: KafkaMessage) -> None:
        letters.append(DeadLetter.model_validate_json(msg.body))

    async with TestKafkaBroker(broker) as br:
        await br.publish(b'{"a": 1}', topic="t", headers={UNDECODABLE_HEADER: "header 'x' is not UTF-8"})
        await br.publish(b'{"a": 2}', topic="t")
    assert seen == [b'{"a": 2}']
    assert len(letters) == 1 and letters[0].error_type == "PoisonEvent" and "not UTF-8" in letters[0].error


class FakeConsumer:
    """Just enough of AIOKafkaConsumer to watch PartitionPause."""

    def __init__(self) -> None:
        self.assigned = {TopicPartition("t", 0), TopicPartition("t", 1)}
        self.paused_now: set[TopicPartition] = set()
        self.polls = 0
        self.seeks: list[tuple[TopicPartition, int]] = []
        self.late = TopicPartition("t", 2)

    def assignment(self) -> set[TopicPartition]:
        return set(self.assigned)

    def pause(self, *tps: TopicPartition) -> None:
        self.paused_now |= set(tps)

    def resume(self, *tps: TopicPartition) -> None:
        self.paused_now -= set(tps)

    def seek(self, tp: TopicPartition, offset: int) -> None:
        self.seeks.append((tp, offset))

    async def getmany(self, *tps: TopicPartition, timeout_ms: int = 0, max_records: int | None = None) -> Any:
        self.polls += 1
        assert self.paused_now >= {TopicPartition("t", 0), TopicPartition("t", 1)}
        await asyncio.sleep(timeout_ms / 1000)
        if self.polls == 1:  # a partition assigned by a rebalance between pause and poll delivers a record
            self.assigned.add(self.late)
            return {self.late: [record(b"{}", offset=7)]}
        return {}


async def test_waiting_to_retry_pauses_the_partitions_and_keeps_polling() -> None:
    consumer = FakeConsumer()
    pause = PartitionPause(consumer)
    await pause.wait(2.2)
    assert consumer.polls >= 3, "the wait must keep polling, or Kafka takes the partitions away"
    assert consumer.seeks == [(consumer.late, 7)], "a record polled during the wait must be put back"
    assert consumer.late in consumer.paused_now
    pause.resume()
    assert consumer.paused_now == set()
