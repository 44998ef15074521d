"""Counting side effects in the integration tests: events on a topic, per key, with their time.

Primary keys hide duplicate work (a second ``INSERT ... ON CONFLICT`` changes nothing); the events a
service publishes do not: a chunk embedded twice is two ``chunks.embedded`` events.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from typing import TypeVar

from aiokafka import AIOKafkaConsumer, ConsumerRecord, TopicPartition

from shared.events import Event
from shared.kafka.decoding import decode
from shared.kafka.errors import PoisonEvent

E = TypeVar("E", bound=Event)


async def read_events(bootstrap: str, topic: str, model: type[E], keep: Callable[[E], bool]) -> list[tuple[E, int]]:
    """Every event of ``topic`` up to its current end that ``keep`` accepts, with its record timestamp."""
    consumer = AIOKafkaConsumer(
        topic, bootstrap_servers=bootstrap, enable_auto_commit=False, group_id=None, auto_offset_reset="earliest"
    )
    await consumer.start()  # subscribed without a group: every partition, from its beginning
    out: list[tuple[E, int]] = []

    def take(batch: dict[TopicPartition, list[ConsumerRecord[bytes, bytes]]]) -> None:
        for records in batch.values():
            for record in records:
                try:
                    event = decode(model, record.value or b"")
                except PoisonEvent:
                    continue  # the poison tests' records
                if keep(event):
                    out.append((event, int(record.timestamp)))

    try:
        partitions = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or [])]
        assert partitions, f"topic {topic} has no partitions"
        deadline = time.monotonic() + 120
        while set(consumer.assignment()) != set(partitions):
            assert time.monotonic() < deadline, f"never assigned {topic}"
            take(await consumer.getmany(timeout_ms=100))
        end = await consumer.end_offsets(partitions)

        async def behind() -> bool:
            return any([await consumer.position(tp) < end[tp] for tp in partitions])

        while await behind():
            assert time.monotonic() < deadline, f"could not read {topic} to its end"
            take(await consumer.getmany(timeout_ms=500))
        return out
    finally:
        await consumer.stop()


def per_key(events: list[tuple[E, int]], key: Callable[[E], str]) -> Counter[str]:
    return Counter(key(e) for e, _ in events)
